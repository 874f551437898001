package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
)

// maxTxnAttempts bounds how often Txn starts over because the lock's key
// changed between its check and EXEC: an Extend, a re-entry or a renewal
// (of a Txn too long to wait for, renewAt) of the lock moves the key too,
// and WATCH cannot tell that from a loss. Or because the key could not be
// watched (errTxnNotRun).
const maxTxnAttempts = 5

// errTxnNotRun is Txn's error when the client's Watch returned without
// running the check: nothing was applied, and the lock may well be held.
var errTxnNotRun = errors.New("the lock's key could not be watched, nothing applied (cluster redirections not followed: a slot being migrated, or a failover)")

// SlotKey returns the Redis name suffix gets beside the lock: the lock's
// name between braces, then ':' and suffix ("{order:42}:stock" for
// SlotKey("stock") of the lock order:42). The braces are the Redis Cluster
// hash tag of the lock's own keys, so such a name is in the lock's slot
// whatever the lock's name holds, as the keys Txn writes must be.
func (l *Lock) SlotKey(suffix string) string {
	return backend.SlotKey(l.Key(), suffix)
}

// Txn applies the commands fn queues on pipe as one MULTI/EXEC transaction,
// only if this Lock's holder still holds the lock when Redis runs it: it
// WATCHes the lock's key, checks that the key names this holder, and EXEC
// applies nothing if the key changed or expired since. It is the owner
// guard of etcd's Mutex.IsOwner for data kept in Redis: a holder that
// paused past its lease, or lost the lock any other way, cannot write. It
// costs three round trips: WATCH, the check, and MULTI/EXEC (and a WAIT
// with WithReplicaAck).
//
// fn only queues commands (their replies are filled in when Txn returns
// nil), and may be called again: Txn starts over when the key moved
// because the lock was extended, re-entered or renewed meanwhile, up to 5
// attempts in all; then it returns an error wrapping redis.TxFailedErr,
// and nothing was applied. The watchdog's renewals keep out of a Txn's way: a
// renewal due within a sixth of the lease goes before the Txn begins, and
// the next one waits for it to end, so a Txn shorter than half the lease
// (three round trips and fn) is not made to start over by a renewal, nor
// is one of several run by goroutines at once: one begun less than half
// the lease before the renewal the others hold back waits for it, which
// goes once they end (so a short Txn begun beside a long one may wait up
// to the instant a third of the lease is left). The
// renewal waits only until a third of the lease is left: a Txn longer
// than that starts over rather than let the lease run out. As with any
// MULTI/EXEC, a command that fails when it runs (WRONGTYPE) does not undo
// the others; Txn returns its error. One that Redis refuses when fn queues it (READONLY from a master that a
// failover demoted, a malformed command) makes EXEC apply nothing; the
// error wraps EXEC's EXECABORT and that refusal (redis.IsReadOnlyError
// tells a failover under way).
//
// The keys fn writes must be on the lock's Redis deployment, and in its
// hash slot on Redis Cluster: name them with SlotKey. Commands for another
// master's slot, or for two slots, fail the transaction, and nothing is
// applied. While the lock's slot is being migrated Txn fails, applies
// nothing and leaves the lock held (go-redis's Watch does not follow ASK).
//
// It returns an error wrapping ErrLockLost if the lock is not held any more
// (the Lock's Context is then cancelled), the cause of the Lock's Context
// if that ended first (ErrReleased after Unlock, ErrClosed after Close:
// Redis may still name it the holder, but it writes nothing), fn's
// own error as it is (nothing is applied), and ErrDegraded for a degraded
// lock, which Redis does not hold. With WithReplicaAck and FailClosed, a
// write that fewer replicas than asked acknowledged in time returns an
// error wrapping ErrNotReplicated: it was applied on the master, and a
// failover may lose it while the lock stays held. Permits (Semaphore,
// RWMutex) share one key whose entries expire by their own clock, which
// WATCH does not see: Txn refuses them with ErrInvalidOption. It needs a
// single deployment: on a Client made by redlock.New it returns an error
// wrapping errors.ErrUnsupported.
func (l *Lock) Txn(ctx context.Context, fn func(pipe redis.Pipeliner) error) error {
	if fn == nil {
		return fmt.Errorf("%w: Txn without a function", ErrInvalidOption)
	}
	if err := l.live("txn"); err != nil {
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
	// The watchdog's renewal moves the key WATCHed below: it waits for
	// the Txn, within the bounds that keep the lease (hold.renewAt).
	if err := l.c.dog.txnBegin(ctx, l.h); err != nil {
		if lerr := l.live("txn"); lerr != nil {
			return lerr
		}
		return redisError("txn", l.Key(), err)
	}
	defer l.c.dog.txnEnd(l.h)
	for attempt := 1; ; attempt++ {
		checked, held := false, false
		var stop error // fn's error, or the Lock's end: returned as it is
		var got ack
		waited := false // the WAIT followed an EXEC that ran
		err := n.rdb.Watch(ctx, func(tx *redis.Tx) error {
			ok, err := tx.HExists(ctx, k.lock, l.Token()).Result()
			if backend.WrongType(err) {
				// Another kind of value at the lock's name: no token
				// holds it there, as a renewal reads it (node.outcome).
				ok, err = false, nil
			}
			if err != nil || !ok {
				checked = err == nil
				return err
			}
			checked, held = true, true
			// Given up meanwhile on this side (its lease by our clock,
			// WithMaxHold, Close, Unlock): write nothing, although Redis
			// may keep the lock a little longer.
			if stop = l.live("txn"); stop != nil {
				return stop
			}
			cmds, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				if stop = fn(pipe); stop == nil {
					// Ended here while fn ran (Unlock, Close, a loss by
					// our clock): Redis may still name this holder, so
					// only this side can keep the EXEC from being sent.
					stop = l.live("txn")
				}
				return stop
			})
			err = withQueueRefusal(cmds, err)
			if n.ack != nil && execRan(err) {
				// On the EXEC's own connection: WAIT covers only its
				// writes. The lock's grant was acknowledged; a write that
				// was not could be lost in a failover that keeps the lock.
				// A command that failed when it ran, or read a nil, did
				// not keep EXEC from applying the others.
				pipe := tx.Pipeline()
				read := n.ack.appendWait(ctx, pipe, n.ack.useAOF(ctx, tx))
				_, _ = pipe.Exec(ctx)
				got, waited = read(), true
			}
			return err
		}, k.lock)
		switch {
		case stop != nil:
			return stop
		case err == nil && !checked && attempt < maxTxnAttempts && reloadedSlotMap(ctx, n.rdb):
			// ClusterClient.Watch returns nil without calling fn once its
			// redirections run out (a slot being migrated: ASK, then
			// MOVED back; a slot moved while the nodes disagree; READONLY
			// in a failover): the lock was not looked at, nor anything
			// sent. Unlike go-redis's other calls, it does not reload the
			// slot map after MOVED: look again once it is reloaded.
		case err == nil && !checked:
			// Still so (a migration under way): not a loss.
			return redisError("txn", l.Key(), errTxnNotRun)
		case err == nil && !held:
			if lerr := l.live("txn"); lerr != nil {
				// Ended here first (Close, its deadline): its cause, as
				// when the key is still there.
				return lerr
			}
			return l.lost("txn")
		case errors.Is(err, redis.TxFailedErr) && attempt < maxTxnAttempts:
			// The key moved: renewed, extended or lost. Look again.
		case !checked && attempt < maxTxnAttempts && reloadSlots(ctx, n.rdb, err) && failedOver(ctx, n.rdb, k.lock, err):
			// The lock's master could not be dialled, so nothing was sent,
			// and the cluster has promoted another since (followFailover).
		case err != nil && waited:
			if aerr := n.ack.check(got, leaseWritten("txn", l.h.lease)); aerr != nil {
				err = fmt.Errorf("%w; %w", aerr, err)
			}
			return redisError("txn", l.Key(), err)
		case err != nil:
			return redisError("txn", l.Key(), err)
		case n.ack != nil:
			if err := n.ack.check(got, leaseWritten("txn", l.h.lease)); err != nil {
				return redisError("txn", l.Key(), err)
			}
			return nil
		default:
			return nil
		}
	}
}

