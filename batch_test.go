package dlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/tcpproxy"
	"github.com/dlock-go/dlock/internal/testutil"
)

func inflight(c *Client) (running, queued int) {
	b := c.be.(*node).batch
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inflight, len(b.pending)
}

// batchedBehindProxy returns a Client whose calls go through proxy (which
// a test freezes to keep them in flight), its scripts loaded and its
// connection made, and a client of the same server that bypasses proxy.
func batchedBehindProxy(t *testing.T) (*Client, *tcpproxy.Proxy, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv.Addr())
	cut := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ReadTimeout: 20 * time.Second})
	t.Cleanup(func() { cut.Close() })
	c := newClientOn(t, cut)
	mustLock(t, c, "warm").Unlock(context.Background())
	return c, proxy, srv.Client(t)
}

// Calls made while both slots are busy wait in the queue and leave
// together; one whose context ends before it was sent is dropped, so it
// can never take a lock after its caller gave up.
func TestBatchQueuesAndDropsCancelledCalls(t *testing.T) {
	c, proxy, rdb := batchedBehindProxy(t)
	ctx := context.Background()

	proxy.Freeze()
	var wg sync.WaitGroup
	locks := make(chan *Lock, 5)
	try := func(key string) {
		defer wg.Done()
		l, err := c.TryLock(ctx, key)
		if err != nil {
			t.Errorf("TryLock(%q) = %v", key, err)
			return
		}
		locks <- l
	}
	wg.Add(2)
	go try("slot1")
	go try("slot2")
	waitUntil(t, 5*time.Second, "both slots in flight", func() bool { r, _ := inflight(c); return r == 2 })
	wg.Add(3)
	for i := range 3 {
		go try(fmt.Sprintf("queued%d", i))
	}
	waitUntil(t, 5*time.Second, "three calls queued", func() bool { _, q := inflight(c); return q == 3 })

	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	gaveUp := make(chan error, 1)
	go func() {
		// Its clean-up (leaving the queue) then waits for the thaw.
		_, err := c.TryLock(short, "given-up")
		gaveUp <- err
	}()
	waitUntil(t, 5*time.Second, "the fourth call to queue", func() bool { _, q := inflight(c); return q == 4 })
	waitUntil(t, 5*time.Second, "the call whose context ended to leave the queue", func() bool { _, q := inflight(c); return q == 3 })

	proxy.Thaw()
	if err := <-gaveUp; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("TryLock with an ending context = %v, want DeadlineExceeded", err)
	}
	wg.Wait()
	close(locks)
	n := 0
	for l := range locks {
		n++
		if err := l.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
	if n != 5 {
		t.Errorf("%d of 5 queued and in-flight TryLocks got their lock", n)
	}
	if got := rdb.Exists(ctx, c.keys("given-up").lock).Val(); got != 0 {
		t.Error("a call dropped from the queue took the lock after all")
	}
	// A batch's sender frees its slot just after it handed out the replies.
	waitUntil(t, 5*time.Second, "no slot in flight and nothing queued", func() bool {
		r, q := inflight(c)
		return r == 0 && q == 0
	})
}

// A call that fails in a batch fails alone: the others sent with it get
// their own replies, not its error. A TryLock taken in Redis but reported
// as failed would leave the lock held by nobody until its lease ran out.
func TestBatchedCallsErrorIsItsOwn(t *testing.T) {
	c, proxy, rdb := batchedBehindProxy(t)
	ctx := context.Background()
	rdb.Set(ctx, c.keys("str").lock, "not a lock", 0)

	proxy.Freeze()
	var wg sync.WaitGroup
	wg.Add(2)
	for i := range 2 {
		go func() {
			defer wg.Done()
			if l, err := c.TryLock(ctx, fmt.Sprintf("slot%d", i)); err == nil {
				_ = l.Unlock(ctx)
			}
		}()
	}
	waitUntil(t, 5*time.Second, "both slots in flight", func() bool { r, _ := inflight(c); return r == 2 })
	type result struct {
		l   *Lock
		err error
	}
	wrong, good := make(chan result, 1), make(chan result, 1)
	go func() {
		l, err := c.TryLock(ctx, "str")
		wrong <- result{l, err}
	}()
	waitUntil(t, 5*time.Second, "a call queued", func() bool { _, q := inflight(c); return q == 1 })
	go func() {
		l, err := c.TryLock(ctx, "good")
		good <- result{l, err}
	}()
	waitUntil(t, 5*time.Second, "two calls queued", func() bool { _, q := inflight(c); return q == 2 })
	proxy.Thaw()
	if r := testutil.Receive(t, wrong, 10*time.Second, "the TryLock of a string key"); !errors.Is(r.err, ErrWrongType) {
		t.Errorf("TryLock of a string key = %v, want ErrWrongType", r.err)
	}
	r := testutil.Receive(t, good, 10*time.Second, "the TryLock batched with it")
	if r.err != nil {
		t.Fatalf("TryLock batched with a call that failed = %v, want the lock", r.err)
	}
	if err := r.l.Unlock(ctx); err != nil {
		t.Error(err)
	}
	wg.Wait()
}

