package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/backend"
)

// releaseTimeout bounds the release that Do and an abandoned wait send on
// their own (the caller's context may already be over by then).
const releaseTimeout = 5 * time.Second

// endedUnlockWait bounds the release that an Unlock whose context had
// already ended sends all the same.
const endedUnlockWait = time.Second

// heldKey finds, in a context, the hold a Client has on a key: a Lock call
// with such a context re-enters instead of waiting for itself.
type heldKey struct {
	c   *Client
	key string
}

// Lock is a held lock. Its methods are safe for concurrent use. The zero
// Lock, and a nil *Lock, hold nothing: the Context is done, and Unlock,
// Extend, TTL and Txn given good arguments return an error wrapping
// ErrNotHeld.
//
// The lock's Context is cancelled the moment the lock cannot be trusted any
// more: Unlock (cause ErrReleased), or loss (cause ErrLockLost) when a
// renewal finds another owner or the lease runs out unrenewed. Loss is
// declared before the lease could run out in Redis, measured from before
// the acquire request was sent, less a drift margin; so while the Context
// is live, no other client can hold the lock (see docs/safety.md for the
// assumptions: no process pause longer than that margin, no failover).
type Lock struct {
	c     *Client
	h     *hold
	level int // hold count this Lock accounts for; Unlock leaves level-1

	ctx    context.Context
	cancel context.CancelCauseFunc

	// Unlocks go one at a time; released and unsure are guarded by it.
	unlocking turn
	released  bool
	unsure    bool // a release was sent but its reply was lost
}

func init() {
	backend.TrustedUntil = func(l any) time.Time {
		lk := l.(*Lock)
		return lk.c.dog.deadline(lk.h)
	}
}

// errZeroLock is the error of the zero Lock's calls.
var errZeroLock = fmt.Errorf("%w: zero Lock", ErrNotHeld)

// zeroLockCtx is the zero Lock's Context: it holds nothing.
var zeroLockCtx = func() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errZeroLock)
	return ctx
}()

// Key returns the lock's name, as given to Lock.
func (l *Lock) Key() string {
	if l == nil || l.h == nil {
		return ""
	}
	return l.h.lease.Key
}

// Token returns the random owner token identifying this holder in Redis.
func (l *Lock) Token() string {
	if l == nil || l.h == nil {
		return ""
	}
	return l.h.lease.Token
}

// Fence returns the fencing token: strictly greater than that of every
// earlier holder of this key. Pass it to the protected resource and have it
// reject writes carrying a smaller one than it has seen; that stops a holder
// that paused past its lease. Reentrant Locks share their outer Lock's fence.
// The Lock of a Semaphore's (or an RWMutex's) permits has a fence greater
// than that of every earlier grant of the semaphore, but several holders
// are live at once, so a smaller fence is not a stale one (see
// docs/safety.md).
func (l *Lock) Fence() uint64 {
	if l == nil || l.h == nil {
		return 0
	}
	return l.h.fence
}

// Context returns a context that is cancelled when the lock is released or
// lost; context.Cause returns ErrReleased or an error wrapping ErrLockLost.
// Passing it (or a context derived from it) to Lock for the same key
// re-enters the lock; the Lock of a Semaphore's permits or of an RWMutex
// is not reentrant.
func (l *Lock) Context() context.Context {
	if l == nil || l.ctx == nil {
		return zeroLockCtx
	}
	return l.ctx
}

// Done returns a channel closed when the lock is released or lost.
func (l *Lock) Done() <-chan struct{} { return l.Context().Done() }

