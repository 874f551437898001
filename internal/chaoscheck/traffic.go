package chaoscheck

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/backend"
)

// Traffic is the random lock traffic of a chaos test: two goroutines per
// Client take a few keys with Lock, TryLock and Do (or, with Capacities,
// permits: permits_traffic.go), with random leases, renewal on and off,
// retry strategies, WithMaxHold, random cancellations, and, while
// holding, Extend, TTL and re-entry. It records every hold (a
// Hold, for Check) and checks what only the caller can see: a Context that
// ended while held has cause ErrLockLost, a Context after a successful
// Unlock is done, a re-entered Lock has its outer Lock's fence and token,
// every error is of a known kind, no call panics or hangs.
type Traffic struct {
	Tally
	Keys      []string
	Sentinels []error // the errors the calls may wrap (Classify)
	// The leases that Lock options and Extend set: whole milliseconds
	// from MinLease to MaxLease.
	MinLease, MaxLease time.Duration
	// HoldMax bounds how long a hold lasts before its Unlock.
	HoldMax time.Duration
	// CallSlack is how long after its context's end a call may return
	// before it counts as a hang; zero: not checked.
	CallSlack time.Duration
	// Guard makes holders also write through Lock.Txn, appending their
	// fence to the list GuardLog(key) (a Client on one deployment only).
	Guard bool
	// SentAgain, if set, reports an error that a waiting Lock's check and
	// a release send again for as long as their context lasts (TRYAGAIN
	// while a Redis Cluster slot is being migrated): an Unlock, or a Lock
	// whose wait WithRetry does not bound, that returns one with its
	// context still live is a problem.
	SentAgain func(error) bool
	// Capacities, if set, makes the traffic take permits rather than
	// locks (permitsOp): each key is a Semaphore of its capacity here, or
	// an RWMutex if that is dlock.MaxPermits.
	Capacities map[string]int64

	mu       sync.Mutex
	holds    []*Hold
	ops      map[string]int
	errKinds map[string]int
}

// Run sends the traffic to the clients until end and returns the number of
// calls made; client i's holds are recorded as Client i. Calls still
// running 30 s after end are a hang: the test fails with every stack.
func (tr *Traffic) Run(t *testing.T, seed uint64, end time.Time, clients []*dlock.Client) int64 {
	var wg sync.WaitGroup
	var ops atomic.Int64
	for id, c := range clients {
		for w := range 2 {
			wg.Add(1)
			r := rand.New(rand.NewPCG(seed, uint64(100+id*10+w)))
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					tr.safeOp(id, c, r)
					ops.Add(1)
					time.Sleep(time.Duration(r.IntN(15)) * time.Millisecond)
				}
			}()
		}
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Until(end) + 30*time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("calls still running 30 s after the end (a hang):\n%s", buf[:runtime.Stack(buf, true)])
	}
	return ops.Load()
}

// Holds returns the holds recorded, once Run has returned.
func (tr *Traffic) Holds() []*Hold { return tr.holds }

// Summary returns the calls made and the errors met, by kind, for the log.
func (tr *Traffic) Summary() (ops, errKinds map[string]int) {
	tr.Tally.mu.Lock()
	defer tr.Tally.mu.Unlock()
	return tr.ops, tr.errKinds
}

func (tr *Traffic) safeOp(id int, c *dlock.Client, r *rand.Rand) {
	defer func() {
		if p := recover(); p != nil {
			tr.Problem("panic in client %d: %v", id, p)
		}
	}()
	if tr.Capacities != nil {
		tr.permitsOp(id, c, r)
		return
	}
	tr.op(id, c, r)
}

func (tr *Traffic) lease(r *rand.Rand) time.Duration {
	return tr.MinLease + time.Duration(r.Int64N(int64((tr.MaxLease-tr.MinLease)/time.Millisecond)+1))*time.Millisecond
}

// lockOptions returns random Lock options, and whether they bound a wait
// (WithRetry).
func (tr *Traffic) lockOptions(r *rand.Rand) (opts []dlock.LockOption, bounded bool) {
	opts = []dlock.LockOption{dlock.WithTTL(tr.lease(r))}
	renew := r.IntN(3) != 0
	if !renew {
		opts = append(opts, dlock.WithoutRenewal())
	}
	switch r.IntN(4) {
	case 0:
		opts, bounded = append(opts, dlock.WithRetry(dlock.FixedRetry(time.Duration(10+r.IntN(50))*time.Millisecond, 1+r.IntN(10)))), true
	case 1:
		opts, bounded = append(opts, dlock.WithRetry(dlock.ExponentialRetry(5*time.Millisecond, 100*time.Millisecond, 1+r.IntN(8)))), true
	}
	if renew && r.IntN(5) == 0 {
		opts = append(opts, dlock.WithMaxHold(time.Duration(50+r.IntN(500))*time.Millisecond))
	}
	return opts, bounded
}

