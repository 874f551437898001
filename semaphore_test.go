package dlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
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

// noPolling makes waiters check the queue every 20 s only: within a
// test's bound of 5 s, only a hand-over message wakes them.
var noPolling = WithQueueTTL(time.Minute)

// semKeys returns the Redis names of s.
func semKeys(s *Semaphore) *lockKeys {
	return s.c.be.(*node).keysOf(s.name, &backend.Permits{Kind: s.kind, Capacity: s.capacity})
}

// holderCount counts the holder entries of s (testutil.SemaphoreHolders).
func holderCount(t *testing.T, rdb redis.UniversalClient, s *Semaphore) int {
	t.Helper()
	return testutil.SemaphoreHolders(t, rdb, semKeys(s).lock)
}

// inBackground calls take in a goroutine; the result arrives on the
// channel (buffered: the goroutine never blocks).
func inBackground(take func() (*Lock, error)) <-chan lockResult {
	got := make(chan lockResult, 1)
	go func() {
		l, err := take()
		got <- lockResult{l, err}
	}()
	return got
}

// acquireAsync calls s.Acquire in a goroutine (inBackground).
func acquireAsync(ctx context.Context, s *Semaphore, n int64) <-chan lockResult {
	return inBackground(func() (*Lock, error) { return s.Acquire(ctx, n) })
}

// waitSemQueued waits until n waiters are queued for s and, if n > 0, the
// last of them (made by s's Client) is subscribed to its hand-over channel.
func waitSemQueued(t *testing.T, rdb *redis.Client, s *Semaphore, n int64) {
	t.Helper()
	k := semKeys(s)
	ch := k.channel + ":" + s.c.be.(*node).id
	waitUntil(t, 5*time.Second, fmt.Sprintf("%d waiters queued and subscribed", n), func() bool {
		shard, _ := rdb.PubSubShardNumSub(context.Background(), ch).Result()
		return rdb.ZCard(context.Background(), k.queue).Val() == n && (n == 0 || shard[ch] >= 1)
	})
}

// notYet fails the test if got has a result already.
func notYet(t *testing.T, got <-chan lockResult, what string) {
	t.Helper()
	select {
	case r := <-got:
		t.Fatalf("%s got permits too early (err %v)", what, r.err)
	default:
	}
}

// received waits for got's result and fails the test unless it is a Lock.
func received(t *testing.T, got <-chan lockResult, what string) *Lock {
	t.Helper()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.l
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: not granted within 5s", what)
		return nil
	}
}

func TestSemaphoreNeverGrantsMoreThanCapacity(t *testing.T) {
	srvC, rdb, srv := newTestClient(t)
	clients := []*Client{srvC, newClientOn(t, srv.Client(t)), newClientOn(t, srv.Client(t))}
	const capacity, workers, rounds = 3, 9, 6
	var in, most atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := clients[w%len(clients)].Semaphore("pool", capacity)
			ctx := context.Background()
			for i := 0; i < rounds; i++ {
				n := int64(1 + (w+i)%2) // 1 or 2 permits
				l, err := s.Acquire(ctx, n)
				if err != nil {
					t.Error(err)
					return
				}
				now := in.Add(n)
				for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
				}
				rdb.Incr(ctx, "work") // a round trip inside
				in.Add(-n)
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if m := most.Load(); m > capacity {
		t.Fatalf("%d permits held at once, capacity %d", m, capacity)
	}
	if n := rdb.Get(context.Background(), "work").Val(); n != fmt.Sprint(workers*rounds) {
		t.Fatalf("%s acquisitions, want %d", n, workers*rounds)
	}
	if n := rdb.Exists(context.Background(), semKeys(clients[0].Semaphore("pool", capacity)).lock).Val(); n != 0 {
		t.Fatal("holders left behind after every permit was given back")
	}
}

func TestSemaphoreServesWaitersInOrder(t *testing.T) {
	c, rdb, srv := newTestClient(t, noPolling)
	ctx := context.Background()
	s := c.Semaphore("pool", 3)
	other := newClientOn(t, srv.Client(t), noPolling).Semaphore("pool", 3)
	held, err := s.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	big := acquireAsync(ctx, other, 3)
	waitSemQueued(t, rdb, other, 1)
	// One permit is free, but the waiter for 3 came first: a small
	// request does not overtake it.
	if _, err := s.TryAcquire(ctx, 1); !errors.Is(err, ErrNotObtained) || !strings.Contains(err.Error(), `semaphore "pool"`) {
		t.Fatalf("TryAcquire(1) behind a queued waiter: %v", err)
	}
	small := acquireAsync(ctx, s, 1)
	waitSemQueued(t, rdb, s, 2)
	notYet(t, small, "a waiter behind a larger one")

	// Woken by the release's hand-over message (noPolling).
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	b := received(t, big, "the first waiter")
	notYet(t, small, "the second waiter, with all permits held")
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	sm := received(t, small, "the second waiter")
	if sm.Fence() <= b.Fence() || b.Fence() <= held.Fence() {
		t.Fatalf("fences %d, %d, %d: not increasing", held.Fence(), b.Fence(), sm.Fence())
	}
	_ = sm.Unlock(ctx)
}

// A TryAcquire that finds a holder's lease run out and a waiter queued
// whose request now fits never overtakes it, yet is not refused for it
// either: the attempt grants the waiter first, then itself from what is
// left (TryAcquire's doc). The waiter's own checks are held back meanwhile,
// so that only the TryAcquire can have granted it.
func TestSemaphoreTryAcquireGrantsQueuedWaitersFirst(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	var armed atomic.Bool
	hold := make(chan struct{})
	waiterC, _ := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{permitsAcquireEval.sha: func() error {
		if armed.Load() {
			<-hold
		}
		return nil
	}}}, noPolling)
	rdb := srv.Client(t)
	c := newClientOn(t, rdb)
	s := c.Semaphore("pool", 4)
	dead, err := s.Acquire(ctx, 2, WithTTL(300*time.Millisecond), WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	waiter := waiterC.Semaphore("pool", 4)
	got := acquireAsync(ctx, waiter, 3) // 2 of 4 free: it queues
	waitSemQueued(t, rdb, waiter, 1)
	armed.Store(true)
	released := false
	release := func() {
		if !released {
			released = true
			close(hold)
		}
	}
	defer release()
	testutil.Receive(t, dead.Done(), 5*time.Second, "the holder's lease to run out")
	waitUntil(t, 5*time.Second, "Redis to free the holder's permits", func() bool {
		n, err := s.Available(ctx)
		return err == nil && n != 2
	})
	l, err := s.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatalf("TryAcquire(1) with 4 free and a waiter for 3 first in line = %v, want the waiter granted, then this", err)
	}
	defer l.Unlock(ctx)
	if n, err := s.Available(ctx); err != nil || n != 0 {
		t.Errorf("Available after the TryAcquire = %d, %v; want 0 (3 to the waiter, 1 to TryAcquire)", n, err)
	}
	release()
	w := received(t, got, "the waiter granted by the TryAcquire")
	if w.Fence() >= l.Fence() {
		t.Errorf("waiter's fence %d not below the TryAcquire's %d: not granted first", w.Fence(), l.Fence())
	}
	_ = w.Unlock(ctx)
}

