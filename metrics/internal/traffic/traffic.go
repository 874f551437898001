// Package traffic generates real lock traffic for the tests of the metrics
// packages.
//
// metrics/otel and metrics/prometheus both prove the same thing: once locks
// have been taken, contended, re-entered, renewed, released and lost against
// a real Redis, every metric they export has moved by the expected amount.
// The traffic is the same for both; only the way a test reads its metrics
// differs. So the traffic lives here once, and each test passes in small
// functions that read its own metrics.
//
// It is a non-test package so that both test packages can import it; being
// under metrics/internal, nothing outside metrics can.
package traffic

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

const (
	// Hold is how long Orders holds each order lock. Tests bound the sum of
	// the hold histogram with it; CheckHolds does.
	Hold = 20 * time.Millisecond
	// Wait is how long Contend's waiter waits at least before it gets the
	// lock. Tests bound the sum of the wait histogram with it;
	// CheckInvoiceWaits does.
	Wait = 50 * time.Millisecond
	// renewedTTL is the lease of the locks whose renewals are counted:
	// renewed every 400 ms, they survive a renewal about 800 ms late on a
	// loaded machine (a 300 ms lease, renewed over 200 ms late, was lost: 3
	// failures in 55 runs under three CPU hogs), which would count as a
	// loss and stop the renewals waited for.
	renewedTTL = 1200 * time.Millisecond
	// shortTTL is the lease of the locks left to expire unrenewed: long
	// enough for the grant's reply to come back within it on a loaded
	// machine (with 30 ms it came too late, and the acquisition failed:
	// 4 failures in 60 runs under three CPU hogs).
	shortTTL = 250 * time.Millisecond
	// waitTimeout bounds each wait for a condition (a waiter queued, a
	// metric moved): past it the test fails.
	waitTimeout = 5 * time.Second
)

// Generator drives lock traffic through one dlock.Client. The steps are
// separate methods so that a test can wrap one in its own context (a span,
// say) and read its metrics between them. Its methods fail the test, with
// t.Fatal, when the traffic itself goes wrong.
type Generator struct {
	t   testing.TB
	srv *redistest.Server
	rdb *redis.Client
	obs dlock.Observer
	// Locks is the client the traffic goes through, reporting to the
	// observer under test.
	Locks *dlock.Client
}

// Start starts a Redis server for t and a dlock.Client on it that reports
// to obs. The client, its connection and the server are closed in
// t.Cleanup, the client first.
func Start(t testing.TB, obs dlock.Observer) *Generator {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	locks, err := dlock.New(rdb, dlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locks.Close() })
	return &Generator{t: t, srv: srv, rdb: rdb, obs: obs, Locks: locks}
}

// Orders locks "order:0", "order:1" and "order:2" with Do under ctx, one
// after another, and holds each for Hold. In group "order" with mode lock
// this makes 3 attempts, 3 acquisitions (each with a short wait), 3 holds
// of Hold or a little more and 3 releases.
func (g *Generator) Orders(ctx context.Context) {
	g.t.Helper()
	for i := range 3 {
		err := g.Locks.Do(ctx, fmt.Sprintf("order:%d", i), func(context.Context) error {
			time.Sleep(Hold) // the work under the lock
			return nil
		})
		if err != nil {
			g.t.Fatal(err)
		}
	}
}

