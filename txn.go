package dlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// maxTxnAttempts bounds how often Txn starts over because the lock's key
// changed between its check and EXEC: a renewal or an Extend of the lock
// moves the key too, and WATCH cannot tell that from a loss.
const maxTxnAttempts = 5

// Txn applies the commands fn queues on pipe as one MULTI/EXEC transaction,
// only if this Lock's holder still holds the lock when Redis runs it: it
// WATCHes the lock's key, checks that the key names this holder, and EXEC
// applies nothing if the key changed or expired since. It is the owner
// guard of etcd's Mutex.IsOwner for data kept in Redis: a holder that
// paused past its lease, or lost the lock any other way, cannot write. It
// costs three round trips: WATCH, the check, and MULTI/EXEC.
//
// fn only queues commands (their replies are filled in when Txn returns
// nil), and may be called again: Txn starts over, a few times, when the
// key changed because the lock was renewed or extended meanwhile. As with
// any MULTI/EXEC, a command that fails when it runs (WRONGTYPE) does not
// undo the others; Txn returns its error.
//
// The keys fn writes must be on the lock's Redis deployment, and on Redis
// Cluster in the lock's hash slot: name them with its hash tag, such as
// {order:42}:stock for the lock order:42 (a name with braces, such as
// {order:42}:lock, gives its own tag). A command for another slot fails
// the transaction, and nothing is applied.
//
// It returns an error wrapping ErrLockLost if the lock is not held any more
// (the Lock's Context is then cancelled), ErrReleased after Unlock, fn's
// own error as it is (nothing is sent), and ErrDegraded for a degraded
// lock, which Redis does not hold. Permits (Semaphore, RWMutex) share one
// key whose entries expire by their own clock, which WATCH does not see:
// Txn refuses them with ErrInvalidOption. It needs a single deployment: on
// a Client made by redlock.New it returns an error wrapping
// errors.ErrUnsupported.
func (l *Lock) Txn(ctx context.Context, fn func(pipe redis.Pipeliner) error) error {
	if fn == nil {
		return fmt.Errorf("%w: Txn without a function", ErrInvalidOption)
	}
	if err := l.live(); err != nil {
		return err
	}
	if l.Degraded() {
		return redisError("txn", l.Key(), ErrDegraded)
	}
	n, ok := l.c.be.(*node)
	if !ok {
		return fmt.Errorf("dlock: txn %q: needs a single Redis deployment: %w", l.Key(), errors.ErrUnsupported)
	}
	k := leaseKeys(l.h.lease)
	if k.permits != nil {
		return fmt.Errorf("%w: Txn applies to locks, not to a %s's permits", ErrInvalidOption, k.permits.Kind)
	}
	for attempt := 1; ; attempt++ {
		held := false
		var fnErr error
		err := n.rdb.Watch(ctx, func(tx *redis.Tx) error {
			ok, err := tx.HExists(ctx, k.lock, l.Token()).Result()
			if err != nil || !ok {
				return err
			}
			held = true
			_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				fnErr = fn(pipe)
				return fnErr
			})
			return err
		}, k.lock)
		switch {
		case fnErr != nil:
			return fnErr
		case err == nil && !held:
			return l.lost("txn")
		case errors.Is(err, redis.TxFailedErr) && attempt < maxTxnAttempts:
			// The key moved: renewed, extended or lost. Look again.
		case err != nil:
			return redisError("txn", l.Key(), err)
		default:
			return nil
		}
	}
}