func TestSemaphoreWaiterGivingUpLetsOthersIn(t *testing.T) {
	c, rdb, srv := newTestClient(t, noPolling)
	ctx := context.Background()
	s := c.Semaphore("pool", 3)
	held, err := s.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	other := newClientOn(t, srv.Client(t), noPolling).Semaphore("pool", 3)
	bctx, cancel := context.WithCancel(ctx)
	big := acquireAsync(bctx, other, 3)
	waitSemQueued(t, rdb, other, 1)
	small := acquireAsync(ctx, s, 1)
	waitSemQueued(t, rdb, s, 2)
	cancel()
	if r := <-big; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", r.err)
	}
	// The waiter that left was the one the other waited behind: its
	// leaving hands the free permit over.
	sm := received(t, small, "the waiter behind the one that left")
	if err := sm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// One release can hand permits to more waiters of one Client than it
// keeps hand-overs for while their waiters are not registered yet (they
// register after their check): every one of them still learns of its
// permits at once, not at its next check, while it holds them unused.
func TestSemaphoreHandsOverToManyWaitersOfOneClient(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	if err := permitsAcquireScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	// The waiters' checks run in Redis, but their replies are held back
	// until the hand-overs have arrived: they register after them.
	const waiters = maxEarly + 8
	gate := make(chan struct{})
	c, _ := hookedClientWith(t, &redis.Options{Addr: srv.Addr(), MaxRetries: -1, PoolSize: 2 * waiters}, scriptHook{after: map[string]func() error{
		permitsAcquireScript.Hash(): func() error { <-gate; return nil },
	}}, noPolling)
	// Each check on a connection of its own: batched, the first ones held
	// back would keep the others from being sent.
	c.be.(*node).batch.maxInflight = -1
	s := c.Semaphore("pool", waiters)
	held, err := newClientOn(t, rdb, noPolling).Semaphore("pool", waiters).Acquire(ctx, waiters)
	if err != nil {
		t.Fatal(err)
	}
	// Subscribed already, as after a wait that just ended: the hand-overs
	// reach the Client before its waiters register.
	w := c.be.(*node).wake
	ch := semKeys(s).channel + ":" + c.be.(*node).id
	lingerOn(t, w, ch)

	got := make([]<-chan lockResult, waiters)
	for i := range got {
		got[i] = acquireAsync(ctx, s, 1)
	}
	waitUntil(t, 5*time.Second, "the waiters to queue", func() bool { return rdb.ZCard(ctx, semKeys(s).queue).Val() == waiters })
	if err := held.Unlock(ctx); err != nil { // one permit to each waiter
		t.Fatal(err)
	}
	// Messages on a channel arrive in order: once this one has, so have
	// the hand-overs.
	if err := rdb.SPublish(ctx, ch, "last 1").Err(); err != nil {
		t.Fatal(err)
	}
	awaitEarly(t, w, ch, "last")
	close(gate)
	for i, g := range got {
		l := received(t, g, fmt.Sprintf("waiter %d (noPolling: only told of its permits)", i))
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSemaphorePermitsOfDeadHolderReturnAtLeaseEnd(t *testing.T) {
	c, rdb, srv := newTestClient(t)
	ctx := context.Background()
	s := c.Semaphore("pool", 2)
	kept, err := s.Acquire(ctx, 1, WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// A holder that stops renewing, as one that died: its permit comes
	// back when its lease runs out, while the renewed holder keeps its.
	const lease = 400 * time.Millisecond
	start := time.Now()
	if _, err := s.Acquire(ctx, 1, WithTTL(lease), WithoutRenewal()); err != nil {
		t.Fatal(err)
	}
	waiter := newClientOn(t, srv.Client(t)).Semaphore("pool", 2)
	l := received(t, acquireAsync(ctx, waiter, 1), "the waiter")
	if d := time.Since(start); d < lease-backend.Drift(lease)-10*time.Millisecond {
		t.Fatalf("granted %v after the dead holder's grant, before its lease of %v ran out", d, lease)
	}
	if kept.Context().Err() != nil {
		t.Fatalf("the renewed holder lost its permit: %v", context.Cause(kept.Context()))
	}
	if n := holderCount(t, rdb, s); n != 2 {
		t.Fatalf("%d holders, want 2", n)
	}
	_ = l.Unlock(ctx)
	_ = kept.Unlock(ctx)
}

func TestSemaphoreAvailable(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	s := c.Semaphore("pool", 3)
	available := func() int64 {
		t.Helper()
		n, err := s.Available(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := available(); n != 3 {
		t.Fatalf("Available of an unused semaphore: %d", n)
	}
	kept, err := s.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, 1, WithTTL(200*time.Millisecond), WithoutRenewal()); err != nil {
		t.Fatal(err)
	}
	if n := available(); n != 0 {
		t.Fatalf("Available with all 3 held: %d", n)
	}
	// The unrenewed permit counts no more once its lease has run out, even
	// before any script drops it.
	waitUntil(t, 5*time.Second, "the unrenewed permit to run out", func() bool { return available() == 1 })
	if n := holderCount(t, rdb, s); n != 2 {
		t.Fatalf("Available wrote: %d holders, want the 2 entries still there", n)
	}
	_ = kept.Unlock(ctx)
	if _, err := c.Semaphore("pool", 0).Available(ctx); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("Available with capacity 0: %v", err)
	}
	rdb.Set(ctx, semKeys(s).lock, "other data", 0)
	if _, err := s.Available(ctx); !errors.Is(err, ErrWrongType) {
		t.Fatalf("Available of a string: %v", err)
	}
}

func TestSemaphoreRenewedAndLost(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	s := c.Semaphore("pool", 2)
	l, err := s.Acquire(ctx, 1, WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	k := semKeys(s)
	// Time is the subject: past two leases, only renewals keep it.
	time.Sleep(600 * time.Millisecond)
	if ttl, err := l.TTL(ctx); err != nil || ttl <= 0 {
		t.Fatalf("TTL two leases on: %v, %v", ttl, err)
	}
	if err := l.Context().Err(); err != nil {
		t.Fatalf("lost while renewed: %v", context.Cause(l.Context()))
	}
	// An operator removes the holder: the next renewal finds it gone.
	rdb.HDel(ctx, k.lock, l.Token())
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the loss was not noticed")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	if err := l.Unlock(ctx); !errors.Is(err, ErrLockLost) && !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock of lost permits: %v", err)
	}
}

// semextend.lua, semacquire.lua, semrelease.lua: permits whose lease has
// run out are lost, even while their entry is still in the hash (no call
// has dropped it yet): a late renewal must not bring them back, others
// may hold them by now.
func TestSemaphoreRenewalAfterLeaseRanOutFails(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	// ranOut returns the names of a semaphore of 2, and a holder of one
	// permit whose lease has run out. Another holder keeps the hash, and
	// the entry, in Redis.
	ranOut := func(name string) (*lockKeys, string) {
		k := semKeys(c.Semaphore(name, 2))
		tok, other := backend.NewToken(), backend.NewToken()
		for _, h := range []struct {
			tok   string
			lease int
		}{{other, 60000}, {tok, 100}} {
			if err := permitsAcquireScript.Run(ctx, rdb, k.all(), h.tok, h.lease, "m", "0", 500, h.lease, "cl", 1, 2).Err(); err != nil {
				t.Fatal(err)
			}
		}
		waitUntil(t, 5*time.Second, "the lease to run out", func() bool {
			return permitsTTLScript.Run(ctx, rdb, []string{k.lock}, tok).Val() == int64(-3)
		})
		return k, tok
	}
	k, tok := ranOut("revive")
	for _, arg := range []any{"renew", 1} {
		if v, err := permitsExtendScript.Run(ctx, rdb, []string{k.lock}, tok, 60000, arg).Int64(); err != nil || v != 0 {
			t.Errorf("extend (%v) of permits whose lease ran out = %d, %v; want 0", arg, v, err)
		}
	}
	// Nor does a check of the waiter they were handed to find them its own.
	res, err := permitsAcquireScript.Run(ctx, rdb, k.all(), tok, 100, "m", "1", 500, 100, "cl", 1, 2).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if res[0] == 2 {
		t.Errorf("check after the lease ran out = %v: permits found held", res)
	}
	// Nor are they released: they were lost (ErrNotHeld for Unlock).
	k, tok = ranOut("release")
	if v, err := permitsReleaseScript.Run(ctx, rdb, k.all(), tok, 2).Int64(); err != nil || v != -1 {
		t.Errorf("release of permits whose lease ran out = %d, %v; want -1", v, err)
	}
}

// Lost permits say whose they are: their cause (and the errors that carry
// it) names the semaphore, or the RWMutex, not a lock, on every path that
// finds them lost; it still matches ErrLockLost.
func TestLostPermitsNameTheirSemaphore(t *testing.T) {
	ctx := context.Background()
	errFail := errors.New("reply lost")
	paths := []struct {
		name string
		// lose loses l, and returns the error of the call that found it
		// lost, if any.
		lose func(t *testing.T, c *Client, kind string, l *Lock, arm func()) error
		opts []LockOption
	}{
		{"lease ran out", func(t *testing.T, _ *Client, _ string, l *Lock, _ func()) error {
			<-l.Done()
			return nil
		}, []LockOption{WithTTL(100 * time.Millisecond), WithoutRenewal()}},
		{"renewal found them gone", func(t *testing.T, c *Client, kind string, l *Lock, _ func()) error {
			forceRelease(t, c, kind, l)
			<-l.Done()
			return nil
		}, []LockOption{WithTTL(300 * time.Millisecond)}},
		{"extend found them gone", func(t *testing.T, c *Client, kind string, l *Lock, _ func()) error {
			forceRelease(t, c, kind, l)
			return l.Extend(ctx, time.Second)
		}, []LockOption{WithoutRenewal()}},
		{"ttl found them gone", func(t *testing.T, c *Client, kind string, l *Lock, _ func()) error {
			forceRelease(t, c, kind, l)
			_, err := l.TTL(ctx)
			return err
		}, []LockOption{WithoutRenewal()}},
		{"unlock found them gone", func(t *testing.T, c *Client, kind string, l *Lock, _ func()) error {
			forceRelease(t, c, kind, l)
			return l.Unlock(ctx)
		}, []LockOption{WithoutRenewal()}},
		{"release failed", func(t *testing.T, _ *Client, _ string, l *Lock, arm func()) error {
			arm()
			_ = l.Unlock(ctx) // the release's error: its cause is the Context's
			return nil
		}, nil},
		{"closed", func(t *testing.T, c *Client, _ string, l *Lock, _ func()) error {
			_ = c.Close()
			return nil
		}, nil},
	}
	for _, tk := range permitTakers {
		for _, path := range paths {
			t.Run(tk.name+"/"+path.name, func(t *testing.T) {
				srv := redistest.Start(t)
				fail, arm := failNext(errFail)
				c, _ := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{permitsReleaseEval.sha: fail}})
				l, err := tk.take(ctx, c, "k", true, path.opts...)
				if err != nil {
					t.Fatal(err)
				}
				callErr := path.lose(t, c, tk.kind, l, arm)
				want := fmt.Sprintf("permits of %s %q lost", tk.kind, "k")
				check := func(what string, err error) {
					t.Helper()
					if !errors.Is(err, ErrLockLost) || !strings.Contains(fmt.Sprint(err), want) || strings.Contains(fmt.Sprint(err), ErrLockLost.Error()) {
						t.Errorf("%s = %v, want an error wrapping ErrLockLost that says %q", what, err, want)
					}
				}
				check("the Context's cause", context.Cause(l.Context()))
				if callErr != nil {
					check("the call's error", callErr)
				}
				// So do the calls made on them since; Txn, which refuses
				// permits, too.
				check("Extend", l.Extend(ctx, time.Second))
				_, err = l.TTL(ctx)
				check("TTL", err)
				check("Txn", l.Txn(ctx, func(redis.Pipeliner) error { return nil }))
			})
		}
	}
}