// Contend makes "invoice:7" contended. A holder takes it; a TryLock fails
// (trylock, not_obtained); a second Lock queues behind the holder. Once the
// queue holds it, pending, which reads the test's count of acquisitions
// pending in group "invoice", must report 1, or the test fails. After Wait
// more, the holder re-enters the lock (one re-entry) and releases both
// holds, and the waiter gets the lock and releases it. In group "invoice"
// that makes 2 lock acquisitions, one of them waiting Wait or more, 3
// releases (2 of them last Unlocks, which record a hold time; the inner
// one records none) and 1 re-entry, with nothing left pending.
func (g *Generator) Contend(pending func() float64) {
	g.t.Helper()
	ctx := context.Background()
	held, err := g.Locks.Lock(ctx, "invoice:7")
	if err != nil {
		g.t.Fatal(err)
	}
	if _, err := g.Locks.TryLock(ctx, "invoice:7"); !errors.Is(err, dlock.ErrNotObtained) {
		g.t.Fatalf("TryLock = %v", err)
	}
	got := make(chan error, 1)
	go func() {
		w, err := g.Locks.Lock(ctx, "invoice:7")
		if err == nil {
			err = w.Unlock(ctx)
		}
		got <- err
	}()
	testutil.WaitUntil(g.t, waitTimeout, "the waiter to queue", func() bool {
		return g.rdb.ZCard(ctx, "dlock:{invoice:7}:queue").Val() == 1
	})
	if n := pending(); n != 1 {
		g.t.Errorf("acquisitions pending in group invoice while one waits = %v, want 1", n)
	}
	time.Sleep(Wait) // make the wait measurable
	inner, err := g.Locks.Lock(held.Context(), "invoice:7")
	if err != nil {
		g.t.Fatal(err)
	}
	if err := inner.Unlock(ctx); err != nil {
		g.t.Fatal(err)
	}
	if err := held.Unlock(ctx); err != nil {
		g.t.Fatal(err)
	}
	if err := <-got; err != nil {
		g.t.Fatal(err)
	}
}

// RenewAndLose makes the watchdog renew a lock, then lets another lock
// expire. renewals and lost read the test's metrics: the count of renewals
// with outcome renewed, and of losses with reason expired, both in group
// "job". RenewAndLose waits until renewals reports 2 or more, then until
// lost reports 1, and fails the test if either takes over 5 seconds; so a
// metric that stops moving fails the test. In group "job" that makes 2
// acquisitions and 2 releases, 2 or more renewals and 1 loss.
func (g *Generator) RenewAndLose(renewals, lost func() float64) {
	g.t.Helper()
	ctx := context.Background()
	renewed, err := g.Locks.Lock(ctx, "job:r", dlock.WithTTL(renewedTTL))
	if err != nil {
		g.t.Fatal(err)
	}
	testutil.WaitUntil(g.t, waitTimeout, "two renewals", func() bool { return renewals() >= 2 })
	if err := renewed.Unlock(ctx); err != nil {
		g.t.Fatal(err)
	}
	short, err := g.Locks.Lock(ctx, "job:s", dlock.WithTTL(shortTTL), dlock.WithoutRenewal())
	if err != nil {
		g.t.Fatal(err)
	}
	testutil.Receive(g.t, short.Done(), waitTimeout, "the semaphore's permit to be lost")
	testutil.WaitUntil(g.t, waitTimeout, "the loss to be counted", func() bool { return lost() == 1 })
	_ = short.Unlock(ctx)
}

// Shared is the name Kinds gives a lock, a semaphore and an RWMutex at
// once; its group is "shared".
const Shared = "shared:1"

// KindCounts is what Kinds makes in group "shared", by kind: acquisitions
// (mode lock, outcome acquired) and releases (outcome released). The
// semaphore's third acquisition is the permit left to expire.
var KindCounts = map[string]struct{ Acquired, Released float64 }{
	"lock": {1, 1}, "semaphore": {3, 2}, "rwmutex": {1, 1},
}

