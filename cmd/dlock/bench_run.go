//go:build unix

package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// bencher is one run of `dlock bench`.
type bencher struct {
	*app
	f    benchFlags
	c    *conn
	name string // random, so that runs on a shared server do not meet
}

// uncontendedResult is the uncontended scenario's outcome.
type uncontendedResult struct {
	Goroutines      int           `json:"goroutines"`
	Pairs           int64         `json:"pairs"`
	PairsPerSecond  float64       `json:"pairs_per_second"`
	LatencyP50      time.Duration `json:"latency_p50_ns"`
	LatencyP99      time.Duration `json:"latency_p99_ns"`
	LatencyMax      time.Duration `json:"latency_max_ns"`
	CommandsPerPair float64       `json:"commands_per_pair"`
	ScriptsPerPair  float64       `json:"scripts_per_pair"`
}

// contendedResult is the contended scenario's outcome.
type contendedResult struct {
	Workers        int           `json:"workers"`
	Hold           time.Duration `json:"hold_ns"`
	Acquisitions   int64         `json:"acquisitions"`
	PerSecond      float64       `json:"acquisitions_per_second"`
	WaitP50        time.Duration `json:"wait_p50_ns"`
	WaitP99        time.Duration `json:"wait_p99_ns"`
	WaitMax        time.Duration `json:"wait_max_ns"`
	HandoverP50    time.Duration `json:"handover_p50_ns"`
	HandoverP99    time.Duration `json:"handover_p99_ns"`
	MinPerWorker   int64         `json:"min_per_worker"`
	MaxPerWorker   int64         `json:"max_per_worker"`
	CommandsPerAcq float64       `json:"commands_per_acquisition"`
	ScriptsPerAcq  float64       `json:"scripts_per_acquisition"`
	Overlaps       int64         `json:"overlaps"` // times two workers held the lock at once
}

// fail turns an error that stopped the bench into its exit error.
func (b *bencher) fail(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return interrupted(context.Cause(ctx), "bench")
	}
	return redisFailure(err)
}

// warmUp takes and releases key once, so that script loading is not measured.
func (b *bencher) warmUp(ctx context.Context, locks *dlock.Client, key string) error {
	l, err := locks.Lock(ctx, key, dlock.WithTTL(b.conn.ttl))
	if err != nil {
		return err
	}
	return unlock(ctx, l)
}

func (b *bencher) uncontendedKey(i int) string { return fmt.Sprintf("%s:u:%d", b.name, i) }

func (b *bencher) contendedKey() string { return b.name + ":c" }

