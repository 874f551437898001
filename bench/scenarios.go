package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Env is the server the scenarios run against.
type Env struct {
	Addr   string
	Stats  *redis.Client // reads INFO; its own commands are left out of the counts
	Prefix string        // every key of this run starts with it
	seq    atomic.Int64
}

// NewEnv connects to the server at addr. Keys are namespaced by a
// run-unique prefix, so nothing is flushed and runs do not interfere.
func NewEnv(addr string) (*Env, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		rdb.Close()
		return nil, err
	}
	return &Env{Addr: addr, Stats: rdb, Prefix: "bench" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)}, nil
}

// Close closes the statistics connection.
func (e *Env) Close() { e.Stats.Close() }

// key returns a fresh key name: no scenario meets another's leftovers.
func (e *Env) key(kind string) string {
	return e.Prefix + ":" + kind + strconv.FormatInt(e.seq.Add(1), 10)
}

// Cleanup deletes the keys of this run (fence counters and the like have no
// expiry) with SCAN + UNLINK.
func (e *Env) Cleanup(ctx context.Context) {
	var cursor uint64
	for {
		keys, next, err := e.Stats.Scan(ctx, cursor, "*"+e.Prefix+"*", 1000).Result()
		if err != nil {
			return
		}
		if len(keys) > 0 {
			e.Stats.Unlink(ctx, keys...)
		}
		if cursor = next; cursor == 0 {
			return
		}
	}
}

// Costs are what one operation cost the server and the client.
type Costs struct {
	Cmds        CmdCounts     // all commands in the window, including those run by scripts
	TopPerOp    float64       // commands clients sent, per operation
	TotalPerOp  float64       // all commands, per operation
	ClientCPUOp time.Duration // client process CPU per operation
	ServerCPUOp time.Duration // redis-server CPU per operation
}

func costs(w Window, ops int64, o Origin) Costs {
	if ops == 0 {
		return Costs{Cmds: w.Cmds}
	}
	return Costs{
		Cmds:        w.Cmds,
		TopPerOp:    o.TopLevel(w.Cmds) / float64(ops),
		TotalPerOp:  float64(w.Cmds.Total()) / float64(ops),
		ClientCPUOp: w.ClientCPU / time.Duration(ops),
		ServerCPUOp: w.ServerCPU / time.Duration(ops),
	}
}

// UncontendedResult is scenario 1.
type UncontendedResult struct {
	Setup      string
	Goroutines int
	Pairs      int64
	Dur        time.Duration
	PerSec     float64 // acquire+release pairs per second
	Latency    Dist    // of one acquire+release pair
	Errors     int64   // failed Lock and unlock calls in the measured window (retried)
	Costs
}

// Uncontended runs goroutines that each lock and unlock their own key as
// fast as they can, all through one Locker (one process).
func (e *Env) Uncontended(s Setup, goroutines int, warmup, dur time.Duration, o Origin) (UncontendedResult, error) {
	res := UncontendedResult{Setup: s.Name, Goroutines: goroutines}
	lk, err := s.Open(e.Addr, nil)
	if err != nil {
		return res, err
	}
	defer lk.Close()
	ctx, cancel := context.WithTimeout(context.Background(), warmup+dur+time.Minute)
	defer cancel()

	var stop, record atomic.Bool
	var pairs, errs atomic.Int64
	samples := make([][]time.Duration, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		key := e.key("u")
		samples[g] = make([]time.Duration, 0, 1<<14)
		wg.Go(func() {
			for !stop.Load() {
				t0 := time.Now()
				unlock, err := lk.Lock(ctx, key)
				if err != nil {
					countIf(&record, &errs)
					time.Sleep(time.Millisecond)
					continue
				}
				if err := unlock(ctx); err != nil {
					// Not a pair: its release failed. It counts as an
					// error, not in the rate or the latency.
					countIf(&record, &errs)
					continue
				}
				if record.Load() {
					samples[g] = append(samples[g], time.Since(t0))
					pairs.Add(1)
				}
			}
		})
	}
	time.Sleep(warmup)
	before, err := Take(ctx, e.Stats)
	if err != nil {
		stop.Store(true)
		wg.Wait()
		return res, err
	}
	record.Store(true)
	time.Sleep(dur)
	record.Store(false)
	w, err := Since(ctx, e.Stats, before)
	stop.Store(true)
	wg.Wait()
	if err != nil {
		return res, err
	}
	res.Pairs = pairs.Load()
	res.Dur = w.Dur
	res.PerSec = float64(res.Pairs) / w.Dur.Seconds()
	res.Latency = NewDist(slices.Concat(samples...))
	res.Errors = errs.Load()
	res.Costs = costs(w, res.Pairs, o)
	return res, nil
}

