//go:build unix

package main

import (
	"fmt"
	"runtime"
	"time"

	"github.com/spf13/cobra"
)

// benchSpareConns are the connections bench needs besides one per
// goroutine or worker.
const benchSpareConns = 10

// maxBenchConcurrency bounds --goroutines and --workers. Each needs a
// connection (a worker, a pub/sub one besides): more than some thousands
// pass Redis's default maxclients (10000), and a mistyped count must not
// start that many goroutines.
const maxBenchConcurrency = 1000

// minBenchDuration is the shortest --duration: enough for some pairs and
// hand-overs on any Redis worth measuring.
const minBenchDuration = 100 * time.Millisecond

// benchFlags are the flags of `dlock bench`.
type benchFlags struct {
	goroutines int
	workers    int
	hold       time.Duration
	duration   time.Duration
	private    bool
	asJSON     bool
}

// benchReport is what `dlock bench --json` prints.
type benchReport struct {
	Redis       string             `json:"redis"`
	Server      string             `json:"server_version"`
	CPUs        int                `json:"cpus"`
	Uncontended *uncontendedResult `json:"uncontended,omitempty"`
	Contended   *contendedResult   `json:"contended,omitempty"`
}

func (a *app) benchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure dlock on a Redis server: uncontended and contended locking",
		Long: `Bench measures dlock itself on the configured Redis server (or, with
--private, on a redis-server it starts on a free loopback port):

  uncontended  --goroutines goroutines, each locking and unlocking its own key
               in a loop: pairs per second, latency of a pair, and Redis
               commands per pair;
  contended    --workers workers (one dlock Client each, like separate
               processes) taking turns on one key and holding it for --hold:
               acquisitions per second, wait time, hand-over gap (release to
               the next holder running), fairness (fewest and most
               acquisitions per worker), Redis commands per acquisition, and
               a mutual-exclusion check.

Redis commands are counted with INFO commandstats, including those the scripts
run; other clients of the same server inflate them. Set --goroutines or
--workers to 0 to skip a scenario. The exit status is 1 if two workers ever
held the lock at once. Competing libraries are compared by the bench/ module
of the dlock repository.`,
		Example: `  dlock bench --redis redis://localhost:6379
  dlock bench --private --workers 64 --duration 10s --json`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case f.goroutines < 0 || f.workers < 0:
				return usagef("--goroutines and --workers must not be negative")
			case f.goroutines == 0 && f.workers == 0:
				return usagef("nothing to measure: --goroutines and --workers are both 0")
			case f.goroutines > maxBenchConcurrency:
				return usagef("--goroutines %d: at most %d (each holds a connection to Redis)", f.goroutines, maxBenchConcurrency)
			case f.workers > maxBenchConcurrency:
				return usagef("--workers %d: at most %d (each holds connections to Redis)", f.workers, maxBenchConcurrency)
			case f.duration < minBenchDuration:
				// Shorter, a scenario ends before its first pair or
				// hand-over, and the figures are zeros.
				return usagef("--duration %v: at least %v", f.duration, minBenchDuration)
			case f.hold < 0:
				return usagef("--hold %v: must not be negative", f.hold)
			case f.workers > 0 && f.hold >= f.duration:
				// Else the first holder outlasts the run, which then lasts
				// the hold and measures no hand-over.
				return usagef("--hold %v: must be shorter than --duration %v", f.hold, f.duration)
			case f.private && (a.conn.url != "" || len(a.conn.cluster) > 0 || a.conn.sentinelMaster != ""):
				// Flags only: --private overrides $DLOCK_REDIS_URL.
				return usagef("--private starts its own server: drop --redis, --sentinel and --cluster")
			}
			return a.printing(func() error { return a.bench(f) })
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&f.goroutines, "goroutines", 32, fmt.Sprintf("uncontended: goroutines, each on its own key (0 skips; at most %d)", maxBenchConcurrency))
	fs.IntVar(&f.workers, "workers", 16, fmt.Sprintf("contended: workers on one key (0 skips; at most %d)", maxBenchConcurrency))
	fs.DurationVar(&f.hold, "hold", time.Millisecond, "contended: time spent holding the lock")
	fs.DurationVar(&f.duration, "duration", 3*time.Second, "how long each scenario runs (at least 100ms)")
	fs.BoolVar(&f.private, "private", false, "start a private redis-server from $PATH for the run")
	fs.BoolVar(&f.asJSON, "json", false, "print the results as JSON")
	return cmd
}

func (a *app) bench(f benchFlags) error {
	ctx, stop := interruptContext()
	defer stop()
	if f.private {
		srv, err := startPrivateServer(ctx, "drop --private and point dlock at a running server with --redis URL")
		if err != nil {
			return startError(ctx, err, "bench")
		}
		defer srv.Stop()
		a.conn.url = srv.URL()
	}
	a.conn.poolSize = max(f.goroutines, f.workers) + benchSpareConns
	c, err := a.connect(ctx, "dlock bench")
	if err != nil {
		return startError(ctx, err, "bench")
	}
	defer c.Close()
	b := &bencher{app: a, f: f, c: c, name: "bench-" + randomHex(4)}
	defer b.cleanup()

	r := benchReport{Redis: c.desc, Server: serverVersion(ctx, c), CPUs: runtime.NumCPU()}
	if !f.asJSON {
		fmt.Fprintf(a.stdout, "dlock bench: Redis %s at %s, %d CPUs, %v per scenario\n", r.Server, r.Redis, r.CPUs, f.duration)
		fmt.Fprintln(a.stdout, "(Redis commands counted with INFO commandstats, including those scripts run; other clients inflate them)")
	}
	if f.goroutines > 0 {
		if r.Uncontended, err = b.uncontended(ctx); err != nil || ctx.Err() != nil {
			return b.fail(ctx, err)
		}
		if !f.asJSON {
			r.Uncontended.print(a.stdout)
		}
	}
	if f.workers > 0 {
		if r.Contended, err = b.contended(ctx); err != nil || ctx.Err() != nil {
			return b.fail(ctx, err)
		}
		if !f.asJSON {
			r.Contended.print(a.stdout)
		}
	}
	if f.asJSON {
		if err := writeJSON(a.stdout, r); err != nil {
			return err
		}
	}
	if r.Contended != nil && r.Contended.Overlaps > 0 {
		return exitf(exitFailure, "bench: two workers held the lock at once %d times", r.Contended.Overlaps)
	}
	return nil
}