// callCtx returns a context that may end at a random time, as a caller's,
// and when it ends at the latest.
func callCtx(r *rand.Rand) (context.Context, context.CancelFunc, time.Duration) {
	switch r.IntN(4) {
	case 0:
		d := time.Duration(r.IntN(800)) * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), d)
		return ctx, cancel, d
	case 1:
		ctx, cancel := context.WithCancel(context.Background())
		d := time.Duration(r.IntN(600)) * time.Millisecond
		tm := time.AfterFunc(d, cancel)
		return ctx, func() { tm.Stop(); cancel() }, d
	default:
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		return ctx, cancel, 5 * time.Second
	}
}

// timed runs f, a call given a context that ends by limit at the latest,
// and reports a call that returned much later: a hang.
func (tr *Traffic) timed(op string, limit time.Duration, f func()) {
	began := time.Now()
	f()
	if d := time.Since(began); tr.CallSlack > 0 && d > limit+tr.CallSlack {
		tr.Problem("%s returned after %v, its context ended after %v", op, d, limit)
	}
}

func (tr *Traffic) checkErr(op string, err error) { tr.CheckErr(&tr.errKinds, op, err, tr.Sentinels) }

func (tr *Traffic) op(id int, c *dlock.Client, r *rand.Rand) {
	key := tr.Keys[r.IntN(len(tr.Keys))]
	opts, bounded := tr.lockOptions(r)
	ctx, cancel, limit := callCtx(r)
	defer cancel()
	call := time.Now()
	switch k := r.IntN(10); {
	case k < 7:
		via, name, take := "lock", "Lock", c.Lock
		if k >= 5 {
			via, name, take = "trylock", "TryLock", c.TryLock
		}
		tr.Count(&tr.ops, via)
		var l *dlock.Lock
		var err error
		tr.timed(name, limit, func() { l, err = take(ctx, key, opts...) })
		tr.checkErr(via, err)
		if via == "lock" && !bounded {
			tr.checkSentAgain(name, ctx, err)
		}
		if err == nil {
			tr.holdLock(id, c, r, l, via, call, 0)
		}
	default:
		tr.Count(&tr.ops, "do")
		err := c.Do(ctx, key, func(fctx context.Context) error {
			if d := time.Since(call); tr.CallSlack > 0 && d > limit+tr.CallSlack {
				tr.Problem("Do's Lock took %v, its context ended after %v", d, limit)
			}
			// Do hands fn a context, not the Lock: re-enter for a Lock on
			// the same hold to record it.
			ectx, ecancel := context.WithTimeout(fctx, 2*time.Second)
			defer ecancel()
			in, err := c.Lock(ectx, key)
			tr.checkErr("do reenter", err)
			if err != nil {
				return nil
			}
			hr := tr.begin(id, in, "do", call, 0)
			tr.holdFor(id, c, r, in, hr, false)
			if in.Context().Err() != nil {
				// fn's context follows the lock's (through
				// context.AfterFunc: one goroutine later).
				select {
				case <-fctx.Done():
				case <-time.After(time.Second):
					tr.Problem("Do: lock's Context done but fn's context live a second later")
				}
			}
			uctx, ucancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer ucancel()
			tr.checkErr("do reenter unlock", in.Unlock(uctx))
			return nil
		}, opts...)
		tr.checkErr("do", err)
		if !bounded {
			tr.checkSentAgain("Do", ctx, err)
		}
	}
}

// begin records the hold of l, taken by a call at call, of permits
// permits (0 for a lock).
func (tr *Traffic) begin(id int, l *dlock.Lock, via string, call time.Time, permits int64) *Hold {
	hr := &Hold{Call: call, Key: l.Key(), Token: l.Token(), Fence: l.Fence(), Client: id, Via: via, Permits: permits}
	now := time.Now()
	hr.Begin(now, backend.TrustedUntil(l), l.Context().Err() == nil)
	tr.mu.Lock()
	tr.holds = append(tr.holds, hr)
	tr.mu.Unlock()
	return hr
}