// ContendedResult is scenario 2.
type ContendedResult struct {
	Setup        string
	Workers      int
	Hold         time.Duration
	Acquisitions int64
	Dur          time.Duration
	PerSec       float64
	Gap          Dist    // a release to the next acquire by another worker
	Held         Dist    // how long the critical section really took (the sleep overshoots)
	Wait         Dist    // from calling Lock to holding the lock (waits still going on at the end count as they stand)
	MinPerWorker int64   // acquisitions of the least served worker
	MaxPerWorker int64   // ... and of the most served one
	Fairness     float64 // MinPerWorker / MaxPerWorker
	SameWorker   float64 // share of acquisitions by the worker that held the lock just before
	Violations   int64   // acquisitions while another worker was inside, warm-up included
	GiveUps      int64   // Lock calls that gave up by themselves in the measured window (retried)
	Errors       int64   // other failed Lock and unlock calls in the measured window
	Costs
}

// Contended runs workers, each with its own Locker (its own connections,
// as separate processes would have), that take one key in turn and hold
// it for hold.
func (e *Env) Contended(s Setup, workers int, hold, warmup, dur time.Duration, o Origin) (ContendedResult, error) {
	res := ContendedResult{Setup: s.Name, Workers: workers, Hold: hold}
	lockers := make([]Locker, workers)
	for i := range lockers {
		lk, err := s.Open(e.Addr, nil)
		if err != nil {
			for _, l := range lockers[:i] {
				l.Close()
			}
			return res, err
		}
		lockers[i] = lk
	}
	defer func() {
		for _, l := range lockers {
			l.Close()
		}
	}()
	key := e.key("c")
	// The deadline matters to redislock: without one it silently caps a
	// wait at the lease.
	ctx, cancel := context.WithTimeout(context.Background(), warmup+dur+30*time.Second)
	defer cancel()

	type release struct {
		worker int
		at     time.Time
	}
	var (
		stop, record                     atomic.Bool
		inside                           atomic.Int32
		violations, giveUps, errs, total atomic.Int64
		mu                               sync.Mutex
		last                             = release{worker: -1}
		same                             int64
		gaps, helds                      []time.Duration
	)
	counts := make([]int64, workers)
	waits := make([][]time.Duration, workers)
	// waitingSince is when each worker started its current wait (0: not
	// waiting). A worker still waiting when the window closes adds that
	// wait so far: starved workers must show in the wait percentiles.
	waitingSince := make([]atomic.Int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lk := lockers[w]
		wg.Go(func() {
			for !stop.Load() {
				t0 := time.Now()
				waitingSince[w].Store(t0.UnixNano())
				var unlock Unlock
				for {
					var err error
					unlock, err = lk.Lock(ctx, key)
					if err == nil {
						break
					}
					if ctx.Err() != nil || stop.Load() {
						return
					}
					if errors.Is(err, ErrGaveUp) {
						countIf(&record, &giveUps)
					} else {
						countIf(&record, &errs)
						time.Sleep(time.Millisecond)
					}
				}
				acquired := time.Now()
				waitingSince[w].Store(0)
				if inside.Add(1) != 1 {
					violations.Add(1)
				}
				if record.Load() {
					total.Add(1)
					counts[w]++
					waits[w] = append(waits[w], acquired.Sub(t0))
					mu.Lock()
					switch last.worker {
					case w:
						same++
					case -1:
					default:
						gaps = append(gaps, acquired.Sub(last.at))
					}
					mu.Unlock()
				}
				time.Sleep(hold)
				inside.Add(-1)
				now := time.Now()
				mu.Lock()
				last = release{worker: w, at: now}
				if record.Load() {
					helds = append(helds, now.Sub(acquired))
				}
				mu.Unlock()
				uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
				if err := unlock(uctx); err != nil {
					countIf(&record, &errs)
				}
				ucancel()
			}
		})
	}
	time.Sleep(warmup)
	before, err := Take(ctx, e.Stats)
	if err != nil {
		stop.Store(true)
		cancel()
		wg.Wait()
		return res, err
	}
	record.Store(true)
	time.Sleep(dur)
	record.Store(false)
	var censored []time.Duration
	end := time.Now()
	for i := range waitingSince {
		if since := waitingSince[i].Load(); since != 0 {
			// As it stands: like a completed wait, from the call to Lock,
			// even if that was before the window opened.
			censored = append(censored, end.Sub(time.Unix(0, since)))
		}
	}
	win, err := Since(ctx, e.Stats, before)
	stop.Store(true)
	cancel()
	wg.Wait()
	if err != nil {
		return res, err
	}
	res.Acquisitions = total.Load()
	res.Dur = win.Dur
	res.PerSec = float64(res.Acquisitions) / win.Dur.Seconds()
	res.Gap = NewDist(gaps)
	res.Held = NewDist(helds)
	res.Wait = NewDist(slices.Concat(append(waits, censored)...))
	res.MinPerWorker, res.MaxPerWorker = slices.Min(counts), slices.Max(counts)
	if res.MaxPerWorker > 0 {
		res.Fairness = float64(res.MinPerWorker) / float64(res.MaxPerWorker)
	}
	if res.Acquisitions > 0 {
		res.SameWorker = float64(same) / float64(res.Acquisitions)
	}
	res.Violations = violations.Load()
	res.GiveUps = giveUps.Load()
	res.Errors = errs.Load()
	res.Costs = costs(win, res.Acquisitions, o)
	return res, nil
}

