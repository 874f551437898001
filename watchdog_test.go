package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

// The watchdog's renewals run beside the caller's Extend and Unlock. These
// tests hold a script's reply back after Redis ran it, as a slow network
// would, to put the two in the order that used to go wrong (scriptHook,
// main_test.go).

// renewing reports whether the watchdog still renews l.
func renewing(l *Lock) bool {
	l.c.dog.mu.Lock()
	defer l.c.dog.mu.Unlock()
	_, watched := l.c.dog.holds[l.h]
	return watched && l.h.renew
}

// A renewal to the old lease ran in Redis before an Extend to a shorter
// one, but its reply arrives after. Redis keeps the shorter lease, so the
// lock may be trusted only that long.
func TestExtendWaitsForRenewal(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	held := newHeldCall(nil)
	c, _ := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{extendScript.Hash(): held.run}})
	held.arm()
	l := mustLock(t, c, "extend-race", WithTTL(1500*time.Millisecond))
	<-held.reached // a renewal to 1.5 s ran in Redis; its reply is held back

	extended := make(chan error, 1)
	before := time.Now()
	go func() { extended <- l.Extend(ctx, 200*time.Millisecond) }()
	waitUntil(t, 5*time.Second, "the Extend to end or to wait for the renewal", func() bool {
		c.dog.mu.Lock()
		defer c.dog.mu.Unlock()
		return len(extended) == 1 || l.h.idle != nil
	})
	held.release()
	if err := <-extended; err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	waitUntil(t, 5*time.Second, "the renewal's reply to be read", func() bool {
		c.dog.mu.Lock()
		defer c.dog.mu.Unlock()
		return !l.h.busy
	})
	if d := c.dog.deadline(l.h); d.After(after.Add(200 * time.Millisecond)) {
		t.Errorf("the lock is trusted until %v after the Extend, but Redis keeps it at most 200ms", d.Sub(before).Round(time.Millisecond))
	}
	// A 200 ms lease may run out on a busy machine before this Unlock.
	if err := l.Unlock(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
		t.Fatal(err)
	}
}

// An Extend whose reply is lost may have shortened the lease in Redis: the
// lock may then be trusted only as long as the shorter lease, and renewed
// for it.
func TestExtendWithLostReply(t *testing.T) {
	srv := redistest.Start(t)
	proxy := startProxy(t, srv.Addr())
	c, _ := hookedClient(t, proxy.Addr(), scriptHook{})
	ctx := context.Background()
	l := mustLock(t, c, "extend-lost", WithTTL(5*time.Second))

	proxy.Freeze() // the Extend is sent, no reply comes back in time
	ectx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	start := time.Now()
	err := l.Extend(ectx, 300*time.Millisecond)
	cancel()
	if err == nil {
		t.Fatal("Extend through a frozen connection succeeded")
	}
	if d := c.dog.deadline(l.h); d.After(start.Add(300 * time.Millisecond)) {
		t.Errorf("after an Extend to 300ms of unknown outcome, the lock is trusted for %v", d.Sub(start).Round(time.Millisecond))
	}
	// The Extend may still reach Redis after a renewal: renewals must not
	// trust a longer lease than it sets.
	c.dog.mu.Lock()
	renewTTL := l.h.ttl
	c.dog.mu.Unlock()
	if renewTTL != 300*time.Millisecond {
		t.Errorf("after an Extend to 300ms of unknown outcome, renewals set %v", renewTTL)
	}
	proxy.Thaw()
	if err := l.Unlock(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
		t.Fatal(err)
	}
}

// An Extend whose context has already ended is never sent: its outcome is
// known, so unlike TestExtendWithLostReply it must leave the lease the
// lock is trusted for, and renewed with, as it was.
func TestExtendWithEndedContextChangesNothing(t *testing.T) {
	c, _, _ := newTestClient(t)
	l := mustLock(t, c, "extend-ended", WithTTL(5*time.Second))
	before := c.dog.deadline(l.h)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Extend(ctx, 300*time.Millisecond); !errors.Is(err, context.Canceled) {
		t.Fatalf("Extend with an ended context = %v, want context.Canceled", err)
	}
	if d := c.dog.deadline(l.h); !d.Equal(before) {
		t.Errorf("an Extend never sent moved the deadline by %v", d.Sub(before).Round(time.Millisecond))
	}
	c.dog.mu.Lock()
	renewTTL := l.h.ttl
	c.dog.mu.Unlock()
	if renewTTL != 5*time.Second {
		t.Errorf("after an Extend never sent, renewals set %v, want 5s", renewTTL)
	}
}

// Extend makes its lease the lock's: the watchdog renews the lock for it
// from then on, and a fixed lease (WithoutRenewal) is trusted until the
// extended lease runs out, not the first one. Time is the subject here:
// the test waits past the first lease.
func TestExtendSetsTheLeaseKept(t *testing.T) {
	ctx := context.Background()
	t.Run("renewed", func(t *testing.T) {
		c, rdb, _ := newTestClient(t)
		const extended = 1500 * time.Millisecond // renewed every 500 ms
		l := mustLock(t, c, "extend-renewed", WithTTL(300*time.Millisecond))
		defer l.Unlock(ctx)
		if err := l.Extend(ctx, extended); err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Done():
			t.Fatalf("lock lost after Extend: %v", context.Cause(l.Context()))
		case <-time.After(1200 * time.Millisecond):
		}
		// Renewed for the extended lease at least once since (at 500 ms
		// or 1 s): left untouched, or renewed for 300 ms (which does not
		// shorten a longer lease), it would have 300 ms left.
		if pttl := rdb.PTTL(ctx, c.keys("extend-renewed").lock).Val(); pttl < extended*2/5 {
			t.Errorf("PTTL 1.2 s after Extend(%v) = %v: the watchdog does not renew for the extended lease", extended, pttl)
		}
	})
	t.Run("fixed", func(t *testing.T) {
		c, _, _ := newTestClient(t)
		l := mustLock(t, c, "extend-fixed", WithTTL(200*time.Millisecond), WithoutRenewal())
		defer l.Unlock(ctx)
		start := time.Now()
		if err := l.Extend(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Done():
			t.Fatalf("fixed lease extended to 1 s lost after %v: %v", time.Since(start), context.Cause(l.Context()))
		case <-time.After(500 * time.Millisecond):
		}
		testutil.Receive(t, l.Done(), 5*time.Second, "the end of the extended lease")
		if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
			t.Errorf("cause = %v, want ErrLockLost", cause)
		}
	})
}