// Kinds takes a lock, a semaphore and an RWMutex all named Shared, so that
// only the kind tells their metrics apart. The metrics are read by kind
// ("lock", "semaphore" or "rwmutex") in group "shared": pending, the count
// of acquisitions pending; renewals, of renewals with outcome renewed; and
// lost, of losses with reason expired. Kinds waits until pending reports 1
// for the semaphore while a second Acquire waits for its only permit,
// until renewals reports 1 or more for the RWMutex, and until lost reports
// 1 for a semaphore's permit whose lease ran out, and fails the test if
// any takes over 5 seconds. In group "shared" that makes the acquisitions
// and releases of KindCounts, 1 hold of the lock, and nothing left
// pending.
func (g *Generator) Kinds(pending, renewals, lost func(kind string) float64) {
	g.t.Helper()
	ctx := context.Background()
	if err := g.Locks.Do(ctx, Shared, func(context.Context) error { return nil }); err != nil {
		g.t.Fatal(err)
	}
	sem := g.Locks.Semaphore(Shared, 1)
	held, err := sem.Acquire(ctx, 1)
	if err != nil {
		g.t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		w, err := sem.Acquire(ctx, 1)
		if err == nil {
			err = w.Unlock(ctx)
		}
		got <- err
	}()
	testutil.WaitUntil(g.t, waitTimeout, "the semaphore's waiter to be pending", func() bool { return pending("semaphore") == 1 })
	if err := held.Unlock(ctx); err != nil {
		g.t.Fatal(err)
	}
	if err := <-got; err != nil {
		g.t.Fatal(err)
	}
	read, err := g.Locks.RWMutex(Shared).RLock(ctx, dlock.WithTTL(renewedTTL))
	if err != nil {
		g.t.Fatal(err)
	}
	testutil.WaitUntil(g.t, waitTimeout, "the RWMutex's renewal", func() bool { return renewals("rwmutex") >= 1 })
	if err := read.Unlock(ctx); err != nil {
		g.t.Fatal(err)
	}
	short, err := sem.Acquire(ctx, 1, dlock.WithTTL(shortTTL), dlock.WithoutRenewal())
	if err != nil {
		g.t.Fatal(err)
	}
	testutil.Receive(g.t, short.Done(), waitTimeout, "the semaphore's permit to be lost")
	testutil.WaitUntil(g.t, waitTimeout, "the semaphore's loss to be counted", func() bool { return lost("semaphore") == 1 })
	// No Unlock: the permit's lease may not have run out in Redis yet, so
	// its outcome (released or not_held) would depend on timing.
}