// Batched calls survive the server losing its script cache: the calls
// refused with NOSCRIPT are sent again with the script.
func TestBatchAfterScriptFlush(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	const goroutines, rounds = 16, 50
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				if g == 0 && i%10 == 0 {
					rdb.ScriptFlush(ctx)
				}
				l, err := c.Lock(ctx, fmt.Sprintf("flush%d", g))
				if err != nil {
					errs <- err
					return
				}
				if err := l.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// panicOnAcquire is a go-redis hook that panics at the acquire script
// while n is above zero (a buggy hook of the application's).
type panicOnAcquire struct {
	testutil.PassHook
	n *atomic.Int32
}

func (h panicOnAcquire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && a[0] == "evalsha" && a[1] == &acquireEval.sha && h.n.Add(-1) >= 0 {
			panic("hook bug")
		}
		return next(ctx, cmd)
	}
}

// A call that panics on its way to Redis (a go-redis hook's bug; net/http
// recovers a handler's panic and goes on) gives its batch slot back:
// otherwise two such panics leave no slot, and every later acquire and
// release waits in the queue for good.
func TestBatchSlotFreedByPanic(t *testing.T) {
	srv := redistest.Start(t)
	n := new(atomic.Int32)
	n.Store(2)
	c, _ := hookedClient(t, srv.Addr(), panicOnAcquire{n: n})
	for i := range 2 {
		mustPanic(t, fmt.Sprintf("TryLock #%d", i+1), func() { _, _ = c.TryLock(context.Background(), "k") })
	}
	if running, queued := inflight(c); running != 0 || queued != 0 {
		t.Errorf("after the panics: %d calls running, %d queued; want none", running, queued)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatalf("TryLock after two panicked calls = %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// panicOnBatchedAcquire is a go-redis hook that panics at a pipeline
// carrying the acquire script while n is above zero: only the batcher's
// queued calls go out that way.
type panicOnBatchedAcquire struct {
	testutil.PassHook
	n *atomic.Int32
}

func (h panicOnBatchedAcquire) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if a := cmd.Args(); len(a) > 1 && a[0] == "evalsha" && a[1] == &acquireEval.sha && h.n.Add(-1) >= 0 {
				panic("hook bug")
			}
		}
		return next(ctx, cmds)
	}
}

