package redlock_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testutil"
	"github.com/dlock-go/dlock/redlock"
)

// gateAcquire holds back the acquire script of key on one node, as a
// request still waiting for a connection (or its dial) to a slow node:
// go-redis gives such a request up when its context ends.
type gateAcquire struct {
	testutil.PassHook
	key      string
	armed    atomic.Bool
	held     chan struct{} // a request is being held back
	gate     chan struct{} // closed: let it go
	finished chan error    // the held request's outcome
	release  bool          // hold back the release script instead
}

func (h *gateAcquire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		match := isAcquire
		if h.release {
			match = isRelease
		}
		if !h.armed.Load() || !match(cmd, h.key) {
			return next(ctx, cmd)
		}
		h.armed.Store(false)
		h.held <- struct{}{}
		var err error
		select {
		case <-h.gate:
			err = next(ctx, cmd)
		case <-ctx.Done():
			err = ctx.Err()
			cmd.SetErr(err)
		}
		h.finished <- err
		return err
	}
}

// slowThirdNode starts three nodes, the third holding back the acquire
// script of "job" (or its release script) once the gate is armed, and a
// patient locker (per-node timeout 1s) that has connected to them and
// cached its scripts.
func slowThirdNode(t *testing.T, release bool) (*cluster, *gateAcquire, *dlock.Client) {
	cl := startCluster(t, 3)
	h := &gateAcquire{key: "job", held: make(chan struct{}, 1), gate: make(chan struct{}), finished: make(chan error, 1), release: release}
	cl.rdbs[2].AddHook(h)
	c := cl.patientLocker(t)
	mustLock(t, c, "warm").Unlock(context.Background())
	cl.cacheScripts(t)
	return cl, h, c
}

// A Lock whose caller gives up takes nothing: an acquire still on its way
// to a slow node when the caller cancels is not sent after the failed
// attempt's release (it would leave a hold nobody owns for the lease).
func TestCancelledLockLeavesNoHold(t *testing.T) {
	cl, h, c := slowThirdNode(t, false)
	ctx := context.Background()
	// Node 1 holds back its acquire too, never let go (the failed attempt
	// gives it up): nodes 0 and 1 alone would grant a majority before the
	// caller cancels if the cancel comes late, as on a loaded machine.
	h1 := &gateAcquire{key: "job", held: make(chan struct{}, 1), gate: make(chan struct{}), finished: make(chan error, 1)}
	cl.rdbs[1].AddHook(h1)

	h1.armed.Store(true)
	h.armed.Store(true)
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		l, err := c.Lock(lctx, "job")
		if err == nil {
			_ = l.Unlock(ctx)
		}
		errc <- err
	}()
	<-h.held
	<-h1.held
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock = %v, want context.Canceled", err)
	}
	close(h.gate) // the slow node's request goes on, if it still may
	select {
	case err := <-h.finished:
		t.Logf("the held-back acquire ended with %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the held-back acquire never ended")
	}
	if tokens := cl.rdbs[2].HKeys(ctx, lockKey("job")).Val(); len(tokens) > 0 {
		pttl := cl.rdbs[2].PTTL(ctx, lockKey("job")).Val()
		t.Errorf("node 2 holds %q for %v after the cancelled Lock returned: a hold nobody owns", tokens, pttl)
	}
}

// A release still on its way to a slow node when Unlock returned is applied
// after the caller cancels ctx.
func TestReleaseOutlivesTheCaller(t *testing.T) {
	cl, h, c := slowThirdNode(t, true)
	ctx := context.Background()
	l := lockEveryNode(t, cl, c, "job")
	h.armed.Store(true)
	uctx, cancel := context.WithCancel(ctx)
	if err := l.Unlock(uctx); err != nil { // a majority (nodes 0, 1) answered
		t.Fatal(err)
	}
	<-h.held
	cancel()
	close(h.gate)
	if err := <-h.finished; err != nil {
		t.Fatalf("the slow node's release ended with %v", err)
	}
	if n := cl.rdbs[2].Exists(ctx, lockKey("job")).Val(); n != 0 {
		t.Error("node 2 still holds the lock")
	}
}

