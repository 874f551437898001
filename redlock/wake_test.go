package redlock_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock/redlock"
)

// acquire.go, wakeups.go: one release publishes on every node it frees,
// so a blocked waiter gets several messages for it. The first wakes it;
// the others, arriving while it spreads its retry out, must not leave a
// wake-up behind: if another owner took the lock meanwhile, the waiter's
// retry finds it held and it sleeps again, not retries at once for the
// same release.
func TestOneReleaseWakesAWaiterOnce(t *testing.T) {
	cl := startCluster(t, 5)
	ctx := context.Background()
	// A long RetryDelay: the woken waiter spreads its retry over up to
	// 200 ms, so that the release's other messages come meanwhile.
	w, err := redlock.NewWithConfig(redlock.Config{Nodes: cl.nodes, NodeTimeout: time.Second, RetryDelay: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	// Load the acquire script, so that each attempt is one script call a
	// node (no NOSCRIPT and EVAL); nothing is granted, so nothing released.
	src, err := os.ReadFile("lua/acquire.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, rdb := range cl.rdbs {
		if err := rdb.ScriptLoad(ctx, string(src)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	hold := func(owner string) {
		for _, rdb := range cl.rdbs {
			pipe := rdb.TxPipeline()
			pipe.Del(ctx, lockKey("job"))
			pipe.HSet(ctx, lockKey("job"), owner, 1, ":at", 0)
			pipe.PExpire(ctx, lockKey("job"), 30*time.Second)
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	hold("x")
	base := scriptCalls(t, cl.rdbs[4])
	attempts := func() int { return scriptCalls(t, cl.rdbs[4]) - base }

	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		l, err := w.Lock(wctx, "job")
		if err == nil {
			_ = l.Unlock(ctx)
		}
		done <- err
	}()
	returned := false
	defer func() {
		cancel()
		if !returned {
			<-done
		}
	}()
	ch := lockKey("job") + ":wake"
	waitUntil(t, 5*time.Second, "the waiter to subscribe on every node", func() bool {
		for _, rdb := range cl.rdbs {
			if rdb.PubSubNumSub(ctx, ch).Val()[ch] != 1 {
				return false
			}
		}
		return true
	})
	// Its first attempt, and the one when its subscription reached a
	// majority (a release may have been missed before).
	waitUntil(t, 5*time.Second, "the waiter's first two attempts", func() bool { return attempts() >= 2 })

	// x releases on every node, as release.lua does, but z takes the lock
	// before the waiter's retry.
	hold("z")
	for _, rdb := range cl.rdbs {
		if err := rdb.Publish(ctx, ch, "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 5*time.Second, "the waiter's retry after the release", func() bool { return attempts() >= 3 })
	select {
	case err := <-done:
		returned = true
		t.Fatalf("Lock returned while z held the lock: %v", err)
	case <-time.After(time.Second): // an observation window, not synchronization
	}
	if n := attempts(); n != 3 {
		t.Errorf("the waiter made %d attempts after x's release, want 1: woken again by the same release", n-2)
	}
}
