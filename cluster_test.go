package dlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/tcpproxy"
	"github.com/dlock-go/dlock/internal/testutil"
)

// TestCluster runs every primitive through a go-redis ClusterClient on a
// real 3-master cluster (each master with one replica), then moves a held
// lock's slot to another master and restarts masters under held locks. The
// subtests share the cluster and run in order.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	replicas := make([]*redistest.Server, len(cl.Nodes))
	for i := range cl.Nodes {
		replicas[i] = cl.AddReplica(t, i)
	}

	t.Run("Primitives", func(t *testing.T) { testClusterPrimitives(t, cl) })
	t.Run("HandOverWakesWaiter", func(t *testing.T) { testClusterHandOver(t, cl) })
	t.Run("Semaphore", func(t *testing.T) { testClusterSemaphore(t, cl) })
	t.Run("RenewalsBatchedPerNode", func(t *testing.T) { testClusterRenewalBatches(t, cl) })
	t.Run("ManyRenewalsEachOncePerRound", func(t *testing.T) { testClusterManyRenewals(t, cl) })
	t.Run("ReplicaAckOnKeyNode", func(t *testing.T) { testClusterReplicaAck(t, cl, replicas) })
	t.Run("SlotMigration", func(t *testing.T) { testClusterSlotMigration(t, cl) })
	t.Run("MasterRestart", func(t *testing.T) { testClusterMasterRestart(t, cl) })
	// Last: it kills a master for good.
	t.Run("Failover", func(t *testing.T) { testClusterFailover(t, cl, replicas[0]) })
}

// waitRenewal waits until the lease of the lock named name goes up: since
// it only shrinks otherwise, a renewal reached the server rdb talks to.
func waitRenewal(t *testing.T, rdb redis.Cmdable, name string) {
	t.Helper()
	lowest := time.Duration(math.MaxInt64)
	waitUntil(t, 5*time.Second, "a renewal of "+name, func() bool {
		d, err := rdb.PTTL(context.Background(), name).Result()
		if err != nil || d <= 0 {
			return false
		}
		lowest = min(lowest, d)
		return d > lowest+20*time.Millisecond
	})
}

// lockResult is what a Lock call in another goroutine returned.
type lockResult struct {
	l   *Lock
	err error
}

// lockAsync calls c.Lock in a goroutine; the result arrives on the channel
// (buffered: the goroutine never blocks, even if the test is over).
func lockAsync(ctx context.Context, c *Client, key string, opts ...LockOption) <-chan lockResult {
	got := make(chan lockResult, 1)
	go func() {
		l, err := c.Lock(ctx, key, opts...)
		got <- lockResult{l, err}
	}()
	return got
}

// keyOffMaster returns a key served by another master than key's lock.
func keyOffMaster(t *testing.T, cc *redis.ClusterClient, c *Client, key string) string {
	t.Helper()
	for i := 0; ; i++ {
		other := fmt.Sprintf("elsewhere:%d", i)
		m, err := cc.MasterForKey(context.Background(), other)
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr != masterOf(t, cc, c, key) {
			return other
		}
	}
}

// masterOf returns the address of the master serving key's lock.
func masterOf(t *testing.T, cc *redis.ClusterClient, c *Client, key string) string {
	t.Helper()
	m, err := cc.MasterForKey(context.Background(), c.keys(key).lock)
	if err != nil {
		t.Fatal(err)
	}
	return m.Options().Addr
}

// keysPerMaster returns n lock names served by each master, by address.
func keysPerMaster(t *testing.T, cl *redistest.Cluster, cc *redis.ClusterClient, c *Client, prefix string, n int) map[string][]string {
	t.Helper()
	byMaster := make(map[string][]string)
	for i := 0; ; i++ {
		key := fmt.Sprintf("%s%d", prefix, i)
		m := masterOf(t, cc, c, key)
		if len(byMaster[m]) < n {
			byMaster[m] = append(byMaster[m], key)
		}
		full := len(byMaster) == len(cl.Nodes)
		for _, ks := range byMaster {
			full = full && len(ks) == n
		}
		if full {
			return byMaster
		}
		if i > 10000 {
			t.Fatalf("keys do not spread over the masters: %v", byMaster)
		}
	}
}