// A renewal that runs after our own release, while its reply is on the
// way, finds the lock gone. That is no loss: Unlock succeeds, the lock's
// context ends with ErrReleased, and a retried Unlock (the first reply was
// lost) says nil too. The Observer hears of the hold's end once: the
// Unlock whose release the renewal met ended it (ReleaseEndEvent.Ended).
func TestRenewalMeetingOwnRelease(t *testing.T) {
	for _, lostReply := range []bool{false, true} {
		name := map[bool]string{false: "slow reply", true: "lost reply"}[lostReply]
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t)
			ctx := context.Background()
			var l *Lock
			var armed atomic.Bool
			errLost := errors.New("reply lost")
			rec := &recorder{}
			c, _ := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{releaseEval.sha: func() error {
				if !armed.CompareAndSwap(true, false) {
					return nil
				}
				// Hold the reply until a renewal has found the lock gone
				// and the watchdog has acted on it.
				waitUntil(t, 5*time.Second, "a renewal after the release", func() bool {
					return l.Context().Err() != nil || !renewing(l)
				})
				if lostReply {
					return errLost
				}
				return nil
			}}}, WithObserver(rec))
			// Renewed every 100-200 ms.
			l = mustLock(t, c, "own-release", WithTTL(600*time.Millisecond))
			armed.Store(true)
			err := l.Unlock(ctx)
			if lostReply {
				if !errors.Is(err, errLost) {
					t.Fatalf("Unlock = %v, want the lost reply's error", err)
				}
				err = l.Unlock(ctx)
			}
			if err != nil {
				t.Fatalf("Unlock = %v, want nil: the lock was released by this Unlock", err)
			}
			if cause := context.Cause(l.Context()); !errors.Is(cause, ErrReleased) {
				t.Errorf("the lock's context ended with %v, want ErrReleased", cause)
			}
			checkEndedOnce(t, rec, false)
			// The renewal that met the release says nothing about the
			// lock: the Observer hears of no renewal but answered ones.
			waitRenewalsSettled(t)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for _, e := range rec.renews {
				if e.Outcome != RenewOK {
					t.Errorf("Renew %+v reported for the renewal that met our own release, want none", e)
				}
			}
		})
	}
}

// An outermost Unlock that fails cannot tell whether Redis ran the
// release (its reply lost) or not (the request dropped on its way). Either
// way the lock is given up: its Context ends when Unlock returns, since the
// release may have handed the lock over already; and it is renewed no
// more, so that a lock whose release never ran is not kept until the
// Client closes (the caller of a deferred Unlock rarely tries again) but
// goes to the next waiter when its lease runs out. A retried Unlock then
// says nil.
func TestFailedUnlockGivesTheLockUp(t *testing.T) {
	for _, ran := range []bool{true, false} {
		t.Run(map[bool]string{true: "reply lost", false: "request dropped"}[ran], func(t *testing.T) {
			srv := redistest.Start(t)
			ctx := context.Background()
			errFail := errors.New("connection reset")
			fail, arm := failNext(errFail)
			h := scriptHook{before: map[string]func() error{releaseEval.sha: fail}}
			if ran {
				h = scriptHook{after: h.before}
			}
			c, rdb := hookedClient(t, srv.Addr(), h)
			other := newClientOn(t, srv.Client(t))
			const lease = 300 * time.Millisecond // renewed every 50-100 ms while watched
			l := mustLock(t, c, "k", WithTTL(lease))
			got := lockAsync(ctx, other, "k")
			waitUntil(t, 5*time.Second, "the other client to queue", func() bool { return queued(t, rdb, c, "k") == 1 })
			arm()
			if err := l.Unlock(ctx); !errors.Is(err, errFail) {
				t.Fatalf("Unlock = %v, want the failure", err)
			}
			if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
				t.Errorf("after an Unlock whose outcome is unknown, the lock's Context = %v, want ended with ErrLockLost", cause)
			}
			select {
			case r := <-got: // at once if the release ran, when the lease runs out if not
				if r.err != nil {
					t.Fatal(r.err)
				}
				defer r.l.Unlock(ctx)
			case <-time.After(10 * lease):
				t.Fatal("the waiter did not get the lock: the failed Unlock's lock is still renewed")
			}
			if err := l.Unlock(ctx); err != nil {
				t.Errorf("retried Unlock = %v, want nil", err)
			}
		})
	}
}

// watchdog.go renew: a renewed lease is trusted from before the renewal
// was sent, not from when its (slow) reply was read.
func TestRenewalTrustedFromBeforeItWasSent(t *testing.T) {
	srv := redistest.Start(t)
	ranAt := make(chan time.Time, 1)
	var armed atomic.Bool
	armed.Store(true)
	c, _ := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{extendScript.Hash(): func() error {
		if armed.CompareAndSwap(true, false) {
			ranAt <- time.Now()                // Redis has reset the lease by now
			time.Sleep(300 * time.Millisecond) // the reply is slow
		}
		return nil
	}}})
	const ttl = 6 * time.Second // renewed after 2s; the next one is due 1s after that
	l := mustLock(t, c, "slow-renew", WithTTL(ttl))
	defer l.Unlock(context.Background())
	first := c.dog.deadline(l.h)
	var ran time.Time
	select {
	case ran = <-ranAt:
	case <-time.After(5 * time.Second):
		t.Fatal("no renewal within 5s")
	}
	waitUntil(t, 5*time.Second, "the renewal's reply to be read", func() bool { return !c.dog.deadline(l.h).Equal(first) })
	if d := c.dog.deadline(l.h); d.After(ran.Add(ttl)) {
		t.Errorf("renewed lease trusted until %v after Redis reset it to %v", d.Sub(ran), ttl)
	}
}

// A renewal that timed out on the client may still reach Redis later (it
// sat in a socket buffer of a stalled server). Landing after an Extend to a
// longer lease, it must not cut the lease short of what the holder trusts:
// renewals only ever lengthen a lease.
func TestLateRenewalDoesNotShortenExtend(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	late := make(chan []any, 1)
	var armed atomic.Bool
	c, rdb := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{extendScript.Hash(): func() error {
		if armed.CompareAndSwap(true, false) {
			late <- nil
			return errors.New("i/o timeout") // the client gives up; Redis gets it later
		}
		return nil
	}}})
	const ttl = 900 * time.Millisecond // renewed every 300ms
	l := mustLock(t, c, "late-renewal", WithTTL(ttl))
	defer l.Unlock(ctx)
	armed.Store(true)
	select {
	case <-late:
	case <-time.After(5 * time.Second):
		t.Fatal("no renewal within 5s")
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	// The renewal arrives now, as the watchdog sent it.
	if o := c.be.Renew(ctx, []backend.Renewal{{Lease: l.h.lease, TTL: ttl}}); o[0].Outcome != backend.Held {
		t.Fatalf("late renewal: %v", o[0])
	}
	pttl, err := rdb.PTTL(ctx, leaseKeys(l.h.lease).lock).Result()
	if err != nil {
		t.Fatal(err)
	}
	if trusted := time.Until(c.dog.deadline(l.h)); pttl < trusted {
		t.Errorf("after a late renewal Redis keeps the lock %v, the holder trusts it %v", pttl, trusted.Round(time.Millisecond))
	}
}

// heldBack fails the first command of a script sent once armed, before it
// reaches Redis, and hands it to the test, which sends it later: a request
// its client gave up on that reaches Redis afterwards.
type heldBack struct {
	testutil.PassHook
	sha   string
	armed atomic.Bool
	held  chan []any
}

