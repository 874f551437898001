package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/tcpproxy"
	"github.com/dlock-go/dlock/internal/testutil"
)

// adminServer starts a server of the test's own (list must see only the
// test's locks) and a library Client on it named "admin-test".
func adminServer(t *testing.T) (url string, c *dlock.Client) {
	t.Helper()
	url, c, _ = adminServerAndConn(t)
	return url, c
}

// adminServerAndConn is adminServer, with a go-redis client of the
// server's for the test's own commands.
func adminServerAndConn(t *testing.T) (url string, c *dlock.Client, rdb *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	rdb = srv.Client(t)
	c, err := dlock.New(rdb, dlock.WithClientName("admin-test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return redisURL(srv.Addr()), c, rdb
}

func TestInspect(t *testing.T) {
	t.Parallel()
	url, c := adminServer(t)
	l, err := c.Lock(context.Background(), "orders:42", dlock.WithMetadata("job 7"))
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()

	r := dlockRun(t, nil, "--redis", url, "inspect", "orders:42").want(t, 0)
	for _, want := range []string{
		"key       orders:42",
		"state     held",
		"holder    pid " + strconv.Itoa(os.Getpid()) + " on " + host + ` (admin-test: "job 7")`,
		"fence     " + strconv.FormatUint(l.Fence(), 10),
		"holds     1",
		"owner     " + l.Token(),
		"waiters   0",
		"lease     ",
		"acquired  ",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, r.stdout)
		}
	}

	r = dlockRun(t, nil, "--redis", url, "inspect", "--json", "orders:42").want(t, 0)
	var info dlock.LockInfo
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, r.stdout)
	}
	if !info.Held || info.Fence != l.Fence() || info.Owner != l.Token() || info.HoldCount != 1 ||
		info.Holder.PID != os.Getpid() || info.Holder.Data != "job 7" || info.Holder.Client != "admin-test" ||
		info.TTL <= 0 || info.TTL > dlock.DefaultTTL || time.Since(info.AcquiredAt) > time.Minute {
		t.Errorf("inspect --json: %+v", info)
	}

	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	r = dlockRun(t, nil, "--redis", url, "inspect", "orders:42").want(t, 0)
	if !strings.Contains(r.stdout, "state     free") || !strings.Contains(r.stdout, strconv.FormatUint(l.Fence(), 10)+" (the last one issued)") {
		t.Errorf("inspect of a free lock:\n%s", r.stdout)
	}
	r = dlockRun(t, nil, "--redis", url, "inspect", "--json", "never-taken").want(t, 0)
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || info.Held || info.Key != "never-taken" {
		t.Errorf("inspect --json of a free lock: %v %+v", err, info)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	url, c := adminServer(t)
	for _, k := range []string{"b:2", "a", "b:1"} {
		if _, err := c.Lock(context.Background(), k); err != nil {
			t.Fatal(err)
		}
	}
	r := dlockRun(t, nil, "--redis", url, "list").want(t, 0)
	if got := lines(r.stdout); !slices.Equal(got, []string{"a", "b:1", "b:2"}) {
		t.Errorf("list: %q", got)
	}
	r = dlockRun(t, nil, "--redis", url, "list", "b:*").want(t, 0)
	if got := lines(r.stdout); !slices.Equal(got, []string{"b:1", "b:2"}) {
		t.Errorf("list b:*: %q", got)
	}
	r = dlockRun(t, nil, "--redis", url, "list", "--json", "b:*").want(t, 0)
	var names []string
	if err := json.Unmarshal([]byte(r.stdout), &names); err != nil || !slices.Equal(names, []string{"b:1", "b:2"}) {
		t.Errorf("list --json: %v %q", err, r.stdout)
	}
	r = dlockRun(t, nil, "--redis", url, "list", "--json", "nothing*").want(t, 0)
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("list --json of no locks: %q", r.stdout)
	}
	r = dlockRun(t, nil, "--redis", url, "list", "--long", "a").want(t, 0)
	if got := lines(r.stdout); len(got) != 2 || !strings.HasPrefix(got[0], "KEY") || !strings.Contains(got[1], "admin-test") {
		t.Errorf("list --long:\n%s", r.stdout)
	}
	r = dlockRun(t, nil, "--redis", url, "list", "--long", "--json").want(t, 0)
	var infos []dlock.LockInfo
	if err := json.Unmarshal([]byte(r.stdout), &infos); err != nil || len(infos) != 3 || !infos[0].Held {
		t.Errorf("list --long --json: %v\n%s", err, r.stdout)
	}
	// Another prefix sees none of them.
	r = dlockRun(t, nil, "--redis", url, "--prefix", "other:", "list").want(t, 0)
	if r.stdout != "" {
		t.Errorf("list --prefix other: %q", r.stdout)
	}
}

