package dlock

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
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

// A lock key someone made persistent reports a TTL of 0, as on Redlock,
// not PTTL's -1 ms.
func TestTTLOfPersistedLockIsZero(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "persisted")
	if !rdb.Persist(ctx, c.keys("persisted").lock).Val() {
		t.Fatal("PERSIST did not remove the lock's expiry")
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl != 0 {
		t.Errorf("TTL() = %v, %v; want 0", ttl, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestLockAndUnlock(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "order:42")

	if l.Key() != "order:42" {
		t.Errorf("Key() = %q", l.Key())
	}
	if b, err := hex.DecodeString(l.Token()); err != nil || len(b) < 16 {
		t.Errorf("Token() = %q, want >= 128 random bits in hex", l.Token())
	}
	if l.Fence() == 0 {
		t.Error("Fence() = 0")
	}
	k := c.keys("order:42")
	if n, _ := rdb.HGet(ctx, k.lock, l.Token()).Int(); n != 1 {
		t.Errorf("hold count in Redis = %d, want 1", n)
	}
	if f, _ := rdb.HGet(ctx, k.lock, ":fence").Uint64(); f != l.Fence() {
		t.Errorf("fence in Redis = %d, want %d", f, l.Fence())
	}
	ttl, err := l.TTL(ctx)
	if err != nil || ttl <= 29*time.Second || ttl > DefaultTTL {
		t.Errorf("TTL() = %v, %v; want about %v", ttl, err, DefaultTTL)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, k.lock).Val(); n != 0 {
		t.Error("lock key still exists after Unlock")
	}
	<-l.Done()
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrReleased) {
		t.Errorf("Cause after Unlock = %v, want ErrReleased", cause)
	}
	if err := l.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("second Unlock = %v, want ErrNotHeld", err)
	}
}

func TestMillisecondLeases(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	for _, lease := range []time.Duration{500 * time.Millisecond, 1500 * time.Millisecond} {
		begin := time.Now()
		l := mustLock(t, c, "ms", WithTTL(lease), WithoutRenewal())
		pttl := rdb.PTTL(ctx, c.keys("ms").lock).Val()
		// The grant and the read both fall within elapsed: the lease has
		// run down by less than that (plus a millisecond of Redis's
		// rounding), however late the test was scheduled. A lease sent in
		// whole seconds is off by far more.
		elapsed := time.Since(begin)
		if pttl > lease || pttl < lease-elapsed-time.Millisecond {
			t.Errorf("lease %v: PTTL = %v (%v after Lock began)", lease, pttl, elapsed)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFixedLeaseIsLostBeforeRedisExpiresIt(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	const lease = 300 * time.Millisecond
	start := time.Now()
	l := mustLock(t, c, "fixed", WithTTL(lease), WithoutRenewal())
	granted := time.Now()
	k := c.keys("fixed")
	// Lost locally first: the holder trusts the lease until an instant
	// before Redis expires the key. Both instants are compared on the
	// clock Redis and the test share (Redis's TIME plus the PTTL at that
	// moment, read together), so that no scheduling delay of the test
	// enters the comparison.
	var now *redis.TimeCmd
	var pttl *redis.DurationCmd
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		pttl = p.PTTL(ctx, k.lock)
		return nil
	}); err != nil || pttl.Val() <= 0 {
		t.Fatalf("PTTL right after the grant = %v, %v", pttl.Val(), err)
	}
	expiry := now.Val().Add(pttl.Val())
	deadline := c.dog.deadline(l.h)
	// The margin is the drift at least; Redis's milliseconds round off up
	// to 2 ms. Redis's clock is the wall clock, and the deadline's wall
	// reading is taken after start: a setting of the wall clock since then
	// moves one and not the other.
	if margin := expiry.Sub(deadline.Round(0)); margin < backend.Drift(lease)-2*time.Millisecond-wallClockSet(start) {
		t.Errorf("trusted until %v before Redis expires the key, want at least the drift margin (%v)", margin, backend.Drift(lease))
	}
	if from, to := deadline.Sub(start), deadline.Sub(granted); from < lease-backend.Drift(lease) || to > lease {
		t.Errorf("trusted until %v after Lock began (%v after it returned), want the %v lease less the drift margin", from, to, lease)
	}
	// Redis keeps the key a while longer than the holder (the drift margin,
	// plus, here, whatever time the test's machine needs to wake it up),
	// so that the rest does not depend on how fast the test runs.
	if err := rdb.PExpire(ctx, k.lock, 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	lostAt := time.Now()
	if !errors.Is(context.Cause(l.Context()), ErrLockLost) {
		t.Errorf("cause = %v, want ErrLockLost", context.Cause(l.Context()))
	}
	// At the deadline: not before, and not a renewal period or more late.
	if late := lostAt.Sub(deadline); late < 0 || late > lease/3 {
		t.Errorf("lost %v after the deadline", late)
	}
	// Redis still had it, so Unlock still removes it (nobody else held it).
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock after local loss = %v", err)
	}
	if rdb.Exists(ctx, k.lock).Val() != 0 {
		t.Error("Unlock left the key")
	}
}

func TestTryLockWhenHeld(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "busy")
	if _, err := c.TryLock(ctx, "busy"); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock on a held lock = %v, want ErrNotObtained", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := c.TryLock(ctx, "busy")
	if err != nil {
		t.Fatalf("TryLock after release: %v", err)
	}
	_ = l2.Unlock(ctx)
}

func TestWrongTokenCannotRelease(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "mine")
	k := c.keys("mine")
	n, err := releaseScript.Run(ctx, rdb, k.all(), backend.NewToken(), 1).Int()
	if err != nil || n != -1 {
		t.Fatalf("release with a foreign token = %d, %v; want -1 (not held)", n, err)
	}
	if rdb.HGet(ctx, k.lock, l.Token()).Val() != "1" {
		t.Fatal("foreign token released the lock")
	}
	if _, err := l.TTL(ctx); err != nil {
		t.Fatalf("holder lost its lock: %v", err)
	}
}