func (h *heldBack) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && a[0] == "evalsha" && a[1] == h.sha && h.armed.CompareAndSwap(true, false) {
			h.held <- a
			err := errors.New("i/o timeout")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// An Extend its client gave up on may reach Redis after a later Extend
// succeeded. It must not undo that one: the holder trusts the later lease,
// and a shorter one in Redis would let another client in meanwhile.
func TestLateExtendDoesNotUndoLaterExtend(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	h := &heldBack{sha: extendScript.Hash(), held: make(chan []any, 1)}
	c, rdb := hookedClient(t, srv.Addr(), h)
	l := mustLock(t, c, "late-extend", WithTTL(time.Minute))
	defer l.Unlock(ctx)
	h.armed.Store(true)
	if err := l.Extend(ctx, 300*time.Millisecond); err == nil {
		t.Fatal("the held-back Extend succeeded")
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, (<-h.held)...).Err(); err != nil { // it arrives now
		t.Fatal(err)
	}
	pttl, err := rdb.PTTL(ctx, leaseKeys(l.h.lease).lock).Result()
	if err != nil {
		t.Fatal(err)
	}
	if trusted := time.Until(c.dog.deadline(l.h)); pttl < trusted {
		t.Errorf("after a late Extend Redis keeps the lock %v, the holder trusts it %v", pttl, trusted.Round(time.Millisecond))
	}
}

// An Extend (or TTL) that runs while Unlock's release is on its way back
// finds the lock gone: that is our own release, not a loss, as for a
// renewal (TestRenewalMeetingOwnRelease). Unlock succeeded, so the Context
// ends with ErrReleased and no loss is reported.
func TestExtendMeetingOwnRelease(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rec := &recorder{}
	var armed atomic.Bool
	extended := make(chan error, 1)
	var l *Lock
	c, _ := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{releaseEval.sha: func() error {
		if armed.CompareAndSwap(true, false) {
			// Redis has released the lock; its reply is on the way.
			extended <- l.Extend(ctx, time.Minute)
		}
		return nil
	}}}, WithObserver(rec))
	l = mustLock(t, c, "k")
	armed.Store(true)
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock = %v", err)
	}
	if err := <-extended; !errors.Is(err, ErrReleased) {
		t.Errorf("Extend meeting our own release = %v, want ErrReleased", err)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrReleased) {
		t.Errorf("after a successful Unlock the lock's Context ended with %v, want ErrReleased", cause)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.losts) != 0 {
		t.Errorf("a released lock was reported lost: %+v", rec.losts)
	}
}

// A lock declared lost while an Extend or a TTL read is on its way to
// Redis (Close, or the deadline of a fixed lease passing) still has its key
// there, which answers as held: the call reports the loss all the same,
// since nothing watches the lease any more.
func TestExtendAndTTLAfterLossInFlight(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sha   string
		close bool // lost by Close, else by its deadline
		call  func(l *Lock) error
	}{
		{"Extend, Close", extendScript.Hash(), true, func(l *Lock) error { return l.Extend(context.Background(), time.Minute) }},
		{"Extend, deadline", extendScript.Hash(), false, func(l *Lock) error { return l.Extend(context.Background(), time.Minute) }},
		{"TTL, Close", ttlScript.Hash(), true, func(l *Lock) error { _, err := l.TTL(context.Background()); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			var l atomic.Pointer[Lock]
			var c *Client
			var hooked atomic.Bool
			c, _ = hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{tc.sha: func() error {
				if lk := l.Load(); lk != nil && hooked.CompareAndSwap(false, true) {
					if tc.close {
						go c.Close()
					}
					<-lk.Done() // declared lost before the call reaches Redis
				}
				return nil
			}}})
			lk := mustLock(t, c, "lost-in-flight", WithTTL(300*time.Millisecond), WithoutRenewal())
			l.Store(lk)
			err := tc.call(lk)
			if cause := context.Cause(lk.Context()); !errors.Is(cause, ErrLockLost) {
				t.Fatalf("lock's Context cause = %v, want ErrLockLost", cause)
			}
			if !errors.Is(err, ErrLockLost) {
				t.Errorf("call on a lock lost meanwhile = %v, want an error wrapping ErrLockLost", err)
			}
		})
	}
}

// A renewal that fails (Redis answered with an error, or could not be
// reached) is tried again a tenth of the lease later (watchdog.renew), not
// at once: the batching slack of a sixth of the lease must not pull the
// retry forward into a loop of back-to-back renewals.
func TestFailedRenewalIsNotRetriedAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	var armed atomic.Bool
	var mu sync.Mutex
	var at []time.Time
	errDown := errors.New("redis unreachable")
	c, _ := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{extendScript.Hash(): func() error {
		if !armed.Load() {
			return nil
		}
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		return errDown
	}}})
	const ttl = 3 * time.Second // renewed every second; a failed one retried 300ms later
	l := mustLock(t, c, "renew-retry", WithTTL(ttl))
	armed.Store(true)
	waitUntil(t, 5*time.Second, "two failed renewals", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(at) >= 2
	})
	armed.Store(false)
	mu.Lock()
	gap := at[1].Sub(at[0])
	mu.Unlock()
	if gap < ttl/10-10*time.Millisecond {
		t.Errorf("a failed renewal was tried again after %v, want about %v (lease/10)", gap, ttl/10)
	}
	_ = l.Unlock(ctx)
}

// An Extend that waits for a renewal or another Extend under way (claim)
// must notice that the lock is lost meanwhile: it returns the loss at once
// rather than wait on for that call's reply, and it never sends its own
// Extend, which would reset the lease of a lock nobody holds any more (its
// Context has ended, nothing renews or releases it): the other clients
// would wait out that lease.
func TestExtendWaitingForRenewalSeesLoss(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ttl     time.Duration
		opts    []LockOption
		renewal bool // the call under way is a renewal, else an Extend to a minute
		close   bool // the lock is lost by Close, else by its deadline
	}{
		{"renewal, lease ran out", 3 * time.Second, nil, true, false},
		{"Extend, lease ran out", time.Second, []LockOption{WithoutRenewal()}, false, false},
		{"Extend, Close", time.Minute, nil, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			ctx := context.Background()
			var armed atomic.Bool
			ran, proceed := make(chan struct{}), make(chan struct{})
			c, rdb := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{extendScript.Hash(): func() error {
				if armed.CompareAndSwap(true, false) {
					close(ran)
					<-proceed // Redis ran it; its reply is slow
				}
				return nil
			}}})
			armed.Store(tc.renewal)
			l := mustLock(t, c, "extend-claim-lost", append(tc.opts, WithTTL(tc.ttl))...)
			first := make(chan error, 1)
			if !tc.renewal {
				armed.Store(true)
				go func() { first <- l.Extend(ctx, time.Minute) }()
			}
			<-ran
			second := make(chan error, 1)
			go func() { second <- l.Extend(ctx, time.Hour) }()
			waitUntil(t, 5*time.Second, "the Extend to wait for the call under way", func() bool {
				c.dog.mu.Lock()
				defer c.dog.mu.Unlock()
				return l.h.idle != nil
			})
			if tc.close {
				go c.Close() // waits for the call under way
			}
			select {
			case <-l.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the lock was not declared lost")
			}
			var err error
			select {
			case err = <-second:
			case <-time.After(5 * time.Second):
				t.Error("Extend still waits for the call under way after the lock was lost")
			}
			close(proceed)
			if err == nil {
				err = <-second
			}
			if !errors.Is(err, ErrLockLost) {
				t.Errorf("Extend of a lock lost while it waited = %v, want ErrLockLost", err)
			}
			if !tc.renewal {
				<-first
			}
			waitRenewalsSettled(t)
			if pttl, _ := rdb.PTTL(ctx, leaseKeys(l.h.lease).lock).Result(); pttl > time.Minute {
				t.Errorf("after the loss, the Extend reset the lease in Redis to %v: nobody holds it", pttl.Round(time.Second))
			}
		})
	}
}

