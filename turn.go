package dlock

import (
	"context"
	"sync"
)

// turn lets one goroutine at a time through a section that makes a round
// trip, as a mutex would, except that a goroutine waiting for its turn
// gives up when its context ends. The zero turn is free.
type turn struct {
	mu   sync.Mutex    // never held across the section
	busy bool          // a goroutine has the turn
	free chan struct{} // made by the first to wait; closed when the turn ends
}

// take waits for the turn, unless ctx ends first: then it returns ctx's
// error. A free turn is taken whatever ctx says.
func (t *turn) take(ctx context.Context) error {
	t.mu.Lock()
	for t.busy {
		if t.free == nil {
			t.free = make(chan struct{})
		}
		free := t.free
		t.mu.Unlock()
		select {
		case <-free:
		case <-ctx.Done():
			return ctx.Err()
		}
		t.mu.Lock()
	}
	t.busy = true
	t.mu.Unlock()
	return nil
}

// done ends the turn that take gave.
func (t *turn) done() {
	t.mu.Lock()
	t.busy = false
	if t.free != nil {
		close(t.free)
		t.free = nil
	}
	t.mu.Unlock()
}