func TestFencesStrictlyIncrease(t *testing.T) {
	c1, rdb, _ := newTestClient(t)
	c2 := newClientOn(t, rdb)
	ctx := context.Background()
	var last uint64
	for i := 0; i < 20; i++ {
		c := []*Client{c1, c2}[i%2]
		l := mustLock(t, c, "fenced")
		if l.Fence() <= last {
			t.Fatalf("acquisition %d: fence %d <= previous %d", i, l.Fence(), last)
		}
		last = l.Fence()
		if i == 10 {
			// A failover can lose the counter: tokens must still grow.
			rdb.Del(ctx, c.keys("fenced").fence)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// The counter lives a day from its creation, not forever, and a counter
	// that ran ahead of the clock (so the grant wrote last + 1) gets that
	// expiry too.
	k := c1.keys("fenced")
	if ttl := rdb.PTTL(ctx, k.fence).Val(); ttl <= 23*time.Hour || ttl > 24*time.Hour {
		t.Errorf("fence counter expires in %v, want about 24h after its creation", ttl)
	}
	ahead := last + uint64(time.Hour/time.Microsecond)
	rdb.Set(ctx, k.fence, ahead, 0)
	l := mustLock(t, c1, "fenced")
	if l.Fence() != ahead+1 {
		t.Errorf("fence after a counter ahead of the clock = %d, want %d", l.Fence(), ahead+1)
	}
	_ = l.Unlock(ctx)
	if ttl := rdb.PTTL(ctx, k.fence).Val(); ttl <= 23*time.Hour || ttl > 24*time.Hour {
		t.Errorf("fence counter written ahead of the clock expires in %v, want about 24h", ttl)
	}
}

func TestReentrancy(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	k := c.keys("re")
	outer := mustLock(t, c, "re")
	inner, err := c.Lock(outer.Context(), "re")
	if err != nil {
		t.Fatal(err)
	}
	innermost, err := c.TryLock(inner.Context(), "re")
	if err != nil {
		t.Fatal(err)
	}
	if inner.Token() != outer.Token() || inner.Fence() != outer.Fence() || innermost.Fence() != outer.Fence() {
		t.Error("re-entered lock has a different token or fence")
	}
	if n, _ := rdb.HGet(ctx, k.lock, outer.Token()).Int(); n != 3 {
		t.Errorf("hold count = %d, want 3", n)
	}
	// Another Client (or a context not derived from the lock) must wait.
	if _, err := c.TryLock(ctx, "re"); !errors.Is(err, ErrNotObtained) {
		t.Errorf("TryLock without the lock's context = %v, want ErrNotObtained", err)
	}
	if err := innermost.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// A repeated release of the same level (a retry after a lost reply)
	// must not give back a second hold.
	if _, err := releaseScript.Run(ctx, rdb, k.all(), outer.Token(), 3).Result(); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.HGet(ctx, k.lock, outer.Token()).Int(); n != 2 {
		t.Errorf("hold count after a repeated release = %d, want 2", n)
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if inner.Context().Err() == nil || outer.Context().Err() != nil {
		t.Error("inner Unlock should end only the inner context")
	}
	if n, _ := rdb.HGet(ctx, k.lock, outer.Token()).Int(); n != 1 {
		t.Errorf("hold count = %d, want 1", n)
	}
	if err := outer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if rdb.Exists(ctx, k.lock).Val() != 0 {
		t.Error("lock not released by the last Unlock")
	}
}

// A re-entered Lock that was unlocked is over, whatever its hold does: its
// Extend and TTL say ErrReleased, and its Unlock after the outer one's says
// not held, without calling that a loss.
func TestReenteredLockAfterUnlock(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	outer := mustLock(t, c, "k")
	inner, err := c.Lock(outer.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := inner.Extend(ctx, time.Minute); !errors.Is(err, ErrReleased) {
		t.Errorf("Extend of an unlocked inner Lock = %v, want ErrReleased", err)
	}
	if _, err := inner.TTL(ctx); !errors.Is(err, ErrReleased) {
		t.Errorf("TTL of an unlocked inner Lock = %v, want ErrReleased", err)
	}

	inner, err = c.Lock(outer.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := outer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := inner.Unlock(ctx); !errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLockLost) {
		t.Errorf("inner Unlock after the outer one = %v, want ErrNotHeld and no loss", err)
	}
}

// Lock copies the caller's context values into the new Lock's Context, so
// b's Context still names a, which was unlocked since: taking a again
// through it is a new acquisition, not a re-entry of the old one.
func TestReentryIgnoresEndedHolds(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	a := mustLock(t, c, "A")
	b, err := c.Lock(a.Context(), "B")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Unlock(ctx)
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := c.Lock(b.Context(), "A")
	if err != nil {
		t.Fatalf("Lock(A) through b's Context after A was unlocked = %v", err)
	}
	if again.Fence() <= a.Fence() {
		t.Errorf("fence %d after %d: a re-entry of the old lock, not a new one", again.Fence(), a.Fence())
	}
	_ = again.Unlock(ctx)
	// A context that ended with its lock still re-enters it, and fails.
	if _, err := c.Lock(a.Context(), "A"); !errors.Is(err, ErrReleased) {
		t.Errorf("Lock through an unlocked Lock's Context = %v, want ErrReleased", err)
	}
}

func TestUnlockRetryAfterLostReply(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "retry")
	// The first Unlock reached Redis but its reply was lost.
	if _, err := releaseScript.Run(ctx, rdb, c.keys("retry").all(), l.Token(), 1).Result(); err != nil {
		t.Fatal(err)
	}
	l.unsure = true
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("retried Unlock = %v, want nil", err)
	}

	// Without a lost reply, finding the lock gone is reported.
	l2 := mustLock(t, c, "retry")
	rdb.Del(ctx, c.keys("retry").lock)
	if err := l2.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock of a vanished lock = %v, want ErrNotHeld", err)
	}
}

// A release that Redis refused (the server is a replica now: READONLY) did
// not run. Once the lease it left behind has run out, Unlock again finds
// the lock gone and reports it lost, not nil as after a release that may
// have run.
func TestUnlockAgainAfterRefusedRelease(t *testing.T) {
	srv, gone := redistest.Start(t), redistest.Start(t)
	gone.Stop(t) // a master that never answers: the replica keeps its data
	rdb := failFastClient(t, srv)
	c := newClientOn(t, rdb)
	ctx := context.Background()
	l := mustLock(t, c, "job", WithTTL(time.Second))
	if err := rdb.ReplicaOf(ctx, "127.0.0.1", fmt.Sprint(gone.Port())).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("Unlock on a replica = %v, want its READONLY answer", err)
	}
	waitUntil(t, 5*time.Second, "the lease to run out", func() bool {
		return rdb.Exists(ctx, c.keys("job").lock).Val() == 0
	})
	if err := rdb.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil { // a master again: the release runs
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrLockLost) {
		t.Errorf("Unlock again after the lease ran out = %v, want ErrNotHeld and ErrLockLost", err)
	}
}

// A release wakes its waiter by the hand-over message, however the server
// lets dlock publish it: the waiter's subscription must match what the
// release script manages to send.
func TestReleaseWakesWaiterWithoutPolling(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) *redis.Client
	}{
		{"sharded pub/sub", func(t *testing.T) *redis.Client { return redistest.Start(t).Client(t) }},
		{"COMMAND renamed away", func(t *testing.T) *redis.Client {
			return redistest.Start(t, redistest.WithConfig("rename-command", "COMMAND", "")).Client(t)
		}},
		// As on a server before 7.0: the script falls back to PUBLISH.
		{"no SPUBLISH", func(t *testing.T) *redis.Client {
			return redistest.Start(t, redistest.WithConfig("rename-command", "SPUBLISH", "")).Client(t)
		}},
		{"SPUBLISH denied by an ACL", func(t *testing.T) *redis.Client {
			srv := redistest.Start(t)
			if err := srv.Client(t).Do(context.Background(), "ACL", "SETUSER", "locker", "on", ">pw", "~*", "&*", "+@all", "-spublish").Err(); err != nil {
				t.Fatal(err)
			}
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "locker", Password: "pw"})
			t.Cleanup(func() { rdb.Close() })
			return rdb
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := tc.start(t)
			// Waiters re-check only every 20 s here: a prompt wake-up can
			// only come from the hand-over message.
			c1 := newClientOn(t, rdb, WithQueueTTL(time.Minute))
			c2 := newClientOn(t, rdb, WithQueueTTL(time.Minute))
			handOverWakesWaiter(t, rdb, c1, c2)
		})
	}
}

// A release that hands the lock over but whose message the server refuses
// (an ACL that lets the user run the scripts on the lock's keys but no
// pub/sub channel) has still released the lock: Unlock reports that, not
// an error, and the waiter finds the lock handed to it at its next check.
func TestHandOverWithWakeChannelDeniedByACL(t *testing.T) {
	srv := redistest.Start(t)
	if err := srv.Client(t).Do(context.Background(), "ACL", "SETUSER", "locker", "on", ">pw", "~dlock:*", "resetchannels", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "locker", Password: "pw"})
	t.Cleanup(func() { rdb.Close() })
	// The waiter re-checks every second (its queue TTL / 3).
	c1 := newClientOn(t, rdb, WithQueueTTL(3*time.Second))
	c2 := newClientOn(t, rdb, WithQueueTTL(3*time.Second))
	ctx := context.Background()
	l := mustLock(t, c1, "wake")
	got := lockAsync(ctx, c2, "wake")
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c1, "wake") == 1 })
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock with the wake channel denied = %v, want nil: the lock was handed over", err)
	}
	_ = receiveLock(t, got, 5*time.Second, "the waiter to get the lock").Unlock(ctx)
}

func handOverWakesWaiter(t *testing.T, rdb *redis.Client, c1, c2 *Client) {
	ctx := context.Background()
	l := mustLock(t, c1, "wake")
	type result struct {
		l   *Lock
		err error
	}
	got := make(chan result, 1) // the goroutine never blocks, even after a failed test
	go func() {
		l2, err := c2.Lock(ctx, "wake", WithRetry(FixedRetry(time.Hour, 0)))
		got <- result{l2, err}
	}()
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c1, "wake") == 1 })
	waitSubscribed(t, c2.be.(*node).wake, c2.wakeChannel("wake"))
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		l2 := r.l
		if d := time.Since(released); d > time.Second {
			t.Errorf("waiter woke %v after release", d)
		}
		if l2.Fence() <= l.Fence() {
			t.Error("handed-over lock has no fresh fence")
		}
		if n, _ := rdb.HGet(ctx, c1.keys("wake").lock, l2.Token()).Int(); n != 1 {
			t.Error("handed-over lock not held by the waiter in Redis")
		}
		_ = l2.Unlock(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken by the release")
	}
}