// TestReleaseForce removes a lock held by a `dlock run` process while
// another `dlock run` waits: the waiter gets the lock and runs, and the
// holder learns it lost the lock.
func TestReleaseForce(t *testing.T) {
	t.Parallel()
	url, c := adminServer(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	env := baseEnv("LOG=" + log)
	holder := start(t, env, "--redis", url, "--ttl", "600ms", "run", "--meta", "the holder", "stuck", "--",
		"sh", "-c", `echo holder >> "$LOG"; sleep 1000`)
	waitUntil(t, 10*time.Second, "the holder to run", func() bool { return fileText(log) == "holder\n" })
	waiter := start(t, env, "--redis", url, "run", "stuck", "--", "sh", "-c", `echo waiter >> "$LOG"`)
	waitUntil(t, 10*time.Second, "the waiter to queue", func() bool { return inspect(t, c, "stuck").Waiters == 1 })
	before := inspect(t, c, "stuck")

	r := dlockRun(t, nil, "--redis", url, "release", "stuck").want(t, exitUsage)
	if !strings.Contains(r.stderr, "--force") {
		t.Errorf("release without --force: %q", r.stderr)
	}
	r = dlockRun(t, nil, "--redis", url, "release", "--force", "stuck").want(t, 0)
	for _, want := range []string{
		`released lock "stuck"; it was:`,
		"state     held",
		`(dlock run: "the holder")`,
		"fence     " + strconv.FormatUint(before.Fence, 10),
		"owner     " + before.Owner,
		"the first of 1 waiters has been handed the lock",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("release output lacks %q:\n%s", want, r.stdout)
		}
	}
	checkHandedOver(t, holder, waiter, log)

	r = dlockRun(t, nil, "--redis", url, "release", "--force", "stuck").want(t, exitFailure)
	if got := lines(r.stderr); len(got) != 1 || got[0] != `dlock: lock "stuck" is not held; nothing was removed` {
		t.Errorf("release of a free lock: %q", r.stderr)
	}

	l, err := c.Lock(context.Background(), "stuck", dlock.WithMetadata("json"))
	if err != nil {
		t.Fatal(err)
	}
	r = dlockRun(t, nil, "--redis", url, "release", "--force", "--json", "stuck").want(t, 0)
	var rep releaseReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("release --json: %v\n%s", err, r.stdout)
	}
	if !rep.Released || rep.Lock == nil || !rep.Lock.Held || rep.Lock.Fence != l.Fence() || rep.Lock.Holder.Data != "json" {
		t.Errorf("release --json: %+v", rep)
	}
	if info := inspect(t, c, "stuck"); info.Held {
		t.Errorf("still held after release --force: %+v", info)
	}
}

// startFrozenOn starts dlock with args on srv through a proxy that
// freezes at the first bytes, either way, that contain match, and returns
// once it has (what names that moment), with the proxy to thaw.
func startFrozenOn(t *testing.T, srv *redistest.Server, match, what string, args ...string) (*proc, *tcpproxy.Proxy) {
	t.Helper()
	proxy, err := tcpproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	frozen := proxy.FreezeOn(func(b []byte) bool { return bytes.Contains(b, []byte(match)) })
	p := start(t, nil, append([]string{"--redis", redisURL(proxy.Addr())}, args...)...)
	testutil.Receive(t, frozen, processTimeout, what)
	return p, proxy
}

