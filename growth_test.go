package dlock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

// A Client lives as long as its service and locks keys that are often
// unique (order ids): what it keeps per key, lock, waiter or error must go
// when they do. These tests take many distinct keys every way a Client
// can, then check that its structures are back to empty, that Redis has
// no subscription left, and no key but the fence counters and hold
// statistics, which expire.

// clientState reports what the Client keeps for its keys, by structure:
// each must be zero once nothing is held or waited for (the pub/sub
// channels once their linger is over).
func clientState(c *Client) map[string]int {
	s := map[string]int{}
	c.dog.mu.Lock()
	s["watchdog holds"] = len(c.dog.holds)
	c.dog.mu.Unlock()
	if c.ext.local != nil {
		s["local queue keys"] = c.ext.local.size()
	}
	n := c.be.(*node)
	w := n.wake
	w.mu.Lock()
	s["wake channels"] = len(w.channels)
	shards := 0
	for name := range w.shards {
		if name != "" { // the shared connection of a non-cluster Client stays
			shards++
		}
	}
	s["wake cluster shards"] = shards
	for _, cs := range w.channels {
		s["early hand-overs"] += len(cs.early) + len(cs.earlyOrder)
	}
	w.mu.Unlock()
	n.batch.mu.Lock()
	s["batched calls pending"] = len(n.batch.pending)
	n.batch.mu.Unlock()
	return s
}

// shortLinger makes c drop its idle pub/sub channels at once.
func shortLinger(c *Client) {
	w := c.be.(*node).wake
	w.mu.Lock()
	w.linger = time.Millisecond
	w.mu.Unlock()
}

