package dlock

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

// permitTaker takes permits of one kind named key: wait is Acquire (or
// RLock, Lock) rather than its Try form.
type permitTaker struct {
	name, kind string
	take       func(ctx context.Context, c *Client, key string, wait bool, opts ...LockOption) (*Lock, error)
}

// permitTakers are the ways to take permits: 2 of a semaphore of 3, an
// RWMutex's read lock and its write lock.
var permitTakers = []permitTaker{
	{"semaphore", "semaphore", func(ctx context.Context, c *Client, key string, wait bool, opts ...LockOption) (*Lock, error) {
		s := c.Semaphore(key, 3)
		if wait {
			return s.Acquire(ctx, 2, opts...)
		}
		return s.TryAcquire(ctx, 2, opts...)
	}},
	{"read", "rwmutex", func(ctx context.Context, c *Client, key string, wait bool, opts ...LockOption) (*Lock, error) {
		if wait {
			return c.RWMutex(key).RLock(ctx, opts...)
		}
		return c.RWMutex(key).TryRLock(ctx, opts...)
	}},
	{"write", "rwmutex", func(ctx context.Context, c *Client, key string, wait bool, opts ...LockOption) (*Lock, error) {
		if wait {
			return c.RWMutex(key).Lock(ctx, opts...)
		}
		return c.RWMutex(key).TryLock(ctx, opts...)
	}},
}

// forceRelease takes l's permits away, as an operator does.
func forceRelease(t *testing.T, c *Client, kind string, l *Lock) {
	t.Helper()
	var err error
	if kind == "rwmutex" {
		err = c.RWMutex(l.Key()).ForceRelease(context.Background(), l.Token())
	} else {
		err = c.Semaphore(l.Key(), 3).ForceRelease(context.Background(), l.Token())
	}
	if err != nil {
		t.Fatal(err)
	}
}

