package dlock_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/chaoscheck"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/tcpproxy"
	"github.com/dlock-go/dlock/internal/testutil"
)

// TestChaos is a randomized, fault-injecting property test. Several Clients
// (each on its own go-redis client, some through a tcpproxy) take a few
// keys with Lock, TryLock and Do, with random short leases, renewal on and
// off, re-entry, Extend, TTL and random cancellations, while a fault
// goroutine freezes proxies, pauses and restarts redis-server, flushes the
// script cache and kills connections.
//
// The traffic and the checks a caller can make are chaoscheck.Traffic's,
// shared with TestRedlockChaos. Over the holds it recorded, chaoscheck.Check
// then finds no two trusted intervals of different holds of one key that
// overlap, except across a restart of redis-server without persistence
// (docs/safety.md), and a larger fence for the later of two holds one of
// which ended before the other began. Holders also append their fence to a
// list through Lock.Txn (Traffic.Guard), whose fences must be in order
// (TestTxnOfAPausedHolderAppliesNothing makes the stale write that this
// would catch on purpose). TestMain's goleak finds no goroutine left
// running.
//
// CHAOS_DURATION (a Go duration, 15s by default) sets its run time, and
// CHAOS_SEED replays a failure with its logged seed. (An overlap once
// reported under a CPU hog, seed 1795339274852774726, was a Lock called
// after a restart had begun and granted by the old redis-server before it
// acted on SIGTERM: restarts now excuse leases granted up to the old
// process's exit.)
func TestChaos(t *testing.T) {
	// A server of its own, and checks of what the traffic recorded, not of
	// how long calls took: it runs beside the other chaos run.
	t.Parallel()
	seed, dur := chaoscheck.Settings(t, 15*time.Second)
	ch := newChaos(t)
	ch.Keys = []string{"k0", "k1"}
	ch.Guard = true
	// Calls are not checked for hangs beyond Run's: with go-redis's
	// defaults (3 s reads, 3 retries), a call may outlast its context by
	// many seconds on a connection frozen for a while.
	ch.run(seed, dur)
}

// newChaos returns the chaos run TestChaos and TestPermitsChaos share:
// leases of 100 ms to 1 s, holds of up to 500 ms.
func newChaos(t *testing.T) *chaos {
	ch := &chaos{t: t}
	ch.Sentinels = chaosSentinels
	ch.MinLease, ch.MaxLease = 100*time.Millisecond, time.Second
	ch.HoldMax = 500 * time.Millisecond
	return ch
}

type chaosClient struct {
	id    int
	c     *dlock.Client
	rdb   *redis.Client
	proxy *tcpproxy.Proxy // nil: direct
}

type chaos struct {
	chaoscheck.Traffic
	t       *testing.T
	srv     *redistest.Server
	clients []*chaosClient

	mu       sync.Mutex
	restarts []chaoscheck.Restart
	faults   map[string]int
}

var chaosSentinels = []error{
	dlock.ErrNotObtained, dlock.ErrLockLost, dlock.ErrNotHeld, dlock.ErrReleased, dlock.ErrClosed,
	dlock.ErrInvalidKey, dlock.ErrInvalidTTL, dlock.ErrInvalidOption, dlock.ErrNilClient, dlock.ErrWrongType,
	dlock.ErrNotReplicated, dlock.ErrDegraded, context.Canceled, context.DeadlineExceeded,
}

