package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/redistest"
)

// The hand-over: who gets a lock that is released, force-released or
// expired with waiters queued, when they learn of it, and from when they
// may trust it.

// receiveLock waits for lockAsync's result.
func receiveLock(t *testing.T, got <-chan lockResult, within time.Duration, what string) *Lock {
	t.Helper()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.l
	case <-time.After(within):
		t.Fatalf("%s: not within %v", what, within)
		return nil
	}
}

// A lock handed over is trusted from before the grant, not from the moment
// the waiter learns of it: by its message (node_acquire.go), from its last
// check before the hand-over, or, without renewal, from the round trip
// that then reads the lease left; without pub/sub, by its own next check
// (acquire.lua's "handed over" answer).
func TestHandOverTrustedFromBeforeIt(t *testing.T) {
	for _, tc := range []struct {
		name           string
		byCheck, renew bool
	}{{"by message", false, true}, {"by message WithoutRenewal", false, false}, {"by check", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			byCheck := tc.byCheck
			holder, rdb, srv := newTestClient(t)
			// The waiter's first renewal may go a sixth of the lease after
			// its last check, at the grant on a loaded machine: it is held
			// until d is read, so that d is the hand-over's trust.
			renewal := newHeldCall(nil)
			renewal.arm()
			c, _ := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{extendScript.Hash(): renewal.run}})
			if byCheck {
				c.be.(*node).wake.close() // no pub/sub: the waiter learns by checking, every second
			}
			ctx := context.Background()
			a := mustLock(t, holder, "trust", WithTTL(time.Minute))
			// With renewal, the queue TTL's lease (the same).
			const ttl = 3 * time.Second
			opts := []LockOption{WithTTL(ttl)}
			if !tc.renew {
				opts = append(opts, WithoutRenewal())
			}
			got := lockAsync(ctx, c, "trust", opts...)
			waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c, "trust") == 1 })
			unlocking := time.Now()
			if err := a.Unlock(ctx); err != nil { // handed over to the waiter now
				t.Fatal(err)
			}
			defer renewal.release()
			l := receiveLock(t, got, 5*time.Second, "hand-over")
			defer l.Unlock(ctx)
			d := c.dog.deadline(l.h)
			// The fence is the server's clock in µs at the grant (it moved
			// on since the last one): Redis keeps the lease ttl from there.
			// A message gives no lease left: with renewal, the waiter trusts
			// it from its last check that found the lock held, before the
			// grant (which may come after the Unlock began). A check, and
			// without renewal the round trip after a message, reads the
			// lease left (PTTL) and trusts that, less its own, smaller
			// drift margin. Comparing the server's clock with ours must
			// allow for any setting of the wall clock meanwhile.
			// Redis expires a key in whole milliseconds, up to 1 ms after
			// granted + ttl; a waiter whose check crossed the message (on
			// a loaded machine) trusts the PTTL it read, which allows for
			// that.
			granted := time.UnixMicro(int64(l.Fence()))
			margin := backend.Drift(ttl) - time.Millisecond
			if !tc.renew {
				margin = backend.Drift(0) - time.Millisecond
			}
			if d.After(granted.Add(ttl - margin + wallClockSet(unlocking))) {
				t.Errorf("trusted until %v after the grant, want at most the %v lease less %v", d.Round(0).Sub(granted), ttl, margin)
			}
		})
	}
}

// acquire.lua: a check that finds the lock ours (with replica
// acknowledgement, lengthening it to its lease) never shortens it: one
// resent after a lost reply may reach Redis after an Extend to longer.
func TestCheckFindingTheLockOursNeverShortensIt(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "ours", WithTTL(time.Minute))
	defer l.Unlock(ctx)
	k := c.keys("ours")
	res, err := acquireScript.Run(ctx, rdb, k.all(), l.Token(), 1000, "{}", "1", 30000, 1000, "cl", 1000).Int64Slice()
	if err != nil || res[0] != 2 {
		t.Fatalf("check = %v, %v; want the lock found ours", res, err)
	}
	if pttl := rdb.PTTL(ctx, k.lock).Val(); pttl < 50*time.Second {
		t.Errorf("after a check asking for 1s the lock of 1 min expires in %v", pttl)
	}
}

// acquire.lua: a check that finds the lock ours, asked to (ARGV[8], with
// replica acknowledgement), lengthens it to the full lease in Redis and
// writes even when that changes nothing, so that the WAIT sent after it
// covers a write of its own connection: the waiter trusts that lease from
// the check (as TestSemaphoreCheckLengthensHandOver for permits).
func TestCheckLengthensTheLockFoundOurs(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "handed", WithTTL(5*time.Second), WithoutRenewal())
	defer l.Unlock(ctx)
	k := c.keys("handed")
	check := lengtheningCheck(t, rdb, acquireScript, k.all(), l.Fence(), func(lengthenTo int64) []any {
		return []any{l.Token(), 1000, "{}", "1", 30000, 1000, "cl", lengthenTo}
	})
	if res := check(60000); res[2] < 59000 {
		t.Fatalf("check lengthening to 60 s answered a lease of %d ms", res[2])
	}
	if d := rdb.PTTL(ctx, k.lock).Val(); d < 59*time.Second {
		t.Fatalf("after a check lengthening to 60 s the lock expires in %v", d)
	}
	// Shorter than what is left: kept as it is, and written all the same.
	if res := check(1000); res[2] < 58000 {
		t.Fatalf("lease after a check asking for less = %d ms", res[2])
	}
}