// An acquire request to a slow node that the attempt stopped waiting for
// (a majority had already granted the lock) must not be sent after the
// lock's release: it would leave a hold nobody owns, renews or releases, for
// the whole lease (as TestCancelledLockLeavesNoHold, but after a success).
func TestLateAcquireAfterUnlockLeavesNoHold(t *testing.T) {
	cl, h, c := slowThirdNode(t, false)
	ctx := context.Background()

	h.armed.Store(true)
	l := mustLock(t, c, "job") // nodes 0 and 1 grant it; node 2's request is held back
	<-h.held
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	close(h.gate) // the slow node's request goes on, if it still may
	if err := <-h.finished; err == nil {
		t.Logf("the held-back acquire was sent after Unlock returned")
	}
	if tokens := cl.rdbs[2].HKeys(ctx, lockKey("job")).Val(); len(tokens) > 0 {
		pttl := cl.rdbs[2].PTTL(ctx, lockKey("job")).Val()
		t.Errorf("node 2 holds %q for %v after Unlock returned: a hold nobody owns", tokens, pttl)
	}
}

// Unlock with a context already cancelled (a deferred Unlock with the
// request's context) still sends the release, which outlives the caller:
// then either it reports the lock released and ends its Context, or the
// lock is still held. Never is the lock free for others while the
// holder's Context says it holds it.
func TestUnlockWithCancelledContext(t *testing.T) {
	cl := startCluster(t, 3)
	a, b := cl.patientLocker(t), cl.patientLocker(t)
	ctx := context.Background()
	l := lockEveryNode(t, cl, a, "job")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	uerr := l.Unlock(cctx)
	var l2 *dlock.Lock
	waitUntil(t, 5*time.Second, "the release to reach the nodes", func() bool {
		var err error
		l2, err = b.TryLock(ctx, "job")
		return err == nil
	})
	defer l2.Unlock(ctx)
	if l.Context().Err() == nil {
		t.Errorf("B holds the lock while A's Context is live (A's Unlock = %v)", uerr)
	}
}

// releaseRecorder records the Observer's release outcomes and losses.
type releaseRecorder struct {
	dlock.NopObserver
	mu       sync.Mutex
	releases []dlock.ReleaseEndEvent
	losts    []dlock.LostEvent
}

func (r *releaseRecorder) ReleaseEnd(_ context.Context, e dlock.ReleaseEndEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.releases = append(r.releases, e)
}

func (r *releaseRecorder) Lost(e dlock.LostEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.losts = append(r.losts, e)
}

// A deferred Unlock with the request's ended context sends the release
// anyway (it outlives the caller), so Unlock waits for the nodes' answers
// and reports what they did: the lock was released, not "no majority
// answered" with the lock given up as release_failed.
func TestUnlockWithEndedContextReportsTheRelease(t *testing.T) {
	cl := startCluster(t, 3)
	rec := &releaseRecorder{}
	c := cl.patientLocker(t, dlock.WithObserver(rec))
	ctx := context.Background()
	l := lockEveryNode(t, cl, c, "job")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Unlock(cctx); err != nil {
		t.Errorf("Unlock with an ended context = %v, want nil: the release ran", err)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrReleased) {
		t.Errorf("Context cause = %v, want ErrReleased", cause)
	}
	if on := cl.holders(t, "job", l.Token()); len(on) >= 2 {
		t.Errorf("a majority (nodes %v) still holds the lock after Unlock", on)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.releases) != 1 || rec.releases[0].Outcome != dlock.ReleaseOK {
		t.Errorf("releases = %+v, want one, ok", rec.releases)
	}
	if len(rec.losts) != 0 {
		t.Errorf("losts = %+v, want none", rec.losts)
	}
}