// Clients may have different queue TTLs. A waiter with a short one must not
// shorten the queue's life below an earlier waiter's entry: the queue would
// expire under it, and a newcomer could take the lock ahead of it.
func TestShortQueueTTLKeepsEarlierWaiters(t *testing.T) {
	holder, rdb, _ := newTestClient(t)
	patient := newClientOn(t, rdb, WithQueueTTL(time.Minute))
	hasty := newClientOn(t, rdb, WithQueueTTL(time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := mustLock(t, holder, "qttl")
	defer l.Unlock(context.Background())
	done := make(chan struct{}, 2)
	for i, c := range []*Client{patient, hasty} {
		go func() {
			defer func() { done <- struct{}{} }()
			if _, err := c.Lock(ctx, "qttl"); !errors.Is(err, context.Canceled) {
				t.Errorf("Lock = %v, want it to wait until cancelled", err)
			}
		}()
		waitUntil(t, 5*time.Second, "waiter "+strconv.Itoa(i), func() bool { return queued(t, rdb, holder, "qttl") == int64(i+1) })
	}
	k := holder.keys("qttl")
	for _, name := range []string{k.queue, k.waiters} {
		if ttl := rdb.PTTL(ctx, name).Val(); ttl < 30*time.Second {
			t.Errorf("%s expires in %v, before the first waiter's entry (1 min)", name, ttl)
		}
	}
	cancel()
	<-done
	<-done
}

// A queue with a member that has no entry (stale, or written by other
// code) and a longer life than a newcomer's entry: the waiters' hash that
// the entry creates must expire too, or a waiter that vanished would leave
// its entry in Redis for good once the queue is gone.
func TestWaitersExpireBesideStaleQueueMember(t *testing.T) {
	holder, rdb, _ := newTestClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := mustLock(t, holder, "stale")
	defer l.Unlock(context.Background())
	k := holder.keys("stale")
	if err := rdb.ZAdd(ctx, k.queue, redis.Z{Score: 0, Member: "stale"}).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.PExpire(ctx, k.queue, time.Hour)
	done := make(chan error, 1)
	go func() {
		_, err := holder.Lock(ctx, "stale")
		done <- err
	}()
	waitUntil(t, 5*time.Second, "the waiter's entry", func() bool { return rdb.HLen(ctx, k.waiters).Val() == 1 })
	if ttl := rdb.PTTL(ctx, k.waiters).Val(); ttl <= 0 || ttl > time.Hour {
		t.Errorf("waiters' hash expires in %v, want within the queue's hour", ttl)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Lock = %v, want it to wait until cancelled", err)
	}
}

// common.lua enqueue: the first waiter's entry creates the queue and the
// waiters' hash, which expire together: a waiter that vanished while the
// lock was held leaves nothing behind once its entry has run out.
func TestQueueKeysExpireTogether(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "vanished")
	defer l.Unlock(ctx)
	k := c.keys("vanished")
	if _, err := acquireScript.Run(ctx, rdb, k.all(), backend.NewToken(), 30000, "{}", "1", 200, 30000, "dead-client").Result(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the queue to expire", func() bool { return rdb.Exists(ctx, k.queue).Val() == 0 })
	if rdb.Exists(ctx, k.waiters).Val() != 0 {
		t.Errorf("the queue has expired, the waiters' hash expires in %v", rdb.PTTL(ctx, k.waiters).Val())
	}
}

func TestWaitersAreServedInArrivalOrder(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "fifo")
	const n = 5
	order := make(chan int, n)
	for i := 0; i < n; i++ {
		lockInTurn(t, c, "fifo", i, order)
		// Each waiter joins before the next one starts.
		waitUntil(t, 5*time.Second, "waiter "+strconv.Itoa(i), func() bool { return queued(t, rdb, c, "fifo") == int64(i+1) })
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for want := 0; want < n; want++ {
		if got := <-order; got != want {
			t.Fatalf("waiter %d got the lock in turn %d", got, want)
		}
	}
}

func TestCancelledWaiterTakesNothing(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "cancel")
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := c.Lock(wctx, "cancel")
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrNotObtained) {
		t.Fatalf("Lock with an expiring context = %v, want DeadlineExceeded (not ErrNotObtained)", err)
	}
	if n := queued(t, rdb, c, "cancel"); n != 0 {
		t.Errorf("%d entries left in the queue", n)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if rdb.Exists(ctx, c.keys("cancel").lock).Val() != 0 {
		t.Error("the cancelled waiter was handed the lock")
	}
}

func TestDeadWaiterIsSkipped(t *testing.T) {
	// The live waiter keeps the default queue TTL (3 s, refreshed every
	// second): a short one would let a slow refresh drop its entry too.
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "dead")
	k := c.keys("dead")
	// A waiter that queued and then died: it never refreshes its entry,
	// which is good for deadTTL. Until the live waiter queues behind it,
	// the queue's keys expire with it too, so deadTTL leaves it time to.
	const deadTTL = 500 // ms
	dead := backend.NewToken()
	if _, err := acquireScript.Run(ctx, rdb, k.all(), dead, 30000, "{}", "1", deadTTL, deadTTL, "dead-client").Result(); err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lock, 1)
	go func() {
		w, err := c.Lock(ctx, "dead")
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	waitUntil(t, 5*time.Second, "the live waiter to queue", func() bool { return queued(t, rdb, c, "dead") == 2 })
	waitUntil(t, 5*time.Second, "the dead entry to expire", func() bool {
		e, err := rdb.HGet(ctx, k.waiters, dead).Result()
		deadline, _, ok := strings.Cut(e, " ")
		if err != nil || !ok {
			t.Fatalf("the dead waiter's entry is gone before its hand-over was due: %q, %v", e, err)
		}
		d, _ := strconv.ParseInt(deadline, 10, 64)
		return time.Now().UnixMilli() > d+5
	})
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w == nil {
		return
	}
	if rdb.HExists(ctx, k.lock, dead).Val() {
		t.Error("the lock was handed to a dead waiter")
	}
	_ = w.Unlock(ctx)
}

func TestRetryStrategyGivesUp(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "giveup")
	defer l.Unlock(ctx)
	_, err := c.Lock(ctx, "giveup", WithRetry(FixedRetry(10*time.Millisecond, 3)))
	if !errors.Is(err, ErrNotObtained) {
		t.Fatalf("Lock with 3 retries = %v, want ErrNotObtained", err)
	}
	if n := queued(t, rdb, c, "giveup"); n != 0 {
		t.Errorf("%d entries left in the queue", n)
	}
	if _, err := c.Lock(ctx, "giveup", WithRetry(NoRetry())); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("Lock with NoRetry = %v, want ErrNotObtained", err)
	}

	// A waiter also wakes for its subscription and to refresh its queue
	// entry (every 30 ms here): those checks spend none of the strategy's
	// attempts, which still make the wait last 3 x 200 ms.
	eager := newClientOn(t, rdb, WithQueueTTL(90*time.Millisecond))
	start := time.Now()
	_, err = eager.Lock(ctx, "giveup", WithRetry(FixedRetry(200*time.Millisecond, 3)))
	if waited := time.Since(start); !errors.Is(err, ErrNotObtained) || waited < 600*time.Millisecond {
		t.Fatalf("Lock with 3 retries 200ms apart = %v after %v, want ErrNotObtained after 600ms", err, waited)
	}
}

// TryLock makes one attempt whatever WithRetry says (so does a
// Semaphore's TryAcquire): a strategy that would wait for hours neither
// holds it back nor leaves it queued.
func TestTryLockIgnoresRetry(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "try-retry")
	defer l.Unlock(ctx)
	p, err := c.Semaphore("try-retry", 1).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Unlock(ctx)
	other := newClientOn(t, rdb)
	for _, r := range []RetryStrategy{FixedRetry(time.Hour, 0), ExponentialRetry(time.Hour, time.Hour, 0)} {
		for what, try := range map[string]func(context.Context) error{
			"TryLock": func(ctx context.Context) error { _, err := other.TryLock(ctx, "try-retry", WithRetry(r)); return err },
			"TryAcquire": func(ctx context.Context) error {
				_, err := other.Semaphore("try-retry", 1).TryAcquire(ctx, 1, WithRetry(r))
				return err
			},
		} {
			// Bounded, so that a TryLock that waited fails instead of
			// hanging for the strategy's hour.
			tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			start := time.Now()
			err := try(tctx)
			cancel()
			if waited := time.Since(start); !errors.Is(err, ErrNotObtained) || waited > time.Second {
				t.Errorf("%s with %T = %v after %v, want ErrNotObtained at once", what, r, err, waited)
			}
		}
	}
	if n := queued(t, rdb, c, "try-retry"); n != 0 {
		t.Errorf("%d waiters left queued for the lock", n)
	}
	if n := rdb.ZCard(ctx, semKeys(c.Semaphore("try-retry", 1)).queue).Val(); n != 0 {
		t.Errorf("%d waiters left queued for the semaphore", n)
	}
}