// lengtheningCheck returns a run of script, with the arguments args gives
// for a lease of lengthenTo ms, as a waiter's check that finds the lock (or
// permits) handed to it: t fails unless it answers {2, fence, pttl} and
// writes, even when the lease stays as it is, so that a WAIT after it
// covers a write of its own connection.
func lengtheningCheck(t *testing.T, rdb *redis.Client, script *redis.Script, keys []string, fence uint64, args func(lengthenTo int64) []any) func(lengthenTo int64) []int64 {
	return func(lengthenTo int64) []int64 {
		t.Helper()
		before := changes(t, rdb)
		res, err := script.Run(context.Background(), rdb, keys, args(lengthenTo)...).Int64Slice()
		if err != nil || len(res) != 3 || res[0] != 2 || uint64(res[1]) != fence {
			t.Fatalf("check = %v, %v; want {2, %d, pttl}", res, err, fence)
		}
		if changes(t, rdb) == before {
			t.Fatalf("a check lengthening to %d ms wrote nothing: a WAIT after it would not cover it", lengthenTo)
		}
		return res
	}
}

// A lock taken WithoutRenewal and handed over by message is trusted until
// about when Redis's lease of it ends. Trusted from the waiter's last check
// before the hand-over instead, up to a third of the lease earlier, and
// with no renewal to trust it again, its Context would end that much before
// Redis's lease.
func TestHandOverByMessageWithoutRenewalTrustsTheLeaseLeft(t *testing.T) {
	holder, rdb, _ := newTestClient(t)
	c := newClientOn(t, rdb, WithQueueTTL(time.Minute))
	ctx := context.Background()
	a := mustLock(t, holder, "fixed", WithTTL(time.Minute))
	const ttl = 6 * time.Second // the waiter checks every 2s
	got := lockAsync(ctx, c, "fixed", WithTTL(ttl), WithoutRenewal())
	waitQueuedAndSubscribed(t, rdb, c, "fixed")
	// The gap between the waiter's last check and the hand-over is the
	// subject: the message comes well before its next check.
	time.Sleep(time.Second)
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := receiveLock(t, got, 5*time.Second, "hand-over")
	defer l.Unlock(ctx)
	sent := time.Now()
	pttl, err := rdb.PTTL(ctx, c.keys("fixed").lock).Result()
	if err != nil {
		t.Fatal(err)
	}
	ends := sent.Add(pttl) // Redis's lease ends no earlier
	// A round trip on a loaded machine, beside the drift margin.
	if early := ends.Sub(c.dog.deadline(l.h)); early > backend.Drift(ttl)+250*time.Millisecond {
		t.Errorf("trusted until %v before Redis's lease ends, want at most the drift margin %v and a round trip", early, backend.Drift(ttl))
	}
}

// wallClockSet returns how far the wall clock was set, forward or back,
// since start: the difference between the wall and the monotonic time
// passed.
func wallClockSet(start time.Time) time.Duration {
	now := time.Now()
	return (now.Round(0).Sub(start.Round(0)) - now.Sub(start)).Abs()
}

// acquire.lua: a newcomer that finds a lock expired with waiters queued
// hands it to the first waiter (who is told at once), instead of leaving
// it free until that waiter's next check.
func TestExpiredLockGoesToFirstWaiterOnArrival(t *testing.T) {
	c1, rdb, _ := newTestClient(t)
	c2 := newClientOn(t, rdb, WithQueueTTL(30*time.Second))
	ctx := context.Background()
	dead := mustLock(t, c1, "expired", WithTTL(30*time.Second))
	got := lockAsync(ctx, c2, "expired", WithTTL(30*time.Second)) // checks every 10s
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c2, "expired") == 1 })
	// The holder dies: its lease runs out. (A check of the waiter's, nudged
	// by its new subscription, may take the lock at once: fine too.)
	rdb.PExpire(ctx, c1.keys("expired").lock, 20*time.Millisecond)
	waitUntil(t, 5*time.Second, "the lease to run out", func() bool {
		return !rdb.HExists(ctx, c1.keys("expired").lock, dead.Token()).Val()
	})
	if _, err := c1.TryLock(ctx, "expired"); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock with a waiter queued = %v, want ErrNotObtained", err)
	}
	l := receiveLock(t, got, 3*time.Second, "the first waiter to get the expired lock")
	_ = l.Unlock(ctx)
}

