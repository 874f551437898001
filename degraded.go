package dlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
)

// DegradedMode says what a Client does when Redis cannot be reached while
// it takes a lock, or answers that it cannot serve it for now (LOADING,
// READONLY, MASTERDOWN, NOREPLICAS, OOM, MISCONF, CLUSTERDOWN, TRYAGAIN,
// BUSY, max number of clients reached). Not MOVED or ASK: a ClusterClient
// whose redirections ran out is answered so only while a slot moves, and
// a plain Client pointed at one node of a Cluster every time.
type DegradedMode uint8

const (
	// FailFast returns the error (the default): no lock without Redis.
	FailFast DegradedMode = iota
	// LocalFallback grants the lock in-process only when Redis cannot be
	// reached, or answers that it cannot serve the lock for now (as a
	// TryLock while the lock's Cluster slot is being migrated: Lock waits
	// for the migration to end), so the goroutines of one Client still
	// take turns. It is NOT a distributed lock: other processes are not
	// excluded at all, and nothing is fenced.
	LocalFallback
)

// String returns "fail_fast" or "local_fallback".
func (m DegradedMode) String() string {
	return label([]string{"fail_fast", "local_fallback"}, int(m))
}

// ErrDegraded is returned by Extend, TTL and Txn of a degraded lock: it
// has no lease to extend or read, and Redis does not hold it.
var ErrDegraded = errors.New("dlock: degraded lock: held in this process only, Redis was unreachable")

// WithDegradedMode sets what the Client does when Redis cannot be reached
// (connection refused or reset, timeouts) or answers that it cannot serve
// the lock for now (see DegradedMode: a server still loading, read-only or
// without a master, a cluster down or moving the slot, a script running
// long elsewhere): FailFast (the default) returns the error; LocalFallback
// hands out a degraded Lock, taken on an in-process lock of this Client
// only, and logs a warning.
//
// LocalFallback is unsafe across processes: while Redis is down, every
// process believes it holds the lock, and one that still reaches Redis may
// hold it too. Use it only where a process serializing its own work is
// better than stopping, and the work tolerates running twice. A degraded
// Lock reports Degraded() true and Fence() 0 (so a fenced resource rejects
// its writes), has no lease (Extend and TTL return ErrDegraded) and is lost
// only by Close, or, with WithMaxHold(d), once held for d (the Observer
// hears LostExpired), which gives the in-process lock to the next
// goroutine; it stays degraded until unlocked or lost, even if Redis comes
// back. LocalFallback turns WithLocalQueue on, so that a degraded Lock
// and a Lock taken from Redis by the same Client never overlap.
//
// With Redlock, the nodes count as unreachable only when too few of them
// answered (redlock.ErrNoQuorum) and every one that failed was down, hung
// or cannot serve for now: if a node says that another owner holds the
// lock, or answers with an error that will not pass (NOPERM, WRONGTYPE),
// Lock returns the error whatever the other nodes did.
func WithDegradedMode(m DegradedMode) Option {
	return func(c *clientConfig) { c.ext.degraded = m }
}

// Degraded reports whether the lock was taken in-process only because
// Redis was unreachable (WithDegradedMode): it excludes the goroutines of
// its Client and nothing else.
func (l *Lock) Degraded() bool { return l != nil && l.h != nil && l.h.x != nil && l.h.x.degraded }

// degrade grants a lock in-process only after the Redis acquisition failed
// with err: x already holds the key's local lock.
func (c *Client) degrade(ctx, actx context.Context, x *holdExtra, req *backend.Request, cfg *lockConfig, cause error) (*Lock, error) {
	x.degraded = true
	x.count = 1
	h := &hold{lease: &backend.Lease{Key: req.Key, Token: req.Token}, kind: kindOf(nil), levels: 1, ttl: cfg.ttl, x: x.granted()}
	// No lease: the watchdog never renews it; it declares it lost at the
	// max hold (WithMaxHold), if any, and else only at Close.
	h.deadline = time.Now().Add(100 * 365 * 24 * time.Hour)
	if cfg.maxHold > 0 {
		h.deadline = x.acquired.Add(cfg.maxHold)
	}
	h.ctx, h.cancel = context.WithCancelCause(context.WithValue(context.WithoutCancel(ctx), heldKey{c, req.Key}, h))
	h.endsLocal()
	// Lost at its max hold, its in-process lock goes to the next goroutine:
	// it is held no more, and a late Unlock says so (ErrNotHeld,
	// ErrLockLost), as when a lease runs out in Redis. Close leaves it held,
	// as it leaves a Redis lock: Unlock still frees it.
	end := h.cancel
	h.cancel = func(cause error) {
		if !errors.Is(cause, ErrReleased) && !errors.Is(cause, ErrClosed) {
			x.mu.Lock()
			x.count = 0
			x.mu.Unlock()
		}
		end(cause)
	}
	if err := c.dog.add(h); err != nil {
		h.cancel(err)
		c.acquireEnd(actx, x, req, nil, err)
		return nil, err
	}
	c.log.Warn("dlock: lock granted in degraded mode: held in this process only, other processes not excluded",
		"key", req.Key, "kind", h.kind, "error", cause)
	return c.handOut(ctx, actx, x, req, h), nil
}