// acquireBound is how long the renewal scenario waits for its locks.
const acquireBound = 30 * time.Second

// RenewalResult is scenario 3.
type RenewalResult struct {
	Lib      string
	Method   string
	Locks    int
	Lease    time.Duration
	Interval time.Duration
	Dur      time.Duration
	Acquire  time.Duration // time to take all the locks
	// Per renewal interval, to keep every lock alive.
	TopPerInterval   float64
	TotalPerInterval float64
	RoundTrips       float64 // requests per interval; -1 if not measurable
	ClientCPUPerSec  float64 // CPU seconds per second
	ServerCPUPerSec  float64
	Lost             int
	Cmds             CmdCounts
}

// Renewal takes locks distinct keys, keeps them for settle+dur while the
// library (or a user loop) renews them every interval, and measures the
// window dur.
func (e *Env) Renewal(r Renewer, locks int, lease, interval, settle, dur time.Duration, o Origin) (RenewalResult, error) {
	res := RenewalResult{Lib: r.Lib, Method: r.Method, Locks: locks, Lease: lease, Interval: interval}
	keys := make([]string, locks)
	for i := range keys {
		keys[i] = e.key("r")
	}
	var rt *RoundTrips
	if r.CountsRoundTrips {
		rt = &RoundTrips{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	// Taking the locks is bounded: a library that cannot take them in
	// time fails the scenario rather than the whole report.
	actx, acancel := context.WithTimeout(ctx, acquireBound)
	h, err := r.Hold(actx, e.Addr, rt, keys, lease, interval)
	acancel()
	if err != nil {
		return res, fmt.Errorf("taking %d locks: %w", locks, err)
	}
	res.Acquire = time.Since(start)
	time.Sleep(settle)
	before, err := Take(ctx, e.Stats)
	if err != nil {
		h.Release()
		return res, err
	}
	var rt0 int64
	if rt != nil {
		rt0 = rt.Load()
	}
	time.Sleep(dur)
	w, err := Since(ctx, e.Stats, before)
	var rt1 int64
	if rt != nil {
		rt1 = rt.Load()
	}
	res.Lost = h.Lost()
	h.Release()
	if err != nil {
		return res, err
	}
	intervals := w.Dur.Seconds() / interval.Seconds()
	res.Dur = w.Dur
	res.Cmds = w.Cmds
	res.TopPerInterval = o.TopLevel(w.Cmds) / intervals
	res.TotalPerInterval = float64(w.Cmds.Total()) / intervals
	res.RoundTrips = -1
	if rt != nil {
		res.RoundTrips = float64(rt1-rt0) / intervals
	}
	res.ClientCPUPerSec = w.ClientCPU.Seconds() / w.Dur.Seconds()
	res.ServerCPUPerSec = w.ServerCPU.Seconds() / w.Dur.Seconds()
	return res, nil
}

// parallel runs fn for every index with n goroutines and returns the
// first error.
func parallel(n, count int, fn func(i int) error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= count {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { first = fmt.Errorf("lock %d: %w", i, err) })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// countIf adds one to n while the measured window is open (record): what
// happens in the warm-up is not reported.
func countIf(record *atomic.Bool, n *atomic.Int64) {
	if record.Load() {
		n.Add(1)
	}
}
