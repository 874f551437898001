package redlock_test

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
	"github.com/dlock-go/dlock/internal/chaoscheck"
	"github.com/dlock-go/dlock/internal/tcpproxy"
	"github.com/dlock-go/dlock/redlock"
)

// TestRedlockChaos is TestChaos (the library's randomized, fault-injecting
// property test) for Redlock: four Clients on five independent
// redis-server nodes (three of them reach every node through its own
// tcpproxy) take a few keys with Lock, TryLock and Do, with random leases of
// tens to hundreds of ms, renewal on and off, re-entry, Extend, TTL and
// random cancellations, while faults hit a minority of the nodes (at most
// two at any one time, chaos_faults_test.go): frozen connections, SIGSTOP,
// script-cache flushes, killed connections, and kills without persistence,
// restarted either after the longest lease (which docs/safety.md says keeps
// exclusion) or at once (the Redlock hole the docs excuse).
//
// It records each hold's verified-live and trusted intervals and checks,
// with package chaoscheck (as TestChaos does):
//   - no two trusted intervals of different holds of one key overlap,
//     except across an immediate restart, and only when the second hold
//     began within the longest lease after it;
//   - of two holds one of which ended before the other began, the later has
//     the larger fence, across restarts too when the later was called after
//     the earlier was last seen live (the clock floor);
//   - a re-entered Lock has its outer Lock's fence and token;
//   - every Context that ended while held has cause ErrLockLost, every
//     Context after a successful Unlock is done;
//   - every error is a sentinel, a context error, or a wrapped Redis or
//     network error;
//   - every call returns within its context's time and a few seconds (no
//     hang), no panics, and (TestMain's goleak) no goroutine left running.
//
// CHAOS_DURATION (a Go duration, 8s by default) sets its run time, and
// CHAOS_SEED replays a failure with its logged seed.
func TestRedlockChaos(t *testing.T) {
	seed, dur := chaoscheck.Settings(t, 8*time.Second)
	ch := &rlChaos{t: t, keys: []string{"k0", "k1", "k2"}}
	ch.run(seed, dur)
}

const (
	rlChaosNodes   = 5
	rlChaosClients = 4
	rlChaosProxied = 3 // clients 0-2 reach the nodes through proxies
	// rlChaosMaxLease is the longest lease any call sets (WithTTL, Extend).
	rlChaosMaxLease = 400 * time.Millisecond
	// rlChaosCallSlack is how long after its context's end a call may
	// return: the requests under way end at their per-node timeouts
	// (50 ms, or a quarter of the lease for releases), far less than this.
	rlChaosCallSlack = 3 * time.Second
)

type rlClient struct {
	id      int
	c       *dlock.Client
	proxies []*tcpproxy.Proxy // one per node; nil for a direct client
}

type rlChaos struct {
	chaoscheck.Tally
	t       *testing.T
	cl      *cluster
	keys    []string
	clients []*rlClient
	admins  []*redis.Client // one per node, for the faults

	mu       sync.Mutex
	holds    []*chaoscheck.Hold
	restarts []chaoscheck.Restart // the immediate ones: the docs excuse overlaps across them
	errKinds map[string]int
	ops      map[string]int
	faults   map[string]int
	busy     [rlChaosNodes]bool // nodes under a fault
}

var rlChaosSentinels = []error{
	dlock.ErrNotObtained, redlock.ErrNoQuorum, dlock.ErrLockLost, dlock.ErrNotHeld, dlock.ErrReleased,
	dlock.ErrClosed, dlock.ErrInvalidKey, dlock.ErrInvalidTTL, dlock.ErrInvalidOption, dlock.ErrWrongType,
	redlock.ErrNodeTimeout, context.Canceled, context.DeadlineExceeded,
}

// timed runs f, a call given a context that ends by limit at the latest,
// and reports a call that returned much later: a hang.
func (ch *rlChaos) timed(op string, limit time.Duration, f func()) {
	began := time.Now()
	f()
	if d := time.Since(began); d > limit+rlChaosCallSlack {
		ch.Problem("%s returned after %v, its context ended after %v", op, d, limit)
	}
}