func (ch *chaos) newClient(id int, proxied bool, rng *rand.Rand) *chaosClient {
	t := ch.t
	addr := ch.srv.Addr()
	cc := &chaosClient{id: id}
	if proxied {
		p, err := tcpproxy.New(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		cc.proxy = p
		addr = p.Addr()
	}
	opt := &redis.Options{Addr: addr}
	if id%2 == 0 {
		opt.MaxRetries = -1
		opt.ContextTimeoutEnabled = true
		opt.ReadTimeout = 800 * time.Millisecond
	}
	cc.rdb = redis.NewClient(opt)
	t.Cleanup(func() { cc.rdb.Close() })
	var opts []dlock.Option
	if rng.IntN(2) == 0 {
		opts = append(opts, dlock.WithQueueTTL(time.Duration(300+rng.IntN(700))*time.Millisecond))
	}
	c, err := dlock.New(cc.rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	cc.c = c
	return cc
}

func (ch *chaos) run(seed uint64, dur time.Duration) {
	t := ch.t
	ch.srv = redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: ch.srv.Addr(), MaxRetries: -1})
	defer admin.Close()
	rng := rand.New(rand.NewPCG(seed, 1))
	const nClients = 5
	var clients []*dlock.Client
	for i := 0; i < nClients; i++ {
		cc := ch.newClient(i, i < 3, rng)
		ch.clients = append(ch.clients, cc)
		clients = append(clients, cc.c)
	}
	end := time.Now().Add(dur)
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		ft := testutil.InGoroutine(t)
		fr := rand.New(rand.NewPCG(seed, 7))
		restarts := 0
		for time.Now().Add(3 * time.Second).Before(end) {
			time.Sleep(time.Duration(200+fr.IntN(1500)) * time.Millisecond)
			ch.fault(ft, fr, admin, &restarts)
		}
	}()
	ops := ch.Run(t, seed, end, clients)
	<-faultsDone
	for _, cc := range ch.clients {
		if cc.proxy != nil {
			cc.proxy.Thaw()
		}
		cc.c.Close()
	}
	ch.srv.Resume(t)
	o := chaoscheck.Options{Restarts: ch.restarts, Logf: t.Logf}
	var res chaoscheck.Result
	if ch.Capacities != nil {
		res = chaoscheck.CheckPermits(ch.Holds(), ch.Capacities, o)
	} else {
		res = chaoscheck.Check(ch.Holds(), o)
	}
	for _, p := range res.Problems {
		ch.Problem("%s", p)
	}
	guarded := ch.checkGuarded(admin)
	byKind, errKinds := ch.Summary()
	t.Logf("ops %d, holds %d, restarts %d, guarded writes kept %d, ops by kind %v, faults %v, errors %v",
		ops, len(ch.Holds()), len(ch.restarts), guarded, byKind, ch.faults, errKinds)
	for _, p := range ch.Problems() {
		t.Error(p)
	}
}

// checkGuarded reads the guarded writes of each key (Traffic.Guard) and
// finds their fences in order: a holder's Txn applied only while it held
// the lock, so none came after a later holder's. It returns how many
// writes the server kept (a restart drops those before it).
func (ch *chaos) checkGuarded(admin *redis.Client) int {
	kept := 0
	for _, key := range ch.Keys {
		log, err := admin.LRange(context.Background(), chaoscheck.GuardLog(key), 0, -1).Result()
		if err != nil {
			ch.Problem("reading %s: %v", chaoscheck.GuardLog(key), err)
			continue
		}
		kept += len(log)
		var last uint64
		for i, s := range log {
			fence, err := strconv.ParseUint(s, 10, 64)
			if err != nil || fence < last {
				ch.Problem("%s: write %d has fence %q after %d: a stale holder's Txn was applied", key, i, s, last)
			}
			last = max(last, fence)
		}
	}
	return kept
}

// fault injects one fault. It runs on a goroutine of its own: t is from
// testutil.InGoroutine.
func (ch *chaos) fault(t testing.TB, r *rand.Rand, admin *redis.Client, restarts *int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	switch n := r.IntN(100); {
	case n < 40: // freeze one client's connections, often past its lease
		cc := ch.clients[r.IntN(3)]
		d := time.Duration(50+r.IntN(1500)) * time.Millisecond
		ch.Count(&ch.faults, "freeze")
		cc.proxy.Freeze()
		time.Sleep(d)
		cc.proxy.Thaw()
	case n < 55:
		ch.Count(&ch.faults, "script flush")
		_ = admin.ScriptFlush(ctx).Err()
	case n < 70:
		ch.Count(&ch.faults, "client kill normal")
		_ = admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err()
	case n < 80:
		ch.Count(&ch.faults, "client kill pubsub")
		_ = admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err()
	case n < 92:
		ch.Count(&ch.faults, "pause server")
		ch.srv.Pause(t)
		time.Sleep(time.Duration(30+r.IntN(600)) * time.Millisecond)
		ch.srv.Resume(t)
	default:
		if *restarts >= 3 {
			return
		}
		*restarts++
		ch.Count(&ch.faults, "restart")
		began := time.Now()
		ch.srv.Stop(t)
		exited := time.Now()
		ch.mu.Lock()
		ch.restarts = append(ch.restarts, chaoscheck.Restart{Began: began, Exited: exited})
		ch.mu.Unlock()
		ch.srv.Restart(t)
	}
}
