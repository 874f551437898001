package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/backend"
)

// Observer is told what a Client's locks do, for metrics and tracing
// (packages metrics/prometheus and metrics/otel implement it). Set it with
// WithObserver; a Client without one does no extra work and no allocation.
//
// Its methods are called synchronously from the goroutine doing the work
// (Renew, and Lost of an expired lease, from the Client's watchdog; Lost
// also from the call that found the loss, such as Unlock, Extend, TTL or
// Close, from a Lock call that Close ended while AcquireEnd ran, and from
// a timer for a lock whose Unlock Close left under way and whose lease
// then ran out), concurrently for different locks, so they must be safe for
// concurrent use and quick: record the figure and return. They may call
// the Client's Close. A panic in AcquireEnd, or in the Lost that a Lock
// call reports after it, releases the lock it reports, which the caller
// then never gets. A panic in a call from the watchdog or a timer, which
// has no caller to go to, is logged (WithLogger) and dropped: the
// watchdog goes on, and the Observer may miss the other Renew events of
// that round (each Lost is still reported, and a lost lock's
// Context still ends). Embed NopObserver to implement only some methods
// and to keep compiling when methods are added.
//
// For one acquisition, AcquireEnd comes after AcquireStart, and the
// lock's Lost, if any (once at most), after AcquireEnd, even if the lock
// was lost while AcquireEnd ran (its Context ends then all the same).
// Nothing else is ordered across goroutines: a renewal due while
// AcquireEnd runs may report Renew before it, and a loss the watchdog
// finds while an Unlock is under way may report Lost before or after
// that Unlock's ReleaseEnd. Close does not wait for the Observer: the
// AcquireEnd of a Lock call it ended, the ReleaseEnd of an Unlock under
// way, and the Renew and Lost of renewals and losses the watchdog was
// handling may come after Close returned, as may the Lost of a lock whose
// Unlock Close left under way (at its lease's deadline).
//
// Events carry the lock's key. A metrics implementation must not label by
// it (every key would be a new time series): map it to a bounded group, as
// the metrics packages do.
type Observer interface {
	// AcquireStart is called when Lock or TryLock starts to take a lock
	// (not a re-entry). The context it returns is used for the rest of the
	// acquisition, including the Redis calls, and passed to AcquireEnd: a
	// tracer returns one carrying a span. Return ctx to change nothing.
	AcquireStart(ctx context.Context, e AcquireStartEvent) context.Context
	// AcquireEnd is called when the acquisition ends, granted or not.
	AcquireEnd(ctx context.Context, e AcquireEndEvent)
	// Reenter is called when Lock or TryLock re-enters a held lock.
	Reenter(ctx context.Context, e ReenterEvent)
	// ReleaseStart is called when Unlock starts; its context is used for
	// the release and passed to ReleaseEnd.
	ReleaseStart(ctx context.Context, e ReleaseStartEvent) context.Context
	// ReleaseEnd is called when Unlock has its answer.
	ReleaseEnd(ctx context.Context, e ReleaseEndEvent)
	// Renew is called for each lease renewal of the watchdog.
	Renew(e RenewEvent)
	// Lost is called when a held lock is lost: its Context is cancelled
	// with e.Cause.
	Lost(e LostEvent)
}

// AcquireStartEvent describes an acquisition that starts.
type AcquireStartEvent struct {
	Key  string // the lock's name
	Kind string // what Key names: "lock", or "semaphore" or "rwmutex" (permits)
	Wait bool   // Lock (true) or TryLock (false)
}

// AcquireEndEvent describes how an acquisition ended.
type AcquireEndEvent struct {
	Key     string         // the lock's name
	Kind    string         // what Key names: "lock", or "semaphore" or "rwmutex" (permits)
	Wait    bool           // Lock (true) or TryLock (false)
	Outcome AcquireOutcome // how it ended
	// WaitTime is how long the call took, waiting included.
	WaitTime time.Duration
	Fence    uint64 // the lock's fence if granted (0 for a degraded lock)
	Err      error  // the error returned, if not granted
}

// ReenterEvent describes a re-entry of a held lock.
type ReenterEvent struct {
	Key   string // the lock's name
	Level int    // the new hold count, if it succeeded
	Err   error  // why it failed
}

// ReleaseStartEvent describes an Unlock that starts.
type ReleaseStartEvent struct {
	Key   string // the lock's name
	Kind  string // what Key names: "lock", or "semaphore" or "rwmutex" (permits)
	Level int    // the hold level given back: 1 is the outermost Lock
}