// WithPrefix names every key a lock uses, and the channel its waiters
// listen on: Clients of one prefix exclude each other, and a Client of
// another prefix takes a lock of the same name as if the first did not
// exist.
func TestPrefixSeparatesLocks(t *testing.T) {
	_, rdb, _ := newTestClient(t)
	ctx := context.Background()
	a1 := newClientOn(t, rdb, WithPrefix("a:"))
	a2 := newClientOn(t, rdb, WithPrefix("a:"))
	b := newClientOn(t, rdb, WithPrefix("b:"))
	held := mustLock(t, a1, "job")
	if _, err := a2.TryLock(ctx, "job"); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock on a Client of the same prefix = %v, want ErrNotObtained", err)
	}
	other, err := b.TryLock(ctx, "job")
	if err != nil {
		t.Fatalf("TryLock on a Client of another prefix = %v, want the lock", err)
	}
	defer other.Unlock(ctx)
	got := lockAsync(ctx, a2, "job")
	waitQueuedAndSubscribed(t, rdb, a2, "job")
	keys := rdb.Keys(ctx, "*").Val()
	channels := append(rdb.PubSubShardChannels(ctx, "*").Val(), rdb.PubSubChannels(ctx, "*").Val()...)
	for _, name := range append(keys, channels...) {
		if !strings.HasPrefix(name, "a:") && !strings.HasPrefix(name, "b:") {
			t.Errorf("%q is under neither prefix (keys %q, channels %q)", name, keys, channels)
		}
	}
	if len(channels) == 0 {
		t.Error("no channel found for the queued waiter")
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := testutil.Receive(t, got, 5*time.Second, "the waiter of the same prefix")
	if r.err != nil {
		t.Fatalf("waiter = %v", r.err)
	}
	_ = r.l.Unlock(ctx)
}

// The names README's "How it works" gives, which operators' ACLs and tools
// rely on: with the default prefix, a held lock K with a waiter uses
// dlock:{K}, dlock:{K}:fence, dlock:{K}:queue and dlock:{K}:waiters, and
// the waiter listens on dlock:{K}:wake:<id>.
func TestDefaultNames(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	waiter := newClientOn(t, rdb)
	l := mustLock(t, c, "order:42")
	got := lockAsync(ctx, waiter, "order:42")
	waitQueuedAndSubscribed(t, rdb, waiter, "order:42")
	keys := rdb.Keys(ctx, "*").Val()
	slices.Sort(keys)
	if want := []string{"dlock:{order:42}", "dlock:{order:42}:fence", "dlock:{order:42}:queue", "dlock:{order:42}:waiters"}; !slices.Equal(keys, want) {
		t.Errorf("keys %q, want %q", keys, want)
	}
	channels := append(rdb.PubSubShardChannels(ctx, "*").Val(), rdb.PubSubChannels(ctx, "*").Val()...)
	if len(channels) != 1 || !strings.HasPrefix(channels[0], "dlock:{order:42}:wake:") {
		t.Errorf("channels %q, want dlock:{order:42}:wake:<id>", channels)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := testutil.Receive(t, got, 5*time.Second, "the waiter")
	if r.err != nil {
		t.Fatal(r.err)
	}
	_ = r.l.Unlock(ctx)
}

func TestDo(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	ran := false
	err := c.Do(ctx, "job", func(ctx context.Context) error {
		ran = true
		// The function's context re-enters the lock.
		return c.Do(ctx, "job", func(context.Context) error { return nil })
	})
	if err != nil || !ran {
		t.Fatalf("Do = %v, ran = %v", err, ran)
	}
	if rdb.Exists(ctx, c.keys("job").lock).Val() != 0 {
		t.Error("Do did not release the lock")
	}
	boom := errors.New("boom")
	if err := c.Do(ctx, "job", func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("Do = %v, want fn's error", err)
	}
	err = c.Do(ctx, "job", func(ctx context.Context) error {
		<-ctx.Done() // the lease runs out
		return nil
	}, WithTTL(100*time.Millisecond), WithoutRenewal())
	if !errors.Is(err, ErrLockLost) {
		t.Errorf("Do whose lock was lost = %v, want ErrLockLost", err)
	}

	// A panic in fn goes on to the caller, and the lock is released on the
	// way: if it is recovered (net/http does), the lock must not stay held
	// and renewed until the Client closes.
	var fnCtx context.Context
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want fn's panic", r)
			}
		}()
		_ = c.Do(ctx, "job", func(ctx context.Context) error { fnCtx = ctx; panic("boom") })
	}()
	if rdb.Exists(ctx, c.keys("job").lock).Val() != 0 {
		t.Error("the lock is still held after fn panicked")
	}
	if cause := context.Cause(fnCtx); !errors.Is(cause, ErrReleased) {
		t.Errorf("fn's context ended with %v, want ErrReleased", cause)
	}
}

// Do releases the lock once. If that release never reaches Redis, nobody
// can try again (the Lock is Do's own): the lock must not stay renewed
// until Close, but end with its lease.
func TestDoWhoseReleaseFails(t *testing.T) {
	srv := redistest.Start(t)
	var failed atomic.Bool
	c, rdb := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{releaseEval.sha: func() error {
		if failed.CompareAndSwap(false, true) {
			return errors.New("connection reset")
		}
		return nil
	}}})
	ctx := context.Background()
	var h *hold
	err := c.Do(ctx, "job", func(ctx context.Context) error {
		h = ctx.Value(heldKey{c, "job"}).(*hold)
		return nil
	}, WithTTL(300*time.Millisecond))
	if err == nil {
		t.Fatal("Do succeeded, but its release failed")
	}
	if cause := context.Cause(h.ctx); !errors.Is(cause, ErrLockLost) {
		t.Errorf("the hold ended with %v, want ErrLockLost", cause)
	}
	waitUntil(t, 5*time.Second, "the lease to run out", func() bool {
		return rdb.Exists(ctx, c.keys("job").lock).Val() == 0
	})
}