// Extend resets the lease to ttl from now and makes ttl the lease the
// watchdog keeps renewing. It fails with an error wrapping ErrLockLost if
// the lock was lost, ErrReleased if it was unlocked, or ErrDegraded if the
// lock is degraded (WithDegradedMode). While it is under
// way, Redis may have set the new lease already: the lock is trusted no
// longer than the shorter of the two. If it fails otherwise, Redis may or
// may not have the new lease: until a renewal succeeds, the lock is
// trusted no longer than the shorter of the two, and the watchdog renews
// for the shorter of the two until an Extend succeeds (the failed request
// may still reach Redis after a renewal, and shorten the lease that
// renewal set). An Extend whose ctx has already ended is not sent, and
// changes nothing.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return fmt.Errorf("%w: lease %v outside [%v, %v]", ErrInvalidTTL, ttl, MinTTL, MaxTTL)
	}
	if err := l.live("extend"); err != nil {
		return err
	}
	if l.Degraded() {
		return redisError("extend", l.Key(), ErrDegraded)
	}
	if err := ctx.Err(); err != nil {
		// Never sent, so nothing changed: unlike a request whose ctx ends
		// on its way, it does not shorten the lease trusted.
		return fmt.Errorf("dlock: extend %q: %w", l.Key(), err)
	}
	if err := l.c.dog.claim(ctx, l.h); err != nil {
		if lerr := l.live("extend"); lerr != nil {
			return lerr // lost or released before the Extend was sent
		}
		return fmt.Errorf("dlock: extend %q: %w", l.Key(), err)
	}
	start := time.Now()
	l.c.dog.extending(l.h, start, ttl)
	// A panic in the request (a go-redis hook's) ends the Extend as one
	// whose outcome is unknown: claim's mark must go, or no renewal (nor
	// Extend) of the lock would start again, and it would be lost at its
	// deadline.
	panicked := true
	defer func() {
		if panicked {
			l.c.dog.extended(l.h, start, ttl, backend.Unknown, errExtendPanicked)
		}
	}()
	o, err := l.c.be.Extend(ctx, l.h.lease, ttl)
	panicked = false
	l.c.dog.extended(l.h, start, ttl, o, err)
	if err != nil {
		return redisError("extend", l.Key(), err)
	}
	if o != backend.Held {
		return l.lost("extend")
	}
	// Declared lost (its deadline passed, or Close) while the request was
	// on its way: nothing watches the lease Redis has just set.
	return l.live("extend")
}

// errExtendPanicked stands for the outcome of an Extend whose request
// panicked: it may or may not have reached Redis.
var errExtendPanicked = errors.New("extend panicked")

// TTL returns how long Redis will keep the lock if it is not renewed. It
// is 0 if someone removed the lock key's expiry behind the Client's back
// (PERSIST); the next renewal, if the lock is renewed, sets one again.
// A renewed lock (or permits) handed over to a waiter starts, without
// WithReplicaAck, with a lease of at most the queue TTL (WithQueueTTL),
// which the watchdog's first renewal lengthens to the WithTTL lease.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if err := l.live("ttl"); err != nil {
		return 0, err
	}
	d, o, err := l.c.beFor(l.h).TTL(ctx, l.h.lease)
	if err != nil {
		return 0, redisError("ttl", l.Key(), err)
	}
	if o != backend.Held {
		return 0, l.lost("ttl")
	}
	if err := l.live("ttl"); err != nil {
		return 0, err // declared lost while the read was on its way
	}
	return d, nil
}

