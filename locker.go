package dlock

import "context"

// Locker is the shape shared by a Client on one Redis deployment (New) and
// one on a Redlock quorum (redlock.New). Code written against it switches
// between them without changes.
type Locker interface {
	Lock(ctx context.Context, key string, opts ...LockOption) (*Lock, error)
	TryLock(ctx context.Context, key string, opts ...LockOption) (*Lock, error)
	Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...LockOption) error
	Close() error
}

var _ Locker = (*Client)(nil)
