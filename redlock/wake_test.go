package redlock_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
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

// wakeups.go: Close while the reader of a node's pub/sub connection waits
// for the handshake of that connection, to a node that accepts connections
// and answers nothing: no context ends that read, only the node client's
// ReadTimeout (30 s here), and go-redis holds its PubSub's lock through it.
// Close returns within its bound all the same.
func TestCloseBoundedByHungPubSubHandshake(t *testing.T) {
	cl := startCluster(t, 3)
	holder := cl.locker(t)
	l := mustLock(t, holder, "busy")
	defer l.Unlock(context.Background())
	nodes := slices.Clone(cl.nodes)
	slow := redis.NewClient(&redis.Options{Addr: cl.srvs[2].Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1, ReadTimeout: 30 * time.Second})
	t.Cleanup(func() { slow.Close() })
	nodes[2] = slow
	waiter, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	hung := cl.srvs[2]
	hung.Pause(t) // accepts connections, answers nothing
	defer hung.Resume(t)
	errc := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(context.Background(), "busy")
		errc <- err
	}()
	waitUntil(t, 10*time.Second, "the handshake of the pub/sub connection to the hung node", func() bool {
		return inOneGoroutine("redlock.(*nodeSub).read(", ".initConn(")
	})
	start := time.Now()
	closed := make(chan time.Duration, 1)
	go func() {
		waiter.Close()
		closed <- time.Since(start)
	}()
	select {
	case d := <-closed:
		t.Logf("Close took %v", d)
	case <-time.After(6 * time.Second):
		t.Errorf("Close still blocked after %v with a pub/sub handshake hung (documented: up to 5 s in all)", time.Since(start).Round(time.Millisecond))
		hung.Resume(t)
		<-closed
	}
	if err := <-errc; !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Lock after Close = %v, want ErrClosed", err)
	}
}

// inOneGoroutine reports whether some goroutine's stack holds every one
// of frames.
func inOneGoroutine(frames ...string) bool {
	buf := make([]byte, 1<<20)
	for _, g := range bytes.Split(buf[:runtime.Stack(buf, true)], []byte("\n\n")) {
		if !slices.ContainsFunc(frames, func(f string) bool { return !bytes.Contains(g, []byte(f)) }) {
			return true
		}
	}
	return false
}
