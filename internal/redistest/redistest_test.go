package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStandaloneSetGetKillRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := Start(t)
	if !s.Running() || s.PID() == 0 {
		t.Fatalf("server not running after Start: running=%v pid=%d", s.Running(), s.PID())
	}
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || s.Port() == 0 {
		t.Fatalf("unexpected address %q", s.Addr())
	}
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v; want v", got, err)
	}

	port, pid := s.Port(), s.PID()
	s.Kill(t)
	if s.Running() {
		t.Fatal("Running after Kill")
	}
	s.Kill(t) // idempotent
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded on a killed server")
	}

	s.Restart(t)
	if s.Port() != port {
		t.Fatalf("Restart changed port: %d -> %d", port, s.Port())
	}
	if s.PID() == pid || !s.Running() {
		t.Fatalf("Restart: pid %d -> %d, running=%v", pid, s.PID(), s.Running())
	}
	// No persistence by default: the key is gone. The client reconnects.
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after restart without persistence: %v; want redis.Nil", err)
	}

	s.Stop(t)
	s.Stop(t) // idempotent
	if s.Running() {
		t.Fatal("Running after Stop")
	}
}

func TestRestartWithPersistenceKeepsData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := Start(t, WithConfig("appendonly", "yes"), WithConfig("appendfsync", "always"))
	c := s.Client(t)
	if err := c.Set(ctx, "k", "durable", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	s.Kill(t) // a crash: appendfsync always has already written the key
	s.Restart(t)
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "durable" {
		t.Fatalf("GET after crash+restart = %q, %v; want durable", got, err)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	s.Pause(t)
	if !s.Running() || !s.Paused() {
		t.Fatalf("after Pause: running=%v paused=%v", s.Running(), s.Paused())
	}
	err := c.Ping(ctx).Err()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("PING on paused server: %v; want timeout", err)
	}
	s.Resume(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
	// Stop must work on a paused server too (it resumes it first).
	s.Pause(t)
	s.Stop(t)
	if s.Running() || s.Paused() {
		t.Fatalf("after Stop: running=%v paused=%v", s.Running(), s.Paused())
	}
}

func TestReapAfterShutdown(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t)
	// SHUTDOWN closes the connection, so an error is expected here.
	_ = c.Shutdown(context.Background()).Err()
	s.Reap(t)
	if s.Running() {
		t.Fatal("Running after SHUTDOWN + Reap")
	}
}

func TestWithConfigApplied(t *testing.T) {
	t.Parallel()
	s := Start(t, WithConfig("maxmemory-policy", "allkeys-lru"), WithConfig("save", "3600", "1"))
	c := s.Client(t)
	got, err := c.ConfigGet(context.Background(), "maxmemory-policy").Result()
	if err != nil || got["maxmemory-policy"] != "allkeys-lru" {
		t.Fatalf("CONFIG GET maxmemory-policy = %v, %v", got, err)
	}
	got, err = c.ConfigGet(context.Background(), "save").Result()
	if err != nil || got["save"] != "3600 1" {
		t.Fatalf("CONFIG GET save = %v, %v", got, err)
	}
}

func TestFindBinaryMissingHint(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := findBinary("redis-server", []string{t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "apt-get install redis-server") {
		t.Fatalf("findBinary error = %v; want install hint", err)
	}
}

func TestQuoteArg(t *testing.T) {
	for in, want := range map[string]string{
		"yes":     "yes",
		"":        `""`,
		"/a b/c":  `"/a b/c"`,
		`x"y\z`:   `"x\"y\\z"`,
		"3600 1 ": `"3600 1 "`,
	} {
		if got := quoteArg(in); got != want {
			t.Errorf("quoteArg(%q) = %s; want %s", in, got, want)
		}
	}
}

func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := StartSentinelGroup(t, 1, 3)
	if len(g.Replicas) != 1 || len(g.Sentinels) != 3 || g.Quorum != 2 {
		t.Fatalf("group shape: %d replicas, %d sentinels, quorum %d", len(g.Replicas), len(g.Sentinels), g.Quorum)
	}
	fc := g.FailoverClient(t)
	if err := fc.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatalf("SET via failover client: %v", err)
	}
	// WAIT makes sure the replica has the write before the crash.
	if n, err := fc.Wait(ctx, 1, time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT = %d, %v", n, err)
	}

	oldAddr := g.Master.Addr()
	start := time.Now()
	g.Master.Kill(t)
	newAddr := g.WaitForFailover(t, oldAddr, 30*time.Second)
	t.Logf("failover took %v", time.Since(start))
	if newAddr != g.Replicas[0].Addr() {
		t.Fatalf("new master %s; want replica %s", newAddr, g.Replicas[0].Addr())
	}
	if g.ServerByAddr(newAddr) != g.Replicas[0] {
		t.Fatal("ServerByAddr did not find the replica")
	}

	// The failover client must find the new master by itself.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := fc.Set(ctx, "k", "after", 0).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SET via failover client after failover: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got, err := g.Replicas[0].Client(t).Get(ctx, "k").Result(); err != nil || got != "after" {
		t.Fatalf("GET on new master = %q, %v", got, err)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := StartCluster(t, 3)
	if len(c.Addrs()) != 3 {
		t.Fatalf("Addrs = %v", c.Addrs())
	}
	cc := c.Client(t)
	const n = 1000
	for i := 0; i < n; i++ {
		if err := cc.Set(ctx, fmt.Sprintf("key:%d", i), i, 0).Err(); err != nil {
			t.Fatalf("SET key:%d: %v", i, err)
		}
	}
	for i := 0; i < n; i += 97 {
		if got, err := cc.Get(ctx, fmt.Sprintf("key:%d", i)).Int(); err != nil || got != i {
			t.Fatalf("GET key:%d = %d, %v", i, got, err)
		}
	}
	total := int64(0)
	for _, node := range c.Nodes {
		size, err := node.Client(t).DBSize(ctx).Result()
		if err != nil {
			t.Fatalf("DBSIZE on %s: %v", node.Addr(), err)
		}
		if size == 0 {
			t.Errorf("node %s holds no keys; keys should spread across slots", node.Addr())
		}
		total += size
	}
	if total != n {
		t.Fatalf("keys across nodes = %d; want %d", total, n)
	}
}

// TestNoProcessLeftBehind checks that cleanup kills the processes: the PIDs
// recorded in a subtest must be gone once the subtest has returned.
func TestNoProcessLeftBehind(t *testing.T) {
	t.Parallel()
	var pids []int
	t.Run("inner", func(t *testing.T) {
		s := Start(t)
		pids = append(pids, s.PID())
	})
	for _, pid := range pids {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			t.Errorf("process %d still exists after cleanup", pid)
		}
	}
}

// TestPortInUseDetected checks that a bind failure is recognised, which is
// what makes Start retry on another port.
func TestPortInUseDetected(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	port := l.Addr().(*net.TCPAddr).Port

	dir := t.TempDir()
	s := &Server{bin: BinaryPath(t), dir: dir, confPath: dir + "/redis.conf", logPath: dir + "/redis.log", port: port}
	t.Cleanup(func() { s.cleanup(t) })
	if err := s.writeConfig(port); err != nil {
		t.Fatal(err)
	}
	err = s.launch(true)
	if !errors.Is(err, errPortInUse) {
		t.Fatalf("launch on a taken port: %v; want errPortInUse", err)
	}
}