func TestWatchdogRenewsUntilUnlock(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	// Time is the subject here: hold for several leases. The lease is lost
	// if no renewal gets through for most of it, so it must outlast the
	// scheduling delays of a loaded machine running the race detector.
	const ttl = 500 * time.Millisecond
	l := mustLock(t, c, "renewed", WithTTL(ttl))
	select {
	case <-l.Done():
		t.Fatalf("lock lost while renewed: %v", context.Cause(l.Context()))
	case <-time.After(4 * ttl):
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl <= 0 {
		t.Fatalf("TTL = %v, %v", ttl, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if rdb.Exists(ctx, c.keys("renewed").lock).Val() != 0 {
		t.Error("renewal brought the lock back after Unlock")
	}
}

func TestMaxHoldStopsRenewal(t *testing.T) {
	c, _, _ := newTestClient(t)
	// Time is the subject: renewals every 100 ms keep the lock for the max
	// hold, then it runs out within a lease. The lease is long enough that
	// a renewal delayed on a loaded machine does not lose it early.
	const lease, maxHold = 300 * time.Millisecond, 600 * time.Millisecond
	start := time.Now()
	l := mustLock(t, c, "bounded", WithTTL(lease), WithMaxHold(maxHold))
	<-l.Done()
	held := time.Since(start)
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) || !strings.Contains(cause.Error(), "max hold") {
		t.Errorf("cause = %v, want a loss that names the max hold", cause)
	}
	if held < maxHold || held > maxHold+lease+lease/2 {
		t.Errorf("held %v, want max hold (%v) plus at most one lease (%v)", held, maxHold, lease)
	}
}

// TestMaxHoldOfHandedOverLockCountsFromHandOver: a waiter handed the lock
// holds it from the hand-over, so its max hold counts from there, not from
// its last check before it (up to a third of its queue TTL earlier).
func TestMaxHoldOfHandedOverLockCountsFromHandOver(t *testing.T) {
	const maxHold = 5 * time.Second
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	holder := mustLock(t, c, "relay")
	waiter := newClientOn(t, rdb)
	got := make(chan *Lock, 1)
	go func() {
		l, err := waiter.Lock(ctx, "relay", WithMaxHold(maxHold))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitQueuedAndSubscribed(t, rdb, waiter, "relay")
	// Time is the subject: the waiter's last check is this far before the
	// hand-over (it checks again only a second after it queued).
	time.Sleep(300 * time.Millisecond)
	handed := time.Now()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := testutil.Receive(t, got, 5*time.Second, "the waiter to be handed the lock")
	if l == nil {
		t.FailNow()
	}
	waiter.dog.mu.Lock()
	until := l.h.renewUntil
	waiter.dog.mu.Unlock()
	if until.Before(handed.Add(maxHold)) {
		t.Errorf("renewal stops %v after the hand-over, want the max hold (%v) from it", until.Sub(handed), maxHold)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestExtend(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "ext", WithTTL(time.Second))
	if err := l.Extend(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if pttl := rdb.PTTL(ctx, c.keys("ext").lock).Val(); pttl < 4*time.Second {
		t.Errorf("PTTL after Extend = %v", pttl)
	}
	if err := l.Extend(ctx, 0); !errors.Is(err, ErrInvalidTTL) {
		t.Errorf("Extend(0) = %v", err)
	}
	rdb.Del(ctx, c.keys("ext").lock)
	if err := l.Extend(ctx, time.Second); !errors.Is(err, ErrLockLost) {
		t.Errorf("Extend of a vanished lock = %v, want ErrLockLost", err)
	}
	if !errors.Is(context.Cause(l.Context()), ErrLockLost) {
		t.Error("context not cancelled after Extend found the lock gone")
	}
}

func TestClose(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "closing")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) || !errors.Is(cause, ErrClosed) {
		t.Errorf("cause after Close = %v", cause)
	}
	if _, err := c.Lock(ctx, "closing"); !errors.Is(err, ErrClosed) {
		t.Errorf("Lock after Close = %v", err)
	}
}

func TestCloseEndsWaiting(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	other := newClientOn(t, rdb)
	l := mustLock(t, other, "closing")
	defer l.Unlock(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Lock(context.Background(), "closing")
		errc <- err
	}()
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c, "closing") == 1 })
	c.Close()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Errorf("waiting Lock after Close = %v, want ErrClosed", err)
	}
	if n := queued(t, rdb, c, "closing"); n != 0 {
		t.Errorf("%d entries left in the queue", n)
	}
}

func TestKeysWithBraces(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	for _, key := range []string{"a{b}c", "}{", "{x}", "a}:fence"} {
		l := mustLock(t, c, key)
		if l2, err := c.TryLock(ctx, key); err == nil {
			l2.Unlock(ctx)
			t.Errorf("%q: locked twice", key)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("%q: %v", key, err)
		}
	}
	if n := rdb.Exists(ctx, c.keys("a{b}c").lock, c.keys("}{").lock).Val(); n != 0 {
		t.Error("locks left behind")
	}
}

// release.lua: a release never raises the hold count. Inner Locks unlocked
// out of order (level 2, then level 3) leave one hold, not two.
func TestOutOfOrderInnerUnlockNeverRaisesHolds(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	l1 := mustLock(t, c, "nest")
	l2, err := c.Lock(l1.Context(), "nest")
	if err != nil {
		t.Fatal(err)
	}
	l3, err := c.Lock(l2.Context(), "nest")
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l3.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.HGet(ctx, c.keys("nest").lock, l1.Token()).Int(); n != 1 {
		t.Errorf("after both inner Locks unlocked, %d holds, want 1", n)
	}
	_ = l1.Unlock(ctx)
}

// extend.lua: an Extend by a holder whose lock was taken over fails, and
// leaves the new holder's lease alone.
func TestExtendAfterTakeoverFails(t *testing.T) {
	c1, rdb, _ := newTestClient(t)
	c2 := newClientOn(t, rdb)
	ctx := context.Background()
	a := mustLock(t, c1, "takeover")
	if err := c1.ForceRelease(ctx, "takeover"); err != nil {
		t.Fatal(err)
	}
	b := mustLock(t, c2, "takeover", WithTTL(5*time.Second))
	defer b.Unlock(ctx)
	if err := a.Extend(ctx, time.Hour); !errors.Is(err, ErrLockLost) {
		t.Errorf("Extend of a lock taken over = %v, want ErrLockLost", err)
	}
	if pttl := rdb.PTTL(ctx, c2.keys("takeover").lock).Val(); pttl > 5*time.Second {
		t.Errorf("the new holder's lease is %v, want at most its own 5s", pttl)
	}
}

// reenter.lua: re-entering a lock that was taken over fails, and adds no
// hold to the new holder's lock.
func TestReenterAfterTakeoverFails(t *testing.T) {
	c1, rdb, _ := newTestClient(t)
	c2 := newClientOn(t, rdb)
	ctx := context.Background()
	a := mustLock(t, c1, "retake")
	if err := c1.ForceRelease(ctx, "retake"); err != nil {
		t.Fatal(err)
	}
	b := mustLock(t, c2, "retake")
	defer b.Unlock(ctx)
	if l, err := c1.Lock(a.Context(), "retake"); !errors.Is(err, ErrLockLost) {
		t.Errorf("re-entering a lock taken over = %v, %v; want ErrLockLost", l, err)
	}
	if rdb.HExists(ctx, c2.keys("retake").lock, a.Token()).Val() {
		t.Error("re-entering added a hold for the old token to the new holder's lock")
	}
}

// A deferred Unlock often runs with a request's context that has ended:
// it still releases the lock, so the next waiter need not wait for the
// lease to run out.
func TestUnlockWithEndedContextReleases(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	other := newClientOn(t, rdb)
	ctx := context.Background()
	l := mustLock(t, c, "k")
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Unlock(done); err != nil {
		t.Fatalf("Unlock with an ended context = %v, want nil", err)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrReleased) {
		t.Errorf("Context cause = %v, want ErrReleased", cause)
	}
	next, err := other.TryLock(ctx, "k")
	if err != nil {
		t.Fatalf("TryLock after the Unlock = %v: the lock was not released", err)
	}
	_ = next.Unlock(ctx)
}

// An Unlock whose context ends while its release waits to be sent (behind
// two batches in flight to a stalled server) sends nothing, so it cannot
// have released the lock: a later Unlock that finds the lock gone (an
// operator's ForceRelease) reports ErrNotHeld, as if the first had never
// been tried. The first gave the lock up, though (a deferred Unlock is
// rarely tried again): its Context ends, and it is renewed no more.
func TestUnsentUnlockDoesNotHideForceRelease(t *testing.T) {
	c, _, srv := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "k")
	srv.Pause(t)
	stalled := make(chan error, 2)
	for i := range 2 {
		go func() {
			_, err := c.TryLock(ctx, fmt.Sprintf("stalled-%d", i))
			stalled <- err
		}()
	}
	b := c.be.(*node).batch
	waitUntil(t, 5*time.Second, "two calls in flight", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.inflight == 2
	})
	uctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err := l.Unlock(uctx)
	cancel()
	srv.Resume(t)
	for range 2 {
		<-stalled // whatever they got: they only held the batcher
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Unlock whose release was never sent = %v, want its context's error", err)
	}
	if renewing(l) || !errors.Is(context.Cause(l.Context()), ErrLockLost) {
		t.Errorf("after an Unlock that failed, the lock is renewed (%v) with its Context ended by %v: want given up",
			renewing(l), context.Cause(l.Context()))
	}
	if err := c.ForceRelease(ctx, "k"); err != nil {
		t.Fatal(err) // the lock was still held: the first Unlock sent nothing
	}
	if err := l.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock of a force-released lock = %v, want ErrNotHeld", err)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
		t.Errorf("Context cause = %v, want ErrLockLost", cause)
	}
}

