package dlock

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/dlock-go/dlock/internal/backend"
)

// WithAdaptiveTTL sizes the fixed lease of a lock taken WithoutRenewal from
// how long this key's locks were held recently, instead of a fixed WithTTL.
//
// Each Unlock of such a lock records its hold time, from where its lease
// counts from: just before the acquire request was sent, so that the
// acquisition's round trip is covered, or, for a lock handed over to a
// waiter, the hand-over (the time spent queued is not counted; the time the
// waiter took to learn of it is, read back from the lease left by its next
// check, or by the round trip it makes once told by message; with
// WithReplicaAck, which sets the lease again, from there). It is kept in
// Redis,
// in a small hash beside the lock (prefix{key}:stats, shared by every
// process and kept for a week after its last update), as moving averages
// of the hold time and of its deviation (as TCP estimates round trips,
// RFC 6298). Each acquisition reads them (one more round trip) and asks
// for a lease of
//
//	margin × (average + 4 × deviation)
//
// plus the clock drift margin, at least MinTTL and at most max (0: MaxTTL).
// margin must be at least 1; 1.5 to 2 suits most work. Until the key has a
// hold time on record, the lease is WithTTL's. Locks taken without this
// option neither read nor write the statistics. A Client on a backend
// without statistics (Redlock) uses WithTTL's lease.
//
// Prefer it to the watchdog (the default renewal) for short, regular work
// taken often: no renewal traffic and no watchdog wake-ups, and a holder
// that crashes blocks the others only for about its usual hold time rather
// than a whole WithTTL lease. Prefer the watchdog when hold times vary
// widely or are unknown, when the work cannot stop half-way, or when the
// process may stall (long GC pauses, a swapping host): a hold that runs
// past its adaptive lease loses the lock (its Context is cancelled at the
// deadline), and that overrun, once recorded, only lengthens later leases.
// Under contention a waiter told of the hand-over by message trusts the
// lease from a round trip that reads what is left of it, so the margin
// need not cover the time since its last check (up to a third of the
// lease).
func WithAdaptiveTTL(margin float64, max time.Duration) LockOption {
	return func(c *lockConfig) { c.ext.adaptive = &adaptiveConfig{margin: margin, max: max} }
}

type adaptiveConfig struct {
	margin float64
	max    time.Duration
}

func (a *adaptiveConfig) validate(cfg *lockConfig) error {
	if cfg.renew {
		return fmt.Errorf("%w: WithAdaptiveTTL sizes a fixed lease: use it with WithoutRenewal", ErrInvalidOption)
	}
	if !(a.margin >= 1) || math.IsInf(a.margin, 0) {
		return fmt.Errorf("%w: adaptive lease margin %v, want >= 1", ErrInvalidOption, a.margin)
	}
	if a.max != 0 && (a.max < MinTTL || a.max > MaxTTL) {
		return fmt.Errorf("%w: adaptive lease max %v outside [%v, %v]", ErrInvalidTTL, a.max, MinTTL, MaxTTL)
	}
	return nil
}

// lease is the lease that covers the hold times s describes.
func (a *adaptiveConfig) lease(s backend.HoldStats) time.Duration {
	hi := a.max
	if hi == 0 {
		hi = MaxTTL
	}
	// In float64 and capped before converting: a huge margin or hold time
	// must give max, not wrap around to a tiny or negative lease.
	f := a.margin * (float64(s.Mean) + 4*float64(s.Dev))
	if !(f < float64(hi)) {
		return hi
	}
	d := time.Duration(f)
	d += backend.Drift(d)
	return min(max(d, MinTTL), hi)
}

// sizeLease sets the lease of an adaptive acquisition from the key's
// statistics. It reports whether the backend keeps statistics (then the
// hold time is recorded at release).
func (c *Client) sizeLease(ctx context.Context, req *backend.Request, cfg *lockConfig, a *adaptiveConfig) bool {
	hr, ok := c.be.(backend.HoldRecorder)
	if !ok {
		return false
	}
	s, err := hr.HoldStats(ctx, req.Key)
	if err != nil {
		// The acquisition will most likely fail too; if not, the fixed
		// lease will do.
		c.log.LogAttrs(ctx, slog.LevelDebug, "dlock: reading hold times failed", slog.String("key", req.Key), slog.String("kind", kindOf(req.Permits)), slog.Any("error", err))
		return true
	}
	if s.Samples > 0 {
		req.TTL = a.lease(s)
		cfg.ttl = req.TTL
	}
	return true
}