// TestReleaseForceChangedHands: release --force removes the holder it read
// and prints, or nothing. Here the lock changes hands between the two: the
// proxy holds back the reply that shows the old holder while that one
// releases and a new one takes the lock. The new holder keeps it, and dlock
// says that nothing was removed, with status 1.
func TestReleaseForceChangedHands(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := lockClient(t, srv.Addr())
	ctx := context.Background()
	old, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	p, proxy := startFrozenOn(t, srv, old.Token(), "release --force to read the lock", "release", "--force", "k")
	if err := old.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	taker, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	proxy.Thaw()

	if code := p.wait(t); code != exitFailure {
		t.Errorf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitFailure, p.stdout.String(), p.stderr.String())
	}
	if got := lines(p.stderr.String()); len(got) != 1 || !strings.Contains(got[0], "nothing was removed") || !strings.Contains(got[0], old.Token()) {
		t.Errorf("stderr %q: want one line saying the holder read is gone and nothing was removed", p.stderr.String())
	}
	if strings.Contains(p.stdout.String(), "released") {
		t.Errorf("stdout says a lock was released:\n%s", p.stdout.String())
	}
	if info := inspect(t, c, "k"); !info.Held || info.Owner != taker.Token() {
		t.Errorf("the new holder lost the lock: %+v", info)
	}
}

// list --long leaves out a lock released between the SCAN that found its
// name and the read of its state: the proxy holds back the SCAN's reply
// while the holder releases it.
func TestListLongLeavesOutALockReleasedSinceScan(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := lockClient(t, srv.Addr())
	ctx := context.Background()
	gone, err := c.Lock(ctx, "gone-since-scan")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lock(ctx, "kept"); err != nil {
		t.Fatal(err)
	}
	p, proxy := startFrozenOn(t, srv, "{gone-since-scan}", "list --long to scan the lock", "list", "--long")
	if err := gone.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.Thaw()

	if code := p.wait(t); code != 0 {
		t.Fatalf("exit status %d\nstderr:\n%s", code, p.stderr.String())
	}
	if got := lines(p.stdout.String()); len(got) != 2 || !strings.HasPrefix(got[1], "kept ") {
		t.Errorf("list --long: want the header and the lock still held only:\n%s", p.stdout.String())
	}
}

// TestReleaseForcePermitsGoneSinceRead is TestReleaseForceChangedHands for
// a semaphore's holder: its permits, given back between the read and the
// removal, are not said to be removed (status 1), and whoever took them
// since keeps them.
func TestReleaseForcePermitsGoneSinceRead(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := lockClient(t, srv.Addr())
	ctx := context.Background()
	old, err := c.Semaphore("enc", 1).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	p, proxy := startFrozenOn(t, srv, old.Token(), "release --force to read the semaphore",
		"release", "--force", "--capacity", "1", "--owner", old.Token(), "enc")
	if err := old.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	taker, err := c.Semaphore("enc", 1).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Thaw()

	if code := p.wait(t); code != exitFailure {
		t.Errorf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitFailure, p.stdout.String(), p.stderr.String())
	}
	if got := lines(p.stderr.String()); len(got) != 1 || !strings.Contains(got[0], "is no longer held by owner "+old.Token()) {
		t.Errorf("stderr %q: want one line saying the holder read is gone and nothing was removed", p.stderr.String())
	}
	if strings.Contains(p.stdout.String(), "released") {
		t.Errorf("stdout says permits were released:\n%s", p.stdout.String())
	}
	if info := semInspect(t, c, "enc", 1); len(info.Holders) != 1 || info.Holders[0].Owner != taker.Token() {
		t.Errorf("the new holder lost its permits: %+v", info)
	}
}