// A fence counter an operator moved forward (past the fences of a former
// lock service, say) to near 2^53, where Lua's numbers stop being exact,
// still only grows: past 2^53 the scripts count in decimal.
func TestFenceNeverGoesBackAt2p53(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	const key = "big"
	if err := rdb.Set(ctx, c.keys(key).fence, "9007199254740990", time.Hour).Err(); err != nil { // 2^53 - 2
		t.Fatal(err)
	}
	var prev uint64
	for i := 0; i < 4; i++ {
		l := mustLock(t, c, key)
		if f := l.Fence(); f <= prev {
			t.Fatalf("grant %d: fence %d after %d", i, f, prev)
		}
		prev = l.Fence()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A counter at 2^63 - 1 holds the last fence an int64 can: nothing is
// granted after it, neither by a check nor by a hand-over, since a fence
// from the clock would be smaller than the one the resource saw last (as
// the redlock scripts refuse such a counter). The counter stays there, for
// an operator to see.
func TestFenceNeverGoesBackAtMaxInt64(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	const key = "last"
	k := c.keys(key)
	if err := rdb.Set(ctx, k.fence, strconv.FormatInt(math.MaxInt64-1, 10), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	l := mustLock(t, c, key)
	if l.Fence() != math.MaxInt64 {
		t.Fatalf("fence %d, want 2^63 - 1", l.Fence())
	}
	// The waiter checks every 200 ms: once not handed the lock, its next
	// check ends its wait.
	waiter := newClientOn(t, rdb, WithQueueTTL(600*time.Millisecond))
	type result struct {
		fence uint64
		err   error
	}
	got := make(chan result, 1)
	go func() {
		w, err := waiter.Lock(ctx, key)
		var r result
		if r.err = err; err == nil {
			r.fence = w.Fence()
			_ = w.Unlock(ctx)
		}
		got <- r
	}()
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c, key) == 1 })
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err == nil {
			t.Errorf("waiter granted fence %d after 2^63 - 1", r.fence)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter's Lock did not return within 5s")
	}
	if l2, err := c.TryLock(ctx, key); err == nil {
		t.Errorf("TryLock granted fence %d after 2^63 - 1", l2.Fence())
		_ = l2.Unlock(ctx)
	}
	if v := rdb.Get(ctx, k.fence).Val(); v != strconv.FormatInt(math.MaxInt64, 10) {
		t.Errorf("fence counter %q, want it left at 2^63 - 1", v)
	}
}

// common.lua hand_over: a release that finds every fence issued hands
// nothing over, and the waiter it took from the queue keeps its place
// there (and the queue its expiry): its own check then ends its wait.
func TestHandOverAtMaxInt64KeepsTheWaiterQueued(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	k := c.keys("last")
	holder, w := backend.NewToken(), backend.NewToken()
	if err := rdb.Set(ctx, k.fence, strconv.FormatInt(math.MaxInt64-1, 10), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if res, err := acquireScript.Run(ctx, rdb, k.all(), holder, 30000, "{}", "0", 0, 0, "holder-client").Int64Slice(); err != nil || res[0] != 1 {
		t.Fatalf("acquire = %v, %v", res, err)
	}
	if _, err := acquireScript.Run(ctx, rdb, k.all(), w, 30000, "{}", "1", 30000, 30000, "waiter-client").Result(); err != nil {
		t.Fatal(err)
	}
	if n, err := releaseScript.Run(ctx, rdb, k.all(), holder, 1).Int(); err != nil || n != 0 {
		t.Fatalf("release = %d, %v", n, err)
	}
	if rdb.HExists(ctx, k.lock, w).Val() {
		t.Fatal("the waiter was handed the lock after fence 2^63 - 1")
	}
	if err := rdb.ZScore(ctx, k.queue, w).Err(); err != nil {
		t.Errorf("the waiter is no longer queued: %v", err)
	}
	if !rdb.HExists(ctx, k.waiters, w).Val() {
		t.Error("the waiter's entry is gone")
	}
	if ttl := rdb.PTTL(ctx, k.queue).Val(); ttl <= 0 {
		t.Errorf("the queue expires in %v, want with the waiters' hash", ttl)
	}
}

// W's acquire is granted in Redis but its reply arrives only after the
// lease ran out and C took the lock: W gets no Lock (with a live Context)
// for a lease it can no longer trust, but ErrLockLost.
func TestLateGrantReplyIsNotReturnedAsHeld(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	c := newClientOn(t, srv.Client(t))
	const key = "late"
	var w *Client
	hook := scriptHook{after: map[string]func() error{acquireScript.Hash(): func() error {
		// The grant ran in Redis; its reply is late: the lease runs out
		// and C takes the lock before W reads it.
		waitUntil(t, 5*time.Second, "W's lease to run out", func() bool {
			n, _ := rdb.Exists(ctx, w.keys(key).lock).Result()
			return n == 0
		})
		if _, err := c.TryLock(ctx, key, WithTTL(10*time.Second)); err != nil {
			t.Errorf("C: %v", err)
		}
		return nil
	}}}
	w, _ = hookedClient(t, srv.Addr(), hook)
	l, err := w.TryLock(ctx, key, WithTTL(100*time.Millisecond), WithoutRenewal())
	if err == nil {
		t.Errorf("W's TryLock returned a Lock (fence %d, Context live: %v, deadline passed %v ago) while C holds the lock",
			l.Fence(), l.Context().Err() == nil, time.Since(w.dog.deadline(l.h)).Round(time.Millisecond))
	} else if !errors.Is(err, ErrLockLost) {
		t.Errorf("W's TryLock = %v, want ErrLockLost", err)
	}
}

// A lock taken away while fn runs (an operator's ForceRelease, and another
// holder taking it), found gone only by Do's release, is a loss: Do says
// ErrLockLost, since fn's work may have overlapped another holder's.
func TestDoReportsLossFoundAtRelease(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	other := newClientOn(t, rdb)
	ctx := context.Background()
	err := c.Do(ctx, "job", func(ctx context.Context) error {
		if err := other.ForceRelease(ctx, "job"); err != nil {
			return err
		}
		l2, err := other.TryLock(context.Background(), "job")
		if err != nil {
			return err
		}
		return l2.Unlock(context.Background()) // overlapped fn's work
	})
	if !errors.Is(err, ErrLockLost) {
		t.Errorf("Do whose lock was taken by another holder while fn ran = %v, want ErrLockLost", err)
	}
}

// fn's context is cancelled when the lock is lost, so fn commonly fails
// with that context's error (a query given ctx, or ctx.Err() itself). Do's
// error must still say the lock was lost, or the caller cannot tell a loss,
// after which fn's work may have overlapped another holder's, from its own
// cancellation.
func TestDoReportsLossWhenFnFails(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	other := newClientOn(t, rdb)
	ctx := context.Background()
	err := c.Do(ctx, "job", func(ctx context.Context) error {
		if err := other.ForceRelease(context.Background(), "job"); err != nil {
			return err
		}
		<-ctx.Done() // the next renewal finds the lock gone
		return ctx.Err()
	}, WithTTL(300*time.Millisecond))
	if !errors.Is(err, ErrLockLost) || !errors.Is(err, context.Canceled) {
		t.Errorf("Do whose fn returned its context's error after a loss = %v, want ErrLockLost and context.Canceled", err)
	}

	// Found only by Do's release: fn failed on its own meanwhile.
	boom := errors.New("boom")
	err = c.Do(ctx, "job", func(ctx context.Context) error {
		if err := other.ForceRelease(context.Background(), "job"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, ErrLockLost) || !errors.Is(err, boom) {
		t.Errorf("Do whose fn failed while its lock was taken away = %v, want ErrLockLost and fn's error", err)
	}

	// fn's error alone when the lock was not lost.
	if err := c.Do(ctx, "job", func(context.Context) error { return boom }); err != boom {
		t.Errorf("Do whose fn failed = %v, want fn's error as it is", err)
	}
}

// ExponentialRetry's delays double from base up to max, even for a max
// near math.MaxInt64 (an "uncapped" backoff), where doubling overflows.
func TestExponentialBackoffNeverNegative(t *testing.T) {
	r := ExponentialRetry(time.Second, time.Duration(math.MaxInt64), 0)
	for a := 1; a <= 100; a++ {
		if d, ok := r.Backoff(a); !ok || d < time.Second/2 {
			t.Fatalf("Backoff(%d) = %v, %v: below base/2", a, d, ok)
		}
	}
}

// The built-in strategies keep the schedules their docs give:
// FixedRetry(d, n) waits d before each of n re-checks, then gives up (n = 0:
// never); ExponentialRetry draws re-check a's delay from [d/2, d], d being
// base doubled a-1 times and capped at max, and gives up after its n;
// NoRetry gives up at once.
func TestRetryStrategiesKeepTheirSchedule(t *testing.T) {
	if _, ok := NoRetry().Backoff(1); ok {
		t.Error("NoRetry asks for a re-check")
	}
	const ms = time.Millisecond
	fixed := FixedRetry(10*ms, 3)
	for a := 1; a <= 3; a++ {
		if d, ok := fixed.Backoff(a); !ok || d != 10*ms {
			t.Errorf("FixedRetry(10ms, 3).Backoff(%d) = %v, %v; want 10ms, true", a, d, ok)
		}
	}
	if _, ok := fixed.Backoff(4); ok {
		t.Error("FixedRetry(10ms, 3) asks for a 4th re-check")
	}
	if d, ok := FixedRetry(ms, 0).Backoff(1 << 20); !ok || d != ms {
		t.Errorf("FixedRetry(1ms, 0).Backoff(2^20) = %v, %v; want no limit", d, ok)
	}
	exp := ExponentialRetry(10*ms, 100*ms, 6)
	for a := 1; a <= 6; a++ {
		want := min(10*ms<<(a-1), 100*ms)
		lo, hi := want, time.Duration(0)
		for range 200 {
			d, ok := exp.Backoff(a)
			if !ok || d < want/2 || d > want {
				t.Fatalf("ExponentialRetry(10ms, 100ms, 6).Backoff(%d) = %v, %v; want within [%v, %v]", a, d, ok, want/2, want)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		// Drawn, so that waiters backing off together spread out.
		if hi-lo < want/4 {
			t.Errorf("Backoff(%d) stayed within [%v, %v] in 200 draws: not spread over [%v, %v]", a, lo, hi, want/2, want)
		}
	}
	if _, ok := exp.Backoff(7); ok {
		t.Error("ExponentialRetry(10ms, 100ms, 6) asks for a 7th re-check")
	}
	if _, ok := ExponentialRetry(ms, ms, 0).Backoff(1 << 20); !ok {
		t.Error("ExponentialRetry(1ms, 1ms, 0) gives up: 0 means no limit")
	}
}

// An inner Lock unlocked while the outer Unlock's release has run in Redis
// but its reply is still on the way finds the lock gone. That is the outer
// Unlock's doing, as when the two run one after the other
// (TestReenteredLockAfterUnlock): the inner Unlock says ErrNotHeld without
// a loss, and the lock's Context ends with ErrReleased, not ErrLockLost.
func TestInnerUnlockMeetingOuterRelease(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	held := newHeldCall(nil) // the outer release ran in Redis; its reply is held back
	c, _ := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{releaseEval.sha: held.run}})
	outer := mustLock(t, c, "nested-race", WithTTL(30*time.Second))
	inner, err := c.Lock(outer.Context(), "nested-race")
	if err != nil {
		t.Fatal(err)
	}
	held.arm()
	var wg sync.WaitGroup
	var outerErr error
	wg.Add(1)
	go func() { defer wg.Done(); outerErr = outer.Unlock(ctx) }()
	<-held.reached
	innerErr := inner.Unlock(ctx)
	held.release()
	wg.Wait()
	if outerErr != nil {
		t.Errorf("outer Unlock = %v, want nil", outerErr)
	}
	if !errors.Is(innerErr, ErrNotHeld) || errors.Is(innerErr, ErrLockLost) {
		t.Errorf("inner Unlock during the outer one = %v, want ErrNotHeld and no loss", innerErr)
	}
	if cause := context.Cause(outer.Context()); !errors.Is(cause, ErrReleased) {
		t.Errorf("the outer lock's Context ended with %v, want ErrReleased: it was unlocked, not lost", cause)
	}
}

// A nested Do whose release meets the outer Unlock's (under way) returns
// the release's error, not held, and no loss: the lock was released, which
// Do does not report as its own error.
func TestNestedDoMeetingOuterRelease(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	held := newHeldCall(nil) // the outer release ran in Redis; its reply is held back
	c, _ := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{releaseEval.sha: held.run}})
	outer := mustLock(t, c, "nested-do", WithTTL(30*time.Second))
	var wg sync.WaitGroup
	var outerErr error
	err := c.Do(outer.Context(), "nested-do", func(context.Context) error {
		held.arm()
		wg.Add(1)
		go func() { defer wg.Done(); outerErr = outer.Unlock(ctx) }()
		<-held.reached
		return nil
	})
	held.release()
	wg.Wait()
	if outerErr != nil {
		t.Errorf("outer Unlock = %v, want nil", outerErr)
	}
	if !errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLockLost) {
		t.Errorf("nested Do during the outer Unlock = %v, want ErrNotHeld and no loss", err)
	}
}