// A call that panics while its batch is sent, on the batcher's goroutine,
// panics in its caller's goroutine instead, with the same value, where
// the caller can recover it: not in a goroutine of the library's, where it
// would end the process. The slots and the queue are left empty, the call
// takes no lock, and the Client goes on working.
func TestBatchedCallPanicReachesItsCaller(t *testing.T) {
	srv := redistest.Start(t)
	proxy := startProxy(t, srv.Addr())
	n := new(atomic.Int32)
	n.Store(1)
	c, _ := hookedClient(t, proxy.Addr(), panicOnBatchedAcquire{n: n})
	rdb := srv.Client(t)
	ctx := context.Background()
	mustLock(t, c, "warm").Unlock(ctx) // connections made

	proxy.Freeze()
	locks := make(chan *Lock, 2)
	for _, key := range []string{"slot1", "slot2"} {
		go func() {
			l, err := c.TryLock(ctx, key)
			if err != nil {
				t.Errorf("TryLock(%q) = %v", key, err)
			}
			locks <- l
		}()
	}
	waitUntil(t, 5*time.Second, "both slots in flight", func() bool { r, _ := inflight(c); return r == 2 })
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		_, _ = c.TryLock(ctx, "queued")
	}()
	waitUntil(t, 5*time.Second, "the call to queue", func() bool { _, q := inflight(c); return q == 1 })
	proxy.Thaw()
	if p := <-panicked; p != "hook bug" {
		t.Errorf("the queued TryLock's caller recovered %v, want the hook's panic", p)
	}
	for range 2 {
		if l := <-locks; l != nil {
			if err := l.Unlock(ctx); err != nil {
				t.Error(err)
			}
		}
	}
	waitUntil(t, 5*time.Second, "no slot in flight and nothing queued", func() bool {
		r, q := inflight(c)
		return r == 0 && q == 0
	})
	if got := rdb.Exists(ctx, c.keys("queued").lock).Val(); got != 0 {
		t.Error("the call that panicked left the lock taken")
	}
	l := mustLock(t, c, "queued")
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A release that waited in the batcher's queue and was then sent to a
// Redis that does not answer returns when its caller's context ends, as one
// sent at once does (ContextTimeoutEnabled): not when the batch's own
// timeout (10 s) runs out. Its outcome is unknown, so Unlock gives the lock
// up, as after any failed release. The contexts leave seconds between the
// steps, not a few hundred ms: on a loaded machine the release must still
// be queued behind the two in flight, and still be waited for once sent
// (not dropped unsent, which would pass without testing anything).
func TestBatchedUnlockHonoursItsContext(t *testing.T) {
	srv := redistest.Start(t)
	proxy := startProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	c := newClientOn(t, rdb)
	ctx := context.Background()
	mustLock(t, c, "warm").Unlock(ctx) // scripts loaded, connection made
	a, b, l := mustLock(t, c, "a"), mustLock(t, c, "b"), mustLock(t, c, "c")

	proxy.Freeze()
	defer proxy.Thaw()
	const slotsHeld = 2 * time.Second
	for _, s := range []*Lock{a, b} {
		go func() {
			sctx, cancel := context.WithTimeout(ctx, slotsHeld)
			defer cancel()
			_ = s.Unlock(sctx)
		}()
	}
	waitUntil(t, 5*time.Second, "both slots in flight", func() bool { r, _ := inflight(c); return r == 2 })
	uctx, cancel := context.WithTimeout(ctx, 2*slotsHeld)
	defer cancel()
	unlocked := make(chan error, 1)
	go func() { unlocked <- l.Unlock(uctx) }()
	waitUntil(t, slotsHeld, "the release to queue", func() bool { _, q := inflight(c); return q == 1 })
	// The two releases in flight give up at slotsHeld; the freed slot
	// sends the queued one, into the frozen connection.
	waitUntil(t, 5*time.Second, "the queued release to be sent", func() bool { _, q := inflight(c); return q == 0 })
	<-uctx.Done()
	select {
	case err := <-unlocked:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Unlock with its context over = %v, want DeadlineExceeded", err)
		}
		if !errors.As(err, new(inFlightError)) {
			t.Errorf("Unlock = %v, want the error of a release sent, not dropped", err)
		}
		if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
			t.Errorf("after a release of unknown outcome the lock's Context = %v, want ErrLockLost (given up)", cause)
		}
	case <-time.After(5 * time.Second):
		t.Error("Unlock still waits for its batched release 5 s after its context ended")
		proxy.Thaw()
		<-unlocked
	}
}

// firstKey is the KEYS[1] of an EVALSHA command, as a string.
func firstKey(cmd redis.Cmder) (sha, key string) {
	a := cmd.Args()
	if len(a) < 4 || a[0] != "evalsha" {
		return "", ""
	}
	return argString(a[1]), argString(a[3])
}

// batchRace holds, while armed, the acquires of the blocker keys (sent at
// once, they fill the batcher's two slots) until slots opens, and the
// pipeline carrying the victim's acquire (queued behind them) until
// proceed opens. It tells when the victim's release has run.
type batchRace struct {
	testutil.PassHook
	blocker, victim string // lock names
	slots, proceed  chan struct{}
	held            atomic.Int32  // blocker acquires being held
	piped           chan struct{} // closed when the victim's pipeline is held
	pipedOnce       sync.Once
	released        chan struct{} // closed when a release of the victim ran
	releasedOnce    sync.Once
	slotsOnce       sync.Once
	proceedOnce     sync.Once
}