// acquire.lua: a waiter that takes an expired lock itself leaves the
// queue; otherwise its own release hands the lock back to it.
func TestWaiterTakingExpiredLockLeavesQueue(t *testing.T) {
	c1, rdb, _ := newTestClient(t)
	c2 := newClientOn(t, rdb)
	ctx := context.Background()
	_ = mustLock(t, c1, "took", WithTTL(30*time.Second))
	got := lockAsync(ctx, c2, "took")
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c2, "took") == 1 })
	rdb.PExpire(ctx, c1.keys("took").lock, 20*time.Millisecond)
	l := receiveLock(t, got, 5*time.Second, "the waiter to take the expired lock")
	if n := queued(t, rdb, c2, "took"); n != 0 {
		t.Errorf("%d entries left in the queue after the waiter took the lock", n)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if rdb.Exists(ctx, c2.keys("took").lock).Val() != 0 {
		t.Error("the lock is held after its only holder unlocked it")
	}
}

// common.lua enqueue: a waiter refreshing its entry keeps its place; it
// does not fall behind those who arrived after it.
func TestRefreshKeepsPlaceInQueue(t *testing.T) {
	holder, rdb, _ := newTestClient(t)
	quick := newClientOn(t, rdb, WithQueueTTL(300*time.Millisecond)) // refreshes every 100ms
	slow := newClientOn(t, rdb)
	ctx := context.Background()
	l := mustLock(t, holder, "place")
	order := make(chan int, 2)
	lockInTurn(t, quick, "place", 0, order)
	waitUntil(t, 5*time.Second, "the first waiter", func() bool { return queued(t, rdb, holder, "place") == 1 })
	k := holder.keys("place")
	first := rdb.ZRange(ctx, k.queue, 0, 0).Val()[0]
	lockInTurn(t, slow, "place", 1, order)
	waitUntil(t, 5*time.Second, "the second waiter", func() bool { return queued(t, rdb, holder, "place") == 2 })
	entry := rdb.HGet(ctx, k.waiters, first).Val()
	waitUntil(t, 5*time.Second, "the first waiter to refresh its entry", func() bool {
		return rdb.HGet(ctx, k.waiters, first).Val() != entry
	})
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got := <-order; got != 0 {
		t.Errorf("the waiter that arrived second was served first")
	}
	<-order
}

// common.lua waiter: an expired queue entry (a waiter that died) is never
// handed the lock; the release leaves it free for the next caller.
func TestExpiredEntryIsNotHandedTheLock(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	k := c.keys("stale")
	l := mustLock(t, c, "stale")
	dead := backend.NewToken()
	if _, err := acquireScript.Run(ctx, rdb, k.all(), dead, 30000, "{}", "1", 100, 30000, "dead-client").Result(); err != nil {
		t.Fatal(err)
	}
	// The queue's keys outlive the entry (as when others queued later).
	rdb.PExpire(ctx, k.queue, time.Minute)
	rdb.PExpire(ctx, k.waiters, time.Minute)
	time.Sleep(200 * time.Millisecond) // the entry's deadline passes
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if rdb.HExists(ctx, k.lock, dead).Val() {
		t.Fatal("the lock was handed to a waiter whose entry had expired")
	}
	l2, err := c.TryLock(ctx, "stale")
	if err != nil {
		t.Fatalf("TryLock after the release = %v", err)
	}
	_ = l2.Unlock(ctx)
}

// common.lua live_head: an expired entry dropped from the front of the
// queue leaves the waiters' hash too. A later waiter keeps that hash
// alive, and would keep such an entry in Redis while the lock is
// contended.
func TestExpiredEntryInFrontLeavesTheWaiters(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	k := c.keys("front")
	holder, dead, live := backend.NewToken(), backend.NewToken(), backend.NewToken()
	// A holder whose lease runs out, then a waiter that died before it
	// did, then one that lives.
	if res, err := acquireScript.Run(ctx, rdb, k.all(), holder, 300, "{}", "0", 0, 0, "holder-client").Int64Slice(); err != nil || res[0] != 1 {
		t.Fatalf("acquire = %v, %v", res, err)
	}
	if _, err := acquireScript.Run(ctx, rdb, k.all(), dead, 30000, "{}", "1", 100, 30000, "dead-client").Result(); err != nil {
		t.Fatal(err)
	}
	if _, err := acquireScript.Run(ctx, rdb, k.all(), live, 30000, "{}", "1", 30000, 30000, "live-client").Result(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the lease to run out", func() bool { return rdb.Exists(ctx, k.lock).Val() == 0 })
	// A caller arriving now finds the lock free: the live waiter gets it.
	if _, err := acquireScript.Run(ctx, rdb, k.all(), backend.NewToken(), 30000, "{}", "0", 0, 0, "other-client").Result(); err != nil {
		t.Fatal(err)
	}
	if !rdb.HExists(ctx, k.lock, live).Val() {
		t.Fatal("the live waiter was not handed the lock")
	}
	if rdb.HExists(ctx, k.waiters, dead).Val() {
		t.Error("the expired entry left the queue but not the waiters' hash")
	}
}

// node_acquire.go: a lock handed over to a waiter of a renewing lock gets
// at most a queue TTL of lease, so a waiter that died meanwhile blocks it
// no longer than that.
func TestHandOverLeaseIsAtMostQueueTTL(t *testing.T) {
	holder, rdb, _ := newTestClient(t)
	const qttl = 2 * time.Second
	c := newClientOn(t, rdb, WithQueueTTL(qttl))
	ctx := context.Background()
	a := mustLock(t, holder, "short")
	got := lockAsync(ctx, c, "short", WithTTL(time.Minute))
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c, "short") == 1 })
	if err := a.Unlock(ctx); err != nil { // hands over
		t.Fatal(err)
	}
	if pttl := rdb.PTTL(ctx, c.keys("short").lock).Val(); pttl <= 0 || pttl > qttl {
		t.Errorf("handed-over lease %v, want at most the queue TTL %v", pttl, qttl)
	}
	l := receiveLock(t, got, 5*time.Second, "hand-over")
	_ = l.Unlock(ctx)
}