// Unlock with an ended context still returns within the per-node timeout
// of releases when a majority of the nodes hang.
func TestUnlockWithEndedContextWaitsAtMostTheNodeTimeout(t *testing.T) {
	cl := startCluster(t, 3)
	const nodeTimeout = 300 * time.Millisecond
	c, err := redlock.NewWithConfig(redlock.Config{Nodes: cl.nodes, NodeTimeout: nodeTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	// A lease of 1.2 s: releases wait max(NodeTimeout, lease/4) = 300 ms.
	l := lockEveryNode(t, cl, c, "job", dlock.WithTTL(1200*time.Millisecond))
	cl.srvs[1].Pause(t)
	cl.srvs[2].Pause(t)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	start := time.Now()
	err = l.Unlock(cctx)
	if d := time.Since(start); d > nodeTimeout+700*time.Millisecond {
		t.Errorf("Unlock with two of three nodes hung took %v, want about %v", d, nodeTimeout)
	}
	if !errors.Is(err, redlock.ErrNoQuorum) || !errors.Is(err, redlock.ErrNodeTimeout) {
		t.Errorf("Unlock with two of three nodes hung = %v, want ErrNoQuorum and ErrNodeTimeout", err)
	}
}

// A Lock that succeeded (a majority granted it) still takes the lock on
// the nodes slower than that majority after its caller's context ends (a
// deferred cancel of the context Lock was given, a request's context): only
// a failed attempt or Unlock may stop those acquires. Else the lock sits on
// a bare majority, renewals never give it to the slower node, and it is
// lost with one node down although a majority of the nodes is up.
func TestSuccessfulLockReachesTheSlowerNodesAfterTheCallerCancels(t *testing.T) {
	cl := startCluster(t, 3)
	h := &gateAcquire{key: "job", held: make(chan struct{}, 1), gate: make(chan struct{}), finished: make(chan error, 1)}
	cl.rdbs[2].AddHook(h)
	obs := &renewCounter{}
	c := cl.patientLocker(t, dlock.WithObserver(obs)) // node 2's acquire outlasts the Lock call on a loaded machine
	ctx := context.Background()
	mustLock(t, c, "warm").Unlock(ctx) // connected
	cl.cacheScripts(t)

	h.armed.Store(true)
	lctx, cancel := context.WithCancel(ctx)
	l, err := c.Lock(lctx, "job", dlock.WithTTL(1500*time.Millisecond)) // nodes 0 and 1 grant it
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	<-h.held
	cancel() // the caller is done with the context it locked with
	close(h.gate)
	if err := <-h.finished; err != nil {
		t.Errorf("node 2's acquire ended with %v once the caller's context ended", err)
	}
	onEveryNodeSurvivesOneDown(t, cl, obs, l, "job")
}

// lateAttempt makes, while armed, the acquire script of key run on the
// node and its reply come only after the attempt stopped waiting for it (a
// grant the attempt never learns of), and holds back the release script
// of key until gate is closed, as a release slow to reach the node: the
// request is applied whenever it arrives, whatever its client's deadline.
// With releasesOnly, the acquire scripts' replies come as usual.
type lateAttempt struct {
	testutil.PassHook
	key          string
	armed        atomic.Bool
	heldBack     atomic.Int32 // releases being held back
	gate         chan struct{}
	releasesOnly bool
}

func (h *lateAttempt) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.armed.Load() {
			return next(ctx, cmd)
		}
		switch {
		case isAcquire(cmd, h.key) && !h.releasesOnly:
			if err := next(ctx, cmd); err != nil {
				return err
			}
			<-ctx.Done() // the per-node timeout, or the attempt's own cancellation
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		case isRelease(cmd, h.key):
			h.heldBack.Add(1)
			<-h.gate
			return next(context.WithoutCancel(ctx), cmd)
		}
		return next(ctx, cmd)
	}
}

// countAcquires counts the acquire scripts of key a node has answered.
type countAcquires struct {
	testutil.PassHook
	key string
	n   atomic.Int32
}

func (h *countAcquires) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if isAcquire(cmd, h.key) {
			h.n.Add(1)
		}
		return err
	}
}