// Held takes locks in group "held" and ends each hold another way: a
// plain Unlock; an Unlock after the Client's Close (which reports the lock
// lost, and leaves its key for the Unlock to remove); an Unlock that fails
// (the lock is given up) and is tried again and succeeds; Do, once plainly
// and once with a release that fails; a loss found by the watchdog (the
// lease runs out unrenewed), then Unlock; a re-entry and its two Unlocks;
// a Semaphore's hold of 2 permits; a lock removed from Redis, found gone
// by a renewal, then re-entered (which fails) and Unlock; a lock granted
// in the degraded mode, Redis being down. held reads the test's gauge of
// locks held (by kind, in group "held"): Held fails the test unless it
// reads 1 while each lock is held and 0 after each hold ended. The losses
// and failed releases it makes are HeldLosses and HeldReleaseErrors.
func (g *Generator) Held(held func(kind string) float64) {
	g.t.Helper()
	ctx := context.Background()
	want := func(kind string, n float64, when string) {
		g.t.Helper()
		if got := held(kind); got != n {
			g.t.Errorf("locks held (%s) %s = %v, want %v", kind, when, got, n)
		}
	}
	lock := func(c *dlock.Client, key string, opts ...dlock.LockOption) *dlock.Lock {
		g.t.Helper()
		l, err := c.Lock(ctx, key, opts...)
		if err != nil {
			g.t.Fatal(err)
		}
		want("lock", 1, "while "+key+" is held")
		return l
	}

	if err := lock(g.Locks, "held:plain").Unlock(ctx); err != nil {
		g.t.Fatal(err)
	}
	want("lock", 0, "after Unlock")

	// Its own Client, as Close ends it; the deferred Unlock of a handler
	// that closed it.
	closing, err := dlock.New(g.rdb, dlock.WithObserver(g.obs))
	if err != nil {
		g.t.Fatal(err)
	}
	l := lock(closing, "held:closed")
	if err := closing.Close(); err != nil {
		g.t.Fatal(err)
	}
	_ = l.Unlock(ctx) // released: Close left the key
	want("lock", 0, "after Close and Unlock")

	// Beside an Observer of the application's that panics in Lost: Close
	// ends two locks, and the panic for one must not hide the other.
	closing, err = dlock.New(g.rdb, dlock.WithObserver(dlock.Observers(panicOnLost{}, g.obs)))
	if err != nil {
		g.t.Fatal(err)
	}
	lock(closing, "held:closed-a")
	if _, err := closing.Lock(ctx, "held:closed-b"); err != nil {
		g.t.Fatal(err)
	}
	func() {
		defer func() { _ = recover() }()
		_ = closing.Close()
	}()
	want("lock", 0, "after Close, its other Observer panicking in Lost")

	// A release whose reply is lost: given up, then released by a retry.
	failing, fail := failingReleases(g.t, g.rdb.Options().Addr, g.obs)
	l = lock(failing, "held:retried")
	fail()
	if err := l.Unlock(ctx); err == nil {
		g.t.Fatal("Unlock with its release failing = nil")
	}
	want("lock", 0, "after a failed Unlock")
	if err := l.Unlock(ctx); err != nil {
		g.t.Fatalf("Unlock again = %v", err)
	}
	want("lock", 0, "after a failed Unlock and its retry")

	err = g.Locks.Do(ctx, "held:do", func(context.Context) error { want("lock", 1, "in Do"); return nil })
	if err != nil {
		g.t.Fatal(err)
	}
	want("lock", 0, "after Do")
	err = failing.Do(ctx, "held:do-failing", func(context.Context) error { want("lock", 1, "in Do"); fail(); return nil })
	if err == nil {
		g.t.Fatal("Do with its release failing = nil")
	}
	want("lock", 0, "after Do with a failed release")

	l = lock(g.Locks, "held:expired", dlock.WithTTL(shortTTL), dlock.WithoutRenewal())
	// Its Context ends before the Observer hears of the loss.
	testutil.WaitUntil(g.t, waitTimeout, "the loss to be counted", func() bool { return held("lock") == 0 })
	_ = l.Unlock(ctx) // nil if the key outlived the lease trusted, within the drift margin
	want("lock", 0, "after the lock was lost and unlocked")

	l = lock(g.Locks, "held:reentered")
	inner, err := g.Locks.Lock(l.Context(), "held:reentered")
	if err != nil {
		g.t.Fatal(err)
	}
	want("lock", 1, "after a re-entry")
	if err := inner.Unlock(ctx); err != nil {
		g.t.Fatal(err)
	}
	want("lock", 1, "after the inner Unlock")
	if err := l.Unlock(ctx); err != nil {
		g.t.Fatal(err)
	}
	want("lock", 0, "after the outer Unlock")

	permits, err := g.Locks.Semaphore("held:sem", 3).Acquire(ctx, 2)
	if err != nil {
		g.t.Fatal(err)
	}
	want("semaphore", 1, "while 2 permits are held")
	if err := permits.Unlock(ctx); err != nil {
		g.t.Fatal(err)
	}
	want("semaphore", 0, "after the permits' Unlock")

	// Removed from Redis behind its holder's back (an operator's DEL): the
	// next renewal finds it gone, well before its lease would run out.
	l = lock(g.Locks, "held:deleted", dlock.WithTTL(renewedTTL))
	if err := g.rdb.Del(ctx, "dlock:{held:deleted}").Err(); err != nil {
		g.t.Fatal(err)
	}
	testutil.WaitUntil(g.t, waitTimeout, "the loss to be counted", func() bool { return held("lock") == 0 })
	if _, err := g.Locks.Lock(l.Context(), "held:deleted"); !errors.Is(err, dlock.ErrLockLost) {
		g.t.Fatalf("re-entry of a lost lock = %v, want ErrLockLost", err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		g.t.Fatalf("Unlock of a lock removed from Redis = %v, want ErrNotHeld", err)
	}
	want("lock", 0, "after the removed lock's Unlock")

	// Granted in-process only, Redis being down (the degraded mode): held
	// all the same.
	degraded := degradedClient(g.t, g.obs)
	l = lock(degraded, "held:degraded")
	if !l.Degraded() {
		g.t.Fatal("Lock with Redis down in the degraded mode: not degraded")
	}
	if err := l.Unlock(ctx); err != nil {
		g.t.Fatal(err)
	}
	want("lock", 0, "after the degraded lock's Unlock")
}

// HeldLosses are the losses Held makes in group "held", kind "lock", by
// reason: three locks the Client's Close ends, two failed releases (an
// Unlock, a Do), a lease run out unrenewed and a lock a renewal found
// removed. That renewal is Held's only one with outcome not_held; the
// lost lock is then re-entered, Held's only re-entry that fails.
var HeldLosses = map[string]float64{"closed": 3, "release_failed": 2, "expired": 1, "not_held": 1}

// HeldReleaseErrors is the number of Unlock calls (a Do's included) that
// Held makes fail, in group "held", kind "lock": their outcome is error.
const HeldReleaseErrors = 2

// degradedClient returns a Client in the degraded mode (LocalFallback)
// reporting to obs, whose Redis is down: its locks are granted in-process
// only.
func degradedClient(t testing.TB, obs dlock.Observer) *dlock.Client {
	t.Helper()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := dlock.New(rdb, dlock.WithObserver(obs), dlock.WithDegradedMode(dlock.LocalFallback))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	srv.Stop(t)
	return c
}

// panicOnLost is an Observer whose Lost panics.
type panicOnLost struct{ dlock.NopObserver }

func (panicOnLost) Lost(dlock.LostEvent) { panic("observer bug") }

// failingReleases returns a Client on addr reporting to obs, and a function
// after which its next script call fails, unanswered, as a release whose
// reply was lost does.
func failingReleases(t testing.TB, addr string, obs dlock.Observer) (*dlock.Client, func()) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	var armed atomic.Bool
	rdb.AddHook(failScripts{armed: &armed})
	c, err := dlock.New(rdb, dlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, func() { armed.Store(true) }
}

// failScripts fails the next script call once armed, after it ran.
type failScripts struct {
	testutil.PassHook
	armed *atomic.Bool
}

func (f failScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if n := cmd.Name(); (n == "evalsha" || n == "eval") && f.armed.CompareAndSwap(true, false) {
			err = errReplyLost
			cmd.SetErr(err)
		}
		return err
	}
}