// startBatchRace starts a Redis, a Client c0 on it (probe is its go-redis
// client) and a Client c with opts whose acquires of "blocker1" and
// "blocker2" and whose batched checks of "victim" h holds back, until
// openSlots and openPipe (or the end of t).
func startBatchRace(t *testing.T, opts ...Option) (probe *redis.Client, c0, c *Client, h *batchRace) {
	t.Helper()
	srv := redistest.Start(t)
	probe = redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { probe.Close() })
	c0 = newClientOn(t, probe)
	h = &batchRace{
		blocker: c0.keys("blocker").lock, victim: c0.keys("victim").lock,
		slots: make(chan struct{}), proceed: make(chan struct{}),
		piped: make(chan struct{}), released: make(chan struct{}),
	}
	h.blocker = strings.TrimSuffix(h.blocker, "}") // both blocker keys
	c, _ = hookedClient(t, srv.Addr(), h, opts...)
	t.Cleanup(func() {
		h.openSlots()
		h.openPipe()
	})
	return probe, c0, c, h
}

// fillSlots has c take two blockers, which fill its batcher's slots, and
// returns once both are held; wg ends with them.
func (h *batchRace) fillSlots(t *testing.T, c *Client) (wg *sync.WaitGroup) {
	t.Helper()
	ctx := context.Background()
	wg = &sync.WaitGroup{}
	for _, key := range []string{"blocker1", "blocker2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l, err := c.TryLock(ctx, key); err == nil {
				_ = l.Unlock(ctx)
			}
		}()
	}
	waitUntil(t, 5*time.Second, "both slots in flight", func() bool { return h.held.Load() == 2 })
	return wg
}

// waitLeaving returns once the waiter whose check is held back has left
// (its release ran: it went first) or waits for the check's outcome
// before it leaves.
func (h *batchRace) waitLeaving(t *testing.T) {
	t.Helper()
	waitUntil(t, 10*time.Second, "the waiter to leave or to wait for its check", func() bool {
		select {
		case <-h.released:
			return true
		default:
			return parkedIn("dlock.(*attempt).leave(") // not in the release it sends
		}
	})
}

// openSlots lets the blockers' acquires through.
func (h *batchRace) openSlots() { h.slotsOnce.Do(func() { close(h.slots) }) }

// openPipe lets the victim's batched checks through.
func (h *batchRace) openPipe() { h.proceedOnce.Do(func() { close(h.proceed) }) }

func (h *batchRace) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		sha, key := firstKey(cmd)
		if sha == acquireEval.sha && strings.HasPrefix(key, h.blocker) {
			h.held.Add(1)
			<-h.slots
		}
		err := next(ctx, cmd)
		if sha == releaseEval.sha && key == h.victim {
			h.releasedOnce.Do(func() { close(h.released) })
		}
		return err
	}
}

func (h *batchRace) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		// A blocker's acquire comes batched if it waited for a slot (a
		// waiter's check made again had it): it fills its slot as well.
		for _, cmd := range cmds {
			if sha, key := firstKey(cmd); sha == acquireEval.sha && strings.HasPrefix(key, h.blocker) {
				h.held.Add(1)
				<-h.slots
				break
			}
		}
		for _, cmd := range cmds {
			if sha, key := firstKey(cmd); sha == acquireEval.sha && key == h.victim {
				h.pipedOnce.Do(func() { close(h.piped) })
				<-h.proceed
				break
			}
		}
		return next(ctx, cmds)
	}
}

// parkedIn reports whether a goroutine waits in a select or a channel
// receive of fn itself (not in a call it makes): "dlock.(*attempt).leave(",
// say.
func parkedIn(fn string) bool {
	buf := make([]byte, 1<<20)
	for _, g := range bytes.Split(buf[:runtime.Stack(buf, true)], []byte("\n\n")) {
		lines := strings.SplitN(string(g), "\n", 3)
		waiting := strings.Contains(lines[0], "[select") || strings.Contains(lines[0], "[chan receive")
		if len(lines) > 1 && waiting && strings.Contains(lines[1], fn) {
			return true
		}
	}
	return false
}