// Output that cannot be written (a full disk) is a failure, 1 ("anything
// else"), also for the commands that print as they go (bench, demo): not
// 64, which means usage ("bad flag, duration or URL, missing --"), nor
// success, which a script would take for a complete output.
func TestOutputWriteErrorFails(t *testing.T) {
	t.Parallel()
	url, c := adminServer(t)
	if _, err := c.Lock(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--redis", url, "inspect", "--json", "k"},
		{"--redis", url, "inspect", "k"},
		{"--redis", url, "inspect", "--capacity", "2", "k"},
		{"--redis", url, "list", "--json"},
		{"--redis", url, "list"},
		{"--redis", url, "list", "--long"},
		{"version"},
		// What cobra prints itself.
		{"--version"},
		{"--help"},
		{"help"},
		{"help", "run"},
		{"run", "--help"},
		{"completion", "bash"},
		{"--redis", url, "bench", "--duration", "100ms", "--goroutines", "1", "--workers", "0"},
		{"--redis", url, "bench", "--duration", "100ms", "--goroutines", "0", "--workers", "2", "--json"},
		{"--redis", url, "demo", "--workers", "2", "--increments", "1", "--lease", "100ms"},
		{"--redis", url, "release", "--force", "k"}, // last: it removes k
	} {
		full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd := exec.Command(dlockBin, args...)
		cmd.Env, cmd.Stdout, cmd.Stderr = baseEnv(), full, &stderr
		err = cmd.Run()
		full.Close()
		if code := cmd.ProcessState.ExitCode(); code != exitFailure || !strings.Contains(stderr.String(), "dlock: writing the output: ") {
			t.Errorf("dlock %s > /dev/full: exit status %d (%v), want %d and the write error\nstderr: %s", strings.Join(args, " "), code, err, exitFailure, stderr.String())
		}
	}
}

// A hash at a lock's name that is not a lock (no ':fence'): inspect says
// wrong type (as release --force does), and list --long does not show it
// as a held lock.
func TestAdminHashThatIsNotALock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := redisURL(srv.Addr())
	if err := srv.Client(t).HSet(context.Background(), "dlock:{foreign}", "user", "alice").Err(); err != nil {
		t.Fatal(err)
	}
	dlockRun(t, nil, "--redis", url, "inspect", "foreign").want(t, exitFailure)
	r := dlockRun(t, nil, "--redis", url, "list", "--long").want(t, 0)
	if strings.Contains(r.stdout, "foreign") {
		t.Errorf("list --long shows a hash that is not a lock:\n%s", r.stdout)
	}
}

// checkHandedOver waits for the dlock run processes of a force release:
// the holder, which must have exited for its lost lock, and the waiter,
// which ran its command after it (as log shows) and exited 0.
func checkHandedOver(t *testing.T, holder, waiter *proc, log string) {
	t.Helper()
	if code := waiter.wait(t); code != 0 {
		t.Fatalf("waiter: exit status %d\n%s", code, waiter.stderr.String())
	}
	if code := holder.wait(t); code != exitLockLost {
		t.Fatalf("holder: exit status %d, want %d\n%s", code, exitLockLost, holder.stderr.String())
	}
	if got := fileText(log); got != "holder\nwaiter\n" {
		t.Errorf("log %q", got)
	}
}

