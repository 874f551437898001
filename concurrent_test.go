package dlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/testutil"
)

// together runs fns in goroutines let go at once, and returns their
// errors, in order, once all have returned (within 10 s).
func together(t *testing.T, fns ...func() error) []error {
	t.Helper()
	start := make(chan struct{})
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = fn()
		}()
	}
	close(start)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	testutil.Receive(t, done, 10*time.Second, "the concurrent calls")
	return errs
}

// Two Unlocks of one Lock at once release it once: one returns nil, the
// other ErrNotHeld (not a loss), and the waiter the lock went to keeps it.
func TestConcurrentUnlocksReleaseOnce(t *testing.T) {
	c, rdb, srv := newTestClient(t)
	other := newClientOn(t, srv.Client(t))
	ctx := context.Background()
	for range 20 {
		l := mustLock(t, c, "k")
		got := make(chan *Lock, 1)
		go func() { o, _ := other.Lock(ctx, "k"); got <- o }()
		waitQueuedAndSubscribed(t, rdb, other, "k")
		errs := together(t, func() error { return l.Unlock(ctx) }, func() error { return l.Unlock(ctx) })
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("Unlocks = %v, want one nil", errs)
		}
		for _, err := range errs {
			if err != nil && (!errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLockLost)) {
				t.Fatalf("second Unlock = %v, want ErrNotHeld, not ErrLockLost", err)
			}
		}
		if cause := context.Cause(l.Context()); !errors.Is(cause, ErrReleased) {
			t.Fatalf("cause = %v, want ErrReleased", cause)
		}
		o := testutil.Receive(t, got, 5*time.Second, "the waiter's Lock")
		if o == nil {
			t.Fatal("the waiter got nothing")
		}
		if _, err := o.TTL(ctx); err != nil {
			t.Fatalf("the waiter's lock after the two Unlocks: %v", err)
		}
		if err := o.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Extend, TTL, Txn and a re-entry racing Unlock return nil or ErrReleased,
// and none of them leaves the key in Redis.
func TestCallsRacingUnlock(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	for range 20 {
		l := mustLock(t, c, "k")
		var in *Lock
		errs := together(t,
			func() error { return l.Unlock(ctx) },
			func() error { return l.Extend(ctx, 5*time.Second) },
			func() error { _, err := l.TTL(ctx); return err },
			func() error {
				return l.Txn(ctx, func(pipe redis.Pipeliner) error { pipe.Incr(ctx, l.SlotKey("n")); return nil })
			},
			func() (err error) { in, err = c.Lock(l.Context(), "k"); return err },
		)
		if in != nil && in.Context().Err() == nil {
			t.Fatal("a re-entered Lock live after its outer Unlock")
		}
		if errs[0] != nil {
			t.Fatalf("Unlock = %v", errs[0])
		}
		for i, what := range []string{"Extend", "TTL", "Txn", "re-entry"} {
			if err := errs[i+1]; err != nil && !errors.Is(err, ErrReleased) {
				t.Errorf("%s racing Unlock = %v, want nil or ErrReleased", what, err)
			}
		}
		if n := rdb.Exists(ctx, c.keys("k").lock).Val(); n != 0 {
			t.Fatal("the lock is in Redis after its Unlock")
		}
	}
}

// Inner Unlocks racing the outermost one: every Context ends as released,
// no call reports a loss, and the key goes.
func TestInnerUnlocksRacingOuterUnlock(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	for range 20 {
		outer := mustLock(t, c, "k")
		inner, err := c.Lock(outer.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		errs := together(t,
			func() error { return inner.Unlock(ctx) },
			func() error { return inner.Unlock(ctx) },
			func() error { return outer.Unlock(ctx) },
		)
		for _, err := range errs {
			if err != nil && (!errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLockLost)) {
				t.Fatalf("Unlocks = %v, want nil or ErrNotHeld, not ErrLockLost", errs)
			}
		}
		for _, l := range []*Lock{inner, outer} {
			if cause := context.Cause(l.Context()); !errors.Is(cause, ErrReleased) {
				t.Fatalf("level %d's cause = %v, want ErrReleased", l.level, cause)
			}
		}
		if n := rdb.Exists(ctx, c.keys("k").lock).Val(); n != 0 {
			t.Fatal("the lock is in Redis after its outermost Unlock")
		}
	}
}

// Unlock racing Close ends the Context (released, or lost to Close) and
// the key goes, by that Unlock or, after Close, by another.
func TestUnlockRacingClose(t *testing.T) {
	for range 10 {
		c, rdb, _ := newTestClient(t)
		ctx := context.Background()
		l := mustLock(t, c, "k")
		errs := together(t, func() error { return l.Unlock(ctx) }, c.Close)
		if cause := context.Cause(l.Context()); !errors.Is(cause, ErrReleased) && !errors.Is(cause, ErrClosed) {
			t.Fatalf("cause = %v, want ErrReleased or ErrClosed", cause)
		}
		if errs[0] != nil {
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock after Close, the first one = %v: %v", errs[0], err)
			}
		}
		if n := rdb.Exists(ctx, c.keys("k").lock).Val(); n != 0 {
			t.Fatalf("the lock is in Redis after Unlock (%v) racing Close", errs[0])
		}
	}
}
