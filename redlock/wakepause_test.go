package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/redlock"
)

// A waiter woken by a release pauses up to RetryDelay/10 before it tries
// again (every waiter of the key woke); its ctx ends that pause too, which
// a long RetryDelay makes long.
func TestWokenWaiterPauseEndsWithContext(t *testing.T) {
	cl := startCluster(t, 3)
	holder := cl.locker(t)
	// The pause after a wake-up: up to an hour.
	waiter, err := redlock.NewWithConfig(redlock.Config{Nodes: cl.waiterNodes(t), RetryDelay: 10 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	l := mustLock(t, holder, "job")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		l2, err := waiter.Lock(ctx, "job")
		if err == nil {
			_ = l2.Unlock(context.Background()) // a pause drawn under the window below
		}
		errc <- err
	}()
	waitUntil(t, 5*time.Second, "the waiter to subscribe on every node", func() bool {
		for _, rdb := range cl.rdbs {
			if !waiterSubscribed(context.Background(), rdb, 1)() {
				return false
			}
		}
		return true
	})
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	// An observation window for the wake-up to reach the waiter, which then
	// pauses; nothing outside shows that it does.
	time.Sleep(200 * time.Millisecond)
	cancel()
	select {
	case err := <-errc:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Lock = %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Lock went on pausing after its context ended")
	}
}
