package redisserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/internal/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func redisServer(t *testing.T) string {
	t.Helper()
	bin, err := FindBinary("redis-server", SystemDirs()...)
	if err != nil {
		t.Fatalf("%v: install it with `apt-get install redis-server`", err)
	}
	return bin
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Start(ctx, redisServer(t), Options{Args: []string{"--maxclients", "1234"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop) // if the test fails first; the second Stop does nothing
	if s.URL() != "redis://"+s.Addr() || !strings.HasPrefix(s.Addr(), "127.0.0.1:") || s.Port() == 0 {
		t.Fatalf("Addr %q, Port %d, URL %q", s.Addr(), s.Port(), s.URL())
	}
	opts, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer func() { _ = rdb.Close() }()
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil || !strings.Contains(info, "process_id:") {
		t.Fatalf("INFO server = %q, %v", info, err)
	}
	for param, want := range map[string]string{"save": "", "appendonly": "no", "maxclients": "1234", "bind": "127.0.0.1"} {
		got, err := rdb.ConfigGet(ctx, param).Result()
		if err != nil || got[param] != want {
			t.Errorf("CONFIG GET %s = %v, %v; want %q", param, got, err, want)
		}
	}
	dir := s.dir
	s.Stop()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory %s left behind: %v", dir, err)
	}
	if conn, err := net.Dial("tcp", s.Addr()); err == nil {
		_ = conn.Close()
		t.Error("the server still accepts connections after Stop")
	}
}

// countingServer returns a script that runs redis-server with its
// arguments, followed by extra if it is the first run, and a function that
// reports how many times the script has run.
func countingServer(t *testing.T, extra ...string) (bin string, runs func() int) {
	t.Helper()
	dir := t.TempDir()
	count := filepath.Join(dir, "runs")
	bin = filepath.Join(dir, "redis-server")
	script := fmt.Sprintf("#!/bin/sh\nfirst=\nif [ ! -e %[1]s ]; then first=1; fi\necho run >> %[1]s\n"+
		"if [ -n \"$first\" ]; then exec %[2]s \"$@\" %[3]s; fi\nexec %[2]s \"$@\"\n",
		shellQuote(count), shellQuote(redisServer(t)), strings.Join(extra, " "))
	testutil.WriteScript(t, bin, script)
	return bin, func() int {
		b, err := os.ReadFile(count)
		if errors.Is(err, os.ErrNotExist) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), "run\n")
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func TestStartFailureQuotesLog(t *testing.T) {
	t.Parallel()
	bin, runs := countingServer(t)
	_, err := Start(context.Background(), bin, Options{Args: []string{"--no-such-directive", "1"}})
	if err == nil || !strings.Contains(err.Error(), "exited at once") || !strings.Contains(err.Error(), "no-such-directive") {
		t.Fatalf("Start error = %v; want the exit and the log line about the bad directive", err)
	}
	if n := runs(); n != 1 {
		t.Errorf("redis-server ran %d times; want once: only a taken port is worth another try", n)
	}
}

// A server that finds its port taken makes Start try another port, and the
// error of the first attempt does not leak into the log of the second.
func TestStartRetriesTakenPort(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	// The first run listens on the taken port instead (the last --port wins).
	bin, runs := countingServer(t, "--port", strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	s, err := Start(context.Background(), bin, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	if n := runs(); n != 2 {
		t.Errorf("redis-server ran %d times; want twice", n)
	}
	b, err := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "Address already in use") {
		t.Errorf("the log of the second attempt holds the first one's error:\n%s", b)
	}
}

func TestStartPassword(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Start(ctx, redisServer(t), Options{Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	anon := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer func() { _ = anon.Close() }()
	if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("PING without the password = %v; want NOAUTH", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: "s3cret"})
	defer func() { _ = rdb.Close() }()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Errorf("PING with the password: %v", err)
	}
}

func TestStartCanceled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	bin, runs := countingServer(t)
	if _, err := Start(ctx, bin, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start error = %v; want %v", err, context.Canceled)
	}
	if n := runs(); n != 0 {
		t.Errorf("redis-server ran %d times under a canceled context; want never", n)
	}
}

func TestFindBinary(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", t.TempDir())
	if _, err := FindBinary("redis-server"); err == nil || err.Error() != "redis-server not found in $PATH" {
		t.Errorf("FindBinary without dirs: error = %v", err)
	}
	if _, err := FindBinary("redis-server", dir, "/nowhere"); err == nil ||
		err.Error() != "redis-server not found in $PATH or "+dir+", /nowhere" {
		t.Errorf("FindBinary with dirs: error = %v", err)
	}
	// Not executable: skipped.
	p := filepath.Join(dir, "redis-server")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := FindBinary("redis-server", dir); err == nil {
		t.Errorf("FindBinary found non-executable %s", got)
	}
	if err := os.Chmod(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := FindBinary("redis-server", "/nowhere", dir); err != nil || got != p {
		t.Errorf("FindBinary = %q, %v; want %q", got, err, p)
	}
}