// Permits granted in Redis whose reply comes only after their lease ran
// out are refused as lost, in the words of lost permits too: the error
// names the semaphore (or RWMutex), not a lost lock.
func TestLateGrantOfPermitsNamesTheirSemaphore(t *testing.T) {
	ctx := context.Background()
	const ttl = 100 * time.Millisecond
	for _, tk := range permitTakers {
		t.Run(tk.name, func(t *testing.T) {
			srv := redistest.Start(t)
			var sent time.Time
			c, _ := hookedClient(t, srv.Addr(), scriptHook{
				before: map[string]func() error{permitsAcquireEval.sha: func() error { sent = time.Now(); return nil }},
				after: map[string]func() error{permitsAcquireEval.sha: func() error {
					// The reply is late: the lease counted from before the
					// request has run out when it is read.
					waitUntil(t, 5*time.Second, "the lease to run out", func() bool { return time.Since(sent) > ttl })
					return nil
				}},
			})
			l, err := tk.take(ctx, c, "late", false, WithTTL(ttl), WithoutRenewal())
			if err == nil {
				_ = l.Unlock(ctx)
			}
			want := fmt.Sprintf("permits of %s %q lost", tk.kind, "late")
			if !errors.Is(err, ErrLockLost) || !strings.Contains(fmt.Sprint(err), want) || strings.Contains(fmt.Sprint(err), ErrLockLost.Error()) {
				t.Errorf("late grant = %v, want an error matching ErrLockLost that says %q", err, want)
			}
		})
	}
}

