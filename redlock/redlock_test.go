package redlock_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redlock"
)

func TestLockOnEveryNode(t *testing.T) {
	cl := startCluster(t, 5)
	// Lock returns once a majority granted it; the others follow, within
	// the per-node timeout: a generous one, so that a loaded machine does
	// not make a request miss it before it is even sent.
	c := cl.patientLocker(t)
	ctx := context.Background()

	l := mustLock(t, c, "order:42")
	waitUntil(t, 5*time.Second, "the lock on all 5 nodes", func() bool {
		return len(cl.holders(t, "order:42", l.Token())) == 5
	})
	if l.Fence() == 0 {
		t.Error("Fence() = 0")
	}
	stored := 0
	for _, rdb := range cl.rdbs {
		if f, _ := rdb.Get(ctx, lockKey("order:42")+":fence").Uint64(); f == l.Fence() {
			stored++
		}
	}
	if stored < 3 {
		t.Errorf("fence stored on %d nodes, want a majority", stored)
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl < 29*time.Second || ttl > dlock.DefaultTTL {
		t.Errorf("TTL() = %v, %v; want about %v", ttl, err, dlock.DefaultTTL)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl, _ := l.TTL(ctx); ttl < 59*time.Second {
		t.Errorf("TTL after Extend(1m) = %v", ttl)
	}

	// Another Client is refused, and told how the nodes voted.
	other := cl.patientLocker(t)
	_, err := other.TryLock(ctx, "order:42")
	if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock on a held lock = %v, want ErrNotObtained", err)
	}
	var re *redlock.Error
	if !errors.As(err, &re) || re.Granted != 0 || re.Refused != 5 || re.Unreachable != 0 {
		t.Errorf("votes = %+v, want 0 granted, 5 refused", re)
	}
	if !strings.Contains(err.Error(), "5 held elsewhere") {
		t.Errorf("error %q does not give the votes", err)
	}

	// Reentrancy through the lock's context.
	inner, err := c.Lock(l.Context(), "order:42")
	if err != nil {
		t.Fatal(err)
	}
	if inner.Fence() != l.Fence() || inner.Token() != l.Token() {
		t.Error("re-entered lock has another fence or token")
	}
	waitUntil(t, time.Second, "a hold count of 2 on every node", func() bool {
		for _, rdb := range cl.rdbs {
			if n, _ := rdb.HGet(ctx, lockKey("order:42"), l.Token()).Int(); n != 2 {
				return false
			}
		}
		return true
	})
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l.Context().Err() != nil {
		t.Fatal("outer lock released by the inner Unlock")
	}

	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrReleased) {
		t.Errorf("cause after Unlock = %v", cause)
	}
	waitUntil(t, time.Second, "the lock to be gone from every node", func() bool {
		return len(cl.holders(t, "order:42", l.Token())) == 0
	})
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Unlock = %v, want ErrNotHeld", err)
	}
	l2, err := other.TryLock(ctx, "order:42")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Fence() <= l.Fence() {
		t.Errorf("next fence %d <= %d", l2.Fence(), l.Fence())
	}
	_ = l2.Unlock(ctx)
}