// checkPermitEvents fails t unless every event rec heard names key and
// kind, every acquisition and release that started ended, granted holds
// were granted and each ended once (lost of them by a Lost, the others by
// a ReleaseEnd with Ended), and a hold time was recorded (a level-1
// ReleaseEnd Redis answered) holdTimes times.
func checkPermitEvents(t *testing.T, rec *recorder, key, kind string, granted, lost, holdTimes int) {
	t.Helper()
	rec.checkEnded(t, "the Observer")
	g, ended, l := rec.holdEnds()
	if g != granted || ended != granted-lost || l != lost {
		t.Errorf("granted %d, ReleaseEnd with Ended %d, Lost %d; want %d, %d, %d", g, ended, l, granted, granted-lost, lost)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	times := 0
	for _, e := range rec.releases {
		if e.Level == 1 && e.Outcome != ReleaseError {
			times++
		}
	}
	if times != holdTimes {
		t.Errorf("%d hold times recorded, want %d (releases %+v)", times, holdTimes, rec.releases)
	}
	named := rec.keyKinds()
	for _, e := range rec.renews {
		named = append(named, "renew "+e.Key+" "+e.Kind)
	}
	for _, ev := range named {
		if !strings.HasSuffix(ev, " "+key+" "+kind) {
			t.Errorf("event %q, want key %q kind %q", ev, key, kind)
		}
	}
	if len(rec.reenters) != 0 {
		t.Errorf("re-entries of permits reported: %+v", rec.reenters)
	}
}

// Each way a hold of permits (a Semaphore's, an RWMutex's read or write
// lock) can end reaches the Observer once, as a lock's does
// (TestReleaseEndedOncePerHold): a gauge of held locks counting by the
// events goes back to 0, and a hold time is recorded once at most.
func TestObserverPermitHoldsEndOnce(t *testing.T) {
	ctx := context.Background()
	errFail := errors.New("reply lost")
	type env struct {
		c, other                            *Client
		srv                                 *redistest.Server
		failBefore, failAfter, panicRelease func()
		held                                *heldCall // holds back a release once armed
		releaseHeld                         func()    // lets it go
	}
	cases := []struct {
		name                     string
		granted, lost, holdTimes int
		reason                   LostReason // of the loss, if lost
		run                      func(t *testing.T, p permitTaker, e env)
	}{
		{"unlock", 1, 0, 1, LostNotHeld, func(t *testing.T, p permitTaker, e env) {
			l := mustTake(t, p, e.c)
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"unlock after close", 1, 1, 1, LostClosed, func(t *testing.T, p permitTaker, e env) {
			l := mustTake(t, p, e.c)
			e.c.Close()
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"reply lost, unlock again", 1, 1, 1, LostReleaseFailed, func(t *testing.T, p permitTaker, e env) {
			l := mustTake(t, p, e.c)
			e.failAfter()
			if err := l.Unlock(ctx); !errors.Is(err, errFail) {
				t.Fatalf("Unlock = %v", err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock again = %v", err)
			}
		}},
		{"not sent, unlock again", 1, 1, 1, LostReleaseFailed, func(t *testing.T, p permitTaker, e env) {
			l := mustTake(t, p, e.c)
			e.failBefore()
			if err := l.Unlock(ctx); !errors.Is(err, errFail) {
				t.Fatalf("Unlock = %v", err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock again = %v", err)
			}
		}},
		{"redis gone during release", 1, 1, 0, LostReleaseFailed, func(t *testing.T, p permitTaker, e env) {
			l := mustTake(t, p, e.c)
			e.srv.Stop(t)
			if err := l.Unlock(ctx); err == nil {
				t.Fatal("Unlock with Redis gone = nil")
			}
		}},
		{"close during unlock", 1, 0, 1, LostNotHeld, func(t *testing.T, p permitTaker, e env) {
			unlocked := unlockHeldBack(mustTake(t, p, e.c), e.held)
			e.c.Close()
			e.releaseHeld()
			if err := testutil.Receive(t, unlocked, 5*time.Second, "Unlock"); err != nil {
				t.Fatalf("Unlock = %v", err)
			}
		}},
		{"close during unlock, release fails", 1, 1, 0, LostReleaseFailed, func(t *testing.T, p permitTaker, e env) {
			e.held.err = errFail
			unlocked := unlockHeldBack(mustTake(t, p, e.c), e.held)
			e.c.Close()
			e.releaseHeld()
			if err := testutil.Receive(t, unlocked, 5*time.Second, "Unlock"); !errors.Is(err, errFail) {
				t.Fatalf("Unlock = %v", err)
			}
		}},
		{"close during unlock, lease runs out", 1, 1, 1, LostClosed, func(t *testing.T, p permitTaker, e env) {
			l := mustTake(t, p, e.c, WithTTL(250*time.Millisecond))
			unlocked := unlockHeldBack(l, e.held)
			e.c.Close()
			testutil.Receive(t, l.Done(), 5*time.Second, "the loss at the lease's end")
			e.releaseHeld()
			_ = testutil.Receive(t, unlocked, 5*time.Second, "Unlock") // nil if the holder outlived the lease trusted
		}},
		{"release panics", 1, 1, 0, LostReleaseFailed, func(t *testing.T, p permitTaker, e env) {
			l := mustTake(t, p, e.c)
			e.panicRelease()
			mustPanic(t, "Unlock", func() { _ = l.Unlock(ctx) })
		}},
		{"expired, then unlock", 1, 1, 1, LostExpired, func(t *testing.T, p permitTaker, e env) {
			l := mustTake(t, p, e.c, WithTTL(250*time.Millisecond), WithoutRenewal())
			<-l.Done()
			_ = l.Unlock(ctx) // nil if the holder is still there, within the drift margin
		}},
		{"force released, found by a renewal", 1, 1, 1, LostNotHeld, func(t *testing.T, p permitTaker, e env) {
			l := mustTake(t, p, e.c, WithTTL(300*time.Millisecond))
			forceRelease(t, e.other, p.kind, l)
			testutil.Receive(t, l.Done(), 5*time.Second, "the loss")
			if err := l.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
				t.Fatalf("Unlock = %v, want ErrNotHeld", err)
			}
		}},
		{"force released, found by unlock", 1, 1, 1, LostNotHeld, func(t *testing.T, p permitTaker, e env) {
			l := mustTake(t, p, e.c)
			forceRelease(t, e.other, p.kind, l)
			if err := l.Unlock(ctx); !errors.Is(err, ErrLockLost) {
				t.Fatalf("Unlock = %v, want ErrLockLost", err)
			}
		}},
		{"force released, found by extend", 1, 1, 0, LostNotHeld, func(t *testing.T, p permitTaker, e env) {
			l := mustTake(t, p, e.c)
			forceRelease(t, e.other, p.kind, l)
			if err := l.Extend(ctx, time.Minute); !errors.Is(err, ErrLockLost) {
				t.Fatalf("Extend = %v, want ErrLockLost", err)
			}
		}},
		{"force released, found by ttl", 1, 1, 0, LostNotHeld, func(t *testing.T, p permitTaker, e env) {
			l := mustTake(t, p, e.c)
			forceRelease(t, e.other, p.kind, l)
			if _, err := l.TTL(ctx); !errors.Is(err, ErrLockLost) {
				t.Fatalf("TTL = %v, want ErrLockLost", err)
			}
		}},
		{"extended, then unlock", 1, 0, 1, LostNotHeld, func(t *testing.T, p permitTaker, e env) {
			l := mustTake(t, p, e.c)
			if err := l.Extend(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}
			if _, err := l.TTL(ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"not obtained", 0, 0, 0, LostNotHeld, func(t *testing.T, p permitTaker, e env) {
			w := mustTakeAll(t, p, e.other)
			defer w.Unlock(ctx)
			if _, err := p.take(ctx, e.c, "k", false); !errors.Is(err, ErrNotObtained) {
				t.Fatalf("Try = %v, want ErrNotObtained", err)
			}
		}},
		{"waiter gives up", 0, 0, 0, LostNotHeld, func(t *testing.T, p permitTaker, e env) {
			w := mustTakeAll(t, p, e.other)
			defer w.Unlock(ctx)
			wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			if _, err := p.take(wctx, e.c, "k", true); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("waiter = %v, want DeadlineExceeded", err)
			}
		}},
		{"closed while waiting", 0, 0, 0, LostNotHeld, func(t *testing.T, p permitTaker, e env) {
			w := mustTakeAll(t, p, e.other)
			defer w.Unlock(ctx)
			got := make(chan error, 1)
			go func() { _, err := p.take(ctx, e.c, "k", true); got <- err }()
			waitUntil(t, 5*time.Second, "the waiter to queue", func() bool {
				return e.other.be.(*node).rdb.ZCard(ctx, semKeys(&Semaphore{c: e.other, name: "k", capacity: 3, kind: p.kind}).queue).Val() == 1
			})
			e.c.Close()
			if err := testutil.Receive(t, got, 5*time.Second, "the waiter"); !errors.Is(err, ErrClosed) {
				t.Fatalf("waiter = %v, want ErrClosed", err)
			}
		}},
	}
	for _, p := range permitTakers {
		for _, tc := range cases {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				srv := redistest.Start(t)
				rec := &recorder{}
				failB, armB := failNext(errFail)
				failA, armA := failNext(errFail)
				armed := new(atomic.Bool)
				held := newHeldCall(nil)
				var releaseOnce sync.Once
				releaseHeld := func() { releaseOnce.Do(held.release) }
				h := scriptHook{
					before: map[string]func() error{permitsReleaseEval.sha: func() error {
						if armed.CompareAndSwap(true, false) {
							panic("hook bug")
						}
						if err := held.run(); err != nil {
							return err
						}
						return failB()
					}},
					after: map[string]func() error{permitsReleaseEval.sha: failA},
				}
				c, rdb := hookedClient(t, srv.Addr(), h, WithObserver(rec))
				t.Cleanup(releaseHeld) // before Close, which would wait for it
				for _, s := range []*redis.Script{permitsAcquireScript, permitsReleaseScript, permitsExtendScript, permitsTTLScript} {
					if err := s.Load(ctx, rdb).Err(); err != nil {
						t.Fatal(err)
					}
				}
				other := newClientOn(t, srv.Client(t))
				tc.run(t, p, env{c: c, other: other, srv: srv, failBefore: armB, failAfter: armA, panicRelease: func() { armed.Store(true) }, held: held, releaseHeld: releaseHeld})
				if tc.lost > 0 { // a loss the watchdog found is reported after the Context ends
					waitUntil(t, 5*time.Second, "the loss to be reported", func() bool { _, _, lost := rec.holdEnds(); return lost >= tc.lost })
				}
				checkPermitEvents(t, rec, "k", p.kind, tc.granted, tc.lost, tc.holdTimes)
				rec.mu.Lock()
				defer rec.mu.Unlock()
				for _, e := range rec.losts {
					if e.Reason != tc.reason {
						t.Errorf("lost with reason %v, want %v (cause %v)", e.Reason, tc.reason, e.Cause)
					}
				}
			})
		}
	}
}

// mustTake takes p's permits named "k" on c.
func mustTake(t *testing.T, p permitTaker, c *Client, opts ...LockOption) *Lock {
	t.Helper()
	l, err := p.take(context.Background(), c, "k", true, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// mustTakeAll takes every permit of p's kind named "k" on c, so that p
// waits.
func mustTakeAll(t *testing.T, p permitTaker, c *Client) *Lock {
	t.Helper()
	l, err := takeAll(p, c, true)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// takeAll takes every permit of p's kind named "k" on c, waiting for them
// if wait is set.
func takeAll(p permitTaker, c *Client, wait bool) (*Lock, error) {
	ctx := context.Background()
	if p.kind == "rwmutex" {
		if wait {
			return c.RWMutex("k").Lock(ctx)
		}
		return c.RWMutex("k").TryLock(ctx)
	}
	if wait {
		return c.Semaphore("k", 3).Acquire(ctx, 3)
	}
	return c.Semaphore("k", 3).TryAcquire(ctx, 3)
}

// A panicking Observer method on the paths of permits (Semaphore, RWMutex)
// is handled as on a lock's: the permits granted to a call whose
// AcquireEnd panicked are given back, and the Observers after (or before)
// the one that panicked still hear every event, so their gauges go back to
// 0 and their spans end.
func TestObserverPanicsOnPermitPaths(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name          string
		granted, lost int
		run           func(t *testing.T, p permitTaker, c, other *Client, rec *recorder)
		panicky       func() (Observer, func())
	}{
		{"AcquireEnd", 1, 0, func(t *testing.T, p permitTaker, c, other *Client, rec *recorder) {
			mustPanic(t, "AcquireEnd", func() { _, _ = p.take(ctx, c, "k", true) })
			notKept(t, 5*time.Second, "taking every permit", func(ctx context.Context) (*Lock, error) {
				if p.kind == "rwmutex" {
					return other.RWMutex("k").Lock(ctx)
				}
				return other.Semaphore("k", 3).Acquire(ctx, 3)
			})
		}, func() (Observer, func()) { o := &panicOnGrant{}; return o, func() { o.armed.Store(true) } }},
		{"AcquireEnd and ReleaseStart", 1, 1, func(t *testing.T, p permitTaker, c, other *Client, rec *recorder) {
			mustPanic(t, "AcquireEnd", func() { _, _ = p.take(ctx, c, "k", true) })
		}, func() (Observer, func()) { o := &panicOnGrantAndRelease{}; return o, func() { o.armed.Store(true) } }},
		{"AcquireStart", 1, 0, func(t *testing.T, p permitTaker, c, other *Client, rec *recorder) {
			mustPanic(t, "AcquireStart", func() { _, _ = p.take(ctx, c, "k", true) })
			if err := mustTake(t, p, c).Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}, func() (Observer, func()) { o := &panicOnStarts{}; return o, func() { o.acquire.Store(true) } }},
		{"ReleaseStart", 1, 0, func(t *testing.T, p permitTaker, c, other *Client, rec *recorder) {
			l := mustTake(t, p, c)
			mustPanic(t, "ReleaseStart", func() { _ = l.Unlock(ctx) })
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}, func() (Observer, func()) { o := &panicOnStarts{}; return o, func() { o.release.Store(true) } }},
		{"ReleaseEnd", 1, 0, func(t *testing.T, p permitTaker, c, other *Client, rec *recorder) {
			l := mustTake(t, p, c)
			mustPanic(t, "ReleaseEnd", func() { _ = l.Unlock(ctx) })
		}, func() (Observer, func()) { o := &panicOnReleaseEnd{}; return o, func() { o.armed.Store(true) } }},
		{"Lost at close", 2, 2, func(t *testing.T, p permitTaker, c, other *Client, rec *recorder) {
			mustTake(t, p, c)
			if _, err := p.take(ctx, c, "k2", true); err != nil {
				t.Fatal(err)
			}
			mustPanic(t, "Lost", func() { _ = c.Close() })
		}, func() (Observer, func()) { return panicOnEvents{}, func() {} }},
		{"Lost at unlock", 1, 1, func(t *testing.T, p permitTaker, c, other *Client, rec *recorder) {
			l := mustTake(t, p, c)
			forceRelease(t, other, p.kind, l)
			mustPanic(t, "Lost", func() { _ = l.Unlock(ctx) })
		}, func() (Observer, func()) { return panicOnEvents{}, func() {} }},
		{"Lost at expiry", 2, 2, func(t *testing.T, p permitTaker, c, other *Client, rec *recorder) {
			a := mustTake(t, p, c, WithTTL(250*time.Millisecond), WithoutRenewal())
			<-a.Done()
			b, err := p.take(ctx, c, "k2", true, WithTTL(250*time.Millisecond), WithoutRenewal())
			if err != nil {
				t.Fatal(err)
			}
			<-b.Done()
		}, func() (Observer, func()) { return panicOnEvents{}, func() {} }},
		{"Renew", 1, 1, func(t *testing.T, p permitTaker, c, other *Client, rec *recorder) {
			// Renewed every 200 ms: a loaded machine does not lose it first.
			l := mustTake(t, p, c, WithTTL(600*time.Millisecond))
			waitUntil(t, 5*time.Second, "two renewals", func() bool {
				return rec.count(func(r *recorder) int { return len(r.renews) }) >= 2
			})
			forceRelease(t, other, p.kind, l)
			testutil.Receive(t, l.Done(), 5*time.Second, "the loss")
			_ = l.Unlock(ctx)
		}, func() (Observer, func()) { return &panicOnRenew{}, func() {} }},
	}
	for _, p := range permitTakers {
		for _, tc := range cases {
			for _, first := range []bool{true, false} {
				order := map[bool]string{true: "first", false: "last"}[first]
				t.Run(p.name+"/"+tc.name+"/"+order, func(t *testing.T) {
					rec := &recorder{}
					o, arm := tc.panicky()
					obs := Observers(o, rec)
					if !first {
						obs = Observers(rec, o)
					}
					c, rdb, _ := newTestClient(t, WithObserver(obs))
					other := newClientOn(t, rdb)
					arm()
					tc.run(t, p, c, other, rec)
					if tc.lost > 0 {
						waitUntil(t, 5*time.Second, "the losses to be reported", func() bool { _, _, lost := rec.holdEnds(); return lost >= tc.lost })
					}
					rec.checkEnded(t, "the other Observer")
					g, ended, lost := rec.holdEnds()
					if g != tc.granted || ended != tc.granted-tc.lost || lost != tc.lost {
						t.Errorf("granted %d, ReleaseEnd with Ended %d, Lost %d; want %d, %d, %d", g, ended, lost, tc.granted, tc.granted-tc.lost, tc.lost)
					}
				})
			}
		}
	}
}

// The log records of permits (a Semaphore's, an RWMutex's) have the keys
// of a lock's records of the same message, so that one log query reads
// both: only the value of kind tells them apart.
func TestPermitLogRecordsHaveTheLockKeys(t *testing.T) {
	ctx := context.Background()
	// tryAll takes every permit (or the lock) without waiting.
	keysByMsg := func(t *testing.T, take func(c *Client, wait bool, opts ...LockOption) (*Lock, error), tryAll func(c *Client) (*Lock, error)) map[string]string {
		var buf syncBuffer
		c, rdb, _ := newTestClient(t, WithLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))))
		other := newClientOn(t, rdb)
		l, err := take(c, true)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		all, err := tryAll(other)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := take(c, false); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("Try while all is held = %v", err)
		}
		if err := all.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		short, err := take(c, true, WithTTL(250*time.Millisecond), WithoutRenewal())
		if err != nil {
			t.Fatal(err)
		}
		<-short.Done()
		waitUntil(t, 5*time.Second, "the loss to be logged", func() bool { return strings.Contains(buf.String(), "dlock: lock lost") })
		// The Client trusts a little less of the lease than Redis keeps:
		// once Redis has let the hold go too, the Unlock finds it gone (a
		// record with an error) on every run, not only on the slow ones.
		waitUntil(t, 5*time.Second, "Redis to let the lost hold go", func() bool {
			l, err := tryAll(other)
			if errors.Is(err, ErrNotObtained) {
				return false
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			return true
		})
		if err := short.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("Unlock of a hold Redis let go = %v, want ErrNotHeld", err)
		}
		out := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log record %q: %v", line, err)
			}
			var keys []string
			for k := range rec {
				if k != "time" {
					keys = append(keys, k)
				}
			}
			sort.Strings(keys)
			msg, _ := rec["msg"].(string)
			if _, ok := rec["error"]; ok {
				msg += " (error)"
			}
			out[msg] = strings.Join(keys, " ")
		}
		return out
	}
	want := keysByMsg(t, func(c *Client, wait bool, opts ...LockOption) (*Lock, error) {
		if wait {
			return c.Lock(ctx, "k", opts...)
		}
		return c.TryLock(ctx, "k", opts...)
	}, func(c *Client) (*Lock, error) { return c.TryLock(ctx, "k") })
	for _, p := range permitTakers {
		t.Run(p.name, func(t *testing.T) {
			got := keysByMsg(t, func(c *Client, wait bool, opts ...LockOption) (*Lock, error) {
				return p.take(ctx, c, "k", wait, opts...)
			}, func(c *Client) (*Lock, error) { return takeAll(p, c, false) })
			for msg, keys := range want {
				if got[msg] != keys {
					t.Errorf("record %q has keys %q, a lock's has %q", msg, got[msg], keys)
				}
			}
			for msg := range got {
				if _, ok := want[msg]; !ok {
					t.Errorf("record %q: a lock has none", msg)
				}
			}
		})
	}
}