// A renewal that finds the lock's key replaced by a value of another type
// (deleted by hand and written by another program) has its answer: the
// token does not hold the lock. The holder learns of the loss then, as
// when the key is gone (TestRestartLossKnownAtNextRenewal), not only when
// its lease runs out after a lease's worth of renewals "without answer".
// The Observer hears it as such: not held, with no error (RenewEvent.Err
// is for RenewNoAnswer).
func TestRenewalFindingWrongTypeKeyIsLoss(t *testing.T) {
	rec := &recorder{}
	c, rdb, _ := newTestClient(t, WithObserver(rec))
	ctx := context.Background()
	const ttl = 3 * time.Second // renewed every 1 s; deadline ~2.97 s
	l := mustLock(t, c, "wrong-type", WithTTL(ttl))
	key := leaseKeys(l.h.lease).lock
	if err := rdb.Set(ctx, key, "not a lock", 0).Err(); err != nil { // SET replaces the hash
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(3 * ttl):
		t.Fatal("the lock was not declared lost")
	}
	cause := context.Cause(l.Context())
	if !errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", cause)
	}
	if strings.Contains(cause.Error(), "ran out") {
		t.Errorf("a renewal found the key holding another value, yet the lock was lost only at its deadline: %v", cause)
	}
	// Reported before the loss ends the lock's Context.
	rec.mu.Lock()
	renews := slices.Clone(rec.renews)
	rec.mu.Unlock()
	if n := len(renews); n == 0 || renews[n-1].Outcome != RenewNotHeld || renews[n-1].Err != nil {
		t.Errorf("renewals %+v: want the last not held, without an error", renews)
	}
	if got := rdb.Get(ctx, key).Val(); got != "not a lock" {
		t.Errorf("the foreign value was changed to %q", got)
	}
}

// redis6Error is a script error as Redis before 7.0 replies it: the error
// of the command the script called comes after an ERR prefix.
type redis6Error string

func (e redis6Error) Error() string { return string(e) }
func (redis6Error) RedisError()     {}

// before7Errors rewrites the script errors of the renewals into the form
// of Redis before 7.0.
type before7Errors struct{ testutil.PassHook }

func (before7Errors) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if e := cmd.Err(); e != nil && strings.HasPrefix(e.Error(), "WRONGTYPE") {
				cmd.SetErr(redis6Error("ERR Error running script (call to f_" + extendScript.Hash() + "): @user_script:12: " + e.Error()))
			}
		}
		return err
	}
}

// On Redis before 7.0 the WRONGTYPE of a script's call is not at the start
// of the reply: a renewal finding the key of another type is a loss there
// too, not a renewal without answer until the lease runs out.
func TestRenewalFindingWrongTypeKeyIsLossBefore7(t *testing.T) {
	srv := redistest.Start(t)
	c, rdb := hookedClient(t, srv.Addr(), before7Errors{})
	ctx := context.Background()
	const ttl = 3 * time.Second
	l := mustLock(t, c, "wrong-type", WithTTL(ttl))
	if err := rdb.Set(ctx, leaseKeys(l.h.lease).lock, "not a lock", 0).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(3 * ttl):
		t.Fatal("the lock was not declared lost")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) || strings.Contains(cause.Error(), "ran out") {
		t.Errorf("cause = %v, want a loss found by the renewal", cause)
	}
}

// When Redis goes away with many locks held, each round of renewals that
// gets no answer is logged once per error, with the number of locks it
// renewed, not once per lock: an outage must not bury the log under a
// warning per lock every tenth of its lease. Each lock's loss is still
// logged on its own.
func TestFailedRenewalRoundIsLoggedOnce(t *testing.T) {
	srv := redistest.Start(t)
	var logs syncBuffer
	// No retries: each round fails at once, so several fail before the
	// leases run out.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClientOn(t, rdb, WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	const held = 100
	locks := make([]*Lock, held)
	for i := range locks {
		locks[i] = mustLock(t, c, fmt.Sprintf("outage:%d", i), WithTTL(2*time.Second))
	}
	srv.Stop(t)
	for _, l := range locks {
		testutil.Receive(t, l.Done(), 5*time.Second, "the lock's end")
	}
	// Each Context ends before the losses are logged.
	waitUntil(t, 5*time.Second, "every loss logged", func() bool {
		return strings.Count(logs.String(), `"msg":"dlock: lock lost"`) == held
	})
	failed := 0
	for _, r := range logRecords(t, &logs) {
		if r.Msg == "dlock: renewal failed" {
			failed++
			if r.Locks < 1 || !strings.HasPrefix(r.Key, "outage:") || r.Kind != "lock" || r.Error == "" {
				t.Errorf("record of a failed round = %+v, want the number of locks, the first's key and kind, and the error", r)
			}
		}
	}
	if failed == 0 || failed >= held {
		t.Errorf("%d records of failed renewals for %d locks; want one per round", failed, held)
	}
}

// slowLossLog is a log handler whose sink is slow to take the record of
// the loss of the locks it names, as a log shipped over a busy network
// can be.
type slowLossLog struct {
	keys  []string
	delay time.Duration
}

func (h slowLossLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h slowLossLog) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h slowLossLog) WithGroup(string) slog.Handler                { return h }

func (h slowLossLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "dlock: lock lost" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "key" && slices.Contains(h.keys, a.Value.String()) {
			time.Sleep(h.delay) // the slow sink itself, not a wait for an event
			return false
		}
		return true
	})
	return nil
}

// Reporting one lock's loss (its log record, the Observer) takes the
// watchdog's loop some time. Another lock's deadline, looked at before
// that, must still end its Context at that deadline, not as much later as
// the report took: by then Redis may have expired the key and granted it
// to another client.
func TestLossReportDoesNotDelayAnotherDeadline(t *testing.T) {
	srv := redistest.Start(t)
	const slow = 500 * time.Millisecond
	c := newClientOn(t, srv.Client(t), WithLogger(slog.New(slowLossLog{keys: []string{"first"}, delay: slow})))
	first := mustLock(t, c, "first", WithTTL(200*time.Millisecond), WithoutRenewal())
	second := mustLock(t, c, "second", WithTTL(time.Second), WithoutRenewal())
	<-first.Done()
	<-second.Done()
	lostAt := time.Now()
	if late := lostAt.Sub(c.dog.deadline(second.h)); late > slow/2 {
		t.Errorf("the second lock was declared lost %v after its deadline, want about 0 (the first one's loss took %v to report)", late, slow)
	}
	if !errors.Is(context.Cause(second.Context()), ErrLockLost) {
		t.Errorf("cause = %v, want ErrLockLost", context.Cause(second.Context()))
	}
}