// ReleaseEndEvent describes how an Unlock ended.
type ReleaseEndEvent struct {
	Key     string         // the lock's name
	Kind    string         // what Key names: "lock", or "semaphore" or "rwmutex" (permits)
	Level   int            // the hold level given back: 1 is the outermost Lock
	Outcome ReleaseOutcome // how it ended
	// Held is how long the lock had been held, since the outermost Lock
	// was granted (whatever Level).
	Held     time.Duration
	Degraded bool // the lock was taken in-process only (WithDegradedMode)
	// Ended says that this Unlock ended the hold that the granted
	// AcquireEnd (AcquireOK or AcquireDegraded) began: true exactly once
	// per hold not reported Lost, and never for a hold reported Lost. It
	// is false for an Unlock that did not end the hold: an inner Level's,
	// which gives back a level only; one that found the hold already
	// ended (lost, ended by Close, given up after a failed release: Lost
	// reported it, even if this Unlock then removed the key and Outcome is
	// ReleaseOK); one that reports the hold Lost itself. It may be true
	// with ReleaseError: a renewal met the release in Redis before its
	// reply was lost. Counting +1 for each granted AcquireEnd, -1 for each
	// Lost and -1 for each ReleaseEnd with Ended gives the locks held now
	// by the Clients reporting to the Observer (a Semaphore's or an
	// RWMutex's hold of n permits counts once).
	Ended bool
	Err   error // the error returned, if any
}

// RenewEvent describes one lease renewal by the watchdog.
type RenewEvent struct {
	Key     string       // the lock's name
	Kind    string       // what Key names: "lock", or "semaphore" or "rwmutex" (permits)
	Outcome RenewOutcome // how it ended
	Err     error        // why, for RenewNoAnswer: no answer in time, an error reply, too few replicas
}

// LostEvent describes a lock lost while held.
type LostEvent struct {
	Key    string        // the lock's name
	Kind   string        // what Key names: "lock", or "semaphore" or "rwmutex" (permits)
	Reason LostReason    // why it was lost
	Held   time.Duration // how long it had been held
	Cause  error         // the cause its Context was cancelled with
}

// AcquireOutcome says how an acquisition ended.
type AcquireOutcome uint8

// Acquisition outcomes.
const (
	AcquireOK          AcquireOutcome = iota // granted by Redis
	AcquireDegraded                          // Redis unreachable: granted in-process only (WithDegradedMode)
	AcquireNotObtained                       // held elsewhere: TryLock failed, or the retry strategy gave up
	AcquireCanceled                          // the context ended or the Client was closed while waiting
	AcquireError                             // any other error (Redis unreachable, wrong type, ...)
)

var acquireOutcomes = [...]string{"acquired", "degraded", "not_obtained", "canceled", "error"}

// String returns a short label: acquired, degraded, not_obtained, canceled
// or error.
func (o AcquireOutcome) String() string { return label(acquireOutcomes[:], int(o)) }

// ReleaseOutcome says how an Unlock ended.
type ReleaseOutcome uint8

// Release outcomes.
const (
	ReleaseOK      ReleaseOutcome = iota // the hold was given back
	ReleaseNotHeld                       // the lock was not held any more (lost, expired or force-released)
	ReleaseError                         // the release failed (no answer, a refusal such as READONLY, ctx ended): Unlock may be retried
)

var releaseOutcomes = [...]string{"released", "not_held", "error"}

// String returns a short label: released, not_held or error.
func (o ReleaseOutcome) String() string { return label(releaseOutcomes[:], int(o)) }

// RenewOutcome says how a renewal ended.
type RenewOutcome uint8

// Renewal outcomes.
const (
	RenewOK       RenewOutcome = iota // the lease was reset
	RenewNotHeld                      // the lock was not held any more: it is lost
	RenewNoAnswer                     // Redis did not answer, or not with the lease reset (RenewEvent.Err); the watchdog tries again until the lease runs out
)

var renewOutcomes = [...]string{"renewed", "not_held", "no_answer"}

// String returns a short label: renewed, not_held or no_answer.
func (o RenewOutcome) String() string { return label(renewOutcomes[:], int(o)) }

// LostReason says why a held lock was lost.
type LostReason uint8

// Reasons a lock is lost.
const (
	LostNotHeld       LostReason = iota // a renewal (or Extend, TTL) found another owner or none
	LostExpired                         // the lease ran out before a renewal got through, or a fixed one (WithoutRenewal, WithMaxHold) ran out
	LostClosed                          // the Client was closed while the lock was held
	LostReleaseFailed                   // the release failed (Unlock or Do): renewal stops, the lease runs out in Redis unless the release ran
)

var lostReasons = [...]string{"not_held", "expired", "closed", "release_failed"}

// String returns a short label: not_held, expired, closed or
// release_failed.
func (r LostReason) String() string { return label(lostReasons[:], int(r)) }