// A failed attempt releases on the nodes that did not answer too, since
// they may have granted it late; where such a release frees the lock, it
// must wake the waiters that hold blocked (here the attempt never learnt of
// any grant), not leave them asleep until the hold's lease runs out.
func TestReleaseOfLateGrantsWakesTheWaiters(t *testing.T) {
	cl := startCluster(t, 3)
	ctx := context.Background()
	late := &lateAttempt{key: "late", gate: make(chan struct{})}
	var nodes []redis.UniversalClient
	for _, srv := range cl.srvs {
		rdb := nodeClient(srv.Addr())
		rdb.AddHook(late)
		t.Cleanup(func() { rdb.Close() })
		nodes = append(nodes, rdb)
	}
	// A per-node timeout that a loaded machine's acquire requests fit in:
	// each must run (the late grant) before the hook holds its reply back.
	a, err := redlock.NewWithConfig(redlock.Config{Nodes: nodes, NodeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	var once sync.Once
	open := func() { once.Do(func() { close(late.gate) }) }
	t.Cleanup(open) // before a.Close, which waits for the held-back releases
	counts := make([]*countAcquires, len(cl.rdbs))
	for i, rdb := range cl.rdbs {
		counts[i] = &countAcquires{key: "late"}
		rdb.AddHook(counts[i])
	}
	b := cl.locker(t)
	mustLock(t, a, "late").Unlock(ctx) // the nodes cache the scripts
	// Unlock returns once a majority released: the last node's release may
	// still be on its way, and would refuse the late grant, then delete it.
	waitUntil(t, 5*time.Second, "the first lock released on every node", func() bool {
		for _, rdb := range cl.rdbs {
			if rdb.Exists(ctx, lockKey("late")).Val() != 0 {
				return false
			}
		}
		return true
	})

	late.armed.Store(true)
	if _, err := a.TryLock(ctx, "late", dlock.WithTTL(20*time.Second)); !errors.Is(err, redlock.ErrNoQuorum) {
		t.Fatalf("TryLock = %v, want ErrNoQuorum", err)
	}
	waitUntil(t, 5*time.Second, "the attempt's releases held back on every node", func() bool {
		return late.heldBack.Load() == 3
	})
	for i, rdb := range cl.rdbs {
		if rdb.Exists(ctx, lockKey("late")).Val() == 0 {
			t.Fatalf("node %d: no late grant", i)
		}
	}

	got := make(chan error, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		l, err := b.Lock(wctx, "late")
		if err == nil {
			_ = l.Unlock(ctx)
		}
		got <- err
	}()
	// The waiter is refused by the late holds (20s leases), subscribes, and
	// tries again once subscribed on a majority: two attempts, both refused.
	waitUntil(t, 5*time.Second, "the waiter's second attempt on every node", func() bool {
		for _, c := range counts {
			if c.n.Load() < 2 {
				return false
			}
		}
		return true
	})
	open() // the releases reach the nodes and free the lock
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the lock 5s after the late holds were released")
	}
}

// A waiter whose earlier attempt's release is slow to reach a majority is
// refused by its own leftover holds: that release must wake it as any
// blocker's does, not leave it asleep until those holds' lease runs out.
func TestOwnLateReleaseWakesTheWaiter(t *testing.T) {
	cl := startCluster(t, 5)
	ctx := context.Background()
	late := &lateAttempt{key: "own", gate: make(chan struct{}), releasesOnly: true}
	var nodes []redis.UniversalClient
	for i, srv := range cl.srvs {
		rdb := nodeClient(srv.Addr())
		if i < 2 {
			rdb.AddHook(late) // nodes 0 and 1 hold the releases back
		}
		t.Cleanup(func() { rdb.Close() })
		nodes = append(nodes, rdb)
	}
	// A per-node timeout that a loaded machine's replies fit in, so that
	// each attempt is refused as planned.
	c, err := redlock.NewWithConfig(redlock.Config{Nodes: nodes, NodeTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var once sync.Once
	open := func() { once.Do(func() { close(late.gate) }) }
	t.Cleanup(open) // before c.Close, which waits for the held-back releases
	count := &countAcquires{key: "own"}
	nodes[4].(*redis.Client).AddHook(count)
	mustLock(t, c, "warm").Unlock(ctx) // the nodes cache the scripts

	// Nodes 2-4 are held by three other owners: the first attempt gets
	// nodes 0 and 1, no majority, and is blocked. Its release of nodes 0
	// and 1 is held back.
	for i, tok := range []string{"z", "x", "y"} {
		cl.holdOn(t, 2+i, "own", tok, time.Minute)
	}
	late.armed.Store(true)
	got := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, "own")
		if err == nil {
			_ = l.Unlock(ctx)
		}
		got <- err
	}()
	waitUntil(t, 5*time.Second, "the first attempt's releases held back", func() bool {
		return late.heldBack.Load() == 2
	})
	// Two of the others go: the second attempt (once subscribed on a
	// majority) is refused by the first one's holds on nodes 0 and 1 (30 s
	// leases) and by node 4.
	for _, i := range []int{2, 3} {
		cl.rdbs[i].Del(ctx, lockKey("own"))
	}
	waitUntil(t, 5*time.Second, "the waiter's second attempt", func() bool { return count.n.Load() >= 2 })
	late.armed.Store(false)
	open() // the releases reach nodes 0 and 1: a majority is free
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the lock 5s after its own leftover holds were released")
	}
}

