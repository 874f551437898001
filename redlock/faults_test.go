package redlock_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
	"github.com/dlock-go/dlock/redlock"
)

type workerCmd = exec.Cmd

// startWorker runs this test binary as a separate process contending for
// the lock "counter" n times. It is killed when the test ends, if the test
// has not waited for it.
func startWorker(t *testing.T, cl *cluster, resource string, n int) *workerCmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=counter",
		"REDLOCK_TEST_NODES="+cl.addrs(),
		"REDLOCK_TEST_RESOURCE="+resource,
		"REDLOCK_TEST_N="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	testutil.StartProcess(t, cmd)
	return cmd
}

func TestHolderKeepsLockWithTwoNodesKilled(t *testing.T) {
	cl := startCluster(t, 5)
	holder, other := cl.locker(t), cl.patientLocker(t)
	ctx := context.Background()
	const lease = 600 * time.Millisecond
	l := lockEveryNode(t, cl, holder, "job", dlock.WithTTL(lease))
	cl.srvs[0].Kill(t)
	cl.srvs[4].Kill(t)
	// Renewals every lease/3 keep going on the three nodes left.
	select {
	case <-l.Done():
		t.Fatalf("lock lost with 3 of 5 nodes up: %v", context.Cause(l.Context()))
	case <-time.After(3 * lease): // an observation window, not synchronization
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl <= 0 {
		t.Errorf("TTL() = %v, %v", ttl, err)
	}
	_, err := other.TryLock(ctx, "job")
	var re *redlock.Error
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.As(err, &re) || re.Refused != 3 || re.Unreachable != 2 {
		t.Fatalf("TryLock = %v, want ErrNotObtained with 3 held elsewhere and 2 unreachable", err)
	}
	t.Logf("TryLock of a held lock with 2 nodes down: %v", err)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := mustLock(t, other, "job")
	if l2.Fence() <= l.Fence() {
		t.Errorf("fence %d after %d", l2.Fence(), l.Fence())
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMajorityDown(t *testing.T) {
	cl := startCluster(t, 5)
	holder, other := cl.locker(t), cl.patientLocker(t)
	ctx := context.Background()
	// Long enough that a quarter of it covers a loaded machine's late
	// wake-up of the watchdog (a 400 ms lease once missed it by 164 ms).
	const lease = time.Second
	l := mustLock(t, holder, "job", dlock.WithTTL(lease))
	for _, i := range []int{0, 2, 4} {
		cl.srvs[i].Kill(t)
	}
	// A renewal that reached a majority before the last node died sets
	// the deadline at most a lease (less the drift) after that.
	killed := time.Now()
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("holder not told that it lost the lock")
	}
	// The slack is for the watchdog to be woken on a loaded machine.
	if d := time.Since(killed); d > lease+lease/4 {
		t.Errorf("holder told %v after the nodes died, want within the %v lease", d, lease)
	}
	// The cause says why: the last renewal's error, the votes of a
	// renewal that no majority answered.
	var re *redlock.Error
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrLockLost) || !errors.Is(cause, redlock.ErrNoQuorum) ||
		!errors.As(cause, &re) || re.Op != "renew" || re.Unreachable != 3 {
		t.Errorf("cause = %v, want ErrLockLost with the renewal's ErrNoQuorum, 3 nodes unreachable", cause)
	}

	// Lock gives up, does not hang: after trying for 2 s (docs/safety.md),
	// then at most one backoff (RetryDelay << 4 = 800 ms) and an attempt
	// later, with slack for a loaded machine.
	const tryFor, backoff = 2 * time.Second, redlock.DefaultRetryDelay << 4
	for _, try := range []struct {
		call     func() error
		min, max time.Duration
	}{
		{func() error { _, err := other.TryLock(ctx, "job2"); return err }, 0, time.Second},
		{func() error { _, err := other.Lock(ctx, "job2"); return err }, tryFor, tryFor + backoff + time.Second},
	} {
		start := time.Now()
		err := try.call()
		if d := time.Since(start); d < try.min || d > try.max {
			t.Errorf("gave up after %v, want between %v and %v", d, try.min, try.max)
		}
		if !errors.Is(err, redlock.ErrNoQuorum) || errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("with 3 of 5 down: %v, want ErrNoQuorum", err)
		}
		var re *redlock.Error
		if !errors.As(err, &re) || re.Unreachable != 3 || re.Granted != 2 {
			t.Fatalf("votes = %+v, want 2 granted and 3 unreachable", re)
		}
		for i, ne := range re.Nodes {
			down := i%2 == 0
			if (ne != nil) != down {
				t.Errorf("node %d error = %v", i, ne)
			}
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("the nodes' connection errors are not in %v", err)
		}
		t.Logf("acquire with 3 of 5 down: %v", err)
	}
	for _, i := range []int{1, 3} {
		if cl.rdbs[i].Exists(ctx, lockKey("job2")).Val() != 0 {
			t.Errorf("node %d kept the failed attempt's hold", i)
		}
	}
}

