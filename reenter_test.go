package dlock

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

// lossyClient returns a Client whose go-redis client (default MaxRetries:
// a request whose reply was lost is sent again) loses the reply to the
// first request of script sha, and the hook, to arm more losses.
func lossyClient(t *testing.T, srv *redistest.Server, s *redis.Script, sha string) (*Client, *redis.Client, *testutil.LostReply) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	// Every connection is dialed through the hook.
	h := &testutil.LostReply{Marker: []byte(sha)}
	rdb.AddHook(h)
	// Cached, so that the script goes as EVALSHA, which names it.
	if err := s.Load(context.Background(), rdb).Err(); err != nil {
		t.Fatal(err)
	}
	return newClientOn(t, rdb), rdb, h
}

// holdCount is the hold count Inspect shows for key.
// waitedFor reports whether a goroutine has waited for the turn under
// way.
func (t *turn) waitedFor() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.free != nil
}

func holdCount(t *testing.T, c *Client, key string) int {
	t.Helper()
	info, err := c.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return info.HoldCount
}

// A re-entry that go-redis delivers twice (its reply was lost, and the
// client sent it again) adds one hold, not two.
func TestReenterDeliveredTwice(t *testing.T) {
	srv := redistest.Start(t)
	c, _, h := lossyClient(t, srv, reenterScript, reenterScript.Hash())
	ctx := context.Background()
	outer := mustLock(t, c, "reenter-twice")
	h.Left.Store(1)
	inner, err := c.Lock(outer.Context(), "reenter-twice")
	if err != nil {
		t.Fatalf("re-entry with its reply lost and sent again: %v", err)
	}
	if h.Lost.Load() == 0 {
		t.Fatal("no re-entry reply was lost: the test did not test anything")
	}
	if n := holdCount(t, c, "reenter-twice"); n != 2 {
		t.Errorf("hold count %d after one re-entry delivered twice, want 2", n)
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := holdCount(t, c, "reenter-twice"); n != 1 {
		t.Errorf("hold count %d after the inner Unlock, want 1", n)
	}
	if err := outer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if info, _ := c.Inspect(ctx, "reenter-twice"); info == nil || info.Held {
		t.Error("still held after the outermost Unlock")
	}
}

// An inner Unlock whose release reply is lost, and which go-redis sends
// again, must not give back the hold of a re-entry made in between (by
// another goroutine, through the same lock's Context).
func TestRetriedInnerUnlockKeepsLaterReentry(t *testing.T) {
	srv := redistest.Start(t)
	c, _, h := lossyClient(t, srv, releaseEval.script, releaseEval.sha)
	ctx := context.Background()
	outer := mustLock(t, c, "retried-inner")
	inner, err := c.Lock(outer.Context(), "retried-inner")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *Lock
		err error
	}
	other := make(chan result, 1)
	h.OnLost = func() {
		go func() {
			l, err := c.Lock(outer.Context(), "retried-inner")
			other <- result{l, err}
		}()
		// The release has run and its reply is lost: the other re-entry
		// goes before go-redis sends the release again, unless it waits
		// for this Unlock to end (it then waits for levelTurn).
		// Either is waited for; the test checks the outcome below.
		waiting := outer.h.levelTurn.waitedFor
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			select {
			case r := <-other:
				other <- r
				return
			default:
			}
			if waiting() {
				return
			}
		}
	}
	h.Left.Store(1)
	if err := inner.Unlock(ctx); err != nil {
		t.Fatalf("inner Unlock, its reply lost and sent again: %v", err)
	}
	if h.Lost.Load() == 0 {
		t.Fatal("no release reply was lost: the test did not test anything")
	}
	r := testutil.Receive(t, other, 5*time.Second, "the other re-entry")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if n := holdCount(t, c, "retried-inner"); n != 2 {
		t.Errorf("hold count %d with the outer Lock and the later re-entry held, want 2", n)
	}
	if err := r.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := holdCount(t, c, "retried-inner"); n != 1 {
		t.Errorf("hold count %d after the later re-entry's Unlock, want 1", n)
	}
	if err := outer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// An inner Unlock that waits for another goroutine's re-entry of the same
// lock (inner level changes go one at a time) still honours its context:
// it does not wait for as long as that re-entry's round trip takes.
func TestInnerUnlockHonoursCtxWhileReentryWaits(t *testing.T) {
	srv := redistest.Start(t)
	proxy := startProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ReadTimeout: 20 * time.Second, ContextTimeoutEnabled: true})
	defer rdb.Close()
	c := newClientOn(t, rdb)
	outer := mustLock(t, c, "level-wait")
	inner, err := c.Lock(outer.Context(), "level-wait")
	if err != nil {
		t.Fatal(err)
	}
	sha := []byte(reenterScript.Hash())
	froze := proxy.FreezeOn(func(b []byte) bool { return bytes.Contains(b, sha) })
	defer proxy.Thaw()
	reentered := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(outer.Context(), 8*time.Second)
		defer cancel()
		l, err := c.Lock(ctx, "level-wait")
		if err == nil {
			_ = l.Unlock(context.Background())
		}
		reentered <- err
	}()
	testutil.Receive(t, froze, 5*time.Second, "the re-entry's request")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = inner.Unlock(ctx)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("inner Unlock with a 200ms context took %v: it waited for the other re-entry's round trip", d)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("inner Unlock: %v, want the context's error", err)
	}
	proxy.Thaw()
	testutil.Receive(t, reentered, 10*time.Second, "the re-entry's end")
}

