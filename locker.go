package dlock

import "context"

// Locker is the shape shared by a Client on one Redis deployment (New) and
// one on a Redlock quorum (redlock.New). Code written against it switches
// between them without changes.
type Locker interface {
	// Lock waits until the lock named key is granted (Client.Lock).
	Lock(ctx context.Context, key string, opts ...LockOption) (*Lock, error)
	// TryLock makes one attempt (Client.TryLock).
	TryLock(ctx context.Context, key string, opts ...LockOption) (*Lock, error)
	// Do runs fn under the lock (Client.Do).
	Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...LockOption) error
	// Close stops the background work (Client.Close).
	Close() error
}

var _ Locker = (*Client)(nil)
