package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
)

// Acquire takes the lock on one Redis deployment, joining the lock's queue
// and sleeping until the lock is handed over if it is held and r.Wait.
func (n *node) Acquire(ctx context.Context, r backend.Request) (backend.Grant, error) {
	a := &attempt{n: n, r: r, keys: n.keysOf(r.Key, r.Permits)}
	// A lock handed over while we wait starts with at most queueLife of
	// lease, so that if we died meanwhile it is stuck no longer than that;
	// the watchdog extends it to the full lease at its first renewal (with
	// replica acknowledgement, the new holder sets it at once: handedOver, or
	// the check that finds it handed over).
	a.grantTTL = r.TTL
	if r.Renew {
		a.grantTTL = min(r.TTL, n.queueLife())
	}
	return a.run(ctx)
}

// queueLife is how long a waiter's queue entry, and a lock handed over to
// it, last without a check of the waiter's: the queue TTL, and with
// replica acknowledgement the longest a check's WAIT takes too (timeout,
// and waitLate more, while replicas are missing). A live waiter's next
// check cannot come before the last one answered: without that, the entry
// ran out meanwhile and a release skipped the waiter, or the lock handed
// over ran out before the waiter, told of it, could take it.
func (n *node) queueLife() time.Duration {
	if n.ack == nil {
		return n.queueTTL
	}
	return n.queueTTL + n.ack.timeout + waitLate
}

// attempt is one acquisition that has not got the lock yet.
type attempt struct {
	n        *node
	r        backend.Request
	keys     *lockKeys
	grantTTL time.Duration

	// The script arguments, passed by pointer (no allocation per call).
	ttlMS, queueMS, grantMS int64
	args                    [8]any

	// inflight is closed once the last check, given up on while it was
	// on its way in a batch, has reached Redis (or failed): nil if none.
	inflight <-chan struct{}
	// queued is set once a check queued us: leaving must then get
	// through a slot migration (abandon).
	queued bool
}

// grant returns the grant of a lease trusted from start for ttl, which
// most likely began at began (backend.Grant).
func (a *attempt) grant(fence uint64, start time.Time, ttl time.Duration, began time.Time) (backend.Grant, error) {
	l := &backend.Lease{Key: a.r.Key, Token: a.r.Token, Data: a.keys}
	return backend.Grant{Lease: l, Fence: fence, Start: start, TTL: ttl, Began: began}, nil
}

