package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
)

// MaxPermits is the largest capacity of a Semaphore.
const MaxPermits = 1 << 40

// Semaphore is a counting semaphore on Redis: at most its capacity of
// permits are held at once, by any number of holders across processes.
// Each holder has its own lease, renewed by the watchdog like a lock's, so
// a holder that dies gives its permits back when its lease runs out while
// the others keep theirs.
//
// Waiters queue in arrival order, as for a lock: permits given back go to
// the first waiters in line, which are told over pub/sub. A waiter whose
// request does not fit yet holds back the ones behind it, so a large
// request is not starved by small ones (as with
// golang.org/x/sync/semaphore).
//
// Permits are held like a lock: they are lost, and their Lock's Context
// is cancelled with ErrLockLost (an error that matches it, and says
// `dlock: permits of semaphore "name" lost`, or of rwmutex for an
// RWMutex's), when a renewal finds them gone or their lease runs out
// unrenewed (the other holders keep theirs); Close stops renewing them and
// cancels their Contexts, and they come back when their leases run out, or
// at an Unlock made after Close.
//
// Every Client using a semaphore's name must give it the same capacity:
// while any permits are held, Acquire and TryAcquire with another capacity
// fail with an error wrapping ErrInvalidOption (once nobody holds any, the
// next grant's capacity is the semaphore's). A waiter of another capacity
// first in line holds back the waiters behind it until its next check
// (within a third of its queue TTL), which refuses it while permits are
// held; a release, or a waiter leaving, that leaves no holder grants it at
// once, under its own capacity. Acquire and TryAcquire also fail with
// ErrInvalidOption with WithAdaptiveTTL, and on Redlock (package redlock),
// where the error wraps errors.ErrUnsupported too. WithReplicaAck applies
// to permits as to a lock.
//
// Permits are not reentrant: a holder that acquires more while it holds
// some waits like anyone else, and a Lock's Context does not re-enter
// anything. The local queue and degraded mode (WithLocalQueue,
// WithDegradedMode) apply to locks only: a Client's goroutines take
// permits through Redis like any other holder, and an unreachable Redis
// fails the acquisition, never grants degraded permits. Observer events
// carry the semaphore's name as Key and "semaphore" (or "rwmutex") as
// Kind; the logs (attribute kind), and the Prometheus and OpenTelemetry
// observers (label kind, attribute dlock.kind), carry the kind too, so
// permits and a lock of one name stay apart.
type Semaphore struct {
	c        *Client
	name     string
	capacity int64
	kind     string // the Redis namespace: semaphores and RWMutexes of one name are distinct
}

// Semaphore returns the semaphore named name with capacity permits
// (between 1 and MaxPermits; a bad name or capacity is reported by
// Acquire). Its Redis names never clash with a lock's of the same name.
func (c *Client) Semaphore(name string, capacity int64) *Semaphore {
	return &Semaphore{c: c, name: name, capacity: capacity, kind: "semaphore"}
}

// Name returns the semaphore's name ("" for a nil s).
func (s *Semaphore) Name() string {
	if s == nil {
		return ""
	}
	return s.name
}

// Capacity returns how many permits the semaphore has (0 for a nil s).
func (s *Semaphore) Capacity() int64 {
	if s == nil {
		return 0
	}
	return s.capacity
}

// Acquire takes n permits, waiting until they are granted or ctx ends. The
// returned Lock stands for the n permits: Unlock gives them back, its
// Context is cancelled if they are lost, and its Fence is greater than
// that of every earlier grant of this semaphore. WithRetry bounds the
// wait, as for Client.Lock. n must be between 1 and the capacity, or
// Acquire (and TryAcquire) returns an error wrapping ErrInvalidOption.
func (s *Semaphore) Acquire(ctx context.Context, n int64, opts ...LockOption) (*Lock, error) {
	return s.acquire(ctx, n, true, opts)
}