// A lock's loss says ErrLockLost's own words: only permits name their
// semaphore (lostErr), so a lock and a semaphore of one name stay apart.
func TestLostLockDoesNotReadAsPermits(t *testing.T) {
	c, _, _ := newTestClient(t)
	l, err := c.Lock(context.Background(), "k", WithTTL(100*time.Millisecond), WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) || strings.Contains(cause.Error(), "permits") {
		t.Errorf("the lost lock's Context cause = %v, want ErrLockLost, not lost permits", cause)
	}
}

func TestSemaphoreExtendAndTTL(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	l, err := c.Semaphore("pool", 1).Acquire(ctx, 1, WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl < 19*time.Second || ttl > 20*time.Second {
		t.Fatalf("TTL after Extend(20s): %v, %v", ttl, err)
	}
	if err := l.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl > time.Second {
		t.Fatalf("TTL after Extend(1s): %v, %v", ttl, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TTL(ctx); !errors.Is(err, ErrReleased) {
		t.Fatalf("TTL after Unlock: %v", err)
	}
}

func TestSemaphoreBadInput(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func() (*Lock, error)
		want error
	}{
		{"capacity 0", func() (*Lock, error) { return c.Semaphore("s", 0).Acquire(ctx, 1) }, ErrInvalidOption},
		{"negative capacity", func() (*Lock, error) { return c.Semaphore("s", -1).TryAcquire(ctx, 1) }, ErrInvalidOption},
		{"capacity too large", func() (*Lock, error) { return c.Semaphore("s", MaxPermits+1).Acquire(ctx, 1) }, ErrInvalidOption},
		{"0 permits", func() (*Lock, error) { return c.Semaphore("s", 2).Acquire(ctx, 0) }, ErrInvalidOption},
		{"more permits than capacity", func() (*Lock, error) { return c.Semaphore("pool", 2).Acquire(ctx, 3) }, ErrInvalidOption},
		{"empty name", func() (*Lock, error) { return c.Semaphore("", 2).Acquire(ctx, 1) }, ErrInvalidKey},
		{"empty rwmutex name", func() (*Lock, error) { return c.RWMutex("").RLock(ctx) }, ErrInvalidKey},
		{"bad ttl", func() (*Lock, error) { return c.Semaphore("s", 2).Acquire(ctx, 1, WithTTL(0)) }, ErrInvalidTTL},
		{"adaptive", func() (*Lock, error) {
			return c.Semaphore("s", 2).Acquire(ctx, 1, WithAdaptiveTTL(2, time.Minute))
		}, ErrInvalidOption},
		{"zero Semaphore", func() (*Lock, error) { return (&Semaphore{}).Acquire(ctx, 1) }, ErrInvalidOption},
	} {
		l, err := tc.call()
		if !errors.Is(err, tc.want) || l != nil {
			t.Errorf("%s: %v, %v; want %v", tc.name, l, err, tc.want)
		}
	}
	if _, err := c.Semaphore("pool", 2).Acquire(ctx, 3); !strings.Contains(fmt.Sprint(err), `"pool"`) {
		t.Errorf("3 permits of a semaphore of 2: %v, want the error to name the semaphore", err)
	}
	if n := rdb.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("bad input wrote %d keys", n)
	}
	c.Close()
	if _, err := c.Semaphore("s", 2).Acquire(ctx, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestSemaphoreKeyOfWrongType(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	s := c.Semaphore("pool", 2)
	k := semKeys(s)
	rdb.Set(ctx, k.lock, "other data", 0)
	if _, err := s.Acquire(ctx, 1); !errors.Is(err, ErrWrongType) {
		t.Fatalf("a string at the holders' name: %v", err)
	}
	rdb.Del(ctx, k.lock)
	rdb.HSet(ctx, k.lock, "field", "not a holder")
	if _, err := s.TryAcquire(ctx, 1); !errors.Is(err, ErrWrongType) {
		t.Fatalf("a hash that is not a semaphore's: %v", err)
	}
	if v := rdb.HGetAll(ctx, k.lock).Val(); len(v) != 1 || v["field"] != "not a holder" {
		t.Fatalf("the other data was changed: %v", v)
	}
	if n := rdb.Exists(ctx, k.queue, k.waiters).Val(); n != 0 {
		t.Fatal("a failed Acquire left a queue entry")
	}
	// Fields named like bookkeeping, and no holder: still not a
	// semaphore's, and a grant would write into it and set its expiry.
	rdb.Del(ctx, k.lock)
	rdb.HSet(ctx, k.lock, ":config", "not a holder")
	if _, err := s.TryAcquire(ctx, 1); !errors.Is(err, ErrWrongType) {
		t.Fatalf("a hash of ':' fields that is not a semaphore's: %v", err)
	}
	if _, err := s.Available(ctx); !errors.Is(err, ErrWrongType) {
		t.Fatalf("Available on a hash of ':' fields: %v", err)
	}
	if v, ttl := rdb.HGetAll(ctx, k.lock).Val(), rdb.PTTL(ctx, k.lock).Val(); len(v) != 1 || v[":config"] != "not a holder" || ttl != -1 {
		t.Fatalf("the other data was changed: %v, PTTL %v", v, ttl)
	}
}

func TestSemaphoreNamesAreTheirOwn(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	lock := mustLock(t, c, "x")
	perm, err := c.Semaphore("x", 1).TryAcquire(ctx, 1)
	if err != nil {
		t.Fatalf("a semaphore named like a held lock: %v", err)
	}
	w, err := c.RWMutex("x").TryLock(ctx)
	if err != nil {
		t.Fatalf("an RWMutex named like a held lock and semaphore: %v", err)
	}
	if names, err := c.List(ctx, "*"); err != nil || len(names) != 1 || names[0] != "x" {
		t.Fatalf("List: %q, %v; want the lock alone", names, err)
	}
	// Permits are not reentrant, and their Context does not re-enter the
	// lock of the same name either.
	if _, err := c.Semaphore("x", 1).TryAcquire(perm.Context(), 1); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryAcquire with the holder's Context: %v", err)
	}
	if _, err := c.TryLock(perm.Context(), "x"); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock with a permit's Context re-entered the lock: %v", err)
	}
	if _, err := c.Semaphore("x", 1).TryAcquire(lock.Context(), 1); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryAcquire with the lock's Context: %v", err)
	}
	for _, l := range []*Lock{lock, perm, w} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRWMutex(t *testing.T) {
	c, rdb, srv := newTestClient(t, noPolling)
	ctx := context.Background()
	m := c.RWMutex("doc")
	other := newClientOn(t, srv.Client(t), noPolling).RWMutex("doc")
	r1, err := m.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := other.TryRLock(ctx)
	if err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock with readers in: %v", err)
	}
	writer := inBackground(func() (*Lock, error) { return other.Lock(ctx) })
	waitSemQueued(t, rdb, &other.s, 1)
	// A writer waits: readers that come after it wait behind it.
	if _, err := m.TryRLock(ctx); !errors.Is(err, ErrNotObtained) || !strings.Contains(err.Error(), `rwmutex "doc"`) {
		t.Fatalf("TryRLock with a writer waiting: %v", err)
	}
	reader := inBackground(func() (*Lock, error) { return m.RLock(ctx) })
	waitSemQueued(t, rdb, &m.s, 2)
	_ = r1.Unlock(ctx)
	notYet(t, writer, "the writer, with a reader in")
	_ = r2.Unlock(ctx)
	w := received(t, writer, "the writer")
	notYet(t, reader, "the reader, with the writer in")
	_ = w.Unlock(ctx)
	r := received(t, reader, "the reader after the writer")
	if r.Fence() <= w.Fence() {
		t.Fatalf("fences %d then %d", w.Fence(), r.Fence())
	}
	_ = r.Unlock(ctx)
}