func testClusterPrimitives(t *testing.T, cl *redistest.Cluster) {
	ctx := context.Background()
	cc := cl.Client(t)
	c := newClientOn(t, cc)
	other := newClientOn(t, cl.Client(t))

	keys := []string{"a{b}c", "}{", "{x}", "a}:fence", "{", "}"}
	for i := 0; i < 40; i++ {
		keys = append(keys, fmt.Sprintf("order:%d", i))
	}
	masters := map[string]int{}
	var locks []*Lock
	for _, key := range keys {
		masters[masterOf(t, cc, c, key)]++
		l, err := c.TryLock(ctx, key, WithMetadata("job "+key))
		if err != nil {
			t.Fatalf("TryLock(%q): %v", key, err)
		}
		locks = append(locks, l)
		if l2, err := other.TryLock(ctx, key); !errors.Is(err, ErrNotObtained) {
			if l2 != nil {
				_ = l2.Unlock(ctx)
			}
			t.Fatalf("%q: second TryLock = %v, want ErrNotObtained", key, err)
		}
		info, err := other.Inspect(ctx, key)
		if err != nil || !info.Held || info.Owner != l.Token() || info.Fence != l.Fence() || info.Holder.Data != "job "+key {
			t.Fatalf("Inspect(%q) = %+v, %v", key, info, err)
		}
	}
	if len(masters) != len(cl.Nodes) {
		t.Fatalf("locks landed on %d masters, want %d: %v", len(masters), len(cl.Nodes), masters)
	}

	names, err := other.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(keys)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("List = %v, want %v", names, want)
	}
	// A semaphore and an RWMutex of each name, on the masters of the
	// locks: each kind is listed from every master, apart from the others.
	var permits []*Lock
	for _, key := range keys {
		s, err := c.Semaphore(key, 2).TryAcquire(ctx, 1)
		if err != nil {
			t.Fatalf("semaphore %q: %v", key, err)
		}
		r, err := c.RWMutex(key).TryRLock(ctx)
		if err != nil {
			t.Fatalf("rwmutex %q: %v", key, err)
		}
		permits = append(permits, s, r)
	}
	for _, kind := range []string{"lock", "semaphore", "rwmutex"} {
		if names, err := other.List(ctx, "", WithKind(kind)); err != nil || !slices.Equal(names, want) {
			t.Errorf("List(%s) = %v, %v; want %v", kind, names, err, want)
		}
	}
	for _, l := range permits {
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("%q: Unlock: %v", l.Key(), err)
		}
	}
	for _, kind := range []string{"semaphore", "rwmutex"} {
		if names, err := other.List(ctx, "", WithKind(kind)); err != nil || len(names) != 0 {
			t.Errorf("%s names left after Unlock: %v, %v", kind, names, err)
		}
	}

	for _, l := range locks {
		// Reentry, Extend and TTL reach the key's master.
		inner, err := c.Lock(l.Context(), l.Key())
		if err != nil || inner.Fence() != l.Fence() {
			t.Fatalf("%q: re-enter = %v", l.Key(), err)
		}
		if err := inner.Extend(ctx, 20*time.Second); err != nil {
			t.Fatalf("%q: Extend: %v", l.Key(), err)
		}
		if d, err := l.TTL(ctx); err != nil || d <= 10*time.Second {
			t.Fatalf("%q: TTL = %v, %v", l.Key(), d, err)
		}
		if err := inner.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if info, _ := other.Inspect(ctx, l.Key()); !info.Held {
			t.Fatalf("%q released by the inner Unlock", l.Key())
		}
		// Txn writes in the lock's slot, on its master; a command for
		// another master's slot fails the transaction, which then
		// applies nothing.
		own := l.SlotKey("txn")
		elsewhere := keyOffMaster(t, cc, c, l.Key())
		if err := l.Txn(ctx, func(pipe redis.Pipeliner) error { pipe.Set(ctx, own, "x", 0); return nil }); err != nil {
			t.Fatalf("%q: Txn: %v", l.Key(), err)
		}
		err = l.Txn(ctx, func(pipe redis.Pipeliner) error {
			pipe.Del(ctx, own)
			pipe.Set(ctx, elsewhere, "x", 0)
			return nil
		})
		if err == nil || cc.Get(ctx, own).Val() != "x" || cc.Exists(ctx, elsewhere).Val() != 0 {
			t.Fatalf("%q: Txn across slots = %v, and applied some of it", l.Key(), err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("%q: Unlock: %v", l.Key(), err)
		}
	}
	if names, _ := other.List(ctx, ""); len(names) != 0 {
		t.Errorf("locks left after Unlock: %v", names)
	}

	// Do, and a fence that keeps growing per key.
	var fences []uint64
	for i := 0; i < 3; i++ {
		err := c.Do(ctx, "{", func(ctx context.Context) error {
			info, err := other.Inspect(ctx, "{")
			fences = append(fences, info.Fence)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !slices.IsSorted(fences) || fences[0] == fences[2] {
		t.Errorf("fences of successive holders = %v", fences)
	}

	// ForceRelease reaches the key's master; the old holder learns it.
	stuck := mustLock(t, c, "order:7")
	if err := other.ForceRelease(ctx, "order:7"); err != nil {
		t.Fatal(err)
	}
	if _, err := stuck.TTL(ctx); !errors.Is(err, ErrLockLost) {
		t.Errorf("TTL after ForceRelease = %v, want ErrLockLost", err)
	}
}

func testClusterHandOver(t *testing.T, cl *redistest.Cluster) {
	ctx := context.Background()
	cc := cl.Client(t)
	// Waiters re-check only every 20 s: a prompt wake-up can only come
	// from the hand-over message, published with SPUBLISH by the release
	// script on the lock's master.
	c := newClientOn(t, cc, WithQueueTTL(time.Minute))
	other := newClientOn(t, cl.Client(t), WithQueueTTL(time.Minute))
	for _, key := range []string{"wake:1", "wake:2", "wake:3", "wa{ke}"} {
		l := mustLock(t, c, key)
		got := lockAsync(ctx, other, key)
		k := c.keys(key)
		node, err := cc.MasterForKey(ctx, k.lock)
		if err != nil {
			t.Fatal(err)
		}
		ch := other.wakeChannel(key)
		waitUntil(t, 5*time.Second, "the waiter to queue and subscribe on the lock's master", func() bool {
			subs, _ := node.PubSubShardNumSub(ctx, ch).Result()
			return cc.ZCard(ctx, k.queue).Val() == 1 && subs[ch] == 1
		})
		releaseAndWaitHandOver(t, l, got, fmt.Sprintf("%q", key))
	}
}

// testClusterSemaphore takes and hands over permits of semaphores whose
// names fall on every master: a semaphore's scripts touch its five names
// together, so they must share a slot.
func testClusterSemaphore(t *testing.T, cl *redistest.Cluster) {
	ctx := context.Background()
	cc := cl.Client(t)
	c := newClientOn(t, cc, noPolling)
	other := newClientOn(t, cl.Client(t), noPolling)
	masters := map[string]bool{}
	for i := 0; len(masters) < len(cl.Nodes); i++ {
		name := fmt.Sprintf("pool:%d", i)
		s := c.Semaphore(name, 2)
		k := semKeys(s)
		m, err := cc.MasterForKey(ctx, k.lock)
		if err != nil {
			t.Fatal(err)
		}
		if masters[m.Options().Addr] {
			continue
		}
		masters[m.Options().Addr] = true
		held, err := s.Acquire(ctx, 2)
		if err != nil {
			t.Fatalf("Acquire(%q): %v", name, err)
		}
		got := acquireAsync(ctx, other.Semaphore(name, 2), 1)
		waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return cc.ZCard(ctx, k.queue).Val() == 1 })
		notYet(t, got, "a waiter on a full semaphore")
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := received(t, got, "the waiter on "+name).Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// releaseAndWaitHandOver unlocks l and checks that the waiter whose Lock
// result comes on got is handed the lock promptly, with a greater fence,
// then unlocks the waiter's lock. The cluster tests make waiters re-check
// only rarely, so the prompt hand-over proves that the release's wake-up
// message reached the waiter on the lock's master. what names the case in
// failure messages.
func releaseAndWaitHandOver(t *testing.T, l *Lock, got <-chan lockResult, what string) {
	t.Helper()
	l2 := handOverWithin(t, l, got, time.Second, 10*time.Second, what)
	if l2.Fence() <= l.Fence() {
		t.Errorf("%s: hand-over fence %d <= %d", what, l2.Fence(), l.Fence())
	}
	if err := l2.Unlock(context.Background()); err != nil {
		t.Error(err)
	}
}

// handOverWithin unlocks l and returns the lock that the waiter whose Lock
// result comes on got is then handed. It fails the test if the waiter gets
// it more than bound after the release, or not within wait at all.
func handOverWithin(t *testing.T, l *Lock, got <-chan lockResult, bound, wait time.Duration, what string) *Lock {
	t.Helper()
	released := time.Now()
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := testutil.Receive(t, got, wait, what)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if d := time.Since(released); d > bound {
		t.Errorf("%s: got the lock %v after the release, want within %v", what, d.Round(time.Millisecond), bound)
	}
	return r.l
}

// pipelineCounter counts, per node, the pipelines sent and the scripts in
// them.
type pipelineCounter struct {
	mu        sync.Mutex
	pipelines map[string]int
	evalshas  map[string]int
}

func (p *pipelineCounter) hook(addr string) redis.Hook { return counterHook{p: p, addr: addr} }

func (p *pipelineCounter) totals() (pipelines, evalshas int, nodes int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.pipelines {
		pipelines += n
	}
	for _, n := range p.evalshas {
		evalshas += n
	}
	return pipelines, evalshas, len(p.evalshas)
}

type counterHook struct {
	testutil.PassHook
	p    *pipelineCounter
	addr string
}

func (h counterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.p.mu.Lock()
		for _, cmd := range cmds {
			if cmd.Name() == "evalsha" {
				h.p.evalshas[h.addr]++
			}
		}
		if h.p.evalshas[h.addr] > 0 {
			h.p.pipelines[h.addr]++
		}
		h.p.mu.Unlock()
		return next(ctx, cmds)
	}
}

func testClusterRenewalBatches(t *testing.T, cl *redistest.Cluster) {
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	count := &pipelineCounter{pipelines: map[string]int{}, evalshas: map[string]int{}}
	cc.OnNewNode(func(rdb *redis.Client) { rdb.AddHook(count.hook(rdb.Options().Addr)) })
	c := newClientOn(t, cc)

	// Locks only pipeline their renewals; a renewal round of n locks on 3
	// masters is 3 pipelines, one per master, each carrying that master's
	// share, sent concurrently by go-redis.
	const n = 30
	byMaster := keysPerMaster(t, cl, cc, c, "batch:", n/3)
	var locks []*Lock
	for _, keys := range byMaster {
		for _, key := range keys {
			locks = append(locks, mustLock(t, c, key, WithTTL(600*time.Millisecond)))
		}
	}
	waitUntil(t, 5*time.Second, "three renewal rounds", func() bool {
		_, evalshas, _ := count.totals()
		return evalshas >= 3*n
	})
	pipelines, evalshas, nodes := count.totals()
	t.Logf("%d renewals in %d node pipelines", evalshas, pipelines)
	if nodes != len(cl.Nodes) {
		t.Errorf("renewals reached %d nodes, want %d", nodes, len(cl.Nodes))
	}
	// Unbatched renewals would be one pipeline each; perfect batching is
	// one pipeline per master per round (n/3 renewals each).
	if pipelines*3 > evalshas {
		t.Errorf("%d renewals took %d node round trips: not batched", evalshas, pipelines)
	}
	for _, l := range locks {
		if l.Context().Err() != nil {
			t.Fatalf("%q lost: %v", l.Key(), context.Cause(l.Context()))
		}
		if err := l.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
}

// renewalTimes records when each lock name's renewal was sent, and the
// pipelines that carried them.
type renewalTimes struct {
	mu    sync.Mutex
	at    map[string][]time.Time
	sizes []int       // renewals per pipeline, in order
	sent  []time.Time // when each was sent
}

type renewalTimesHook struct {
	testutil.PassHook
	r *renewalTimes
}

func (h renewalTimesHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		now := time.Now()
		n := 0
		h.r.mu.Lock()
		for _, cmd := range cmds {
			if sha, key := firstKey(cmd); sha == extendScript.Hash() {
				h.r.at[key] = append(h.r.at[key], now)
				n++
			}
		}
		if n > 0 {
			h.r.sizes = append(h.r.sizes, n)
			h.r.sent = append(h.r.sent, now)
		}
		h.r.mu.Unlock()
		return next(ctx, cmds)
	}
}

// Thousands of locks over every slot: each round's renewals go in one
// pipeline per master, every lock renewed about every third of its lease,
// none left out, none twice in a row; and a key another program turned
// into another type (an error reply for its script) costs that lock only,
// not the others in its pipeline.
func testClusterManyRenewals(t *testing.T, cl *redistest.Cluster) {
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	rt := &renewalTimes{at: map[string][]time.Time{}}
	cc.OnNewNode(func(rdb *redis.Client) { rdb.AddHook(renewalTimesHook{r: rt}) })
	c := newClientOn(t, cc)

	const n, workers = 2000, 40
	const ttl = 1200 * time.Millisecond
	locks := make([]*Lock, n)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				l, err := c.Lock(ctx, fmt.Sprintf("many:%d", i), WithTTL(ttl))
				if err != nil {
					t.Error(err)
					return
				}
				locks[i] = l
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	defer func() {
		for _, l := range locks {
			_ = l.Unlock(ctx)
		}
	}()

	victim := locks[0]
	if err := cl.Client(t).Set(ctx, c.keys(victim.Key()).lock, "not a lock", 0).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-victim.Done():
		if cause := context.Cause(victim.Context()); !errors.Is(cause, ErrLockLost) {
			t.Errorf("cause = %v, want ErrLockLost", cause)
		}
	case <-time.After(ttl):
		t.Fatal("the lock whose key changed type is still live a lease later")
	}
	waitUntil(t, 10*time.Second, "three renewals of every lock", func() bool {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		for _, l := range locks[1:] {
			if len(rt.at[c.keys(l.Key()).lock]) < 3 {
				return false
			}
		}
		return true
	})

	rt.mu.Lock()
	defer rt.mu.Unlock()
	renewals := 0
	for _, s := range rt.sizes {
		renewals += s
	}
	t.Logf("%d renewals in %d pipelines", renewals, len(rt.sizes))
	// Locks taken within a sixth of the lease of each other share rounds:
	// the 2,000 end up in few pipelines.
	if renewals < 100*len(rt.sizes) {
		t.Errorf("%d renewals in %d pipelines: not batched", renewals, len(rt.sizes))
	}
	for _, l := range locks[1:] {
		if err := l.Context().Err(); err != nil {
			t.Fatalf("%q lost: %v", l.Key(), context.Cause(l.Context()))
		}
		at := rt.at[c.keys(l.Key()).lock]
		// A renewal is due a third of the lease after the last, and may
		// go up to a sixth early to share a round trip: never twice within
		// a round, never a round skipped.
		for i := 1; i < len(at); i++ {
			if d := at[i].Sub(at[i-1]); d < ttl/6-50*time.Millisecond || d > 2*ttl/3 {
				t.Fatalf("%q renewed %v after its previous renewal, want about %v", l.Key(), d.Round(time.Millisecond), ttl/3)
			}
		}
	}
}

// replicaClient reads a cluster replica directly (READONLY).
func replicaClient(t *testing.T, addr string) *redis.Client {
	rc := redis.NewClient(&redis.Options{
		Addr:      addr,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() },
	})
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

func testClusterReplicaAck(t *testing.T, cl *redistest.Cluster, replicas []*redistest.Server) {
	ctx := context.Background()
	cc := cl.Client(t)
	var reports []ReplicaReport
	var mu sync.Mutex
	// Most writes here need the replicas' acknowledgement, which a loaded
	// machine can delay: not too short a timeout.
	c := newClientOn(t, cc, WithReplicaAck(1, time.Second, FailClosed), WithReplicaReport(func(r ReplicaReport) {
		mu.Lock()
		reports = append(reports, r)
		mu.Unlock()
	}))
	byMaster := keysPerMaster(t, cl, cc, c, "acked:", 2)
	replicaOf := map[string]*redistest.Server{}
	for i, m := range cl.Nodes {
		replicaOf[m.Addr()] = replicas[i]
	}
	// A new replica is streamed writes only after its first
	// acknowledgement, up to a second after its sync.
	for _, keys := range byMaster {
		node, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 10*time.Second, "the replica of "+node.Options().Addr+" to acknowledge", func() bool {
			pipe := node.Pipeline()
			pipe.Incr(ctx, c.keys(keys[0]).lock+":probe")
			wait := pipe.Do(ctx, "WAIT", 1, 50)
			_, _ = pipe.Exec(ctx)
			return wait.Val() == int64(1)
		})
	}

	// WAIT goes to each lock's master, after its write: when Lock returns,
	// that master's replica has the grant.
	for m, keys := range byMaster {
		rc := replicaClient(t, replicaOf[m].Addr())
		for _, key := range keys {
			l := mustLock(t, c, key)
			if n, err := rc.HGet(ctx, c.keys(key).lock, l.Token()).Int(); err != nil || n != 1 {
				t.Fatalf("%q: replica of %s has hold count %d, %v right after Lock", key, m, n, err)
			}
			if err := l.Extend(ctx, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if n := rc.Exists(ctx, c.keys(key).lock).Val(); n != 0 {
				t.Fatalf("%q: replica still has the lock right after Unlock", key)
			}
			// Permits likewise, on the same master (the names share the tag).
			s := c.Semaphore(key, 2)
			p, err := s.Acquire(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !rc.HExists(ctx, semKeys(s).lock, p.Token()).Val() {
				t.Fatalf("%q: replica of %s has no entry right after Semaphore.Acquire", key, m)
			}
			if err := p.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}

	// One master's replica stops acknowledging: its locks fail closed, the
	// others' are taken. A WAIT sent to another master, or on a connection
	// that did not write, would wrongly succeed.
	stalled := cl.Nodes[0].Addr()
	replicaOf[stalled].Pause(t)
	defer replicaOf[stalled].Resume(t)
	for m, keys := range byMaster {
		key := keys[0]
		l, err := c.TryLock(ctx, key)
		if m == stalled {
			if !errors.Is(err, ErrNotReplicated) {
				t.Fatalf("%q on the stalled master: TryLock = %v, want ErrNotReplicated", key, err)
			}
			if info, _ := c.Inspect(ctx, key); info.Held {
				t.Fatalf("%q: a grant that failed closed is still held", key)
			}
			if _, err := c.Semaphore(key, 2).TryAcquire(ctx, 1); !errors.Is(err, ErrNotReplicated) {
				t.Fatalf("%q on the stalled master: TryAcquire = %v, want ErrNotReplicated", key, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q on a healthy master: %v", key, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// The release of a grant that failed closed goes to the lock's master
	// like the grant. A fresh ClusterClient that nothing has been routed
	// through yet would first ask a random node for COMMAND, ignoring the
	// context, and hang if that node is the stalled replica: here every
	// node's COMMAND hangs, and the lock must still be released at once.
	hang := make(chan struct{})
	defer close(hang)
	fresh := cl.Client(t)
	fresh.OnNewNode(func(rdb *redis.Client) { rdb.AddHook(hangCommandHook{hang: hang}) })
	fc := newClientOn(t, fresh, WithReplicaAck(1, 300*time.Millisecond, FailClosed))
	key := byMaster[stalled][1]
	got := make(chan error, 1)
	go func() {
		l, err := fc.TryLock(ctx, key)
		if err == nil {
			_ = l.Unlock(ctx)
		}
		got <- err
	}()
	select {
	case err := <-got:
		if !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("%q on the stalled master, fresh ClusterClient: TryLock = %v, want ErrNotReplicated", key, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%q: TryLock on the stalled master stuck behind the ClusterClient's COMMAND lookup", key)
	}
	if info, _ := c.Inspect(ctx, key); info.Held {
		t.Fatalf("%q: a grant that failed closed on a fresh ClusterClient is still held", key)
	}
	replicaOf[stalled].Resume(t)
	mu.Lock()
	defer mu.Unlock()
	if len(reports) != 2 {
		t.Fatalf("reports = %+v, want two (the lock's and the permits' acquire)", reports)
	}
	for i, kind := range []string{"lock", "semaphore"} {
		if r := reports[i]; r.Op != "acquire" || r.Kind != kind || r.Acked != 0 || r.Wanted != 1 {
			t.Errorf("report %d = %+v, want a %s's acquire with 0 of 1 acknowledgements", i, r, kind)
		}
	}
}

// hangCommandHook makes a bare COMMAND (go-redis's lookup of command
// information) hang until hang is closed, as it does on a node that stopped
// answering.
type hangCommandHook struct {
	testutil.PassHook
	hang <-chan struct{}
}

func (h hangCommandHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "command" && len(cmd.Args()) == 1 {
			<-h.hang
		}
		return next(ctx, cmd)
	}
}

// otherMaster returns the address of a master of cl other than src.
func otherMaster(cl *redistest.Cluster, src string) string {
	for _, a := range cl.Addrs() {
		if a != src {
			return a
		}
	}
	return ""
}

func testClusterSlotMigration(t *testing.T, cl *redistest.Cluster) {
	ctx := context.Background()
	cc := cl.Client(t)
	c := newClientOn(t, cc, WithQueueTTL(time.Minute))
	waiting := newClientOn(t, cl.Client(t), WithQueueTTL(time.Minute))
	third := newClientOn(t, cl.Client(t))
	// Two locks in one slot: "moving}renewed" has the hash tag of "moving".
	const key, renewedKey = "moving", "moving}renewed"
	k, rk := c.keys(key), c.keys(renewedKey)

	// A held lock with a waiter subscribed to its hand-over channel on the
	// source master (the waiter re-checks only every 10 s on its own), and
	// a lock the watchdog renews every 400 ms (a lease that outlasts the
	// migration's few round trips on a loaded machine).
	l := mustLock(t, c, key, WithTTL(20*time.Second))
	renewed := mustLock(t, c, renewedKey, WithTTL(1200*time.Millisecond))
	// And one whose renewals wait for a replica: they are sent to the
	// master found by MasterForKey, so they must follow the slot by
	// themselves.
	// Its replica is healthy: a generous timeout costs nothing, and a
	// replica slow to acknowledge on a loaded machine fails no renewal.
	ackedClient := newClientOn(t, cl.Client(t), WithReplicaAck(1, 2*time.Second, FailClosed))
	const ackedKey = "moving}acked"
	acked := mustLock(t, ackedClient, ackedKey, WithTTL(900*time.Millisecond))
	got := lockAsync(ctx, waiting, key)
	src := masterOf(t, cc, c, key)
	if m := masterOf(t, cc, c, renewedKey); m != src {
		t.Fatalf("%q and %q on different masters", key, renewedKey)
	}
	srcNode := redis.NewClient(&redis.Options{Addr: src})
	defer srcNode.Close()
	ch := waiting.wakeChannel(key)
	waitUntil(t, 5*time.Second, "the waiter to queue and subscribe", func() bool {
		subs, _ := srcNode.PubSubShardNumSub(ctx, ch).Result()
		return cc.ZCard(ctx, k.queue).Val() == 1 && subs[ch] == 1
	})
	dst := otherMaster(cl, src)
	slot := int(cc.ClusterKeySlot(ctx, k.lock).Val())

	cl.MigrateSlot(t, slot, src, dst, func() {
		// The keys are on dst, the slot still belongs to src: the holder's
		// single-key scripts follow ASK; nobody else can take the lock.
		if err := l.Extend(ctx, 20*time.Second); err != nil {
			t.Errorf("Extend during the migration: %v", err)
		}
		if _, err := l.TTL(ctx); err != nil {
			t.Errorf("TTL during the migration: %v", err)
		}
		// Txn cannot follow ASK (go-redis's Watch sends no ASKING, and
		// gives up without running the check): it fails and writes
		// nothing, but the lock is still held, not lost.
		err := l.Txn(ctx, func(pipe redis.Pipeliner) error { pipe.Set(ctx, "{moving}:txn", "x", 0); return nil })
		if err == nil || errors.Is(err, ErrLockLost) || l.Context().Err() != nil {
			t.Errorf("Txn during the migration = %v, the lock's Context %v; want an error, the lock held", err, context.Cause(l.Context()))
		}
		// So do the writes of the lock whose writes wait for a replica,
		// sent on the connection of a master of their own choosing: they
		// must follow ASK too, or the lock cannot be renewed until the
		// migration ends.
		if err := acked.Extend(ctx, 900*time.Millisecond); err != nil {
			t.Errorf("Extend of the acknowledged lock during the migration: %v", err)
		}
		if l3, err := third.TryLock(ctx, key); err == nil {
			_ = l3.Unlock(ctx)
			t.Error("lock taken by another client during the migration")
		}
	})

	// The locks live on dst now, held by the same owners, and the watchdog
	// keeps renewing there (go-redis follows MOVED).
	dstNode := redis.NewClient(&redis.Options{Addr: dst})
	defer dstNode.Close()
	if n := dstNode.Exists(ctx, k.lock, k.fence, k.queue, k.waiters, rk.lock).Val(); n != 5 {
		for _, kk := range []string{k.lock, k.fence, k.queue, k.waiters, rk.lock} {
			t.Logf("%s: dst %d src %d", kk, dstNode.Exists(ctx, kk).Val(), srcNode.Exists(ctx, kk).Val())
		}
		for _, h := range []*Lock{l, renewed, acked} {
			t.Logf("%s: %v", h.Key(), context.Cause(h.Context()))
		}
		t.Fatalf("%d of the 5 keys of the slot on the new master", n)
	}
	for i := 0; i < 3; i++ {
		waitRenewal(t, dstNode, rk.lock)
		waitRenewal(t, dstNode, c.keys(ackedKey).lock)
	}
	for _, h := range []*Lock{l, renewed, acked} {
		if h.Context().Err() != nil {
			t.Fatalf("%q lost across the migration: %v", h.Key(), context.Cause(h.Context()))
		}
	}
	if info, err := third.Inspect(ctx, key); err != nil || info.Owner != l.Token() || info.Waiters != 1 {
		t.Fatalf("after the migration Inspect = %+v, %v", info, err)
	}
	if cc.Exists(ctx, "{moving}:txn").Val() != 0 {
		t.Fatal("the Txn sent during the migration was applied")
	}
	if err := l.Txn(ctx, func(pipe redis.Pipeliner) error { pipe.Set(ctx, "{moving}:txn", "x", 0); return nil }); err != nil {
		t.Fatalf("Txn after the migration: %v", err)
	}
	if _, err := third.TryLock(ctx, key); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock after the migration = %v, want ErrNotObtained", err)
	}

	// The server ended the waiter's subscription on src when the slot
	// left it; dlock subscribed again on dst, so the release wakes the
	// waiter at once.
	waitUntil(t, 5*time.Second, "the waiter's subscription on the new master", func() bool {
		subs, _ := dstNode.PubSubShardNumSub(ctx, ch).Result()
		return subs[ch] == 1
	})
	releaseAndWaitHandOver(t, l, got, "after the migration")
	for _, h := range []*Lock{renewed, acked} {
		if err := h.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
}

func testClusterMasterRestart(t *testing.T, cl *redistest.Cluster) {
	ctx := context.Background()
	cc := cl.Client(t)
	c := newClientOn(t, cc)
	other := newClientOn(t, cl.Client(t))
	byMaster := keysPerMaster(t, cl, cc, c, "restart:", 1)
	server := func(addr string) *redistest.Server {
		for _, n := range cl.Nodes {
			if n.Addr() == addr {
				return n
			}
		}
		t.Fatalf("no master at %s", addr)
		return nil
	}
	addrs := cl.Addrs()
	durable, volatile := addrs[1], addrs[2]

	// A master that writes every change to its AOF restarts with the lock:
	// the holder keeps it, renewing through the restart.
	dn := redis.NewClient(&redis.Options{Addr: durable})
	defer dn.Close()
	for _, kv := range [][2]string{{"appendonly", "yes"}, {"appendfsync", "always"}} {
		if err := dn.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 10*time.Second, "the AOF to be on", func() bool {
		info := dn.Info(ctx, "persistence").Val()
		return strings.Contains(info, "aof_enabled:1") && strings.Contains(info, "aof_rewrite_in_progress:0") &&
			!strings.Contains(info, "aof_rewrite_scheduled:1")
	})
	if err := dn.ConfigRewrite(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// A restarted cluster master refuses commands (CLUSTERDOWN) for its
	// first 2 s, so the lease must outlast the restart and those 2 s.
	held := mustLock(t, c, byMaster[durable][0], WithTTL(4*time.Second))
	if err := held.Extend(ctx, 4*time.Second); err != nil {
		t.Fatal(err)
	}
	srv := server(durable)
	srv.Kill(t)
	srv.Restart(t)
	k := c.keys(held.Key())
	for i := 0; i < 2; i++ {
		waitRenewal(t, dn, k.lock)
	}
	if held.Context().Err() != nil {
		t.Fatalf("lock lost across a restart with AOF: %v", context.Cause(held.Context()))
	}
	if _, err := other.TryLock(ctx, held.Key()); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock after the restart = %v, want ErrNotObtained", err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// A master without persistence restarts empty: the holder is told at
	// its next renewal, and the next holder's fence is still larger.
	lost := mustLock(t, c, byMaster[volatile][0], WithTTL(2*time.Second))
	srv = server(volatile)
	srv.Kill(t)
	srv.Restart(t)
	select {
	case <-lost.Done():
		if cause := context.Cause(lost.Context()); !errors.Is(cause, ErrLockLost) {
			t.Fatalf("cause = %v, want ErrLockLost", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the holder was not told that the restart lost its lock")
	}
	var next *Lock
	waitUntil(t, 5*time.Second, "the restarted master to grant the lock", func() bool {
		// CLUSTERDOWN for the master's first 2 s; never ErrNotObtained.
		l, err := other.TryLock(ctx, lost.Key())
		if errors.Is(err, ErrNotObtained) {
			t.Fatalf("TryLock after the restart: %v", err)
		}
		next = l
		return err == nil
	})
	if next.Fence() <= lost.Fence() {
		t.Errorf("fence after the restart %d <= %d before it", next.Fence(), lost.Fence())
	}
	_ = next.Unlock(ctx)
}

// testClusterFailover kills a master for good: Cluster promotes its
// replica, which has the locks. Clients with and without WithReplicaAck
// keep their locks (their renewals follow the slot to the promoted
// replica), and a Client that last saw the old slot map takes a lock there:
// go-redis itself reloads the map only after MOVED (a dead node sends
// none) or once a minute.
func testClusterFailover(t *testing.T, cl *redistest.Cluster, replica *redistest.Server) {
	ctx := context.Background()
	dead := cl.Nodes[0].Addr()
	type holder struct {
		name string
		c    *Client
		key  string
		held *Lock
	}
	var holders []holder
	for _, h := range []struct {
		name string
		opts []Option
	}{
		{"plain", nil},
		// The promoted master has no replica left: AcceptAndReport takes it.
		{"acked", []Option{WithReplicaAck(1, 500*time.Millisecond, AcceptAndReport)}},
	} {
		cc := oneDialClient(t, cl)
		c := newClientOn(t, cc, h.opts...)
		key := h.name + "-failover:0"
		for i := 1; masterOf(t, cc, c, key) != dead; i++ {
			key = fmt.Sprintf("%s-failover:%d", h.name, i)
		}
		holders = append(holders, holder{h.name, c, key, mustLock(t, c, key, WithTTL(10*time.Second))})
	}
	// A Client that loads the slot map now, and is idle until after the
	// failover. key + "}x" has key's hash tag: the same slot.
	other := newClientOn(t, oneDialClient(t, cl))
	slotmate := holders[0].key + "}x"
	if l, err := other.TryLock(ctx, slotmate); err != nil {
		t.Fatal(err)
	} else if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	rc := replica.Client(t)
	waitUntil(t, 5*time.Second, "the grants on the replica", func() bool {
		if rc.Do(ctx, "READONLY").Err() != nil {
			return false
		}
		for _, h := range holders {
			if rc.Exists(ctx, h.c.keys(h.key).lock).Val() == 0 {
				return false
			}
		}
		return true
	})

	cl.Nodes[0].Kill(t)
	waitUntil(t, 30*time.Second, "the replica to be promoted", func() bool {
		role, err := rc.Do(ctx, "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "master" &&
			strings.Contains(rc.ClusterInfo(ctx).Val(), "cluster_state:ok")
	})
	for _, h := range holders {
		waitRenewal(t, rc, h.c.keys(h.key).lock)
		if h.held.Context().Err() != nil {
			t.Fatalf("%s: the held lock was lost across the failover: %v", h.name, context.Cause(h.held.Context()))
		}
		_ = h.held.Unlock(ctx)
	}
	waitUntil(t, 10*time.Second, "a lock on the promoted master through the idle Client", func() bool {
		l, err := other.TryLock(ctx, slotmate)
		if err == nil {
			_ = l.Unlock(ctx)
		}
		return err == nil
	})
}

// Inspect reads one lock, which lives on one master of a cluster. It must
// not need any other master: with an unrelated master hung (SIGSTOP, well
// within cluster-node-timeout, so the cluster is still ok and the key's
// master serves it), every Inspect of the key must succeed. Inspect also
// compares the waiters' deadlines, written by the key's master's clock, with
// the TIME it reads, which must come from that same master.
func TestInspectOnClusterReadsOnlyTheKeysMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { cc.Close() })
	c := newClientOn(t, cc)
	ctx := context.Background()
	const key = "inspect-me"
	l := mustLock(t, c, key)
	defer l.Unlock(ctx)
	if _, err := c.Inspect(ctx, key); err != nil { // warm up every node's pool
		t.Fatal(err)
	}
	owner := masterOf(t, cc, c, key)
	var hung *redistest.Server
	for _, n := range cl.Nodes {
		if n.Addr() != owner {
			hung = n
			break
		}
	}
	hung.Pause(t)
	t.Cleanup(func() { hung.Resume(t) })
	// go-redis sends a keyless command (TIME) to the masters in turn: three
	// calls reach each of them once.
	for i := 0; i < 3; i++ {
		ictx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		info, err := c.Inspect(ictx, key)
		cancel()
		if err != nil || !info.Held || info.Owner != l.Token() {
			t.Fatalf("Inspect #%d with an unrelated master (%s) hung; the key's master is %s: %+v, %v", i+1, hung.Addr(), owner, info, err)
		}
	}
}

// A master that lost its script cache (a restart, SCRIPT FLUSH, or a
// failover: Redis 7 does not replicate scripts, so a promoted replica has
// none) answers the watchdog's renewals with NOSCRIPT. The renewals must
// give that master the script and go on, as Extend does, whatever the
// other nodes do: here the master's replica has stopped answering (hung,
// or unreachable from this client), which the lock does not need.
func TestClusterRenewalAfterScriptFlushWithAReplicaHung(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	replica := cl.AddReplica(t, 0)
	ctx := context.Background()
	// The replica is in every node's slot map (CLUSTER SLOTS lists a
	// replica once it has a replication offset), as on any live cluster.
	// Writes to the masters give it one at once, not at the master's next
	// replication ping (10 s apart); they go through a client of their
	// own, so that the Client's slot map is loaded with the replica in it.
	writer := cl.Client(t)
	waitUntil(t, 10*time.Second, "every node to list the replica", func() bool {
		for i := range 30 {
			writer.Set(ctx, fmt.Sprint("offset:", i), 1, time.Minute)
		}
		for _, a := range cl.Addrs() {
			nc := redis.NewClient(&redis.Options{Addr: a})
			//lint:ignore SA1019 go-redis builds its slot map from CLUSTER SLOTS: that is what must list the replica
			slots, err := nc.ClusterSlots(ctx).Result()
			_ = nc.Close()
			listed := false
			for _, s := range slots {
				for _, n := range s.Nodes {
					listed = listed || n.Addr == replica.Addr()
				}
			}
			if err != nil || !listed {
				return false
			}
		}
		return true
	})
	cc := cl.Client(t)
	c := newClientOn(t, cc)

	master := cl.Nodes[0].Addr()
	key := "noscript:0"
	for i := 1; masterOf(t, cc, c, key) != master; i++ {
		key = fmt.Sprintf("noscript:%d", i)
	}
	l := mustLock(t, c, key, WithTTL(1500*time.Millisecond))
	mc := redis.NewClient(&redis.Options{Addr: master})
	defer mc.Close()
	name := c.keys(key).lock
	waitRenewal(t, mc, name)

	replica.Pause(t)
	t.Cleanup(func() { replica.Resume(t) })
	if err := mc.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// Two renewals reach the lock's master (its lease only shrinks
	// otherwise), well within cluster-node-timeout.
	prev, renewals := time.Duration(math.MaxInt64/2), 0
	waitUntil(t, 5*time.Second, "two renewals after the script flush", func() bool {
		if l.Context().Err() != nil {
			t.Fatalf("lock declared lost, its master healthy: %v", context.Cause(l.Context()))
		}
		d, err := mc.PTTL(ctx, name).Result()
		if err != nil || d <= 0 {
			return false
		}
		if d > prev+20*time.Millisecond {
			renewals++
		}
		prev = d
		return renewals >= 2
	})
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// proxiedToOneMaster returns a cluster client that reaches one master of cl,
// hung, through proxy, to be frozen, and the others directly.
func proxiedToOneMaster(t *testing.T, cl *redistest.Cluster) (cc *redis.ClusterClient, proxy *tcpproxy.Proxy, hung string) {
	t.Helper()
	hung = cl.Nodes[1].Addr()
	proxy = startProxy(t, hung)
	cc = redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cl.Addrs(),
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == hung {
				addr = proxy.Addr()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	})
	t.Cleanup(func() { _ = cc.Close() })
	return cc, proxy, hung
}

// Renewals are one pipeline that go-redis splits per master. A master
// that stops answering this client (a partition; the cluster itself is
// fine) must cost only the locks it serves: the locks on the other
// masters are renewed there in time and must not be declared lost while
// the round trip to the silent master waits for its timeout. The lock on
// the silent master ends when its lease in Redis runs out, not later (it
// could be someone else's then) and not a round trip timeout sooner.
func TestClusterRenewalsOfHealthyMastersNotHeldBackByAHungOne(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc, proxy, hung := proxiedToOneMaster(t, cl)
	c := newClientOn(t, cc)
	ctx := context.Background()

	byMaster := keysPerMaster(t, cl, cc, c, "isolated:", 1)
	healthy := cl.Nodes[0].Addr()
	const ttl = 1500 * time.Millisecond
	l := mustLock(t, c, byMaster[healthy][0], WithTTL(ttl))
	cut := mustLock(t, c, byMaster[hung][0], WithTTL(ttl)) // renewed in the same rounds
	hc := redis.NewClient(&redis.Options{Addr: healthy})
	defer hc.Close()
	name := c.keys(l.Key()).lock
	waitRenewal(t, hc, name)

	proxy.Freeze()
	t.Cleanup(proxy.Thaw)
	deadline := time.Now().Add(3 * ttl)
	// Read directly, past the proxy: no renewal reaches the key any more.
	direct := redis.NewClient(&redis.Options{Addr: hung})
	defer direct.Close()
	before := time.Now()
	left, err := direct.PTTL(ctx, c.keys(cut.Key()).lock).Result()
	if err != nil || left <= 0 {
		t.Fatalf("lease on the hung master: %v, %v", left, err)
	}
	expires := before.Add(left)
	select {
	case <-cut.Done():
		ended := time.Now()
		t.Logf("the hung master's lock ended %v before its lease there", expires.Sub(ended).Round(time.Millisecond))
		// Late by no more than a timer's wake-up. Early by the drift
		// margin and the last renewal's trip, or, if the freeze held back
		// only the reply of a renewal Redis ran, by the time since the
		// renewal before it: a third of the lease, up to half when it
		// went early to share a round trip.
		if late := ended.Sub(expires); late > 50*time.Millisecond {
			t.Errorf("the hung master's lock ended %v after its lease there", late)
		}
		if early := expires.Sub(ended); early > ttl/2+50*time.Millisecond {
			t.Errorf("the hung master's lock ended %v before its lease there", early)
		}
		if cause := context.Cause(cut.Context()); !errors.Is(cause, ErrLockLost) {
			t.Errorf("cause = %v, want ErrLockLost", cause)
		}
	case <-time.After(left + time.Second):
		t.Fatalf("the hung master's lock still live a second after its lease there")
	}
	// Several leases' worth of renewals reach the healthy master, each on
	// time (due when a third of the lease has passed: the lease there
	// never falls below a third); the lock it serves stays live all along.
	lowest := ttl
	waitUntil(t, 10*time.Second, "three leases to pass", func() bool {
		if l.Context().Err() != nil {
			t.Fatalf("lock on a healthy master declared lost (its lease there: %v): %v", hc.PTTL(ctx, name).Val(), context.Cause(l.Context()))
		}
		if d, err := hc.PTTL(ctx, name).Result(); err == nil {
			lowest = min(lowest, d)
		}
		return time.Now().After(deadline)
	})
	if lowest < ttl/3 {
		t.Fatalf("lease on the healthy master fell to %v: its renewals waited", lowest)
	}
}

// heldOnTwoMasters has holder lock, for a minute, a key on the healthy
// master (cl.Nodes[0]) and one on the hung one, both named with prefix as
// c's client cc routes them; the second is unlocked when the test ends.
func heldOnTwoMasters(t *testing.T, cl *redistest.Cluster, cc *redis.ClusterClient, c, holder *Client, prefix, hung string) (healthy, a, b string, la *Lock) {
	t.Helper()
	byMaster := keysPerMaster(t, cl, cc, c, prefix, 1)
	healthy = cl.Nodes[0].Addr()
	a, b = byMaster[healthy][0], byMaster[hung][0]
	la = mustLock(t, holder, a, WithTTL(time.Minute))
	lb := mustLock(t, holder, b, WithTTL(time.Minute))
	t.Cleanup(func() { _ = lb.Unlock(context.Background()) })
	return healthy, a, b, la
}

// On Redis Cluster each waited lock has a pub/sub connection of its own,
// opened when its first waiter subscribes. A master that stops answering
// just then (busy with a slow command, or cut off from this client) must
// hold back only the waiters of its own locks: a hand-over made on a
// healthy master wakes its waiter at once, and a Lock that got its lock
// returns.
func TestClusterHungSubscriptionDoesNotHoldBackOtherWaiters(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc, proxy, hung := proxiedToOneMaster(t, cl)
	c := newClientOn(t, cc, WithQueueTTL(time.Minute))
	holder := newClientOn(t, cl.Client(t))
	ctx := context.Background()

	healthy, a, b, la := heldOnTwoMasters(t, cl, cc, c, holder, "subhung:", hung)

	// A waiter for a, subscribed on its healthy master.
	gotA := lockAsync(ctx, c, a)
	hc := redis.NewClient(&redis.Options{Addr: healthy})
	defer hc.Close()
	chA := c.wakeChannel(a)
	waitUntil(t, 5*time.Second, "the waiter of a to subscribe", func() bool {
		subs, _ := hc.PubSubShardNumSub(ctx, chA).Result()
		return subs[chA] == 1
	})
	// The client's pooled connection to b's master is open: the next
	// connection it opens there is the subscription of b's waiter.
	if _, err := c.TryLock(ctx, b); err == nil {
		t.Fatal("TryLock of a held lock succeeded")
	}
	frozen := proxy.FreezeOn(func(p []byte) bool { return bytes.Contains(bytes.ToLower(p), []byte("hello")) })
	t.Cleanup(proxy.Thaw)
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gotB := lockAsync(bctx, c, b)
	select {
	case <-frozen:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter of b never opened its subscription")
	}

	// b's master is silent now. a's hand-over must still wake its waiter.
	_ = handOverWithin(t, la, gotA, time.Second, 20*time.Second, "the waiter of a, on a healthy master").Unlock(ctx)
	proxy.Thaw()
	cancel()
	<-gotB
}

// A failover moves a lock's slot, and with it the sharded subscription
// of its waiter: the demoted master ends it, and the waiter subscribes
// again on the promoted replica, where the holder's release publishes the
// hand-over. The holder's lease is long, so that the waiter does not check
// again on its own: only that message wakes it within the bound.
func TestClusterWaiterWokenAfterFailover(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	replica := cl.AddReplica(t, 0)
	ctx := context.Background()
	cc := cl.Client(t)
	holder := newClientOn(t, cc)
	waiting := newClientOn(t, cl.Client(t), WithQueueTTL(time.Minute))
	old := cl.Nodes[0].Addr()
	key := "failed-over:0"
	for i := 1; masterOf(t, cc, holder, key) != old; i++ {
		key = fmt.Sprintf("failed-over:%d", i)
	}
	l := mustLock(t, holder, key, WithTTL(20*time.Second))
	got := lockAsync(ctx, waiting, key)
	k := holder.keys(key)
	ch := waiting.wakeChannel(key)
	on := redis.NewClient(&redis.Options{Addr: old})
	defer on.Close()
	waitUntil(t, 5*time.Second, "the waiter to queue and subscribe", func() bool {
		subs, _ := on.PubSubShardNumSub(ctx, ch).Result()
		return on.ZCard(ctx, k.queue).Val() == 1 && subs[ch] == 1
	})
	rc := replica.Client(t)
	waitUntil(t, 5*time.Second, "the queue on the replica", func() bool {
		return rc.Do(ctx, "READONLY").Err() == nil && rc.ZCard(ctx, k.queue).Val() == 1
	})

	if err := rc.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the waiter's subscription on the promoted replica", func() bool {
		subs, _ := rc.PubSubShardNumSub(ctx, ch).Result()
		return subs[ch] == 1
	})
	if l.Context().Err() != nil {
		t.Fatalf("the held lock was lost across the failover: %v", context.Cause(l.Context()))
	}
	select {
	case r := <-got:
		t.Fatalf("the waiter returned before the release: %v", r.err)
	default:
	}
	releaseAndWaitHandOver(t, l, got, "after the failover")
}

// clusterWaiter is a lock held on a Cluster, by holder (on cc), and a
// waiter queued for it on a ClusterClient of its own, whose replies
// starting with a prefix are seen.
type clusterWaiter struct {
	cc     *redis.ClusterClient
	holder *Client
	held   *Lock
	k      *lockKeys
	got    <-chan lockResult // the waiter's Lock
	seen   *replySeen
}

// queueClusterWaiter locks key on cl and queues a waiter for it, with a
// minute-long queue entry and a short lease, so that it checks every
// 100 ms; seen notes the first reply to its checks that starts with
// prefix.
func queueClusterWaiter(t *testing.T, cl *redistest.Cluster, key, prefix string) clusterWaiter {
	t.Helper()
	ctx := context.Background()
	cc := cl.Client(t)
	holder := newClientOn(t, cc)
	wc := cl.Client(t)
	seen := newReplySeen(prefix)
	wc.AddHook(seen)
	waiter := newClientOn(t, wc, WithQueueTTL(time.Minute))
	l := mustLock(t, holder, key)
	got := lockAsync(ctx, waiter, key, WithTTL(300*time.Millisecond))
	k := holder.keys(key)
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return cc.ZCard(ctx, k.queue).Val() == 1 })
	return clusterWaiter{cc: cc, holder: holder, held: l, k: k, got: got, seen: seen}
}

// While a lock's slot is being migrated, its five-name scripts get
// TRYAGAIN (the channel name never exists as a key). A queued waiter keeps
// its place through that, as through a failover, and gets the lock when it
// is released after the migration settled.
func TestClusterQueuedWaiterKeepsPlaceThroughTryAgain(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	q := queueClusterWaiter(t, cl, "resharded", "TRYAGAIN")
	cc, l, got, k, tryAgain := q.cc, q.held, q.got, q.k, q.seen

	src := masterOf(t, cc, q.holder, l.Key())
	dst := otherMaster(cl, src)
	slot := cc.ClusterKeySlot(ctx, k.lock).Val()
	s, d := redis.NewClient(&redis.Options{Addr: src}), redis.NewClient(&redis.Options{Addr: dst})
	defer s.Close()
	defer d.Close()
	id := func(c *redis.Client) string { return c.Do(ctx, "CLUSTER", "MYID").Val().(string) }
	for _, cmd := range []*redis.Cmd{
		d.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", id(s)),
		s.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", id(d)),
	} {
		if err := cmd.Err(); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Receive(t, tryAgain.seen, 10*time.Second, "a check of the waiter answered TRYAGAIN")
	for _, c := range []*redis.Client{s, d} {
		if err := c.Do(ctx, "CLUSTER", "SETSLOT", slot, "STABLE").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := testutil.Receive(t, got, 10*time.Second, "the waiter to get the lock")
	if r.err != nil {
		t.Fatalf("Lock of a waiter queued through TRYAGAIN = %v", r.err)
	}
	if err := r.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A master that no longer serves a lock's slot (its slots being
// reassigned) answers CLUSTERDOWN. A queued waiter keeps its place through
// that, as through a failover, and gets the lock when it is released once
// the slot is served again. Meanwhile the nodes disagree about the slot,
// and a check may meet MOVED once go-redis's redirections are spent: the
// place is kept through that too.
func TestClusterQueuedWaiterKeepsPlaceThroughClusterDown(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	q := queueClusterWaiter(t, cl, "unserved", "CLUSTERDOWN")
	cc, l, got, k, down := q.cc, q.held, q.got, q.k, q.seen

	m := redis.NewClient(&redis.Options{Addr: masterOf(t, cc, q.holder, l.Key())})
	defer m.Close()
	slot := cc.ClusterKeySlot(ctx, k.lock).Val()
	if err := m.Do(ctx, "CLUSTER", "DELSLOTS", slot).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-down.seen:
	case r := <-got:
		t.Fatalf("Lock of a waiter queued through CLUSTERDOWN = %v", r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("no check of the waiter answered CLUSTERDOWN")
	}
	if err := m.Do(ctx, "CLUSTER", "ADDSLOTS", slot).Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the slot to be served again", func() bool { return cc.Exists(ctx, k.lock).Err() == nil })
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := testutil.Receive(t, got, 10*time.Second, "the waiter to get the lock")
	if r.err != nil {
		t.Fatalf("Lock of a waiter queued through CLUSTERDOWN = %v", r.err)
	}
	if err := r.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// movedClient returns a ClusterClient on cl that follows no redirection,
// as one whose redirections ran out while the nodes disagree about a slot:
// the first MOVED or ASK is its answer. It is closed in t.Cleanup.
func movedClient(t *testing.T, cl *redistest.Cluster) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRedirects: -1})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// A check sent to the master a lock's slot just left is answered MOVED
// once go-redis's redirections are spent (here: none are followed). It did
// not run, and go-redis reloads its slot map: a queued waiter keeps its
// place, as through TRYAGAIN, and gets the lock when it is released. So
// does a waiter for permits, whose semaphore shares the lock's slot.
func TestClusterQueuedWaiterKeepsPlaceThroughMoved(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	holder := newClientOn(t, cc)
	const key = "moved"
	l := mustLock(t, holder, key)
	p, err := holder.Semaphore(key, 1).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Each waiter on a client of its own, to tell whose check met MOVED.
	waiter := func() (*Client, *replySeen) {
		wc := movedClient(t, cl)
		moved := newReplySeen("MOVED")
		wc.AddHook(moved)
		return newClientOn(t, wc, WithQueueTTL(time.Minute)), moved
	}
	lw, lockMoved := waiter()
	sw, semMoved := waiter()
	// Short leases: the waiters check every 100 ms.
	got := lockAsync(ctx, lw, key, WithTTL(300*time.Millisecond))
	gotSem := make(chan lockResult, 1)
	go func() {
		l, err := sw.Semaphore(key, 1).Acquire(ctx, 1, WithTTL(300*time.Millisecond))
		gotSem <- lockResult{l, err}
	}()
	k, sk := holder.keys(key), semKeys(holder.Semaphore(key, 1))
	waitUntil(t, 5*time.Second, "the waiters to queue", func() bool {
		return cc.ZCard(ctx, k.queue).Val() == 1 && cc.ZCard(ctx, sk.queue).Val() == 1
	})

	src := masterOf(t, cc, holder, key)
	cl.MigrateSlot(t, int(cc.ClusterKeySlot(ctx, k.lock).Val()), src, otherMaster(cl, src), nil)
	for _, w := range []struct {
		what string
		seen *replySeen
		got  <-chan lockResult
		held *Lock
	}{{"Lock", lockMoved, got, l}, {"Semaphore.Acquire", semMoved, gotSem, p}} {
		select {
		case <-w.seen.seen:
		case r := <-w.got:
			t.Fatalf("%s of a waiter queued through MOVED = %v", w.what, r.err)
		case <-time.After(10 * time.Second):
			t.Fatalf("no check of the %s waiter answered MOVED", w.what)
		}
		if err := w.held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		r := testutil.Receive(t, w.got, 10*time.Second, "the waiter to be served")
		if r.err != nil {
			t.Fatalf("%s of a waiter queued through MOVED = %v", w.what, r.err)
		}
		if err := r.l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A Client whose ClusterClient sent nothing since its lock's master was
// failed over (a holder between renewals) still has the dead master in its
// slot map. Its Unlock must reach the promoted replica, not fail with the
// dead master's dial error and leave the lock held, and its waiter
// waiting, for the rest of the lease. With replica acknowledgement too,
// whose calls go to the masters' own clients.
func TestClusterUnlockRightAfterFailover(t *testing.T) {
	forEachFailedOverHolder(t, 1, nil, func(t *testing.T, hs []failedOverHolder, promoted *redis.Client) {
		h := hs[0]
		if err := h.l.Unlock(context.Background()); err != nil {
			t.Fatalf("Unlock after the failover: %v", err)
		}
		if n := promoted.Exists(context.Background(), h.c.keys(h.l.Key()).lock).Val(); n != 0 {
			t.Fatalf("the lock is still held on the promoted master after Unlock")
		}
	})
}

// So must the holder's other calls, each of which may be a program's first
// after the failover: Inspect, TTL, a re-entry, Txn, a semaphore's Inspect
// and Available, an operator's ForceRelease (go-redis would dial the dead
// master until its own reload of the slot map, a minute later), and Extend
// (a lock without renewal has no other way to keep its lease, and would be
// lost while the promoted master holds it).
func TestClusterHolderCallsRightAfterFailover(t *testing.T) {
	ctx := context.Background()
	calls := []struct {
		name string
		call func(c *Client, l *Lock, promoted *redis.Client) error
	}{
		{"Inspect", func(c *Client, l *Lock, promoted *redis.Client) error {
			info, err := c.Inspect(ctx, l.Key())
			if err == nil && info.Owner != l.Token() {
				err = fmt.Errorf("owner %q, want %q", info.Owner, l.Token())
			}
			return err
		}},
		{"TTL", func(c *Client, l *Lock, promoted *redis.Client) error {
			d, err := l.TTL(ctx)
			if err == nil && d <= 0 {
				err = fmt.Errorf("lease left %v", d)
			}
			return err
		}},
		{"re-entry", func(c *Client, l *Lock, promoted *redis.Client) error {
			inner, err := c.TryLock(l.Context(), l.Key())
			if err != nil {
				return err
			}
			return inner.Unlock(ctx)
		}},
		{"Txn", func(c *Client, l *Lock, promoted *redis.Client) error {
			return l.Txn(ctx, func(pipe redis.Pipeliner) error { pipe.Set(ctx, l.SlotKey("txn"), "x", 0); return nil })
		}},
		// A semaphore may share the lock's name, and so its master.
		{"Semaphore.Inspect", func(c *Client, l *Lock, promoted *redis.Client) error {
			info, err := c.Semaphore(l.Key(), 3).Inspect(ctx)
			if err == nil && info.InUse != 0 {
				err = fmt.Errorf("%d permits in use, want 0", info.InUse)
			}
			return err
		}},
		{"Semaphore.Available", func(c *Client, l *Lock, promoted *redis.Client) error {
			n, err := c.Semaphore(l.Key(), 3).Available(ctx)
			if err == nil && n != 3 {
				err = fmt.Errorf("%d permits available, want 3", n)
			}
			return err
		}},
		// An operator's, from a Client idle through the failover: of the
		// lock, and of permits at its name taken on the promoted master.
		{"ForceRelease", func(c *Client, l *Lock, promoted *redis.Client) error {
			if err := c.ForceRelease(ctx, l.Key()); err != nil {
				return err
			}
			if n := promoted.Exists(ctx, c.keys(l.Key()).lock).Val(); n != 0 {
				return errors.New("the lock is still held on the promoted master")
			}
			return nil
		}},
		{"Semaphore.ForceRelease", func(c *Client, l *Lock, promoted *redis.Client) error {
			pc, err := New(promoted)
			if err != nil {
				return err
			}
			defer pc.Close()
			p, err := pc.Semaphore(l.Key(), 3).TryAcquire(ctx, 1)
			if err != nil {
				return err
			}
			return c.Semaphore(l.Key(), 3).ForceRelease(ctx, p.Token())
		}},
		// Last: its lease is checked below.
		{"Extend", func(c *Client, l *Lock, promoted *redis.Client) error { return l.Extend(ctx, 2*time.Minute) }},
	}
	forEachFailedOverHolder(t, len(calls), []LockOption{WithoutRenewal()}, func(t *testing.T, hs []failedOverHolder, promoted *redis.Client) {
		for i, tc := range calls {
			h := hs[i]
			if err := tc.call(h.c, h.l, promoted); err != nil {
				t.Errorf("%s as the first call after the failover: %v", tc.name, err)
			}
		}
		if d := promoted.PTTL(ctx, hs[len(hs)-1].c.keys(hs[len(hs)-1].l.Key()).lock).Val(); d <= time.Minute {
			t.Errorf("lease on the promoted master after Extend = %v, want over a minute", d)
		}
		for i, h := range hs {
			if err := h.l.Unlock(ctx); err != nil && calls[i].name != "ForceRelease" {
				t.Error(err)
			}
		}
	})
}

// A renewal that finds the lock's master dead (go-redis cannot dial it)
// once another has been promoted goes to that one at once, as the holder's
// other calls do, not a tenth of the lease later: go-redis tries the dead
// master for seconds before it gives up, and reloads its slot map on its
// own only after a minute, so every retry counts against the lease. The
// first renewal after the promotion must renew it, with and without
// replica acknowledgement.
func TestClusterRenewalFollowsFailoverAtOnce(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	replica := cl.AddReplica(t, 0)
	dead := cl.Nodes[0].Addr()
	rc := replica.Client(t)
	type holder struct {
		name   string
		renews chan RenewEvent
		l      *Lock
	}
	var holders []holder
	next := 0
	for _, h := range []struct {
		name string
		opts []Option
	}{
		{"plain", nil},
		// The promoted master has no replica left: AcceptAndReport takes it.
		{"replica ack", []Option{WithReplicaAck(1, 200*time.Millisecond, AcceptAndReport)}},
	} {
		o := &renewRecorder{renews: make(chan RenewEvent, 64)}
		cc := cl.Client(t)
		c := newClientOn(t, cc, append(h.opts, WithObserver(o))...)
		key := fmt.Sprintf("renew-failover:%d", next)
		for ; masterOf(t, cc, c, key) != dead; key = fmt.Sprintf("renew-failover:%d", next) {
			next++
		}
		next++
		// Its first renewal is due 10 s after the grant: after the
		// failover, once every master knows of it.
		l := mustLock(t, c, key, WithTTL(30*time.Second))
		waitUntil(t, 10*time.Second, "the grant on the replica", func() bool {
			return rc.Do(ctx, "READONLY").Err() == nil && rc.Exists(ctx, c.keys(key).lock).Val() == 1
		})
		holders = append(holders, holder{h.name, o.renews, l})
	}
	cl.Nodes[0].Kill(t)
	slot := rc.ClusterKeySlot(ctx, holders[0].l.Key()).Val()
	live := []*redis.Client{cl.Nodes[1].Client(t), cl.Nodes[2].Client(t), rc}
	waitUntil(t, 30*time.Second, "every master to know of the promotion", func() bool {
		for _, n := range live {
			//lint:ignore SA1019 go-redis builds its slot map from CLUSTER SLOTS: that is what must name the promoted master
			slots, err := n.ClusterSlots(ctx).Result()
			if err != nil {
				return false
			}
			owned := false
			for _, s := range slots {
				if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
					owned = s.Nodes[0].Addr == replica.Addr()
				}
			}
			if !owned {
				return false
			}
		}
		return true
	})
	for _, h := range holders {
		select {
		case e := <-h.renews:
			t.Fatalf("%s: renewed (%v, %v) before every master knew of the promotion: the failover took too long for this test", h.name, e.Outcome, e.Err)
		default:
		}
	}
	for _, h := range holders {
		e := testutil.Receive(t, h.renews, 30*time.Second, h.name+": the first renewal after the promotion")
		if e.Outcome != RenewOK {
			t.Errorf("%s: first renewal after the promotion: %v (%v), want it renewed on the promoted master", h.name, e.Outcome, e.Err)
		}
		if h.l.Context().Err() != nil {
			t.Errorf("%s: lost: %v", h.name, context.Cause(h.l.Context()))
		}
		_ = h.l.Unlock(ctx)
	}
}

// oneDialClient returns a client of cl that dials a node once per attempt
// (go-redis dials up to five times, 100 ms apart). A command routed to a
// killed master then fails in milliseconds, not after 1.6 s (four
// attempts of five dials), with the same dial error: what the Client does
// after it is the same, sooner.
func oneDialClient(t *testing.T, cl *redistest.Cluster) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), DialerRetries: 1})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// listsAsMaster reports whether a CLUSTER NODES reply lists the node at
// addr as a master.
func listsAsMaster(nodes, addr string) bool {
	for _, l := range strings.Split(nodes, "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && strings.HasPrefix(f[1], addr+"@") && slices.Contains(strings.Split(f[2], ","), "master") {
			return true
		}
	}
	return false
}

// failedOverHolder is a Client, on a cluster client of its own, and the
// lock it holds on a master that has failed over since.
type failedOverHolder struct {
	c *Client
	l *Lock
}

// forEachFailedOverHolder makes n holders (with lockOpts, a lease of a
// minute), through Clients with and without replica acknowledgement on a
// fresh cluster, all on one master; kills that master, waits for the
// replica's promotion, and runs check with the holders and a client of the
// promoted master. The holders send nothing meanwhile: the slot map of
// each one's cluster client still names the dead master.
func forEachFailedOverHolder(t *testing.T, n int, lockOpts []LockOption, check func(t *testing.T, hs []failedOverHolder, promoted *redis.Client)) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"plain", nil},
		// The promoted master has no replica: the writes are reported
		// short of acknowledgements, which fails none of them.
		{"replica ack", []Option{WithReplicaAck(1, 200*time.Millisecond, AcceptAndReport)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each on a cluster of its own, waiting mostly for the
			// failover: the two run side by side.
			t.Parallel()
			ctx := context.Background()
			cl := redistest.StartCluster(t, 3)
			replica := cl.AddReplica(t, 0)
			dead := cl.Nodes[0].Addr()
			rc := replica.Client(t)
			hs := make([]failedOverHolder, n)
			next := 0
			for i := range hs {
				cc := oneDialClient(t, cl)
				c := newClientOn(t, cc, tc.opts...)
				key := fmt.Sprintf("holder-failover:%d", next)
				for ; masterOf(t, cc, c, key) != dead; key = fmt.Sprintf("holder-failover:%d", next) {
					next++
				}
				next++
				hs[i] = failedOverHolder{c, mustLock(t, c, key, append([]LockOption{WithTTL(time.Minute)}, lockOpts...)...)}
				waitUntil(t, 10*time.Second, "the grant on the replica", func() bool {
					return rc.Do(ctx, "READONLY").Err() == nil && rc.Exists(ctx, c.keys(key).lock).Val() == 1
				})
			}
			cl.Nodes[0].Kill(t)
			waitUntil(t, 30*time.Second, "the replica to be promoted", func() bool {
				role, err := rc.Do(ctx, "ROLE").Slice()
				return err == nil && len(role) > 0 && role[0] == "master" &&
					strings.Contains(rc.ClusterInfo(ctx).Val(), "cluster_state:ok")
			})
			// The failover is over once the other masters know of it too:
			// the slot map a holder's Client reloads after its dial error
			// may come from any of them.
			others := []*redis.Client{cl.Nodes[1].Client(t), cl.Nodes[2].Client(t)}
			waitUntil(t, 10*time.Second, "the other masters to learn of the promotion", func() bool {
				for _, o := range others {
					if !listsAsMaster(o.ClusterNodes(ctx).Val(), replica.Addr()) {
						return false
					}
				}
				return true
			})
			check(t, hs, rc)
		})
	}
}

// hungDialCluster returns a client of cl, and hangRedial, which makes one
// master (hung, cl.Nodes[1]) stop answering the client's dials, breaks the
// pub/sub connections to it, and returns once go-redis dials one again.
// unblock lets the dials through (also at cleanup).
func hungDialCluster(t *testing.T, cl *redistest.Cluster) (cc *redis.ClusterClient, hung string, hangRedial, unblock func()) {
	t.Helper()
	hung = cl.Nodes[1].Addr()
	hd := newHungDial(t, hung, cl.Nodes[1].Client(t))
	cc = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Dialer: hd.dial})
	t.Cleanup(func() { hd.unblock(); _ = cc.Close() })
	return cc, hung, hd.hangRedial, hd.unblock
}

