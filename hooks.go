package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/backend"
)

// This file joins the optional features (Observer, debug logs, the local
// queue, the degraded mode, adaptive leases) to the lock's life: acquire.go,
// lock.go and watchdog.go call these hooks. With none of the features on, a
// hook is a nil check: no allocation, no clock read.

// clientExtConfig holds the Client options of the optional features.
type clientExtConfig struct {
	observer   Observer
	localQueue bool
	degraded   DegradedMode
}

// clientExt is the Client's state for the optional features.
type clientExt struct {
	on       bool     // any of the below is set
	obs      Observer // nil: report nothing
	local    *localLocks
	degraded DegradedMode
}

func (cfg clientExtConfig) build() (clientExt, error) {
	if err := cfg.degraded.validate(); err != nil {
		return clientExt{}, err
	}
	x := clientExt{obs: cfg.observer, degraded: cfg.degraded}
	if cfg.localQueue || cfg.degraded == LocalFallback {
		x.local = newLocalLocks()
	}
	x.on = x.obs != nil || x.local != nil
	return x, nil
}

// lockExtConfig holds the lock options of the optional features.
type lockExtConfig struct {
	adaptive *adaptiveConfig // WithAdaptiveTTL
}

// holdExtra is a hold's state for the optional features; nil when none is
// on for it.
type holdExtra struct {
	start    time.Time  // the acquisition began
	acquired time.Time  // it was granted
	leased   time.Time  // its lease began: before the request was sent, or at the hand-over
	local    *localHold // the key's in-process lock, given back when the hold ends
	record   bool       // record the hold time for adaptive leases at release
	degraded bool       // held in-process only (degraded mode)
	ended    bool       // acquireEnd reported the acquisition's end

	mu    sync.Mutex
	count int // hold count of a degraded lock
}

// granted records that the lock was granted now; it returns x.
func (x *holdExtra) granted() *holdExtra {
	if x != nil {
		x.acquired = time.Now()
	}
	return x
}

// held is how long the lock has been held.
func (x *holdExtra) held() time.Duration {
	if x == nil || x.acquired.IsZero() {
		return 0
	}
	return time.Since(x.acquired)
}

// prepare runs before the backend is asked for a lock: it tells the
// Observer, sizes an adaptive lease and waits in the local queue. It
// returns the context to acquire with (the Observer's) and the hold's
// state, nil if no feature needs one.
func (c *Client) prepare(ctx context.Context, req *backend.Request, cfg *lockConfig) (*holdExtra, context.Context, error) {
	a := cfg.ext.adaptive
	if a != nil {
		if err := a.validate(cfg); err != nil {
			return nil, ctx, err
		}
	}
	if !c.ext.on && a == nil && !c.log.Enabled(ctx, slog.LevelDebug) {
		return nil, ctx, nil
	}
	x := &holdExtra{start: time.Now()}
	if c.ext.obs != nil {
		if octx := c.ext.obs.AcquireStart(ctx, AcquireStartEvent{Key: req.Key, Kind: kindOf(req.Permits), Wait: req.Wait}); octx != nil {
			ctx = octx
		}
	}
	// A panic on the way (a RetryStrategy's, a go-redis hook's) ends the
	// acquisition too: the Observer hears of it (acquire does the same
	// from here on).
	prepared := false
	defer func() {
		if !prepared {
			c.acquirePanicked(ctx, x, req)
		}
	}()
	if a != nil {
		x.record = c.sizeLease(ctx, req, cfg, a)
	}
	// The in-process lock last: from here on acquire gives it back, even
	// on a panic (a go-redis hook's, a RetryStrategy's). A semaphore has
	// none: a Client's goroutines may hold its permits together.
	if c.ext.local != nil && req.Permits == nil {
		lh, rest, err := c.ext.local.lock(ctx, req.Key, req.Wait, req.Retry, c.closed)
		if err != nil {
			c.acquireEnd(ctx, x, req, nil, err)
			return nil, ctx, err
		}
		x.local, req.Retry = lh, rest
	}
	prepared = true
	return x, ctx, nil
}

// acquirePanicked reports the end of an acquisition that a panic cut
// short, unless acquireEnd reported it already (the Observer's own panic).
func (c *Client) acquirePanicked(ctx context.Context, x *holdExtra, req *backend.Request) {
	if x != nil && !x.ended {
		c.acquireEnd(ctx, x, req, nil, fmt.Errorf("dlock: %s %q: %w", kindOf(req.Permits), req.Key, errAcquirePanicked))
	}
}

