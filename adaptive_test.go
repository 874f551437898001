package dlock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

// grantedLease returns the lease the lock k was granted, however long ago:
// from the server time of the grant (':at') to its expiry time, read in
// one transaction. It fails the test if the lock is gone.
func grantedLease(t *testing.T, rdb *redis.Client, k *lockKeys) time.Duration {
	t.Helper()
	ctx := context.Background()
	var at *redis.StringCmd
	var expiry *redis.Cmd
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		at = p.HGet(ctx, k.lock, ":at")
		// Absolute, so no clock read here enters the difference (a
		// relative PTTL and a TIME, even in one MULTI, may be read
		// milliseconds apart on a loaded machine).
		expiry = p.Do(ctx, "PEXPIRETIME", k.lock)
		return nil
	})
	atMs, aerr := at.Int64()
	expMs, eerr := expiry.Int64()
	if err != nil || aerr != nil || eerr != nil || expMs <= 0 {
		t.Fatalf("lease of %s: grant at %q, expiry %v: %v", k.lock, at.Val(), expiry.Val(), err)
	}
	return time.Duration(expMs-atMs) * time.Millisecond
}

// near reports whether a lease read by grantedLease is want, give or take
// the milliseconds Redis rounds to. The script reads TIME for ':at' before
// PEXPIRE reads the clock, so a script slowed down by a loaded machine
// adds up to its own run time, which lies within took, the duration of
// the call that took the lock.
func near(lease, want, took time.Duration) bool {
	return lease >= want-2*time.Millisecond && lease <= want+took+2*time.Millisecond
}

// lockTimed is mustLock, also returning how long the call took.
func lockTimed(t *testing.T, c *Client, key string, opts ...LockOption) (*Lock, time.Duration) {
	t.Helper()
	began := time.Now()
	l := mustLock(t, c, key, opts...)
	return l, time.Since(began)
}

func TestAdaptiveLeaseFollowsHoldTimes(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	const work = 40 * time.Millisecond
	opts := []LockOption{WithoutRenewal(), WithTTL(5 * time.Second), WithAdaptiveTTL(2, 0)}
	k := c.keys("batch")
	n := c.be.(*node)

	// No hold time on record: WithTTL's lease.
	l, took := lockTimed(t, c, "batch", opts...)
	if lease := grantedLease(t, rdb, k); !near(lease, 5*time.Second, took) {
		t.Errorf("first lease %v, want 5s", lease)
	}
	time.Sleep(work) // the work under the lock
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := n.HoldStats(ctx, "batch")
	if err != nil {
		t.Fatal(err)
	}
	if s.Samples != 1 || s.Mean < work || s.Mean > work+time.Second {
		t.Fatalf("stats after one hold = %+v, want 1 sample of about %v", s, work)
	}
	if ttl := rdb.PTTL(ctx, statsKey(k)).Val(); ttl < statsTTL-time.Minute {
		t.Errorf("stats expire in %v, want %v", ttl, statsTTL)
	}

	// From then on the lease covers the recorded hold times.
	a := &adaptiveConfig{margin: 2}
	for i := range 4 {
		s, err := n.HoldStats(ctx, "batch")
		if err != nil {
			t.Fatal(err)
		}
		want := time.Duration(backend.Millis(a.lease(s))) * time.Millisecond // Redis has milliseconds
		l, took := lockTimed(t, c, "batch", opts...)
		if lease := grantedLease(t, rdb, k); !near(lease, want, took) {
			t.Errorf("lease %d: %v, want %v (stats %+v)", i, lease, want, s)
		}
		// Well under WithTTL's 5 s, though a hold slowed down by a loaded
		// machine widens the deviation, and the lease with it.
		if want < 2*work || want > 2500*time.Millisecond {
			t.Errorf("lease %d = %v for holds of %v", i, want, work)
		}
		time.Sleep(work)
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("hold %d: %v", i, err)
		}
	}
	if s, _ := n.HoldStats(ctx, "batch"); s.Samples != 5 {
		t.Errorf("%d samples, want 5", s.Samples)
	}
}