// An inner Unlock (of a re-entered Lock) releases no node's hold: it must
// not stop the acquires still on their way to the nodes slower than the
// majority, as the outermost Unlock does. Else the lock, still held, sits
// on a bare majority, and one node down loses it although a majority is up.
func TestInnerUnlockLetsTheSlowerNodesGetTheLock(t *testing.T) {
	cl := startCluster(t, 3)
	h := &gateAcquire{key: "job", held: make(chan struct{}, 1), gate: make(chan struct{}), finished: make(chan error, 1)}
	cl.rdbs[2].AddHook(h)
	obs := &renewCounter{}
	c := cl.patientLocker(t, dlock.WithObserver(obs))
	ctx := context.Background()
	mustLock(t, c, "warm").Unlock(ctx) // connected
	cl.cacheScripts(t)

	h.armed.Store(true)
	l := mustLock(t, c, "job", dlock.WithTTL(1500*time.Millisecond)) // nodes 0 and 1 grant it
	defer l.Unlock(ctx)
	<-h.held
	inner, err := c.Lock(l.Context(), "job") // re-entered
	if err != nil {
		t.Fatal(err)
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	close(h.gate)
	if err := <-h.finished; err != nil {
		t.Errorf("node 2's acquire ended with %v once an inner Unlock released its level", err)
	}
	onEveryNodeSurvivesOneDown(t, cl, obs, l, "job")
}

// Callers that give up while their attempts are under way take nothing:
// contexts ending within microseconds end attempts at every stage, with
// acquires written but not answered yet. Each release waits for its node's
// acquire to return; sent before, on another connection, it could reach
// the node first, and the acquire then leave a hold nobody owns for the
// whole lease (before that wait, about 8% of these attempts did, some on a
// majority).
func TestCancelledMidAttemptLeavesNoHold(t *testing.T) {
	cl := startCluster(t, 3)
	c, err := redlock.New(cl.nodes)
	if err != nil {
		t.Fatal(err)
	}
	const attempts = 200
	for i := range attempts {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Microsecond)
		l, err := c.Lock(ctx, fmt.Sprintf("mid%d", i))
		cancel()
		if err == nil {
			_ = l.Unlock(context.Background())
		}
	}
	c.Close() // waits for the requests in flight
	left := 0
	for i := range attempts {
		for _, rdb := range cl.rdbs {
			left += int(rdb.Exists(context.Background(), lockKey(fmt.Sprintf("mid%d", i))).Val())
		}
	}
	if left > 0 {
		t.Fatalf("%d holds left on the nodes by %d cancelled attempts", left, attempts)
	}
}