// Client.Close wakes the waiters, which then leave the queue on their own
// (node_acquire.go abandon). The Redis client is the caller's, closed
// right after Close as `defer rdb.Close(); defer c.Close()` does: if Close
// returns before its waiters have left, their entries stay queued, and the
// next release hands the lock to a waiter that is gone (held by nobody
// until its hand-over lease runs out), as redlock's Close already avoids.
func TestCloseLeavesNoWaiterBehind(t *testing.T) {
	srv := redistest.Start(t)
	holderClient := newClientOn(t, srv.Client(t))
	ctx := context.Background()
	const key = "close-queue"
	// The waiter's release (leaving the queue) takes a 50ms round trip:
	// latency injected, not synchronisation.
	c, rdb := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{releaseEval.sha: func() error {
		time.Sleep(50 * time.Millisecond)
		return nil
	}}})
	h := mustLock(t, holderClient, key, WithTTL(30*time.Second))
	got := lockAsync(ctx, c, key, WithTTL(30*time.Second))
	check := srv.Client(t)
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, check, holderClient, key) == 1 })

	c.Close()
	rdb.Close() // the caller's Redis client, closed after the Client
	if r := <-got; !errors.Is(r.err, ErrClosed) {
		t.Fatalf("Lock during Close = %v, want ErrClosed", r.err)
	}
	if n := queued(t, check, holderClient, key); n != 0 {
		t.Errorf("%d queue entries left behind by a Client that was closed", n)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if owner := check.HGetAll(ctx, holderClient.keys(key).lock).Val(); len(owner) != 0 {
		t.Errorf("the release handed the lock to the closed Client's waiter: held by nobody, pttl %v: %v",
			check.PTTL(ctx, holderClient.keys(key).lock).Val(), owner)
	}
}

// Unlock's godoc: an error wrapping ErrNotHeld if the lock was not held any
// more, and ErrLockLost too if it had been lost. A lock an operator
// force-released while its holder trusted it was lost (the Unlock that
// finds it gone cancels its Context with ErrLockLost and reports it to the
// Observer as lost): the caller checking errors.Is(err, ErrLockLost) must
// hear of it too, as it does when a renewal found it gone first.
func TestUnlockOfForceReleasedLockSaysLost(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "k")
	if err := c.ForceRelease(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	err := l.Unlock(ctx)
	if !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrLockLost) {
		t.Errorf("Unlock of a force-released lock = %v, want ErrNotHeld and ErrLockLost", err)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
		t.Errorf("Context cause = %v, want ErrLockLost", cause)
	}
}

// An inner (re-entered) Unlock whose reply was lost, tried again, cannot
// have removed the lock itself: a release of a level above 1 only lowers
// the hold count. If the retry finds the lock gone while it was still
// trusted, an operator force-released it: the retry reports ErrNotHeld and
// ErrLockLost, and the hold ends as lost, as for an Unlock never tried.
func TestRetriedInnerUnlockReportsForceRelease(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	errLost := errors.New("connection reset")
	loseReply, arm := failNext(errLost)
	c, _ := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{releaseEval.sha: loseReply}})
	outer := mustLock(t, c, "nested-force")
	inner, err := c.Lock(outer.Context(), "nested-force")
	if err != nil {
		t.Fatal(err)
	}
	arm()
	if err := inner.Unlock(ctx); !errors.Is(err, errLost) {
		t.Fatalf("inner Unlock with a lost reply = %v, want %v", err, errLost)
	}
	if err := c.ForceRelease(ctx, "nested-force"); err != nil {
		t.Fatal(err)
	}
	err = inner.Unlock(ctx)
	if !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrLockLost) {
		t.Errorf("retried inner Unlock of a force-released lock = %v, want ErrNotHeld and ErrLockLost", err)
	}
	if cause := context.Cause(outer.Context()); !errors.Is(cause, ErrLockLost) {
		t.Errorf("the outer lock's Context: cause %v, want ErrLockLost", cause)
	}
}