func TestAdaptiveLeaseLearnsFromOverrun(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	k := c.keys("overrun")
	// Recorded holds of 200 ms: a lease of 300 ms, plus the drift.
	rdb.HSet(ctx, statsKey(k), "mean_us", 200000, "dev_us", 0, "n", 5)
	l, took := lockTimed(t, c, "overrun", WithoutRenewal(), WithAdaptiveTTL(1.5, 0))
	if lease, want := grantedLease(t, rdb, k), 300*time.Millisecond; !near(lease, want+backend.Drift(want), took) {
		t.Errorf("lease %v, want %v", lease, want+backend.Drift(want))
	}
	// This time the work takes longer: the lock is lost...
	<-l.Done()
	waitUntil(t, 5*time.Second, "the lease to run out", func() bool { return rdb.Exists(ctx, k.lock).Val() == 0 })
	if err := l.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock after the lease ran out = %v", err)
	}
	// ...and the overrun is on record, so the next lease is longer.
	s, err := c.be.(*node).HoldStats(ctx, "overrun")
	if err != nil {
		t.Fatal(err)
	}
	if s.Samples != 6 || s.Mean <= 200*time.Millisecond {
		t.Errorf("stats after the overrun = %+v, want 6 samples, mean above 200ms", s)
	}
}

func TestAdaptiveLeaseBounds(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	k := c.keys("long")
	rdb.HSet(ctx, statsKey(k), "mean_us", int64(time.Hour/time.Microsecond), "dev_us", 0, "n", 1)
	l, took := lockTimed(t, c, "long", WithoutRenewal(), WithAdaptiveTTL(2, 2*time.Second))
	if lease := grantedLease(t, rdb, k); !near(lease, 2*time.Second, took) {
		t.Errorf("lease %v, want the 2s cap", lease)
	}
	_ = l.Unlock(ctx)

	a := &adaptiveConfig{margin: 1}
	if d := a.lease(backend.HoldStats{Mean: time.Microsecond, Samples: 1}); d != MinTTL {
		t.Errorf("lease for tiny holds = %v, want MinTTL", d)
	}
	// A product past what a Duration holds gives the cap, not a wrapped
	// (negative, so MinTTL) lease.
	huge := &adaptiveConfig{margin: 1.02e11, max: time.Hour}
	if d := huge.lease(backend.HoldStats{Mean: 50 * time.Millisecond, Dev: 10 * time.Millisecond, Samples: 5}); d != time.Hour {
		t.Errorf("lease with margin 1.02e11 and max 1h = %v, want 1h", d)
	}
	// margin × (average + 4 × deviation), plus the drift margin.
	const want = 2 * (100*time.Millisecond + 4*50*time.Millisecond)
	if d := (&adaptiveConfig{margin: 2}).lease(backend.HoldStats{Mean: 100 * time.Millisecond, Dev: 50 * time.Millisecond, Samples: 3}); d != want+backend.Drift(want) {
		t.Errorf("lease for holds of 100ms ± 50ms with margin 2 = %v, want %v", d, want+backend.Drift(want))
	}
	// A margin of 1 is the least allowed, not refused.
	one, err := c.Lock(ctx, "margin1", WithoutRenewal(), WithAdaptiveTTL(1, 0))
	if err != nil {
		t.Fatalf("Lock with an adaptive margin of 1 = %v", err)
	}
	_ = one.Unlock(ctx)
	for _, bad := range []struct {
		opts []LockOption
		want error
	}{
		{[]LockOption{WithAdaptiveTTL(2, 0)}, ErrInvalidOption}, // renewal on
		{[]LockOption{WithoutRenewal(), WithAdaptiveTTL(0.5, 0)}, ErrInvalidOption},
		{[]LockOption{WithoutRenewal(), WithAdaptiveTTL(2, time.Millisecond)}, ErrInvalidTTL},
	} {
		if _, err := c.Lock(ctx, "bad", bad.opts...); !errors.Is(err, bad.want) {
			t.Errorf("Lock with bad adaptive options = %v, want %v", err, bad.want)
		}
	}
}

func TestAdaptiveLeaseOffWritesNothing(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	if err := c.Do(ctx, "plain", func(context.Context) error { return nil }, WithoutRenewal(), WithTTL(time.Second)); err != nil {
		t.Fatal(err)
	}
	if rdb.Exists(ctx, statsKey(c.keys("plain"))).Val() != 0 {
		t.Error("a lock without WithAdaptiveTTL wrote hold statistics")
	}
}

// TestAdaptiveLeaseHugeStatsGiveTheCap: hold times on record past what a
// Duration holds in nanoseconds (a hash written by hand, or corrupted) must
// give the cap, as a huge product does, not wrap around to a negative
// average and so the shortest lease.
func TestAdaptiveLeaseHugeStatsGiveTheCap(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	k := c.keys("huge")
	// About 585,000 years in microseconds: fits an int64, not a Duration
	// in nanoseconds (times 1000 it wraps around to 384 ns).
	rdb.HSet(ctx, statsKey(k), "mean_us", int64(18_446_744_073_709_552), "dev_us", 0, "n", 5)
	s, err := c.be.(*node).HoldStats(ctx, "huge")
	if err != nil {
		t.Fatal(err)
	}
	if s.Mean < time.Hour {
		t.Errorf("mean hold time read as %v", s.Mean)
	}
	l := mustLock(t, c, "huge", WithoutRenewal(), WithAdaptiveTTL(2, 2*time.Second))
	defer l.Unlock(ctx)
	c.dog.mu.Lock()
	lease := l.h.ttl
	c.dog.mu.Unlock()
	if lease != 2*time.Second {
		t.Errorf("lease %v for hold times of centuries, want the 2s cap", lease)
	}
}

