//go:build unix

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// maxDemoWorkers bounds --workers: each is a process of its own, and a
// mistyped count must not start thousands of them.
const maxDemoWorkers = 64

// demoFlags are the flags of `dlock demo`.
type demoFlags struct {
	workers    int
	increments int
	lease      time.Duration
}

func (a *app) demoCmd() *cobra.Command {
	var f demoFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show the lock at work with real processes, and print a short report",
		Long: `Demo shows, with real worker processes (this binary, started several times):

  1. mutual exclusion: workers add 1 to a shared Redis counter with a plain GET
     then SET under one lock, and the total is exact (without the lock, updates
     are lost);
  2. waiters woken on release: each release hands the lock to the next waiter
     in line and wakes that one alone; the report shows the hand-over latency;
  3. a holder frozen (SIGSTOP) past its lease learning that it lost the lock,
     while another worker takes it;
  4. fencing: the frozen holder's late write carries an old fencing token and
     the guarded resource rejects it.

With no --redis (nor $DLOCK_REDIS_URL, --sentinel or --cluster) it starts a
private redis-server from $PATH on a free loopback port and stops it at the
end. On your own server it uses keys under a random demo name and deletes them.
The exit status is 0 if every check passed, 1 if one failed, 69 if Redis
cannot be reached or failed meanwhile, or redis-server is missing.`,
		Example: `  dlock demo
  dlock demo --workers 8 --increments 100
  dlock demo --redis redis://localhost:6379/15`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.workers < 2 || f.increments < 1 {
				return usagef("demo needs --workers >= 2 and --increments >= 1")
			}
			if f.workers > maxDemoWorkers {
				return usagef("--workers %d: at most %d (each is a process)", f.workers, maxDemoWorkers)
			}
			if f.lease < 100*time.Millisecond || f.lease > dlock.MaxTTL {
				return usagef("--lease %v: must be between 100ms and %v", f.lease, dlock.MaxTTL)
			}
			return a.printing(func() error { return a.demo(f) })
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&f.workers, "workers", 4, fmt.Sprintf("worker processes sharing the counter (2 to %d)", maxDemoWorkers))
	fs.IntVar(&f.increments, "increments", 50, "increments per worker")
	fs.DurationVar(&f.lease, "lease", time.Second, "lease of the holder that gets frozen")
	return cmd
}

// demo is one run of `dlock demo`.
type demo struct {
	*app
	f        demoFlags
	c        *conn
	exe      string
	env      []string // the workers' environment
	connArgs []string // the workers' connection flags
	name     string   // random, so that runs on a shared server do not meet
	procs    []*workerProc
	failed   []string // checks that failed
}

func (a *app) demo(f demoFlags) error {
	ctx, stop := interruptContext()
	defer stop()
	exe, err := executable()
	if err != nil {
		return err
	}
	where := ""
	if !a.conn.configured() {
		srv, err := startPrivateServer(ctx, "point dlock at a running server with --redis URL")
		if err != nil {
			return startError(ctx, err, "demo")
		}
		defer srv.Stop()
		a.conn.url = srv.URL()
		where = " (a private redis-server, stopped at the end)"
	}
	c, err := a.connect(ctx, "dlock demo")
	if err != nil {
		return startError(ctx, err, "demo")
	}
	defer c.Close()
	d := &demo{app: a, f: f, c: c, exe: exe, name: "demo-" + randomHex(4)}
	d.env = os.Environ()
	if raw := a.conn.rawURL(); raw != "" {
		d.env = append(d.env, envRedisURL+"="+raw) // not on the command line, where ps shows it
	}
	d.connArgs = []string{"--prefix", a.conn.prefix}
	if len(a.conn.cluster) > 0 {
		d.connArgs = append(d.connArgs, "--cluster", strings.Join(a.conn.cluster, ","))
	}
	if a.conn.sentinelMaster != "" {
		d.connArgs = append(d.connArgs, "--sentinel-master", a.conn.sentinelMaster, "--sentinel", strings.Join(a.conn.sentinels, ","))
	}
	defer d.cleanup()

	fmt.Fprintf(a.stdout, "dlock demo: Redis %s at %s%s\n", serverVersion(ctx, c), c.desc, where)
	if err := d.counterScene(ctx); err != nil {
		return d.abort(ctx, err)
	}
	if err := d.frozenScene(ctx); err != nil {
		return d.abort(ctx, err)
	}
	fmt.Fprintln(a.stdout)
	if len(d.failed) > 0 {
		fmt.Fprintf(a.stdout, "FAILED: %s\n", strings.Join(d.failed, "; "))
		return exitf(exitFailure, "demo: %d check(s) failed", len(d.failed))
	}
	fmt.Fprintln(a.stdout, "All checks passed.")
	return nil
}

// check records a failed check.
func (d *demo) check(ok bool, what string) {
	if !ok {
		d.failed = append(d.failed, what)
	}
}

// abort turns an error that stopped the demo into its exit error.
func (d *demo) abort(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return interrupted(context.Cause(ctx), "demo")
	}
	if _, ok := err.(*exitError); ok {
		return err
	}
	return exitf(exitFailure, "demo: %v", err)
}

// cleanup stops every worker still running and deletes the demo's keys.
func (d *demo) cleanup() {
	for _, w := range d.procs {
		w.kill()
	}
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	for _, k := range d.dataKeys() {
		_ = d.c.rdb.Del(ctx, k).Err()
	}
	for _, k := range []string{d.lockName("counter"), d.lockName("fenced")} {
		// The fence counter outlives its lock, by design, and expires 24
		// hours after its creation; an interrupted demo leaves the lock a
		// killed worker held, and the queue. They are named as documented
		// in the README ("How it works").
		base := d.conn.prefix + "{" + k + "}" // k never starts with '}'
		_ = d.c.rdb.Del(ctx, base+":fence").Err()
		_ = d.c.rdb.Del(ctx, base, base+":queue", base+":waiters").Err() // one slot: one command
	}
}

func (d *demo) lockName(what string) string { return d.name + ":" + what }

func (d *demo) dataKey(what string) string { return "dlock-" + d.name + ":" + what }

func (d *demo) dataKeys() []string {
	return []string{d.dataKey("count"), d.dataKey("count-unlocked"), d.dataKey("resource")}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// serverVersion returns redis_version from INFO, or "?".
func serverVersion(ctx context.Context, c *conn) string {
	info, err := c.rdb.Info(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}
