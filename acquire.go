package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/backend"
)

// Lock acquires the lock named key, waiting until it is granted or ctx ends.
//
// Waiters queue in Redis in arrival order. A release hands the lock straight
// to the first live waiter and tells that waiter alone over pub/sub, so
// waiting costs no polling and nobody starves. If ctx was derived from the
// Context of a lock this Client holds on key, Lock re-enters it instead,
// after any other re-entry or inner Unlock of that lock under way (or it
// returns ctx's error if ctx ends first; if the lock ended meanwhile, an
// error wrapping its Context's cause, ErrReleased or ErrLockLost).
// The returned lock is renewed by the Client's watchdog until Unlock (see
// WithTTL, WithoutRenewal, WithMaxHold); WithRetry bounds the wait. Redis
// out of reach (or answering that it cannot serve the lock for now, but for
// a Cluster slot being migrated, TRYAGAIN, which Lock waits out) is not
// waited for: a first request that fails returns its error at once (or a
// degraded Lock, WithDegradedMode). A waiter already queued keeps waiting,
// and its place, through such failures while its queue entry lives
// (WithQueueTTL), then returns the error. A waiter that gives up leaves the
// queue, and releases what its last check may have taken, before it
// returns if Redis answers within 1 s (as an Unlock whose ctx has ended
// waits for its release). If it does not (it hangs; on Redis Cluster, the
// lock's slot is being migrated), Lock returns then, about 1 s past ctx's
// end at most, and the leaving goes on in the background; Close waits for
// it. go-redis cuts a request short at ctx's deadline only with
// Options.ContextTimeoutEnabled, and never at a cancellation: a check on
// its way when ctx is cancelled (or, without that option, when its
// deadline passes) is waited for up to the client's ReadTimeout. Once Lock
// waits, its checks (with WithReplicaAck, their WAIT too, and the lease
// set again after a hand-over) and its first subscription to the
// hand-overs are not waited for past ctx's end.
func (c *Client) Lock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, key, true, nil, opts)
}

// TryLock makes one attempt and returns an error wrapping ErrNotObtained if
// the lock is held by someone else (or others are queued for it). A context
// derived from a held lock's Context re-enters it, as with Lock. An attempt
// whose reply does not come (an error, or ctx ended) may have taken the
// lock, and one whose reply comes after the lease could be trusted cannot
// be handed out: TryLock releases it before it returns, waiting for that
// as long as Lock does (about 1 s past ctx's end at most).
func (c *Client) TryLock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, key, false, nil, opts)
}