// TestAdaptiveLeaseCoversTheRoundTrip: the holder trusts its lease from
// before the acquisition was sent, so the hold time that sizes later
// leases must count the acquisition's round trip. Measured from the
// grant's reply, short work over a slow link (here 25 ms each way for the
// grant) records holds of microseconds, sizes the next lease to MinTTL,
// and every later acquisition finds its lease over before the grant's
// reply arrives (ErrLockLost): nothing is recorded then, so the key stays
// unusable until its statistics expire a week later.
func TestAdaptiveLeaseCoversTheRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	const latency = 25 * time.Millisecond
	slow := func() error { time.Sleep(latency); return nil } // the link's delay, not a wait
	c, _ := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{acquireEval.sha: slow}})
	ctx := context.Background()
	opts := []LockOption{WithoutRenewal(), WithTTL(5 * time.Second), WithAdaptiveTTL(2, 0)}
	for i := range 3 {
		l, err := c.TryLock(ctx, "remote", opts...)
		if err != nil {
			t.Fatalf("acquisition %d (stats %+v): %v", i, holdStats(t, c, "remote"), err)
		}
		if err := l.Unlock(ctx); err != nil { // short work
			t.Fatalf("unlock %d: %v", i, err)
		}
	}
}

func holdStats(t *testing.T, c *Client, key string) backend.HoldStats {
	t.Helper()
	s, err := c.be.(*node).HoldStats(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAdaptiveLeaseLearnsFromLateGrant: a grant whose reply comes after
// its adaptive lease could be trusted (a slower link than the holds on
// record were made over) overran that lease, and must lengthen later
// leases as an overrun held to Unlock does. Unrecorded, every later
// acquisition over that link asks for the same short lease and fails the
// same way, for as long as the others keep the statistics fresh.
func TestAdaptiveLeaseLearnsFromLateGrant(t *testing.T) {
	srv := redistest.Start(t)
	const latency = 25 * time.Millisecond
	slow := func() error { time.Sleep(latency); return nil } // the link's delay, not a wait
	c, rdb := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{acquireEval.sha: slow}})
	ctx := context.Background()
	// Holds of 1 ms on record (made over a fast link): a lease of MinTTL.
	rdb.HSet(ctx, statsKey(c.keys("remote")), "mean_us", 1000, "dev_us", 0, "n", 5)
	opts := []LockOption{WithoutRenewal(), WithAdaptiveTTL(2, 0)}
	var err error
	for range 3 {
		var l *Lock
		if l, err = c.TryLock(ctx, "remote", opts...); err == nil {
			_ = l.Unlock(ctx)
			return
		}
		if !errors.Is(err, ErrLockLost) {
			t.Fatal(err)
		}
	}
	t.Errorf("3 acquisitions over a slow link failed (stats %+v): %v", holdStats(t, c, "remote"), err)
}