// node_acquire.go: a hand-over published after the waiter's check but
// before its subscription took effect is found by checking again as soon
// as the subscription is ready, not at the next refresh.
func TestHandOverBeforeSubscriptionIsFound(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	holder := newClientOn(t, rdb)
	ctx := context.Background()
	a := mustLock(t, holder, "gap")
	var once sync.Once
	c, _ := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{acquireEval.sha: func() error {
		// The waiter has just queued; it is not subscribed yet.
		once.Do(func() { _ = a.Unlock(ctx) })
		return nil
	}}}, WithQueueTTL(30*time.Second))
	got := lockAsync(ctx, c, "gap", WithTTL(30*time.Second)) // refreshes every 10s
	l := receiveLock(t, got, 3*time.Second, "the hand-over to be found")
	_ = l.Unlock(ctx)
}

// forcerelease.lua: a force release hands the lock straight to the first
// waiter, who is told at once (not at its next check).
func TestForceReleaseHandsOver(t *testing.T) {
	c1, rdb, _ := newTestClient(t)
	c2 := newClientOn(t, rdb, WithQueueTTL(30*time.Second))
	ctx := context.Background()
	_ = mustLock(t, c1, "forced")
	got := lockAsync(ctx, c2, "forced", WithTTL(30*time.Second)) // checks every 10s
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c2, "forced") == 1 })
	if err := c1.ForceRelease(ctx, "forced"); err != nil {
		t.Fatal(err)
	}
	if rdb.Exists(ctx, c1.keys("forced").lock).Val() != 1 {
		t.Error("the force release did not hand the lock to the waiter")
	}
	l := receiveLock(t, got, 3*time.Second, "the waiter to be told")
	_ = l.Unlock(ctx)
}

// grantedPending reports whether a hand-over message waits, unread, in the
// granted channel of one of c's waiters on key.
func grantedPending(c *Client, key string) bool {
	w := c.be.(*node).wake
	w.mu.Lock()
	defer w.mu.Unlock()
	cs := w.channels[c.wakeChannel(key)]
	if cs == nil {
		return false
	}
	for _, wt := range cs.waiters {
		if len(wt.granted) > 0 {
			return true
		}
	}
	return false
}

// A hand-over message that reached the waiter while its next check was on
// the way, for a hand-over whose lease then ended (the waiter's round trip
// was slow), is stale once that check found the lock held by another: the
// waiter must not take it as a grant.
func TestStaleHandOverMessageAfterNotHeldCheck(t *testing.T) {
	holder, rdb, srv := newTestClient(t)
	ctx := context.Background()
	const key = "stale"

	var calls atomic.Int32
	entered := make(chan struct{})
	proceed := make(chan struct{})
	hook := scriptHook{before: map[string]func() error{
		acquireEval.sha: func() error {
			if calls.Add(1) == 2 { // the waiter's first refresh: a slow round trip
				close(entered)
				<-proceed
			}
			return nil
		},
	}}
	// Queue TTL 300ms: checks every 100ms, a hand-over lease of 300ms.
	waiterClient, _ := hookedClient(t, srv.Addr(), hook, WithQueueTTL(300*time.Millisecond))

	h := mustLock(t, holder, key, WithTTL(30*time.Second))
	got := lockAsync(ctx, waiterClient, key, WithTTL(30*time.Second))
	<-entered // the waiter queued, subscribed, and its next check is under way
	ch := waiterClient.wakeChannel(key)
	waitUntil(t, 5*time.Second, "the waiter's subscription", func() bool {
		shard, _ := rdb.PubSubShardNumSub(ctx, ch).Result()
		classic, _ := rdb.PubSubNumSub(ctx, ch).Result()
		return shard[ch]+classic[ch] == 1
	})

	if err := h.Unlock(ctx); err != nil { // handed over to the waiter
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the hand-over message to reach the waiter", func() bool {
		return grantedPending(waiterClient, key)
	})
	// The waiter's round trip is slower than the hand-over lease: the lock
	// expires, and another client takes it.
	k := holder.keys(key)
	waitUntil(t, 5*time.Second, "the hand-over lease to run out", func() bool {
		return rdb.Exists(ctx, k.lock).Val() == 0
	})
	other := newClientOn(t, rdb)
	y, err := other.TryLock(ctx, key, WithTTL(30*time.Second))
	if err != nil {
		t.Fatalf("TryLock of the expired lock: %v", err)
	}
	close(proceed) // the waiter's check runs now: the lock is y's

	select {
	case r := <-got:
		if r.err == nil {
			owner, _ := rdb.HGetAll(ctx, k.lock).Result()
			t.Errorf("Lock returned a lock held by another: waiter token %s fence %d; other token %s fence %d; Redis: %v",
				r.l.Token(), r.l.Fence(), y.Token(), y.Fence(), owner)
			_ = r.l.Unlock(ctx)
			_ = y.Unlock(ctx)
			return
		}
		t.Fatalf("Lock: %v", r.err)
	case <-time.After(time.Second):
		// Still waiting, as it should: y holds the lock.
	}
	if err := y.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := receiveLock(t, got, 5*time.Second, "the hand-over after y's unlock")
	if l.Fence() <= y.Fence() {
		t.Errorf("fence %d after y's %d", l.Fence(), y.Fence())
	}
	_ = l.Unlock(ctx)
}