// acquire takes the lock named key, or, if p is set, permits of the
// semaphore named key (which are not reentrant).
func (c *Client) acquire(ctx context.Context, key string, wait bool, p *backend.Permits, opts []LockOption) (l *Lock, err error) {
	if err := c.check(key); err != nil {
		return nil, err
	}
	cfg, err := newLockConfig(opts)
	if err != nil {
		return nil, err
	}
	if p != nil {
		if err := checkPermits(p, &cfg); err != nil {
			return nil, fmt.Errorf("dlock: %s %q: %w", p.Kind, key, err)
		}
	}
	// A hold that has ended while ctx lives was not found through ctx's
	// cancellation chain but through values copied into another lock's
	// Context (Lock(a.Context(), "b") and a is unlocked since): it is not
	// held, so take the lock as usual.
	if h, ok := ctx.Value(heldKey{c, key}).(*hold); ok && p == nil && (h.ctx.Err() == nil || ctx.Err() != nil) {
		if c.isClosed() {
			return nil, ErrClosed
		}
		// Reported even if the re-entry panics (the Observer's Lost of a
		// loss it found, a go-redis hook), as a Lock call's end is.
		ended := false
		defer func() {
			if !ended {
				c.reentered(ctx, h, nil, fmt.Errorf("dlock: lock %q: re-enter: %w", key, errAcquirePanicked))
			}
		}()
		l, err := c.reenter(ctx, h)
		ended = true
		c.reentered(ctx, h, l, err)
		return l, err
	}
	req := backend.Request{
		Key:   key,
		Token: backend.NewToken(),
		TTL:   cfg.ttl,
		Renew: cfg.renew,
		Meta:  c.metadata(cfg.meta),
		Wait:  wait,

		Permits: p,
		Ops:     &c.ops,
	}
	if cfg.retry != nil {
		req.Retry = cfg.retry
	}
	x, actx, err := c.prepare(ctx, &req, &cfg) // hooks.go
	if err != nil {
		return nil, err
	}
	if x != nil && x.local != nil {
		// Unless a Lock holds it now, the key's in-process lock goes back:
		// on an error, and on a panic on the way (a RetryStrategy's, a
		// go-redis hook's), else the Client's other goroutines would wait
		// for it forever.
		defer func() {
			if l == nil {
				x.local.unlock()
			}
		}()
	}
	// A panic from here on (a RetryStrategy's, a go-redis hook's) ends the
	// acquisition: the Observer hears of it. Every return has reported.
	defer c.acquirePanicked(actx, x, &req)
	// Close waits for the Redis part of the call only: the Observer's
	// callbacks may call Close themselves.
	if !c.begin() {
		c.acquireEnd(actx, x, &req, nil, ErrClosed)
		return nil, ErrClosed
	}
	g, err := c.beAcquire(actx, req)
	if err != nil {
		c.ops.Done()
		return c.acquireFailed(ctx, actx, x, &req, &cfg, err)
	}
	h := &hold{lease: g.Lease, fence: g.Fence, kind: kindOf(p), levels: 1, ttl: cfg.ttl, renew: cfg.renew, x: x.granted()}
	// A lock handed over to a waiter is held from the hand-over, not from
	// the waiter's last check before it: hold times count from there.
	began := g.Start
	if !g.Began.IsZero() {
		began = g.Began
	}
	if x != nil {
		x.leased = began
	}
	if cfg.maxHold > 0 {
		h.renewUntil = began.Add(cfg.maxHold)
	}
	h.trust(g.Start, g.TTL)
	hctx := context.WithoutCancel(ctx)
	if p == nil {
		// Lock with this Context, or one derived from it, re-enters.
		hctx = context.WithValue(hctx, heldKey{c, key}, h)
	}
	h.ctx, h.cancel = context.WithCancelCause(hctx)
	h.endsLocal()
	if !time.Now().Before(h.deadline) {
		// The reply came after the lease could be trusted: Redis may have
		// given the lock to someone else already.
		// Permits say so as lost permits do (lostErr), naming their
		// semaphore.
		lost := h.lostErr()
		if p == nil {
			lost = fmt.Errorf("dlock: lock %q: %w", key, ErrLockLost)
		}
		err = fmt.Errorf("%w: the lease ran out before the grant's reply arrived", lost)
	} else {
		err = c.dog.add(h)
	}
	if err != nil {
		// Waited for as a waiter's leaving is (abandon): up to
		// endedUnlockWait, then it goes on in the background, counted for
		// Close. Through c.release: a late grant overran its adaptive
		// lease, and only a recorded overrun lengthens the next one.
		func() {
			// Done for Close even if the release panics (a go-redis
			// hook's), as in beAcquire, or Close would wait out its bound.
			defer c.ops.Done()
			backend.Detach(&c.ops, endedUnlockWait, func() {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
				defer cancel()
				_, _ = c.release(rctx, h, 1)
			}, c.log, "dlock: panic while releasing a grant not handed out", "key", key, "kind", kindOf(p))
			h.cancel(err)
		}()
		c.acquireEnd(actx, x, &req, nil, err)
		return nil, err
	}
	c.ops.Done()
	return c.handOut(ctx, actx, x, &req, h), nil
}

// beAcquire is the backend's Acquire, in a call Close waits for (begin).
// A panic in it (a RetryStrategy's, a go-redis hook's) ends that call, or
// Close would wait for it, and leak.
func (c *Client) beAcquire(ctx context.Context, req backend.Request) (backend.Grant, error) {
	panicked := true
	defer func() {
		if panicked {
			c.ops.Done()
		}
	}()
	g, err := c.be.Acquire(ctx, req)
	panicked = false
	return g, err
}