func label(names []string, i int) string {
	if i < 0 || i >= len(names) {
		return "unknown"
	}
	return names[i]
}

// NopObserver is an Observer that does nothing. Embed it in an Observer
// to implement only the methods you need.
type NopObserver struct{}

var _ Observer = NopObserver{}

// AcquireStart returns ctx.
func (NopObserver) AcquireStart(ctx context.Context, _ AcquireStartEvent) context.Context { return ctx }

// AcquireEnd does nothing.
func (NopObserver) AcquireEnd(context.Context, AcquireEndEvent) {}

// Reenter does nothing.
func (NopObserver) Reenter(context.Context, ReenterEvent) {}

// ReleaseStart returns ctx.
func (NopObserver) ReleaseStart(ctx context.Context, _ ReleaseStartEvent) context.Context { return ctx }

// ReleaseEnd does nothing.
func (NopObserver) ReleaseEnd(context.Context, ReleaseEndEvent) {}

// Renew does nothing.
func (NopObserver) Renew(RenewEvent) {}

// Lost does nothing.
func (NopObserver) Lost(LostEvent) {}

// Observers returns an Observer that calls each of obs in turn (nil ones,
// nil pointers included, are skipped), for example Prometheus metrics and
// OpenTelemetry traces together. The context returned by one's AcquireStart or ReleaseStart is
// passed to the next.
func Observers(obs ...Observer) Observer {
	var m multiObserver
	for _, o := range obs {
		if !backend.IsNil(o) {
			m = append(m, o)
		}
	}
	return m
}

type multiObserver []Observer

// AcquireStart and ReleaseStart end the calls of the Observers that started
// if a later one panics (the call then ends with that panic, unreported):
// else their in-flight gauges and spans would never end.
func (m multiObserver) AcquireStart(ctx context.Context, e AcquireStartEvent) context.Context {
	started := 0
	defer func() {
		if started < len(m) {
			m[:started].AcquireEnd(ctx, AcquireEndEvent{Key: e.Key, Kind: e.Kind, Wait: e.Wait, Outcome: AcquireError,
				Err: fmt.Errorf("dlock: %s %q: %w", e.Kind, e.Key, errAcquirePanicked)})
		}
	}()
	for _, o := range m {
		if c := o.AcquireStart(ctx, e); c != nil {
			ctx = c
		}
		started++
	}
	return ctx
}

// AcquireEnd and ReleaseEnd call every Observer even if one panics (a panic
// in AcquireEnd is allowed: it releases the lock), then the panic goes on:
// the others' in-flight gauges and spans must still end.
func (m multiObserver) AcquireEnd(ctx context.Context, e AcquireEndEvent) {
	if len(m) == 0 {
		return
	}
	defer m[1:].AcquireEnd(ctx, e) // runs if m[0] panics too
	m[0].AcquireEnd(ctx, e)
}

// Reenter, Renew and Lost, like the End calls, reach every Observer even
// if one panics: the others' counters would miss the event for good.
func (m multiObserver) Reenter(ctx context.Context, e ReenterEvent) {
	if len(m) == 0 {
		return
	}
	defer m[1:].Reenter(ctx, e)
	m[0].Reenter(ctx, e)
}

func (m multiObserver) ReleaseStart(ctx context.Context, e ReleaseStartEvent) context.Context {
	started := 0
	defer func() {
		if started < len(m) {
			m[:started].ReleaseEnd(ctx, ReleaseEndEvent{Key: e.Key, Kind: e.Kind, Level: e.Level, Outcome: ReleaseError,
				Err: fmt.Errorf("dlock: unlock %q: %w", e.Key, errReleasePanicked)})
		}
	}()
	for _, o := range m {
		if c := o.ReleaseStart(ctx, e); c != nil {
			ctx = c
		}
		started++
	}
	return ctx
}

func (m multiObserver) ReleaseEnd(ctx context.Context, e ReleaseEndEvent) {
	if len(m) == 0 {
		return
	}
	defer m[1:].ReleaseEnd(ctx, e) // runs if m[0] panics too
	m[0].ReleaseEnd(ctx, e)
}

func (m multiObserver) Renew(e RenewEvent) {
	if len(m) == 0 {
		return
	}
	defer m[1:].Renew(e)
	m[0].Renew(e)
}

func (m multiObserver) Lost(e LostEvent) {
	if len(m) == 0 {
		return
	}
	defer m[1:].Lost(e)
	m[0].Lost(e)
}

// WithObserver has the Client report what its locks do to o (see
// Observer). Without it, or with nil (a nil pointer too), nothing is
// reported.
func WithObserver(o Observer) Option {
	return func(c *clientConfig) {
		if backend.IsNil(o) {
			o = nil
		}
		c.ext.observer = o
	}
}