// Lock keys someone made persistent report a TTL of 0, as on one server.
func TestTTLOfPersistedLockIsZero(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.patientLocker(t)
	ctx := context.Background()
	l := mustLock(t, c, "persisted")
	waitUntil(t, 5*time.Second, "the lock on all 3 nodes", func() bool {
		return len(cl.holders(t, "persisted", l.Token())) == 3
	})
	for i, rdb := range cl.rdbs {
		if !rdb.Persist(ctx, lockKey("persisted")).Val() {
			t.Fatalf("node %d: PERSIST did not remove the lock's expiry", i)
		}
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl != 0 {
		t.Errorf("TTL() = %v, %v; want 0", ttl, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMutualExclusionProcesses(t *testing.T) {
	cl := startCluster(t, 5)
	resSrv := startCluster(t, 1) // the protected resource, not a lock node
	res := resSrv.rdbs[0]
	ctx := context.Background()
	const procs, each = 4, 15
	var cmds []*workerCmd
	for range procs {
		cmds = append(cmds, startWorker(t, cl, resSrv.srvs[0].Addr(), each))
	}
	for _, w := range cmds {
		if err := w.Wait(); err != nil {
			t.Errorf("worker: %v", err)
		}
	}
	if got, _ := res.Get(ctx, "count").Int(); got != procs*each {
		t.Errorf("count = %d, want %d", got, procs*each)
	}
	if n := res.LLen(ctx, "overlaps").Val(); n != 0 {
		t.Errorf("%d overlapping critical sections", n)
	}
	fences := res.LRange(ctx, "fences", 0, -1).Val()
	for i := 1; i < len(fences); i++ {
		a, _ := strconv.ParseUint(fences[i-1], 10, 64)
		b, _ := strconv.ParseUint(fences[i], 10, 64)
		if b <= a {
			t.Errorf("fence %d: %d after %d, want increasing", i, b, a)
		}
	}
}

func TestMutualExclusionTwoNodesDown(t *testing.T) {
	cl := startCluster(t, 5)
	ctx := context.Background()
	cl.srvs[1].Kill(t)
	cl.srvs[3].Kill(t)
	const workers, each = 4, 10
	var wg sync.WaitGroup
	var mu sync.Mutex
	inside, count := 0, 0
	var last uint64
	for range workers {
		c := cl.locker(t) // a Client per worker, as separate services would have
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				l, err := c.Lock(ctx, "counter", dlock.WithTTL(time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inside++
				if inside != 1 {
					t.Error("two holders at once")
				}
				if l.Fence() <= last {
					t.Errorf("fence %d after %d", l.Fence(), last)
				}
				last = l.Fence()
				count++
				inside--
				mu.Unlock()
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if count != workers*each {
		t.Errorf("count = %d, want %d", count, workers*each)
	}
}

func TestWaitersWakeOnReleaseWithoutPolling(t *testing.T) {
	cl := startCluster(t, 5)
	holder := cl.locker(t)
	waiter, err := redlock.New(cl.waiterNodes(t))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	ctx := context.Background()
	l := mustLock(t, holder, "job") // 30 s lease: a waiter polling would show
	otherSubscriber(t, lockKey("job")+":wake", cl.rdbs...)
	got := make(chan *dlock.Lock, 1)
	go func() {
		l2, err := waiter.Lock(ctx, "job")
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	// The waiter subscribes on the nodes and then sleeps.
	waitUntil(t, 5*time.Second, "the waiter to subscribe on every node", func() bool {
		for _, rdb := range cl.rdbs {
			if !waiterSubscribed(ctx, rdb, 1)() {
				return false
			}
		}
		return true
	})
	before := scriptCalls(t, cl.rdbs[0])
	select {
	case <-got:
		t.Fatal("the waiter got a held lock")
	case <-time.After(300 * time.Millisecond): // an observation window, not synchronization
	}
	if n := scriptCalls(t, cl.rdbs[0]) - before; n > 2 {
		t.Errorf("the waiter ran %d scripts on a node in 300ms while the lock was held: polling", n)
	}
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var l2 *dlock.Lock
	select {
	case l2 = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the released lock")
	}
	if d := time.Since(released); d > time.Second {
		t.Errorf("the waiter took %v to notice the release", d)
	}
	if l2 != nil {
		if l2.Fence() <= l.Fence() {
			t.Errorf("fence %d after %d", l2.Fence(), l.Fence())
		}
		_ = l2.Unlock(ctx)
	}
}

// scriptCalls returns how many scripts a node has run.
func scriptCalls(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info := rdb.Info(context.Background(), "commandstats").Val()
	total := 0
	for _, line := range strings.Split(info, "\r\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") {
			_, rest, _ := strings.Cut(line, "calls=")
			n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
			total += n
		}
	}
	return total
}

// split makes two other owners hold key on nodes 0-1 and 2 for ttl, so
// that nobody has a majority of 5.
func (c *cluster) split(t *testing.T, key string, ttl time.Duration) {
	t.Helper()
	for i, tok := range []string{"x", "x", "y"} {
		c.holdOn(t, i, key, tok, ttl)
	}
}

// holdOn makes owner tok hold key on node i for ttl.
func (c *cluster) holdOn(t *testing.T, i int, key, tok string, ttl time.Duration) {
	t.Helper()
	ctx := context.Background()
	// ':at', as every grant writes: a hash without it is not a lock.
	if err := c.rdbs[i].HSet(ctx, lockKey(key), tok, 1, ":at", 0).Err(); err != nil {
		t.Fatal(err)
	}
	c.rdbs[i].PExpire(ctx, lockKey(key), ttl)
}

func TestFailedAttemptReleasesEverywhere(t *testing.T) {
	cl := startCluster(t, 5)
	c := cl.patientLocker(t)
	ctx := context.Background()
	cl.split(t, "split", 10*time.Second)
	_, err := c.TryLock(ctx, "split")
	var re *redlock.Error
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.As(err, &re) {
		t.Fatalf("TryLock = %v, want a *redlock.Error wrapping ErrNotObtained", err)
	}
	if re.Granted != 2 || re.Refused != 3 {
		t.Errorf("votes: %d granted, %d refused; want 2, 3", re.Granted, re.Refused)
	}
	for _, i := range []int{3, 4} {
		if cl.rdbs[i].Exists(ctx, lockKey("split")).Val() != 0 {
			t.Errorf("node %d still holds the failed attempt's lock", i)
		}
	}
	// Lock with a bounded retry gives up with the same kind of error.
	_, err = c.Lock(ctx, "split", dlock.WithRetry(dlock.FixedRetry(5*time.Millisecond, 3)))
	if !errors.Is(err, dlock.ErrNotObtained) || !strings.Contains(err.Error(), "gave up after") {
		t.Errorf("Lock with a bounded retry = %v", err)
	}
}

func TestWaitEndsWithContext(t *testing.T) {
	cl := startCluster(t, 5)
	holder, waiter := cl.locker(t), cl.locker(t)
	l := mustLock(t, holder, "busy")
	defer l.Unlock(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := waiter.Lock(ctx, "busy")
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("Lock until the deadline = %v, want context.DeadlineExceeded", err)
	}
	// At the deadline, not when the holder's lease (30 s) would run out,
	// which the waiter sleeps until.
	if late := time.Since(deadlineOf(ctx)); late > time.Second {
		t.Errorf("Lock returned %v after its context's deadline", late)
	}
}

func TestCloseEndsWaiting(t *testing.T) {
	cl := startCluster(t, 3)
	holder := cl.locker(t)
	waiter, err := redlock.New(cl.waiterNodes(t))
	if err != nil {
		t.Fatal(err)
	}
	l := mustLock(t, holder, "busy")
	defer l.Unlock(context.Background())
	otherSubscriber(t, lockKey("busy")+":wake", cl.rdbs[0])
	errc := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(context.Background(), "busy")
		errc <- err
	}()
	waitUntil(t, 5*time.Second, "the waiter to subscribe", waiterSubscribed(context.Background(), cl.rdbs[0], 1))
	waiter.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("Lock after Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the wait")
	}
}

func TestFixedLeaseIsLostBeforeTheNodesExpireIt(t *testing.T) {
	cl := startCluster(t, 5)
	c := cl.locker(t)
	// The margin is the drift, 1% + 2 ms: 62 ms here, for the scheduler
	// to wake the watchdog and us (32 ms with a 3 s lease was too little
	// on a loaded machine).
	l := mustLock(t, c, "fixed", dlock.WithTTL(6*time.Second), dlock.WithoutRenewal())
	// When each node expires the lock, at the earliest: its PTTL counted
	// from before the question (less a millisecond of rounding). Asking
	// now, rather than after Done, keeps the round trips out of the margin.
	// A node the grant did not reach (a majority is enough) counts as
	// expired.
	var expiry []time.Time
	for _, rdb := range cl.rdbs {
		asked := time.Now()
		if d := rdb.PTTL(context.Background(), lockKey("fixed")).Val(); d > 0 {
			expiry = append(expiry, asked.Add(d-time.Millisecond))
		}
	}
	<-l.Done()
	told := time.Now()
	n := 0
	for _, e := range expiry {
		if told.Before(e) {
			n++
		}
	}
	if n < 3 {
		t.Errorf("when the holder was told, only %d nodes still held the lock: it was trusted too long", n)
	}
	if !errors.Is(context.Cause(l.Context()), dlock.ErrLockLost) {
		t.Errorf("cause = %v", context.Cause(l.Context()))
	}
}

func TestBadInput(t *testing.T) {
	cl := startCluster(t, 2)
	if _, err := redlock.New(nil); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("New(nil) = %v", err)
	}
	if _, err := redlock.New([]redis.UniversalClient{cl.nodes[0], nil}); !errors.Is(err, dlock.ErrNilClient) {
		t.Errorf("New with a nil node = %v", err)
	}
	for _, typedNil := range []redis.UniversalClient{(*redis.Client)(nil), (*redis.ClusterClient)(nil)} {
		if _, err := redlock.New([]redis.UniversalClient{cl.nodes[0], typedNil}); !errors.Is(err, dlock.ErrNilClient) {
			t.Errorf("New with a nil %T node = %v", typedNil, err)
		}
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": cl.srvs[1].Addr()}})
	defer ring.Close()
	if _, err := redlock.New([]redis.UniversalClient{cl.nodes[0], ring}); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("New with a Ring node = %v, want ErrInvalidOption", err)
	}
	same := redis.NewClient(&redis.Options{Addr: cl.srvs[0].Addr()})
	defer same.Close()
	if _, err := redlock.New([]redis.UniversalClient{cl.nodes[0], same}); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("New with one server twice = %v", err)
	}
	if _, err := redlock.NewWithConfig(redlock.Config{Nodes: cl.nodes, NodeTimeout: -1}); !errors.Is(err, dlock.ErrInvalidTTL) {
		t.Errorf("negative node timeout = %v", err)
	}
	if _, err := redlock.New(cl.nodes, dlock.WithPrefix("")); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("empty prefix = %v", err)
	}
	c := cl.locker(t)
	if _, err := c.Lock(context.Background(), "", dlock.WithTTL(time.Second)); !errors.Is(err, dlock.ErrInvalidKey) {
		t.Errorf("empty key = %v", err)
	}
}

func TestWrongTypeKey(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.locker(t)
	ctx := context.Background()
	for _, rdb := range cl.rdbs[:2] {
		rdb.Set(ctx, lockKey("str"), "not a lock", 0)
	}
	_, err := c.TryLock(ctx, "str")
	if !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("TryLock on string keys = %v, want ErrWrongType", err)
	}
	for _, rdb := range cl.rdbs[:2] {
		if rdb.Get(ctx, lockKey("str")).Val() != "not a lock" {
			t.Error("the foreign value was changed")
		}
	}
	if cl.rdbs[2].Exists(ctx, lockKey("str")).Val() != 0 {
		t.Error("the failed attempt kept its hold on the third node")
	}
}

// tryAndLockAreWrongType checks that TryLock and Lock of key fail with
// ErrWrongType; Lock at once, within a second, shorter than the 2 s after
// which it gives up on a majority that does not answer.
func tryAndLockAreWrongType(t *testing.T, c *dlock.Client, key, what string) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.TryLock(ctx, key); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("TryLock %s = %v, want ErrWrongType", what, err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := c.Lock(wctx, key); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("Lock %s = %v, want ErrWrongType", what, err)
	}
}

