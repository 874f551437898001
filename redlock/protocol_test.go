package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
	"github.com/dlock-go/dlock/redlock"
)

// The scripts' replies and the release messages reach go-redis over RESP2
// (Protocol: 2, or nodes without HELLO) as well as over RESP3.
func TestProtocols(t *testing.T) {
	plain := startCluster(t, 3)
	noHello := startCluster(t, 3, func(int) []redistest.Option {
		return []redistest.Option{redistest.WithConfig("rename-command", "HELLO", "")}
	})
	for _, tc := range []struct {
		name     string
		cl       *cluster
		protocol int
		resp     string // CLIENT INFO's resp=
	}{
		{"RESP2", plain, 2, "2"},
		{"RESP3", plain, 3, "3"},
		{"NoHello", noHello, 0, "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var nodes []redis.UniversalClient
			for _, srv := range tc.cl.srvs {
				o := nodeOptions(srv.Addr())
				o.Protocol = tc.protocol
				rdb := redis.NewClient(o)
				t.Cleanup(func() { rdb.Close() })
				testutil.CheckResp(t, rdb, tc.resp)
				nodes = append(nodes, rdb)
			}
			protocolLock(t, tc.cl, nodes)
		})
	}
}

// protocolLock takes, renews, extends, re-enters and hands over a lock
// (the waiter woken by the release's message: its own retries are seconds
// apart).
func protocolLock(t *testing.T, cl *cluster, nodes []redis.UniversalClient) {
	ctx := context.Background()
	newClient := func() *dlock.Client {
		c, err := redlock.NewWithConfig(redlock.Config{Nodes: nodes, RetryDelay: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c1, c2 := newClient(), newClient()
	const key = "resp"
	const lease = 600 * time.Millisecond
	var l *dlock.Lock
	for l == nil {
		// A grant read after its short lease ran out (a loaded machine)
		// is lost, and taken again.
		var err error
		if l, err = c1.Lock(ctx, key, dlock.WithTTL(lease)); err != nil && !errors.Is(err, dlock.ErrLockLost) {
			t.Fatal(err)
		}
	}
	if l.Fence() == 0 {
		t.Fatal("no fence")
	}
	select {
	case <-l.Done():
		t.Fatalf("lock lost: %v", context.Cause(l.Context()))
	case <-time.After(3 * lease): // renewed every third of the lease meanwhile
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl < 50*time.Second {
		t.Fatalf("TTL after Extend(1m): %v, %v", ttl, err)
	}
	if _, err := c2.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock of a held lock: %v", err)
	}
	again, err := c1.Lock(l.Context(), key) // a re-entry: within the holder's Context
	if err == nil {
		err = again.Unlock(ctx)
	}
	if err != nil {
		t.Fatalf("re-entry: %v", err)
	}

	got := make(chan *dlock.Lock, 1)
	go func() {
		l2, err := c2.Lock(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	ch := lockKey(key) + ":wake"
	waitUntil(t, 5*time.Second, "the waiter to subscribe on every node", func() bool {
		for _, rdb := range cl.rdbs {
			if rdb.PubSubNumSub(ctx, ch).Val()[ch] != 1 {
				return false
			}
		}
		return true
	})
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := testutil.Receive(t, got, 5*time.Second, "the waiter")
	if l2 == nil {
		t.FailNow()
	}
	if d := time.Since(released); d > 3*time.Second {
		t.Errorf("waiter served %v after the release", d)
	}
	if l2.Fence() <= l.Fence() {
		t.Errorf("fence %d after %d", l2.Fence(), l.Fence())
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l2.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Unlock: %v", err)
	}
}
