package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
)

// batcher sends the acquire and release scripts of concurrent callers
// together. A call made while fewer than maxInflight requests are under way
// goes out at once, alone, as before: no added latency when idle. Calls
// made while the connections are busy queue up, and the next free slot
// sends everything queued as one pipeline: one write and one read for the
// client and the server, instead of one each per call. This is what lets
// many goroutines of one process take and release locks at the rate Redis
// can run the scripts, rather than the rate it can do round trips.
type batcher struct {
	rdb         redis.UniversalClient
	maxInflight int
	log         *slog.Logger // for a panic no caller is left to raise

	mu       sync.Mutex
	inflight int
	pending  []*batchCall
}

type batchCall struct {
	call *evalCall
	cmd  *redis.Cmd
	sent bool
	// left is set once its caller stopped waiting for it, sent.
	left bool
	done chan struct{}
	// panicked is the panic its batch's send ended with (a go-redis
	// hook's) before this call had its reply: its caller raises it.
	panicked *backend.Panic
}

// batchTimeout bounds one pipelined round trip of queued calls; each
// caller still honours its own context, while its call is queued and once
// it is sent (the call then fails with an inFlightError).
const batchTimeout = 10 * time.Second

func newBatcher(rdb redis.UniversalClient, log *slog.Logger) *batcher {
	if _, ok := rdb.(*redis.ClusterClient); ok {
		// A cluster pipeline splits by node anyway; keep it simple there.
		return &batcher{rdb: rdb, maxInflight: -1, log: log}
	}
	return &batcher{rdb: rdb, maxInflight: 2, log: log}
}

// errNoAnswer is the error of a batched call that Redis did not answer
// within batchTimeout. It is not context.DeadlineExceeded: the caller's
// context has not ended, and Redis is out of reach (unreachable).
var errNoAnswer = fmt.Errorf("dlock: no answer from Redis within %v", batchTimeout)

// notSentError is the context's error for a call that never reached Redis
// because the caller's context had ended first: Unlock then knows that its
// release did not run.
type notSentError struct{ ctxErr error }

func (e notSentError) Error() string { return e.ctxErr.Error() }
func (e notSentError) Unwrap() error { return e.ctxErr }

// inFlightError is the context's error for a call that was sent but whose
// caller stopped waiting for it: it may still reach Redis. done is closed
// once it has its outcome, so that a caller undoing what it may have done
// (a waiter leaving the queue) does so after it, not before.
type inFlightError struct {
	ctxErr error
	done   <-chan struct{}
}

func (e inFlightError) Error() string { return e.ctxErr.Error() }
func (e inFlightError) Unwrap() error { return e.ctxErr }

// notSent is the reply of a call dropped before it was sent.
func notSent(ctx context.Context) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(notSentError{ctx.Err()})
	return cmd
}

// run runs script like (*redis.Script).Run.
func (b *batcher) run(ctx context.Context, s *evalCall, keys []any, args ...any) *redis.Cmd {
	if ctx.Err() != nil {
		return notSent(ctx)
	}
	if b.maxInflight < 0 {
		// The acquire and release scripts may run twice.
		return followFailover(ctx, b.rdb, keys[0], func() *redis.Cmd { return s.run(ctx, b.rdb, keys, args...) })
	}
	b.mu.Lock()
	if b.inflight < b.maxInflight && len(b.pending) == 0 {
		b.inflight++
		b.mu.Unlock()
		// Given back even if the call panics (a go-redis hook's): a slot
		// lost for good would, once both are, queue every call forever.
		defer b.release()
		return s.run(ctx, b.rdb, keys, args...)
	}
	c := &batchCall{call: s, cmd: s.cmd(context.Background(), keys, args...), done: make(chan struct{})}
	b.pending = append(b.pending, c)
	b.mu.Unlock()
	select {
	case <-c.done:
		c.panicked.Raise()
		return c.cmd
	case <-ctx.Done():
	}
	b.mu.Lock()
	if !c.sent {
		// Never sent: drop it, so that it cannot run after the caller
		// has given up (and, say, take a lock nobody waits for).
		for i, p := range b.pending {
			if p == c {
				b.pending = append(b.pending[:i], b.pending[i+1:]...)
				break
			}
		}
		b.mu.Unlock()
		return notSent(ctx)
	}
	// Already on the wire: it may have run. The caller, whose ctx has
	// ended, does not wait out the batch's own timeout on a Redis that does
	// not answer: an error says that the outcome is unknown, as a reply cut
	// short at ctx's end would (acquire then abandons, Unlock gives up).
	// Marked left under mu, where send looks for a caller to raise its
	// panic.
	select {
	case <-c.done:
		b.mu.Unlock()
		c.panicked.Raise()
		return c.cmd
	default:
		c.left = true
	}
	b.mu.Unlock()
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(inFlightError{ctxErr: ctx.Err(), done: c.done})
	return cmd
}