// A hash at the lock's name that is not a lock (other data: no ':at', which
// every grant writes) is a value of the wrong type, as for package dlock:
// Lock must not wait for it to be released, TryLock must not call it held
// elsewhere, and neither writes into it.
func TestForeignHashIsWrongType(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.locker(t)
	ctx := context.Background()
	for _, rdb := range cl.rdbs[:2] {
		rdb.HSet(ctx, lockKey("hash"), "user", "alice")
	}
	tryAndLockAreWrongType(t, c, "hash", "on a hash that is not a lock")
	for i, rdb := range cl.rdbs[:2] {
		if got := rdb.HGetAll(ctx, lockKey("hash")).Val(); len(got) != 1 || got["user"] != "alice" {
			t.Errorf("node %d: the foreign hash is now %v", i, got)
		}
		if ttl := rdb.PTTL(ctx, lockKey("hash")).Val(); ttl != -1 {
			t.Errorf("node %d: the foreign hash got an expiry: %v", i, ttl)
		}
	}
	if cl.rdbs[2].Exists(ctx, lockKey("hash")).Val() != 0 {
		t.Error("the failed attempts kept their hold on the third node")
	}
}

// A fence counter that is not a number (a string set by other code) is a
// value the lock cannot use, as a counter of another type is: TryLock and
// Lock fail with ErrWrongType at once, not ErrNoQuorum after retrying, and
// the value is left as it is.
func TestFenceCounterNotANumberIsWrongType(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.locker(t)
	ctx := context.Background()
	for _, rdb := range cl.rdbs[:2] {
		rdb.Set(ctx, lockKey("nan")+":fence", "not a number", 0)
	}
	tryAndLockAreWrongType(t, c, "nan", "with fence counters that are not numbers")
	for i, rdb := range cl.rdbs[:2] {
		if got := rdb.Get(ctx, lockKey("nan")+":fence").Val(); got != "not a number" {
			t.Errorf("node %d: the foreign value is now %q", i, got)
		}
	}
	if cl.rdbs[2].Exists(ctx, lockKey("nan")).Val() != 0 {
		t.Error("the failed attempts kept their hold on the third node")
	}
}

