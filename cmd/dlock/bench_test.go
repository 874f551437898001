//go:build unix

package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

func TestBench(t *testing.T) {
	t.Parallel()
	// Long enough for every worker to get turns even on a loaded machine,
	// where setting up four Clients' subscriptions takes a while.
	r := dlockRun(t, nil, "--redis", sharedURL(), "bench", "--duration", "1s", "--goroutines", "4", "--workers", "4", "--json").want(t, 0)
	var rep benchReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, r.stdout)
	}
	u, c := rep.Uncontended, rep.Contended
	if u == nil || c == nil {
		t.Fatalf("bench --json: %s", r.stdout)
	}
	if u.Pairs == 0 || u.PairsPerSecond <= 0 || u.LatencyP50 <= 0 || u.LatencyMax < u.LatencyP99 || u.CommandsPerPair <= 0 || u.ScriptsPerPair < 1 {
		t.Errorf("uncontended: %+v", u)
	}
	if c.Acquisitions == 0 || c.Overlaps != 0 || c.MinPerWorker == 0 || c.WaitMax < c.WaitP50 || c.CommandsPerAcq <= 0 || c.HandoverP50 <= 0 {
		t.Errorf("contended: %+v", c)
	}

	r = dlockRun(t, nil, "--redis", sharedURL(), "bench", "--duration", "100ms", "--goroutines", "0", "--workers", "2").want(t, 0)
	for _, want := range []string{"contended: 2 workers on one key", "acquisitions/s", "never held by two workers at once", "FIFO bound: (workers-1)/rate = "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("bench report lacks %q:\n%s", want, r.stdout)
		}
	}
	// One worker waits for nobody and hands over to nobody.
	r = dlockRun(t, nil, "--redis", sharedURL(), "bench", "--duration", "100ms", "--goroutines", "0", "--workers", "1").want(t, 0)
	if !strings.Contains(r.stdout, "hand-over        none") || strings.Contains(r.stdout, "FIFO") {
		t.Errorf("bench report with one worker:\n%s", r.stdout)
	}
	dlockRun(t, nil, "bench", "--goroutines", "0", "--workers", "0").want(t, exitUsage)
}

// --private starts a server of bench's own: a $DLOCK_REDIS_URL in the
// environment (the README's way to set a default server) is no --redis
// flag, and must not make it a usage error.
func TestBenchPrivateWithRedisURLInEnvironment(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	r := dlockRun(t, baseEnv(envRedisURL+"="+redisURL(srv.Addr())),
		"bench", "--private", "--duration", "100ms", "--goroutines", "1", "--workers", "0").want(t, 0)
	if !strings.Contains(r.stdout, "uncontended: 1 goroutines") || strings.Contains(r.stdout, srv.Addr()) {
		t.Errorf("bench --private report:\n%s", r.stdout)
	}
}

// bench --private with no redis-server in $PATH says how to install it,
// and that a running server needs --private dropped: --redis with
// --private is refused.
func TestBenchPrivateWithoutRedisServer(t *testing.T) {
	t.Parallel()
	r := dlockRun(t, baseEnv("PATH="+t.TempDir()), "bench", "--private").want(t, exitUnavailable)
	if got := lines(r.stderr); len(got) != 1 || !strings.Contains(got[0], "redis-server not found in $PATH") ||
		!strings.Contains(got[0], "install-redis.sh") || !strings.Contains(got[0], "drop --private and point dlock at a running server with --redis URL") {
		t.Errorf("stderr: %q", r.stderr)
	}
}

// Redis going away while the goroutines run fails each of them: bench
// says so once, not once per goroutine, with status 69.
func TestBenchRedisGoneSaysItOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	p := start(t, nil, "--redis", redisURL(srv.Addr()), "bench", "--duration", "30s", "--goroutines", "8", "--workers", "0")
	waitUntil(t, 10*time.Second, "the last goroutine to lock", func() bool {
		keys, _ := rdb.Keys(context.Background(), "*:u:7}:fence").Result()
		return len(keys) > 0
	})
	srv.Kill(t)
	if code := p.wait(t); code != exitUnavailable {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitUnavailable, p.stderr.String())
	}
	got := lines(p.stderr.String())
	if len(got) != 1 || strings.Count(got[0], "bench-") > 1 {
		t.Errorf("stderr: want one error, got:\n%s", p.stderr.String())
	}
}

// The percentiles bench and demo print are nearest-rank: the smallest
// value that at least p percent of the sample is at or below. A p99 one
// rank lower leaves more than 1 percent above it.
func TestPercentileIsNearestRank(t *testing.T) {
	for _, n := range []int{1, 2, 3, 10, 60, 99, 100, 101, 170, 1234} {
		for _, p := range []int{50, 99} {
			d := make(durations, n)
			for i := range d {
				d[i] = time.Duration(n - i) // 1..n, reversed: pct sorts
			}
			rank := (p*n + 99) / 100 // the smallest k with k >= p% of n
			if got := d.pct(float64(p)); got != time.Duration(rank) {
				t.Errorf("p%d of 1..%d = %d, want %d", p, n, got, rank)
			}
		}
	}
}
