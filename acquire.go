package dlock

import (
	"context"
	"fmt"
	"time"
)

// Lock acquires the lock named key, waiting until it is granted or ctx ends.
//
// Waiters queue in Redis in arrival order. A release hands the lock straight
// to the first live waiter and tells that waiter alone over pub/sub, so
// waiting costs no polling and nobody starves. If ctx was derived from the
// Context of a lock this Client holds on key, Lock re-enters it instead.
// The returned lock is renewed by the Client's watchdog until Unlock
// (see WithTTL, WithoutRenewal, WithMaxHold); WithRetry bounds the wait.
func (c *Client) Lock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, key, true, opts)
}

// TryLock makes one attempt and returns an error wrapping ErrNotObtained if
// the lock is held by someone else (or others are queued for it). A context
// derived from a held lock's Context re-enters it, as with Lock.
func (c *Client) TryLock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, key, false, opts)
}

func (c *Client) acquire(ctx context.Context, key string, wait bool, opts []LockOption) (*Lock, error) {
	if err := c.check(key); err != nil {
		return nil, err
	}
	cfg, err := newLockConfig(opts)
	if err != nil {
		return nil, err
	}
	if h, ok := ctx.Value(heldKey{c, key}).(*hold); ok {
		return c.reenter(ctx, h)
	}
	a := &attempt{c: c, key: key, keys: c.keys(key), token: newToken(), cfg: cfg}
	// A lock handed over while we wait starts with at most a queue TTL of
	// lease, so that if we died meanwhile it is stuck no longer than that;
	// the watchdog extends it to the full lease at its first renewal.
	a.grantLease = cfg.ttl
	if cfg.renew {
		a.grantLease = min(cfg.ttl, c.cfg.queueTTL)
	}
	return a.run(ctx, wait)
}

// attempt is one call of Lock or TryLock that has not got the lock yet.
type attempt struct {
	c          *Client
	key        string
	keys       lockKeys
	token      string
	cfg        lockConfig
	grantLease time.Duration
	queued     bool
}

func (a *attempt) run(ctx context.Context, wait bool) (*Lock, error) {
	join := "0"
	if wait {
		join = "1"
	}
	args := []any{a.token, ms(a.cfg.ttl), a.c.metadata(a.cfg.meta), join, ms(a.c.cfg.queueTTL), ms(a.grantLease)}
	// notHeldAt is the start of the last check that found the lock held by
	// another: a hand-over to us happened after it, so a lease granted by
	// hand-over is measured from there.
	var notHeldAt time.Time
	var wt *waiter
	defer func() {
		if wt != nil {
			wt.leave()
		}
	}()
	refresh := min(a.c.cfg.queueTTL, a.cfg.ttl) / 3
	// Since Go 1.23 Reset discards a stale tick: no draining needed.
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for n := 1; ; n++ {
		start := time.Now()
		if notHeldAt.IsZero() {
			notHeldAt = start
		}
		res, err := acquireScript.Run(ctx, a.c.rdb, a.keys.all(), args...).Int64Slice()
		if err != nil {
			// The script may have run even if its reply was lost: make sure
			// we take nothing and leave no queue entry behind.
			a.abandon(ctx)
			return nil, redisError("lock", a.key, err)
		}
		switch res[0] {
		case 1:
			return a.c.newLock(ctx, a, uint64(res[1]), start, a.cfg.ttl)
		case 2:
			return a.c.newLock(ctx, a, uint64(res[1]), notHeldAt, a.grantLease)
		}
		if !wait {
			return nil, fmt.Errorf("dlock: lock %q: %w", a.key, ErrNotObtained)
		}
		a.queued = true
		notHeldAt = start

		delay := refresh
		if a.cfg.retry != nil {
			d, ok := a.cfg.retry.Backoff(n)
			if !ok {
				a.abandon(ctx)
				return nil, fmt.Errorf("dlock: lock %q: %w: gave up after %d checks", a.key, ErrNotObtained, n)
			}
			delay = min(delay, d)
		}
		if pttl := time.Duration(res[1]) * time.Millisecond; pttl > 0 {
			// The holder's lease runs out by then at the latest.
			delay = min(delay, pttl+time.Millisecond)
		}
		if wt == nil {
			if wt, err = a.c.wake.subscribe(ctx, a.keys.channel, a.token); err != nil {
				wt = nil // wait by the timer alone
				a.c.log.Debug("dlock: subscribe failed", "key", a.key, "error", err)
			}
		}
		var ready, nudge <-chan struct{}
		var granted <-chan uint64
		if wt != nil {
			granted, nudge = wt.granted, wt.nudge
			select {
			case <-wt.ready:
			default:
				// A hand-over sent before the subscription took effect is
				// missed: check again as soon as it does.
				ready = wt.ready
			}
		}
		timer.Reset(delay)
		select {
		case fence := <-granted:
			return a.c.newLock(ctx, a, fence, notHeldAt, a.grantLease)
		case <-ready:
		case <-nudge:
		case <-timer.C:
		case <-ctx.Done():
			a.abandon(ctx)
			return nil, fmt.Errorf("dlock: lock %q: waiting ended: %w", a.key, ctx.Err())
		}
	}
}

// abandon leaves the queue, releasing the lock if it was handed to us after
// all: a waiter that gives up takes nothing.
func (a *attempt) abandon(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := releaseScript.Run(rctx, a.c.rdb, a.keys.all(), a.token, 1).Err(); err != nil {
		a.c.log.Debug("dlock: leaving the queue failed", "key", a.key, "error", err)
	}
}

// newLock starts a hold granted for lease at some instant after start.
func (c *Client) newLock(ctx context.Context, a *attempt, fence uint64, start time.Time, lease time.Duration) (*Lock, error) {
	h := &hold{key: a.key, keys: a.keys, token: a.token, fence: fence, lease: a.cfg.ttl, renew: a.cfg.renew}
	if a.cfg.maxHold > 0 {
		h.renewUntil = start.Add(a.cfg.maxHold)
	}
	h.trust(start, lease)
	h.ctx, h.cancel = context.WithCancelCause(context.WithValue(context.WithoutCancel(ctx), heldKey{c, a.key}, h))
	if err := c.dog.add(h); err != nil {
		a.abandon(ctx)
		h.cancel(err)
		return nil, err
	}
	return &Lock{c: c, h: h, level: 1, ctx: h.ctx, cancel: h.cancel}, nil
}

// reenter adds a hold to a lock this Client already holds.
func (c *Client) reenter(ctx context.Context, h *hold) (*Lock, error) {
	if h.ctx.Err() != nil {
		return nil, fmt.Errorf("dlock: lock %q: re-enter: %w", h.key, context.Cause(h.ctx))
	}
	n, err := reenterScript.Run(ctx, c.rdb, []string{h.keys.lock}, h.token).Int64()
	if err != nil {
		return nil, redisError("re-enter", h.key, err)
	}
	l := &Lock{c: c, h: h}
	if n == 0 {
		return nil, l.lost("re-enter")
	}
	l.level = int(n)
	l.ctx, l.cancel = context.WithCancelCause(h.ctx)
	return l, nil
}