// lua/fence.lua: a fence counter ahead of a node's clock (moved forward by
// hand, or past 2^53) lives on that node until its clock is past the fence
// (by a second). Were it to expire first, with the fence still ahead of
// every clock, a grant by a majority through that node would fall back to
// the clocks, below the fences already issued; expiring as the clock
// reaches the fence, a grant reading that clock would issue the same fence
// again.
func TestFenceCounterAheadOfClockOutlivesTheGap(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.locker(t)
	ctx := context.Background()
	for _, ahead := range []uint64{
		uint64(time.Now().Add(72 * time.Hour).UnixMicro()),
		uint64(1)<<53 + 1, // counted in decimal
	} {
		key := "ahead-" + strconv.FormatUint(ahead, 10)
		for _, rdb := range cl.rdbs {
			rdb.Set(ctx, lockKey(key)+":fence", ahead, time.Hour)
		}
		l := mustLock(t, c, key)
		if l.Fence() != ahead+1 {
			t.Fatalf("counters at %d: fence %d", ahead, l.Fence())
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		stored := 0
		for i, rdb := range cl.rdbs {
			if rdb.Get(ctx, lockKey(key)+":fence").Val() != strconv.FormatUint(l.Fence(), 10) {
				continue // not waited for: a majority stored it
			}
			stored++
			now, err := rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			gap := time.Duration(l.Fence()-uint64(now.UnixMicro())) * time.Microsecond
			// Half of the second: PTTL is read a round trip after TIME.
			if ttl := rdb.PTTL(ctx, lockKey(key)+":fence").Val(); ttl < gap+time.Second/2 {
				t.Errorf("node %d, counters at %d: expires in %v, not past the moment its clock reaches the fence %d (in %v)", i, ahead, ttl, l.Fence(), gap)
			}
		}
		if stored < 2 {
			t.Errorf("counters at %d: fence %d stored on %d nodes", ahead, l.Fence(), stored)
		}
	}
}

// A release whose wake-up message the server refuses (an ACL that lets the
// user run the scripts on the lock's keys but not publish on its channel)
// has still released the lock: Unlock reports that, not an error.
func TestReleaseWithWakeChannelDeniedByACL(t *testing.T) {
	cl := startCluster(t, 3)
	nodes := cl.lockerNodes(t, func(int) string { return "resetchannels" }) // no pub/sub channel
	c, err := redlock.NewWithConfig(redlock.Config{Nodes: nodes, NodeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	l := lockEveryNode(t, cl, c, "job")
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock with the wake channel denied = %v, want nil: the lock was released", err)
	}
	if on := cl.holders(t, "job", l.Token()); len(on) > 0 {
		t.Errorf("nodes %v still hold the lock", on)
	}
}

// With an even number of nodes, half holding the token and half not is a
// definite answer (no majority holds it): Unlock says ErrNotHeld, not
// ErrNoQuorum ("too few nodes answered"), as renewals, TTL and re-entry do.
func TestReleaseWithEvenNodesEveryNodeAnswering(t *testing.T) {
	cl := startCluster(t, 4)
	c := cl.patientLocker(t)
	ctx := context.Background()
	l := lockEveryNode(t, cl, c, "job") // 30 s lease: no renewal before Unlock
	// Two nodes lose the lock (they restarted empty, or it expired there).
	for _, rdb := range cl.rdbs[:2] {
		rdb.Del(ctx, lockKey("job"))
	}
	err := l.Unlock(ctx)
	if errors.Is(err, redlock.ErrNoQuorum) {
		t.Fatalf("Unlock with all 4 nodes answering (2 held, 2 not) = %v; want ErrNotHeld, not ErrNoQuorum", err)
	}
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock = %v, want ErrNotHeld", err)
	}
}

// release.lua: a release by another token leaves the lock on every node,
// to its owner: a caller whose lock expired and went to another must not
// free the new holder's.
func TestReleaseByAnotherTokenLeavesTheLock(t *testing.T) {
	cl := startCluster(t, 3)
	cl.cacheScripts(t)
	c := cl.patientLocker(t)
	ctx := context.Background()
	l := lockEveryNode(t, cl, c, "job")
	for i, rdb := range cl.rdbs {
		n, err := rdb.EvalSha(ctx, scriptSHA(t, "release"), []string{lockKey("job"), lockKey("job") + ":wake"}, "another-token", 1, "1").Int()
		if err != nil || n != -1 {
			t.Errorf("node %d: release by another token = %d, %v; want -1 (not held)", i, n, err)
		}
	}
	if on := cl.holders(t, "job", l.Token()); len(on) != 3 {
		t.Fatalf("the owner holds the lock on nodes %v after another token's release, want all 3", on)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("the owner's Unlock = %v", err)
	}
}

// Waiters blocked by holds of several owners (stale holds of crashed
// contenders: no owner has a majority, so each failed attempt's release
// publishes) must not be woken by their own release message, nor by each
// other's: that frees nothing that blocks them, and they would retry in a
// loop every RetryDelay/10. They must sleep until a release by an owner
// that refused them, or the holds' lease; and such a release must still
// wake them.
func TestBlockedWaitersAreNotWokenByFailedAttempts(t *testing.T) {
	for _, waiters := range []int{1, 2} {
		t.Run(strconv.Itoa(waiters)+" waiters", func(t *testing.T) {
			cl := startCluster(t, 5)
			ctx := context.Background()
			cl.split(t, "split", 20*time.Second) // x on nodes 0-1, y on node 2
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			got := make(chan *dlock.Lock, waiters)
			for range waiters {
				c := cl.locker(t)
				go func() {
					l, err := c.Lock(wctx, "split")
					if err != nil {
						l = nil
					}
					got <- l
				}()
			}
			ch := lockKey("split") + ":wake"
			waitUntil(t, 5*time.Second, "the waiters to subscribe on every node", func() bool {
				for _, rdb := range cl.rdbs {
					if rdb.PubSubNumSub(ctx, ch).Val()[ch] != int64(waiters) {
						return false
					}
				}
				return true
			})
			before := scriptCalls(t, cl.rdbs[4])
			select {
			case l := <-got:
				t.Fatalf("Lock returned while the lock was split: %v", l)
			case <-time.After(500 * time.Millisecond): // an observation window, not synchronization
			}
			// Nobody released anything: each waiter should sleep until the
			// holds' lease (20 s) runs out, after at most one retry when its
			// subscription reached a majority. An attempt is an acquire and a
			// release.
			if n := scriptCalls(t, cl.rdbs[4]) - before; n > 6*waiters {
				t.Errorf("%d waiters ran %d scripts on node 4 in 500ms while nobody released: failed attempts wake them", waiters, n)
			}
			// Owner x releases on nodes 0-1, as release.lua does: a waiter
			// must get the lock at once, not when y's hold runs out.
			for _, i := range []int{0, 1} {
				cl.rdbs[i].Del(ctx, lockKey("split"))
				cl.rdbs[i].Publish(ctx, ch, "x")
			}
			select {
			case l := <-got:
				if l == nil {
					t.Fatal("Lock failed")
				}
				_ = l.Unlock(ctx)
			case <-time.After(5 * time.Second):
				t.Fatal("no waiter took the lock after owner x released it")
			}
		})
	}
}

// acquire.go: a waiter refused by holds in their last millisecond (PTTL 0:
// Redis expires a key only once its time is past) tries again when they
// run out, not a second later: no message comes when a lease runs out.
func TestWaiterTriesAgainWhenTheLeasesRunOut(t *testing.T) {
	cl := startCluster(t, 3)
	a, b := cl.patientLocker(t), cl.patientLocker(t)
	ctx := context.Background()
	const lease = 20 * time.Millisecond
	// The holder stops trusting its lease a little (the drift margin)
	// before the nodes expire it; the waiter's first attempt comes at steps
	// of 0.1 ms from there, so some land in the leases' last millisecond.
	for i := range 40 {
		held := lockShortLease(t, a, "edge", lease)
		<-held.Context().Done()
		for at := time.Now().Add(time.Duration(i) * 100 * time.Microsecond); time.Now().Before(at); {
		}
		start := time.Now()
		l := mustLock(t, b, "edge")
		if waited := time.Since(start); waited >= 500*time.Millisecond {
			t.Fatalf("round %d: the waiter got the lock %v after its first attempt, past leases of %v", i, waited, lease)
		}
		_ = l.Unlock(ctx)
		_ = held.Unlock(ctx) // lost, and found so
	}
}

// acquire.go: a waiter refused by a hold in its last millisecond on a
// minority (the lock split: one node gone, the other free) tries again
// when the hold runs out, not after its random backoff: that backoff is
// for a race between contenders, and no message comes when a lease runs
// out.
func TestSplitWaiterTriesAgainWhenTheLeaseRunsOut(t *testing.T) {
	cl := startCluster(t, 3)
	cl.srvs[2].Kill(t)
	a := cl.patientLocker(t)
	// A backoff far longer than any wait the fix allows.
	b, err := redlock.NewWithConfig(redlock.Config{Nodes: cl.nodes, NodeTimeout: time.Second, RetryDelay: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	const lease = 20 * time.Millisecond
	// As in TestWaiterTriesAgainWhenTheLeasesRunOut: first attempts at
	// steps of 0.1 ms, so some land in the hold's last millisecond.
	for i := range 40 {
		held := lockShortLease(t, a, "split", lease)
		// Held on node 0 alone: node 1 grants the waiter, node 2 is gone.
		if err := cl.rdbs[1].Del(ctx, lockKey("split")).Err(); err != nil {
			t.Fatal(err)
		}
		<-held.Context().Done()
		for at := time.Now().Add(time.Duration(i) * 100 * time.Microsecond); time.Now().Before(at); {
		}
		start := time.Now()
		l := mustLock(t, b, "split")
		if waited := time.Since(start); waited >= 500*time.Millisecond {
			t.Fatalf("round %d: the waiter got the lock %v after its first attempt, past a lease of %v", i, waited, lease)
		}
		_ = l.Unlock(ctx)
		_ = held.Unlock(ctx) // lost, and found so
	}
}

// A fence counter that Lua's tonumber reads as a number but that is none
// ("inf", "nan") is a value that is not a counter, as "not a number" is
// (TestFenceCounterNotANumberIsWrongType): ErrWrongType, left as it is.
// Read as a number, "inf" was granted, replied as an integer Redis cannot
// represent, and then refused every fence: Lock never succeeded and said
// the fence was stored on too few nodes.
func TestFenceCounterNotFiniteIsWrongType(t *testing.T) {
	for _, bad := range []string{"inf", "nan"} {
		t.Run(bad, func(t *testing.T) {
			cl := startCluster(t, 3)
			c := cl.locker(t)
			ctx := context.Background()
			for _, rdb := range cl.rdbs[:2] {
				rdb.Set(ctx, lockKey("nan")+":fence", bad, 0)
			}
			tryAndLockAreWrongType(t, c, "nan", "with fence counters "+bad)
			for i, rdb := range cl.rdbs[:2] {
				if got := rdb.Get(ctx, lockKey("nan")+":fence").Val(); got != bad {
					t.Errorf("node %d: the foreign value is now %q", i, got)
				}
			}
		})
	}
}

// NewWithConfig accepts any RetryDelay that is not negative; a very long
// one (math.MaxInt64: "do not retry soon") must not make Lock panic, or
// retry without any delay once the backoff doubled it past MaxInt64.
func TestLongRetryDelay(t *testing.T) {
	cl := startCluster(t, 3)
	c, err := redlock.NewWithConfig(redlock.Config{Nodes: cl.nodes, NodeTimeout: time.Second, RetryDelay: math.MaxInt64})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl.srvs[1].Stop(t)
	cl.srvs[2].Stop(t)
	// No majority: the attempt fails, and Lock backs off for RetryDelay
	// at most, until ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = c.Lock(ctx, "long-retry")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock = %v, want the context's deadline", err)
	}
}

// The backoff grows RetryDelay after each failed attempt: a very long one
// saturates instead of overflowing to no delay at all. Here the first
// attempt waits only until another client's hold on the one node up runs
// out; every attempt after it backs off for (nearly) RetryDelay, so Lock
// makes a couple of attempts before ctx ends, not thousands.
func TestLongRetryDelayDoesNotOverflowToNoDelay(t *testing.T) {
	cl := startCluster(t, 3)
	var sent atomic.Int64
	cl.rdbs[0].AddHook(countingHook{n: &sent})
	other, err := redlock.New(cl.nodes)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Lock(context.Background(), "long-retry", dlock.WithTTL(200*time.Millisecond), dlock.WithoutRenewal()); err != nil {
		t.Fatal(err)
	}
	c, err := redlock.NewWithConfig(redlock.Config{Nodes: cl.nodes, NodeTimeout: time.Second, RetryDelay: math.MaxInt64})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl.srvs[1].Stop(t)
	cl.srvs[2].Stop(t)
	from := sent.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	if _, err := c.Lock(ctx, "long-retry"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock = %v, want the context's deadline", err)
	}
	if n := sent.Load() - from; n > 20 {
		t.Errorf("%d commands to the node that is up in 600 ms: Lock retried without backing off", n)
	}
}

// Two cluster clients of the same addresses are one node given twice: its
// vote would count twice, as two clients of one address would.
func TestSameClusterTwiceIsRefused(t *testing.T) {
	cl := startCluster(t, 2)
	a := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{cl.srvs[0].Addr()}})
	defer a.Close()
	b := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{cl.srvs[0].Addr()}})
	defer b.Close()
	c, err := redlock.New([]redis.UniversalClient{a, b, cl.nodes[1]})
	if err == nil {
		c.Close()
	}
	if !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("New with one cluster twice = %v, want ErrInvalidOption", err)
	}
}