// acquire.lua: a check that queues reads the holder's fence, up to which
// a hand-over message to the waiter is stale (node_acquire.go): one for a
// hand-over taken away at once (ForceRelease) arrives too soon for the
// lease left to give it away, as in TestStaleHandOverMessageAfterNotHeldCheck.
func TestQueuedCheckReadsTheHoldersFence(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "fenced")
	defer l.Unlock(ctx)
	res, err := acquireScript.Run(ctx, rdb, c.keys("fenced").all(), backend.NewToken(), 30000, "{}", "1", 30000, 30000, "waiter-client").Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 || res[0] != 0 || uint64(res[2]) != l.Fence() {
		t.Errorf("queued check = %v, want [0 pttl %d]", res, l.Fence())
	}
}

// node_acquire.go: a waiter that reads the holder's lease in its last
// millisecond (PTTL 0: Redis expires a key only once its time is past)
// checks again when the lease runs out, not at its periodic check: no
// message comes when a lease runs out, only the waiter's timer.
func TestWaiterChecksAgainWhenTheLeaseRunsOut(t *testing.T) {
	c1, rdb, _ := newTestClient(t)
	c2 := newClientOn(t, rdb, WithQueueTTL(30*time.Second)) // periodic check every 10 s
	ctx := context.Background()
	const lease = 20 * time.Millisecond
	// The holder stops trusting its lease about 2.2 ms (backend.Drift)
	// before Redis expires it; the waiter's first check comes at steps of
	// 0.1 ms from there, so some land in the lease's last millisecond.
	for i := range 40 {
		held := mustLock(t, c1, "edge", WithTTL(lease), WithoutRenewal())
		<-held.Context().Done()
		for at := time.Now().Add(time.Duration(i) * 100 * time.Microsecond); time.Now().Before(at); {
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		l, err := c2.Lock(wctx, "edge")
		cancel()
		if err != nil {
			t.Fatalf("round %d: the waiter did not get the lock within 2 s (asleep until its periodic check): %v", i, err)
		}
		_ = l.Unlock(ctx)
		_ = held.Unlock(ctx) // lost, and found so
	}
}

// A lock handed over starts with a lease of at most the queue TTL (3 s),
// shorter than the lease the watchdog renews (30 s). A renewal that fails
// must be tried again within that short lease, as it is within a full one
// (six times before the lease runs out), not only after a tenth of the
// full lease, when the short one is long over: one failed round trip
// would lose the lock while Redis is back at once.
func TestHandedOverLockSurvivesOneFailedRenewal(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	var armed atomic.Bool
	var failed atomic.Int32
	errDown := errors.New("connection reset")
	c, rdb := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{extendScript.Hash(): func() error {
		if armed.CompareAndSwap(true, false) {
			failed.Add(1)
			return errDown
		}
		return nil
	}}})
	holder := newClientOn(t, rdb)
	a := mustLock(t, holder, "handed", WithTTL(time.Minute))
	got := lockAsync(ctx, c, "handed") // default lease 30 s, queue TTL 3 s
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c, "handed") == 1 })
	armed.Store(true) // the first renewal of the handed-over lock fails
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := receiveLock(t, got, 5*time.Second, "hand-over")
	defer l.Unlock(ctx)
	waitUntil(t, 5*time.Second, "the first renewal to fail", func() bool { return failed.Load() == 1 })
	waitUntil(t, 10*time.Second, "a renewal to succeed or the lock to be lost", func() bool {
		return l.Context().Err() != nil || rdb.PTTL(ctx, c.keys("handed").lock).Val() > 10*time.Second
	})
	if err := l.Context().Err(); err != nil {
		t.Fatalf("one failed renewal lost the handed-over lock: %v", context.Cause(l.Context()))
	}
}

