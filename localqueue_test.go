package dlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

// localWaiting reports how many goroutines of c wait locally for key.
func localWaiting(c *Client, key string) int {
	n, _ := c.ext.local.waiting(key)
	return n
}

func TestLocalQueueKeepsOneWaiterInRedis(t *testing.T) {
	// A short queue TTL (frequent refreshes) keeps a missed wake-up short;
	// not too short, or a refresh delayed on a loaded machine lets a
	// waiter's entry expire and the waiter lose its turn.
	c, rdb, _ := newTestClient(t, WithLocalQueue(), WithQueueTTL(time.Second))
	other := newClientOn(t, rdb, WithQueueTTL(time.Second)) // another process, without a local queue
	ctx := context.Background()
	l := mustLock(t, c, "fifo")
	const n = 5
	order := make(chan int, n+1)
	for i := 0; i < n; i++ {
		lockInTurn(t, c, "fifo", i, order)
		waitUntil(t, 5*time.Second, "local waiter "+strconv.Itoa(i), func() bool { return localWaiting(c, "fifo") == i+1 })
	}
	// The goroutines wait in the process: none in Redis.
	if q := queued(t, rdb, c, "fifo"); q != 0 {
		t.Errorf("%d waiters queued in Redis, want 0", q)
	}
	// Another process queues in Redis meanwhile: it is served when this
	// process lets go of the lock, before this process's next goroutine.
	lockInTurn(t, other, "fifo", 100, order)
	waitUntil(t, 5*time.Second, "the other process to queue", func() bool { return queued(t, rdb, c, "fifo") == 1 })
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var got []int
	for range n + 1 {
		got = append(got, <-order)
	}
	// The first local goroutine queues in Redis behind the other process.
	want := []int{100, 0, 1, 2, 3, 4}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("turns = %v, want %v", got, want)
		}
	}
	waitUntil(t, 5*time.Second, "the local state to go", func() bool { return c.ext.local.size() == 0 })
}

func TestLocalQueueCancelAndClose(t *testing.T) {
	c, rdb, _ := newTestClient(t, WithLocalQueue())
	ctx := context.Background()
	l := mustLock(t, c, "k")

	// TryLock fails at once, without Redis.
	if _, err := c.TryLock(ctx, "k"); !errors.Is(err, ErrNotObtained) {
		t.Errorf("TryLock = %v, want ErrNotObtained", err)
	}
	// A waiter whose context ends leaves the local queue.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	_, err := c.Lock(wctx, "k")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrNotObtained) {
		t.Errorf("Lock with an expiring context = %v", err)
	}
	// A retry strategy counts local checks and gives up.
	_, err = c.Lock(ctx, "k", WithRetry(FixedRetry(5*time.Millisecond, 3)))
	if !errors.Is(err, ErrNotObtained) {
		t.Errorf("Lock with a retry strategy = %v, want ErrNotObtained", err)
	}
	if n := localWaiting(c, "k"); n != 0 {
		t.Errorf("%d local waiters left", n)
	}
	// A re-entry skips the queue.
	inner, err := c.Lock(l.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if q := queued(t, rdb, c, "k"); q != 0 {
		t.Errorf("%d in the Redis queue", q)
	}
	// Close ends the local wait.
	done := make(chan error, 1)
	go func() {
		_, err := c.Lock(ctx, "k")
		done <- err
	}()
	waitUntil(t, 5*time.Second, "the waiter", func() bool { return localWaiting(c, "k") == 1 })
	c.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Errorf("Lock waiting at Close = %v, want ErrClosed", err)
	}
	_ = l.Unlock(ctx)
	if c.ext.local.size() != 0 {
		t.Error("local state left after the last Unlock")
	}
}

// countingRetry records the checks it is asked about and allows 8.
type countingRetry struct {
	mu    sync.Mutex
	asked []int
}

func (r *countingRetry) Backoff(attempt int) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, attempt)
	return 30 * time.Millisecond, attempt < 8
}

func (r *countingRetry) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.asked)
}