// Unlock releases this hold: a reentrant Lock gives back its level, the
// outermost one releases the lock and hands it to the next waiter. It
// returns an error wrapping ErrNotHeld if the lock was not held any more
// (and ErrLockLost too if it had been lost). The Context, not Unlock, is
// what tells a holder that its lock was lost: a lock declared lost when its
// lease could no longer be trusted may still be in Redis, within the drift
// margin, and its Unlock then removes it and returns nil. If the outermost
// release fails (a network error, after which Redis may or may not have run
// it, or ctx done before it was sent or before its reply came), the lock is
// given up: its Context ends (ErrLockLost, Observer reason
// LostReleaseFailed) and it is renewed no more, so Redis frees it at once
// or when its lease runs out. Its error is then the release's own, without
// ErrLockLost, also for a lock already lost: whether Redis still held it is
// not known, and its Context says it was lost. On Redis Cluster, a release
// refused while the lock's slot is being migrated (TRYAGAIN; a
// ClusterClient's MOVED or ASK once its redirections are spent) did not
// run: it is sent again until the migration ends, for up to 5 s, as ctx
// allows. Calling Unlock again after an error is safe: it never releases
// more than this Lock's own hold. After a release that was not sent, or
// that Redis refused (TRYAGAIN, MOVED or ASK past that wait, READONLY: it
// did not run), Unlock again releases the lock if its lease has not run
// out, and else returns an error wrapping ErrNotHeld and ErrLockLost.
//
// An inner Unlock waits for a re-entry or another inner Unlock of the same
// lock under way; if ctx ends first, it returns ctx's error and gives
// nothing back. The outermost Unlock never waits for them. An Unlock of a
// Lock whose other Unlock is under way (from another goroutine) waits for
// it, as long as ctx allows, and then settles as a second Unlock does.
//
// An Unlock whose ctx has already ended (a deferred Unlock with a request's
// context, say) still sends the release, and waits for it up to 1 s (a
// Redlock Client, its per-node timeout of releases), rather than leave the
// lock held until its lease runs out. go-redis honours that deadline only
// with Options.ContextTimeoutEnabled; without it a Redis that does not
// answer is waited for up to the client's ReadTimeout, and more.
//
// go-redis itself runs a command again when the connection breaks before
// its reply (Options.MaxRetries, 3 by default). A release that had run is
// then run a second time, finds the lock gone, and Unlock reports
// ErrNotHeld and ErrLockLost: it cannot tell that from a lock removed by
// someone else, and errs on the side of a loss. With MaxRetries: -1 such
// an Unlock returns the network error instead, and calling it again
// settles it (nil if the first try released the lock).
func (l *Lock) Unlock(ctx context.Context) error {
	if l == nil || l.h == nil {
		return errZeroLock
	}
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), endedUnlockWait)
		defer cancel()
	}
	// Another Unlock of l under way is waited for, as long as ctx allows:
	// its outcome decides this one's.
	if err := l.unlocking.take(ctx); err != nil {
		return redisError("unlock", l.Key(), err)
	}
	defer l.unlocking.done()
	if l.released {
		return fmt.Errorf("dlock: unlock %q: %w: already unlocked", l.Key(), ErrNotHeld)
	}
	wasLive := l.h.ctx.Err() == nil
	// Released, not lost: by an outer Lock's Unlock, or by our own earlier
	// try whose reply was lost (a renewal found it gone meanwhile, or the
	// hold was given up when that try failed). Not by our own try that was
	// never sent or that Redis refused: then the lease ran out.
	cause := context.Cause(l.h.ctx)
	wasReleased := errors.Is(cause, ErrReleased) || errors.Is(cause, errReleaseFailed) && (l.unsure || l.level > 1)
	// The Observer first: if it panics, the hold is as it was, not marked
	// as being released.
	rctx := l.c.releaseStart(ctx, l.h, l.level) // hooks.go
	if l.level == 1 {
		l.c.dog.releasing(l.h)
	}
	// A panic in the release (a go-redis hook's) ends this Unlock as a
	// release that failed, which may have run: the Observer hears of its
	// end (as of a Lock call's), and the hold is given up, not left
	// renewed until Close.
	panicked := true
	defer func() {
		if panicked {
			err, lost, ended := l.settleUnlock(0, errReleasePanicked, wasLive, wasReleased)
			l.endUnlock(ctx, rctx, err, lost, ended)
		}
	}()
	var left int64
	var err error
	if l.level == 1 {
		// Never held back by an inner level's change: the lock goes.
		left, err = l.c.release(rctx, l.h, 1) // hooks.go
	} else {
		left, err = l.h.changeLevel(rctx, func(int) (int64, error) { return l.c.release(rctx, l.h, l.level) })
	}
	panicked = false
	err, lost, ended := l.settleUnlock(left, err, wasLive, wasReleased)
	l.endUnlock(ctx, rctx, err, lost, ended)
	return err
}

// endUnlock reports the loss an Unlock found (lost, if not nil), then the
// Unlock's end (err is what it returns): ReleaseEnd even if the
// Observer's Lost panics, or the release would never end for it. ended
// says whether this Unlock ended the hold (ReleaseEndEvent.Ended).
func (l *Lock) endUnlock(ctx, rctx context.Context, err, lost error, ended bool) {
	defer l.c.releaseEnd(ctx, rctx, l.h, l.level, err, ended) // hooks.go
	if lost != nil {
		l.c.observeLost(l.h, lost)
	}
}

// errReleasePanicked is the error ReleaseEnd reports for an Unlock whose
// release panicked.
var errReleasePanicked = errors.New("release panicked")