// errAcquirePanicked is the error AcquireEnd reports for a Lock or TryLock
// call that panicked.
var errAcquirePanicked = errors.New("acquisition panicked")

// acquireFailed handles an acquisition the backend refused with err: in
// the degraded mode an unreachable Redis still gets an in-process lock.
func (c *Client) acquireFailed(ctx, actx context.Context, x *holdExtra, req *backend.Request, cfg *lockConfig, err error) (*Lock, error) {
	if x != nil && x.local != nil && c.ext.degraded == LocalFallback && c.unreachable(ctx, err) {
		return c.degrade(ctx, actx, x, req, cfg, err)
	}
	c.acquireEnd(actx, x, req, nil, err)
	return nil, err
}

// acquireEnd reports the end of an acquisition: h is the hold if granted,
// err the error if not (acquire then gives the local lock back).
func (c *Client) acquireEnd(ctx context.Context, x *holdExtra, req *backend.Request, h *hold, err error) {
	if x == nil {
		return
	}
	x.ended = true
	e := AcquireEndEvent{Key: req.Key, Kind: kindOf(req.Permits), Wait: req.Wait, WaitTime: time.Since(x.start), Err: err}
	switch {
	case err == nil && x.degraded:
		e.Outcome = AcquireDegraded
	case err == nil:
		e.Outcome, e.Fence = AcquireOK, h.fence
	case errors.Is(err, ErrNotObtained):
		e.Outcome = AcquireNotObtained
	case ended(ctx) || errors.Is(err, ErrClosed) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		e.Outcome = AcquireCanceled
	default:
		e.Outcome = AcquireError
	}
	if c.ext.obs != nil {
		c.ext.obs.AcquireEnd(ctx, e)
	}
	if c.log.Enabled(ctx, slog.LevelDebug) {
		if err != nil {
			c.log.LogAttrs(ctx, slog.LevelDebug, "dlock: acquire failed", slog.String("key", req.Key), slog.String("kind", e.Kind),
				slog.String("outcome", e.Outcome.String()), slog.Duration("wait", e.WaitTime), slog.Any("error", err))
		} else {
			c.log.LogAttrs(ctx, slog.LevelDebug, "dlock: acquired", slog.String("key", req.Key), slog.String("kind", e.Kind),
				slog.Uint64("fence", e.Fence), slog.Duration("wait", e.WaitTime), slog.Bool("degraded", x.degraded))
		}
	}
}

// reentered reports a re-entry.
func (c *Client) reentered(ctx context.Context, h *hold, l *Lock, err error) {
	if c.ext.obs == nil && !c.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	e := ReenterEvent{Key: h.lease.Key, Err: err}
	if l != nil && err == nil {
		e.Level = l.level
	}
	if c.ext.obs != nil {
		c.ext.obs.Reenter(ctx, e)
	}
	if c.log.Enabled(ctx, slog.LevelDebug) {
		c.log.LogAttrs(ctx, slog.LevelDebug, "dlock: re-entered", withError([]slog.Attr{slog.String("key", e.Key), slog.String("kind", h.kind), slog.Int("hold_level", e.Level)}, err)...)
	}
}

// releaseStart tells the Observer that Unlock starts giving back a hold's
// level. It returns the context for the release and for releaseEnd.
func (c *Client) releaseStart(ctx context.Context, h *hold, level int) context.Context {
	if h.x == nil || c.ext.obs == nil {
		return ctx
	}
	if octx := c.ext.obs.ReleaseStart(ctx, ReleaseStartEvent{Key: h.lease.Key, Kind: h.kind, Level: level}); octx != nil {
		return octx
	}
	return ctx
}

// release gives back a hold's level (Unlock): through the hold's backend,
// recording the hold time of an adaptive lock. The local lock goes back
// when the hold ends (endsLocal), not here: a release that fails may leave
// the lock held in Redis until Unlock's give-up ends the hold.
func (c *Client) release(ctx context.Context, h *hold, level int) (int64, error) {
	x := h.x
	if x == nil {
		return c.be.Release(ctx, h.lease, level)
	}
	if hr, ok := c.be.(backend.HoldRecorder); ok && x.record && level == 1 && !x.degraded {
		// From where the lease began (before the request was sent), not
		// from the grant's reply: the next lease must cover the
		// acquisition's round trip too. A lock handed over to a waiter
		// began with the hand-over: the time spent queued is no hold.
		return hr.ReleaseRecording(ctx, h.lease, level, time.Since(x.leased))
	}
	return c.beFor(h).Release(ctx, h.lease, level)
}