// A lock handed over is trusted for a lease of at most the queue TTL (3 s),
// and its renewal may go early, to share another lock's round trip, by a
// sixth of that lease, not of the configured one (30 s): a sixth of 30 s
// would send its first renewal with the very next one of any other lock
// of the Client, right after the hand-over, a write wasted.
func TestHandedOverLockNotRenewedRightAway(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rt := &renewalTimes{at: map[string][]time.Time{}}
	c, _ := hookedClient(t, srv.Addr(), renewalTimesHook{r: rt}) // lease 30 s, queue TTL 3 s
	rdb := srv.Client(t)
	holder := newClientOn(t, rdb)
	// Renewed every 200 ms: a round trip the handed-over lock may join.
	busy := mustLock(t, c, "busy", WithTTL(600*time.Millisecond))
	defer busy.Unlock(ctx)
	a := mustLock(t, holder, "handed", WithTTL(time.Minute))
	// The hand-over's lease is trusted from one of the waiter's checks,
	// none made before this.
	called := time.Now()
	got := lockAsync(ctx, c, "handed")
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c, "handed") == 1 })
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := receiveLock(t, got, 5*time.Second, "hand-over")
	defer l.Unlock(ctx)
	key := c.keys("handed").lock
	var first time.Time
	waitUntil(t, 5*time.Second, "the handed-over lock's first renewal", func() bool {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		if at := rt.at[key]; len(at) > 0 {
			first = at[0]
		}
		return !first.IsZero()
	})
	// Due a third of 3 s after the check, early by a sixth at most.
	if after := first.Sub(called); after < 500*time.Millisecond {
		t.Fatalf("the handed-over lock was first renewed %v after its Lock call, earlier than a sixth of its 3 s lease", after)
	}
}

// common.lua waiter: a queue entry whose lease PEXPIRE refuses (out of
// range) or that would delete the lock at once (0) is corrupt, not a
// waiter to hand the lock to: a hand-over must not fail half way (the
// lock deleted, the entry popped and the waiter made holder without an
// expiry), nor grant a lock that no longer exists. A lease with leading
// zeros is read as its number.
func TestCorruptEntryLeaseIsNotHandedTheLock(t *testing.T) {
	for _, lease := range []string{"99999999999999999999", "9223372036854775807", "0", "007"} {
		t.Run(lease, func(t *testing.T) {
			c, rdb, _ := newTestClient(t)
			ctx := context.Background()
			key := "corrupt-lease-" + lease
			k := c.keys(key)
			l := mustLock(t, c, key)
			now, err := rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			deadline := now.Add(time.Minute).UnixMilli()
			rdb.ZAdd(ctx, k.queue, redis.Z{Score: 1, Member: "bad"})
			rdb.HSet(ctx, k.waiters, "bad", fmt.Sprintf("%d %s nobody {}", deadline, lease))
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
			// Read before the holder: a 7 ms lease may run out between
			// the two reads, and a lock with no expiry never does.
			pttl := rdb.PTTL(ctx, k.lock).Val()
			if rdb.HExists(ctx, k.lock, "bad").Val() {
				// Only a lease that PEXPIRE reads once normalized ('007')
				// may be handed over, and then with its expiry.
				if lease != "007" || pttl <= 0 {
					t.Fatalf("the lock was handed to a corrupt entry (pttl %v)", pttl)
				}
				return
			}
			l2, err := c.TryLock(ctx, key)
			if err != nil {
				t.Fatalf("TryLock after the release: %v", err)
			}
			_ = l2.Unlock(ctx)
		})
	}
}

// A queue head whose entry asks for a lease of 0 (corrupt: PEXPIRE 0
// would delete the lock as it is handed over) is skipped like an expired
// one: the release hands the lock to the live waiter behind it, in the same
// script, rather than to the corrupt entry, which would leave the lock
// gone and that waiter asleep until its next check.
func TestCorruptZeroLeaseEntryIsSkippedForTheNextWaiter(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	waiter := newClientOn(t, rdb, WithQueueTTL(time.Minute))
	ctx := context.Background()
	const key = "corrupt-zero-lease"
	k := c.keys(key)
	l := mustLock(t, c, key)
	got := lockAsync(ctx, waiter, key)
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c, key) == 1 })
	head := rdb.ZRangeWithScores(ctx, k.queue, 0, 0).Val()[0]
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// Ahead of the waiter, with a minute to live.
	rdb.ZAdd(ctx, k.queue, redis.Z{Score: head.Score - 1, Member: "bad"})
	rdb.HSet(ctx, k.waiters, "bad", fmt.Sprintf("%d 0 nobody {}", now.Add(time.Minute).UnixMilli()))
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if !rdb.HExists(ctx, k.lock, head.Member.(string)).Val() {
		t.Errorf("the release did not hand the lock to the waiter behind the corrupt entry (lock %v)", rdb.HGetAll(ctx, k.lock).Val())
	}
	_ = receiveLock(t, got, 5*time.Second, "the waiter's Lock").Unlock(ctx)
}