// holdFor works under l for up to HoldMax, checking it every few ms, and,
// if calls, does random Extend, TTL and (for a lock) re-entry calls on it.
func (tr *Traffic) holdFor(id int, c *dlock.Client, r *rand.Rand, l *dlock.Lock, hr *Hold, calls bool) {
	until := time.Now().Add(time.Duration(r.Int64N(int64(tr.HoldMax))))
	check := func() bool {
		now := time.Now()
		return hr.Observe(now, backend.TrustedUntil(l), l.Context().Err() == nil)
	}
	for time.Now().Before(until) {
		if !check() {
			cause := context.Cause(l.Context())
			hr.LostCause = cause
			if !errors.Is(cause, dlock.ErrLockLost) {
				tr.Problem("client %d %s: Context done while held with cause %v", id, hr.Key, cause)
			}
			return
		}
		if calls {
			switch r.IntN(50) {
			case 0:
				tr.Count(&tr.ops, "extend")
				ctx, cancel, limit := callCtx(r)
				ttl := tr.lease(r)
				var err error
				tr.timed("Extend", limit, func() { err = l.Extend(ctx, ttl) })
				cancel()
				tr.checkErr("extend", err)
			case 1:
				tr.Count(&tr.ops, "ttl")
				ctx, cancel, limit := callCtx(r)
				var err error
				tr.timed("TTL", limit, func() { _, err = l.TTL(ctx) })
				cancel()
				tr.checkErr("ttl", err)
			case 2:
				if hr.Permits == 0 {
					tr.reenter(c, r, l)
				}
			case 3:
				if tr.Guard {
					tr.guard(r, l)
				}
			}
		}
		time.Sleep(time.Duration(1+r.IntN(4)) * time.Millisecond)
	}
	check()
}

// GuardLog is the list a holder's guarded writes append its fence to (see
// Traffic.Guard): in the key's slot, as Txn requires on Redis Cluster.
func GuardLog(key string) string { return backend.SlotKey(key, "guarded") }

// guard appends l's fence to its key's GuardLog through l.Txn.
func (tr *Traffic) guard(r *rand.Rand, l *dlock.Lock) {
	tr.Count(&tr.ops, "txn")
	ctx, cancel, limit := callCtx(r)
	defer cancel()
	var err error
	tr.timed("Txn", limit, func() {
		err = l.Txn(ctx, func(pipe redis.Pipeliner) error {
			pipe.RPush(ctx, GuardLog(l.Key()), l.Fence())
			return nil
		})
	})
	tr.checkErr("txn", err)
}

func (tr *Traffic) reenter(c *dlock.Client, r *rand.Rand, l *dlock.Lock) {
	tr.Count(&tr.ops, "reenter")
	ctx, cancel := context.WithTimeout(l.Context(), 2*time.Second)
	defer cancel()
	var in *dlock.Lock
	var err error
	if r.IntN(2) == 0 {
		tr.timed("re-entering Lock", 2*time.Second, func() { in, err = c.Lock(ctx, l.Key()) })
	} else {
		tr.timed("re-entering TryLock", 2*time.Second, func() { in, err = c.TryLock(ctx, l.Key()) })
	}
	tr.checkErr("reenter", err)
	if err != nil {
		return
	}
	if in.Fence() != l.Fence() || in.Token() != l.Token() {
		tr.Problem("re-entered lock has fence %d token %s, outer %d %s", in.Fence(), in.Token(), l.Fence(), l.Token())
	}
	if r.IntN(2) == 0 {
		time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
	}
	uctx, ucancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer ucancel()
	tr.timed("re-entered Unlock", 2*time.Second, func() { err = in.Unlock(uctx) })
	tr.checkErr("reenter unlock", err)
	if err == nil && in.Context().Err() == nil {
		tr.Problem("re-entered lock's Context live after its Unlock")
	}
}

// holdLock records and works under l, of permits permits (0 for a lock),
// then unlocks it.
func (tr *Traffic) holdLock(id int, c *dlock.Client, r *rand.Rand, l *dlock.Lock, via string, call time.Time, permits int64) {
	hr := tr.begin(id, l, via, call, permits)
	tr.holdFor(id, c, r, l, hr, true)
	// The interval ends at Unlock's start at the latest.
	uctx, ucancel, limit := callCtx(r)
	defer ucancel()
	var err error
	tr.timed("Unlock", limit, func() { err = l.Unlock(uctx) })
	tr.checkErr("unlock", err)
	tr.checkSentAgain("Unlock", uctx, err)
	if err != nil && !errors.Is(err, dlock.ErrNotHeld) {
		// A caller retries an Unlock that failed.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		tr.timed("Unlock retry", 3*time.Second, func() { err = l.Unlock(ctx) })
		tr.checkErr("unlock retry", err)
		tr.checkSentAgain("Unlock retry", ctx, err)
		cancel()
	}
	if err == nil && l.Context().Err() == nil {
		tr.Problem("Context live after Unlock returned nil")
	}
}

// checkSentAgain reports a call that returned an error it sends again
// (SentAgain) with its context ctx still live: it gave up too soon.
func (tr *Traffic) checkSentAgain(op string, ctx context.Context, err error) {
	if err != nil && tr.SentAgain != nil && tr.SentAgain(err) && ctx.Err() == nil {
		tr.Problem("%s returned %v with its context live", op, err)
	}
}