// Cluster clients with no seed addresses (a ClusterSlots function gives
// their nodes, as NewFailoverClusterClient's does) are told apart by
// nothing but themselves: two of different servers are two nodes.
func TestClusterClientsWithoutAddrsAreDistinctNodes(t *testing.T) {
	cl := startCluster(t, 3)
	slotsOf := func(addr string) *redis.ClusterClient {
		return redis.NewClusterClient(&redis.ClusterOptions{
			ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
				return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: addr}}}}, nil
			},
			ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
		})
	}
	a := slotsOf(cl.srvs[0].Addr())
	defer a.Close()
	b := slotsOf(cl.srvs[1].Addr())
	defer b.Close()
	if _, err := redlock.New([]redis.UniversalClient{a, a, cl.nodes[2]}); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("New with one cluster client twice = %v, want ErrInvalidOption", err)
	}
	c, err := redlock.NewWithConfig(redlock.Config{Nodes: []redis.UniversalClient{a, b, cl.nodes[2]}, NodeTimeout: time.Second})
	if err != nil {
		t.Fatalf("New with two cluster clients of different servers: %v", err)
	}
	defer c.Close()
	l := mustLock(t, c, "slots")
	if got := cl.holders(t, "slots", l.Token()); len(got) < 2 {
		t.Errorf("held on nodes %v, want a majority of the 3", got)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}

	// A failed node of this kind is still named in the error.
	cl.srvs[0].Kill(t)
	cl.srvs[1].Kill(t)
	_, err = c.TryLock(context.Background(), "slots")
	var re *redlock.Error
	if !errors.As(err, &re) || re.Nodes[0] == nil {
		t.Fatalf("TryLock with nodes 0 and 1 down = %v, want an *Error naming node 0", err)
	}
	if ne := re.Nodes[0].(*redlock.NodeError); ne.Addr == "" {
		t.Errorf("node 0's error has no address: %v", ne)
	}
}