// panicRetry is a RetryStrategy with a bug: it panics when asked for a
// delay.
type panicRetry struct{}

func (panicRetry) Backoff(int) (time.Duration, bool) { panic("strategy bug") }

// A Lock call that panics while queued (its RetryStrategy's bug, recovered
// by the caller as net/http does) leaves the queue, as one that gives up:
// else the lock is handed to nobody, and the waiters behind wait out its
// lease.
func TestWaiterThatPanicsLeavesTheQueue(t *testing.T) {
	c, rdb, srv := newTestClient(t, noPolling)
	ctx := context.Background()
	held := mustLock(t, c, "k")
	other := newClientOn(t, srv.Client(t), noPolling)
	mustPanic(t, "Lock with a panicking RetryStrategy", func() { _, _ = other.Lock(ctx, "k", WithRetry(panicRetry{})) })
	nextWaiterServed(t, c, rdb, held)
}

// A go-redis hook that panics at the release of a waiter leaving the queue
// (its ctx ended): the leaving runs on a goroutine of its own, so that a
// Redis that hangs does not hold Lock past its ctx's end; a panic there
// that comes while Lock still waits for it is raised in Lock, where the
// caller can recover it, and one that comes later is logged, not let go
// (it would end the process).
func TestLeavingPanicGoesToTheWaiterOrTheLog(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(map[bool]string{false: "raised", true: "logged"}[late], func(t *testing.T) {
			srv := redistest.Start(t)
			ctx := context.Background()
			var logs syncBuffer
			returned := make(chan struct{})
			hook := scriptHook{after: map[string]func() error{releaseEval.sha: func() error {
				if late {
					<-returned // Lock has stopped waiting for its leaving
				}
				panic("hook bug")
			}}}
			c, rdb := hookedClient(t, srv.Addr(), hook, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			held := mustLock(t, newClientOn(t, srv.Client(t)), "k")
			defer held.Unlock(ctx)
			wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			if !late {
				mustPanic(t, "Lock whose leaving panicked", func() { _, _ = c.Lock(wctx, "k") })
			} else {
				got := lockAsync(wctx, c, "k")
				select {
				case r := <-got:
					if !errors.Is(r.err, context.DeadlineExceeded) {
						t.Errorf("Lock whose leaving was held back = %v, want DeadlineExceeded", r.err)
					}
				case <-time.After(endedUnlockWait + 5*time.Second):
					t.Fatal("Lock waited for its leaving, held back, past endedUnlockWait")
				}
				close(returned)
				waitUntil(t, 5*time.Second, "the panic logged", func() bool { return strings.Contains(logs.String(), "hook bug") })
			}
			c.Close()
			if n := queued(t, rdb, c, "k"); n != 0 {
				t.Errorf("%d queue entries left by a waiter whose leaving panicked after its release", n)
			}
		})
	}
}

// nextWaiterServed checks that a call of c's that panicked while it waited
// for held left no entry in held's queue, and that the next waiter gets the
// lock when held is unlocked.
func nextWaiterServed(t *testing.T, c *Client, rdb *redis.Client, held *Lock) {
	t.Helper()
	ctx, key := context.Background(), held.Key()
	if n := queued(t, rdb, c, key); n != 0 {
		t.Errorf("the call that panicked left %d queue entries", n)
	}
	got := lockAsync(ctx, c, key)
	waitQueuedAndSubscribed(t, rdb, c, key)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := receiveLock(t, got, 5*time.Second, "the waiter behind the call that panicked")
	_ = l.Unlock(ctx)
}

// A panic while releasing a grant that came too late (a go-redis hook's)
// reaches the TryLock caller, and the call still ends for Close, which
// does not wait for it.
func TestLateGrantReleasePanicDoesNotHoldUpClose(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	const key = "late"
	var c *Client
	hook := scriptHook{after: map[string]func() error{
		acquireScript.Hash(): func() error {
			waitUntil(t, 5*time.Second, "the lease to run out", func() bool {
				n, _ := rdb.Exists(context.Background(), c.keys(key).lock).Result()
				return n == 0
			})
			return nil
		},
		releaseEval.sha: func() error { panic("hook bug") },
	}}
	c, _ = hookedClient(t, srv.Addr(), hook)
	mustPanic(t, "TryLock whose late grant's release panicked", func() {
		_, _ = c.TryLock(context.Background(), key, WithTTL(100*time.Millisecond), WithoutRenewal())
	})
	start := time.Now()
	c.Close()
	if took := time.Since(start); took > time.Second {
		t.Errorf("Close took %v after a TryLock whose release panicked", took.Round(time.Millisecond))
	}
}

