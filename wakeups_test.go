package dlock

import (
	"context"
	"testing"
	"time"
)

// A waiter registers after its check joined the queue. On a channel that
// is still subscribed, the hand-over can arrive in between; it must not be
// lost (the waiter would sleep until its next refresh).
func TestHandOverBeforeWaiterRegisters(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	w := c.be.(*node).wake
	ch := c.keys("early").channel

	first, err := w.subscribe(ctx, ch, "first")
	if err != nil {
		t.Fatal(err)
	}
	<-first.ready
	first.leave() // the channel lingers, subscribed

	if err := rdb.SPublish(ctx, ch, "late 42").Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the hand-over to arrive", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		_, ok := w.channels[ch].early["late"]
		return ok
	})
	late, err := w.subscribe(ctx, ch, "late")
	if err != nil {
		t.Fatal(err)
	}
	defer late.leave()
	select {
	case fence := <-late.granted:
		if fence != 42 {
			t.Errorf("fence = %d, want 42", fence)
		}
	default:
		t.Fatal("a hand-over that arrived before the waiter registered was lost")
	}
}
