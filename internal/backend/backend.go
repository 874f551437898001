// Package backend is the seam between dlock's Client, which keeps what is
// common to every lock (options, reentrancy, the watchdog, loss signals,
// Do), and the store a lock lives in: one Redis deployment (package dlock
// itself) or a Redlock quorum of independent masters (package redlock).
//
// It is internal so that the seam can change without breaking users: the
// public API stays dlock.Client and dlock.Lock whatever the store. It also
// holds what both stores must agree on: owner tokens, the drift margin,
// milliseconds for Redis, and the hash tag a key's Redis names share.
package backend

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Backend is a store locks are taken in. Its methods are called
// concurrently. Errors from Acquire follow dlock's conventions: wrap
// dlock.ErrNotObtained when the lock is held elsewhere, return the
// context's error when ctx ended while waiting.
type Backend interface {
	// Acquire takes the lock for r.Token, waiting if r.Wait. A backend that
	// fails must leave nothing behind: no hold, no queue entry.
	Acquire(ctx context.Context, r Request) (Grant, error)
	// Renew resets the lease of each renewal in as few round trips as it
	// can. A failed round trip is reported as Unknown outcomes, with why.
	Renew(ctx context.Context, rs []Renewal) []Renewed
	// Extend resets one lease to ttl.
	Extend(ctx context.Context, l *Lease, ttl time.Duration) (Outcome, error)
	// TTL reads the remaining lease.
	TTL(ctx context.Context, l *Lease) (time.Duration, Outcome, error)
	// Release gives back the holds of l down to level-1 and returns the
	// holds left (0: released), or -1 if l does not hold the lock. Releasing
	// the same level twice must give back only one hold.
	Release(ctx context.Context, l *Lease, level int) (int64, error)
	// Reenter raises the hold count of l to level (one above the count
	// last returned) and returns level, or 0 if not held. A count already
	// at level is left as it is: a request delivered twice adds one hold.
	Reenter(ctx context.Context, l *Lease, level int) (int64, error)
	// Close stops the backend's background work.
	Close() error
}

// Request is one acquisition.
type Request struct {
	Key   string
	Token string        // the new holder's random owner token
	TTL   time.Duration // the lease
	Renew bool          // the watchdog will renew the lease
	Retry Retry         // nil: wait until ctx ends
	Meta  string        // holder metadata (JSON) to store with the lock
	Wait  bool          // false: one attempt (TryLock)
	// Permits asks for permits of a semaphore named Key instead of the
	// lock named Key; nil: the lock.
	Permits *Permits
	// Ops counts the calls the Client's Close waits for, this one among
	// them until Acquire returns: work of the acquisition that outlives
	// it (leaving the queue while Redis does not answer) is added to it.
	// nil: not counted.
	Ops *sync.WaitGroup
}

// Permits is a request for Count of a semaphore's Capacity permits.
type Permits struct {
	Kind     string // the kind of semaphore ("semaphore", "rwmutex"): its own namespace of names
	Count    int64
	Capacity int64
}

// Retry is dlock.RetryStrategy.
type Retry interface {
	Backoff(attempt int) (time.Duration, bool)
}

// Grant is a lock taken: its lease of TTL was granted at some instant after
// Start, so it can be trusted until Start + TTL - drift.
type Grant struct {
	Lease *Lease
	Fence uint64
	Start time.Time
	TTL   time.Duration
	// Began is when the lease most likely began (a lock handed over to a
	// waiter began with the hand-over, not at its first request): hold
	// times count from there. Zero: Start.
	Began time.Time
}

// Lease identifies a held lock to its backend.
type Lease struct {
	Key   string
	Token string
	Data  any // the backend's own per-lock data

	extends atomic.Uint64 // the number of the last Extend (NextExtend)
}

// NextExtend numbers an Extend of the lease, for the extend scripts: they
// apply an Extend only if its number is above the last one applied to the
// lock, so that one reaching Redis late (its client gave up waiting for
// it) cannot undo a later one, which the holder trusts.
func (l *Lease) NextExtend() string { return strconv.FormatUint(l.extends.Add(1), 10) }

// Renewal asks for one lease to be reset to TTL.
type Renewal struct {
	Lease *Lease
	TTL   time.Duration
}

// Lengthen is the extend scripts' mode argument for a renewal, in place of
// an Extend's number: it only ever lengthens a lease, so that one reaching
// Redis late (its client gave up on it) cannot cut short a longer lease an
// Extend set meanwhile.
const Lengthen = "renew"

// Renewed is the answer to one renewal.
type Renewed struct {
	Outcome Outcome
	// Err says why the outcome is Unknown: no answer in time, an error
	// reply, too few replicas acknowledged it. nil otherwise.
	Err error
}

// Outcome says what a renewal, extension or TTL read found.
type Outcome int

// Outcomes.
const (
	Unknown Outcome = iota // no answer (network error, timeout): try again
	Held                   // the lease was reset (or read) for its owner
	NotHeld                // the token no longer holds the lock
)

// Settings are the Client options a backend needs.
type Settings struct {
	Prefix   string
	QueueTTL time.Duration
	Log      *slog.Logger
}

// NewClient builds a *dlock.Client on the backend that newBackend makes
// from the parsed options (opts is a []dlock.Option). Package dlock sets it
// when it is initialised; it returns the client as any because this
// package cannot import dlock.
var NewClient func(newBackend func(Settings) (Backend, error), opts any) (any, error)