// Other code's data at a held lock's fence counter, queue or waiters name
// does not hide the lock: list --long shows it and names the trouble on
// stderr (status 1), inspect prints it (status 1), and release --force
// removes it, leaving the other code's data as it was.
func TestAdminForeignDataAtLockNames(t *testing.T) {
	t.Parallel()
	url, c, rdb := adminServerAndConn(t)
	ctx := context.Background()
	for _, name := range []string{"fence", "queue", "waiters"} {
		l, err := c.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		other := "dlock:{" + name + "}:" + name
		// A list, which neither a fence counter (a string) nor the queue
		// (a sorted set) nor the waiters (a hash) can be read as.
		if err := rdb.Del(ctx, other).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.RPush(ctx, other, "other data").Err(); err != nil {
			t.Fatal(err)
		}

		// Inspect reads no queue: other data there is for the lock's
		// waiters to meet, not for the operator's reads.
		wantCode, wantErr := exitFailure, "wrong type"
		if name == "queue" {
			wantCode, wantErr = 0, ""
		}
		reported := func(what string, r result) {
			t.Helper()
			if r.code != wantCode || !strings.Contains(r.stderr, wantErr) || wantErr != "" && !strings.Contains(r.stderr, `"`+name+`"`) {
				t.Errorf("%s: %s: status %d, stderr %q; want %d and %q", name, what, r.code, r.stderr, wantCode, wantErr)
			}
		}
		r := dlockRun(t, nil, "--redis", url, "list", "--long", name)
		if got := lines(r.stdout); len(got) != 2 || !strings.HasPrefix(got[1], name+" ") {
			t.Errorf("%s: list --long does not show the lock:\n%s\nstderr: %s", name, r.stdout, r.stderr)
		}
		reported("list --long", r)
		r = dlockRun(t, nil, "--redis", url, "list", "--long", "--json", name)
		var infos []dlock.LockInfo
		if err := json.Unmarshal([]byte(r.stdout), &infos); err != nil || len(infos) != 1 || infos[0].Owner != l.Token() {
			t.Errorf("%s: list --long --json: %v\n%s", name, err, r.stdout)
		}
		reported("list --long --json", r)
		r = dlockRun(t, nil, "--redis", url, "inspect", name)
		if !strings.Contains(r.stdout, "owner     "+l.Token()) {
			t.Errorf("%s: inspect does not show the holder:\n%s", name, r.stdout)
		}
		reported("inspect", r)
		r = dlockRun(t, nil, "--redis", url, "run", "--no-wait", name, "--", "true")
		if r.code != exitNotObtained || !strings.Contains(r.stderr, "is held by ") {
			t.Errorf("%s: run --no-wait: status %d, stderr %q; want %d, naming the holder", name, r.code, r.stderr, exitNotObtained)
		}
		r = dlockRun(t, nil, "--redis", url, "release", "--force", name)
		if r.code != 0 || !strings.Contains(r.stdout, "owner     "+l.Token()) {
			t.Errorf("%s: release --force: status %d\nstdout:\n%s\nstderr: %s", name, r.code, r.stdout, r.stderr)
		}
		if wantErr != "" && (!strings.Contains(r.stderr, `force release "`+name+`"`) || strings.Contains(r.stderr, "inspect")) {
			t.Errorf("%s: release --force does not name the release in its note: %q", name, r.stderr)
		}
		if rdb.Exists(ctx, "dlock:{"+name+"}").Val() != 0 {
			t.Errorf("%s: the lock is still there after release --force", name)
		}
		if got := rdb.LRange(ctx, other, 0, -1).Val(); !slices.Equal(got, []string{"other data"}) {
			t.Errorf("%s: the other code's data is now %q", name, got)
		}
	}
}