// holdstats.lua: statistics HoldStats cannot read back once written are
// corrupt like any other value that is not a number, and the next hold
// starts them again: values that are not finite ("inf", "nan", read by
// Lua's tonumber as numbers, stayed so at every hold, and the adaptive
// lease never applied while the lock kept being used), a sample count
// that is not a whole number ("1.5", which Lua kept adding 1 to),
// negative, or past what a double counts exactly, and averages past an
// int64 of microseconds ("1e300", which took thousands of holds to decay).
func TestHoldStatsUnreadableStartAgain(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	n := c.be.(*node)
	for i, bad := range [][3]string{
		{"inf", "0", "5"}, {"-inf", "0", "5"}, {"nan", "0", "5"},
		{"1000", "0", "1.5"}, {"1000", "0", "-3"}, {"1000", "0", "1e300"},
		{"1e300", "0", "5"}, {"1000", "1e300", "5"}, {"-1e300", "0", "5"},
	} {
		key := "stats-" + strconv.Itoa(i)
		rdb.HSet(ctx, statsKey(c.keys(key)), "mean_us", bad[0], "dev_us", bad[1], "n", bad[2])
		l := mustLock(t, c, key, WithoutRenewal(), WithTTL(5*time.Second), WithAdaptiveTTL(2, 0))
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		s, err := n.HoldStats(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if s.Samples != 1 || s.Mean > time.Second {
			t.Errorf("stats %v: after a hold = %+v (hash %v), want 1 sample of this hold", bad, s, rdb.HGetAll(ctx, statsKey(c.keys(key))).Val())
		}
	}
}

// failFirst is a go-redis hook that fails the first command named name,
// without sending it.
type failFirst struct {
	testutil.PassHook
	name string
	once *sync.Once
}

func (h failFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		failed := false
		if cmd.Name() == h.name {
			h.once.Do(func() { failed = true })
		}
		if failed {
			err := errors.New("connection reset by peer")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// An acquisition whose hold statistics could not be read takes the fixed
// lease, and its hold time is still recorded at release.
func TestAdaptiveHoldRecordedAfterUnreadableStats(t *testing.T) {
	srv := redistest.Start(t)
	hooked := srv.Client(t)
	hooked.AddHook(failFirst{name: "hmget", once: &sync.Once{}})
	c := newClientOn(t, hooked)
	ctx := context.Background()
	l := mustLock(t, c, "unread", WithoutRenewal(), WithTTL(5*time.Second), WithAdaptiveTTL(2, 0))
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := c.be.(*node).HoldStats(ctx, "unread")
	if err != nil {
		t.Fatal(err)
	}
	if s.Samples != 1 {
		t.Errorf("stats after a hold whose statistics were not read = %+v, want that hold recorded", s)
	}
}

// A hold whose release failed is not recorded: the lock may still be
// held, to the end of its lease, and that hold is not one its holder
// timed.
func TestAdaptiveHoldNotRecordedWhenReleaseFails(t *testing.T) {
	srv := redistest.Start(t)
	errInjected := errors.New("injected release failure")
	c, _ := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{releaseEval.sha: func() error { return errInjected }}})
	ctx := context.Background()
	l := mustLock(t, c, "unreleased", WithoutRenewal(), WithTTL(5*time.Second), WithAdaptiveTTL(2, 0))
	if err := l.Unlock(ctx); !errors.Is(err, errInjected) {
		t.Fatalf("Unlock = %v, want the injected failure", err)
	}
	s, err := c.be.(*node).HoldStats(ctx, "unreleased")
	if err != nil {
		t.Fatal(err)
	}
	if s.Samples != 0 {
		t.Errorf("stats after a hold whose release failed = %+v, want none recorded", s)
	}
}

// lockQueued takes key's adaptive lock with waiter in a goroutine (queued
// behind a plain lock, which records nothing), holds it for work once
// granted and unlocks. The channel gets when Lock returned, and Lock's or
// Unlock's error.
func lockQueued(waiter *Client, key string, work time.Duration) <-chan queuedHold {
	done := make(chan queuedHold, 1)
	go func() {
		ctx := context.Background()
		l, err := waiter.Lock(ctx, key, WithoutRenewal(), WithTTL(5*time.Second), WithAdaptiveTTL(2, 0))
		acquired := time.Now()
		if err == nil {
			time.Sleep(work) // the work under the lock
			err = l.Unlock(ctx)
		}
		done <- queuedHold{acquired, err}
	}()
	return done
}

type queuedHold struct {
	acquired time.Time
	err      error
}

// handedOverHold has a waiter wait queueTime for key, then lets free(rdb)
// end the lock it waits for, and checks that the one hold on record is the
// waiter's work, not the time it spent queued.
func handedOverHold(t *testing.T, key string, queueTime, work time.Duration, free func(rdb *redis.Client, holder *Lock)) {
	t.Helper()
	c, rdb, _ := newTestClient(t)
	waiter := newClientOn(t, rdb)
	holder := mustLock(t, c, key, WithoutRenewal(), WithTTL(5*time.Second))
	done := lockQueued(waiter, key, work)
	waitQueuedAndSubscribed(t, rdb, waiter, key)
	time.Sleep(queueTime) // the time spent queued is the subject
	free(rdb, holder)
	if r := testutil.Receive(t, done, 10*time.Second, "the waiter to hold and unlock"); r.err != nil {
		t.Fatal(r.err)
	}
	if s := holdStats(t, waiter, key); s.Samples != 1 || s.Mean < work || s.Mean > work+queueTime/2 {
		t.Errorf("stats %+v: want the one hold of work of %v, after %v queued", s, work, queueTime)
	}
}

// TestAdaptiveHoldOfHandedOverLock: a lock handed over by its releasing
// holder holds its lease from the hand-over, so its hold time counts from
// there, not from the waiter's first request: counted with the time spent
// queued, N workers taking turns at work of h record holds of about N×h,
// and the adaptive lease settles at several times the work.
func TestAdaptiveHoldOfHandedOverLock(t *testing.T) {
	handedOverHold(t, "relay", 500*time.Millisecond, 20*time.Millisecond, func(_ *redis.Client, holder *Lock) {
		if err := holder.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestAdaptiveHoldAfterDeadHolder: the same for a lock whose holder died
// with a waiter queued: its lease runs out, and the next request (here a
// TryLock of another) hands the lock to the waiter.
func TestAdaptiveHoldAfterDeadHolder(t *testing.T) {
	handedOverHold(t, "orphan", 500*time.Millisecond, 20*time.Millisecond, func(rdb *redis.Client, _ *Lock) {
		ctx := context.Background()
		c := newClientOn(t, rdb)
		k := c.keys("orphan")
		// The dead holder's lease runs out now.
		if err := rdb.PExpire(ctx, k.lock, time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 5*time.Second, "the lease to run out", func() bool { return rdb.Exists(ctx, k.lock).Val() == 0 })
		if _, err := c.TryLock(ctx, "orphan"); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("TryLock with a waiter queued = %v, want ErrNotObtained", err)
		}
	})
}

// TestAdaptiveHoldOfHandOverFoundByCheck: a waiter that learns of the
// hand-over late, from its next check ({2, fence, pttl}) rather than from
// the message (here an ACL refuses it every channel), held the lock from
// the hand-over all the same: its hold time counts from there, or the
// next lease, sized for the work alone, runs out before such a waiter
// learns of it.
func TestAdaptiveHoldOfHandOverFoundByCheck(t *testing.T) {
	const work = 20 * time.Millisecond
	srv := redistest.Start(t)
	admin := srv.Client(t)
	if err := admin.Do(context.Background(), "ACL", "SETUSER", "locker", "on", ">pw", "~*", "resetchannels", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "locker", Password: "pw"})
	t.Cleanup(func() { rdb.Close() })
	// The waiter checks again a second (its queue TTL / 3) after it queued.
	waiter := newClientOn(t, rdb, WithQueueTTL(3*time.Second))
	holder := mustLock(t, newClientOn(t, admin), "late", WithoutRenewal(), WithTTL(5*time.Second))
	done := lockQueued(waiter, "late", work)
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, admin, waiter, "late") == 1 })
	if err := holder.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	handed := time.Now() // the hand-over was before
	r := testutil.Receive(t, done, 10*time.Second, "the waiter to hold and unlock")
	if r.err != nil {
		t.Fatal(r.err)
	}
	late := r.acquired.Sub(handed)
	if late < 200*time.Millisecond {
		t.Fatalf("the waiter learned of the hand-over %v after it: not from its next check", late)
	}
	// Redis has milliseconds: the lease's start, read from the PTTL, is
	// off by one at most.
	if s := holdStats(t, waiter, "late"); s.Samples != 1 || s.Mean < late+work-2*time.Millisecond {
		t.Errorf("stats %+v: want the one hold of %v, the work from a hand-over learned of %v late", s, late+work, late)
	}
}

