package dlock

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

// Script replies, and pub/sub, reach go-redis differently over RESP2 and
// RESP3: a Lua false is a nil in one and a boolean in the other, a PING on
// a subscribed connection is an array or a status. Many deployments set
// Protocol: 2 (proxies that speak RESP2 only), and a server without HELLO
// (renamed, or a proxy that lacks it) leaves a Protocol 3 client on RESP2.
// Every behaviour that reads a reply is run on each.
func TestProtocols(t *testing.T) {
	srv := redistest.Start(t)
	noHello := redistest.Start(t, redistest.WithConfig("rename-command", "HELLO", ""))
	cl := redistest.StartCluster(t, 3)
	for _, tc := range []struct {
		name string
		dial func() redis.UniversalClient
		resp string // CLIENT INFO's resp=
	}{
		{"RESP2", func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: srv.Addr(), Protocol: 2}) }, "2"},
		{"RESP3", func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: srv.Addr(), Protocol: 3}) }, "3"},
		{"NoHello", func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: noHello.Addr()}) }, "2"},
		{"ClusterRESP2", func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 2})
		}, "2"},
		{"ClusterRESP3", func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 3})
		}, "3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := tc.dial()
			t.Cleanup(func() { rdb.Close() })
			testutil.CheckResp(t, rdb, tc.resp)
			t.Run("Lock", func(t *testing.T) { protocolLock(t, rdb) })
			t.Run("Semaphore", func(t *testing.T) { protocolSemaphore(t, rdb) })
			t.Run("RWMutex", func(t *testing.T) { protocolRWMutex(t, rdb) })
		})
	}
}

// protocolLock takes, renews, extends, re-enters, inspects, lists and
// hands over a lock (by its pub/sub message: the waiter's own checks are
// 20 s apart).
func protocolLock(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	c1 := newClientOn(t, rdb)
	c2 := newClientOn(t, rdb, WithQueueTTL(time.Minute))
	const key = "resp"
	const lease = 300 * time.Millisecond
	l := mustLock(t, c1, key, WithTTL(lease), WithMetadata("first"))
	if l.Fence() == 0 {
		t.Fatal("no fence")
	}
	// Renewed every third of the lease: held well past it.
	select {
	case <-l.Done():
		t.Fatalf("lock lost: %v", context.Cause(l.Context()))
	case <-time.After(2 * lease):
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl < 50*time.Second {
		t.Fatalf("TTL after Extend(1m): %v, %v", ttl, err)
	}
	if l2, err := c2.TryLock(ctx, key); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock of a held lock: %v, %v", l2, err)
	}
	again, err := c1.Lock(l.Context(), key) // a re-entry: within the holder's Context
	if err == nil {
		err = again.Unlock(ctx)
	}
	if err != nil {
		t.Fatalf("re-entry: %v", err)
	}
	if err := l.Txn(ctx, func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, l.SlotKey("data"), "v", 0)
		return nil
	}); err != nil {
		t.Fatalf("Txn: %v", err)
	}

	got := make(chan *Lock, 1)
	go func() {
		l2, err := c2.Lock(ctx, key, WithTTL(30*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	waitSubscribed(t, c2.be.(*node).wake, c2.wakeChannel(key))
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool {
		info, err := c1.Inspect(ctx, key)
		return err == nil && info.Waiters == 1
	})
	info, err := c1.Inspect(ctx, key)
	if err != nil || !info.Held || info.Owner != l.Token() || info.Fence != l.Fence() || info.HoldCount != 1 || info.TTL <= 0 {
		t.Fatalf("Inspect: %+v, %v; want held by %s, fence %d", info, err, l.Token(), l.Fence())
	}
	if keys, err := c1.List(ctx, "*"); err != nil || !slices.Contains(keys, key) {
		t.Fatalf("List: %q, %v", keys, err)
	}

	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := testutil.Receive(t, got, 5*time.Second, "the hand-over")
	if l2 == nil {
		t.FailNow()
	}
	if d := time.Since(released); d > 3*time.Second {
		t.Errorf("waiter woke %v after the release", d)
	}
	if l2.Fence() <= l.Fence() {
		t.Errorf("fence %d after %d", l2.Fence(), l.Fence())
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l2.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Unlock: %v", err)
	}

	// A lease sized from the hold times on record (a hash read back).
	for range 2 {
		la := mustLock(t, c1, key, WithoutRenewal(), WithTTL(time.Second), WithAdaptiveTTL(2, 0))
		if err := la.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// protocolSemaphore fills a semaphore, inspects it, and hands a permit
// over to a waiter.
func protocolSemaphore(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	c1 := newClientOn(t, rdb)
	c2 := newClientOn(t, rdb, WithQueueTTL(time.Minute))
	s := c1.Semaphore("resp-sem", 3)
	a, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if a.Fence() == 0 || b.Fence() <= a.Fence() {
		t.Fatalf("fences %d, %d", a.Fence(), b.Fence())
	}
	if n, err := s.Available(ctx); err != nil || n != 0 {
		t.Fatalf("Available: %d, %v", n, err)
	}
	if ttl, err := b.TTL(ctx); err != nil || ttl <= 0 {
		t.Fatalf("TTL: %v, %v", ttl, err)
	}
	if err := b.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	s2 := c2.Semaphore("resp-sem", 3)
	if _, err := s2.TryAcquire(ctx, 1); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryAcquire of a full semaphore: %v", err)
	}
	got := make(chan *Lock, 1)
	go func() {
		l, err := s2.Acquire(ctx, 2)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool {
		info, err := s.Inspect(ctx)
		return err == nil && info.Waiters == 1
	})
	info, err := s.Inspect(ctx)
	if err != nil || info.Capacity != 3 || info.InUse != 3 || len(info.Holders) != 2 ||
		info.Holders[0].Owner != a.Token() || info.Holders[0].Fence != a.Fence() || info.Holders[1].Permits != 2 {
		t.Fatalf("Inspect: %+v, %v", info, err)
	}
	released := time.Now()
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := testutil.Receive(t, got, 5*time.Second, "the hand-over")
	if l == nil {
		t.FailNow()
	}
	if d := time.Since(released); d > 3*time.Second {
		t.Errorf("waiter woke %v after the release", d)
	}
	for _, h := range []*Lock{a, l} {
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// protocolRWMutex has readers share an RWMutex and a writer wait for them.
func protocolRWMutex(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	c := newClientOn(t, rdb)
	m := c.RWMutex("resp-rw")
	r1, err := m.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := m.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock with readers: %v", err)
	}
	if info, err := m.Inspect(ctx); err != nil || info.Kind != "rwmutex" || len(info.Holders) != 2 {
		t.Fatalf("Inspect: %+v, %v", info, err)
	}
	for _, r := range []*Lock{r1, r2} {
		if err := r.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