// uncontended runs --goroutines goroutines, each locking and unlocking its
// own key until --duration has passed.
func (b *bencher) uncontended(ctx context.Context) (*uncontendedResult, error) {
	n := b.f.goroutines
	if err := b.warmUp(ctx, b.c.locks, b.uncontendedKey(0)); err != nil {
		return nil, err
	}
	before, err := readCommandCounts(ctx, b.c.rdb)
	if err != nil {
		return nil, err
	}
	lat := make([]durations, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(b.f.duration)
	for i := range n {
		wg.Go(func() {
			key := b.uncontendedKey(i)
			for time.Now().Before(deadline) {
				t := time.Now()
				l, err := b.c.locks.Lock(ctx, key, dlock.WithTTL(b.conn.ttl))
				if err == nil {
					err = unlock(ctx, l)
				}
				if err != nil {
					errs[i] = err
					return
				}
				lat[i] = append(lat[i], time.Since(t))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := firstError(errs, "goroutines"); err != nil {
		return nil, err
	}
	after, err := readCommandCounts(ctx, b.c.rdb)
	if err != nil {
		return nil, err
	}
	var all durations
	for _, l := range lat {
		all = append(all, l...)
	}
	pairs := int64(len(all))
	commands, scripts := after.since(before)
	return &uncontendedResult{
		Goroutines:      n,
		Pairs:           pairs,
		PairsPerSecond:  float64(pairs) / elapsed.Seconds(),
		LatencyP50:      all.pct(50),
		LatencyP99:      all.pct(99),
		LatencyMax:      all.max(),
		CommandsPerPair: perOp(commands, pairs),
		ScriptsPerPair:  perOp(scripts, pairs),
	}, nil
}

// contended runs --workers workers, each with its own dlock Client (as
// separate processes would have), taking turns on one key and holding it
// for --hold, until --duration has passed.
func (b *bencher) contended(ctx context.Context) (*contendedResult, error) {
	n := b.f.workers
	key := b.contendedKey()
	clients := make([]*dlock.Client, n)
	for i := range clients {
		cl, err := dlock.New(b.c.rdb, dlock.WithPrefix(b.conn.prefix), dlock.WithClientName(fmt.Sprintf("dlock bench worker %d", i)), dlock.WithLogger(b.log))
		if err != nil {
			return nil, err
		}
		defer func() { _ = cl.Close() }()
		clients[i] = cl
	}
	if err := b.warmUp(ctx, clients[0], key); err != nil {
		return nil, err
	}
	before, err := readCommandCounts(ctx, b.c.rdb)
	if err != nil {
		return nil, err
	}

	var inside, overlaps atomic.Int64
	var lastWorker atomic.Int64 // who released last, -1 before anyone
	var lastRelease atomic.Int64
	lastWorker.Store(-1)
	waits := make([]durations, n)
	gaps := make([]durations, n)
	counts := make([]int64, n)
	errs := make([]error, n)
	start := time.Now()
	runCtx, cancel := context.WithDeadline(ctx, start.Add(b.f.duration))
	defer cancel()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for runCtx.Err() == nil {
				t := time.Now()
				l, err := clients[i].Lock(runCtx, key, dlock.WithTTL(b.conn.ttl))
				if err != nil {
					if runCtx.Err() == nil || ctx.Err() != nil {
						errs[i] = err
					}
					return
				}
				got := time.Now()
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				waits[i] = append(waits[i], got.Sub(t))
				if w := lastWorker.Load(); w >= 0 && w != int64(i) {
					gaps[i] = append(gaps[i], got.Sub(start)-time.Duration(lastRelease.Load()))
				}
				holdFor(ctx, b.f.hold) // the critical section's work
				lastWorker.Store(int64(i))
				lastRelease.Store(int64(time.Since(start)))
				inside.Add(-1)
				if err := unlock(ctx, l); err != nil {
					errs[i] = err
					return
				}
				counts[i]++
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := firstError(errs, "workers"); err != nil {
		return nil, err
	}
	after, err := readCommandCounts(ctx, b.c.rdb)
	if err != nil {
		return nil, err
	}
	var allWaits, allGaps durations
	var total int64
	minW, maxW := counts[0], counts[0]
	for i := range n {
		allWaits = append(allWaits, waits[i]...)
		allGaps = append(allGaps, gaps[i]...)
		total += counts[i]
		minW, maxW = min(minW, counts[i]), max(maxW, counts[i])
	}
	commands, scripts := after.since(before)
	return &contendedResult{
		Workers:        n,
		Hold:           b.f.hold,
		Acquisitions:   total,
		PerSecond:      float64(total) / elapsed.Seconds(),
		WaitP50:        allWaits.pct(50),
		WaitP99:        allWaits.pct(99),
		WaitMax:        allWaits.max(),
		HandoverP50:    allGaps.pct(50),
		HandoverP99:    allGaps.pct(99),
		MinPerWorker:   minW,
		MaxPerWorker:   maxW,
		CommandsPerAcq: perOp(commands, total),
		ScriptsPerAcq:  perOp(scripts, total),
		Overlaps:       overlaps.Load(),
	}, nil
}

// holdFor waits for d, the critical section's work, or until ctx ends (the
// bench was interrupted): a long --hold must not delay the Ctrl-C.
func holdFor(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// unlock releases l even if ctx has ended (the bench was interrupted):
// else the lock would stay held for a whole --ttl.
func unlock(ctx context.Context, l *dlock.Lock) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	return l.Unlock(ctx)
}

// firstError is the first of errs, the errors of the goroutines or workers
// (what), with how many of them failed: when Redis goes away, every one
// fails alike, and one error says it.
func firstError(errs []error, what string) error {
	var first error
	failed := 0
	for _, err := range errs {
		if err != nil {
			if first == nil {
				first = err
			}
			failed++
		}
	}
	if failed > 1 {
		return fmt.Errorf("%w (%d of the %d %s failed)", first, failed, len(errs), what)
	}
	return first
}

func perOp(n, ops int64) float64 {
	if ops == 0 {
		return 0
	}
	return float64(n) / float64(ops)
}

// cleanup deletes the fence counters the bench left (they outlive their
// locks by design, and expire 24 hours after their creation; their names
// are documented in the README). They are deleted in one pipeline (a
// request per node), within releaseTimeout as the locks are released: one
// round trip per key, each waiting out the read timeout and its retries,
// would keep an interrupted bench on a hung Redis for most of a minute.
func (b *bencher) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	keys := []string{b.contendedKey()}
	for i := range b.f.goroutines {
		keys = append(keys, b.uncontendedKey(i))
	}
	_, _ = b.c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Del(ctx, b.conn.prefix+"{"+k+"}:fence") // k starts with "bench-", never '}'
		}
		return nil
	})
}

func (r *uncontendedResult) print(w io.Writer) {
	fmt.Fprintf(w, "\nuncontended: %d goroutines, each locking and unlocking its own key\n", r.Goroutines)
	fmt.Fprintf(w, "  pairs/s          %.0f (%d Lock+Unlock pairs)\n", r.PairsPerSecond, r.Pairs)
	fmt.Fprintf(w, "  pair latency     p50 %s, p99 %s, max %s\n", human(r.LatencyP50), human(r.LatencyP99), human(r.LatencyMax))
	fmt.Fprintf(w, "  per pair         %.1f round trips (scripts), %.1f Redis commands\n", r.ScriptsPerPair, r.CommandsPerPair)
}

func (r *contendedResult) print(w io.Writer) {
	fmt.Fprintf(w, "\ncontended: %d workers on one key, holding it %v each time\n", r.Workers, r.Hold)
	fmt.Fprintf(w, "  acquisitions/s   %.0f (%d acquisitions)\n", r.PerSecond, r.Acquisitions)
	if r.Workers < 2 || r.PerSecond == 0 {
		// Nobody to wait for, and no hand-over from one worker to another.
		fmt.Fprintf(w, "  wait             p50 %s, p99 %s, max %s\n", human(r.WaitP50), human(r.WaitP99), human(r.WaitMax))
		fmt.Fprintf(w, "  hand-over        none (one worker, or no acquisition)\n")
	} else {
		// In FIFO order a worker waits for the turns of all the others
		// (docs/benchmarks.md reads the wait against the same bound).
		fifo := time.Duration(float64(r.Workers-1) / r.PerSecond * float64(time.Second))
		fmt.Fprintf(w, "  wait             p50 %s, p99 %s, max %s (FIFO bound: (workers-1)/rate = %s)\n", human(r.WaitP50), human(r.WaitP99), human(r.WaitMax), human(fifo))
		fmt.Fprintf(w, "  hand-over        p50 %s, p99 %s (a release to the next worker running)\n", human(r.HandoverP50), human(r.HandoverP99))
	}
	fairness := 0.0
	if r.MaxPerWorker > 0 {
		fairness = float64(r.MinPerWorker) / float64(r.MaxPerWorker)
	}
	fmt.Fprintf(w, "  per worker       min %d, max %d acquisitions (min/max %.2f)\n", r.MinPerWorker, r.MaxPerWorker, fairness)
	fmt.Fprintf(w, "  per acquisition  %.1f round trips (scripts), %.1f Redis commands\n", r.ScriptsPerAcq, r.CommandsPerAcq)
	if r.Overlaps == 0 {
		fmt.Fprintln(w, "  exclusion        never held by two workers at once")
	} else {
		fmt.Fprintf(w, "  exclusion        VIOLATED: held by two workers at once %d times\n", r.Overlaps)
	}
}