// On Redis Cluster a waited lock's pub/sub connection is closed when its
// channel has lingered unused. If that connection is being made again to
// a master that does not answer (go-redis dials it holding the PubSub's
// lock), the close waits for the dial: it must not do so holding the
// lock every other channel's hand-over needs.
func TestClusterClosingAHungSubscriptionDoesNotHoldBackOtherWaiters(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc, hung, hangRedial, unblock := hungDialCluster(t, cl)
	c := newClientOn(t, cc, WithQueueTTL(time.Minute))
	w := c.be.(*node).wake
	w.mu.Lock()
	w.linger = 10 * time.Millisecond
	w.mu.Unlock()
	holder := newClientOn(t, cl.Client(t))
	ctx := context.Background()

	healthy, a, b, la := heldOnTwoMasters(t, cl, cc, c, holder, "closehung:", hung)

	subscribed := func(addr, key string) {
		t.Helper()
		nc := redis.NewClient(&redis.Options{Addr: addr})
		defer nc.Close()
		ch := c.wakeChannel(key)
		waitUntil(t, 5*time.Second, "the waiter of "+key+" to subscribe", func() bool {
			subs, _ := nc.PubSubShardNumSub(ctx, ch).Result()
			return subs[ch] == 1
		})
		waitSubscribed(t, w, ch)
	}
	bctx, cancelB := context.WithCancel(ctx)
	defer cancelB()
	gotB := lockAsync(bctx, c, b)
	subscribed(hung, b)
	gotA := lockAsync(ctx, c, a)
	subscribed(healthy, a)

	// b's master stops answering dials; its pub/sub connection breaks,
	// and go-redis dials it again.
	hangRedial()
	// b's waiter gives up; once its channel has lingered, the connection
	// is closed.
	cancelB()
	<-gotB
	// Closed, or being closed: the close waiting for the dial.
	closedThenOtherServed(t, c, b, la, gotA, unblock, "b's hung subscription")
}