// Locks found lost together (by one renewal round trip, by one look of the
// watchdog at their deadlines, or by Close) all end their Contexts at once:
// none waits for the report of another's loss.
func TestLocksLostTogetherEndTogether(t *testing.T) {
	const slow = 500 * time.Millisecond
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, rdb *redis.Client, c *Client) (a, b *Lock)
	}{
		{"renewal finds both gone", func(t *testing.T, rdb *redis.Client, c *Client) (a, b *Lock) {
			// Taken together, so renewed in one round trip a third of the
			// lease later; gone from Redis before that.
			a = mustLock(t, c, "a", WithTTL(900*time.Millisecond))
			b = mustLock(t, c, "b", WithTTL(900*time.Millisecond))
			if err := rdb.Del(context.Background(), c.keys("a").lock, c.keys("b").lock).Err(); err != nil {
				t.Fatal(err)
			}
			return a, b
		}},
		{"both deadlines passed", func(t *testing.T, _ *redis.Client, c *Client) (a, b *Lock) {
			// Both deadlines pass while the loss of a third lock is being
			// reported: the watchdog's next look finds both over.
			mustLock(t, c, "c", WithTTL(100*time.Millisecond), WithoutRenewal())
			a = mustLock(t, c, "a", WithTTL(300*time.Millisecond), WithoutRenewal())
			b = mustLock(t, c, "b", WithTTL(300*time.Millisecond), WithoutRenewal())
			return a, b
		}},
		{"Close", func(t *testing.T, _ *redis.Client, c *Client) (a, b *Lock) {
			a, b = mustLock(t, c, "a"), mustLock(t, c, "b")
			go c.Close()
			return a, b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			c := newClientOn(t, rdb, WithLogger(slog.New(slowLossLog{keys: []string{"a", "b", "c"}, delay: slow})))
			a, b := tc.lose(t, rdb, c)
			var ended [2]time.Time
			var wg sync.WaitGroup
			for i, l := range []*Lock{a, b} {
				wg.Go(func() {
					<-l.Done()
					ended[i] = time.Now()
				})
			}
			waited := make(chan struct{})
			go func() {
				wg.Wait()
				close(waited)
			}()
			select {
			case <-waited:
			case <-time.After(10 * time.Second):
				t.Fatal("the locks were not both lost")
			}
			if gap := ended[1].Sub(ended[0]).Abs(); gap > slow/2 {
				t.Errorf("the two locks' Contexts ended %v apart, want about 0 (a loss takes %v to report)", gap, slow)
			}
			for _, l := range []*Lock{a, b} {
				if !errors.Is(context.Cause(l.Context()), ErrLockLost) {
					t.Errorf("%q: cause = %v, want ErrLockLost", l.Key(), context.Cause(l.Context()))
				}
			}
		})
	}
}

// A renewal that panics (a go-redis hook's bug) has no caller to hand the
// panic to: it must not end the process. It counts as a renewal Redis did
// not answer, is logged, and the next renewal keeps the lock.
func TestWatchdogSurvivesAPanickingRenewal(t *testing.T) {
	srv := redistest.Start(t)
	rec := &recorder{}
	var buf syncBuffer
	left := new(atomic.Int32)
	left.Store(1)
	c, _ := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{extendScript.Hash(): func() error {
		if left.Add(-1) >= 0 {
			panic("hook bug")
		}
		return nil
	}}}, WithObserver(rec), WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	ctx := context.Background()
	l := mustLock(t, c, "k", WithTTL(300*time.Millisecond))
	waitUntil(t, 5*time.Second, "a renewal after the one that panicked", func() bool {
		return rec.count(func(r *recorder) int {
			n := slices.IndexFunc(r.renews, func(e RenewEvent) bool { return e.Outcome == RenewNoAnswer })
			if n < 0 || !slices.ContainsFunc(r.renews[n:], func(e RenewEvent) bool { return e.Outcome == RenewOK }) {
				return 0
			}
			return 1
		}) == 1
	})
	if l.Context().Err() != nil {
		t.Fatalf("the lock was lost: %v", context.Cause(l.Context()))
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "hook bug") {
		t.Errorf("the panic was not logged: %s", buf.String())
	}
}

// panicOnRenew is an Observer whose Renew panics, after recording.
type panicOnRenew struct{ recorder }

func (o *panicOnRenew) Renew(e RenewEvent) {
	o.recorder.Renew(e)
	panic("observer bug")
}

// An Observer that panics on the watchdog's goroutine does not end the
// process, nor stop the watchdog: the lock is still renewed, and a loss
// found by the renewal whose report panicked still ends the lock's
// Context and is reported.
func TestWatchdogSurvivesAPanickingObserver(t *testing.T) {
	obs := &panicOnRenew{}
	c, rdb, _ := newTestClient(t, WithObserver(obs))
	l := mustLock(t, c, "k", WithTTL(300*time.Millisecond))
	renews := func() int { return obs.count(func(r *recorder) int { return len(r.renews) }) }
	waitUntil(t, 5*time.Second, "two renewals", func() bool { return renews() >= 2 })
	rdb.Del(context.Background(), c.keys("k").lock) // an operator removed it
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lock's Context did not end after its loss")
	}
	if !errors.Is(context.Cause(l.Context()), ErrLockLost) {
		t.Errorf("cause = %v, want ErrLockLost", context.Cause(l.Context()))
	}
	waitUntil(t, 5*time.Second, "the loss to be reported", func() bool {
		return obs.count(func(r *recorder) int { return len(r.losts) }) == 1
	})
}

// An Extend whose request panics (a go-redis hook's), and whose caller
// recovers the panic (net/http does), leaves the lock renewed: the
// outcome is unknown, as after a network error, and the next Extend is not
// kept waiting for it.
func TestPanickingExtendKeepsTheLockRenewed(t *testing.T) {
	srv := redistest.Start(t)
	var armed atomic.Bool
	c, _ := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{extendScript.Hash(): func() error {
		if armed.CompareAndSwap(true, false) {
			panic("hook bug")
		}
		return nil
	}}})
	ctx := context.Background()
	l := mustLock(t, c, "extend-panic", WithTTL(time.Second))
	armed.Store(true)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the Extend did not panic: the test did not test anything")
			}
		}()
		_ = l.Extend(ctx, time.Second)
	}()
	// Held past the lease trusted before the Extend, which only renewals
	// can lengthen.
	until := c.dog.deadline(l.h)
	waitUntil(t, 5*time.Second, "a renewal after the Extend that panicked", func() bool {
		if err := l.Context().Err(); err != nil {
			t.Fatalf("the lock was lost: %v", context.Cause(l.Context()))
		}
		return c.dog.deadline(l.h).After(until)
	})
	ectx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := l.Extend(ectx, time.Second); err != nil {
		t.Errorf("Extend after one that panicked = %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// Redis applies an Extend to a shorter lease when it runs it, which may
// be long before its reply comes back. Until then the lock may be trusted
// no longer than the lease asked for, or its Context is still live while
// another client holds the lock.
func TestShorteningExtendIsTrustedOnlyForItsLease(t *testing.T) {
	srv := redistest.Start(t)
	held := newHeldCall(nil) // the Extend ran in Redis; its reply is held back
	c, _ := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{extendScript.Hash(): held.run}})
	other := newClientOn(t, srv.Client(t))
	ctx := context.Background()
	l := mustLock(t, c, "extend-shorter", WithTTL(10*time.Second))
	held.arm()
	extended := make(chan error, 1)
	go func() { extended <- l.Extend(ctx, 200*time.Millisecond) }()
	<-held.reached
	endsBeforeTaken(t, l, other, held.release)
	held.release()
	if err := <-extended; !errors.Is(err, ErrLockLost) {
		t.Errorf("Extend whose reply came after its lease ran out = %v, want ErrLockLost", err)
	}
}