func TestFencesIncreaseWhileNodesComeAndGo(t *testing.T) {
	cl := startCluster(t, 5)
	clients := []*dlock.Client{cl.locker(t), cl.locker(t)}
	ctx := context.Background()
	// Nodes go down and come back empty (no persistence), never more than
	// two at a time, between holders.
	steps := [][]int{{}, {0}, {0, 1}, {1}, {1, 2}, {2}, {2, 3}, {3}, {3, 4}, {4}, {4, 0}, {0}, {}}
	var last uint64
	for s, down := range steps {
		isDown := map[int]bool{}
		for _, i := range down {
			isDown[i] = true
		}
		for i, srv := range cl.srvs {
			switch {
			case isDown[i] && srv.Running():
				srv.Kill(t)
			case !isDown[i] && !srv.Running():
				srv.Restart(t)
			}
		}
		l := mustLock(t, clients[s%2], "fenced", dlock.WithTTL(time.Second))
		if l.Fence() <= last {
			t.Errorf("step %d (nodes %v down): fence %d after %d", s, down, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("step %d: %v", s, err)
		}
	}
}

func TestFenceCarriedByTheNodeMajoritiesShare(t *testing.T) {
	cl := startCluster(t, 5)
	c := cl.locker(t)
	ctx := context.Background()
	// Put node 0's counter far ahead of every clock, so that only the
	// counters, not the clocks, can make the next fences larger.
	ahead := uint64(time.Now().Add(24 * time.Hour).UnixMicro())
	cl.rdbs[0].Set(ctx, lockKey("k")+":fence", ahead, 0)
	cl.srvs[3].Kill(t)
	cl.srvs[4].Kill(t)
	a := mustLock(t, c, "k", dlock.WithTTL(time.Second)) // granted by nodes 0, 1, 2
	if a.Fence() != ahead+1 {
		t.Fatalf("fence %d, want %d (node 0's counter + 1)", a.Fence(), ahead+1)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The next majority, 2-3-4, shares only node 2 with the last one.
	cl.srvs[0].Kill(t)
	cl.srvs[1].Kill(t)
	cl.srvs[3].Restart(t)
	cl.srvs[4].Restart(t)
	b := mustLock(t, c, "k", dlock.WithTTL(time.Second))
	if b.Fence() <= a.Fence() {
		t.Errorf("fence %d after %d: the shared node did not carry the counter", b.Fence(), a.Fence())
	}
	_ = b.Unlock(ctx)
}

// lua/acquire.lua, lua/fence.lua: a fence counter past 2^53, where a Lua
// number (a double) no longer holds every integer, is read, returned and
// compared exactly: the next fence is the counter + 1, stored, and the one
// after it one more. Read as a double, the counter came back rounded down,
// the fence computed from it was no larger than the counter, the nodes
// refused to store it, and the lock could never be taken again. A counter
// with no int64 after it is not a fence counter: WRONGTYPE, at once.
func TestFencePastTwoToThe53IsExact(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.patientLocker(t)
	ctx := context.Background()
	const counter = uint64(1)<<53 + 1
	for _, rdb := range cl.rdbs {
		rdb.Set(ctx, lockKey("k")+":fence", strconv.FormatUint(counter, 10), 0)
	}
	for want := counter + 1; want <= counter+2; want++ {
		l, err := c.TryLock(ctx, "k")
		if err != nil {
			t.Fatalf("TryLock with fence counters at %d = %v", want-1, err)
		}
		if l.Fence() != want {
			t.Errorf("fence %d, want %d", l.Fence(), want)
		}
		// Lock returns once a majority stored the fence.
		var stored []string
		n := 0
		for _, rdb := range cl.rdbs {
			v := rdb.Get(ctx, lockKey("k")+":fence").Val()
			stored = append(stored, v)
			if v == strconv.FormatUint(want, 10) {
				n++
			}
		}
		if n < 2 {
			t.Errorf("fence counters %v, want %d on a majority", stored, want)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}

	for _, rdb := range cl.rdbs {
		rdb.Set(ctx, lockKey("k")+":fence", "9223372036854775807", 0)
	}
	tryAndLockAreWrongType(t, c, "k", "with fence counters at 2^63 - 1")
}

// The last fence, 2^63 - 1, is handed out and stored; the counters then
// have no int64 after them, and the next acquisition is refused as
// WRONGTYPE, not granted a fence that wraps around or goes back.
func TestLastFenceIsHandedOutThenRefused(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.patientLocker(t)
	ctx := context.Background()
	const last = uint64(1)<<63 - 1
	for _, rdb := range cl.rdbs {
		rdb.Set(ctx, lockKey("k")+":fence", strconv.FormatUint(last-1, 10), 0)
	}
	l, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatalf("TryLock with fence counters at 2^63 - 2 = %v", err)
	}
	if l.Fence() != last {
		t.Errorf("fence %d, want %d", l.Fence(), last)
	}
	// Stored on every node: the late one's store follows Lock's return.
	waitUntil(t, 5*time.Second, "the fence stored on every node", func() bool {
		for _, rdb := range cl.rdbs {
			if rdb.Get(ctx, lockKey("k")+":fence").Val() != strconv.FormatUint(last, 10) {
				return false
			}
		}
		return true
	})
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	tryAndLockAreWrongType(t, c, "k", "once the fence 2^63 - 1 was handed out")
	for i, rdb := range cl.rdbs {
		if n := rdb.Exists(ctx, lockKey("k")).Val(); n != 0 {
			t.Errorf("node %d holds the lock after the refused acquisitions", i)
		}
	}
}

// TestRestartedEmptyNodeAndFencing is the known Redlock hole: a node that
// restarts empty while a lock is held lets a second client take a majority
// while the first still believes it holds the lock. Fencing keeps the
// protected resource consistent anyway.
func TestRestartedEmptyNodeAndFencing(t *testing.T) {
	cl := startCluster(t, 5)
	ca, cb := cl.locker(t), cl.locker(t)
	ctx := context.Background()
	cl.srvs[3].Kill(t)
	cl.srvs[4].Kill(t)
	a := mustLock(t, ca, "stock:7", dlock.WithTTL(10*time.Second))
	if got := cl.holders(t, "stock:7", a.Token()); len(got) != 3 {
		t.Fatalf("A holds nodes %v, want 0-2", got)
	}
	cl.srvs[3].Restart(t)
	cl.srvs[4].Restart(t)
	cl.srvs[2].Kill(t)
	cl.srvs[2].Restart(t) // no persistence, no delay: A's hold there is gone

	// Lock, not TryLock: go-redis may need a moment to reconnect to node 2.
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	b, err := cb.Lock(lctx, "stock:7", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("B could not take nodes 2-4: %v", err)
	}
	defer b.Unlock(ctx)
	if a.Context().Err() == nil {
		t.Log("as expected without delayed restarts, A and B both believe they hold the lock")
	}
	if b.Fence() <= a.Fence() {
		t.Fatalf("B's fence %d is not above A's %d", b.Fence(), a.Fence())
	}
	var res fencedResource
	if err := res.write(b.Fence(), "B"); err != nil {
		t.Fatal(err)
	}
	if err := res.write(a.Fence(), "A"); err == nil {
		t.Error("the resource accepted A's late write after B's")
	}
	// A's next renewal sees that a majority is gone for good.
	if err := a.Extend(ctx, 10*time.Second); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("A's Extend = %v, want ErrLockLost", err)
	}
	if !errors.Is(context.Cause(a.Context()), dlock.ErrLockLost) {
		t.Errorf("A's cause = %v", context.Cause(a.Context()))
	}
}

// TestDelayedRestartKeepsExclusion: a node that stays down for longer than
// the lease comes back only after the holder that needed it was told it
// lost the lock.
func TestDelayedRestartKeepsExclusion(t *testing.T) {
	cl := startCluster(t, 5)
	ca, cb := cl.locker(t), cl.locker(t)
	const lease = 400 * time.Millisecond
	cl.srvs[3].Kill(t)
	cl.srvs[4].Kill(t)
	a := mustLock(t, ca, "job", dlock.WithTTL(lease)) // nodes 0-2
	cl.srvs[3].Restart(t)
	cl.srvs[4].Restart(t)
	cl.srvs[2].Kill(t)
	select {
	case <-a.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("A kept trusting a lock held on 2 of 5 nodes")
	}
	if !errors.Is(context.Cause(a.Context()), dlock.ErrLockLost) {
		t.Errorf("A's cause = %v", context.Cause(a.Context()))
	}
	// Only now, after the lease, the operator restarts the node (empty).
	cl.srvs[2].Restart(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := cb.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if b.Fence() <= a.Fence() {
		t.Errorf("fence %d after %d", b.Fence(), a.Fence())
	}
	_ = b.Unlock(context.Background())
}

// TestPersistentNodeKeepsLockAcrossRestart: with AOF and fsync on every
// write, a node that crashes and restarts still has the holder's lock.
func TestPersistentNodeKeepsLockAcrossRestart(t *testing.T) {
	cl := startCluster(t, 5, func(i int) []redistest.Option {
		return []redistest.Option{redistest.WithConfig("appendonly", "yes"), redistest.WithConfig("appendfsync", "always")}
	})
	ca := cl.locker(t)
	// B's TryLock is one attempt, its first on the restarted nodes: a new
	// connection, and NOSCRIPT then EVAL. Time is not the subject here, so
	// it waits longer than the default lease/10 (at most 50 ms) for each,
	// lest a loaded machine make it report them unreachable.
	cb := cl.patientLocker(t)
	ctx := context.Background()
	cl.srvs[3].Kill(t)
	cl.srvs[4].Kill(t)
	a := mustLock(t, ca, "job", dlock.WithTTL(10*time.Second))
	defer a.Unlock(ctx)
	cl.srvs[3].Restart(t)
	cl.srvs[4].Restart(t)
	cl.srvs[2].Kill(t) // a crash: no shutdown
	cl.srvs[2].Restart(t)
	if got := cl.holders(t, "job", a.Token()); len(got) != 3 {
		t.Fatalf("after the restart A holds nodes %v, want 0-2", got)
	}
	if _, err := cb.TryLock(ctx, "job"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("B's TryLock = %v, want ErrNotObtained", err)
	}
	if err := a.Extend(ctx, 10*time.Second); err != nil {
		t.Errorf("A's Extend = %v", err)
	}
}

func TestHungNodeDoesNotSlowTheLock(t *testing.T) {
	cl := startCluster(t, 5)
	c, patient := cl.locker(t), cl.patientLocker(t)
	ctx := context.Background()
	mustLock(t, c, "warm").Unlock(ctx) // connect to every node first
	mustLock(t, patient, "warm").Unlock(ctx)
	cl.srvs[2].Pause(t)
	fastest := time.Hour
	for range 10 { // the best of several, for a loaded machine
		start := time.Now()
		l, err := patient.TryLock(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		fastest = min(fastest, time.Since(start))
	}
	// The majority answers in about a round trip each way; the per-node
	// timeout (a second) is not waited for.
	if fastest > 500*time.Millisecond {
		t.Errorf("TryLock+Unlock took %v at best with a hung node", fastest)
	}
	l := mustLock(t, c, "job", dlock.WithTTL(600*time.Millisecond))
	select {
	case <-l.Done():
		t.Fatalf("lock lost with one hung node: %v", context.Cause(l.Context()))
	case <-time.After(800 * time.Millisecond): // renewals go on without it
	}
	_ = l.Unlock(ctx)
}

// TTL returns once a majority answered: a hung minority does not hold it
// for the per-node timeout, during which the leases it read would age.
func TestHungNodeDoesNotSlowTTL(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.locker(t)
	ctx := context.Background()
	const lease = 30 * time.Second // no renewal during the test
	l := lockEveryNode(t, cl, c, "job", dlock.WithTTL(lease))
	cl.srvs[2].Pause(t)
	before := time.Now()
	ttl, err := l.TTL(ctx)
	took := time.Since(before)
	if err != nil {
		t.Fatal(err)
	}
	// The bug waited for the hung node up to the per-node timeout of
	// reads (min(lease/4, 1 s)).
	if took > 500*time.Millisecond {
		t.Errorf("TTL took %v with one node of three hung", took.Round(time.Millisecond))
	}
	if ttl <= 0 || ttl > lease {
		t.Errorf("TTL = %v, want in (0, %v]", ttl, lease)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TTL is how long a majority keeps the lock: the quorum-th longest of the
// nodes' leases. Nodes with a shorter lease answering first (an Extend
// that reached only a majority, its others still on their way) must not
// make it the shortest lease of the first majority to answer, when the
// others answer soon after.
func TestTTLIsTheMajorityLeaseWhenShorterLeasesAnswerFirst(t *testing.T) {
	cl := startCluster(t, 5)
	hooks := make([]*slowScripts, len(cl.rdbs))
	for i, rdb := range cl.rdbs {
		hooks[i] = &slowScripts{delay: 10 * time.Millisecond}
		rdb.AddHook(hooks[i])
	}
	c := cl.locker(t)
	ctx := context.Background()
	l := lockEveryNode(t, cl, c, "job", dlock.WithTTL(30*time.Second))
	// Nodes 0-2, the majority, have the longer lease, and answer a little
	// later than nodes 3 and 4.
	for i := range 3 {
		if err := cl.rdbs[i].PExpire(ctx, lockKey("job"), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		hooks[i].armed.Store(true)
	}
	ttl, err := l.TTL(ctx)
	for _, h := range hooks {
		h.armed.Store(false)
	}
	if err != nil {
		t.Fatal(err)
	}
	if ttl < 50*time.Second {
		t.Errorf("TTL = %v with 3 of 5 nodes holding the lock for a minute, want about a minute", ttl)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A hung node is reported as ErrNodeTimeout however the timeout shows:
// go-redis reports a deadline it set on the connection (here its
// ReadTimeout, shorter than the per-node timeout) as a net timeout.
func TestHungNodesAreNodeTimeouts(t *testing.T) {
	cl := startCluster(t, 3)
	var nodes []redis.UniversalClient
	for _, srv := range cl.srvs {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 50 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
		t.Cleanup(func() { rdb.Close() })
		nodes = append(nodes, rdb)
	}
	c, err := redlock.NewWithConfig(redlock.Config{Nodes: nodes, NodeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	mustLock(t, c, "warm").Unlock(ctx) // connect to every node first
	cl.srvs[1].Pause(t)
	cl.srvs[2].Pause(t)
	_, err = c.TryLock(ctx, "job", dlock.WithTTL(3*time.Second))
	if !errors.Is(err, redlock.ErrNoQuorum) || !errors.Is(err, redlock.ErrNodeTimeout) {
		t.Errorf("TryLock with two hung nodes = %v, want ErrNoQuorum and ErrNodeTimeout", err)
	}
}

func TestHungNodeWhileWaiting(t *testing.T) {
	cl := startCluster(t, 5)
	holder := cl.locker(t)
	waiter, err := redlock.New(cl.waiterNodes(t))
	if err != nil {
		t.Fatal(err)
	}
	// On the four nodes left too, or the waiter could take some of them
	// and the holder could not release with node 2 hung.
	l := lockEveryNode(t, cl, holder, "busy")
	otherSubscriber(t, lockKey("busy")+":wake", cl.rdbs[0])
	cl.srvs[2].Pause(t) // the waiter's pub/sub connection to it hangs
	errc := make(chan error, 1)
	go func() {
		l2, err := waiter.Lock(context.Background(), "busy")
		if err == nil {
			err = l2.Unlock(context.Background())
		}
		errc <- err
	}()
	waitUntil(t, 5*time.Second, "the waiter to subscribe", waiterSubscribed(context.Background(), cl.rdbs[0], 1))
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the lock with one node hung")
	}
	start := time.Now()
	waiter.Close() // waits for its calls to the hung node, up to their timeouts
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v with a hung node", d)
	}
}

// WithDegradedMode(LocalFallback) gives an in-process lock when no majority
// can be reached, whether the nodes refuse connections or hang (their
// ErrNodeTimeout is a timeout, as go-redis's own are).
func TestDegradedModeWithoutMajority(t *testing.T) {
	for _, hang := range []bool{false, true} {
		t.Run(map[bool]string{false: "dead", true: "hung"}[hang], func(t *testing.T) {
			cl := startCluster(t, 3)
			c := cl.locker(t, dlock.WithDegradedMode(dlock.LocalFallback))
			ctx := context.Background()
			mustLock(t, c, "warm").Unlock(ctx) // connected to every node
			for _, srv := range cl.srvs[1:] {
				if hang {
					srv.Pause(t)
				} else {
					srv.Kill(t)
				}
			}
			l, err := c.TryLock(ctx, "job")
			if err != nil {
				t.Fatalf("TryLock with 2 of 3 nodes down = %v, want a degraded lock", err)
			}
			if !l.Degraded() {
				t.Errorf("lock not degraded")
			}
			_ = l.Unlock(ctx)
		})
	}
}

// WithDegradedMode(LocalFallback) degrades only when a majority could not
// be reached: nodes down, hung, or answering that they cannot serve for now
// (OOM). A node that answers with an error that will not pass (NOPERM: its
// ACL user may not run scripts) or says that another owner holds the lock
// rules the in-process lock out, whatever the order of the nodes; the error
// names every cause.
func TestDegradedModeOnlyWhenUnreachable(t *testing.T) {
	const (
		dead = iota
		hung
		oom
		noperm
		held // another owner holds the lock there
		fine
	)
	for _, tc := range []struct {
		name     string
		nodes    [5]int
		degraded bool
		want     []error
	}{
		{"dead and NOPERM", [5]int{dead, dead, noperm, fine, fine}, false, []error{syscall.ECONNREFUSED}},
		{"hung and NOPERM", [5]int{hung, hung, noperm, fine, fine}, false, []error{redlock.ErrNodeTimeout}},
		{"OOM before NOPERM", [5]int{oom, hung, noperm, fine, fine}, false, []error{redlock.ErrNodeTimeout}},
		{"hung and held elsewhere", [5]int{hung, hung, hung, held, held}, false, []error{redlock.ErrNodeTimeout}},
		{"dead, hung and OOM", [5]int{dead, hung, oom, fine, fine}, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := startCluster(t, 5)
			ctx := context.Background()
			nodes := cl.lockerNodes(t, func(int) string { return "allchannels" })
			c, err := redlock.NewWithConfig(redlock.Config{Nodes: nodes, NodeTimeout: time.Second}, dlock.WithDegradedMode(dlock.LocalFallback))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			mustLock(t, c, "warm").Unlock(ctx) // connected to every node
			if slices.Contains(tc.nodes[:], held) {
				lockEveryNode(t, cl, cl.locker(t), "job")
			}
			for i, s := range tc.nodes {
				admin := cl.srvs[i].Client(t)
				switch s {
				case dead:
					cl.srvs[i].Kill(t)
				case hung:
					cl.srvs[i].Pause(t)
				case oom:
					if err := admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
						t.Fatal(err)
					}
				case noperm:
					if err := admin.Do(ctx, "ACL", "SETUSER", "locker", "-@scripting").Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			l, err := c.TryLock(ctx, "job")
			if tc.degraded {
				if err != nil || !l.Degraded() {
					t.Fatalf("TryLock = %v, %v; want a degraded lock", l, err)
				}
				_ = l.Unlock(ctx)
				return
			}
			if err == nil {
				t.Fatalf("TryLock = a lock (degraded: %v); want ErrNoQuorum", l.Degraded())
			}
			for _, e := range append(tc.want, redlock.ErrNoQuorum) {
				if !errors.Is(err, e) {
					t.Errorf("TryLock = %v; want it to match %v", err, e)
				}
			}
			var re *redlock.Error
			if !errors.As(err, &re) {
				t.Fatalf("TryLock = %v, want a *redlock.Error", err)
			}
			for i, s := range tc.nodes {
				var rerr redis.Error
				if nope := errors.As(re.Nodes[i], &rerr) && strings.HasPrefix(rerr.Error(), "NOPERM"); nope != (s == noperm) {
					t.Errorf("node %d: error %v", i, re.Nodes[i])
				}
			}
		})
	}
}

// docs/safety.md (Redlock, Exclusion): "A holds nodes 1-3 of 5; node 3
// crashes and restarts empty at once; B takes nodes 3-5. Both believe they
// hold the lock until A's next renewal (up to lease/3 later, lease/2 after
// one that went early) finds that it lost the majority" (A's is its only
// lock: its renewals never go early); and (The algorithm) "A renewal never
// gives a node back a lock it lost". TestRestartedEmptyNodeAndFencing ends the window
// with an Extend and a 10 s lease, so neither the watchdog's bound nor what
// the renewal leaves on the nodes is checked.
func TestRestartedEmptyNodeLossKnownAtNextRenewal(t *testing.T) {
	cl := startCluster(t, 5)
	ca, cb := cl.locker(t), cl.patientLocker(t)
	ctx := context.Background()
	const lease = 3 * time.Second // renewed every second; validity ~2.97 s
	cl.srvs[3].Kill(t)
	cl.srvs[4].Kill(t)
	a := mustLock(t, ca, "hole", dlock.WithTTL(lease))
	// Lock returns on a majority; the third node follows.
	waitUntil(t, 5*time.Second, "A's lock on nodes 0-2", func() bool { return len(cl.holders(t, "hole", a.Token())) == 3 })
	cl.srvs[3].Restart(t)
	cl.srvs[4].Restart(t)
	cl.srvs[2].Kill(t)
	cl.srvs[2].Restart(t) // empty: A's hold there is gone
	restarted := time.Now()
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	b, err := cb.Lock(lctx, "hole", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("B could not take nodes 2-4: %v", err)
	}
	defer b.Unlock(ctx)
	select {
	case <-a.Done():
	case <-time.After(lease):
		t.Fatal("A not told within its lease that it lost the majority")
	}
	late := time.Since(restarted)
	cause := context.Cause(a.Context())
	if !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("A's cause = %v", cause)
	}
	if strings.Contains(cause.Error(), "ran out") {
		t.Errorf("A lost at its deadline (%v), not by its next renewal: %v", late, cause)
	}
	if limit := lease/3 + lease/10 + 300*time.Millisecond; late > limit {
		t.Errorf("A told %v after node 2 restarted, want within lease/3 (%v, limit %v)", late, lease/3, limit)
	}
	// A's renewals found the token gone on nodes 2-4 and put it back on
	// none of them.
	for _, i := range cl.holders(t, "hole", a.Token()) {
		if i >= 2 {
			t.Errorf("A's token is on node %d, which had lost it", i)
		}
	}
	if got := cl.holders(t, "hole", b.Token()); len(got) < 3 {
		t.Errorf("B holds nodes %v, want a majority", got)
	}
}

// timingHook records when each command to a node ended.
type timingHook struct {
	testutil.PassHook
	mu   sync.Mutex
	ends []time.Time
}

func (h *timingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.mu.Lock()
		h.ends = append(h.ends, time.Now())
		h.mu.Unlock()
		return err
	}
}

func (h *timingHook) lastEnd() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var last time.Time
	for _, e := range h.ends {
		if e.After(last) {
			last = e
		}
	}
	return last
}

// Close waits for the requests in flight: also those of an attempt that was
// under way when Close was called (its release after it failed), not only
// those of the fanout that was running at that moment.
func TestCloseWaitsForTheAttemptUnderWay(t *testing.T) {
	cl := startCluster(t, 3)
	hooks := make([]*timingHook, len(cl.rdbs))
	for i, rdb := range cl.rdbs {
		hooks[i] = &timingHook{}
		rdb.AddHook(hooks[i])
	}
	c, err := redlock.NewWithConfig(redlock.Config{Nodes: cl.nodes, NodeTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	mustLock(t, c, "warm").Unlock(ctx) // connected to every node
	// Node 1 is held by another owner, node 2 hangs: the attempt gets node
	// 0 only, waits for node 2 up to the per-node timeout, and then
	// releases on nodes 0 and 2.
	cl.rdbs[1].HSet(ctx, lockKey("job"), "x", 1, ":at", 0)
	cl.rdbs[1].PExpire(ctx, lockKey("job"), 10*time.Second)
	cl.srvs[2].Pause(t)
	errc := make(chan error, 1)
	go func() {
		_, err := c.TryLock(ctx, "job")
		errc <- err
	}()
	waitUntil(t, 5*time.Second, "the attempt to get node 0", func() bool {
		return cl.rdbs[0].Exists(ctx, lockKey("job")).Val() == 1
	})
	c.Close()
	closed := time.Now()
	select {
	case <-errc:
	case <-time.After(5 * time.Second):
		t.Fatal("TryLock did not return")
	}
	for i, h := range hooks {
		if d := h.lastEnd().Sub(closed); d > 100*time.Millisecond {
			t.Errorf("node %d: a request was in flight %v after Close returned", i, d.Round(time.Millisecond))
		}
	}
}

// A node that refuses a waiter's SUBSCRIBE with an error reply (an ACL
// without the channel, while an operator edits it) keeps the connection:
// go-redis does not reconnect and resubscribe, so the subscription must be
// tried again, or that node's wake-ups are lost for the Client's life.
func TestSubscriptionRecoversFromErrorReply(t *testing.T) {
	cl := startCluster(t, 3)
	ctx := context.Background()
	channel := lockKey("job") + ":wake"
	nodes := cl.lockerNodes(t, func(i int) string {
		if i == 0 {
			return "resetchannels" // node 0 refuses every channel, for now
		}
		return "allchannels"
	})
	holder := cl.locker(t)
	waiter, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	l := lockEveryNode(t, cl, holder, "job")
	otherSubscriber(t, channel, cl.rdbs...)
	got := make(chan error, 1) // the goroutine never blocks, even after a failed test
	go func() {
		l2, err := waiter.Lock(ctx, "job")
		if err == nil {
			err = l2.Unlock(ctx)
		}
		got <- err
	}()
	subscribed := func(i int) bool { return waiterSubscribed(ctx, cl.rdbs[i], 1)() }
	waitUntil(t, 5*time.Second, "node 0 to refuse the waiter's SUBSCRIBE", func() bool { return testutil.ACLRefused(ctx, cl.rdbs[0], channel) })
	waitUntil(t, 5*time.Second, "the waiter to subscribe on nodes 1 and 2", func() bool { return subscribed(1) && subscribed(2) })
	if err := cl.rdbs[0].Do(ctx, "ACL", "SETUSER", "locker", "allchannels").Err(); err != nil {
		t.Fatal(err)
	}
	// Retried within the longest backoff (1 s).
	waitUntil(t, 3*time.Second, "the waiter to subscribe on node 0 once allowed", waiterSubscribed(ctx, cl.rdbs[0], 1))
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Receive(t, got, 5*time.Second, "the waiter to get the released lock"); err != nil {
		t.Fatal(err)
	}
}

// A channel that the nodes' ACL still refuses must not keep another from
// its subscription: Redis refuses a SUBSCRIBE of several channels whole if
// it denies one of them, so subscribing every channel again in one command
// would leave the allowed one unsubscribed for good, and its waiter would
// sleep until the holder's lease ran out instead of being woken by the
// release.
func TestSubscriptionRecoversBesideAChannelStillRefused(t *testing.T) {
	cl := startCluster(t, 3)
	ctx := context.Background()
	job, other := lockKey("job")+":wake", lockKey("other")+":wake"
	nodes := cl.lockerNodes(t, func(int) string { return "resetchannels" }) // no channel at all, for now
	holder := cl.locker(t)
	waiter, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	// Leases far longer than the test waits: only a wake-up gets the waiter
	// the lock in time.
	lj := lockEveryNode(t, cl, holder, "job", dlock.WithTTL(30*time.Second))
	lo := lockEveryNode(t, cl, holder, "other", dlock.WithTTL(30*time.Second))
	defer func() { _ = lo.Unlock(ctx) }()
	otherSubscriber(t, job, cl.rdbs...)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	refused := func(channel string) func() bool {
		return func() bool {
			for _, rdb := range cl.rdbs {
				if !testutil.ACLRefused(ctx, rdb, channel) {
					return false
				}
			}
			return true
		}
	}
	got := make(chan error, 2) // the goroutines never block, even after a failed test
	wait := func(key string) {
		go func() {
			l, err := waiter.Lock(wctx, key)
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
	}
	wait("other")
	waitUntil(t, 5*time.Second, "every node to refuse the SUBSCRIBE of other's waiter", refused(other))
	wait("job")
	waitUntil(t, 5*time.Second, "every node to refuse the SUBSCRIBE of job's waiter", refused(job))
	// The operator allows job's channel; other's stays refused.
	for i, rdb := range cl.rdbs {
		if err := rdb.Do(ctx, "ACL", "SETUSER", "locker", "&"+job).Err(); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	// Retried within the longest backoff (1 s). The waiter's only channel
	// a node allows is job's.
	waitUntil(t, 5*time.Second, "the waiter to subscribe job's channel on a majority", func() bool {
		n := 0
		for _, rdb := range cl.rdbs {
			if waiterSubscribed(ctx, rdb, 1)() {
				n++
			}
		}
		return n >= 2
	})
	if err := lj.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Receive(t, got, 5*time.Second, "the waiter to be woken by the release of job"); err != nil {
		t.Fatal(err)
	}
}

// A channel that a node keeps refusing must not delay the wake-ups of the
// other channels on that node: only its SUBSCRIBE waits for the backoff
// before it is tried again, while the connection, still sound, is read on.
// Node 0 alone allows other's channel (nodes 1 and 2 allow none), so only
// its message can wake other's waiter before the holder's lease runs out.
func TestRefusedChannelDelaysNoOtherWakeUp(t *testing.T) {
	cl := startCluster(t, 3)
	ctx := context.Background()
	job, other := lockKey("job")+":wake", lockKey("other")+":wake"
	nodes := cl.lockerNodes(t, func(int) string { return "resetchannels" })
	if err := cl.rdbs[0].Do(ctx, "ACL", "SETUSER", "locker", "&"+other).Err(); err != nil {
		t.Fatal(err)
	}
	holder := cl.locker(t)
	// A patient per-node timeout: an attempt after the wake-up must not
	// fail on a loaded machine and back off.
	waiter, err := redlock.NewWithConfig(redlock.Config{Nodes: nodes, NodeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	// Leases far longer than the test waits: a waiter's own re-check comes
	// when they would run out, so only a wake-up gets it the lock in time.
	lj := lockEveryNode(t, cl, holder, "job", dlock.WithTTL(30*time.Second))
	defer func() { _ = lj.Unlock(ctx) }()
	lo := lockEveryNode(t, cl, holder, "other", dlock.WithTTL(30*time.Second))
	otherSubscriber(t, other, cl.rdbs[0])
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wait := func(key string) <-chan error {
		got := make(chan error, 1) // the goroutine never blocks, even after a failed test
		go func() {
			l, err := waiter.Lock(wctx, key)
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
		return got
	}
	// How many times node 0 refused job's channel (ACL LOG counts the
	// repeats of an entry).
	var refusals func() int64
	// other's waiter says how many refusals there had been when it got
	// the lock.
	gotOther := make(chan int64, 1)
	go func() {
		l, err := waiter.Lock(wctx, "other")
		if err != nil {
			t.Error(err)
			gotOther <- -1
			return
		}
		at := refusals()
		// Before the test hears of it: once it has, it returns and
		// closes the waiter's node clients.
		if err := l.Unlock(ctx); err != nil {
			t.Error(err)
		}
		gotOther <- at
	}()
	// Node 0 allows other's channel alone.
	waitUntil(t, 5*time.Second, "other's waiter to subscribe on node 0", waiterSubscribed(ctx, cl.rdbs[0], 1))
	wait("job")
	refusals = func() int64 { return testutil.ACLRefusals(ctx, cl.rdbs[0], job) }
	// The retries back off 50, 100, 200, 400 and 800 ms after the first
	// five refusals, then 1 s. Release just after the sixth or a later
	// one: job's retry is then a second away.
	waitUntil(t, 10*time.Second, "node 0 to refuse job's channel five times", func() bool { return refusals() >= 5 })
	n := refusals()
	waitUntil(t, 5*time.Second, "node 0 to refuse job's channel again", func() bool { return refusals() > n })
	if err := lo.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	last := refusals()
	// Node 0's message wakes other's waiter in a few milliseconds, before
	// job's channel is tried again (a second after the last refusal):
	// had the connection's reads waited for that retry, the wake-up
	// would come after another refusal.
	if at := testutil.Receive(t, gotOther, 5*time.Second, "other's waiter to get the lock"); at > last {
		t.Fatalf("other's waiter got the lock after %d more refusals of job's channel: woken only when the backoff was over", at-last)
	}
}

// hangFence holds back the fence script of key until its request's
// deadline: a node that granted the lock and then stopped answering.
type hangFence struct {
	testutil.PassHook
	key string
}

func (h *hangFence) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isFence(cmd, h.key) {
			return next(ctx, cmd)
		}
		<-ctx.Done()
		cmd.SetErr(ctx.Err())
		return ctx.Err()
	}
}

// An attempt whose majority granted the lock but did not answer when its
// fence was stored failed because too few nodes answered, not because the
// lock is held elsewhere: ErrNoQuorum, with those nodes unreachable.
func TestFenceNotAnsweredIsNoQuorum(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.patientLocker(t)
	ctx := context.Background()
	mustLock(t, c, "warm").Unlock(ctx) // connect to every node
	cl.cacheScripts(t)
	for _, i := range []int{1, 2} {
		cl.rdbs[i].AddHook(&hangFence{key: "job"})
	}
	_, err := c.TryLock(ctx, "job")
	var re *redlock.Error
	if !errors.As(err, &re) {
		t.Fatalf("TryLock = %v, want a *redlock.Error", err)
	}
	if !errors.Is(err, redlock.ErrNoQuorum) || errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("TryLock = %v, want ErrNoQuorum and not ErrNotObtained", err)
	}
	if !errors.Is(err, redlock.ErrNodeTimeout) {
		t.Errorf("TryLock = %v, want ErrNodeTimeout among the nodes' errors", err)
	}
	if re.Unreachable < 2 || re.Granted+re.Refused+re.Unreachable > 3 {
		t.Errorf("votes: %d granted, %d refused, %d unreachable; want at least 2 unreachable, at most 3 votes", re.Granted, re.Refused, re.Unreachable)
	}
}

// lossyHooks are the lost-reply hooks of a lossyLocker's nodes.
type lossyHooks []*testutil.LostReply

// lost is how many replies the hooks lost.
func (hs lossyHooks) lost() (n int) {
	for _, h := range hs {
		n += int(h.Lost.Load())
	}
	return n
}

// lossyLocker returns a Client on the cluster's nodes whose go-redis
// clients each lose the reply to the first call of the script at path:
// the node runs it, and go-redis (default MaxRetries) sends it again.
func (cl *cluster) lossyLocker(t *testing.T, path string) (*dlock.Client, lossyHooks) {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(src)
	var nodes []redis.UniversalClient
	var hooks lossyHooks
	for _, srv := range cl.srvs {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		h := &testutil.LostReply{Marker: []byte(hex.EncodeToString(sum[:]))}
		h.Left.Store(1)
		rdb.AddHook(h)
		t.Cleanup(func() { rdb.Close() })
		nodes = append(nodes, rdb)
		hooks = append(hooks, h)
	}
	c, err := redlock.NewWithConfig(redlock.Config{Nodes: nodes, NodeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, hooks
}

// A fence store that go-redis delivers twice (its reply was lost, and the
// client retried it, as acquire.lua expects client-side retries to do) is
// stored: the second delivery finds the counter at the fence it stored
// itself, which must not fail the acquisition.
func TestFenceStoreDeliveredTwice(t *testing.T) {
	cl := startCluster(t, 3)
	cl.cacheScripts(t)
	c, hooks := cl.lossyLocker(t, "lua/fence.lua")
	ctx := context.Background()
	l, err := c.TryLock(ctx, "fence-twice")
	lost := hooks.lost()
	if lost == 0 {
		t.Fatal("no fence reply was lost: the test did not test anything")
	}
	if err != nil {
		t.Fatalf("TryLock of a free lock, with %d fence replies lost and retried: %v", lost, err)
	}
	defer l.Unlock(ctx)
	if l.Fence() == 0 {
		t.Error("no fence")
	}
}

// fenceOrder makes the first node to get the fence of key lose the lock
// just before (as a node that restarted or evicted the key would), and
// holds back the others' fences until a release of key is sent, or for
// 300 ms at most: well within the per-node timeout of a second.
type fenceOrder struct {
	testutil.PassHook
	key      string
	first    *atomic.Bool
	released chan struct{}
	once     *atomic.Bool
}

func (h *fenceOrder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch {
		case isFence(cmd, h.key):
			if h.first.CompareAndSwap(false, true) {
				if err := next(ctx, redis.NewCmd(ctx, "del", lockKey(h.key))); err != nil {
					return err
				}
				return next(ctx, cmd)
			}
			select {
			case <-h.released:
			case <-time.After(300 * time.Millisecond):
			}
		case isRelease(cmd, h.key):
			if h.once.CompareAndSwap(false, true) {
				close(h.released)
			}
		}
		return next(ctx, cmd)
	}
}

// An attempt whose fence one granting node refused (it lost the lock)
// while the other granting node answered well within the per-node timeout
// did not fail for want of answers: the healthy node is not unreachable,
// did not time out, and the failure is not ErrNoQuorum.
func TestFenceRefusedIsNotNoQuorum(t *testing.T) {
	// Node 2's grant is held back, so that nodes 0 and 1 make the majority
	// and it is one of their fences that the node losing the lock refuses,
	// not the fence node 2 would get in the background once it granted.
	cl, gate, c := slowThirdNode(t, false)
	gate.armed.Store(true)
	defer close(gate.gate)
	ctx := context.Background()
	first, once := new(atomic.Bool), new(atomic.Bool)
	released := make(chan struct{})
	for _, rdb := range cl.rdbs[:2] {
		rdb.AddHook(&fenceOrder{key: "job", first: first, released: released, once: once})
	}
	_, err := c.TryLock(ctx, "job")
	var re *redlock.Error
	if !errors.As(err, &re) {
		t.Fatalf("TryLock = %v, want a *redlock.Error", err)
	}
	if !first.Load() {
		t.Fatal("no fence was stored: the test did not test anything")
	}
	if errors.Is(err, redlock.ErrNoQuorum) || !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("TryLock = %v, want ErrNotObtained, not ErrNoQuorum", err)
	}
	// At most the node the acquisition did not wait for (it had its
	// majority) is unreachable; not the granting node whose fence was
	// answered well within the per-node timeout.
	if re.Unreachable > 1 {
		t.Errorf("TryLock = %v: %d unreachable, want at most 1: a node that answered within the per-node timeout is reported as unreachable", err, re.Unreachable)
	}
}

// Close ends the Contexts of the locks it leaves held at once, before it
// waits for the requests still on their way to a hung node.
func TestCloseEndsLocksBeforeWaitingForAHungNode(t *testing.T) {
	cl := startCluster(t, 3)
	c, err := redlock.NewWithConfig(redlock.Config{Nodes: cl.nodes, NodeTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	held := mustLock(t, c, "held")
	cl.srvs[2].Pause(t)
	// Granted by nodes 0 and 1; its request to node 2 waits out the
	// per-node timeout, and Close waits for it.
	mustLock(t, c, "other")
	start, closed := closeInBackground(c)
	select {
	case <-held.Done():
	case <-closed:
		t.Fatal("Close returned before it ended the lock's Context")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the lock's Context ended %v after Close began, want at once (not after the hung node's timeout)", d.Round(time.Millisecond))
	}
	if !errors.Is(context.Cause(held.Context()), dlock.ErrClosed) {
		t.Errorf("cause = %v, want ErrClosed", context.Cause(held.Context()))
	}
	<-closed
}

// dlock.Client.Close waits 5 s at most in all if Redis does not answer,
// the backend's own shutdown included. A node client without
// ContextTimeoutEnabled and with no ReadTimeout never gives up on a request
// to a hung node: Redlock's Close waited for it for good.
func TestCloseBoundedWhenNodeRequestsNeverEnd(t *testing.T) {
	cl := startCluster(t, 3)
	var nodes []redis.UniversalClient
	for _, srv := range cl.srvs {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: -1, MaxRetries: -1, DialerRetries: 1})
		t.Cleanup(func() { rdb.Close() })
		nodes = append(nodes, rdb)
	}
	c, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	mustLock(t, c, "warm").Unlock(context.Background()) // connected to every node
	cl.srvs[2].Pause(t)
	// Granted by nodes 0 and 1; its request to node 2 never returns.
	mustLock(t, c, "job")
	start, closed := closeInBackground(c)
	select {
	case <-closed:
	case <-time.After(8 * time.Second):
		// Cleanup kills node 2, which ends the request and Close.
		t.Fatalf("Close still waiting after %v, want 5 s at most", time.Since(start).Round(time.Millisecond))
	}
	if d := time.Since(start); d > 6*time.Second {
		t.Errorf("Close took %v, want 5 s at most", d.Round(time.Millisecond))
	}
}

// stuckRetry is a RetryStrategy whose Backoff does not return until
// released is closed: the Lock call asking it stays under way, for
// dlock.Client.Close and for Redlock's own Close alike.
type stuckRetry struct{ entered, released chan struct{} }

func (r stuckRetry) Backoff(int) (time.Duration, bool) {
	close(r.entered)
	<-r.released
	return time.Millisecond, true
}

// dlock.Client.Close's 5 s bound counts the backend's own shutdown: a
// Lock call that does not end holds up Redlock's Close, which is given up
// on at the bound, and the wait for the Client's calls under way must not
// start a bound of its own after it.
func TestCloseBoundedWhenBackendCloseAndCallsHang(t *testing.T) {
	cl := startCluster(t, 3)
	c, err := redlock.New(cl.nodes)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, rdb := range cl.rdbs[:2] { // held by another owner on a majority
		rdb.HSet(ctx, lockKey("job"), "x", 1, ":at", 0)
		rdb.PExpire(ctx, lockKey("job"), time.Minute)
	}
	retry := stuckRetry{entered: make(chan struct{}), released: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Lock(ctx, "job", dlock.WithRetry(retry))
		errc <- err
	}()
	testutil.Receive(t, retry.entered, 5*time.Second, "the Lock call to ask its RetryStrategy")
	start, closed := closeInBackground(c)
	select {
	case <-closed:
	case <-time.After(9 * time.Second):
	}
	d := time.Since(start)
	close(retry.released)
	<-closed
	// About 5 s; two bounds one after the other would take 10.
	if d > 7*time.Second {
		t.Errorf("Close took %v, want 5 s at most", d.Round(time.Millisecond))
	}
	if err := testutil.Receive(t, errc, 5*time.Second, "the Lock call"); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Lock under way at Close = %v, want ErrClosed", err)
	}
}

// closeInBackground begins c.Close, and returns when it began and a
// channel closed once it returned.
func closeInBackground(c *dlock.Client) (time.Time, <-chan struct{}) {
	start, closed := time.Now(), make(chan struct{})
	go func() {
		defer close(closed)
		c.Close()
	}()
	return start, closed
}

// acquire.go: the nodes that grant after the majority did (the acquisition
// does not wait for them) get the fence too. Stored on the first majority
// only, the counter was left behind on the others, and once the lock was
// released, one node of that majority restarting empty (a minority) let
// the next majority, sharing only that node with it, read counters below
// the last fence and hand out the same fence again. Here the counters are
// a day ahead of the clocks, so that only they order the fences (the
// clocks would hide it as long as the nodes agree on the time).
func TestFenceStoredOnTheNodesThatGrantLate(t *testing.T) {
	cl := startCluster(t, 5)
	cl.cacheScripts(t) // the gates hold back EVALSHA
	ctx := context.Background()
	ahead := uint64(time.Now().Add(24 * time.Hour).UnixMicro())
	for _, rdb := range cl.rdbs {
		rdb.Set(ctx, lockKey("job")+":fence", ahead, 0)
	}
	// slowOn returns a Client whose acquire requests of "job" to the given
	// nodes are held back, and a function letting them go.
	slowOn := func(slow ...int) (*dlock.Client, func()) {
		var nodes []redis.UniversalClient
		var gates []*gateAcquire
		for i, srv := range cl.srvs {
			rdb := nodeClient(srv.Addr())
			t.Cleanup(func() { rdb.Close() })
			if slices.Contains(slow, i) {
				h := &gateAcquire{key: "job", held: make(chan struct{}, 1), gate: make(chan struct{}), finished: make(chan error, 1)}
				h.armed.Store(true)
				rdb.AddHook(h)
				gates = append(gates, h)
			}
			nodes = append(nodes, rdb)
		}
		c, err := redlock.NewWithConfig(redlock.Config{Nodes: nodes, NodeTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, func() {
			for _, h := range gates {
				<-h.held
				close(h.gate)
				if err := <-h.finished; err != nil {
					t.Fatalf("the held-back acquire: %v", err)
				}
			}
		}
	}

	ca, goA := slowOn(3, 4)
	a := mustLock(t, ca, "job") // granted by nodes 0-2 first
	goA()
	waitUntil(t, 5*time.Second, "A's hold on every node", func() bool {
		return len(cl.holders(t, "job", a.Token())) == 5
	})
	want := strconv.FormatUint(a.Fence(), 10)
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if cl.rdbs[3].Get(ctx, lockKey("job")+":fence").Val() == want && cl.rdbs[4].Get(ctx, lockKey("job")+":fence").Val() == want {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("fence counters of nodes 3, 4 = %s, %s, want A's fence %s on them too (they granted it)",
				cl.rdbs[3].Get(ctx, lockKey("job")+":fence").Val(), cl.rdbs[4].Get(ctx, lockKey("job")+":fence").Val(), want)
			break
		}
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// Node 2 restarts empty; B is granted by nodes 2-4 first.
	cl.srvs[2].Kill(t)
	cl.srvs[2].Restart(t)
	cb, goB := slowOn(0, 1)
	b := mustLock(t, cb, "job")
	goB()
	defer b.Unlock(ctx)
	if b.Fence() <= a.Fence() {
		t.Errorf("B's fence %d is not above A's %d, with only node 2, of A's majority, restarted", b.Fence(), a.Fence())
	}
}
