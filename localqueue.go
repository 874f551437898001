package dlock

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/backend"
)

// WithLocalQueue makes the goroutines of this Client that want the same
// key queue in the process, first come first served, so that only one of
// them at a time talks to Redis for it: the one holding the lock, or about
// to take it. The others wait on an in-process lock and cost Redis nothing
// (no queue entry, no refresh every third of the queue TTL, no wake-up
// message); each acquisition is then one acquire and one release (and,
// with WithAdaptiveTTL, one read and one write of the hold statistics).
//
// Between processes the order stays Redis's FIFO, with one place per
// process and key: a process with many goroutines waiting for a key no
// longer takes a bigger share of the turns than a process with one. That
// place is the waiting goroutine's: if it gives up (its ctx ends, its
// WithRetry runs out), the next goroutine of the process queues in Redis
// afresh, behind the other processes' waiters that came meanwhile.
//
// The in-process lock mirrors the Redis lock: it is given back when the
// hold ends, at the outermost Unlock or when the lock is lost (its Context
// ends: WithMaxHold or the lease ran out, a force-release, a failed
// release, Close), and only once, whatever Unlock does later. A holder
// stuck in its critical section thus keeps the Client's other goroutines
// out no longer than other processes. A Lock or TryLock whose context
// comes from the held lock's Context re-enters it without queueing.
// TryLock fails at once, without asking Redis (but for WithAdaptiveTTL's
// read of the hold statistics, made first), while another goroutine of
// the Client holds or takes the key. A Lock with
// WithRetry counts its waiting in the process against its strategy: each
// delay the strategy gives is one check, whether it waits here or in Redis.
// Handed the in-process lock during a delay, it checks Redis at once, for
// free, as when woken early in Redis; its counted check comes when the
// delay is over.
func WithLocalQueue() Option {
	return func(c *clientConfig) { c.ext.localQueue = true }
}

// localLocks are in-process FIFO locks, one per key, of one Client: the
// local queue (WithLocalQueue) and the fallback of the degraded mode.
type localLocks struct {
	mu   sync.Mutex
	keys map[string]*localKey
}

type localKey struct {
	held  bool
	queue list.List // of *localWaiter, in arrival order
	refs  int       // the holder and the waiters; the entry goes at 0
}

type localWaiter struct {
	granted chan struct{} // closed when the lock is handed to this waiter
	elem    *list.Element
}

// localHold is one hold of a local lock. unlock may be called more than
// once (and on nil): only the first call gives the lock back.
type localHold struct {
	m    *localLocks
	key  string
	k    *localKey
	done atomic.Bool
}

func newLocalLocks() *localLocks {
	return &localLocks{keys: make(map[string]*localKey)}
}

// lock takes the local lock of key. Without wait it fails at once if the
// lock is held; with wait it queues until the lock is handed over, ctx
// ends, closed is closed, or retry (if not nil) gives up. rest is what is
// left of retry for the wait in Redis: retry itself if it did not queue.
func (m *localLocks) lock(ctx context.Context, key string, wait bool, retry backend.Retry, closed <-chan struct{}) (h *localHold, rest backend.Retry, err error) {
	m.mu.Lock()
	k := m.keys[key]
	if k == nil {
		k = &localKey{}
		m.keys[key] = k
	}
	if !k.held {
		k.held = true
		k.refs++
		m.mu.Unlock()
		return &localHold{m: m, key: key, k: k}, retry, nil
	}
	if !wait {
		m.mu.Unlock()
		return nil, nil, fmt.Errorf("dlock: lock %q: %w: held in this process", key, ErrNotObtained)
	}
	w := &localWaiter{granted: make(chan struct{})}
	w.elem = k.queue.PushBack(w)
	k.refs++
	m.mu.Unlock()
	h = &localHold{m: m, key: key, k: k}
	// The retry strategy may be the caller's own code: if it panics (and
	// the caller recovers), the waiter must not stay queued, or the lock,
	// handed to it, would be held by nobody for good.
	defer func() {
		if r := recover(); r != nil {
			_ = m.abandon(w, h, nil)
			panic(r)
		}
	}()

	checks := 1
	var tick <-chan time.Time // nil without a retry strategy: no give-up
	var timer *time.Timer
	var due time.Time // when the next counted check is
	if retry != nil {
		d, ok := retry.Backoff(checks)
		if !ok {
			return m.giveUp(w, h, checks)
		}
		d = max(d, backend.MinBackoff)
		due = time.Now().Add(d)
		timer = time.NewTimer(d)
		defer timer.Stop()
		tick = timer.C
	}
	for {
		select {
		case <-w.granted:
			if retry == nil {
				return h, nil, nil
			}
			return h, resumedRetry{r: retry, n: checks, due: due}, nil
		case <-tick:
			checks++
			d, ok := retry.Backoff(checks)
			if !ok {
				return m.giveUp(w, h, checks)
			}
			d = max(d, backend.MinBackoff)
			due = time.Now().Add(d)
			timer.Reset(d)
		case <-ctx.Done():
			return nil, nil, m.abandon(w, h, fmt.Errorf("dlock: lock %q: waiting ended: %w", key, ctx.Err()))
		case <-closed:
			return nil, nil, m.abandon(w, h, ErrClosed)
		}
	}
}