// A lock whose renewals fail until its lease runs out says why, in its
// Context's cause, in the Observer's Renew events and in the log: here
// Redis refuses them with READONLY (a failover demoted the master this
// client is connected to), which a caller can tell from a lost key.
func TestLeaseRunOutSaysWhyRenewalsFailed(t *testing.T) {
	master, replica := redistest.StartReplicated(t)
	var logs syncBuffer
	rec := &recorder{}
	c := newClientOn(t, master.Client(t), WithObserver(rec), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	l := mustLock(t, c, "demoted", WithTTL(300*time.Millisecond))
	redistest.WaitReplicaAcks(t, master.Client(t))
	redistest.Switchover(t, master, replica)
	testutil.Receive(t, l.Done(), 5*time.Second, "the lock's end")
	cause := context.Cause(l.Context())
	if !errors.Is(cause, ErrLockLost) || !redis.IsReadOnlyError(cause) {
		t.Fatalf("cause = %v, want ErrLockLost and the renewal's READONLY", cause)
	}
	if !strings.Contains(logs.String(), `msg="dlock: renewal failed" key=demoted kind=lock locks=1 error="READONLY`) {
		t.Errorf("log:\n%s", logs.String())
	}
	failed := rec.count(func(r *recorder) int {
		n := 0
		for _, e := range r.renews {
			if e.Outcome == RenewNoAnswer && redis.IsReadOnlyError(e.Err) {
				n++
			}
		}
		return n
	})
	if failed == 0 {
		t.Error("no Renew event with the READONLY error")
	}
}

// An Extend that Redis granted after a renewal failed resets the lease: a
// loss after it, with no renewal answered since (Redis hung), is not put
// down to that older renewal's error.
func TestExtendClearsFailedRenewalCause(t *testing.T) {
	rec := &recorder{}
	srv := redistest.Start(t)
	admin := srv.Client(t)
	c := newClientOn(t, srv.Client(t), WithObserver(rec))
	ctx := context.Background()
	const ttl = 2 * time.Second
	l := mustLock(t, c, "extended", WithTTL(ttl))
	if err := admin.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "a renewal refused with NOREPLICAS", func() bool {
		return rec.count(func(r *recorder) int {
			for _, e := range r.renews {
				if e.Outcome == RenewNoAnswer && e.Err != nil && strings.HasPrefix(e.Err.Error(), "NOREPLICAS") {
					return 1
				}
			}
			return 0
		}) > 0
	})
	if err := admin.ConfigSet(ctx, "min-replicas-to-write", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, ttl); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	defer srv.Resume(t)
	testutil.Receive(t, l.Done(), 2*ttl, "the lock's end")
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) || strings.Contains(cause.Error(), "NOREPLICAS") {
		t.Fatalf("cause = %v, want ErrLockLost, without the renewal error the Extend came after", cause)
	}
}

// A fixed lease (WithoutRenewal) that runs out says so: the cause must not
// send its holder looking for renewals that failed, since none was made.
func TestFixedLeaseRunOutSaysItWasFixed(t *testing.T) {
	c, _, _ := newTestClient(t)
	l := mustLock(t, c, "fixed-cause", WithTTL(50*time.Millisecond), WithoutRenewal())
	testutil.Receive(t, l.Done(), 5*time.Second, "the lock's end")
	cause := context.Cause(l.Context())
	if !errors.Is(cause, ErrLockLost) || strings.Contains(cause.Error(), "renew") || !strings.Contains(cause.Error(), "WithoutRenewal") {
		t.Fatalf("cause = %v, want ErrLockLost saying the fixed lease (WithoutRenewal) ran out", cause)
	}
}

// renewalTimedClient returns a Client on a server of its own, and the
// record of when its renewals were sent.
func renewalTimedClient(t *testing.T) (*Client, *renewalTimes) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	rt := &renewalTimes{at: map[string][]time.Time{}}
	rdb.AddHook(renewalTimesHook{r: rt})
	return newClientOn(t, rdb), rt
}

// A renewal goes up to a sixth of the lease early only to share a round
// trip with one that is due. Locks taken in a steady stream each have a
// renewal coming up at any time: were every look of the watchdog (one
// after each renewal's answer) to send those within that sixth, each lock
// would be renewed every sixth of its lease instead of every third: twice
// the renewals, in back-to-back round trips of a few each.
func TestSteadyStreamOfLocksRenewedInRounds(t *testing.T) {
	c, rt := renewalTimedClient(t)
	ctx := context.Background()

	const ttl = 1200 * time.Millisecond // due every 400 ms, up to 200 ms early
	const every, stream = 10 * time.Millisecond, 1500 * time.Millisecond
	var locks []*Lock
	defer func() {
		for _, l := range locks {
			_ = l.Unlock(ctx)
		}
	}()
	pace := time.NewTicker(every)
	defer pace.Stop()
	for start := time.Now(); time.Since(start) < stream; <-pace.C {
		locks = append(locks, mustLock(t, c, fmt.Sprintf("stream:%d", len(locks)), WithTTL(ttl)))
	}
	end := time.Now().Add(ttl / 2)
	waitUntil(t, 5*time.Second, "the last locks' renewals", func() bool { return time.Now().After(end) })

	rt.mu.Lock()
	defer rt.mu.Unlock()
	var gaps, renewals int
	var sum, longest time.Duration
	for _, l := range locks {
		at := rt.at[c.keys(l.Key()).lock]
		for i := 1; i < len(at); i++ {
			sum += at[i].Sub(at[i-1])
			longest = max(longest, at[i].Sub(at[i-1]))
			gaps++
		}
		renewals += len(at)
	}
	if gaps == 0 {
		t.Fatal("no lock renewed twice")
	}
	mean := sum / time.Duration(gaps)
	t.Logf("%d locks, %d renewals in %d round trips, a lock renewed every %v on average", len(locks), renewals, len(rt.sizes), mean.Round(time.Millisecond))
	// Every third of the lease (DefaultTTL), give or take a sixth for
	// the round trips shared.
	if mean < ttl*7/24 {
		t.Errorf("each lock renewed every %v on average, want about %v", mean.Round(time.Millisecond), ttl/3)
	}
	// One that went early leaves the next due a third of the lease after
	// it was due: at least half the lease is left when a renewal goes.
	if longest > ttl/2+100*time.Millisecond {
		t.Errorf("a lock renewed %v after its renewal before, want at most half its lease (%v)", longest.Round(time.Millisecond), ttl/2)
	}
	// A round trip goes when a renewal is due, and takes those due within
	// a sixth of the lease: the next one is due later than that.
	for i := 1; i < len(rt.sent); i++ {
		if d := rt.sent[i].Sub(rt.sent[i-1]); d < ttl/6-20*time.Millisecond {
			t.Fatalf("a renewal round trip %v after the one before, want one per %v at most", d.Round(time.Millisecond), ttl/6)
		}
	}
}