func (ch *rlChaos) newClient(id int, r *rand.Rand) *rlClient {
	t := ch.t
	cc := &rlClient{id: id}
	var nodes []redis.UniversalClient
	for _, srv := range ch.cl.srvs {
		addr := srv.Addr()
		if id < rlChaosProxied {
			p, err := tcpproxy.New(addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			cc.proxies = append(cc.proxies, p)
			addr = p.Addr()
		}
		rdb := nodeClient(addr)
		t.Cleanup(func() { rdb.Close() })
		nodes = append(nodes, rdb)
	}
	cfg := redlock.Config{Nodes: nodes}
	if r.IntN(2) == 0 {
		// The default (a tenth of the lease) is a few ms for the shortest
		// leases: some Clients wait longer for the nodes.
		cfg.NodeTimeout = time.Duration(10+r.IntN(20)) * time.Millisecond
	}
	c, err := redlock.NewWithConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cc.c = c
	return cc
}

func (ch *rlChaos) run(seed uint64, dur time.Duration) {
	t := ch.t
	ch.cl = startCluster(t, rlChaosNodes)
	for _, srv := range ch.cl.srvs {
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1})
		t.Cleanup(func() { admin.Close() })
		ch.admins = append(ch.admins, admin)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := range rlChaosClients {
		ch.clients = append(ch.clients, ch.newClient(i, rng))
	}
	end := time.Now().Add(dur)
	var wg sync.WaitGroup
	var opsDone atomic.Int64
	for _, cc := range ch.clients {
		for w := range 2 {
			wg.Add(1)
			r := rand.New(rand.NewPCG(seed, uint64(100+cc.id*10+w)))
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					ch.safeOp(cc, r)
					opsDone.Add(1)
					time.Sleep(time.Duration(r.IntN(15)) * time.Millisecond)
				}
			}()
		}
	}
	// Two fault goroutines, each faulting one node at a time: at most two
	// of the five nodes are under a fault at any one time.
	var faults sync.WaitGroup
	for f := range 2 {
		faults.Add(1)
		go func() {
			defer faults.Done()
			fr := rand.New(rand.NewPCG(seed, uint64(7+f)))
			for time.Now().Add(time.Second).Before(end) {
				time.Sleep(time.Duration(100+fr.IntN(700)) * time.Millisecond)
				ch.fault(fr)
			}
		}()
	}
	faults.Wait()
	allDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(allDone)
	}()
	select {
	case <-allDone:
	case <-time.After(time.Until(end) + 30*time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("calls still running 30 s after the end (a hang):\n%s", buf[:runtime.Stack(buf, true)])
	}
	for _, cc := range ch.clients {
		for _, p := range cc.proxies {
			p.Thaw()
		}
		cc.c.Close()
	}
	res := chaoscheck.Check(ch.holds, chaoscheck.Options{
		Restarts:                  ch.restarts,
		RestartWindow:             rlChaosMaxLease, // docs/safety.md: "before the longest lease ran out"
		ClockFencesAcrossRestarts: true,            // docs/safety.md: "the clock term takes over"
		Logf:                      t.Logf,
	})
	for _, p := range res.Problems {
		ch.Problem("%s", p)
	}
	t.Logf("ops %d, holds %d, immediate restarts %d, ops by kind %v, faults %v, errors %v",
		opsDone.Load(), len(ch.holds), len(ch.restarts), ch.ops, ch.faults, ch.errKinds)
	for _, p := range ch.Problems() {
		t.Error(p)
	}
}

func (ch *rlChaos) safeOp(cc *rlClient, r *rand.Rand) {
	defer func() {
		if p := recover(); p != nil {
			ch.Problem("panic in client %d: %v", cc.id, p)
		}
	}()
	ch.op(cc, r)
}