// endsLocal makes the end of h give the key's in-process lock back
// (WithLocalQueue), whatever ends it: the last Unlock, a loss (WithMaxHold
// or the lease ran out, force-released, a failed release) or Close. The
// local lock mirrors the Redis lock, which other processes may take once
// the hold's Context has ended: the Client's own goroutines may then too,
// and a holder stuck in its critical section does not keep them out. It
// wraps h.cancel, the one way h ends, so it must run before h is shared.
func (h *hold) endsLocal() {
	if h.x == nil || h.x.local == nil {
		return
	}
	cancel, local := h.cancel, h.x.local
	h.cancel = func(cause error) {
		cancel(cause)
		local.unlock() // only the first call gives it back
	}
}

// releaseEnd reports how an Unlock of level ended: err is what Unlock
// returns (nil, an error wrapping ErrNotHeld, or the release's error), and
// ended whether it ended the hold. rctx is the context releaseStart
// returned.
func (c *Client) releaseEnd(ctx, rctx context.Context, h *hold, level int, err error, ended bool) {
	x := h.x
	// Without x, no Observer: only Debug logging, looked at now, not at
	// the grant (a slog.LevelVar may have turned it on since).
	if x == nil && !c.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	held := x.held()
	e := ReleaseEndEvent{Key: h.lease.Key, Kind: h.kind, Level: level, Held: held, Ended: ended, Err: err}
	if x != nil {
		e.Degraded = x.degraded
	}
	switch {
	case err == nil:
	case errors.Is(err, ErrNotHeld):
		e.Outcome = ReleaseNotHeld
	default:
		e.Outcome = ReleaseError
	}
	if c.ext.obs != nil {
		c.ext.obs.ReleaseEnd(rctx, e)
	}
	if c.log.Enabled(ctx, slog.LevelDebug) {
		attrs := append(make([]slog.Attr, 0, 6), slog.String("key", e.Key), slog.String("kind", e.Kind), slog.Int("hold_level", level))
		if x != nil { // the grant's time is read only for a hold with x
			attrs = append(attrs, slog.Duration("held", held))
		}
		attrs = append(attrs, slog.String("outcome", e.Outcome.String()))
		c.log.LogAttrs(ctx, slog.LevelDebug, "dlock: released", withError(attrs, err)...)
	}
}

// renewed reports a batch of renewals of the watchdog.
func (c *Client) renewed(due []*hold, outcomes []backend.Renewed) {
	if c.ext.obs == nil {
		return
	}
	for i, h := range due {
		if h.ctx.Err() != nil {
			// Released meanwhile, or ended by a Close that an earlier
			// Renew of this batch made (and that reported it Lost): its
			// answer says nothing.
			continue
		}
		e := RenewEvent{Key: h.lease.Key, Kind: h.kind, Err: outcomes[i].Err}
		switch outcomes[i].Outcome {
		case backend.Held:
			e.Outcome = RenewOK
		case backend.NotHeld:
			e.Outcome = RenewNotHeld
		default:
			e.Outcome = RenewNoAnswer
		}
		c.ext.obs.Renew(e)
	}
}

// observeLost reports a lost lock (its Context was cancelled with cause).
func (c *Client) observeLost(h *hold, cause error) {
	if c.ext.obs == nil {
		return
	}
	e := LostEvent{Key: h.lease.Key, Kind: h.kind, Held: h.x.held(), Cause: cause}
	switch {
	case errors.Is(cause, ErrClosed):
		e.Reason = LostClosed
	case errors.Is(cause, errReleaseFailed):
		e.Reason = LostReleaseFailed
	case !time.Now().Before(c.dog.deadline(h)):
		e.Reason = LostExpired
	}
	c.ext.obs.Lost(e)
}

// withError adds err to a record's attrs as "error", if there is one: the
// record of a success carries no error, rather than "error": null.
func withError(attrs []slog.Attr, err error) []slog.Attr {
	if err != nil {
		attrs = append(attrs, slog.Any("error", err))
	}
	return attrs
}