// A renewal is sent with at least half the trusted lease left (at most
// half a lease after the one before), also once an Extend to a shorter
// lease failed with its outcome unknown: from then on the lock is renewed
// for that lease, and may go early only by a sixth of it. Another lock's
// renewal due at once pulls this one along.
func TestRenewalAfterShorterExtendOfUnknownOutcomeLeavesHalfTheLease(t *testing.T) {
	srv := redistest.Start(t)
	lost, arm := failNext(errors.New("reply lost"))
	c, rdb := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{extendScript.Hash(): lost}})
	rt := &renewalTimes{at: map[string][]time.Time{}}
	rdb.AddHook(renewalTimesHook{r: rt})
	ctx := context.Background()
	renewals := func(key string) []time.Time {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return slices.Clone(rt.at[c.keys(key).lock])
	}

	const short = 2400 * time.Millisecond // renewed every 800 ms, up to 400 ms early
	l := mustLock(t, c, "shortened", WithTTL(time.Minute))
	defer l.Unlock(ctx)
	arm()
	extended := time.Now()
	if err := l.Extend(ctx, short); err == nil {
		t.Fatal("Extend with its reply lost succeeded")
	}
	// A lock renewed every 100 ms: its renewals take along the renewals
	// due within their slack. (A shorter lease could be lost on a loaded
	// machine, and the shortened lock's renewals would then not go early
	// at all, which proves nothing.)
	other := mustLock(t, c, "other", WithTTL(300*time.Millisecond))
	waitUntil(t, 5*time.Second, "a renewal of the shortened lock", func() bool { return len(renewals("shortened")) > 0 })
	_ = other.Unlock(ctx)
	waitUntil(t, 5*time.Second, "two renewals of the shortened lock", func() bool { return len(renewals("shortened")) > 1 })
	at := renewals("shortened")
	if early := at[0].Sub(extended); early >= short/3-50*time.Millisecond {
		t.Fatalf("the shortened lock's first renewal went %v after the Extend, not early (due at %v): the other lock's renewals did not take it along", early.Round(time.Millisecond), short/3)
	}
	if gap := at[1].Sub(at[0]); gap > short/2+100*time.Millisecond {
		t.Errorf("renewals of a %v lease %v apart: %v of it left when the second was sent, want at least half",
			short, gap.Round(time.Millisecond), (short - gap).Round(time.Millisecond))
	}
}

// A lock whose renewals fail because the server's password changed (the
// connections they dial fail AUTH) says so in its loss's cause and in the
// log, not that a reply had the wrong type: go-redis's pipeline leaves its
// commands with neither reply nor error when the connection's handshake is
// refused, and only Exec returns why.
func TestLeaseRunOutAfterPasswordChangeSaysAuthFailed(t *testing.T) {
	srv := redistest.Start(t, redistest.WithConfig("requirepass", "old"))
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "old"})
	t.Cleanup(func() { _ = admin.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "old"})
	t.Cleanup(func() { _ = rdb.Close() })
	var logs syncBuffer
	c := newClientOn(t, rdb, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	l := mustLock(t, c, "rekeyed", WithTTL(300*time.Millisecond))
	if err := admin.ConfigSet(ctx, "requirepass", "new").Err(); err != nil {
		t.Fatal(err)
	}
	// The connections open stay authenticated: the renewals dial new ones.
	if err := admin.Do(ctx, "client", "kill", "type", "normal", "skipme", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	testutil.Receive(t, l.Done(), 5*time.Second, "the lock's end")
	cause := context.Cause(l.Context())
	var re redis.Error
	if !errors.Is(cause, ErrLockLost) || !errors.As(cause, &re) || !strings.HasPrefix(re.Error(), "WRONGPASS") {
		t.Fatalf("cause = %v, want ErrLockLost and the renewal's WRONGPASS", cause)
	}
	if s := logs.String(); !strings.Contains(s, `msg="dlock: renewal failed" key=rekeyed kind=lock locks=1 error="WRONGPASS`) {
		t.Errorf("log:\n%s", s)
	}
}

// levelCount is a log handler that counts the records of each message at
// each level.
type levelCount struct {
	mu sync.Mutex
	n  map[string]int // by level and message: "WARN dlock: lock lost"
}

func (h *levelCount) Enabled(context.Context, slog.Level) bool { return true }
func (h *levelCount) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *levelCount) WithGroup(string) slog.Handler            { return h }

func (h *levelCount) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = make(map[string]int)
	}
	h.n[r.Level.String()+" "+r.Message]++
	return nil
}

func (h *levelCount) count(level slog.Level, msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[level.String()+" "+msg]
}

// Through an outage a lock's renewals are retried every tenth of its
// lease until it is lost: the first failure is a warning, the retries are
// at Debug, and the loss is a warning of its own.
func TestOutageWarnsOncePerLockBeforeItsLoss(t *testing.T) {
	srv := redistest.Start(t)
	// No retries, one dial: each round fails at once, so several fail
	// before the lease runs out.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	logs := &levelCount{}
	c := newClientOn(t, rdb, WithLogger(slog.New(logs)))
	l := mustLock(t, c, "outage", WithTTL(600*time.Millisecond))
	srv.Stop(t)
	testutil.Receive(t, l.Done(), 5*time.Second, "the lock's end")
	waitUntil(t, 5*time.Second, "the loss logged", func() bool {
		return logs.count(slog.LevelWarn, "dlock: lock lost") == 1
	})
	if n := logs.count(slog.LevelWarn, "dlock: renewal failed"); n != 1 {
		t.Errorf("%d warnings of a failed renewal; want 1, the first", n)
	}
	if n := logs.count(slog.LevelDebug, "dlock: renewal failed"); n < 2 {
		t.Errorf("%d debug records of a failed renewal; want one per retry", n)
	}
}

// A lease that runs out while its first renewal since the last answered
// one is still on its way says so, and for how long: with go-redis's
// default dial retries, a renewal to a server that has shut down is still
// dialling it (seconds) when a short lease ends.
func TestLeaseRunOutSaysRenewalUnanswered(t *testing.T) {
	srv := redistest.Start(t)
	c := newClientOn(t, srv.Client(t)) // go-redis's defaults: DialerRetries 5, MaxRetries 3
	l := mustLock(t, c, "unanswered", WithTTL(600*time.Millisecond))
	srv.Stop(t)
	testutil.Receive(t, l.Done(), 5*time.Second, "the lock's end")
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) || !strings.Contains(cause.Error(), "its renewal unanswered after ") {
		t.Fatalf("cause = %v, want ErrLockLost and how long its renewal went unanswered", cause)
	}
}