// A waiter's check that waited in the batcher's queue and was then sent
// may still reach Redis after its caller's context ended. The waiter then
// leaves the queue (abandon); that release must not overtake the check,
// or the check, run after it, queues or grants the lock to a waiter that
// is gone: here the free lock is taken for a full lease, by nobody.
func TestAbandonedBatchedCheckTakesNothing(t *testing.T) {
	// slow: the check reaches Redis only after releaseTimeout (a Redis
	// stalled that long). Waiting for it must not use up the time the
	// waiter's own release is given, or no release follows it at all.
	for _, slow := range []bool{false, true} {
		t.Run(map[bool]string{false: "check held back", true: "check slower than releaseTimeout"}[slow], func(t *testing.T) {
			ctx := context.Background()
			probe, c0, c, h := startBatchRace(t)
			// Two acquires fill the batcher's slots; the waiter's first check
			// queues behind them.
			wg := h.fillSlots(t, c)
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			got := lockThenUnlock(wctx, c, "victim")
			waitUntil(t, 5*time.Second, "the waiter's check to queue", func() bool { _, q := inflight(c); return q == 1 })
			h.openSlots() // a slot frees and sends the queued check
			<-h.piped

			cancel() // the waiter gives up while its check is on its way
			// Let the check through once the waiter's release has run (it went
			// first), or once the waiter waits for the check's outcome before it.
			h.waitLeaving(t)
			if slow {
				time.Sleep(releaseTimeout + 500*time.Millisecond) // time is the subject
			}
			h.openPipe()
			if err := <-got; !errors.Is(err, context.Canceled) {
				t.Fatalf("Lock with its context cancelled = %v, want context.Canceled", err)
			}
			wg.Wait()
			// Lock waited for its leaving up to endedUnlockWait only: the
			// rest (after the slow check) ends by Close.
			c.Close()
			if n := probe.Exists(ctx, c0.keys("victim").lock).Val(); n != 0 {
				t.Errorf("the lock was taken by a waiter that had given up (lease left %v)", probe.PTTL(ctx, c0.keys("victim").lock).Val())
			}
			if n := probe.ZCard(ctx, c0.keys("victim").queue).Val(); n != 0 {
				t.Errorf("%d queue entries left by a waiter that had given up", n)
			}
		})
	}
}

// As TestAbandonedBatchedCheckTakesNothing, for a check made again while
// the waiter waits, which its caller stops waiting for at ctx's end
// (batcher.runWaiting): the leaving still goes after it.
func TestAbandonedBatchedRecheckTakesNothing(t *testing.T) {
	ctx := context.Background()
	// Checks again every 100 ms.
	probe, c0, c, h := startBatchRace(t, WithQueueTTL(300*time.Millisecond))
	k := c0.keys("victim")
	held := mustLock(t, c0, "victim")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := lockThenUnlock(wctx, c, "victim", WithTTL(30*time.Second))
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return probe.ZCard(ctx, k.queue).Val() == 1 })

	// Two acquires fill the batcher's slots; the waiter's next check
	// queues behind them.
	wg := h.fillSlots(t, c)
	waitUntil(t, 5*time.Second, "the waiter's check to queue", func() bool { _, q := inflight(c); return q == 1 })
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	h.openSlots() // a slot frees and sends the queued check
	<-h.piped

	cancel() // the waiter gives up while its check is on its way
	h.waitLeaving(t)
	h.openPipe()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with its context cancelled = %v, want context.Canceled", err)
	}
	wg.Wait()
	c.Close()
	if n := probe.Exists(ctx, k.lock).Val(); n != 0 {
		t.Errorf("the lock was taken by a waiter that had given up (lease left %v)", probe.PTTL(ctx, k.lock).Val())
	}
	if n := probe.ZCard(ctx, k.queue).Val(); n != 0 {
		t.Errorf("%d queue entries left by a waiter that had given up", n)
	}
}