// leave takes w out of the queue, unless the lock was handed to it
// meanwhile: then it reports true and w holds the lock.
func (m *localLocks) leave(w *localWaiter, h *localHold) (granted bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-w.granted:
		return true
	default:
	}
	h.k.queue.Remove(w.elem)
	h.k.refs--
	if h.k.refs == 0 {
		delete(m.keys, h.key)
	}
	return false
}

// abandon leaves the queue for good: a lock handed over meanwhile goes on
// to the next waiter.
func (m *localLocks) abandon(w *localWaiter, h *localHold, err error) error {
	if m.leave(w, h) {
		h.unlock()
	}
	return err
}

// giveUp ends a wait whose retry strategy ran out, unless the lock came
// just in time: then Redis gets one check, and no more.
func (m *localLocks) giveUp(w *localWaiter, h *localHold, checks int) (*localHold, backend.Retry, error) {
	if m.leave(w, h) {
		return h, resumedRetry{n: checks, over: true}, nil
	}
	return nil, nil, fmt.Errorf("dlock: lock %q: %w: %s", h.key, ErrNotObtained, backend.GaveUp(checks))
}

// unlock hands the lock to the first waiter, or frees it.
func (h *localHold) unlock() {
	if h == nil || !h.done.CompareAndSwap(false, true) {
		return
	}
	m, k := h.m, h.k
	m.mu.Lock()
	defer m.mu.Unlock()
	k.refs--
	if e := k.queue.Front(); e != nil {
		close(k.queue.Remove(e).(*localWaiter).granted)
	} else {
		k.held = false
	}
	if k.refs == 0 {
		delete(m.keys, h.key)
	}
}

// waiting reports how many goroutines wait for key's local lock, and
// whether it is held (for tests).
func (m *localLocks) waiting(key string) (n int, held bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if k := m.keys[key]; k != nil {
		return k.queue.Len(), k.held
	}
	return 0, false
}

// size is the number of keys with local state (for tests: it must drop to
// zero when nobody holds or waits).
func (m *localLocks) size() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.keys)
}

// resumedRetry continues in Redis a retry strategy that spent n checks in
// the local queue, the last delay running until due. The check made at
// the hand-over comes before due: like a waiter's early check in Redis it
// costs nothing, and the next one is at due, the strategy's check n+1; so
// the schedule is the same wherever the waiting was.
type resumedRetry struct {
	r    backend.Retry
	n    int
	due  time.Time
	over bool // the strategy gave up at check n: the hand-over's check is the last
}

// FirstDue is when the delay under way ends (backend.Resumed).
func (o resumedRetry) FirstDue() time.Time { return o.due }

// Counted is the checks spent in the process (backend.Resumed).
func (o resumedRetry) Counted() int { return o.n }

func (o resumedRetry) Backoff(attempt int) (time.Duration, bool) {
	if attempt == 1 {
		return time.Until(o.due), !o.over // the rest of the delay under way
	}
	return o.r.Backoff(attempt - 1 + o.n)
}