// TryAcquire makes one attempt and returns an error wrapping
// ErrNotObtained if n permits are not free, or if a queued waiter comes
// first that the free permits do not serve: it never overtakes a waiter
// (queued waiters that fit are granted first, by this attempt).
func (s *Semaphore) TryAcquire(ctx context.Context, n int64, opts ...LockOption) (*Lock, error) {
	return s.acquire(ctx, n, false, opts)
}

// Available returns how many of the semaphore's permits no holder holds
// now; waiters may be queued for them, so an Acquire of that many may
// still wait. While permits are held under another capacity it fails with
// an error wrapping ErrInvalidOption, as Acquire does. It reads a single
// deployment: on a Client made by redlock.New it returns an error wrapping
// errors.ErrUnsupported.
func (s *Semaphore) Available(ctx context.Context) (int64, error) {
	n, k, err := s.admin()
	if err != nil {
		return 0, err
	}
	// Twice is as once: it only reads.
	v, err := followFailover(ctx, n.rdb, k.lock, func() *redis.Cmd {
		return availableScript.Run(ctx, n.rdb, []string{k.lock}, s.capacity)
	}).Int64()
	if err != nil {
		return 0, redisError(s.kind+" available", s.name, err)
	}
	return max(v, 0), nil
}

// admin returns the single-deployment backend and the Redis names of s
// for the calls that read or change its holders directly (Available and
// the operator calls), after checking s as Acquire would.
func (s *Semaphore) admin() (*node, *lockKeys, error) {
	if s == nil || s.c == nil {
		return nil, nil, fmt.Errorf("%w: semaphore without a Client", ErrInvalidOption)
	}
	p := &backend.Permits{Kind: s.kind, Count: 1, Capacity: s.capacity}
	if err := checkPermits(p, &lockConfig{}); err != nil {
		return nil, nil, err
	}
	n, err := s.c.admin(s.name)
	if err != nil {
		return nil, nil, err
	}
	return n, n.keysOf(s.name, p), nil
}

func (s *Semaphore) acquire(ctx context.Context, n int64, wait bool, opts []LockOption) (*Lock, error) {
	if s == nil || s.c == nil {
		return nil, fmt.Errorf("%w: semaphore without a Client", ErrInvalidOption)
	}
	return s.c.acquire(ctx, s.name, wait, &backend.Permits{Kind: s.kind, Count: n, Capacity: s.capacity}, opts)
}

// checkPermits validates a request for permits and the options it came
// with.
func checkPermits(p *backend.Permits, cfg *lockConfig) error {
	switch {
	case p.Capacity < 1 || p.Capacity > MaxPermits:
		return fmt.Errorf("%w: semaphore capacity %d outside [1, %d]", ErrInvalidOption, p.Capacity, int64(MaxPermits))
	case p.Count < 1 || p.Count > p.Capacity:
		return fmt.Errorf("%w: %d permits requested, outside [1, %d]", ErrInvalidOption, p.Count, p.Capacity)
	case cfg.ext.adaptive != nil:
		return fmt.Errorf("%w: WithAdaptiveTTL applies to locks only", ErrInvalidOption)
	}
	return nil
}

// kindOf names what a request for p takes, in errors: "lock" (p is nil),
// "semaphore" or "rwmutex".
func kindOf(p *backend.Permits) string {
	if p == nil {
		return "lock"
	}
	return p.Kind
}

// capacityMismatch returns what lua/semaphore.lua said, if err is its
// refusal of a capacity other than the live holders': its message without
// the script's place, which Redis adds (before it before 7.0, after it
// since).
func capacityMismatch(err error) (msg string, ok bool) {
	var re redis.Error
	if !errors.As(err, &re) {
		return "", false
	}
	_, msg, ok = strings.Cut(re.Error(), "dlock capacity mismatch: ")
	msg, _, _ = strings.Cut(msg, " script: ")
	return msg, ok
}