// A Lock whose ctx ends while most nodes hang returns soon after, with
// ctx's error: it does not wait out the per-node timeout for the release of
// the attempt's holds. That release goes on in the background, and Close
// waits for it: the hold the answering node granted is gone by then.
func TestLockReturnsSoonAfterCtxWhileNodesHang(t *testing.T) {
	cl := startCluster(t, 3)
	hooks := make([]*timingHook, len(cl.rdbs))
	for i, rdb := range cl.rdbs {
		hooks[i] = &timingHook{}
		rdb.AddHook(hooks[i])
	}
	c, err := redlock.NewWithConfig(redlock.Config{Nodes: cl.nodes, NodeTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	mustLock(t, c, "warm").Unlock(ctx) // connected to every node
	cl.srvs[1].Pause(t)
	cl.srvs[2].Pause(t)
	lctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = c.Lock(lctx, "job")
	late := time.Since(deadlineOf(lctx))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock = %v, want context.DeadlineExceeded", err)
	}
	// The bug waited the per-node timeout (2 s) for the hung nodes.
	if late > 500*time.Millisecond {
		t.Errorf("Lock returned %v after its ctx ended, with two of three nodes hung", late.Round(time.Millisecond))
	}
	c.Close()
	closed := time.Now()
	// Read through a client of its own: the hooks time the Locker's
	// requests only, each of which Close waited for, so none ended after it.
	if n := cl.srvs[0].Client(t).Exists(ctx, lockKey("job")).Val(); n != 0 {
		t.Error("node 0 still holds the attempt's grant after Close")
	}
	for i, h := range hooks {
		if d := h.lastEnd().Sub(closed); d > 0 {
			t.Errorf("node %d: a request was in flight %v after Close returned", i, d.Round(time.Millisecond))
		}
	}
}

// deadlineOf is ctx's deadline; ctx must have one.
func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// A release to a node goes after the acquire there, however long that
// acquire is on its way: a node client without ContextTimeoutEnabled whose
// ReadTimeout is 30 s waits that long for it, well past the per-node
// timeouts and the wait of a caller that gave up. Sent first, the release
// would find nothing, and the acquire, reaching the node after it, would
// leave a hold nobody owns for the whole lease. Both releases wait: a
// failed attempt's (its caller cancelled while blocked), and an Unlock's
// of a lock the other nodes granted.
func TestReleaseGoesAfterItsSlowAcquire(t *testing.T) {
	for _, tc := range []struct {
		name    string
		blocked bool // another owner holds nodes 0 and 1: the attempt fails
	}{
		{"FailedAttempt", true},
		{"Unlock", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := startCluster(t, 3)
			acquireSHA, releaseSHA := scriptSHA(t, "acquire"), scriptSHA(t, "release")
			held := make(chan struct{})
			delayed := testutil.NewDelayedWrites(held)
			slow := redis.NewClient(&redis.Options{
				Addr: cl.srvs[2].Addr(), ReadTimeout: 30 * time.Second, MaxRetries: -1, DialerRetries: 1,
				Dialer: delayed.Dial,
			})
			t.Cleanup(func() { slow.Close() })
			released := make(chan struct{}, 1)
			slow.AddHook(&scriptDone{sha: releaseSHA, key: lockKey("job"), done: released})
			c, err := redlock.New([]redis.UniversalClient{cl.nodes[0], cl.nodes[1], slow})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			ctx := context.Background()
			mustLock(t, c, "warm").Unlock(ctx) // connected to every node
			cl.cacheScripts(t)
			if tc.blocked {
				for _, rdb := range cl.rdbs[:2] {
					rdb.HSet(ctx, lockKey("job"), "x", 1, ":at", 0)
					rdb.PExpire(ctx, lockKey("job"), time.Minute)
				}
			}

			delayed.Match.Store(&acquireSHA)
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				l, err := c.Lock(wctx, "job", dlock.WithTTL(30*time.Second))
				if err == nil {
					err = l.Unlock(ctx)
				}
				errc <- err
			}()
			testutil.Receive(t, delayed.Reached, 5*time.Second, "node 2's acquire to be delayed")
			if tc.blocked {
				cancel()
			}
			err = testutil.Receive(t, errc, 5*time.Second, "the Lock call")
			if tc.blocked && !errors.Is(err, context.Canceled) {
				t.Fatalf("Lock cancelled while blocked = %v, want Canceled", err)
			} else if !tc.blocked && err != nil {
				t.Fatalf("Lock and Unlock = %v", err)
			}
			// The acquire arrives once the release has stopped waiting for
			// it, if it does (every timeout of the release is a second at
			// most): then the release has gone first.
			select {
			case <-released:
			case <-time.After(3 * time.Second):
			}
			close(held)
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if tokens := cl.rdbs[2].HKeys(ctx, lockKey("job")).Val(); len(tokens) > 0 {
				pttl := cl.rdbs[2].PTTL(ctx, lockKey("job")).Val()
				t.Errorf("node 2 holds %q for %v once the delayed acquire arrived: a hold nobody owns", tokens, pttl)
			}
		})
	}
}

// scriptSHA is the SHA1 of the Redlock script lua/name.lua, as EVALSHA
// sends it.
func scriptSHA(t *testing.T, name string) string {
	t.Helper()
	src, err := os.ReadFile("lua/" + name + ".lua")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(src)
	return hex.EncodeToString(sum[:])
}

// scriptDone signals done (without blocking) each time a call of the
// script sha on key returns.
type scriptDone struct {
	testutil.PassHook
	sha, key string
	done     chan struct{}
}

func (h *scriptDone) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if a := cmd.Args(); len(a) > 3 && a[0] == "evalsha" && a[1] == h.sha && a[3] == h.key {
			select {
			case h.done <- struct{}{}:
			default:
			}
		}
		return err
	}
}