// runWaiting is run for a check a waiter makes again while it waits
// (waitingCall, ops as there). The first check, which most acquisitions
// end with, goes by run: no goroutine of its own.
func (b *batcher) runWaiting(ctx context.Context, ops *sync.WaitGroup, s *evalCall, keys []any, args ...any) *redis.Cmd {
	var cmd *redis.Cmd
	if err := waitingCall(ctx, ops, b.log, func(ctx context.Context) error {
		cmd = b.run(ctx, s, keys, args...)
		return cmd.Err()
	}); err != nil {
		failed := redis.NewCmd(ctx)
		failed.SetErr(err)
		return failed
	}
	return cmd
}

// waitingCall runs f, a request a waiter makes while it waits, from a
// goroutine of its own (counted in ops, if not nil, so that Close waits for
// it), with ctx's values and deadline but not its cancellation, which
// go-redis does not notice on a request under way until its ReadTimeout
// cuts a read from a Redis that hangs. The caller stops waiting for it at
// ctx's end: waitingCall then returns an inFlightError, as a queued call
// does once sent, and what f wrote is f's alone; else nil, once f ended.
// f's own context is cancelled then, not before: go-redis does not try it
// again (MaxRetries), which could take the lock, freed meanwhile, for a
// token nobody holds until the queue-leaving that waits for it releases it
// (and keep that leaving, and Close, waiting out every try).
func waitingCall(ctx context.Context, ops *sync.WaitGroup, log *slog.Logger, f func(context.Context) error) error {
	if ctx.Err() != nil || ctx.Done() == nil {
		_ = f(ctx)
		return nil
	}
	var sctx context.Context
	var cancel context.CancelFunc
	if d, ok := ctx.Deadline(); ok {
		sctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), d)
	} else {
		sctx, cancel = context.WithCancel(context.WithoutCancel(ctx))
	}
	if ops != nil {
		ops.Add(1) // above 0: the waiter's own call is counted
	}
	var p *backend.Panic
	// Whoever claims first: the call once it has ended (the caller then
	// gets its reply, or its panic), or the caller once it stops waiting.
	var claimed atomic.Bool
	done := make(chan struct{})
	go func() {
		if ops != nil {
			defer ops.Done()
		}
		defer close(done)
		defer cancel()
		var err error
		p = backend.Run(func() { err = f(sctx) })
		if claimed.CompareAndSwap(false, true) {
			return
		}
		// A batched call that the cancellation left on its way: done
		// tells of its outcome only once that call has one.
		if fl := (inFlightError{}); p == nil && errors.As(err, &fl) {
			<-fl.done
		}
		if p != nil {
			p.Log(log, "dlock: panic in a request whose caller had stopped waiting")
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
		if claimed.CompareAndSwap(false, true) {
			cancel()
			return inFlightError{ctxErr: ctx.Err(), done: done}
		}
		<-done // ended just now
	}
	p.Raise()
	return nil
}

// release gives back an in-flight slot, or uses it to send the queue.
func (b *batcher) release() {
	b.mu.Lock()
	if len(b.pending) == 0 {
		b.inflight--
		b.mu.Unlock()
		return
	}
	batch := b.pending
	b.pending = nil
	for _, c := range batch {
		c.sent = true
	}
	b.mu.Unlock()
	go b.send(batch)
}

// send sends batch as one pipeline. A panic on the way (a go-redis hook's)
// goes to the callers still without their reply, raised in their own
// goroutines (run), where they can recover it: here it would end the
// process. With none of them still waiting, it is logged. The slot is used
// or given back either way.
func (b *batcher) send(batch []*batchCall) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	answered := 0
	p := backend.Run(func() {
		pipe := b.rdb.Pipeline()
		for _, c := range batch {
			_ = pipe.Process(ctx, c.cmd)
		}
		execPipeline(ctx, pipe)
		for _, c := range batch {
			if backend.NoScript(c.cmd.Err()) {
				c.cmd = c.call.retry(ctx, b.rdb, c.cmd)
			}
			if ctx.Err() != nil && errors.Is(c.cmd.Err(), context.DeadlineExceeded) {
				// The batch's deadline, not the caller's (whose context
				// lives, or the caller would have stopped waiting).
				c.cmd.SetErr(errNoAnswer)
			}
			close(c.done)
			answered++
		}
	})
	if p != nil {
		b.mu.Lock()
		waiting := 0
		for _, c := range batch[answered:] {
			c.panicked = p
			if !c.left {
				waiting++
			}
			close(c.done)
		}
		b.mu.Unlock()
		if waiting == 0 {
			p.Log(b.log, "dlock: panic in a batch whose callers had stopped waiting")
		}
	}
	cancel()
	b.release()
}