func (a *attempt) run(ctx context.Context) (backend.Grant, error) {
	if err := ctx.Err(); err != nil {
		// Nothing sent, so nothing to leave: a check that fails is
		// followed by a release (abandon), a round trip wasted here.
		return backend.Grant{}, redisError(kindOf(a.r.Permits), a.r.Key, err)
	}
	join := "0"
	if a.r.Wait {
		join = "1"
	}
	queueLife := a.n.queueLife() // each check's queue entry lasts that long
	a.ttlMS, a.queueMS, a.grantMS = backend.Millis(a.r.TTL), backend.Millis(queueLife), backend.Millis(a.grantTTL)
	a.args = [8]any{&a.r.Token, &a.ttlMS, &a.r.Meta, join, &a.queueMS, &a.grantMS, &a.n.id, &a.ttlMS}
	args := a.args[:7]
	switch p := a.r.Permits; {
	case p != nil:
		args = append(args[:7:7], &p.Count, &p.Capacity)
		if a.n.ack != nil {
			args = append(args, &a.ttlMS) // as for a lock, below
		}
	case a.n.ack != nil:
		// A lock found handed over gets the full lease in the check itself
		// (see case 2).
		args = a.args[:]
	}
	// notHeldAt is the start of the last check that found the lock held by
	// another: a hand-over to us happened after it, so a lease granted by
	// hand-over is measured from there.
	var notHeldAt time.Time
	// staleUpTo is the highest holder's fence the checks found: a hand-over
	// message with a fence up to it was sent before such a check (fences
	// grow), for a hold of ours that has ended since.
	var staleUpTo uint64
	// queuedUntil is when the queue entry the last check made expires: a
	// check that cannot reach Redis before then keeps the place.
	var queuedUntil time.Time
	// migrationBackoff is the delay before the next check after one
	// refused while the lock's slot is being migrated (TRYAGAIN).
	var migrationBackoff time.Duration
	var wt *waiter
	defer func() {
		if wt != nil {
			wt.leave()
		}
	}()
	// The retry strategy may be the caller's own code, and a go-redis hook
	// may panic too: if the caller recovers, a waiter that panicked must
	// not stay queued (as one that gives up), or a release would hand the
	// lock to nobody and the waiters behind would wait out its lease.
	defer func() {
		if r := recover(); r != nil {
			a.abandon(ctx)
			panic(r)
		}
	}()
	refresh := min(a.n.queueTTL, a.r.TTL) / 3
	retry := backend.RetrySchedule{Retry: a.r.Retry}
	// Made on the first wait; since Go 1.23 Reset discards a stale tick.
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		start := time.Now()
		if notHeldAt.IsZero() {
			notHeldAt = start
		}
		// Once it has waited (timer), a cancelled caller does not wait for
		// a check that Redis does not answer (waitingCall).
		res, ack, err := a.n.tryAcquire(ctx, a.keys, args, timer != nil, a.r.Ops)
		if err != nil { // errors.As's target escapes: not on every check
			if fl := (inFlightError{}); errors.As(err, &fl) {
				a.inflight = fl.done
			}
		}
		// A check refused while the lock's slot is being migrated did not
		// run: a caller that waits checks again, queued or not.
		migrating := err != nil && a.r.Wait && ctx.Err() == nil && redis.IsTryAgainError(err)
		if err != nil && !migrating && !(keepPlace(ctx, a.n.rdb, err) && time.Now().Before(queuedUntil)) {
			// The script may have run even if its reply was lost: make sure
			// we take nothing and leave no queue entry behind.
			a.abandon(ctx)
			return backend.Grant{}, a.checkFailed(ctx, err)
		}
		// The queue entry was refreshed when the check ran, not when it
		// answered: one that waited (WithReplicaAck's WAIT, with replicas
		// missing) must not leave it to run out before the next.
		delay, ok := max(refresh-time.Since(start), 0), true
		if err != nil {
			// Queued, and the master out of reach for now (a failover): the
			// place is kept while the queue entry lives, on the new master
			// too. Check again then, or when the subscription is back. Or
			// the slot is being migrated: check again shortly.
			a.n.log.Debug("dlock: check failed while waiting", "key", a.r.Key, "kind", kindOf(a.r.Permits), "error", err)
			if migrating {
				migrationBackoff = nextMigrationBackoff(migrationBackoff)
				delay = min(delay, migrationBackoff)
			} else {
				delay = min(delay, max(time.Until(queuedUntil), 0))
			}
			// WithRetry bounds the wait through failed checks too: once
			// the strategy gives up, the check's error is the answer, as
			// when the queue entry runs out.
			if delay, ok = retry.Delay(start, delay); !ok {
				a.abandon(ctx)
				return backend.Grant{}, redisError(kindOf(a.r.Permits), a.r.Key, err)
			}
			goto wait
		}
		switch res[0] {
		case 1:
			return a.taken(ctx, ack, uint64(res[1]), start)
		case 2:
			if a.n.ack != nil {
				// The check lengthened the lease to the full one, a write
				// its WAIT covers: a grant of our own from start. Setting
				// it afterwards (handedOver) would come a whole WAIT later,
				// when a hand-over made while an earlier check was in
				// flight may have run out already.
				return a.taken(ctx, ack, uint64(res[1]), start)
			}
			// Granted after notHeldAt, for grantTTL; or, read now, pttl
			// more from this check's start, whichever ends later.
			since, ttl, began := notHeldAt, a.grantTTL, notHeldAt
			if len(res) > 2 && res[2] > 0 {
				pttl := time.Duration(res[2]) * time.Millisecond
				if start.Add(pttl).After(since.Add(ttl)) {
					since, ttl = start, pttl
				}
				// The lease began with the hand-over, for grantTTL:
				// grantTTL - pttl before this check, not when we queued.
				// Hold times count from there, the time we took to learn
				// of it included: the next lease must cover that too.
				if began = start.Add(min(pttl-a.grantTTL, 0)); began.Before(notHeldAt) {
					began = notHeldAt
				}
			}
			if g, done, err := a.handedOver(ctx, uint64(res[1]), since, ttl, began); done {
				return g, err
			}
			continue
		}
		if !a.r.Wait {
			return backend.Grant{}, fmt.Errorf("dlock: %s %q: %w", kindOf(a.r.Permits), a.r.Key, ErrNotObtained)
		}
		notHeldAt = start
		queuedUntil = start.Add(queueLife - backend.Drift(queueLife))
		a.queued = true
		if len(res) > 2 {
			staleUpTo = max(staleUpTo, uint64(res[2]))
		}

		if delay, ok = retry.Delay(start, delay); !ok {
			a.abandon(ctx)
			return backend.Grant{}, fmt.Errorf("dlock: %s %q: %w: %s", kindOf(a.r.Permits), a.r.Key, ErrNotObtained, backend.GaveUp(retry.Attempts()))
		}
		if pttl := time.Duration(res[1]) * time.Millisecond; pttl >= 0 {
			// The holder's lease runs out by then at the latest (0: within
			// its last millisecond, not yet expired).
			delay = min(delay, pttl+time.Millisecond)
		}
	wait:
		if wt == nil {
			if wt, err = a.n.wake.subscribe(ctx, a.keys.channel+":"+a.n.id, a.r.Token, start); err != nil {
				wt = nil // wait by the timer alone
				a.n.log.Debug("dlock: subscribe failed", "key", a.r.Key, "kind", kindOf(a.r.Permits), "error", err)
			}
		}
		// A hand-over the subscription may have missed (sent before it
		// took effect, or while it was down) comes as a nudge to check.
		var nudge <-chan struct{}
		var granted <-chan uint64
		if wt != nil {
			granted, nudge = wt.granted, wt.nudge
		}
		if timer == nil {
			timer = time.NewTimer(delay)
		} else {
			timer.Reset(delay)
		}
		select {
		case fence := <-granted:
			if fence <= staleUpTo {
				continue // check again rather than trust it
			}
			// The hand-over was sent just before (or during the check we
			// were making): its lease began about now, not when we
			// queued.
			now := time.Now()
			if a.n.ack == nil && (!a.r.Renew || notHeldAt.Add(a.grantTTL-backend.Drift(a.grantTTL)).Sub(now) < a.grantTTL/2) {
				// The last check that found the lock held is long past (the
				// checks since failed, or were slow): a lease trusted from
				// there would soon be over. Or nothing renews the lease: it
				// would end early by the time between that check and the
				// hand-over, up to a third of it. A check reads what is left.
				continue
			}
			if g, done, err := a.handedOver(ctx, fence, notHeldAt, a.grantTTL, now); done {
				return g, err
			}
		case <-nudge:
		case <-timer.C:
		case <-ctx.Done():
			a.abandon(ctx)
			return backend.Grant{}, fmt.Errorf("dlock: %s %q: waiting ended: %w", kindOf(a.r.Permits), a.r.Key, ctx.Err())
		case <-a.n.closed:
			a.abandon(ctx)
			return backend.Grant{}, fmt.Errorf("dlock: %s %q: %w", kindOf(a.r.Permits), a.r.Key, ErrClosed)
		}
	}
}