// withQueueRefusal adds to err, if it is EXECABORT, the reply that
// refused a queued command: EXEC names no cause, and the refusal says
// whether the server cannot take writes for now (READONLY on a master a
// failover demoted) or the command was wrong.
func withQueueRefusal(cmds []redis.Cmder, err error) error {
	if !isExecAbort(err) {
		return err
	}
	for _, cmd := range cmds {
		// go-redis gives the commands that were queued EXEC's error.
		if cerr := cmd.Err(); cerr != nil && !isExecAbort(cerr) {
			return fmt.Errorf("%w (%w)", err, cerr)
		}
	}
	return err
}

// isExecAbort reports whether err is EXEC's answer to a transaction one of
// whose commands Redis refused when queued: nothing was applied.
func isExecAbort(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "EXECABORT")
}

// execRan reports whether a transaction whose TxPipelined returned err was
// applied: it succeeded, or a queued command failed when it ran (or read a
// nil) while EXEC applied the others. Not when WATCH aborted it
// (TxFailedErr), Redis refused it whole (EXECABORT: a command refused when
// queued), or no reply came.
func execRan(err error) bool {
	var re redis.Error
	if err == nil || errors.Is(err, redis.Nil) {
		return true
	}
	return errors.As(err, &re) && !errors.Is(err, redis.TxFailedErr) && !isExecAbort(err)
}