// node_acquire.go: a waiter checks every third of the queue TTL, so its
// queue entry never comes near its end while it waits: one that ran out
// before its refresh would be skipped by a release made meanwhile.
func TestWaiterRefreshesItsEntryWellBeforeItEnds(t *testing.T) {
	holder, rdb, _ := newTestClient(t)
	const queueTTL = 1500 * time.Millisecond // checks every 500 ms
	waiter := newClientOn(t, rdb, WithQueueTTL(queueTTL))
	ctx := context.Background()
	l := mustLock(t, holder, "refresh-margin")
	defer l.Unlock(ctx)
	wctx, cancel := context.WithCancel(ctx)
	got := lockThenUnlock(wctx, waiter, "refresh-margin")
	defer func() { cancel(); <-got }()
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, holder, "refresh-margin") == 1 })

	k := holder.keys("refresh-margin")
	// Two periods of a waiter that checked only once per queue TTL.
	for end := time.Now().Add(2 * queueTTL); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		entries := rdb.HGetAll(ctx, k.waiters).Val()
		now := rdb.Time(ctx).Val()
		if len(entries) != 1 {
			t.Fatalf("queue entries: %v, want the waiter's", entries)
		}
		for _, entry := range entries {
			deadline, err := strconv.ParseInt(strings.Fields(entry)[0], 10, 64)
			if err != nil {
				t.Fatalf("queue entry %q: %v", entry, err)
			}
			// Two thirds of the queue TTL left at the least, less a check's
			// round trip; a third of it is slack.
			if left := time.Duration(deadline-now.UnixMilli()) * time.Millisecond; left < queueTTL/3 {
				t.Fatalf("the waiter's queue entry has %v left of %v: not refreshed in time", left, queueTTL)
			}
		}
	}
}

// The fence up to which a hand-over message is stale is the highest any
// check found, not the last one's: a failover that lost the lock's keys
// (and a fence counter ahead of the new master's clock) lets the next
// holder's fence be lower than one an earlier check read, and a message
// for a hand-over made before that check must still not be trusted.
func TestStaleHandOverMessageAfterFenceWentBack(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const key = "back"
	var calls, done atomic.Int32
	entered, proceed, third := make(chan struct{}), make(chan struct{}), make(chan struct{})
	w, _ := hookedClient(t, srv.Addr(), scriptHook{
		before: map[string]func() error{acquireEval.sha: func() error {
			if calls.Add(1) == 2 { // the waiter's second check
				close(entered)
				<-proceed
			}
			return nil
		}},
		after: map[string]func() error{acquireEval.sha: func() error {
			if done.Add(1) == 3 {
				close(third)
			}
			return nil
		}},
	})
	k := w.keys(key)
	// A counter ahead of the clock: the holder's fence is an hour ahead.
	ahead := uint64(time.Now().Add(time.Hour).UnixMicro())
	if err := rdb.Set(ctx, k.fence, ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}
	h := mustLock(t, newClientOn(t, rdb), key, WithTTL(30*time.Second))
	if h.Fence() <= ahead {
		t.Fatalf("holder's fence %d, want past the counter's %d", h.Fence(), ahead)
	}
	got := lockAsync(ctx, w, key)
	<-entered // the first check read h's fence; the second is held back
	token := rdb.ZRange(ctx, k.queue, 0, 0).Val()
	if len(token) != 1 {
		t.Fatalf("queue %v, want the waiter", token)
	}
	// The lock's keys are lost (a failover): g's fence comes from the
	// clock, below h's.
	if err := rdb.Del(ctx, k.lock, k.fence, k.queue, k.waiters).Err(); err != nil {
		t.Fatal(err)
	}
	g, err := newClientOn(t, rdb).TryLock(ctx, key, WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if g.Fence() >= h.Fence() {
		t.Fatalf("g's fence %d, want below h's %d", g.Fence(), h.Fence())
	}
	// A late message for a hand-over to the waiter made before its first
	// check, with a fence up to h's.
	ch := w.wakeChannel(key)
	waitUntil(t, 5*time.Second, "the waiter's subscription", func() bool {
		return rdb.PubSubShardNumSub(ctx, ch).Val()[ch] == 1
	})
	if err := rdb.SPublish(ctx, ch, token[0]+" "+strconv.FormatUint(h.Fence(), 10)).Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the message to reach the waiter", func() bool { return grantedPending(w, key) })
	close(proceed) // the second check finds g holding the lock
	select {
	case r := <-got:
		if r.err == nil {
			t.Fatalf("Lock took a stale hand-over (fence %d) while g holds the lock (fence %d)", r.l.Fence(), g.Fence())
		}
		t.Fatalf("Lock: %v", r.err)
	case <-third: // it checked again instead, and waits for g
	}
	if err := g.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := receiveLock(t, got, 5*time.Second, "the hand-over after g's unlock")
	if l.Fence() <= g.Fence() {
		t.Errorf("fence %d after g's %d", l.Fence(), g.Fence())
	}
	_ = l.Unlock(ctx)
}