// waitStateEmpty waits until every structure of clientState is empty.
func waitStateEmpty(t *testing.T, c *Client) {
	t.Helper()
	var last map[string]int
	deadline := time.Now().Add(5 * time.Second)
	for {
		last = clientState(c)
		empty := true
		for _, n := range last {
			empty = empty && n == 0
		}
		if empty {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Client still keeps state for keys gone: %v", last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkRedisClean fails unless Redis (each master of a cluster) has no
// pub/sub channel left and no key but fence counters and hold statistics,
// each with an expiry.
func checkRedisClean(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(context.Background(), func(_ context.Context, m *redis.Client) error {
			checkRedisClean(t, m)
			return nil
		})
		return
	}
	ctx := context.Background()
	waitUntil(t, 5*time.Second, "the pub/sub channels to be unsubscribed on the server", func() bool {
		classic, err := rdb.PubSubChannels(ctx, "*").Result()
		if err != nil {
			t.Error(err)
			return true
		}
		sharded, err := rdb.PubSubShardChannels(ctx, "*").Result()
		if err != nil {
			t.Error(err)
			return true
		}
		return len(classic)+len(sharded) == 0
	})
	// A Client keeps one pub/sub connection (on a cluster, none once its
	// waited channels are gone), whatever the keys it waited for.
	waitUntil(t, 5*time.Second, "the pub/sub connections to close", func() bool {
		list, err := rdb.ClientList(ctx).Result()
		if err != nil {
			t.Error(err)
			return true
		}
		return strings.Count(list, " sub=0 psub=0 ssub=0 ") >= strings.Count(list, "\n")-1
	})
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		if !strings.HasSuffix(key, ":fence") && !strings.HasSuffix(key, ":stats") {
			t.Errorf("key %q left behind", key)
			continue
		}
		if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 {
			t.Errorf("key %q has no expiry (%v)", key, ttl)
		}
	}
	if err := iter.Err(); err != nil {
		t.Error(err)
	}
}

// waitGoroutinesBack waits until no more than n goroutines run: none is
// left per key, waiter or error once they are gone.
func waitGoroutinesBack(t *testing.T, n int) {
	t.Helper()
	var now int
	deadline := time.Now().Add(5 * time.Second)
	for now = runtime.NumGoroutine(); now > n; now = runtime.NumGoroutine() {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before the keys were taken:\n%s", now, n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// within polls cond until it holds, for up to d; an error if it did not.
// For the goroutines of a test, which cannot fail it themselves.
func within(d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// heapAfterGC is the live heap.
func heapAfterGC() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// inParallel runs f(i) for i in [0, n) on a few goroutines.
func inParallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	const workers = 8
	for g := range workers {
		wg.Go(func() {
			for i := g; i < n; i += workers {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

// Uncontended locks of distinct keys, with every feature that keeps state
// per key on: nothing stays in the Client or in Redis, and the heap does
// not grow with the number of keys.
func TestDistinctKeysLeaveNoState(t *testing.T) {
	c, rdb, _ := newTestClient(t, WithLocalQueue(), WithObserver(NopObserver{}))
	ctx := context.Background()
	const keys = 20000
	round := func(prefix string) func(i int) error {
		return func(i int) error {
			key := fmt.Sprintf("%s:%d", prefix, i)
			var l *Lock
			var err error
			switch i % 4 {
			case 0:
				l, err = c.Lock(ctx, key)
			case 1:
				l, err = c.Lock(ctx, key, WithoutRenewal(), WithAdaptiveTTL(1.5, 0))
			case 2:
				l, err = c.RWMutex(key).RLock(ctx)
			case 3:
				l, err = c.Semaphore(key, 3).Acquire(ctx, 2)
			}
			if err != nil {
				return err
			}
			// Refused: locally, or by Redis.
			var refused error
			switch i % 4 {
			case 0, 1:
				_, refused = c.TryLock(ctx, key)
			case 2:
				_, refused = c.RWMutex(key).TryLock(ctx)
			case 3:
				_, refused = c.Semaphore(key, 3).TryAcquire(ctx, 2)
			}
			if !errors.Is(refused, ErrNotObtained) {
				return fmt.Errorf("a second hold of %s = %v", key, refused)
			}
			return l.Unlock(ctx)
		}
	}
	inParallel(t, 1000, round("warm")) // connections, scripts, pools
	waitStateEmpty(t, c)
	before, goroutines := heapAfterGC(), runtime.NumGoroutine()
	inParallel(t, keys, round("order"))
	waitStateEmpty(t, c)
	after := heapAfterGC()
	waitGoroutinesBack(t, goroutines)
	// A map entry per key (80 bytes and more) would not pass this. The
	// margin is for the connection pool, which may still grow by some
	// connections of 64 KiB of buffers each.
	if grown := int64(after) - int64(before); grown > 48*keys {
		t.Errorf("the heap grew by %d bytes over %d distinct keys (%d a key)", grown, keys, grown/keys)
	}
	checkRedisClean(t, rdb)
	if n := rdb.DBSize(ctx).Val(); n > 2*(keys+1000) {
		t.Errorf("%d keys in Redis after %d distinct locks", n, keys+1000)
	}
}

// Contended locks of distinct keys: waiters that are handed the lock,
// waiters that give up, waiters in the local queue. Each subscribes its
// key's hand-over channel: every subscription must go once its linger is
// over, on the Client and on the server.
func TestDistinctContendedKeysLeaveNoState(t *testing.T) {
	srv := redistest.Start(t)
	contendDistinctKeys(t, srv.Client(t), srv.Client(t), 400)
}

// On a cluster each waited key has a pub/sub connection of its own.
func TestClusterDistinctContendedKeysLeaveNoState(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	contendDistinctKeys(t, cl.Client(t), cl.Client(t), 100)
}

func contendDistinctKeys(t *testing.T, rdb, rdb2 redis.UniversalClient, keys int) {
	c := newClientOn(t, rdb, WithLocalQueue(), WithObserver(NopObserver{}))
	other := newClientOn(t, rdb2)
	shortLinger(c)
	ctx := context.Background()
	// Started: the Clients' watchdogs, c's shared pub/sub reader.
	warm := lockThenUnlock(ctx, other, "warm")
	if err := <-warm; err != nil {
		t.Fatal(err)
	}
	goroutines := runtime.NumGoroutine() + 2
	inParallel(t, keys, func(i int) error {
		key := fmt.Sprintf("order:%d", i)
		held, err := other.Lock(ctx, key)
		if err != nil {
			return err
		}
		// Refused by Redis, then given up while queued there: each
		// through c's local queue, which must let the key go.
		if _, err := c.TryLock(ctx, key); !errors.Is(err, ErrNotObtained) {
			return fmt.Errorf("TryLock while held = %v", err)
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, err = c.Lock(wctx, key)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("Lock while held = %v", err)
		}
		got := make(chan error, 2)
		// Two goroutines of c: one waits in Redis, one in the local queue.
		for range 2 {
			go func() {
				l, err := c.Lock(ctx, key)
				if err == nil {
					err = l.Unlock(ctx)
				}
				got <- err
			}()
		}
		if i%2 == 0 {
			// A waiter that gives up while queued in Redis.
			sem, err := other.Semaphore(key, 1).Acquire(ctx, 1)
			if err != nil {
				return err
			}
			wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			_, err = c.Semaphore(key, 1).Acquire(wctx, 1)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("Acquire while held = %v", err)
			}
			if err := sem.Unlock(ctx); err != nil {
				return err
			}
		}
		// Both wait before the hand-over: one queued in Redis (and
		// subscribed), one in the local queue.
		if err := within(5*time.Second, func() bool {
			n, _ := c.ext.local.waiting(key)
			return n == 1 && rdb.ZCard(ctx, c.keys(key).queue).Val() == 1
		}); err != nil {
			return fmt.Errorf("%s: waiting for the waiters to queue: %w", key, err)
		}
		if err := held.Unlock(ctx); err != nil {
			return err
		}
		for range 2 {
			if err := <-got; err != nil {
				return err
			}
		}
		return nil
	})
	waitStateEmpty(t, c)
	waitStateEmpty(t, other)
	checkRedisClean(t, rdb)
	waitGoroutinesBack(t, goroutines)
}

// Holds of distinct keys that end badly: a release whose reply is lost
// (the hold is given up), a lock taken away by an operator, a fixed lease
// run out, a Do whose function panics, a re-entered lock. Each goes from
// the Client with its hold.
func TestDistinctKeysEndedBadlyLeaveNoState(t *testing.T) {
	srv := redistest.Start(t)
	c, rdb := hookedClient(t, srv.Addr(), lostReleaseReply{}, WithLocalQueue(), WithObserver(NopObserver{}))
	ctx := context.Background()
	const keys = 300
	inParallel(t, keys, func(i int) error {
		key := fmt.Sprintf("order:%d", i)
		switch i % 6 {
		case 0: // taken away by an operator, found gone by Unlock
			l, err := c.Lock(ctx, key)
			if err != nil {
				return err
			}
			if err := c.ForceRelease(ctx, key); err != nil {
				return err
			}
			if err := l.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
				return fmt.Errorf("Unlock of a lock taken away = %v", err)
			}
		case 1: // its fixed lease runs out, never unlocked
			l, err := c.Lock(ctx, key, WithTTL(200*time.Millisecond), WithoutRenewal())
			if err != nil {
				return err
			}
			<-l.Done()
			// Redis drops it within the drift margin.
			if err := within(time.Second, func() bool { return rdb.Exists(ctx, c.keys(key).lock).Val() == 0 }); err != nil {
				return fmt.Errorf("%s: its lease run out in Redis: %w", key, err)
			}
		case 2: // re-entered
			l, err := c.Lock(ctx, key)
			if err != nil {
				return err
			}
			inner, err := c.Lock(l.Context(), key)
			if err != nil {
				return err
			}
			if err := inner.Unlock(ctx); err != nil {
				return err
			}
			return l.Unlock(ctx)
		case 3: // Do's function panics
			func() {
				defer func() { _ = recover() }()
				_ = c.Do(ctx, key, func(context.Context) error { panic("work failed") })
			}()
		case 4: // the release's reply lost: the hold is given up
			l, err := c.Lock(ctx, "lost-reply:"+key)
			if err != nil {
				return err
			}
			if err := l.Unlock(ctx); err == nil {
				return errors.New("Unlock with its reply lost = nil")
			}
			<-l.Done()
		case 5: // Unlock with its context ended
			l, err := c.Lock(ctx, key)
			if err != nil {
				return err
			}
			dead, cancel := context.WithCancel(ctx)
			cancel()
			_ = l.Unlock(dead)
		}
		return nil
	})
	waitStateEmpty(t, c)
	checkRedisClean(t, rdb)
}

// lostReleaseReply loses the reply of each release of a key named
// lost-reply:*, after Redis ran it.
type lostReleaseReply struct{ testutil.PassHook }

func (lostReleaseReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if lostReply(cmd) {
			err = errors.New("reply lost")
			cmd.SetErr(err)
		}
		return err
	}
}

func (lostReleaseReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if lostReply(cmd) {
				cmd.SetErr(errors.New("reply lost"))
			}
		}
		return err
	}
}

func lostReply(cmd redis.Cmder) bool {
	a := cmd.Args()
	if len(a) < 4 || a[0] != "evalsha" {
		return false
	}
	sha, _ := a[1].(*string)
	key, _ := a[3].(*string)
	return sha != nil && *sha == releaseEval.sha && key != nil && strings.Contains(*key, "{lost-reply:")
}
