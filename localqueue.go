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
// message); each acquisition is then one acquire and one release.
//
// Between processes the order stays Redis's FIFO, with one place per
// process and key: a process with many goroutines waiting for a key no
// longer takes a bigger share of the turns than a process with one.
//
// Each Lock must be unlocked, even once lost (Do does it): until then the
// goroutines of this Client waiting for the key stay queued. A Lock or
// TryLock whose context comes from the held lock's Context re-enters it
// without queueing. TryLock fails at once, without asking Redis, while
// another goroutine of the Client holds or takes the key. A Lock with
// WithRetry counts its waiting in the process against its strategy: each
// delay the strategy gives is one check, whether it waits here or in Redis.
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
// ends, closed is closed, or retry (if not nil) gives up. checks is how
// many of retry's checks were spent waiting here.
func (m *localLocks) lock(ctx context.Context, key string, wait bool, retry backend.Retry, closed <-chan struct{}) (h *localHold, checks int, err error) {
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
		return &localHold{m: m, key: key, k: k}, 0, nil
	}
	if !wait {
		m.mu.Unlock()
		return nil, 0, fmt.Errorf("dlock: lock %q: %w: held in this process", key, ErrNotObtained)
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

	checks = 1
	var tick <-chan time.Time // nil without a retry strategy: no give-up
	var timer *time.Timer
	if retry != nil {
		d, ok := retry.Backoff(checks)
		if !ok {
			return m.giveUp(w, h, checks)
		}
		timer = time.NewTimer(max(d, backend.MinBackoff))
		defer timer.Stop()
		tick = timer.C
	}
	for {
		select {
		case <-w.granted:
			return h, checks, nil
		case <-tick:
			checks++
			d, ok := retry.Backoff(checks)
			if !ok {
				return m.giveUp(w, h, checks)
			}
			timer.Reset(max(d, backend.MinBackoff))
		case <-ctx.Done():
			return nil, 0, m.abandon(w, h, fmt.Errorf("dlock: lock %q: waiting ended: %w", key, ctx.Err()))
		case <-closed:
			return nil, 0, m.abandon(w, h, ErrClosed)
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
// just in time.
func (m *localLocks) giveUp(w *localWaiter, h *localHold, checks int) (*localHold, int, error) {
	if m.leave(w, h) {
		return h, checks, nil
	}
	return nil, 0, fmt.Errorf("dlock: lock %q: %w: gave up after %d checks", h.key, ErrNotObtained, checks)
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

// offsetRetry continues a retry strategy after checks spent in the local
// queue: the first Redis check is the strategy's check n+1.
type offsetRetry struct {
	r backend.Retry
	n int
}

func (o offsetRetry) Backoff(attempt int) (time.Duration, bool) { return o.r.Backoff(attempt + o.n) }