// TestRWMutexNoUpgradeOrDowngrade: the holder of the read lock asking for
// the write lock, or the writer for the read lock, waits for itself: its
// ctx ends the wait, leaving its lock held and nothing queued.
func TestRWMutexNoUpgradeOrDowngrade(t *testing.T) {
	c, rdb, _ := newTestClient(t, noPolling)
	ctx := context.Background()
	m := c.RWMutex("doc")
	for _, tc := range []struct {
		name        string
		hold, again func(context.Context, ...LockOption) (*Lock, error)
	}{
		{"upgrade", m.RLock, m.Lock},
		{"downgrade", m.Lock, m.RLock},
	} {
		held, err := tc.hold(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(held.Context(), 100*time.Millisecond)
		_, err = tc.again(wctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: %v, want the wait to end with its ctx", tc.name, err)
		}
		if held.Context().Err() != nil {
			t.Fatalf("%s: the lock held ended: %v", tc.name, context.Cause(held.Context()))
		}
		waitSemQueued(t, rdb, &m.s, 0)
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A reader that stops renewing (its Client closed, as one that died) while
// a writer waits: the writer is let in when the reader's lease runs out, at
// the time its last check read (noPolling: no message comes), although
// renewals lengthened that lease since the writer queued.
func TestRWMutexWriterInWhenReaderLeaseRunsOut(t *testing.T) {
	c, rdb, srv := newTestClient(t, noPolling)
	ctx := context.Background()
	readerC := newClientOn(t, srv.Client(t), noPolling)
	const lease = 600 * time.Millisecond
	granted := time.Now()
	r, err := readerC.RWMutex("doc").RLock(ctx, WithTTL(lease))
	if err != nil {
		t.Fatal(err)
	}
	m := c.RWMutex("doc")
	writer := inBackground(func() (*Lock, error) { return m.Lock(ctx) })
	waitSemQueued(t, rdb, &m.s, 1)
	// Time is the subject: past the first lease, only renewals keep it.
	time.Sleep(time.Until(granted.Add(2 * lease)))
	notYet(t, writer, "the writer, with a renewed reader in")
	closed := time.Now()
	readerC.Close()
	w := received(t, writer, "the writer, once the reader's lease ran out")
	if d := time.Since(closed); d > lease+time.Second {
		t.Fatalf("the writer got in %v after the reader stopped renewing a lease of %v", d, lease)
	}
	if cause := context.Cause(r.Context()); !errors.Is(cause, ErrClosed) {
		t.Fatalf("the reader's Context: %v", cause)
	}
	_ = w.Unlock(ctx)
}

// A read lock is not reentrant: a reader taking it again gets a second one
// while no writer waits, and waits behind a waiting writer, which waits
// for the first: it deadlocks until its ctx ends, as with sync.RWMutex,
// and leaves nothing queued.
func TestRWMutexReadAgainBehindWriterWaits(t *testing.T) {
	c, rdb, srv := newTestClient(t, noPolling)
	ctx := context.Background()
	m := c.RWMutex("doc")
	r1, err := m.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := m.RLock(r1.Context())
	if err != nil {
		t.Fatalf("a second read lock with no writer waiting: %v", err)
	}
	if r2.Token() == r1.Token() {
		t.Fatal("the second read lock re-entered the first")
	}
	_ = r2.Unlock(ctx)
	other := newClientOn(t, srv.Client(t), noPolling).RWMutex("doc")
	wctx, cancelWriter := context.WithCancel(ctx)
	defer cancelWriter()
	writer := inBackground(func() (*Lock, error) { return other.Lock(wctx) })
	waitSemQueued(t, rdb, &other.s, 1)
	rctx, cancel := context.WithTimeout(r1.Context(), 100*time.Millisecond)
	_, err = m.RLock(rctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("reading again behind a waiting writer: %v, want the wait to end with its ctx", err)
	}
	waitSemQueued(t, rdb, &m.s, 1) // the writer alone
	notYet(t, writer, "the writer, with the reader in")
	_ = r1.Unlock(ctx)
	w := received(t, writer, "the writer")
	_ = w.Unlock(ctx)
}

// As TestWaiterFailingOnWrongTypeLeavesTheQueue, for permits: a waiter
// whose check finds a string at the holders' name fails, and must leave
// no queue entry behind, which would be handed permits held by nobody once
// that value is gone.
func TestSemaphoreWaiterFailingOnWrongTypeLeavesTheQueue(t *testing.T) {
	c, rdb, srv := newTestClient(t, WithQueueTTL(time.Hour))
	ctx := context.Background()
	s := c.Semaphore("pool", 1)
	k := semKeys(s)
	held, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	// A short lease: the waiter checks every 100 ms all the same.
	got := inBackground(func() (*Lock, error) { return s.Acquire(ctx, 1, WithTTL(300*time.Millisecond)) })
	waitSemQueued(t, rdb, s, 1)
	if err := rdb.Set(ctx, k.lock, "not a semaphore", 0).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if !errors.Is(r.err, ErrWrongType) {
			t.Fatalf("Acquire = %v, want ErrWrongType", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not give up on the wrong-type key")
	}
	if n := rdb.ZCard(ctx, k.queue).Val(); n != 0 {
		t.Errorf("%d entries left in the queue by the failed Acquire", n)
	}
	rdb.Del(ctx, k.lock)
	_ = held.Unlock(ctx) // its permit is gone: ErrNotHeld
	other := newClientOn(t, srv.Client(t)).Semaphore("pool", 1)
	l, err := other.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatalf("TryAcquire of a free semaphore nobody waits for = %v", err)
	}
	_ = l.Unlock(ctx)
}

// As TestReleaseWithWrongTypeQueueCompletes, for permits: with other data
// at the queue's or the waiters' name, giving permits back still
// completes and says so (Redis does not roll a failed script back: the
// permits would be gone while Unlock reported a failure).
func TestSemaphoreReleaseWithWrongTypeQueueCompletes(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	for _, foreign := range []string{"queue", "waiters"} {
		s := c.Semaphore(foreign, 2)
		k := semKeys(s)
		l, err := s.Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		name := k.queue
		if foreign == "waiters" {
			// A queued entry, so that the hand-over reads the waiters.
			rdb.ZAdd(ctx, k.queue, redis.Z{Score: 1, Member: "w"})
			name = k.waiters
		}
		rdb.Set(ctx, name, "other data", 0)
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("%s: Unlock = %v, want nil", foreign, err)
		}
		if n := rdb.HLen(ctx, k.lock).Val(); n != 0 {
			t.Errorf("%s: %d holders left", foreign, n)
		}
		if v := rdb.Get(ctx, name).Val(); v != "other data" {
			t.Errorf("%s: the other code's value is now %q", foreign, v)
		}
	}
}

// As TestCorruptFenceCounter, for permits: a fence counter that is not a
// number, or not even a string, does not end a waiter's wait (its checks
// read the counter for the stale check); the release's hand-over repairs
// it and the waiter gets the permits.
func TestSemaphoreCorruptFenceCounter(t *testing.T) {
	c, rdb, srv := newTestClient(t)
	ctx := context.Background()
	for _, bad := range []string{"x", "a list"} {
		s := c.Semaphore("corrupt-"+bad, 1)
		k := semKeys(s)
		held, err := s.Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		// A short queue TTL: the waiter checks every 200 ms, and a place
		// kept through failed checks runs out within 600 ms.
		const queueTTL = 600 * time.Millisecond
		ws := newClientOn(t, srv.Client(t), WithQueueTTL(queueTTL)).Semaphore(s.name, 1)
		got := acquireAsync(ctx, ws, 1)
		waitSemQueued(t, rdb, ws, 1)
		token := rdb.ZRange(ctx, k.queue, 0, 0).Val()[0]
		deadline := func() int64 {
			var d int64
			fmt.Sscan(rdb.HGet(ctx, k.waiters, token).Val(), &d)
			return d
		}
		first := deadline()
		if bad == "a list" {
			rdb.Del(ctx, k.fence)
			rdb.LPush(ctx, k.fence, "x")
		} else {
			rdb.Set(ctx, k.fence, bad, 0)
		}
		// Checks made with the counter corrupt, for longer than the
		// queue TTL (or the waiter gave up and left the queue).
		waitUntil(t, 5*time.Second, "the waiter to check past its queue TTL", func() bool {
			d := deadline()
			return d == 0 || d > first+queueTTL.Milliseconds()+200
		})
		if err := held.Unlock(ctx); err != nil {
			t.Fatalf("counter %q: Unlock = %v", bad, err)
		}
		w := received(t, got, fmt.Sprintf("counter %q: the waiter", bad))
		if w.Fence() <= held.Fence() {
			t.Errorf("counter %q: handed-over fence %d <= previous %d", bad, w.Fence(), held.Fence())
		}
		_ = w.Unlock(ctx)
	}
}

// As TestFenceNeverGoesBackAtMaxInt64, for permits: after the fence
// 2^63 - 1 neither a hand-over nor an acquisition grants any.
func TestSemaphoreFenceNeverGoesBackAtMaxInt64(t *testing.T) {
	c, rdb, srv := newTestClient(t)
	ctx := context.Background()
	s := c.Semaphore("last", 1)
	k := semKeys(s)
	if err := rdb.Set(ctx, k.fence, strconv.FormatInt(math.MaxInt64-1, 10), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	held, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if held.Fence() != math.MaxInt64 {
		t.Fatalf("fence %d, want 2^63 - 1", held.Fence())
	}
	// The waiter checks every 200 ms: once not handed the permit, its
	// next check ends its wait.
	ws := newClientOn(t, srv.Client(t), WithQueueTTL(600*time.Millisecond)).Semaphore(s.name, 1)
	got := acquireAsync(ctx, ws, 1)
	waitSemQueued(t, rdb, ws, 1)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err == nil {
			t.Errorf("waiter granted fence %d after 2^63 - 1", r.l.Fence())
			_ = r.l.Unlock(ctx)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter's Acquire did not return within 5s")
	}
	if l, err := s.TryAcquire(ctx, 1); err == nil {
		t.Errorf("TryAcquire granted fence %d after 2^63 - 1", l.Fence())
		_ = l.Unlock(ctx)
	}
	if n := holderCount(t, rdb, s); n != 0 {
		t.Errorf("%d holders left, want none", n)
	}
	if v := rdb.Get(ctx, k.fence).Val(); v != strconv.FormatInt(math.MaxInt64, 10) {
		t.Errorf("fence counter %q, want it left at 2^63 - 1", v)
	}
}

// With WithLocalQueue and LocalFallback, a Client's goroutines hold a
// semaphore's permits together (no in-process lock), a lock of the same
// name does not hold them back, and an unreachable Redis fails the
// acquisition rather than degrading it.
func TestSemaphoreBypassesLocalQueueAndDegradedMode(t *testing.T) {
	c, _, _ := newTestClient(t, WithDegradedMode(LocalFallback))
	ctx := context.Background()
	lock := mustLock(t, c, "pool")
	s := c.Semaphore("pool", 2)
	a, err := s.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatalf("a second permit of the same Client: %v", err)
	}
	if _, err := s.TryAcquire(ctx, 1); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("a third permit of 2: %v", err)
	}
	for _, l := range []*Lock{a, b, lock} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	down := newClientOn(t, rdb, WithDegradedMode(LocalFallback))
	if l, err := down.Semaphore("pool", 2).TryAcquire(ctx, 1); err == nil || (l != nil && l.Degraded()) {
		t.Fatalf("semaphore with Redis down: %v, %v", l, err)
	}
}

// Clients that give one semaphore different capacities: the second is
// refused while the first's permits are held, rather than granting past
// the first's capacity; once the semaphore is idle, a new capacity is
// taken.
func TestSemaphoreCapacityMismatchRefused(t *testing.T) {
	c, _, srv := newTestClient(t)
	ctx := context.Background()
	small := c.Semaphore("pool", 1)
	big := newClientOn(t, srv.Client(t)).Semaphore("pool", 2)
	l, err := small.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := big.TryAcquire(ctx, 1); !errors.Is(err, ErrInvalidOption) {
		if m != nil {
			t.Errorf("capacity 2 granted a permit with capacity 1's permit held: %d permits in a semaphore of 1", 2)
		}
		t.Fatalf("TryAcquire with another capacity: %v", err)
	}
	if m, err := big.Acquire(ctx, 1); !errors.Is(err, ErrInvalidOption) || m != nil {
		t.Fatalf("Acquire with another capacity: %v, %v", m, err)
	} else if want := `: the semaphore is held with capacity 1, not 2`; !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("Acquire with another capacity: %q, want it to end %q", err, want)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := big.TryAcquire(ctx, 2)
	if err != nil {
		t.Fatalf("a new capacity once idle: %v", err)
	}
	// Available with another capacity than the holders' is refused too,
	// rather than counting free permits against a capacity nobody enforces.
	if n, err := small.Available(ctx); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("Available with capacity 1 while capacity 2's permits are held: %d, %v", n, err)
	}
	_ = m.Unlock(ctx)
	if n, err := small.Available(ctx); err != nil || n != 1 {
		t.Fatalf("Available once idle: %d, %v", n, err)
	}
}