// A batch that Redis does not answer within batchTimeout fails its calls
// with the batch's own deadline (go-redis returns the context's error
// when it ends between retries). That is Redis out of reach, not the
// caller giving up, whose context is live: the degraded mode grants its
// lock, and the Observer hears of no cancellation.
func TestBatchTimeoutIsNotTheCallersDeadline(t *testing.T) {
	srv := redistest.Start(t)
	errSlot := errors.New("slot call failed")
	var calls atomic.Int32
	reached, release := make(chan struct{}, 2), make(chan struct{})
	answered := make(chan struct{})
	var once sync.Once
	h := scriptHook{
		// The first two calls hold both slots, then fail; the next is
		// queued, and sent as a batch.
		before: map[string]func() error{acquireScript.Hash(): func() error {
			if calls.Add(1) > 2 {
				return nil
			}
			reached <- struct{}{}
			<-release
			return errSlot
		}},
		after: map[string]func() error{acquireScript.Hash(): func() error {
			once.Do(func() { close(answered) })
			return nil
		}},
	}
	rec := &recorder{}
	// Two attempts of 5 s outlast the batch's 10 s: the third finds its
	// context ended.
	c, _ := hookedClientWith(t, &redis.Options{Addr: srv.Addr(), ReadTimeout: 5 * time.Second}, h,
		WithDegradedMode(LocalFallback), WithObserver(rec))
	ctx := context.Background()

	slots := make(chan error, 2)
	for _, key := range []string{"slot1", "slot2"} {
		go func() {
			_, err := c.TryLock(ctx, key)
			slots <- err
		}()
		<-reached
	}
	srv.Pause(t)
	got := make(chan *Lock, 1)
	go func() {
		l, err := c.Lock(ctx, "job")
		if err != nil {
			t.Errorf("Lock with Redis not answering the batch = %v, want a degraded lock", err)
		}
		got <- l
	}()
	waitUntil(t, 5*time.Second, "the call to queue", func() bool { _, q := inflight(c); return q == 1 })
	close(release)
	for range 2 {
		if err := <-slots; !errors.Is(err, errSlot) {
			t.Fatalf("slot call = %v", err)
		}
	}
	<-answered
	srv.Resume(t) // leaving the queue is not held up
	l := <-got
	if l == nil {
		return
	}
	if !l.Degraded() {
		t.Error("lock not degraded")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, e := range rec.acquires {
		if e.Key == "job" && e.Outcome != AcquireDegraded {
			t.Errorf("AcquireEnd = %+v, want degraded", e)
		}
	}
}

// panicAfterBatchedRelease is a hook that holds releases back and panics
// once a pipeline holding a release has had its reply, like a hook that
// inspects replies.
type panicAfterBatchedRelease struct {
	testutil.PassHook
	hold  chan struct{} // a release sent alone waits for it, or its context's end
	reply chan struct{} // a pipeline of releases waits for it before it is sent
}

func isRelease(cmd redis.Cmder) bool {
	a := cmd.Args()
	return len(a) > 1 && a[0] == "evalsha" && a[1] == &releaseEval.sha
}

func (h panicAfterBatchedRelease) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isRelease(cmd) {
			select {
			case <-h.hold:
			case <-ctx.Done():
				cmd.SetErr(ctx.Err())
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}

func (h panicAfterBatchedRelease) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !slices.ContainsFunc(cmds, isRelease) {
			return next(ctx, cmds)
		}
		<-h.reply
		_ = next(ctx, cmds)
		panic("hook bug")
	}
}