// abandon leaves the queue, releasing the lock if it was handed to us after
// all: a waiter that gives up takes nothing. It waits for that up to
// endedUnlockWait, as an Unlock whose ctx has ended does for its release:
// with a Redis that answers, the waiter has left before Lock returns; with
// one that hangs, Lock returns about then, not releaseTimeout (and a check
// still on its way, up to go-redis's ReadTimeout) past ctx's end, and the
// leaving goes on in the background, counted in r.Ops so that Close waits
// for it. A panic there (a go-redis hook's) is raised here if it comes in
// that time, and logged if not: nobody is left to recover it.
func (a *attempt) abandon(ctx context.Context) {
	backend.Detach(a.r.Ops, endedUnlockWait, func() { a.leave(ctx) },
		a.n.log, "dlock: panic while leaving the queue", "key", a.r.Key, "kind", kindOf(a.r.Permits))
}

// leave is abandon's leaving of the queue. With replica acknowledgement the
// release goes, like the grant, straight to the master of the lock's slot
// (runOnMasters, without a WAIT). Sent through a ClusterClient's own
// routing instead, it could be the first command that routing handles,
// since every acknowledged write bypasses it; go-redis then first reads
// COMMAND from a random node, replicas included, ignoring ctx. A grant
// fails closed exactly when a replica stopped answering; had that replica
// been picked, the release would have waited out releaseTimeout without
// being sent, and the lock would have stayed held for its whole lease.
func (a *attempt) leave(ctx context.Context) {
	if a.inflight != nil {
		// The last check may still reach Redis: leave after it, or it
		// would queue us, or take the lock, once we are gone. It ends
		// when go-redis gives up on it, which may be well past
		// batchTimeout (a ReadTimeout of 30 s, not cut short at a
		// deadline without ContextTimeoutEnabled), or when the client is
		// closed; the release then has its own time.
		<-a.inflight
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	var err error
	leave := func() error {
		if a.n.ack != nil {
			c := &call{s: a.keys.scripts().release.script, keys: a.keys.all(), args: []any{a.r.Token, a.keys.releaseArg(1)}}
			a.n.runOnMasters(rctx, []*call{c}, false)
			err = c.cmd.Err()
		} else {
			err = a.keys.scripts().release.script.Run(rctx, a.n.rdb, a.keys.all(), a.r.Token, a.keys.releaseArg(1)).Err()
		}
		return err
	}
	if a.queued {
		// Left queued, we would be handed the lock at its next release,
		// and nobody would hold it for that lease. A check refused by the
		// migration queued nothing: a TryLock, or a wait that never
		// queued, does not wait for the migration to end.
		throughMigration(rctx, a.n.rdb, leave)
	} else {
		_ = leave()
	}
	if err != nil {
		a.n.log.Debug("dlock: leaving the queue failed", "key", a.r.Key, "kind", kindOf(a.r.Permits), "error", err)
	}
}

// checkFailed is the error of an attempt whose check failed with err. If
// ctx ended meanwhile (the check was on its way, or failed because of
// it), the caller gave up: the error wraps ctx's as well, as when ctx ends
// while the attempt waits.
func (a *attempt) checkFailed(ctx context.Context, err error) error {
	rerr := redisError(kindOf(a.r.Permits), a.r.Key, err)
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%w)", rerr, cerr)
	}
	return rerr
}

// keepPlace reports whether a queued waiter whose check, sent by rdb,
// failed with err keeps waiting: the master did not answer (a failover:
// the connection refused or dropped), or answered that it cannot serve the
// lock for now (a demoted master, a script running long elsewhere), or
// that the lock's slot is moving (slotMoving), and ctx has not ended.
// Other replies (WRONGTYPE, a script error, MOVED to a plain Client) end
// the wait, and so does a closed go-redis client: no check can succeed
// again.
func keepPlace(ctx context.Context, rdb redis.UniversalClient, err error) bool {
	if ctx.Err() != nil || errors.Is(err, redis.ErrClosed) {
		return false
	}
	var re redis.Error
	return !errors.As(err, &re) || backend.CannotServe(err) || slotMoving(rdb, err)
}