// TestAdaptiveLeaseUnderContention: workers taking turns at the same short
// work record about that work, whatever the time they spend queued.
func TestAdaptiveLeaseUnderContention(t *testing.T) {
	const workers, rounds, work = 5, 12, 20 * time.Millisecond
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	opts := []LockOption{WithoutRenewal(), WithTTL(5 * time.Second), WithAdaptiveTTL(2, 0)}
	errs := make(chan error, workers)
	for range workers {
		w := newClientOn(t, rdb)
		go func() {
			for range rounds {
				l, err := w.Lock(ctx, "busy", opts...)
				if err != nil {
					errs <- err
					return
				}
				time.Sleep(work) // the work under the lock
				// An overrun of the lease (a loaded machine) is recorded
				// all the same.
				if err := l.Unlock(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := testutil.Receive(t, errs, 30*time.Second, "a worker to finish"); err != nil {
			t.Fatal(err)
		}
	}
	s := holdStats(t, c, "busy")
	lease := (&adaptiveConfig{margin: 2}).lease(s)
	t.Logf("%d workers, work %v: recorded mean %v, dev %v, lease %v (%.1fx the work)", workers, work, s.Mean, s.Dev, lease, float64(lease)/float64(work))
	// Queue time counted would make the mean about workers × work; 3 ×
	// work leaves room for a loaded machine's late wake-ups.
	if s.Samples != workers*rounds || s.Mean > 3*work {
		t.Errorf("stats %+v for work of %v", s, work)
	}
}