// TestLocalQueueRetryCarriesOver: with a retry strategy, the checks spent
// waiting in the process count: the Redis wait goes on from there.
func TestLocalQueueRetryCarriesOver(t *testing.T) {
	c, rdb, _ := newTestClient(t, WithLocalQueue())
	other := newClientOn(t, rdb)
	ctx := context.Background()
	l := mustLock(t, c, "r")
	retry := &countingRetry{}
	done := make(chan error, 1)
	go func() {
		_, err := c.Lock(ctx, "r", WithRetry(retry))
		done <- err
	}()
	waitUntil(t, 5*time.Second, "two local checks", func() bool { return retry.calls() >= 2 })
	// Another process queues in Redis: it gets the lock next and keeps it,
	// so our waiter goes on checking in Redis until its strategy stops.
	got := make(chan *Lock, 1)
	go func() {
		w, err := other.Lock(ctx, "r")
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	waitUntil(t, 5*time.Second, "the other process to queue", func() bool { return queued(t, rdb, c, "r") == 1 })
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	err := <-done
	if !errors.Is(err, ErrNotObtained) {
		t.Fatalf("Lock = %v, want ErrNotObtained", err)
	}
	// The error counts the checks in the process too, as the strategy did.
	if !strings.HasSuffix(err.Error(), backend.GaveUp(8)) {
		t.Errorf("Lock = %v, want it to say it %s", err, backend.GaveUp(8))
	}
	if w := <-got; w != nil {
		_ = w.Unlock(ctx)
	}
	retry.mu.Lock()
	defer retry.mu.Unlock()
	for i, a := range retry.asked {
		if a != i+1 {
			t.Fatalf("checks asked = %v, want 1, 2, ... 8", retry.asked)
		}
	}
	if len(retry.asked) != 8 {
		t.Errorf("checks asked = %v, want 1, 2, ... 8", retry.asked)
	}
}

// lastCheckRetry allows one re-check and, asked about the second, waits
// for proceed before it gives up: the in-process lock can be handed over
// meanwhile, as when it comes just as the strategy's last delay ends.
type lastCheckRetry struct {
	asked, proceed chan struct{}
}

func (r lastCheckRetry) Backoff(attempt int) (time.Duration, bool) {
	if attempt == 1 {
		return 5 * time.Millisecond, true
	}
	close(r.asked)
	<-r.proceed
	return 0, false
}

// TestLocalQueueRetryGivenUpJustAsHandedOver: a waiter handed the
// in-process lock just as its strategy gave up makes one check in Redis
// and no more; finding the lock taken there, it says how many checks it
// made in all, as any other give-up does.
func TestLocalQueueRetryGivenUpJustAsHandedOver(t *testing.T) {
	c, rdb, _ := newTestClient(t, WithLocalQueue())
	other := newClientOn(t, rdb) // another process
	ctx := context.Background()
	mine := mustLock(t, c, "r")
	retry := lastCheckRetry{asked: make(chan struct{}), proceed: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := c.Lock(ctx, "r", WithRetry(retry))
		done <- err
	}()
	theirs := make(chan *Lock, 1)
	go func() {
		l, _ := other.Lock(ctx, "r")
		theirs <- l
	}()
	waitUntil(t, 5*time.Second, "the other process to queue", func() bool { return queued(t, rdb, c, "r") == 1 })
	testutil.Receive(t, retry.asked, 5*time.Second, "the strategy's second check")
	// The Redis lock goes to the other process, the in-process one to
	// our waiter, whose strategy is giving up.
	if err := mine.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the hand-over in the process", func() bool { return localWaiting(c, "r") == 0 })
	close(retry.proceed)
	err := <-done
	if !errors.Is(err, ErrNotObtained) || !strings.HasSuffix(err.Error(), backend.GaveUp(2)) {
		t.Errorf("Lock = %v, want ErrNotObtained: %s", err, backend.GaveUp(2))
	}
	if l := <-theirs; l != nil {
		_ = l.Unlock(ctx)
	}
}

// TestLocalQueueRetryGivenUpJustAsHandedOverTakesAFreeLock: the one check
// a waiter makes when the in-process lock comes just as its strategy
// gives up is a real one: with the Redis lock free, it takes it.
func TestLocalQueueRetryGivenUpJustAsHandedOverTakesAFreeLock(t *testing.T) {
	c, _, _ := newTestClient(t, WithLocalQueue())
	ctx := context.Background()
	mine := mustLock(t, c, "r")
	retry := lastCheckRetry{asked: make(chan struct{}), proceed: make(chan struct{})}
	type result struct {
		l   *Lock
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := c.Lock(ctx, "r", WithRetry(retry))
		done <- result{l, err}
	}()
	testutil.Receive(t, retry.asked, 5*time.Second, "the strategy's second check")
	if err := mine.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the hand-over in the process", func() bool { return localWaiting(c, "r") == 0 })
	close(retry.proceed)
	r := <-done
	if r.err != nil {
		t.Fatalf("Lock handed the in-process lock as its strategy gave up, Redis lock free = %v, want the lock", r.err)
	}
	if err := r.l.Unlock(ctx); err != nil {
		t.Error(err)
	}
	waitUntil(t, 5*time.Second, "the local state to go", func() bool { return c.ext.local.size() == 0 })
}

// TestLocalQueueRetryKeepsItsSchedule: the waiting in the process counts
// against a retry strategy as the waiting in Redis would, no more: a
// waiter handed the in-process lock during the strategy's first delay,
// while another process takes the Redis lock, checks Redis at once (an
// early check, which costs nothing) and then waits out the rest of that
// delay before its counted check. It does not give up before the delay
// is over.
func TestLocalQueueRetryKeepsItsSchedule(t *testing.T) {
	c, rdb, _ := newTestClient(t, WithLocalQueue())
	other := newClientOn(t, rdb) // another process
	ctx := context.Background()
	mine := mustLock(t, c, "r")
	// One counted check after delay, then give up: about delay in all.
	const delay = time.Second
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := c.Lock(ctx, "r", WithRetry(FixedRetry(delay, 1)))
		done <- err
	}()
	waitUntil(t, 5*time.Second, "the waiter to queue in the process", func() bool { return localWaiting(c, "r") == 1 })
	theirs := make(chan *Lock, 1)
	go func() {
		l, _ := other.Lock(ctx, "r")
		theirs <- l
	}()
	waitUntil(t, 5*time.Second, "the other process to queue", func() bool { return queued(t, rdb, c, "r") == 1 })
	if time.Since(start) >= delay/2 {
		t.Fatalf("setup took %v: too slow to test a hand-over within the first delay (%v)", time.Since(start), delay)
	}
	// The Redis lock goes to the other process, the in-process one to
	// our waiter.
	if err := mine.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	err := <-done
	waited := time.Since(start)
	if !errors.Is(err, ErrNotObtained) {
		t.Fatalf("Lock = %v, want ErrNotObtained", err)
	}
	// Time is the subject: it gives up at its counted check, when the
	// delay is over, give or take a timer's lateness on a loaded machine
	// (the schedule stretched by a delay, or cut short, is the failure).
	if waited < delay || waited > delay+delay/2 {
		t.Errorf("gave up after %v, want about the strategy's delay (%v)", waited, delay)
	}
	if l := <-theirs; l != nil {
		_ = l.Unlock(ctx)
	}
}