// A batch's panic that no caller is left to raise (each stopped waiting
// once its call was sent) is logged, not dropped without a trace.
func TestBatchPanicWithNoCallerLeftIsLogged(t *testing.T) {
	srv := redistest.Start(t)
	var logs syncBuffer
	hook := panicAfterBatchedRelease{hold: make(chan struct{}), reply: make(chan struct{})}
	c, _ := hookedClient(t, srv.Addr(), hook, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	b := c.be.(*node).batch
	ctx := context.Background()
	release := func(ctx context.Context) error {
		// What it releases does not matter: only that a release is sent.
		return b.run(ctx, releaseEval, []any{"k"}, "token").Err()
	}

	first, cancelFirst := context.WithCancel(ctx)
	slots := make(chan error, 2)
	go func() { slots <- release(first) }()
	go func() { slots <- release(ctx) }()
	waitUntil(t, 5*time.Second, "both slots in flight", func() bool { r, _ := inflight(c); return r == 2 })
	queued, cancelQueued := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() { left <- release(queued) }()
	waitUntil(t, 5*time.Second, "the call to queue", func() bool { _, q := inflight(c); return q == 1 })
	cancelFirst() // its slot sends the queue
	<-slots
	waitUntil(t, 5*time.Second, "the queue sent", func() bool { r, q := inflight(c); return r == 2 && q == 0 })
	cancelQueued()
	if err := <-left; !errors.As(err, new(inFlightError)) {
		t.Fatalf("the queued call's caller got %v, want it to leave the call in flight", err)
	}
	close(hook.reply)
	close(hook.hold)
	<-slots
	waitUntil(t, 5*time.Second, "the panic logged", func() bool { return strings.Contains(logs.String(), "hook bug") })
	waitUntil(t, 5*time.Second, "no slot in flight and nothing queued", func() bool {
		r, q := inflight(c)
		return r == 0 && q == 0
	})
}

// A waiter's check made again while it waits runs on a goroutine of its
// own (waitingCall): a panic there (a go-redis hook's) that comes once the
// waiter has stopped waiting for it is logged through the Client's
// logger, on a Cluster too, whose batcher sends no pipelines of its own.
func TestWaitingCheckPanicWithNoCallerLeftIsLogged(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "single", true: "cluster"}[cluster], func(t *testing.T) {
			ctx := context.Background()
			var logs syncBuffer
			// The waiter's second check (the first made again) is held
			// until the waiter has gone, then panics.
			var checks atomic.Int32
			reached, released := make(chan struct{}), make(chan struct{})
			hook := scriptHook{before: map[string]func() error{acquireEval.sha: func() error {
				if checks.Add(1) == 2 {
					close(reached)
					<-released
					panic("hook bug")
				}
				return nil
			}}}
			opts := []Option{WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), WithQueueTTL(300 * time.Millisecond)}
			var c, holder *Client
			if cluster {
				cl := redistest.StartCluster(t, 3)
				rc := cl.Client(t)
				rc.AddHook(hook)
				c, holder = newClientOn(t, rc, opts...), newClientOn(t, cl.Client(t))
			} else {
				srv := redistest.Start(t)
				c, _ = hookedClient(t, srv.Addr(), hook, opts...)
				holder = newClientOn(t, srv.Client(t))
			}
			held := mustLock(t, holder, "k")
			defer held.Unlock(ctx)
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			got := lockAsync(wctx, c, "k")
			testutil.Receive(t, reached, 5*time.Second, "the waiter's check made again")
			cancel()
			r := testutil.Receive(t, got, endedUnlockWait+5*time.Second, "Lock to return at its ctx's end")
			if !errors.Is(r.err, context.Canceled) {
				t.Errorf("Lock whose check was held back = %v, want Canceled", r.err)
			}
			close(released)
			waitUntil(t, 5*time.Second, "the panic logged", func() bool { return strings.Contains(logs.String(), "hook bug") })
		})
	}
}

// A batch sent on a connection whose handshake Redis refuses (its password
// changed) fails each of its calls with that refusal: go-redis's pipeline
// returns it from Exec alone, and its calls would read as replies of the
// wrong type.
func TestBatchRefusedAuthSaysSo(t *testing.T) {
	srv := redistest.Start(t, redistest.WithConfig("requirepass", "old"))
	proxy := startProxy(t, srv.Addr())
	cut := redis.NewClient(&redis.Options{Addr: proxy.Addr(), Password: "old", MaxRetries: -1, ReadTimeout: 20 * time.Second})
	defer cut.Close()
	c := newClientOn(t, cut)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "old"})
	defer admin.Close()
	ctx := context.Background()
	mustLock(t, c, "warm").Unlock(ctx) // scripts loaded, connection made

	proxy.Freeze()
	var wg sync.WaitGroup
	wg.Add(2)
	for i := range 2 {
		go func() {
			defer wg.Done()
			_, _ = c.TryLock(ctx, fmt.Sprintf("slot%d", i)) // their connections are cut below
		}()
	}
	waitUntil(t, 5*time.Second, "both slots in flight", func() bool { r, _ := inflight(c); return r == 2 })
	queued := make(chan error, 1)
	go func() {
		_, err := c.TryLock(ctx, "queued")
		queued <- err
	}()
	waitUntil(t, 5*time.Second, "a call queued", func() bool { _, q := inflight(c); return q == 1 })
	if err := admin.ConfigSet(ctx, "requirepass", "new").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "client", "kill", "type", "normal", "skipme", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	proxy.Thaw()
	err := testutil.Receive(t, queued, 10*time.Second, "the queued TryLock")
	var re redis.Error
	if !errors.As(err, &re) || !strings.HasPrefix(re.Error(), "WRONGPASS") {
		t.Errorf("queued TryLock = %v, want WRONGPASS", err)
	}
	wg.Wait()
}