// As above, with the pub/sub connection dialed again to a master that
// accepts it but answers nothing: go-redis holds the PubSub's lock through
// the handshake, which no context ends, only the ReadTimeout (10 s here).
// Closing that connection once its channel has lingered must not wait for
// the handshake holding the lock every other channel's hand-over needs.
func TestClusterClosingASubscriptionInAHungHandshakeDoesNotHoldBackOtherWaiters(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	hung, mute := cl.Nodes[1].Addr(), muteListener(t)
	var muted atomic.Bool
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ReadTimeout: 10 * time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == hung && muted.CompareAndSwap(true, false) {
				addr = mute // the next connection to hung only
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
	t.Cleanup(func() { _ = cc.Close() })
	c := newClientOn(t, cc, WithQueueTTL(time.Minute))
	w := c.be.(*node).wake
	w.mu.Lock()
	w.linger = 10 * time.Millisecond
	w.mu.Unlock()
	holder := newClientOn(t, cl.Client(t))
	ctx := context.Background()

	_, a, b, la := heldOnTwoMasters(t, cl, cc, c, holder, "closehandshake:", hung)
	bctx, cancelB := context.WithCancel(ctx)
	defer cancelB()
	gotB := lockAsync(bctx, c, b)
	waitSubscribed(t, w, c.wakeChannel(b))
	gotA := lockAsync(ctx, c, a)
	waitSubscribed(t, w, c.wakeChannel(a))

	// b's pub/sub connection breaks; go-redis dials it again, and its
	// handshake hangs.
	ps := shardConn(w, c.wakeChannel(b))
	muted.Store(true)
	if err := cl.Nodes[1].Client(t).ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the handshake of b's connection dialed again", func() bool { return inPubSubCall(ps, "initConn") })
	// b's waiter gives up; once its channel has lingered, the connection
	// is closed.
	cancelB()
	<-gotB
	closedThenOtherServed(t, c, b, la, gotA, func() {}, "b's subscription in a hung handshake")
}

// Client.Close stops the pub/sub connections. If one of them is being
// dialed again to a master that does not answer (go-redis holds the
// PubSub's lock while it dials), Close must not wait for that dial: the
// doc promises 5 s at most in all when Redis does not answer.
func TestClusterCloseNotHeldByAHungSubscription(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc, hung, hangRedial, unblock := hungDialCluster(t, cl)
	c := newClientOn(t, cc, WithQueueTTL(time.Minute))
	w := c.be.(*node).wake
	holder := newClientOn(t, cl.Client(t))
	ctx := context.Background()

	_, _, b, _ := heldOnTwoMasters(t, cl, cc, c, holder, "closeclienthung:", hung)

	bctx, cancelB := context.WithCancel(ctx)
	defer cancelB()
	gotB := lockAsync(bctx, c, b)
	waitSubscribed(t, w, c.wakeChannel(b))

	hangRedial()

	closed := make(chan struct{})
	go func() {
		_ = c.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(6 * time.Second):
		t.Error("Client.Close held by the redial of a hung pub/sub connection")
		unblock()
		<-closed
	}
	cancelB()
	<-gotB
}

// When a waited lock's slot moves to another master, its subscription is
// made again there (rebind). A new master that does not answer (cut off
// from this client) must hold back only that lock's waiters: a hand-over
// on a healthy master wakes its waiter at once.
func TestClusterRebindToAHungMasterDoesNotHoldBackOtherWaiters(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc, proxy, hung := proxiedToOneMaster(t, cl)
	c := newClientOn(t, cc, WithQueueTTL(time.Minute))
	w := c.be.(*node).wake
	holder := newClientOn(t, cl.Client(t))
	ctx := context.Background()

	byMaster := keysPerMaster(t, cl, cc, c, "rebindhung:", 1)
	healthy, moving := cl.Nodes[0].Addr(), cl.Nodes[2].Addr()
	a, b := byMaster[healthy][0], byMaster[moving][0]
	la := mustLock(t, holder, a, WithTTL(time.Minute))
	lb := mustLock(t, holder, b, WithTTL(time.Minute))
	t.Cleanup(func() { _ = lb.Unlock(context.Background()) })
	gotA := lockAsync(ctx, c, a)
	bctx, cancelB := context.WithCancel(ctx)
	defer cancelB()
	gotB := lockAsync(bctx, c, b)
	waitSubscribed(t, w, c.wakeChannel(a))
	waitSubscribed(t, w, c.wakeChannel(b))

	// The client's pooled connection to the hung master is open: the next
	// connection it opens there is b's subscription, once b's slot moved.
	l, err := c.TryLock(ctx, byMaster[hung][0])
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	frozen := proxy.FreezeOn(func(p []byte) bool { return bytes.Contains(bytes.ToLower(p), []byte("hello")) })
	t.Cleanup(proxy.Thaw)
	slot := int(cc.ClusterKeySlot(ctx, c.wakeChannel(b)).Val())
	cl.MigrateSlot(t, slot, moving, hung, nil)
	testutil.Receive(t, frozen, 10*time.Second, "b's subscription to be made on its new master")

	// b's new master is silent now. a's hand-over must still wake its
	// waiter.
	_ = handOverWithin(t, la, gotA, 500*time.Millisecond, 10*time.Second, "the waiter of a, on a healthy master").Unlock(ctx)
	proxy.Thaw()
	cancelB()
	<-gotB
}

// An Unlock sent while its lock's slot is being migrated is refused with
// TRYAGAIN (its script names keys the slot holds on two masters, or not
// yet at all): it did not run. Unlock waits for the migration to end and
// releases the lock then, handing it to the next waiter, rather than
// give it up and leave it held, unrenewed, for the rest of its lease. The
// same goes for a semaphore's permits.
func TestClusterUnlockDuringSlotMigration(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	// Each holder on a ClusterClient of its own, to see its own release
	// refused.
	lockSeen, semSeen := newReplySeen("TRYAGAIN"), newReplySeen("TRYAGAIN")
	lcc, scc := cl.Client(t), cl.Client(t)
	lcc.AddHook(lockSeen)
	scc.AddHook(semSeen)
	holder, semHolder := newClientOn(t, lcc), newClientOn(t, scc)
	waiter := newClientOn(t, cl.Client(t), WithQueueTTL(time.Minute))
	// One slot: "resharding}sem" has the hash tag of "resharding".
	const key, semKey = "resharding", "resharding}sem"
	l := mustLock(t, holder, key) // the default 30 s lease
	permits, err := semHolder.Semaphore(semKey, 1).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	got := lockAsync(ctx, waiter, key)
	k := holder.keys(key)
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return cc.ZCard(ctx, k.queue).Val() == 1 })

	src := masterOf(t, cc, holder, key)
	dst := otherMaster(cl, src)
	unlocked, semUnlocked := make(chan error, 1), make(chan error, 1)
	cl.MigrateSlot(t, int(cc.ClusterKeySlot(ctx, k.lock).Val()), src, dst, func() {
		go func() { unlocked <- l.Unlock(ctx) }()
		go func() { semUnlocked <- permits.Unlock(ctx) }()
		testutil.Receive(t, lockSeen.seen, 10*time.Second, "the lock's release refused with TRYAGAIN")
		testutil.Receive(t, semSeen.seen, 10*time.Second, "the permits' release refused with TRYAGAIN")
	})

	if err := testutil.Receive(t, unlocked, 10*time.Second, "Unlock"); err != nil {
		t.Fatalf("Unlock during the migration = %v (the lock's Context: %v)", err, context.Cause(l.Context()))
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrReleased) {
		t.Fatalf("the lock's Context ended with %v, want ErrReleased", cause)
	}
	if err := testutil.Receive(t, semUnlocked, 10*time.Second, "the permits' Unlock"); err != nil {
		t.Fatalf("Unlock of permits during the migration = %v", err)
	}
	// Well within the 30 s lease a lock given up would keep.
	r := testutil.Receive(t, got, 10*time.Second, "the waiter to get the lock")
	if r.err != nil {
		t.Fatalf("the waiter's Lock = %v", r.err)
	}
	// The fence counter moved with the lock.
	if r.l.Fence() <= l.Fence() {
		t.Errorf("fence after the migration %d, not above the one before, %d", r.l.Fence(), l.Fence())
	}
	if err := r.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := waiter.Semaphore(semKey, 1).TryAcquire(ctx, 1)
	if err != nil {
		t.Fatalf("the permits released during the migration: TryAcquire = %v", err)
	}
	if err := p.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A release sent to the master its lock's slot has just left is answered