var errReplyLost = errors.New("reply lost")

// CheckHolds fails the test unless the hold histogram of group "order"
// (count and sum in seconds) shows the 3 holds of about Hold that Orders
// made.
func (g *Generator) CheckHolds(count, sum float64) {
	g.t.Helper()
	if count != 3 || sum < 3*Hold.Seconds() || sum > 3*(Hold+time.Second).Seconds() {
		g.t.Errorf("hold histogram of order: count %v, sum %v s; want 3 holds of about %v", count, sum, Hold)
	}
}

// CheckOrderWaits fails the test unless the wait histogram of group
// "order", mode lock, outcome acquired (count and sum in seconds) shows the
// 3 short waits that Orders made: nothing waited for those locks, so their
// sum is above zero and well under a second.
func (g *Generator) CheckOrderWaits(count, sum float64) {
	g.t.Helper()
	if count != 3 || sum <= 0 || sum > 1 {
		g.t.Errorf("wait histogram of order: count %v, sum %v s; want 3 short waits", count, sum)
	}
}

// CheckInvoiceWaits fails the test unless the wait histogram of group
// "invoice", mode lock, outcome acquired (count and sum in seconds) shows
// the 2 acquisitions Contend made, one of them waiting Wait or more.
func (g *Generator) CheckInvoiceWaits(count, sum float64) {
	g.t.Helper()
	if count != 2 || sum < Wait.Seconds() {
		g.t.Errorf("wait histogram of invoice: count %v, sum %v s; want 2 waits, one of %v or more", count, sum, Wait)
	}
}

// MaxGroups is the cap on groups a test of GroupedKeys sets (WithMaxGroups).
const MaxGroups = 2

// GroupBySlash is the key-group function a test of GroupedKeys sets
// (WithKeyGroup): a key's text before its first '/'.
func GroupBySlash(key string) string { return strings.SplitN(key, "/", 2)[0] }

// GroupedKeys locks and releases, one after another, keys of the groups a,
// b, c, a and d under GroupBySlash, and returns the acquisitions each
// group label must then count under a cap of MaxGroups: c and d come after
// the cap, so they count as "other".
func (g *Generator) GroupedKeys() (want map[string]float64) {
	g.t.Helper()
	for _, key := range []string{"a/1", "b/1", "c/1", "a/2", "d/1"} {
		if err := g.Locks.Do(context.Background(), key, func(context.Context) error { return nil }); err != nil {
			g.t.Fatal(err)
		}
	}
	return map[string]float64{"a": 2, "b": 1, "other": 2}
}