// A Redis that hangs, while permits are waited for and while they are
// given back, leaves every call ended for the Observer and every hold
// ended once: the waiter's ctx ends its acquisition, and the Unlock whose
// ctx ends gives the hold up (Lost, release_failed).
func TestObserverPermitsWhileRedisHangs(t *testing.T) {
	for _, p := range permitTakers {
		t.Run(p.name, func(t *testing.T) {
			srv := redistest.Start(t)
			proxy, cut := cutClient(t, srv.Addr())
			rec := &recorder{}
			c := newClientOn(t, cut, WithObserver(rec))
			other := newClientOn(t, srv.Client(t))
			ctx := context.Background()
			all := mustTakeAll(t, p, other)
			proxy.Freeze()
			wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			if _, err := p.take(wctx, c, "k", true); err == nil {
				t.Fatal("waiter got permits from a hung Redis")
			}
			proxy.Thaw()
			if err := all.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			l := mustTake(t, p, c)
			proxy.Freeze()
			uctx, ucancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer ucancel()
			if err := l.Unlock(uctx); err == nil {
				t.Fatal("Unlock answered by a hung Redis")
			}
			proxy.Thaw()
			waitUntil(t, 5*time.Second, "the loss to be reported", func() bool { _, _, lost := rec.holdEnds(); return lost == 1 })
			rec.checkEnded(t, "the Observer")
			checkEndedOnce(t, rec, true)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if e := rec.losts[0]; e.Reason != LostReleaseFailed || e.Kind != p.kind {
				t.Errorf("Lost = %+v, want reason release_failed, kind %s", e, p.kind)
			}
			if e := rec.acquires[0]; e.Outcome != AcquireCanceled && e.Outcome != AcquireError {
				t.Errorf("the waiter's AcquireEnd = %+v, want canceled", e)
			}
		})
	}
}