// A re-entry whose hold ends on this side while its request is on its way
// (Close, which leaves the lock in Redis) does not hand out a Lock that
// has ended already: like an acquisition that Close cuts short, it fails.
func TestReenterOfAHoldEndedMeanwhileFails(t *testing.T) {
	srv := redistest.Start(t)
	hooked := srv.Client(t)
	c := newClientOn(t, hooked)
	outer := mustLock(t, c, "reenter-ended", WithTTL(time.Minute))
	closed := make(chan struct{})
	hooked.AddHook(onCommand{name: "evalsha", do: &sync.Once{}, fn: func() {
		// Close waits for this re-entry: only its first part, which ends
		// the holds, is waited for here.
		go func() { c.Close(); close(closed) }()
		<-outer.Done()
	}})
	// A context with the hold's values but not its cancellation (a
	// detached goroutine's): the request is sent whatever the hold does.
	inner, err := c.Lock(context.WithoutCancel(outer.Context()), "reenter-ended")
	testutil.Receive(t, closed, 10*time.Second, "Close")
	if err == nil {
		t.Fatalf("re-entry of a hold ended while it was on its way = a Lock (its Context: %v), want an error", context.Cause(inner.Context()))
	}
	if !errors.Is(err, ErrClosed) {
		t.Errorf("re-entry = %v, want ErrClosed", err)
	}
	// The count Redis raised goes with the outermost Unlock.
	_ = outer.Unlock(context.Background())
	if n := hooked.Exists(context.Background(), c.keys("reenter-ended").lock).Val(); n != 0 {
		t.Error("the lock is still in Redis after the outermost Unlock")
	}
}

// A re-entry that waits for another's (inner level changes go one at a
// time) and sees the hold end meanwhile (its context is the hold's) fails
// with the hold's end, as a re-entry of an ended hold does, not with the
// bare context.Canceled its context ended with.
func TestReenterWaitingWhenTheHoldEndsSaysWhy(t *testing.T) {
	srv := redistest.Start(t)
	held := newHeldCall(nil)
	c, _ := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{reenterScript.Hash(): held.run}})
	outer := mustLock(t, c, "reenter-waiting")
	held.arm()
	first := make(chan error, 1)
	go func() {
		l, err := c.TryLock(outer.Context(), "reenter-waiting")
		if err == nil {
			_ = l.Unlock(context.Background())
		}
		first <- err
	}()
	testutil.Receive(t, held.reached, 5*time.Second, "the first re-entry's request")
	second := make(chan error, 1)
	go func() {
		_, err := c.TryLock(outer.Context(), "reenter-waiting")
		second <- err
	}()
	waitUntil(t, 5*time.Second, "the second re-entry to wait", outer.h.levelTurn.waitedFor)
	if err := outer.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Receive(t, second, 5*time.Second, "the second re-entry"); !errors.Is(err, ErrReleased) {
		t.Errorf("re-entry waiting when the hold was released = %v, want ErrReleased", err)
	}
	held.release()
	testutil.Receive(t, first, 5*time.Second, "the first re-entry")
}

// A re-entry with the lock's own Context, whose outer Unlock ends the hold
// between the re-entry's look at it and its request, fails with the hold's
// end (ErrReleased), as documented, not with the bare context.Canceled its
// context ended with.
func TestReenterRacingOuterUnlockSaysWhy(t *testing.T) {
	srv := redistest.Start(t)
	var outer *Lock
	var armed atomic.Bool
	unlocked := make(chan error, 1)
	c, _ := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{reenterScript.Hash(): func() error {
		if armed.CompareAndSwap(true, false) {
			unlocked <- outer.Unlock(context.Background())
		}
		return nil // the re-entry goes on, its context now ended
	}}})
	outer = mustLock(t, c, "reenter-racing")
	armed.Store(true)
	_, err := c.Lock(outer.Context(), "reenter-racing")
	if uerr := testutil.Receive(t, unlocked, 5*time.Second, "the outer Unlock"); uerr != nil {
		t.Fatal(uerr)
	}
	if !errors.Is(err, ErrReleased) {
		t.Errorf("re-entry racing the outer Unlock = %v, want ErrReleased", err)
	}
}
