package dlock

import (
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
)

// Errors returned by dlock. Match them with errors.Is: returned errors wrap
// them with the key and, for Redis failures, the go-redis error.
var (
	// ErrNotObtained: the lock is held by someone else and the caller chose
	// not to wait (TryLock) or gave up waiting (a retry strategy ran out).
	ErrNotObtained = errors.New("dlock: lock not obtained")
	// ErrLockLost: the lock was held but is no longer: a renewal found
	// another owner, renewals failed until the lease ran out, or the maximum
	// hold time passed. It is the cause of a lost lock's Context. Lock and
	// TryLock return it when the grant's reply came only after its lease
	// could no longer be trusted.
	ErrLockLost = errors.New("dlock: lock lost")
	// ErrNotHeld: the token does not hold the lock (already released,
	// expired, or never acquired).
	ErrNotHeld = errors.New("dlock: lock not held")
	// ErrReleased is the cause of a lock's Context after Unlock.
	ErrReleased = errors.New("dlock: lock released")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("dlock: client closed")

	// ErrInvalidKey: the key is empty or longer than MaxKeyLen.
	ErrInvalidKey = errors.New("dlock: invalid key")
	// ErrInvalidTTL: a lease or duration is out of range.
	ErrInvalidTTL = errors.New("dlock: invalid ttl")
	// ErrInvalidOption: an option's value is invalid or conflicts with another,
	// or a call does not apply to what it was given (the zero Client, a
	// go-redis Ring, Txn on permits).
	ErrInvalidOption = errors.New("dlock: invalid option")
	// ErrNilClient: New was given a nil Redis client.
	ErrNilClient = errors.New("dlock: nil redis client")
	// ErrWrongType: a key the lock needs holds a value that is not a lock
	// (for example a string set by other code); from Txn, a command fn
	// queued met a key of another type (WRONGTYPE).
	ErrWrongType = errors.New("dlock: key holds a value of the wrong type")
)

// permitsLost is ErrLockLost as lost permits say it, naming the semaphore
// (or RWMutex) they are of: their loss must not read as a lock's (a lock
// and a semaphore may share a name). It wraps ErrLockLost.
type permitsLost struct{ kind, name string }

func (e permitsLost) Error() string {
	return fmt.Sprintf("dlock: permits of %s %q lost", e.kind, e.name)
}

// Unwrap returns ErrLockLost.
func (e permitsLost) Unwrap() error { return ErrLockLost }

// redisError wraps an error from Redis for key, adding ErrWrongType when
// Redis reports that a lock key holds another kind of value.
func redisError(op, key string, err error) error {
	if backend.WrongType(err) {
		return fmt.Errorf("dlock: %s %q: %w: %w", op, key, ErrWrongType, err)
	}
	if msg, ok := capacityMismatch(err); ok {
		return fmt.Errorf("dlock: %s %q: %w: %s", op, key, ErrInvalidOption, msg)
	}
	return fmt.Errorf("dlock: %s %q: %w", op, key, err)
}

// refusedUnrun reports whether err is only a Redis server's answer that it
// cannot serve the command for now (backend.CannotServe), or that the
// command's slot is served elsewhere (MOVED, ASK: from any client, which
// follows no more redirections): the command did not run, or its script
// stopped at its first write, with nothing written. Not an error with
// several causes (Redlock's, one per node): a node may have run it.
func refusedUnrun(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if re, ok := err.(redis.Error); ok {
			return backend.CannotServe(re) || redirected(re)
		}
	}
	return false
}