// handOut reports a grant to the Observer and returns its Lock. If the
// Observer panics, the lock is released on the panic's way out (waited for
// up to endedUnlockWait, then in the background): no caller gets it to
// unlock, and the watchdog would keep it held until Close (or, once Close
// has ended it, Redis for its whole lease).
func (c *Client) handOut(ctx, actx context.Context, x *holdExtra, req *backend.Request, h *hold) *Lock {
	l := &Lock{c: c, h: h, level: 1, ctx: h.ctx, cancel: h.cancel}
	handed, reported := false, false
	defer func() {
		if !handed {
			// Its AcquireEnd ran, panicking: a loss held back for it is
			// reported now, and a later one as any other, or the
			// Observer counts the lock held for good. A panic in Lost is
			// logged: the caller gets AcquireEnd's. If AcquireEnd
			// returned, the panic is that of the Lost of such a loss,
			// reported already.
			if !reported {
				if cause := c.dog.handedOut(h); cause != nil {
					c.noPanic("Observer", func() { c.observeLost(h, cause) })
				}
			}
			// Waited for as a grant that was not handed out is (acquire);
			// counted for Close unless it has closed (Unlock still
			// releases then).
			var ops *sync.WaitGroup
			if c.begin() {
				ops = &c.ops
				defer c.ops.Done()
			}
			backend.Detach(ops, endedUnlockWait, func() {
				uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
				defer cancel()
				unlocked := false
				defer func() {
					// Unlock panicked before its release (the Observer's
					// ReleaseStart), leaving the hold as it was: release
					// it all the same, or the watchdog keeps it until Close.
					// No ReleaseEnd ended the hold: it is reported as a
					// failed release's, or the Observer counts it held.
					switch {
					case c.dog.remove(h):
						_, _ = c.release(uctx, h, 1)
						cause := fmt.Errorf("%w: %w: %w", h.lostErr(), errReleaseFailed, errReleasePanicked)
						h.cancel(cause)
						c.observeLost(h, cause)
					case !unlocked:
						// Ended and reported already (Close, a loss): the
						// key may still be in Redis, for an Unlock nobody
						// can call. If Unlock panicked after its release,
						// this one finds the token gone and changes
						// nothing; it records no hold time either.
						_, _ = c.beFor(h).Release(uctx, h.lease, 1)
					}
				}()
				_ = l.Unlock(uctx)
				unlocked = true
			}, c.log, "dlock: panic while releasing a lock not handed out", "key", req.Key, "kind", h.kind)
		}
	}()
	c.acquireEnd(actx, x, req, h, nil)
	reported = true
	if cause := c.dog.handedOut(h); cause != nil {
		// Lost (or closed) while AcquireEnd was under way. If Lost
		// panics, the caller gets no Lock either: released as above
		// (Close leaves the key in Redis for the Unlock it would have).
		c.observeLost(h, cause)
	}
	handed = true
	return l
}

// reenter adds a hold to a lock this Client already holds.
func (c *Client) reenter(ctx context.Context, h *hold) (*Lock, error) {
	if h.ctx.Err() != nil {
		return nil, reenterEnded(h)
	}
	n, err := h.changeLevel(ctx, func(levels int) (int64, error) {
		return c.beReenter(ctx, h, levels+1)
	})
	if err != nil && h.ctx.Err() != nil && (errors.As(err, new(notSentError)) || ctx.Err() != nil && errors.Is(err, ctx.Err())) {
		// It waited for another level change, or its request was cut
		// short by ctx, and the hold ended meanwhile (ctx is usually the
		// hold's own, which that end cancelled): say why.
		return nil, reenterEnded(h)
	}
	if err != nil {
		return nil, redisError("re-enter", h.lease.Key, err)
	}
	l := &Lock{c: c, h: h}
	if n == 0 {
		return nil, l.lost("re-enter")
	}
	if h.ctx.Err() != nil {
		// Ended on this side while the request was on its way (Close,
		// its lease by our clock): no Lock that has ended already, as
		// for an acquisition. The outermost Unlock still removes the
		// count Redis has just raised.
		return nil, reenterEnded(h)
	}
	l.level = int(n)
	l.ctx, l.cancel = context.WithCancelCause(h.ctx)
	return l, nil
}

// reenterEnded is the error of a re-entry of h, which has ended.
func reenterEnded(h *hold) error {
	return fmt.Errorf("dlock: lock %q: re-enter: %w", h.lease.Key, context.Cause(h.ctx))
}

// beReenter is the backend's Reenter, in a call Close waits for (begin).
// Only the Redis part: a loss it finds is reported after it (the
// Observer's Lost may call Close), and a panic in it (a go-redis hook's)
// ends the call.
func (c *Client) beReenter(ctx context.Context, h *hold, level int) (int64, error) {
	if !c.begin() {
		return 0, ErrClosed
	}
	defer c.ops.Done()
	return c.beFor(h).Reenter(ctx, h.lease, level)
}
