package dlock

import "context"

// RWMutex is a readers-writer lock on Redis: any number of readers, or one
// writer. It is a Semaphore of MaxPermits permits (see Semaphore for
// leases, renewal, loss and what it does not support), of which a reader
// takes one and a writer all; so waiters are served in arrival order, and
// a writer waiting holds back the readers that come after it: a steady
// stream of readers cannot starve writers. The Locks it returns are not
// reentrant: a reader that takes the read lock again while a writer waits
// deadlocks, as with sync.RWMutex. Nor is a lock upgraded or downgraded: a
// reader that calls Lock, or the writer that calls RLock, waits for its
// own lock to be given back, until its ctx ends; Unlock first (another
// holder may come in between).
type RWMutex struct {
	s Semaphore
}

// RWMutex returns the readers-writer lock named name. Its Redis names never
// clash with those of a lock or a Semaphore of the same name.
func (c *Client) RWMutex(name string) *RWMutex {
	return &RWMutex{Semaphore{c: c, name: name, capacity: MaxPermits, kind: "rwmutex"}}
}

// Name returns the lock's name ("" for a nil m).
func (m *RWMutex) Name() string { return m.sem().Name() }

// sem is the Semaphore m is; nil for a nil m, whose calls then fail as
// those of a Semaphore without a Client do.
func (m *RWMutex) sem() *Semaphore {
	if m == nil {
		return nil
	}
	return &m.s
}

// RLock takes the lock for reading, waiting until no writer holds it or
// waits before this reader, or ctx ends.
func (m *RWMutex) RLock(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return m.sem().acquire(ctx, 1, true, opts)
}

// TryRLock makes one attempt to take the lock for reading: it fails with
// ErrNotObtained if a writer holds the lock or a queued writer comes
// first. It never overtakes a waiter: queued readers that can be let in
// are granted first, by this attempt, as TryAcquire does.
func (m *RWMutex) TryRLock(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return m.sem().acquire(ctx, 1, false, opts)
}

// Lock takes the lock for writing, waiting until nobody else holds it and
// the waiters before it have had their turn, or ctx ends.
func (m *RWMutex) Lock(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return m.sem().acquire(ctx, MaxPermits, true, opts)
}

// TryLock makes one attempt to take the lock for writing: it fails with
// ErrNotObtained if anyone holds the lock or a queued waiter comes first
// (queued waiters that can be let in are granted first, by this attempt).
func (m *RWMutex) TryLock(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return m.sem().acquire(ctx, MaxPermits, false, opts)
}