// MOVED once go-redis's redirections are spent (here: none are followed).
// It did not run, and go-redis reloads its slot map: Unlock sends it
// again, as one refused with TRYAGAIN, rather than give the lock up and
// leave it held for the rest of its lease. Permits alike. A Txn's WATCH
// meets MOVED too, and ClusterClient.Watch then returns without calling
// fn, nor reloading the map: Txn looks again once it has reloaded it.
func TestClusterHolderThroughMoved(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	other := newClientOn(t, cc)
	// One slot: the semaphore and "moved}txn" have the hash tag of "moved".
	const key, txnKey = "moved", "moved}txn"
	k := other.keys(key)
	src := masterOf(t, cc, other, key)
	// Each hold on a client of its own, whose slot map only its own
	// command can reload; a long lease, so that no renewal comes first.
	holder := func(take func(c *Client) (*Lock, error)) (*Lock, *replySeen) {
		hc := movedClient(t, cl)
		moved := newReplySeen("MOVED")
		hc.AddHook(moved)
		l, err := take(newClientOn(t, hc))
		if err != nil {
			t.Fatal(err)
		}
		return l, moved
	}
	l, lockMoved := holder(func(c *Client) (*Lock, error) { return c.Lock(ctx, key, WithTTL(30*time.Second)) })
	p, semMoved := holder(func(c *Client) (*Lock, error) { return c.Semaphore(key, 1).Acquire(ctx, 1, WithTTL(30*time.Second)) })
	// The WATCH goes through a master's own client, which the hook does
	// not see.
	tl, _ := holder(func(c *Client) (*Lock, error) { return c.Lock(ctx, txnKey, WithTTL(30*time.Second)) })
	cl.MigrateSlot(t, int(cc.ClusterKeySlot(ctx, k.lock).Val()), src, otherMaster(cl, src), nil)

	for _, h := range []struct {
		what  string
		l     *Lock
		moved *replySeen
	}{{"lock", l, lockMoved}, {"permits", p, semMoved}} {
		if err := h.l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock of the %s after the slot moved = %v", h.what, err)
		}
		select {
		case <-h.moved.seen:
		default:
			t.Fatalf("the release of the %s never met MOVED", h.what)
		}
	}
	if r, err := other.TryLock(ctx, key); err != nil {
		t.Fatalf("TryLock after the release = %v", err)
	} else {
		_ = r.Unlock(ctx)
	}
	if r, err := other.Semaphore(key, 1).TryAcquire(ctx, 1); err != nil {
		t.Fatalf("TryAcquire after the release = %v", err)
	} else {
		_ = r.Unlock(ctx)
	}

	written := tl.SlotKey("txn")
	if err := tl.Txn(ctx, func(pipe redis.Pipeliner) error { pipe.Set(ctx, written, "x", 0); return nil }); err != nil {
		t.Fatalf("Txn after its slot moved = %v", err)
	}
	if v := cc.Get(ctx, written).Val(); v != "x" {
		t.Fatalf("the Txn's write: %q, want %q", v, "x")
	}
	if err := tl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A queued waiter that gives up while its lock's slot is being migrated