// Observe makes an Observer with newObserver and takes one lock with Do on
// rdb through a Client that reports to it: the bad-input tests of both
// packages check that odd options give an error, or an Observer whose
// callbacks work. A panic comes back as an error.
func Observe(rdb redis.UniversalClient, newObserver func() (dlock.Observer, error)) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	obs, err := newObserver()
	if err != nil {
		return err
	}
	c, err := dlock.New(rdb, dlock.WithObserver(obs))
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Do(context.Background(), "job:1", func(context.Context) error { return nil })
}

// CallEach calls each of obs's callbacks once, directly, as a Client
// does: for an Observer that a Client cannot tell apart from a working one
// (the zero value of the type), or that it never calls (a nil pointer, which
// WithObserver drops). It returns the callbacks that panicked, as an error.
func CallEach(obs dlock.Observer) error {
	ctx := context.Background()
	var errs []error
	for name, call := range map[string]func(){
		"AcquireStart": func() { obs.AcquireStart(ctx, dlock.AcquireStartEvent{Key: "job:1"}) },
		"AcquireEnd":   func() { obs.AcquireEnd(ctx, dlock.AcquireEndEvent{Key: "job:1", Err: errors.New("x")}) },
		"Reenter":      func() { obs.Reenter(ctx, dlock.ReenterEvent{Key: "job:1", Level: 2}) },
		"ReleaseStart": func() { obs.ReleaseStart(ctx, dlock.ReleaseStartEvent{Key: "job:1", Level: 1}) },
		"ReleaseEnd":   func() { obs.ReleaseEnd(ctx, dlock.ReleaseEndEvent{Key: "job:1", Level: 1, Ended: true}) },
		"Renew":        func() { obs.Renew(dlock.RenewEvent{Key: "job:1"}) },
		"Lost":         func() { obs.Lost(dlock.LostEvent{Key: "job:1"}) },
	} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					errs = append(errs, fmt.Errorf("%s: panic: %v", name, p))
				}
			}()
			call()
		}()
	}
	return errors.Join(errs...)
}

// PermitKinds are the ways HeldPermits takes permits, by name: 2 of a
// Semaphore's 3 ("semaphore"), an RWMutex's read lock ("read") and its
// write lock ("write"); the kind of each is KindOf.
var PermitKinds = []string{"semaphore", "read", "write"}

// KindOf is the kind (label kind, attribute dlock.kind) of the permits
// PermitKinds names.
func KindOf(name string) string {
	if name == "semaphore" {
		return "semaphore"
	}
	return "rwmutex"
}

// takePermits takes the permits name (one of PermitKinds) of key on c.
func takePermits(ctx context.Context, c *dlock.Client, name, key string, opts ...dlock.LockOption) (*dlock.Lock, error) {
	switch name {
	case "semaphore":
		return c.Semaphore(key, 3).Acquire(ctx, 2, opts...)
	case "read":
		return c.RWMutex(key).RLock(ctx, opts...)
	default:
		return c.RWMutex(key).Lock(ctx, opts...)
	}
}