// Unlock of a lock already lost, while Redis is down, returns the
// release's network error alone: not ErrNotHeld nor ErrLockLost, which say
// what Redis answered; the lock's Context tells of the loss.
func TestUnlockOfLostLockWithRedisDownReturnsReleaseError(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClientOn(t, rdb)
	l := mustLock(t, c, "down", WithTTL(300*time.Millisecond))
	srv.Stop(t)
	testutil.Receive(t, l.Done(), 5*time.Second, "the lock's end")
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", cause)
	}
	err := l.Unlock(context.Background())
	if _, dialed := dialFailed(err); !dialed || errors.Is(err, ErrLockLost) || errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock = %v, want the dial error alone", err)
	}
}

// A lone lock's renewal goes a third of the lease after the request that
// granted it was sent, and every third of the lease after that: two thirds
// of the lease are left for the renewal to be answered, or retried, before
// the deadline. Nothing else is due, so none goes early.
func TestRenewalDueAtAThirdOfTheLease(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	var mu sync.Mutex
	var at []time.Time
	c, _ := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{extendScript.Hash(): func() error {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		return nil
	}}})
	const ttl = 3 * time.Second // due every second
	before := time.Now()
	l := mustLock(t, c, "renew-third", WithTTL(ttl))
	took := time.Since(before)
	waitUntil(t, 6*time.Second, "two renewals", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(at) >= 2
	})
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// The loop wakes a little late, never early; ttl/12 covers a slow
	// machine and is a quarter of the way to a renewal at half the lease.
	const late = ttl / 12
	if first := at[0].Sub(before); first < ttl/3 || first > ttl/3+took+late {
		t.Errorf("first renewal %v after Lock was called (which took %v), want about %v", first, took, ttl/3)
	}
	if gap := at[1].Sub(at[0]); gap < ttl/3-late || gap > ttl/3+late {
		t.Errorf("second renewal %v after the first, want about %v", gap, ttl/3)
	}
}

// A lock taken WithoutRenewal is never renewed, not even along with
// another lock of the Client whose renewal round trip goes while the fixed
// lock's would be due: its lease runs out, and it is lost at its deadline.
func TestFixedLeaseNotRenewedWithOtherLocks(t *testing.T) {
	c, rt := renewalTimedClient(t)
	ctx := context.Background()

	const fixed = 900 * time.Millisecond
	renewed := mustLock(t, c, "renewed", WithTTL(600*time.Millisecond)) // a round trip every 200 ms
	defer func() { _ = renewed.Unlock(ctx) }()
	l := mustLock(t, c, "fixed-among-renewed", WithTTL(fixed), WithoutRenewal())
	select {
	case <-l.Done():
	case <-time.After(2 * fixed):
		t.Fatalf("fixed lease of %v not lost after %v", fixed, 2*fixed)
	}
	if err := context.Cause(l.Context()); !errors.Is(err, ErrLockLost) || !strings.Contains(err.Error(), "fixed lease") {
		t.Errorf("cause = %v, want the fixed lease's loss", err)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if n := len(rt.at[c.keys(l.Key()).lock]); n != 0 {
		t.Errorf("lock taken WithoutRenewal renewed %d times", n)
	}
	if len(rt.at[c.keys(renewed.Key()).lock]) == 0 {
		t.Error("the other lock was never renewed")
	}
}

// failKeyRenewals fails every renewal of one key (its reply replaced by
// an error, as if it were lost), and records when each was sent.
type failKeyRenewals struct {
	testutil.PassHook
	key string // set before the first lock is taken
	mu  sync.Mutex
	at  []time.Time
}

func (h *failKeyRenewals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		now := time.Now()
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if sha, key := firstKey(cmd); sha == extendScript.Hash() && key == h.key {
				h.mu.Lock()
				h.at = append(h.at, now)
				h.mu.Unlock()
				cmd.SetErr(errors.New("connection reset"))
			}
		}
		return err
	}
}

// A failed renewal is retried a tenth of the lease later, and not sooner
// along with another lock's round trip: the sixth of the lease it could go
// early by is for renewals due, not for retries, or a lock that fails
// while others are renewed often would be retried in every one of their
// rounds.
func TestFailedRenewalNotRetriedInAnotherLocksRound(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	fail := &failKeyRenewals{}
	rdb.AddHook(fail)
	c := newClientOn(t, rdb)
	ctx := context.Background()

	const ttl = 3 * time.Second // retried every 300 ms
	fail.key = c.keys("failing").lock
	other := mustLock(t, c, "often", WithTTL(240*time.Millisecond)) // a round trip every 80 ms
	defer func() { _ = other.Unlock(ctx) }()
	l := mustLock(t, c, "failing", WithTTL(ttl))
	defer func() { _ = l.Unlock(ctx) }()
	waitUntil(t, 5*time.Second, "three failed renewals", func() bool {
		fail.mu.Lock()
		defer fail.mu.Unlock()
		return len(fail.at) >= 3
	})
	fail.mu.Lock()
	defer fail.mu.Unlock()
	for i := 1; i < 3; i++ {
		if gap := fail.at[i].Sub(fail.at[i-1]); gap < ttl/10-10*time.Millisecond {
			t.Errorf("failed renewal retried %v after the one before, want %v at least (lease/10)", gap, ttl/10)
		}
	}
}

// An Extend given the lock's own Context (a level-1 Lock's is the hold's)
// that waits behind a call under way sees that Context end with the loss:
// it returns the loss, as it says, not context.Canceled. Both of its waits
// end at once, and either may be taken: a few rounds try both.
func TestExtendWithTheLocksContextWaitingSeesLoss(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for i := range 20 {
		var armed atomic.Bool
		ran, proceed := make(chan struct{}), make(chan struct{})
		c, _ := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{extendScript.Hash(): func() error {
			if armed.CompareAndSwap(true, false) {
				close(ran)
				<-proceed // Redis ran it; its reply is slow
			}
			return nil
		}}})
		// Close leaves the lock in Redis: a key of its own each round.
		l := mustLock(t, c, fmt.Sprint("extend-own-ctx-", i), WithTTL(time.Minute))
		armed.Store(true)
		first := make(chan error, 1)
		go func() { first <- l.Extend(ctx, time.Minute) }()
		<-ran
		second := make(chan error, 1)
		go func() { second <- l.Extend(l.Context(), time.Minute) }()
		waitUntil(t, 5*time.Second, "the Extend to wait for the call under way", func() bool {
			c.dog.mu.Lock()
			defer c.dog.mu.Unlock()
			return l.h.idle != nil
		})
		closed := make(chan error, 1)
		go func() { closed <- c.Close() }() // waits for the call under way
		err := testutil.Receive(t, second, 5*time.Second, "the waiting Extend to return")
		close(proceed)
		<-first
		<-closed
		if !errors.Is(err, ErrLockLost) {
			t.Fatalf("round %d: Extend with the lock's Context, lost while it waited = %v, want ErrLockLost", i, err)
		}
	}
}