// unreachable reports whether err, from an acquisition whose context ctx
// is still live, means that Redis could not be reached, rather than an
// answer (held elsewhere, wrong type) or the caller giving up.
func unreachable(ctx context.Context, err error) bool {
	if err == nil || ended(ctx) || errors.Is(err, ErrNotObtained) || errors.Is(err, ErrClosed) || errors.Is(err, ErrWrongType) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) || errors.Is(err, errNoAnswer) {
		return true // dial, read or write failed (even if also a timeout), or no answer in time
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return backend.CannotServe(err)
	}
	var ne net.Error
	return errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, redis.ErrPoolTimeout)
}

// unreachable is the function unreachable, asking the backend first: a
// Redlock error is judged by all of its nodes' votes (backend.Reacher).
func (c *Client) unreachable(ctx context.Context, err error) bool {
	if r, ok := c.be.(backend.Reacher); ok && err != nil && !ended(ctx) {
		if u, known := r.Unreachable(err, func(e error) bool { return unreachable(ctx, e) }); known {
			return u
		}
	}
	return unreachable(ctx, err)
}

// ended reports whether ctx has ended or its deadline has passed: a
// socket deadline taken from ctx (go-redis's ContextTimeoutEnabled) may
// fail a read an instant before ctx's own timer sets its error.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// degradedBackend stands for the backend of a degraded lock: it only counts
// reentrant holds; the in-process lock itself is given back when the hold
// ends (hold.endsLocal).
type degradedBackend struct{ x *holdExtra }

var _ backend.Backend = degradedBackend{}

func (degradedBackend) Acquire(context.Context, backend.Request) (backend.Grant, error) {
	return backend.Grant{}, ErrDegraded
}

func (degradedBackend) Renew(_ context.Context, rs []backend.Renewal) []backend.Renewed {
	out := make([]backend.Renewed, len(rs))
	for i := range out {
		out[i].Err = ErrDegraded
	}
	return out
}

func (degradedBackend) Extend(context.Context, *backend.Lease, time.Duration) (backend.Outcome, error) {
	return backend.Unknown, ErrDegraded
}

func (degradedBackend) TTL(context.Context, *backend.Lease) (time.Duration, backend.Outcome, error) {
	return 0, backend.Unknown, ErrDegraded
}

// Release mirrors lua/release.lua on the in-process hold count.
func (d degradedBackend) Release(_ context.Context, _ *backend.Lease, level int) (int64, error) {
	d.x.mu.Lock()
	defer d.x.mu.Unlock()
	if d.x.count == 0 {
		return -1, nil
	}
	keep := level - 1
	if d.x.count <= keep {
		return int64(d.x.count), nil
	}
	d.x.count = keep
	return int64(keep), nil
}

// Reenter mirrors lua/reenter.lua, and fails with an ended ctx, as a
// re-entry sent to Redis would.
func (d degradedBackend) Reenter(ctx context.Context, _ *backend.Lease, level int) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	d.x.mu.Lock()
	defer d.x.mu.Unlock()
	if d.x.count == 0 {
		return 0, nil
	}
	d.x.count = max(d.x.count, level)
	return int64(level), nil
}

func (degradedBackend) Close() error { return nil }

// beFor returns the backend that h lives in.
func (c *Client) beFor(h *hold) backend.Backend {
	if h.x != nil && h.x.degraded {
		return degradedBackend{h.x}
	}
	return c.be
}

// validate checks the mode.
func (m DegradedMode) validate() error {
	if m > LocalFallback {
		return fmt.Errorf("%w: degraded mode %d", ErrInvalidOption, m)
	}
	return nil
}