// HeldPermits is Held for permits: for each of PermitKinds it takes
// permits in group "held" and ends each hold another way: a plain Unlock;
// an Unlock after the Client's Close; an Unlock that fails and is tried
// again; a loss of the lease run out unrenewed, then Unlock; permits an
// operator took away (ForceRelease), found gone by a renewal, then
// Unlock; an Unlock with Redis gone. held reads the test's gauge of locks
// held, and holds the count of the hold-time histogram, by kind in group
// "held": HeldPermits fails the test unless held reads 1 while each hold
// is on and 0 after it ended, and holds moved by 1 for each hold ended by
// an Unlock Redis answered (0 for the last).
func (g *Generator) HeldPermits(held, holds func(kind string) float64) {
	g.t.Helper()
	ctx := context.Background()
	for _, name := range PermitKinds {
		kind := KindOf(name)
		want := func(n float64, when string) {
			g.t.Helper()
			if got := held(kind); got != n {
				g.t.Errorf("locks held (%s, %s) %s = %v, want %v", name, kind, when, got, n)
			}
		}
		recorded := holds(kind)
		wantHolds := func(n float64, when string) {
			g.t.Helper()
			recorded += n
			if got := holds(kind); got != recorded {
				g.t.Errorf("hold times recorded (%s, %s) %s = %v, want %v", name, kind, when, got, recorded)
			}
		}
		take := func(c *dlock.Client, key string, opts ...dlock.LockOption) *dlock.Lock {
			g.t.Helper()
			l, err := takePermits(ctx, c, name, key, opts...)
			if err != nil {
				g.t.Fatal(err)
			}
			want(1, "while "+key+" is held")
			return l
		}

		if err := take(g.Locks, "held:p-plain").Unlock(ctx); err != nil {
			g.t.Fatal(err)
		}
		want(0, "after Unlock")
		wantHolds(1, "after Unlock")

		closing, err := dlock.New(g.rdb, dlock.WithObserver(g.obs))
		if err != nil {
			g.t.Fatal(err)
		}
		l := take(closing, "held:p-closed")
		if err := closing.Close(); err != nil {
			g.t.Fatal(err)
		}
		want(0, "after Close")
		if err := l.Unlock(ctx); err != nil {
			g.t.Fatalf("Unlock after Close = %v", err)
		}
		want(0, "after Close and Unlock")
		wantHolds(1, "after Close and Unlock")

		failing, fail := failingReleases(g.t, g.rdb.Options().Addr, g.obs)
		l = take(failing, "held:p-retried")
		fail()
		if err := l.Unlock(ctx); err == nil {
			g.t.Fatal("Unlock with its release failing = nil")
		}
		want(0, "after a failed Unlock")
		wantHolds(0, "after a failed Unlock")
		if err := l.Unlock(ctx); err != nil {
			g.t.Fatalf("Unlock again = %v", err)
		}
		want(0, "after a failed Unlock and its retry")
		wantHolds(1, "after a failed Unlock and its retry")

		l = take(g.Locks, "held:p-expired", dlock.WithTTL(shortTTL), dlock.WithoutRenewal())
		testutil.WaitUntil(g.t, waitTimeout, "the loss to be counted", func() bool { return held(kind) == 0 })
		_ = l.Unlock(ctx) // nil if the holder outlived the lease trusted, within the drift margin
		want(0, "after the permits were lost and unlocked")
		wantHolds(1, "after the permits were lost and unlocked")

		l = take(g.Locks, "held:p-forced", dlock.WithTTL(shortTTL))
		if name == "semaphore" {
			err = g.Locks.Semaphore("held:p-forced", 3).ForceRelease(ctx, l.Token())
		} else {
			err = g.Locks.RWMutex("held:p-forced").ForceRelease(ctx, l.Token())
		}
		if err != nil {
			g.t.Fatal(err)
		}
		testutil.WaitUntil(g.t, waitTimeout, "the loss to be counted", func() bool { return held(kind) == 0 })
		if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			g.t.Fatalf("Unlock of permits taken away = %v, want ErrNotHeld", err)
		}
		want(0, "after the permits were taken away and unlocked")
		wantHolds(1, "after the permits were taken away and unlocked")
	}

	// Last: Redis gone during the release of each kind's hold.
	var ls []*dlock.Lock
	for _, name := range PermitKinds {
		l, err := takePermits(ctx, g.Locks, name, "held:p-gone-"+name)
		if err != nil {
			g.t.Fatal(err)
		}
		ls = append(ls, l)
	}
	before := map[string]float64{}
	for _, name := range PermitKinds {
		before[KindOf(name)] = holds(KindOf(name))
	}
	g.srv.Stop(g.t)
	for _, l := range ls {
		if err := l.Unlock(ctx); err == nil {
			g.t.Fatal("Unlock with Redis gone = nil")
		}
	}
	for kind, n := range before {
		if got := held(kind); got != 0 {
			g.t.Errorf("locks held (%s) after Unlock with Redis gone = %v, want 0", kind, got)
		}
		if got := holds(kind); got != n {
			g.t.Errorf("hold times recorded (%s) after Unlock with Redis gone = %v, want %v", kind, got, n)
		}
	}
}