// otherCapacityQueue is a semaphore of capacity 2 (small) with nobody
// holding permits and two waiters: first, of capacity 2 in another process,
// which check checks in by hand (the script's reply), and behind it one of
// capacity 5 (big, of a Client of its own), in the background as other. A
// waiter of another capacity can only queue so: while no permits are held,
// behind a waiter that does not take them at once.
type otherCapacityQueue struct {
	rdb    *redis.Client
	small  *Semaphore
	k      *lockKeys
	other  <-chan lockResult
	cancel context.CancelFunc // ends big's wait
}

// otherCapacityFirst is first's token.
const otherCapacityFirst = "0123456789abcdef0123456789abcdef"

func newOtherCapacityQueue(t *testing.T) *otherCapacityQueue {
	t.Helper()
	c, rdb, srv := newTestClient(t, noPolling)
	ctx := context.Background()
	q := &otherCapacityQueue{rdb: rdb, small: c.Semaphore("pool", 2)}
	bigC := newClientOn(t, srv.Client(t), noPolling)
	big := bigC.Semaphore("pool", 5)
	q.k = semKeys(q.small)
	// Subscribed already: the first waiter of a new subscription checks
	// again once it takes effect, and capacity 5's, meeting the permit
	// granted by first's check, would leave before the test has it in the
	// way (or be granted before first leaves).
	lingerOn(t, bigC.be.(*node).wake, semKeys(big).channel+":"+bigC.be.(*node).id)
	dead, err := q.small.Acquire(ctx, 2, WithTTL(200*time.Millisecond), WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	if res := q.check(t); res[0] != 0 {
		t.Fatalf("the first waiter's check with every permit held: %v", res)
	}
	waitUntil(t, 5*time.Second, "the holder's lease to run out", func() bool {
		v, err := permitsTTLScript.Run(ctx, rdb, []string{q.k.lock}, dead.Token()).Int64()
		return err == nil && v == -3
	})
	// Nobody holds permits: capacity 5 queues, behind the first waiter.
	bctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	q.cancel = cancel
	q.other = acquireAsync(bctx, big, 1)
	waitSemQueued(t, rdb, big, 2)
	return q
}

// check is a check of first's, for 1 permit: the script's reply.
func (q *otherCapacityQueue) check(t *testing.T) []int64 {
	t.Helper()
	res, err := permitsAcquireScript.Run(context.Background(), q.rdb, q.k.all(), otherCapacityFirst, 60000, "m", "1", 60000, 60000, "cl", 1, 2).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// release is first's Unlock, or its leaving the queue.
func (q *otherCapacityQueue) release(t *testing.T) {
	t.Helper()
	if err := permitsReleaseScript.Run(context.Background(), q.rdb, q.k.all(), otherCapacityFirst, 2).Err(); err != nil {
		t.Fatal(err)
	}
}

// Refused at its next check, or giving up, a waiter of another capacity
// leaves: the waiters it held back, of the holders' capacity, are served
// then (noPolling), as when any waiter leaves.
func TestSemaphoreWaiterOfOtherCapacityLeavingLetsOthersIn(t *testing.T) {
	q := newOtherCapacityQueue(t)
	ctx := context.Background()
	if res := q.check(t); res[0] != 1 {
		t.Fatalf("the first waiter's check with no permit held: %v", res)
	}
	// One permit is free, but capacity 5's waiter comes first.
	next := acquireAsync(ctx, q.small, 1)
	waitSemQueued(t, q.rdb, q.small, 2)
	notYet(t, next, "the waiter behind the one of another capacity")
	q.cancel()
	if r := <-q.other; r.err == nil {
		t.Fatal("capacity 5 was granted a permit while capacity 2's are held")
	}
	l := received(t, next, "the waiter behind the one of another capacity that left")
	_ = l.Unlock(ctx)
	q.release(t)
}

// Once nobody holds permits, the next grant's capacity is the semaphore's:
// a release or a waiter leaving that leaves no holder serves the first
// waiter under its own capacity, whatever the caller's (noPolling: at
// once, not at that waiter's next check).
func TestSemaphoreWaiterOfOtherCapacityServedOnceNobodyHolds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		granted bool // first takes its permit, then gives it back
	}{
		{"first leaves the queue", false},
		{"first releases its permit", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newOtherCapacityQueue(t)
			if tc.granted {
				if res := q.check(t); res[0] != 1 {
					t.Fatalf("the first waiter's check with no permit held: %v", res)
				}
				notYet(t, q.other, "capacity 5, with capacity 2's permit held")
			}
			q.release(t)
			l := received(t, q.other, "capacity 5's waiter, first in line with nobody holding permits")
			_ = l.Unlock(context.Background())
		})
	}
}