// zeroRetry asks for its checks at once, n of them, then gives up.
type zeroRetry int

func (r zeroRetry) Backoff(attempt int) (time.Duration, bool) { return 0, attempt <= int(r) }

// TestLocalQueueZeroBackoffWaitsAMillisecond: a strategy's wait under 1 ms
// counts as 1 ms in the process too, as in Redis: a custom strategy that
// returns 0 cannot spin a waiter through its checks in the local queue.
func TestLocalQueueZeroBackoffWaitsAMillisecond(t *testing.T) {
	c, _, _ := newTestClient(t, WithLocalQueue())
	ctx := context.Background()
	l := mustLock(t, c, "z")
	defer l.Unlock(ctx)
	// One check: the first delay too (no loop to hide it in).
	for _, checks := range []int{1, 50} {
		start := time.Now()
		_, err := c.Lock(ctx, "z", WithRetry(zeroRetry(checks)))
		waited := time.Since(start)
		if !errors.Is(err, ErrNotObtained) {
			t.Fatalf("Lock = %v, want ErrNotObtained", err)
		}
		if waited < time.Duration(checks)*backend.MinBackoff {
			t.Errorf("%s in %v: less than %v a check", backend.GaveUp(checks), waited, backend.MinBackoff)
		}
	}
}

func TestLocalQueueMutualExclusion(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	var inside, overlaps, total atomic.Int32
	var wg sync.WaitGroup
	for range 2 { // two processes...
		// A lock handed over starts with a lease of the queue TTL, counted
		// from the waiter's last check: a short one is lost if the first
		// renewal is slow.
		c := newClientOn(t, srv.Client(t), WithLocalQueue(), WithQueueTTL(time.Second))
		for range 4 { // ...of four goroutines each
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 15 {
					err := c.Do(ctx, "counter", func(ctx context.Context) error {
						if inside.Add(1) != 1 {
							overlaps.Add(1)
						}
						defer inside.Add(-1)
						v, _ := rdb.Get(ctx, "count").Int()
						total.Add(1)
						return rdb.Set(ctx, "count", v+1, 0).Err()
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if got, _ := rdb.Get(ctx, "count").Int(); got != 120 || total.Load() != 120 {
		t.Errorf("count = %d, want 120", got)
	}
	if overlaps.Load() != 0 {
		t.Errorf("%d overlapping critical sections", overlaps.Load())
	}
}

// TestLocalLocksUnderChurn hammers the in-process locks with waiters that
// give up at random: FIFO hand-over, mutual exclusion, and no state left.
func TestLocalLocksUnderChurn(t *testing.T) {
	m := newLocalLocks()
	closed := make(chan struct{})
	var inside [3]atomic.Int32
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 200 {
				k := r.IntN(3)
				key := "k" + strconv.Itoa(k)
				ctx, cancel := context.WithCancel(context.Background())
				if r.IntN(4) == 0 {
					cancel() // gives up at once, maybe after the hand-over
				}
				var retry backend.Retry
				if r.IntN(4) == 0 {
					retry = FixedRetry(time.Microsecond, 2)
				}
				h, _, err := m.lock(ctx, key, r.IntN(8) != 0, retry, closed)
				cancel()
				if err != nil {
					continue
				}
				if inside[k].Add(1) != 1 {
					t.Error("two holders of one local lock")
				}
				inside[k].Add(-1)
				h.unlock()
				h.unlock() // harmless
			}
		}()
	}
	wg.Wait()
	if n := m.size(); n != 0 {
		t.Errorf("%d keys left in the local locks", n)
	}
}

// tableRetry is a custom strategy with a bug: it indexes its table of
// delays before checking that the attempt is in it, so it panics once
// the table is used up.
type tableRetry []time.Duration

func (r tableRetry) Backoff(attempt int) (time.Duration, bool) {
	return r[attempt-1], attempt <= len(r)
}

// lockPanics calls c.Lock(key) with a tableRetry that panics when the lock
// stays taken, and fails the test unless the call panicked.
func lockPanics(t *testing.T, c *Client, key string) {
	t.Helper()
	done := make(chan any)
	go func() {
		defer func() { done <- recover() }()
		_, _ = c.Lock(context.Background(), key, WithRetry(tableRetry{5 * time.Millisecond}))
	}()
	if r := <-done; r == nil {
		t.Fatalf("Lock(%q) with a strategy that runs out did not panic", key)
	}
}

// TestLocalQueuePanicDoesNotWedgeTheKey: a panic during a Lock call (here
// a custom RetryStrategy's; net/http recovers a handler's panic and the
// process goes on) must not leave the key's in-process lock taken or
// queued for: the Client's other goroutines would wait for it forever,
// while without the local queue a dead waiter's place in Redis expires
// with the queue TTL.
func TestLocalQueuePanicDoesNotWedgeTheKey(t *testing.T) {
	// A short queue TTL: the dead waiter's place in Redis (and a lease
	// handed to it) expires soon, as it would without the local queue.
	c, rdb, _ := newTestClient(t, WithLocalQueue(), WithQueueTTL(time.Second))
	other := newClientOn(t, rdb) // another process
	ctx := context.Background()
	lockAfter := func(key string) {
		t.Helper()
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := c.Lock(lctx, key)
		if err != nil {
			t.Fatalf("Lock(%q) once the holder is gone: %v", key, err)
		}
		_ = l.Unlock(ctx)
	}

	// The panic while waiting in the process, behind a goroutine of ours.
	mine := mustLock(t, c, "local")
	lockPanics(t, c, "local")
	if err := mine.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lockAfter("local")

	// The panic while waiting in Redis, behind another process.
	theirs := mustLock(t, other, "redis")
	lockPanics(t, c, "redis")
	if err := theirs.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lockAfter("redis")
}

// panicOnHMGet is a go-redis hook with a bug: once armed, it panics on the
// next HMGET (the read of WithAdaptiveTTL's hold statistics).
type panicOnHMGet struct {
	testutil.PassHook
	armed *atomic.Bool
}

func (h panicOnHMGet) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "hmget" && h.armed.CompareAndSwap(true, false) {
			panic("hook bug")
		}
		return next(ctx, cmd)
	}
}

// TestLocalQueueHookPanicSizingLeaseDoesNotWedgeTheKey: a go-redis hook's
// panic while Lock reads the hold statistics of WithAdaptiveTTL (after the
// in-process lock is taken) must not leave that lock taken for good.
func TestLocalQueueHookPanicSizingLeaseDoesNotWedgeTheKey(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	var armed atomic.Bool
	rdb.AddHook(panicOnHMGet{armed: &armed})
	c := newClientOn(t, rdb, WithLocalQueue())
	ctx := context.Background()
	adaptive := []LockOption{WithoutRenewal(), WithAdaptiveTTL(2, 2*time.Second)}
	armed.Store(true)
	done := make(chan any)
	go func() {
		defer func() { done <- recover() }()
		_, _ = c.Lock(ctx, "k", adaptive...)
	}()
	if r := <-done; r == nil {
		t.Fatal("Lock did not panic")
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := c.Lock(lctx, "k", adaptive...)
	if err != nil {
		t.Fatalf("Lock after the panicked call: %v", err)
	}
	_ = l.Unlock(ctx)
}

// TestLocalQueueLostLockLetsTheNextGoroutineIn: the in-process lock
// mirrors the Redis lock. A holder stuck past WithMaxHold loses the lock
// (other processes may take it): the Client's next goroutine gets its turn
// then too, not only at the stuck holder's Unlock. That late Unlock, and
// its re-entered Lock's, give nothing back a second time.
func TestLocalQueueLostLockLetsTheNextGoroutineIn(t *testing.T) {
	c, _, _ := newTestClient(t, WithLocalQueue())
	ctx := context.Background()
	const lease, maxHold = 100 * time.Millisecond, 100 * time.Millisecond
	stuck := mustLock(t, c, "k", WithTTL(lease), WithMaxHold(maxHold))
	inner, err := c.Lock(stuck.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	next := make(chan *Lock, 1)
	errs := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, "k")
		errs <- err
		next <- l
	}()
	waitUntil(t, 5*time.Second, "the next goroutine to wait", func() bool { return localWaiting(c, "k") == 1 })
	<-stuck.Done()
	if !errors.Is(context.Cause(stuck.Context()), ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", context.Cause(stuck.Context()))
	}
	// The next goroutine's turn in the process comes with the loss; the
	// Redis key expires a drift margin later.
	waitUntil(t, time.Second, "the next goroutine to get the in-process lock", func() bool { return localWaiting(c, "k") == 0 })
	if err := <-errs; err != nil {
		t.Fatalf("the next goroutine's Lock: %v", err)
	}
	l := <-next
	// The stuck holder's late Unlocks report the loss and give nothing back.
	if err := inner.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("inner Unlock after the loss = %v, want ErrNotHeld", err)
	}
	if err := stuck.Unlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Errorf("Unlock after the loss = %v, want ErrLockLost", err)
	}
	if _, err := c.TryLock(ctx, "k"); !errors.Is(err, ErrNotObtained) {
		t.Errorf("TryLock while the next goroutine holds the lock = %v, want ErrNotObtained", err)
	}
	if _, held := c.ext.local.waiting("k"); !held || l.Context().Err() != nil {
		t.Fatalf("the next goroutine's in-process lock: held %v, Context %v", held, l.Context().Err())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.ext.local.size(); n != 0 {
		t.Errorf("%d keys left in the local locks", n)
	}
}