// settleUnlock settles an Unlock from the release's answer (left, err): it
// returns what Unlock returns, and the cause of the loss it declared, if
// any, for Unlock to report (endUnlock), and whether this Unlock ended the
// hold otherwise (ReleaseEndEvent.Ended): whoever stops watching a hold
// ends it, once. wasLive and wasReleased describe the hold before the
// release was sent.
func (l *Lock) settleUnlock(left int64, err error, wasLive, wasReleased bool) (_, lost error, ended bool) {
	if err != nil {
		if !errors.As(err, new(notSentError)) && !refusedUnrun(err) {
			l.unsure = true // the release may have run
		}
		if l.level == 1 && l.c.dog.remove(l.h) {
			// Given up: if the release ran, the lock may be someone
			// else's already; if not, a caller that does not try again
			// (a deferred Unlock) must not leave it renewed until Close.
			// Renewed no more, it is freed when its lease runs out.
			lost = fmt.Errorf("%w: %w: %w", l.h.lostErr(), errReleaseFailed, err)
			l.c.dog.end(l.h, lost)
		} else if l.level == 1 {
			// A renewal met this release before its reply was lost.
			ended = l.c.dog.freedBySelf(l.h)
		}
		return redisError("unlock", l.Key(), err), lost, ended
	}
	l.released = true
	if left < 0 && !(l.unsure && l.level == 1 && (wasReleased || wasLive && time.Now().Before(l.c.dog.deadline(l.h)))) {
		// Not held, and not because an earlier try of ours released it (the
		// lease was still trusted, so only that try can have removed it; a
		// try of an inner level only lowers the hold count).
		err := fmt.Errorf("dlock: unlock %q: %w", l.Key(), ErrNotHeld)
		if wasLive && l.level > 1 && l.c.dog.releasedBySelf(l.h) {
			// The outer Unlock's release, under way, removed it (as a
			// renewal can meet it, watchdog.renew): released, not lost.
			l.h.cancel(ErrReleased)
			l.cancel(ErrReleased)
			return err, nil, false // the outer Unlock reports the end
		}
		if !wasReleased {
			// Lost: declared so before (a renewal found it gone, its lease
			// ran out), or now, found gone while still trusted (an
			// operator's ForceRelease, a deleted key).
			err = fmt.Errorf("%w: %w", err, l.h.lostErr())
		}
		cause := fmt.Errorf("%w: found released at unlock", l.h.lostErr())
		if l.c.dog.remove(l.h) { // not declared lost yet: report it
			lost = cause
		} else if wasLive && l.level == 1 && errors.Is(context.Cause(l.h.ctx), ErrReleased) {
			// A renewal (or TTL, Extend, an inner Unlock) met the key gone
			// while this release was on its way, and took that for this
			// release: the hold ended as released, unreported. This
			// release found it gone too: it was lost, as Unlock says.
			lost = cause
		}
		if lost != nil {
			l.c.dog.end(l.h, cause)
		}
		if l.level == 1 {
			// Reported by Lost, if not by this ReleaseEnd.
			ended = l.c.dog.freedBySelf(l.h) && lost == nil
		}
		l.h.cancel(cause)
		l.cancel(ErrReleased)
		return err, lost, ended
	}
	if left <= 0 {
		ended = l.c.dog.remove(l.h) || l.c.dog.freedBySelf(l.h)
		l.h.cancel(ErrReleased)
	}
	l.cancel(ErrReleased)
	return nil, nil, ended
}

// live returns the loss error if the lock's hold is over, or ErrReleased
// if this Lock was unlocked (a re-entered Lock's Context ends at its own
// Unlock, and with its hold), naming op as the other errors of op do.
func (l *Lock) live(op string) error {
	if l == nil || l.h == nil {
		return errZeroLock
	}
	if l.ctx.Err() != nil {
		return fmt.Errorf("dlock: %s %q: %w", op, l.Key(), context.Cause(l.ctx))
	}
	return nil
}

// lost records that Redis says the token no longer holds the lock.
func (l *Lock) lost(op string) error {
	if l.c.dog.releasedBySelf(l.h) {
		// Unlock of the outermost hold is under way: Redis met that
		// release, as a renewal can (watchdog.renew). Released, not lost.
		l.h.cancel(ErrReleased)
		return fmt.Errorf("dlock: %s %q: %w", op, l.Key(), ErrReleased)
	}
	cause := fmt.Errorf("%w: %s found another owner or none", l.h.lostErr(), op)
	if l.c.dog.remove(l.h) { // not already declared lost (or released)
		l.c.dog.lose(l.h, cause)
	}
	return fmt.Errorf("dlock: %s %q: %w", op, l.Key(), cause)
}