// taggedNode is a node client of the caller's own type, which Go cannot
// compare (it holds a slice).
type taggedNode struct {
	*redis.Client
	tags []string
}

// Nodes of a type that cannot be compared are accepted, not a panic.
func TestUncomparableNodeTypes(t *testing.T) {
	cl := startCluster(t, 3)
	var nodes []redis.UniversalClient
	for i, rdb := range cl.rdbs {
		nodes = append(nodes, taggedNode{Client: rdb, tags: []string{strconv.Itoa(i)}})
	}
	c, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l := mustLock(t, c, "tagged")
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestSemaphoresRefused(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.locker(t)
	ctx := context.Background()
	if _, err := c.Semaphore("pool", 2).Acquire(ctx, 1); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Fatalf("Semaphore on Redlock: %v", err)
	}
	// Named for what was asked, and matchable as unsupported as the
	// operator calls below are.
	_, err := c.RWMutex("doc").TryRLock(ctx)
	if !errors.Is(err, dlock.ErrInvalidOption) || !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), `rwmutex "doc"`) {
		t.Fatalf("RWMutex on Redlock: %v", err)
	}
	if _, err := c.Semaphore("pool", 2).Available(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Available on Redlock: %v", err)
	}
	if _, err := c.Semaphore("pool", 2).Inspect(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Semaphore.Inspect on Redlock: %v", err)
	}
	if err := c.Semaphore("pool", 2).ForceRelease(ctx, "0123456789abcdef0123456789abcdef"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Semaphore.ForceRelease on Redlock: %v", err)
	}
	if _, err := c.RWMutex("doc").Inspect(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("RWMutex.Inspect on Redlock: %v", err)
	}
	if err := c.RWMutex("doc").ForceRelease(ctx, "0123456789abcdef0123456789abcdef"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("RWMutex.ForceRelease on Redlock: %v", err)
	}
	for _, rdb := range cl.rdbs {
		if n := rdb.DBSize(ctx).Val(); n != 0 {
			t.Fatalf("a refused semaphore wrote %d keys", n)
		}
	}
}

