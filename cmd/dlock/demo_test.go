package main

import (
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// TestDemo runs `dlock demo` end to end with its private redis-server and
// checks the report's key lines.
func TestDemo(t *testing.T) {
	t.Parallel()
	r := dlockRun(t, nil, "demo").want(t, 0)
	for _, want := range []string{
		"(a private redis-server, stopped at the end)",
		"counter     200, expected 200: exact",
		"overlaps    none",
		"hand-overs  ",
		"latency     from a release to the next holder running: p50 ",
		"got the lock when A's lease ran out",
		"B writes    accepted",
		"that it lost the lock: lock lost",
		"A writes    REJECTED: its fence ",
		`resource    "written by B"`,
		"All checks passed.",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("demo report lacks %q:\n%s", want, r.stdout)
		}
	}
	if r.stderr != "" {
		t.Errorf("stderr: %s", r.stderr)
	}
	// The private server is gone.
	m := regexp.MustCompile(`at (127\.0\.0\.1:\d+) \(a private`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("no server address in the report:\n%s", r.stdout)
	}
	if c, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
		c.Close()
		t.Errorf("the private server at %s still answers", m[1])
	}
}

// TestDemoOnGivenServer runs a small demo on a server the user names: it
// uses it, and leaves no key behind.
func TestDemoOnGivenServer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	r := dlockRun(t, nil, "--redis", redisURL(srv.Addr()), "demo", "--workers", "2", "--increments", "10", "--lease", "200ms").want(t, 0)
	if !strings.Contains(r.stdout, "counter     20, expected 20: exact") || !strings.Contains(r.stdout, "REJECTED") ||
		!strings.Contains(r.stdout, "at "+srv.Addr()+"\n") {
		t.Errorf("demo report:\n%s", r.stdout)
	}
	if keys := srv.Client(t).Keys(t.Context(), "*").Val(); len(keys) != 0 {
		t.Errorf("the demo left keys behind: %q", keys)
	}
}

// TestDemoWithoutRedisServer: with no redis-server in $PATH the demo says
// how to install it.
func TestDemoWithoutRedisServer(t *testing.T) {
	t.Parallel()
	env := baseEnv("PATH=" + t.TempDir())
	r := dlockRun(t, env, "demo").want(t, exitUnavailable)
	if got := lines(r.stderr); len(got) != 1 || !strings.Contains(got[0], "redis-server not found in $PATH") ||
		!strings.Contains(got[0], "install-redis.sh") || !strings.Contains(got[0], "--redis URL") {
		t.Errorf("stderr: %q", r.stderr)
	}
}

// `demo --lease` takes any lease of at least 100ms. One the library
// refuses (over 24h) must be a usage error before anything runs, not a
// failed worker half-way through the demo; a long one that it accepts must
// not make the demo give up on worker B, who waits that long for the lock.
func TestDemoLongLease(t *testing.T) {
	t.Parallel()
	t.Run("over 24h", func(t *testing.T) {
		t.Parallel()
		r := dlockRun(t, nil, "--redis", sharedURL(), "demo", "--workers", "2", "--increments", "1", "--lease", "25h").want(t, exitUsage)
		if r.stdout != "" {
			t.Errorf("demo --lease 25h ran before failing:\n%s\nstderr: %s", r.stdout, r.stderr)
		}
	})
	t.Run("31s", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		r := dlockRun(t, nil, "--redis", redisURL(srv.Addr()), "demo", "--workers", "2", "--increments", "1", "--lease", "31s").want(t, 0)
		if !strings.Contains(r.stdout, "All checks passed.") {
			t.Errorf("demo --lease 31s:\n%s", r.stdout)
		}
	})
}

// Redis going away in the middle of the demo is exit status 69, as for any
// command, not 1 (a failed check): a worker that fails on Redis exits 69
// and the demo passes it on.
func TestDemoRedisGoneExitsUnavailable(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	// Increments enough that the counter scene runs until the server stops.
	p := start(t, nil, "--redis", redisURL(srv.Addr()), "demo", "--workers", "2", "--increments", "10000000")
	waitUntil(t, 30*time.Second, "the counter workers to run", func() bool {
		return len(rdb.Keys(t.Context(), "dlock-demo-*:count-unlocked").Val()) == 1
	})
	srv.Stop(t)
	code := p.wait(t)
	if got := lines(p.stderr.String()); code != exitUnavailable || len(got) != 1 || !strings.Contains(got[0], "connection refused") {
		t.Errorf("exit status %d, want %d, and one line naming the Redis error\nstderr: %s", code, exitUnavailable, p.stderr.String())
	}
}