// A semaphore's refusals read the same whatever the server's version: a
// script raises them as strings, which Redis before 7.0 replies after its
// own prefix (a raised table it cannot reply at all).
func TestSemaphoreRefusalsReadBefore7(t *testing.T) {
	got, ok := capacityMismatch(redis6Error("ERR Error running script (call to f_0123): @user_script:52: " +
		"dlock capacity mismatch: the semaphore is held with capacity 1, not 2"))
	if want := "the semaphore is held with capacity 1, not 2"; !ok || got != want {
		t.Errorf("capacityMismatch of Redis 6's reply = %q, %v; want %q", got, ok, want)
	}
	if e := redisError("semaphore", "pool", redis6Error("ERR Error running script (call to f_0123): @user_script:30: "+
		"WRONGTYPE the semaphore key holds a hash that is not a semaphore")); !errors.Is(e, ErrWrongType) {
		t.Errorf("Redis 6's reply of a foreign hash = %v, want ErrWrongType", e)
	}
	// The scripts raise strings, not tables (Redis 6's error handler
	// cannot join a table to the script's place).
	files, err := luaFiles.ReadDir("lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		src, err := luaFiles.ReadFile("lua/" + f.Name())
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(src), "error({") {
			t.Errorf("%s raises a table as an error", f.Name())
		}
	}
}