// leaves the queue all the same: its leaving is refused with TRYAGAIN
// until the migration ends, and sent again then. Left in the queue, it
// would be handed the lock at the next release, and nobody would hold it
// for that lease. With a ClusterClient whose redirections are spent (here:
// none are followed), the leaving is answered ASK while the slot is being
// migrated (the keys are gone from the source), and MOVED once the slot
// has moved, until go-redis has reloaded its slot map. Neither ran: it is
// sent again until it does.
func TestClusterWaiterGivingUpDuringSlotMigrationLeavesTheQueue(t *testing.T) {
	for _, tc := range []struct {
		refusal string // the leaving's first answer
		client  func(*testing.T, *redistest.Cluster) *redis.ClusterClient
	}{
		{"TRYAGAIN", func(t *testing.T, cl *redistest.Cluster) *redis.ClusterClient { return cl.Client(t) }},
		{"ASK", movedClient},
	} {
		t.Run(tc.refusal, func(t *testing.T) {
			ctx := context.Background()
			cl := redistest.StartCluster(t, 3)
			cc := cl.Client(t)
			holder, other := newClientOn(t, cc), newClientOn(t, cl.Client(t))
			wcc := tc.client(t, cl)
			leaving := newReplySeen(tc.refusal)
			wcc.AddHook(leaving)
			// A long queue TTL: the waiter checks only every 10 s, so its
			// only command during the migration is its leaving, and a lock
			// handed over to it would stay for the whole 30 s lease.
			waiter := newClientOn(t, wcc, WithQueueTTL(time.Minute))
			const key = "resharding"
			l := mustLock(t, holder, key)
			wctx, giveUp := context.WithCancel(ctx)
			defer giveUp()
			got := lockAsync(wctx, waiter, key)
			k := holder.keys(key)
			waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return cc.ZCard(ctx, k.queue).Val() == 1 })

			src := masterOf(t, cc, holder, key)
			cl.MigrateSlot(t, int(cc.ClusterKeySlot(ctx, k.lock).Val()), src, otherMaster(cl, src), func() {
				giveUp()
				testutil.Receive(t, leaving.seen, 10*time.Second, "the waiter's leaving answered "+tc.refusal)
			})
			if r := testutil.Receive(t, got, 10*time.Second, "the waiter to give up"); !errors.Is(r.err, context.Canceled) {
				t.Fatalf("the waiter's Lock = %v, want context.Canceled", r.err)
			}
			// Lock waits for its leaving up to endedUnlockWait: past that,
			// it goes on through the migration in the background.
			waitUntil(t, 10*time.Second, "the waiter to leave the queue", func() bool { return cc.ZCard(ctx, k.queue).Val() == 0 })
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			l2, err := other.TryLock(ctx, key)
			if err != nil {
				info, _ := other.Inspect(ctx, key)
				t.Fatalf("TryLock after the release = %v (Inspect: %+v)", err, info)
			}
			if err := l2.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A Lock that would wait, begun while its lock's slot is being migrated,
// waits for the migration to end: its checks are refused with TRYAGAIN
// (they did not run), and it checks again, as a waiter already queued
// does, rather than fail. A TryLock, which does not wait, returns the
// error. Permits alike.
func TestClusterLockBegunDuringSlotMigrationWaits(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	// A Client each, to see each one's own check refused.
	var clients [3]*Client
	var refused [3]*replySeen
	for i := range clients {
		rc := cl.Client(t)
		refused[i] = newReplySeen("TRYAGAIN")
		rc.AddHook(refused[i])
		clients[i] = newClientOn(t, rc)
	}
	const key, semKey = "resharding", "resharding}sem" // one slot
	k := clients[0].keys(key)
	src := masterOf(t, cc, clients[0], key)
	var got, gotPermits <-chan lockResult
	cl.MigrateSlot(t, int(cc.ClusterKeySlot(ctx, k.lock).Val()), src, otherMaster(cl, src), func() {
		if _, err := clients[0].TryLock(ctx, key); !redis.IsTryAgainError(err) {
			t.Errorf("TryLock during the migration = %v, want TRYAGAIN", err)
		}
		got = lockAsync(ctx, clients[1], key)
		gotPermits = inBackground(func() (*Lock, error) { return clients[2].Semaphore(semKey, 1).Acquire(ctx, 1) })
		testutil.Receive(t, refused[1].seen, 10*time.Second, "the Lock's check refused with TRYAGAIN")
		testutil.Receive(t, refused[2].seen, 10*time.Second, "the Acquire's check refused with TRYAGAIN")
	})
	for what, ch := range map[string]<-chan lockResult{"Lock": got, "Semaphore.Acquire": gotPermits} {
		r := testutil.Receive(t, ch, 10*time.Second, what+" to return once the migration ended")
		if r.err != nil {
			t.Fatalf("%s begun during the migration = %v", what, r.err)
		}
		if err := r.l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// closedThenOtherServed waits until the connection of b's channel is
// closed, or being closed (stuck in go-redis's PubSub.Close), then
// releases la and checks that the waiter of a (gotA), whose channel is on
// a healthy master, gets it at once, not held back by the close of what
// (unblock lets that close go if it does).
func closedThenOtherServed(t *testing.T, c *Client, b string, la *Lock, gotA <-chan lockResult, unblock func(), what string) {
	t.Helper()
	ctx := context.Background()
	w := c.be.(*node).wake
	waitUntil(t, 10*time.Second, "b's connection to be closed", func() bool {
		if w.mu.TryLock() {
			_, open := w.shards[c.wakeChannel(b)]
			w.mu.Unlock()
			if !open {
				return true
			}
		}
		buf := make([]byte, 1<<20)
		stack := buf[:runtime.Stack(buf, true)]
		return bytes.Contains(stack, []byte("(*wakeups).unsubscribe")) && bytes.Contains(stack, []byte("(*PubSub).Close"))
	})
	released := time.Now()
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-gotA:
		if r.err != nil {
			t.Fatal(r.err)
		}
		_ = r.l.Unlock(ctx)
		if d := time.Since(released); d > time.Second {
			t.Errorf("the waiter of a, on a healthy master, got its lock %v after the release", d.Round(time.Millisecond))
		}
	case <-time.After(3 * time.Second):
		t.Errorf("the waiter of a, on a healthy master, held back by the close of %s", what)
		unblock()
		if r := <-gotA; r.l != nil { // once the close is let go, or at the handshake's ReadTimeout
			_ = r.l.Unlock(ctx)
		}
	}
}

// A plain Client pointed at one node of a Redis Cluster holds a lock of a
// slot that node serves, with a waiter queued, when the slot moves to
// another node: from then on their calls are answered MOVED, every time
// (the client follows no redirection). The waiter's wait ends at its next
// check, not when its queue entry runs out, and Unlock returns the error
// at once, not after sending the release again for migrationWait.
func TestClusterPlainClientAfterItsSlotMoved(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	src := cl.Addrs()[0]
	rdb := redis.NewClient(&redis.Options{Addr: src})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClientOn(t, rdb)
	waiter := newClientOn(t, rdb, WithQueueTTL(time.Minute))
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("here:%d", i); masterOf(t, cc, c, k) == src {
			key = k
		}
	}
	l := mustLock(t, c, key)
	// A short lease: the waiter checks every 100 ms.
	got := lockAsync(ctx, waiter, key, WithTTL(300*time.Millisecond))
	k := c.keys(key)
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return cc.ZCard(ctx, k.queue).Val() == 1 })
	cl.MigrateSlot(t, int(cc.ClusterKeySlot(ctx, k.lock).Val()), src, otherMaster(cl, src), nil)
	r := testutil.Receive(t, got, 5*time.Second, "the waiter's Lock to return")
	if _, moved := redis.IsMovedError(r.err); !moved {
		t.Fatalf("Lock of a waiter whose slot moved = %v, want the MOVED error", r.err)
	}
	start := time.Now()
	err := l.Unlock(ctx)
	if _, moved := redis.IsMovedError(err); !moved {
		t.Fatalf("Unlock of a lock whose slot moved = %v, want the MOVED error", err)
	}
	if d := time.Since(start); d > migrationWait/2 {
		t.Errorf("Unlock returned MOVED after %v, want at once", d)
	}
}