// TestListLongBoundsEachRequest: list --long of a large or distant keyspace
// takes long in all, each request answered in time. Its deadline bounds
// each request, not the listing: here two of the inspections are held back
// most of the way to adminTimeout each, over adminTimeout in all (the URL's
// read_timeout lets go-redis wait for them), and the listing completes.
func TestListLongBoundsEachRequest(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := lockClient(t, srv.Addr())
	for _, k := range []string{"a", "b", "c"} {
		if _, err := c.Lock(context.Background(), k, dlock.WithTTL(5*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	proxy, err := tcpproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	inspection := func(b []byte) bool { return bytes.Contains(b, []byte("evalsha")) }
	read := proxy.FreezeOn(inspection)

	url := redisURL(proxy.Addr()) + "?read_timeout=" + (2 * adminTimeout).String()
	p := start(t, nil, "--redis", url, "list", "--long")
	hold := adminTimeout * 3 / 5
	for i := range 2 {
		select {
		case <-read:
		case <-time.After(processTimeout):
			t.Fatalf("list --long sent no inspection\nstderr:\n%s", p.stderr.String())
		}
		<-time.After(hold) // a slow round trip, not a wait for an event
		if i == 0 {
			read = proxy.FreezeOn(inspection) // the next one, not the chunk held
		}
		proxy.Thaw()
	}
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit status %d after %v held back, each request within %v: want 0\nstderr:\n%s", code, 2*hold, adminTimeout, p.stderr.String())
	}
	if got := len(lines(p.stdout.String())); got != 4 {
		t.Errorf("list --long: want a header and 3 locks\n%s", p.stdout.String())
	}
}

// TestAdminRequestsEndOnAHungServer: a request that Redis never answers
// ends at its deadline (adminTimeout) with status 69, even when the URL's
// read_timeout would let go-redis wait longer (here none at all): for a
// lock's inspect, release --force, list and shell completion, and for
// list on a Cluster whose master hangs as SCAN reaches it.
func TestAdminRequestsEndOnAHungServer(t *testing.T) {
	t.Parallel()
	// Long enough for the deadline, short of go test's own timeout.
	const limit = adminTimeout + processTimeout
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		// hungURL is the URL of a proxy to srv that freezes once dlock has
		// connected (the PING has a bound of its own), at SCAN or a script.
		hungURL := func(t *testing.T) string {
			proxy, err := tcpproxy.New(srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = proxy.Close() })
			proxy.FreezeOn(func(b []byte) bool {
				return bytes.Contains(bytes.ToLower(b), []byte("scan")) || bytes.Contains(bytes.ToLower(b), []byte("evalsha"))
			})
			return redisURL(proxy.Addr()) + "?read_timeout=-1"
		}
		for _, args := range [][]string{{"list"}, {"inspect", "hung"}, {"release", "--force", "hung"}} {
			t.Run(args[0], func(t *testing.T) {
				t.Parallel()
				p := start(t, nil, append([]string{"--redis", hungURL(t)}, args...)...)
				if code := p.waitUpTo(t, limit); code != exitUnavailable {
					t.Errorf("exit status %d, want %d\nstderr:\n%s", code, exitUnavailable, p.stderr.String())
				}
			})
		}
		// Shell completion offers no name, within completeTimeout.
		t.Run("completion", func(t *testing.T) {
			t.Parallel()
			p := start(t, nil, "__complete", "--redis", hungURL(t), "inspect", "")
			if code := p.waitUpTo(t, processTimeout); code != exitOK || !slices.Equal(lines(p.stdout.String()), []string{":4"}) {
				t.Errorf("exit status %d, want 0 and no name\nstdout:\n%s", code, p.stdout.String())
			}
		})
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t, 3)
		hung := cl.Nodes[len(cl.Nodes)-1]
		hung.Pause(t)
		t.Cleanup(func() { hung.Resume(t) })
		// The PING that connects goes to a master picked at random: once it
		// has found one that answers, it is SCAN that meets the hung one.
		// Before it, the slot map reload of go-redis's ForEachMaster asks
		// the nodes in random order, and may ask the hung one first: two
		// requests, each ending at its bound.
		for range 20 {
			p := start(t, nil, "--cluster", cl.Nodes[0].Addr(), "--redis", "redis://?read_timeout=-1", "list")
			code := p.waitUpTo(t, limit+adminTimeout)
			if code == exitUnavailable && strings.Contains(p.stderr.String(), "cannot reach Redis") {
				continue
			}
			if code != exitUnavailable || !strings.Contains(p.stderr.String(), "dlock: list: ") {
				t.Errorf("exit status %d, want %d from the listing\nstderr:\n%s", code, exitUnavailable, p.stderr.String())
			}
			return
		}
		t.Fatal("list never got past connecting")
	})
}

// A lock hash without an expiry (made by hand, or by a broken client)
// never frees itself: inspect and list --long say so, not "0s" of lease
// left, which reads as a lock about to be free.
func TestAdminLockWithoutExpiry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := redisURL(srv.Addr())
	if err := srv.Client(t).HSet(context.Background(), "dlock:{no-expiry}", ":fence", "7", "0123abcd", "1").Err(); err != nil {
		t.Fatal(err)
	}
	r := dlockRun(t, nil, "--redis", url, "inspect", "no-expiry").want(t, 0)
	if !strings.Contains(r.stdout, "lease     no expiry: it never frees itself") || strings.Contains(r.stdout, "0s") {
		t.Errorf("inspect of a lock without expiry:\n%s", r.stdout)
	}
	r = dlockRun(t, nil, "--redis", url, "list", "--long").want(t, 0)
	if got := lines(r.stdout); len(got) != 2 || !strings.HasPrefix(got[1], "no-expiry  no expiry  ") {
		t.Errorf("list --long of a lock without expiry:\n%s", r.stdout)
	}
	r = dlockRun(t, nil, "--redis", url, "run", "--no-wait", "no-expiry", "--", "true").want(t, exitNotObtained)
	if !strings.Contains(r.stderr, "(fence 7, no expiry: it never frees itself)") {
		t.Errorf("run --no-wait on a lock without expiry:\n%s", r.stderr)
	}
}