// An Extend, TTL, re-entry or Unlock that finds the lock key holding
// another kind of value (a string SET over it) meets a lost lock, as a
// renewal does (TestRenewalFindingWrongTypeKeyIsLoss): it must say so
// (ErrLockLost; ErrNotHeld for Unlock) and end the Context now, not at the
// next renewal.
func TestCallsFindingWrongTypeKeyIsLoss(t *testing.T) {
	for name, tc := range map[string]struct {
		call func(*Lock) error
		want error
	}{
		"Extend": {func(l *Lock) error { return l.Extend(context.Background(), time.Minute) }, ErrLockLost},
		"TTL":    {func(l *Lock) error { _, err := l.TTL(context.Background()); return err }, ErrLockLost},
		"Reenter": {func(l *Lock) error {
			_, err := l.c.Lock(l.Context(), l.Key())
			return err
		}, ErrLockLost},
		"Unlock": {func(l *Lock) error { return l.Unlock(context.Background()) }, ErrNotHeld},
	} {
		t.Run(name, func(t *testing.T) {
			rec := &recorder{}
			c, rdb, _ := newTestClient(t, WithObserver(rec))
			ctx := context.Background()
			l := mustLock(t, c, "wrong-type", WithTTL(time.Minute))
			key := leaseKeys(l.h.lease).lock
			if err := rdb.Set(ctx, key, "not a lock", 0).Err(); err != nil { // SET replaces the hash
				t.Fatal(err)
			}
			if err := tc.call(l); !errors.Is(err, tc.want) {
				t.Fatalf("%s = %v, want %v", name, err, tc.want)
			}
			select {
			case <-l.Done():
			default:
				t.Fatalf("%s found the lock gone, yet its Context is live", name)
			}
			if n := rec.count(func(r *recorder) int { return len(r.losts) }); n != 1 {
				t.Errorf("Lost reported %d times, want 1", n)
			}
			if got := rdb.Get(ctx, key).Val(); got != "not a lock" {
				t.Errorf("the foreign value was changed to %q", got)
			}
		})
	}
}

// common.lua grant: a fence counter ahead of the server clock (moved
// forward by an operator, as in TestFenceNeverGoesBackAt2p53, or carried
// over from a master whose clock ran ahead) must not expire before the
// clock has caught up with it: the next grant would then start again from
// the clock, below the fences already issued. 24 hours without a grant
// would be enough.
func TestFenceCounterAheadOfClockOutlivesTheGap(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, ahead := range []string{
		strconv.FormatInt(now.Add(72*time.Hour).UnixMicro(), 10),
		"9007199254740993", // past 2^53, counted in decimal
	} {
		key := "ahead-" + ahead
		if err := rdb.Set(ctx, c.keys(key).fence, ahead, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		l := mustLock(t, c, key)
		a, _ := strconv.ParseUint(ahead, 10, 64)
		if l.Fence() <= a {
			t.Fatalf("counter %s: fence %d", ahead, l.Fence())
		}
		now, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		gap := time.Duration(l.Fence()-uint64(now.UnixMicro())) * time.Microsecond
		// A second past it (half: PTTL is read a round trip after TIME), or
		// a grant reading the clock as it expires could issue that fence again.
		if ttl := rdb.PTTL(ctx, c.keys(key).fence).Val(); ttl < gap+time.Second/2 {
			t.Errorf("counter %s: expires in %v, not past the moment the clock reaches the fence %d (in %v): the next grant would go back to the clock", ahead, ttl, l.Fence(), gap)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// An uncontended Lock and Unlock cost two round trips, as the README says:
// one script each; so do a semaphore's permits.
func TestUncontendedLockAndUnlockAreTwoRoundTrips(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	var n atomic.Int64
	rdb.AddHook(testutil.RoundTrips{N: &n})
	for _, tc := range []struct {
		name string
		take func() (*Lock, error)
	}{
		{"lock", func() (*Lock, error) { return c.Lock(ctx, "order:42") }},
		{"semaphore", func() (*Lock, error) { return c.Semaphore("exports", 3).Acquire(ctx, 2) }},
	} {
		// Once first, so that the scripts are loaded.
		for i := range 2 {
			n.Store(0)
			l, err := tc.take()
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if got := n.Load(); i == 1 && got != 2 {
				t.Errorf("%s: acquire + release took %d round trips, want 2", tc.name, got)
			}
		}
	}
}

// A Lock call whose context has ended already sends nothing: there is
// no queue entry to leave, and no lock it could have taken.
func TestLockWithEndedContextSendsNothing(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	bg := context.Background()
	mustLock(t, c, "warm").Unlock(bg) // scripts loaded, connected
	ctx, cancel := context.WithCancel(bg)
	cancel()
	for name, take := range map[string]func() (*Lock, error){
		"Lock":    func() (*Lock, error) { return c.Lock(ctx, "job") },
		"TryLock": func() (*Lock, error) { return c.TryLock(ctx, "job") },
		"Acquire": func() (*Lock, error) { return c.Semaphore("pool", 2).Acquire(ctx, 1) },
	} {
		if err := rdb.ConfigResetStat(bg).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := take(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with an ended context = %v, want context.Canceled", name, err)
		}
		stats, err := rdb.Info(bg, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(stats, "cmdstat_evalsha") {
			t.Errorf("%s with an ended context ran scripts on Redis:\n%s", name, stats)
		}
	}
}

// Two goroutines may Unlock one Lock at once (a deferred Unlock and one on
// a timeout): the second waits for the first's release, but no longer than
// its own context allows, as a release waiting to be sent does.
func TestConcurrentUnlockHonoursItsContext(t *testing.T) {
	srv := redistest.Start(t)
	held := newHeldCall(nil)
	c, _ := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{releaseScript.Hash(): held.run}})
	l := mustLock(t, c, "unlock-twice")
	held.arm()
	first := make(chan error, 1)
	go func() { first <- l.Unlock(context.Background()) }()
	testutil.Receive(t, held.reached, 5*time.Second, "the first Unlock's release")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	second := make(chan error, 1)
	go func() { second <- l.Unlock(ctx) }()
	select {
	case err := <-second:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("second Unlock = %v, want its context's error", err)
		}
	case <-time.After(3 * time.Second):
		t.Error("the second Unlock still waits 3s after its 100ms context ended")
		defer func() { <-second }()
	}
	held.release()
	if err := testutil.Receive(t, first, 5*time.Second, "the first Unlock"); err != nil {
		t.Errorf("first Unlock = %v", err)
	}
}

// The errors of a Lock that has ended name the call and the key, as the
// other errors do ("dlock: extend \"k\": ..."), and the zero Lock's say
// "dlock:" once.
func TestEndedLockErrorsNameTheCall(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "named")
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func(*Lock) error{
		"extend": func(l *Lock) error { return l.Extend(ctx, time.Second) },
		"ttl":    func(l *Lock) error { _, err := l.TTL(ctx); return err },
		"txn":    func(l *Lock) error { return l.Txn(ctx, func(redis.Pipeliner) error { return nil }) },
	}
	for op, call := range calls {
		err := call(l)
		if want := fmt.Sprintf("dlock: %s %q: ", op, "named"); !errors.Is(err, ErrReleased) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s after Unlock = %v, want ErrReleased, starting %q", op, err, want)
		}
		if err := call(&Lock{}); !errors.Is(err, ErrNotHeld) || strings.Contains(err.Error(), "dlock: dlock:") {
			t.Errorf("%s of the zero Lock = %v, want ErrNotHeld, saying dlock: once", op, err)
		}
	}
	if err := (&Lock{}).Unlock(ctx); strings.Contains(err.Error(), "dlock: dlock:") {
		t.Errorf("Unlock of the zero Lock = %v, saying dlock: twice", err)
	}
}