// A release answered ASK while its slot is being migrated (by a
// ClusterClient whose redirections are spent: here, none are followed)
// did not run, as one refused with TRYAGAIN. Once the lease it left
// behind has run out, Unlock again finds the lock gone and reports it
// lost, not nil as after a release that may have run.
func TestClusterUnlockAgainAfterReleaseAnsweredASK(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	hc := movedClient(t, cl)
	// The Unlock's ctx ends at its release's first ASK, not after the 5 s
	// that a release refused so is sent again for.
	asked := &cancelAtAsk{}
	hc.AddHook(asked)
	c := newClientOn(t, hc)
	const key = "asked"
	l := mustLock(t, c, key, WithTTL(time.Second))
	k := c.keys(key)
	src := masterOf(t, cc, c, key)
	cl.MigrateSlot(t, int(cc.ClusterKeySlot(ctx, k.lock).Val()), src, otherMaster(cl, src), func() {
		uctx, cancel := context.WithCancel(ctx)
		defer cancel()
		asked.cancel.Store(&cancel)
		if err := l.Unlock(uctx); !isAskError(err) {
			t.Fatalf("Unlock during the migration = %v, want the ASK error", err)
		}
	})
	waitUntil(t, 5*time.Second, "the lease to run out", func() bool { return cc.Exists(ctx, k.lock).Val() == 0 })
	if err := l.Unlock(ctx); !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrLockLost) {
		t.Errorf("Unlock again after the lease ran out = %v, want ErrNotHeld and ErrLockLost", err)
	}
}