// The holders' key expires on its own (permits whose holders died leave
// nothing behind), never before a live holder's lease: each holder's lease
// is its own, so a shorter one, or one an Extend shortened, does not cut
// the others'. A renewal only lengthens a holder's lease and an Extend
// that comes late is not applied, as for a lock (extend.lua).
func TestSemaphoreHoldersKeyOutlivesEveryHolder(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	s := c.Semaphore("pool", 3)
	k := semKeys(s)
	pttl := func() time.Duration { t.Helper(); return rdb.PTTL(ctx, k.lock).Val() }
	long, err := s.Acquire(ctx, 1, WithTTL(10*time.Second), WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	short, err := s.Acquire(ctx, 1, WithTTL(2*time.Second), WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	if d := pttl(); d < 9*time.Second || d > 10*time.Second {
		t.Fatalf("holders' key PTTL %v after grants of 10 s then 2 s, want the longer lease", d)
	}
	if err := short.Extend(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := long.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if d := pttl(); d < 19*time.Second {
		t.Fatalf("holders' key PTTL %v, shorter than a live holder's lease of 20 s", d)
	}
	// A renewal asking for less, and an Extend sent before the one applied
	// (number 1, that one), change nothing.
	for _, arg := range []any{backend.Lengthen, 1} {
		if v, err := permitsExtendScript.Run(ctx, rdb, []string{k.lock}, short.Token(), 1000, arg).Int64(); err != nil || v != 1 {
			t.Fatalf("semextend %v: %v, %v", arg, v, err)
		}
		if ttl, err := short.TTL(ctx); err != nil || ttl < 19*time.Second {
			t.Fatalf("lease after semextend(1 s, %v): %v, %v; want still about 20 s", arg, ttl, err)
		}
	}
	_ = long.Unlock(ctx)
	_ = short.Unlock(ctx)

	// A holder that dies leaves no key behind once its lease has run out.
	dead := c.Semaphore("dead", 2)
	const deadLease = 300 * time.Millisecond
	began := time.Now()
	if _, err := dead.Acquire(ctx, 1, WithTTL(deadLease), WithoutRenewal()); err != nil {
		t.Fatal(err)
	}
	// On a loaded machine the lease may run out before the read: the key
	// is then gone (-2), which is right once the lease has passed.
	d := rdb.PTTL(ctx, semKeys(dead).lock).Val()
	gone := d == -2 && time.Since(began) >= deadLease
	if !gone && (d <= 0 || d > deadLease) {
		t.Fatalf("holders' key PTTL %v for a lease of 300 ms", d)
	}
	waitUntil(t, 5*time.Second, "the dead holder's key to expire", func() bool {
		return rdb.Exists(ctx, semKeys(dead).lock).Val() == 0
	})
}