// Txn guards a write with one deployment's WATCH: a majority of masters
// has no such guard, and Txn says so.
func TestTxnRefused(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.locker(t)
	ctx := context.Background()
	l, err := c.Lock(ctx, "order:42")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	err = l.Txn(ctx, func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, "{order:42}:state", "paid", 0)
		return nil
	})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Txn on Redlock = %v, want errors.ErrUnsupported", err)
	}
	for _, rdb := range cl.rdbs {
		if n := rdb.Exists(ctx, "{order:42}:state").Val(); n != 0 {
			t.Fatal("a refused Txn wrote")
		}
	}
}

// An uncontended Lock is two round trips, in parallel on the nodes (the
// grant on every node, then the fence on the majority that granted it,
// and on the later ones in the background), and its Unlock one to every
// node, as docs/safety.md says. Counted as the scripts each node ran: a
// fence written in the background while the release goes may take a
// connection of its own, whose handshake is no round trip of the lock's.
func TestUncontendedLockRoundTrips(t *testing.T) {
	cl := startCluster(t, 3)
	cl.cacheScripts(t)
	base := make([]int, len(cl.rdbs))
	for i, rdb := range cl.rdbs {
		base[i] = scriptCalls(t, rdb)
	}
	c, err := redlock.NewWithConfig(redlock.Config{Nodes: cl.nodes, NodeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := mustLock(t, c, "order:42")
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Close waits for the requests still on their way to the slower nodes.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i, rdb := range cl.rdbs {
		if n := scriptCalls(t, rdb) - base[i]; n != 3 {
			t.Errorf("node %d: %d scripts run for a Lock and Unlock, want 3 (grant, fence, release)", i, n)
		}
	}
}

// WithReplicaAck applies to one deployment: a Redlock Client ignores it,
// and takes locks on nodes that have no replicas.
func TestReplicaAckIgnored(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.locker(t, dlock.WithReplicaAck(1, 100*time.Millisecond, dlock.FailClosed))
	ctx := context.Background()
	l, err := c.Lock(ctx, "order:42")
	if err != nil {
		t.Fatalf("Lock with WithReplicaAck and no replicas = %v, want the lock", err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend = %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock = %v", err)
	}
}

// lockShortLease locks key with a lease so short that a loaded machine may
// read the grant's reply after it ran out: Lock then reports the lock lost
// (and releases it), and it is taken again.
func lockShortLease(t *testing.T, c *dlock.Client, key string, lease time.Duration) *dlock.Lock {
	t.Helper()
	for {
		l, err := c.Lock(context.Background(), key, dlock.WithTTL(lease), dlock.WithoutRenewal())
		if err == nil {
			return l
		}
		if !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("Lock(%q): %v", key, err)
		}
	}
}

// acquire.go: a waiter refused on every node, by holds whose leases differ
// (a renewal that reached only some of the nodes), sleeps until a majority
// of them could have run out, not until the shortest has: each hold
// running out before then frees a minority, and an attempt then is
// refused again by the others.
func TestWaiterSleepsUntilAMajorityOfLeasesRunOut(t *testing.T) {
	cl := startCluster(t, 5)
	cl.cacheScripts(t) // one script call an attempt, no NOSCRIPT and EVAL
	c := cl.patientLocker(t)
	ctx := context.Background()
	for i, ttl := range []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, 20 * time.Second, 20 * time.Second, 20 * time.Second} {
		cl.holdOn(t, i, "uneven", "x", ttl)
	}
	// Node 4 refuses every attempt: one script call each (no release).
	base := scriptCalls(t, cl.rdbs[4])
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		l, err := c.Lock(wctx, "uneven")
		if err == nil {
			_ = l.Unlock(ctx)
		}
		done <- err
	}()
	defer func() {
		cancel()
		<-done
	}()
	// Both short holds run out within 600 ms; the window gives the
	// attempts they would cause time to show on a loaded machine.
	select {
	case err := <-done:
		t.Fatalf("Lock returned while x held a majority: %v", err)
	case <-time.After(1500 * time.Millisecond): // an observation window, not synchronization
	}
	// The first attempt, and maybe one when the waiter's subscription
	// reached a majority (a release may have been missed before).
	if n := scriptCalls(t, cl.rdbs[4]) - base; n > 2 {
		t.Errorf("the waiter made %d attempts in 1.5 s while x held a majority for 20 s, want at most 2", n)
	}
}