// cancelAtAsk calls cancel, once it is set, when a command is answered
// ASK, before the command returns.
type cancelAtAsk struct {
	testutil.PassHook
	cancel atomic.Pointer[context.CancelFunc]
}

func (h *cancelAtAsk) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cancel := h.cancel.Load(); cancel != nil && isAskError(err) {
			(*cancel)()
		}
		return err
	}
}

// isAskError reports whether err is an ASK redirection.
func isAskError(err error) bool {
	_, ask := redis.IsAskError(err)
	return ask
}

// When a waited lock's slot moves, rebind subscribes again the channels of
// that lock's shard alone, and closes the shard's old connection, which the
// server left open with no subscription. Another channel of the Client's,
// subscribed on a shard of its own, must not be subscribed once more on
// the new connection (here both on the same master, where that would
// succeed unseen: each hand-over would then come twice, and the channel
// would stay subscribed after its own shard is dropped).
func TestClusterRebindSubscribesOnlyItsOwnChannels(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	cc := cl.Client(t)
	c := newClientOn(t, cc)
	waiting := newClientOn(t, cl.Client(t), WithQueueTTL(time.Minute))
	const moving = "rebind"
	staying := keyOffMaster(t, cc, c, moving)
	src, dst := masterOf(t, cc, c, moving), masterOf(t, cc, c, staying)
	lm := mustLock(t, c, moving, WithTTL(20*time.Second))
	ls := mustLock(t, c, staying, WithTTL(20*time.Second))
	gotM, gotS := lockAsync(ctx, waiting, moving), lockAsync(ctx, waiting, staying)
	srcNode := redis.NewClient(&redis.Options{Addr: src})
	defer srcNode.Close()
	dstNode := redis.NewClient(&redis.Options{Addr: dst})
	defer dstNode.Close()
	chM, chS := waiting.wakeChannel(moving), waiting.wakeChannel(staying)
	subscribed := func(node *redis.Client, ch string) int64 {
		subs, _ := node.PubSubShardNumSub(ctx, ch).Result()
		return subs[ch]
	}
	waitUntil(t, 5*time.Second, "both waiters to subscribe", func() bool {
		return subscribed(srcNode, chM) == 1 && subscribed(dstNode, chS) == 1
	})
	// The moved waiter's connection to the source: the one there with a
	// sharded subscription.
	conns := func(node *redis.Client) []string {
		list, err := node.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(list, "\n")
	}
	var old string
	for _, line := range conns(srcNode) {
		if strings.Contains(line, " ssub=1 ") {
			old, _, _ = strings.Cut(line, " ") // id=N
		}
	}
	if old == "" {
		t.Fatal("no subscribed connection on the source master")
	}

	cl.MigrateSlot(t, int(cc.ClusterKeySlot(ctx, c.keys(moving).lock).Val()), src, dst, nil)
	waitUntil(t, 5*time.Second, "the moved waiter's subscription on the new master", func() bool {
		return subscribed(dstNode, chM) == 1
	})
	waitUntil(t, 5*time.Second, "the old connection to close", func() bool {
		return !slices.ContainsFunc(conns(srcNode), func(line string) bool { return strings.HasPrefix(line, old+" ") })
	})
	// The hand-over comes on the new connection, which then has every
	// subscription rebind sent on it.
	releaseAndWaitHandOver(t, lm, gotM, "after the migration")
	if n := subscribed(dstNode, chS); n != 1 {
		t.Errorf("the other waiter's channel has %d subscriptions on its master, want 1 (its own)", n)
	}
	releaseAndWaitHandOver(t, ls, gotS, "the other lock")
}
