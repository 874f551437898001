package dlock

import (
	"context"
	"errors"
	"os"
	"reflect"
	"testing"
	"time"
)

func TestInspect(t *testing.T) {
	c, _, _ := newTestClient(t, WithClientName("billing"))
	ctx := context.Background()
	before := time.Now().Add(-time.Second)
	l := mustLock(t, c, "inv:1", WithMetadata("job 7"))
	if _, err := c.Lock(l.Context(), "inv:1"); err != nil {
		t.Fatal(err)
	}
	info, err := c.Inspect(ctx, "inv:1")
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	want := Holder{Host: host, PID: os.Getpid(), Client: "billing", Data: "job 7"}
	if !info.Held || info.Owner != l.Token() || info.Fence != l.Fence() || info.HoldCount != 2 || info.Holder != want {
		t.Errorf("Inspect = %+v", info)
	}
	if info.TTL <= 0 || info.TTL > DefaultTTL || info.AcquiredAt.Before(before) || info.AcquiredAt.After(time.Now().Add(time.Second)) {
		t.Errorf("Inspect TTL/time = %v, %v", info.TTL, info.AcquiredAt)
	}
	_ = l.Unlock(ctx)
	free, err := c.Inspect(ctx, "inv:1")
	if err != nil || free.Held || free.Fence != l.Fence() || free.TTL != 0 {
		t.Errorf("Inspect of a free lock = %+v, %v", free, err)
	}
}

func TestForceReleaseWakesWaiter(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	stuck := mustLock(t, c, "stuck")
	got := make(chan *Lock, 1)
	go func() {
		l, err := c.Lock(ctx, "stuck")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool {
		info, _ := c.Inspect(ctx, "stuck")
		return info != nil && info.Waiters == 1
	})
	if err := c.ForceRelease(ctx, "stuck"); err != nil {
		t.Fatal(err)
	}
	if l := <-got; l != nil {
		if l.Fence() <= stuck.Fence() {
			t.Error("no fresh fence after force release")
		}
		_ = l.Unlock(ctx)
	}
	if err := c.ForceRelease(ctx, "stuck"); !errors.Is(err, ErrNotHeld) {
		t.Errorf("ForceRelease of a free lock = %v", err)
	}
	// The old holder is told at its next renewal or call.
	if _, err := stuck.TTL(ctx); !errors.Is(err, ErrLockLost) {
		t.Errorf("old holder TTL = %v, want ErrLockLost", err)
	}
}

func TestList(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	for _, k := range []string{"order:1", "order:2", "job:x"} {
		mustLock(t, c, k)
	}
	all, err := c.List(ctx, "")
	if err != nil || !reflect.DeepEqual(all, []string{"job:x", "order:1", "order:2"}) {
		t.Errorf("List() = %v, %v", all, err)
	}
	orders, _ := c.List(ctx, "order:*")
	if !reflect.DeepEqual(orders, []string{"order:1", "order:2"}) {
		t.Errorf("List(order:*) = %v", orders)
	}
}