func rlLockOpts(r *rand.Rand) []dlock.LockOption {
	ttl := time.Duration(60+r.IntN(int(rlChaosMaxLease/time.Millisecond)-59)) * time.Millisecond
	opts := []dlock.LockOption{dlock.WithTTL(ttl)}
	renew := r.IntN(3) != 0
	if !renew {
		opts = append(opts, dlock.WithoutRenewal())
	}
	switch r.IntN(4) {
	case 0:
		opts = append(opts, dlock.WithRetry(dlock.FixedRetry(time.Duration(10+r.IntN(50))*time.Millisecond, 1+r.IntN(10))))
	case 1:
		opts = append(opts, dlock.WithRetry(dlock.ExponentialRetry(5*time.Millisecond, 100*time.Millisecond, 1+r.IntN(8))))
	}
	if renew && r.IntN(5) == 0 {
		opts = append(opts, dlock.WithMaxHold(time.Duration(50+r.IntN(500))*time.Millisecond))
	}
	return opts
}

// rlCallCtx returns a context that may end at a random time, as a
// caller's, and when it ends at the latest.
func rlCallCtx(r *rand.Rand) (context.Context, context.CancelFunc, time.Duration) {
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

func (ch *rlChaos) op(cc *rlClient, r *rand.Rand) {
	key := ch.keys[r.IntN(len(ch.keys))]
	opts := rlLockOpts(r)
	ctx, cancel, limit := rlCallCtx(r)
	defer cancel()
	call := time.Now()
	switch k := r.IntN(10); {
	case k < 5:
		ch.Count(&ch.ops, "lock")
		var l *dlock.Lock
		var err error
		ch.timed("Lock", limit, func() { l, err = cc.c.Lock(ctx, key, opts...) })
		ch.CheckErr(&ch.errKinds, "lock", err, rlChaosSentinels)
		if err == nil {
			ch.holdLock(cc, r, l, "lock", call)
		}
	case k < 7:
		ch.Count(&ch.ops, "trylock")
		var l *dlock.Lock
		var err error
		ch.timed("TryLock", limit, func() { l, err = cc.c.TryLock(ctx, key, opts...) })
		ch.CheckErr(&ch.errKinds, "trylock", err, rlChaosSentinels)
		if err == nil {
			ch.holdLock(cc, r, l, "trylock", call)
		}
	default:
		ch.Count(&ch.ops, "do")
		err := cc.c.Do(ctx, key, func(fctx context.Context) error {
			if d := time.Since(call); d > limit+rlChaosCallSlack {
				ch.Problem("Do's Lock took %v, its context ended after %v", d, limit)
			}
			// Do hands fn a context, not the Lock: re-enter for a Lock on
			// the same hold to record it.
			ectx, ecancel := context.WithTimeout(fctx, 2*time.Second)
			defer ecancel()
			in, err := cc.c.Lock(ectx, key)
			ch.CheckErr(&ch.errKinds, "do reenter", err, rlChaosSentinels)
			if err != nil {
				return nil
			}
			hr := ch.begin(cc, in, "do", call)
			ch.holdFor(cc, r, in, hr, time.Duration(r.IntN(200))*time.Millisecond, false)
			uctx, ucancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer ucancel()
			ch.CheckErr(&ch.errKinds, "do reenter unlock", in.Unlock(uctx), rlChaosSentinels)
			return nil
		}, opts...)
		ch.CheckErr(&ch.errKinds, "do", err, rlChaosSentinels)
	}
}

// begin records the hold of l, taken by a call at call.
func (ch *rlChaos) begin(cc *rlClient, l *dlock.Lock, via string, call time.Time) *chaoscheck.Hold {
	hr := &chaoscheck.Hold{Call: call, Key: l.Key(), Token: l.Token(), Fence: l.Fence(), Client: cc.id, Via: via}
	now := time.Now()
	hr.Begin(now, backend.TrustedUntil(l), l.Context().Err() == nil)
	ch.mu.Lock()
	ch.holds = append(ch.holds, hr)
	ch.mu.Unlock()
	return hr
}

// holdFor works under l for d, checking it every few ms, and, if calls,
// does random Extend, TTL and re-entry calls on it.
func (ch *rlChaos) holdFor(cc *rlClient, r *rand.Rand, l *dlock.Lock, hr *chaoscheck.Hold, d time.Duration, calls bool) {
	until := time.Now().Add(d)
	check := func() bool {
		now := time.Now()
		return hr.Observe(now, backend.TrustedUntil(l), l.Context().Err() == nil)
	}
	for time.Now().Before(until) {
		if !check() {
			cause := context.Cause(l.Context())
			hr.LostCause = cause
			if !errors.Is(cause, dlock.ErrLockLost) {
				ch.Problem("client %d %s: Context done while held with cause %v", cc.id, hr.Key, cause)
			}
			return
		}
		if calls {
			switch r.IntN(50) {
			case 0:
				ch.Count(&ch.ops, "extend")
				ctx, cancel, limit := rlCallCtx(r)
				ttl := time.Duration(60+r.IntN(int(rlChaosMaxLease/time.Millisecond)-59)) * time.Millisecond
				var err error
				ch.timed("Extend", limit, func() { err = l.Extend(ctx, ttl) })
				cancel()
				ch.CheckErr(&ch.errKinds, "extend", err, rlChaosSentinels)
			case 1:
				ch.Count(&ch.ops, "ttl")
				ctx, cancel, limit := rlCallCtx(r)
				var err error
				ch.timed("TTL", limit, func() { _, err = l.TTL(ctx) })
				cancel()
				ch.CheckErr(&ch.errKinds, "ttl", err, rlChaosSentinels)
			case 2:
				ch.reenter(cc, r, l)
			}
		}
		time.Sleep(time.Duration(1+r.IntN(4)) * time.Millisecond)
	}
	check()
}

func (ch *rlChaos) reenter(cc *rlClient, r *rand.Rand, l *dlock.Lock) {
	ch.Count(&ch.ops, "reenter")
	ctx, cancel := context.WithTimeout(l.Context(), 2*time.Second)
	defer cancel()
	var in *dlock.Lock
	var err error
	if r.IntN(2) == 0 {
		ch.timed("re-entering Lock", 2*time.Second, func() { in, err = cc.c.Lock(ctx, l.Key()) })
	} else {
		ch.timed("re-entering TryLock", 2*time.Second, func() { in, err = cc.c.TryLock(ctx, l.Key()) })
	}
	ch.CheckErr(&ch.errKinds, "reenter", err, rlChaosSentinels)
	if err != nil {
		return
	}
	if in.Fence() != l.Fence() || in.Token() != l.Token() {
		ch.Problem("re-entered lock has fence %d token %s, outer %d %s", in.Fence(), in.Token(), l.Fence(), l.Token())
	}
	if r.IntN(2) == 0 {
		time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
	}
	uctx, ucancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer ucancel()
	ch.timed("re-entered Unlock", 2*time.Second, func() { err = in.Unlock(uctx) })
	ch.CheckErr(&ch.errKinds, "reenter unlock", err, rlChaosSentinels)
	if err == nil && in.Context().Err() == nil {
		ch.Problem("re-entered lock's Context live after its Unlock")
	}
}

func (ch *rlChaos) holdLock(cc *rlClient, r *rand.Rand, l *dlock.Lock, via string, call time.Time) {
	hr := ch.begin(cc, l, via, call)
	ch.holdFor(cc, r, l, hr, time.Duration(r.IntN(250))*time.Millisecond, true)
	// The interval ends at Unlock's start at the latest.
	uctx, ucancel, limit := rlCallCtx(r)
	defer ucancel()
	var err error
	ch.timed("Unlock", limit, func() { err = l.Unlock(uctx) })
	ch.CheckErr(&ch.errKinds, "unlock", err, rlChaosSentinels)
	if err != nil && !errors.Is(err, dlock.ErrNotHeld) {
		// A caller retries an Unlock that failed.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		ch.timed("Unlock retry", 3*time.Second, func() { err = l.Unlock(ctx) })
		cancel()
		ch.CheckErr(&ch.errKinds, "unlock retry", err, rlChaosSentinels)
	}
	if err == nil && l.Context().Err() == nil {
		ch.Problem("Context live after Unlock returned nil")
	}
}
