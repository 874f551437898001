package redlock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/backend"
)

// reply is one node's answer to a request sent by fanout.
type reply[T any] struct {
	asked    bool
	answered bool // a reply (or an error from the node) came in time
	val      T
	err      error // nil when answered without error
}

// ok reports whether the node answered without error.
func (r reply[T]) ok() bool { return r.answered && r.err == nil }

// fanout sends fn to the given nodes in parallel, one goroutine each (fn
// gets the node's index and client), and collects the replies until every
// node answered, wait passed, ctx ended, or decided (if not nil) says the
// outcome cannot change any more. Each request's context has a deadline
// of life (at least wait) from now; a release that first waits for its
// node's acquire (acquireSends.after) gets its own, from then.
// It does not wait for the nodes it gave up on: their goroutines finish in
// the background (go-redis ends them at the request context's deadline
// with ContextTimeoutEnabled, else at its ReadTimeout), counted by
// b.inflight so that Close waits for them. Once the backend is closed,
// fanout waits for every node instead, so nothing outlives the call.
//
// The replies are indexed by node; nodes not asked have asked == false.
func fanout[T any](b *redlock, ctx context.Context, nodes []int, wait, life time.Duration,
	fn func(ctx context.Context, i int, rdb redis.UniversalClient) (T, error),
	decided func(rs []reply[T]) bool,
) []reply[T] {
	rs := make([]reply[T], len(b.nodes))
	if len(nodes) == 0 {
		return rs
	}
	type msg struct {
		i   int
		v   T
		err error
	}
	ch := make(chan msg, len(nodes)) // never blocks a late sender
	// The requests keep their context after we stop waiting: a release to
	// a slow node should still be applied. The last one cancels it.
	rctx, cancel := detachedTimeout(ctx, max(wait, life))
	left := atomic.Int32{}
	left.Store(int32(len(nodes)))
	b.mu.Lock()
	waitAll := b.closed
	if !waitAll {
		b.inflight.Add(len(nodes))
	}
	b.mu.Unlock()
	for _, i := range nodes {
		rs[i].asked = true
		rs[i].err = ErrNodeTimeout
		go func() {
			if !waitAll {
				defer b.inflight.Done()
			}
			var v T
			var err error
			if p := backend.Run(func() { v, err = fn(rctx, i, b.nodes[i].rdb) }); p != nil {
				err = b.panicked(i, p)
			}
			if left.Add(-1) == 0 {
				cancel()
			}
			ch <- msg{i, v, err}
		}()
	}
	record := func(m msg) {
		r := &rs[m.i]
		r.answered, r.val, r.err = true, m.v, m.err
		// go-redis reports a deadline it put on the connection (from the
		// request's context, or its ReadTimeout) as a net timeout.
		if m.err != nil && (errors.Is(m.err, context.DeadlineExceeded) || errors.Is(m.err, os.ErrDeadlineExceeded)) && ctx.Err() == nil {
			r.err = ErrNodeTimeout // our per-node deadline, not the caller's
		}
	}
	if waitAll {
		for range nodes {
			record(<-ch)
		}
		return rs
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for range nodes {
		select {
		case m := <-ch:
			record(m)
			if decided != nil && decided(rs) {
				return rs
			}
		case <-timer.C:
			return rs
		case <-ctx.Done():
			for i := range rs {
				if rs[i].asked && !rs[i].answered {
					rs[i].err = ctx.Err()
				}
			}
			return rs
		}
	}
	return rs
}

// panicked logs the panic p of node i's request (a go-redis hook's, say)
// and returns the node's error. The request ran on a goroutine of its
// own, where a panic would end the process, and its caller may have
// stopped waiting for it: the node counts as failed, as one that does not
// answer, which Redlock tolerates. Raised in the caller instead, the panic would skip the
// release of the holds the other nodes granted, leaving the lock taken
// by nobody for its lease.
func (b *redlock) panicked(i int, p *backend.Panic) error {
	p.Log(b.log, "redlock: panic in a node's request", "node", b.nodes[i].addr)
	return fmt.Errorf("redlock: the request panicked: %v", p.Value)
}

// nodeErrors returns the errors of the nodes that were asked and did not
// answer cleanly, one entry per node (nil elsewhere), and their number.
func nodeErrors[T any](b *redlock, rs []reply[T]) ([]error, int) {
	errs := make([]error, len(rs))
	n := 0
	for i, r := range rs {
		if r.asked && r.err != nil {
			errs[i] = b.nodeError(i, r.err)
			n++
		}
	}
	return errs, n
}

// nodeError wraps node i's error, adding dlock.ErrWrongType when the node
// reports that a lock key holds another kind of value.
func (b *redlock) nodeError(i int, err error) *NodeError {
	if backend.WrongType(err) {
		err = fmt.Errorf("%w: %w", dlock.ErrWrongType, err)
	}
	return &NodeError{Node: i, Addr: b.nodes[i].addr, Err: err}
}

// all returns the indexes of every node.
func (b *redlock) all() []int {
	idx := make([]int, len(b.nodes))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// detachedTimeout is context.WithTimeout for requests that outlive the
// function starting them (the last request to finish calls cancel). They
// end with the caller's cancellation: an acquisition the caller gave up
// must not be sent after the failed attempt's release. Releases detach
// from it themselves (Release, releaseAttempt), and so do acquires (try),
// which the attempt stops itself before it releases.
func detachedTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// endsAfter returns a context with ctx's values that ends d after ctx
// ends (at once if d is 0), or when stop is called.
func endsAfter(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ectx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	unhook := context.AfterFunc(ctx, func() {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-ectx.Done():
		}
	})
	return ectx, func() {
		unhook()
		cancel()
	}
}
