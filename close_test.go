package dlock

import (
	"bytes"
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

// closeOnNotObtained closes its Client when an acquisition is refused, as
// an application shutting down on the first failure would.
type closeOnNotObtained struct {
	NopObserver
	c *Client
}

func (o *closeOnNotObtained) AcquireEnd(_ context.Context, e AcquireEndEvent) {
	if e.Outcome == AcquireNotObtained {
		_ = o.c.Close()
	}
}

// Close called from an Observer callback that runs inside Lock or TryLock
// does not wait for that very call.
func TestCloseFromAcquireEndObserver(t *testing.T) {
	obs := &closeOnNotObtained{}
	holder, rdb, _ := newTestClient(t)
	// No t.Cleanup Close: it would hang on the deadlock being shown.
	c, err := New(rdb, WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	obs.c = c
	ctx := context.Background()
	// Another Client holds the key.
	l := mustLock(t, holder, "busy")
	defer l.Unlock(ctx)

	done := make(chan error, 1)
	go func() {
		_, err := c.TryLock(ctx, "busy")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotObtained) {
			t.Fatalf("TryLock = %v, want ErrNotObtained", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("TryLock did not return within 5s: Close called from AcquireEnd waits for the TryLock that calls it")
	}
}

// sentHook reports the first script sent once armed.
type sentHook struct {
	testutil.PassHook
	armed atomic.Bool
	sent  chan struct{}
}

func (h *sentHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.armed.Load() && cmd.Name() == "evalsha" {
			select {
			case h.sent <- struct{}{}:
			default:
			}
		}
		return next(ctx, cmd)
	}
}

// Close waits for the Lock calls under way for 5 s at most, even when
// Redis hangs and the go-redis client would wait far longer for its reads
// (ReadTimeout 30s here, or -1).
func TestCloseWithHungRedisAndLockInFlight(t *testing.T) {
	srv := redistest.Start(t)
	h := &sentHook{sent: make(chan struct{}, 1)}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 30 * time.Second})
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(h)
	c, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := mustLock(t, c, "warm") // connected, scripts cached
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	defer srv.Resume(t)
	h.armed.Store(true)
	go func() { _, _ = c.Lock(ctx, "job") }()
	<-h.sent // the acquire is on its way to the hung server

	closeWithin(t, c, "one Lock in flight")
}

// closeWithin closes c, failing t if Close takes longer than its
// documented bound (5 s) with a hung Redis and what under way.
func closeWithin(t *testing.T, c *Client, what string) {
	t.Helper()
	closed := make(chan time.Duration, 1)
	start := time.Now()
	go func() {
		_ = c.Close()
		closed <- time.Since(start)
	}()
	select {
	case d := <-closed:
		t.Logf("Close took %v", d)
	case <-time.After(releaseTimeout + time.Second):
		t.Fatalf("Close still blocked after %v with a hung Redis and %s (documented: up to 5 s)", time.Since(start).Round(time.Millisecond), what)
	}
}

// stuckRenewals holds every renewal pipeline until its context ends, as
// go-redis retrying against a Redis that is gone does, and reports why it
// ended.
type stuckRenewals struct {
	testutil.PassHook
	ended chan error
}

func (h stuckRenewals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if a := cmds[0].Args(); len(a) < 2 || a[0] != "evalsha" || a[1] != extendScript.Hash() {
			return next(ctx, cmds)
		}
		<-ctx.Done()
		h.ended <- ctx.Err()
		for _, c := range cmds {
			c.SetErr(ctx.Err())
		}
		return ctx.Err()
	}
}

// renewRecorder records the Renew events.
type renewRecorder struct {
	NopObserver
	renews chan RenewEvent
}

func (o *renewRecorder) Renew(e RenewEvent) { o.renews <- e }

// Close ends the renewals under way instead of waiting them out: they
// renew locks that Close declares lost anyway, and against a Redis that is
// gone they would hold Close up for their whole timeout. Such a renewal is
// not a failure to report: Close reports the lock Lost (closed).
func TestCloseCancelsRenewalsUnderWay(t *testing.T) {
	srv := redistest.Start(t)
	h := stuckRenewals{ended: make(chan error, 1)}
	o := &renewRecorder{renews: make(chan RenewEvent, 16)}
	c, _ := hookedClient(t, srv.Addr(), h, WithObserver(o))
	l := mustLock(t, c, "k", WithTTL(300*time.Millisecond)) // renewed after 100ms
	waitUntil(t, 5*time.Second, "a renewal under way", func() bool {
		c.dog.mu.Lock()
		defer c.dog.mu.Unlock()
		return l.h.busy
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-h.ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the renewal under way ended with %v, want it cancelled by Close", err)
		}
	default:
		t.Error("Close returned while a renewal was still under way")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrClosed) {
		t.Errorf("lock's Context ended with %v, want ErrClosed", cause)
	}
	waitRenewalsSettled(t) // the renewal's goroutine may report after Close returned
	select {
	case e := <-o.renews:
		t.Errorf("Renew reported %+v for the renewal Close cancelled", e)
	default:
	}
}

// closingObserver closes its Client from the first call of the callback
// named by on, as an application that shuts down when it loses a lock
// would. (Not a sync.Once: Close reports the other locks Lost from within
// that first call.)
type closingObserver struct {
	NopObserver
	on    string // "lost" or "renew"
	c     atomic.Pointer[Client]
	first atomic.Bool
	done  chan struct{} // closed when that Close returned

	mu     sync.Mutex
	events []string // "renew KEY", "lost KEY", in the order reported
}

func (o *closingObserver) log(what, key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, what+" "+key)
}

// renewedAfterLost returns a key reported renewed after it was reported
// lost, if any.
func (o *closingObserver) renewedAfterLost() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	lost := map[string]bool{}
	for _, e := range o.events {
		what, key, _ := strings.Cut(e, " ")
		if what == "lost" {
			lost[key] = true
		} else if lost[key] {
			return key
		}
	}
	return ""
}

func (o *closingObserver) closeClient() {
	if o.first.CompareAndSwap(false, true) {
		_ = o.c.Load().Close()
		close(o.done)
	}
}

func (o *closingObserver) Lost(e LostEvent) {
	o.log("lost", e.Key)
	if o.on == "lost" {
		o.closeClient()
	}
}

func (o *closingObserver) Renew(e RenewEvent) {
	o.log("renew", e.Key)
	if o.on == "renew" {
		o.closeClient()
	}
}

// The Observer's callbacks may call Close: from the watchdog's loop (a
// lease ran out, also in the scan that finds another lock's renewal due),
// from a renewal, and from Close itself (it reports the locks it leaves as
// lost).
func TestCloseFromObserverCallbacks(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name, on  string
		opts      []LockOption
		other     []LockOption // a second lock, if any
		closeHere bool
	}{
		{"Lost/lease ran out", "lost", []LockOption{WithTTL(200 * time.Millisecond), WithoutRenewal()}, nil, false},
		// The other lock's renewal is due (0.5-1 s) when this lease runs
		// out (0.76 s): the scan counts the renewal before Lost is called.
		{"Lost/with a renewal due", "lost", []LockOption{WithTTL(770 * time.Millisecond), WithoutRenewal()}, []LockOption{WithTTL(3 * time.Second)}, false},
		{"Renew", "renew", []LockOption{WithTTL(300 * time.Millisecond)}, nil, false},
		// Both renewals in one batch: the one reported after Close (which
		// reported both locks lost) is not reported.
		{"Renew/with another in the batch", "renew", []LockOption{WithTTL(300 * time.Millisecond)}, []LockOption{WithTTL(300 * time.Millisecond)}, false},
		{"Lost/reported by Close", "lost", nil, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &closingObserver{on: tc.on, done: make(chan struct{})}
			// Not closed by the test's cleanup: a Close that deadlocks
			// would hang it.
			c, err := New(srv.Client(t), WithObserver(o))
			if err != nil {
				t.Fatal(err)
			}
			o.c.Store(c)
			// Keys of their own: an earlier case's locks, left held by its
			// Close, would make this one wait.
			if tc.other != nil {
				mustLock(t, c, tc.name+":other", tc.other...)
			}
			mustLock(t, c, tc.name+":k", tc.opts...)
			if tc.closeHere {
				go c.Close()
			}
			select {
			case <-o.done:
			case <-time.After(5 * time.Second):
				t.Fatal("Close called from the Observer has not returned after 5s")
			}
			waitRenewalsSettled(t)
			if key := o.renewedAfterLost(); key != "" {
				t.Errorf("%q reported renewed after it was reported lost: %q", key, o.events)
			}
		})
	}
}

// Close does not wait out a renewal stuck on a hung Redis either: go-redis
// does not cut a read short when the renewal's context is cancelled (unless
// ContextTimeoutEnabled), so with a long ReadTimeout (30s here, or -1)
// Close would block for all of it, as it must not for a Lock call.
func TestCloseWithHungRedisAndRenewalInFlight(t *testing.T) {
	srv := redistest.Start(t)
	// busy is set before the renewal has a connection: Close could cancel
	// it before it is written. Wait for the write itself.
	var armed atomic.Bool
	written := make(chan struct{}, 1)
	rdb := redis.NewClient(&redis.Options{
		Addr: srv.Addr(), ReadTimeout: 30 * time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			cn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &writeSignalConn{Conn: cn, armed: &armed, written: written}, nil
		},
	})
	t.Cleanup(func() { rdb.Close() })
	c, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	l := mustLock(t, c, "k", WithTTL(600*time.Millisecond)) // renewed every 200 ms
	srv.Pause(t)
	defer srv.Resume(t)
	armed.Store(true) // after Pause: only the renewal writes from here on
	select {
	case <-written: // a renewal is on its way to the hung server
	case <-time.After(5 * time.Second):
		t.Fatal("no renewal sent to the hung server within 5s")
	}
	closeWithin(t, c, "a renewal in flight")
	if !errors.Is(context.Cause(l.Context()), ErrClosed) {
		t.Errorf("lock's Context = %v, want ended by Close", context.Cause(l.Context()))
	}
}

// writeSignalConn reports, once armed, that something was written to it.
type writeSignalConn struct {
	net.Conn
	armed   *atomic.Bool
	written chan struct{}
}

func (c *writeSignalConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if c.armed.Load() && n > 0 {
		select {
		case c.written <- struct{}{}:
		default:
		}
	}
	return n, err
}

// Close called from the Observer's Lost, reported by a re-entry that
// finds the lock gone (force-released), does not wait for that very
// re-entry: it returns at once, not after Close's 5 s bound.
func TestCloseFromLostReportedByReenter(t *testing.T) {
	srv := redistest.Start(t)
	o := &closingObserver{on: "lost", done: make(chan struct{})}
	// Not closed by the test's cleanup: a Close that deadlocks would hang it.
	c, err := New(srv.Client(t), WithObserver(o))
	if err != nil {
		t.Fatal(err)
	}
	o.c.Store(c)
	l := mustLock(t, c, "reenter-lost")
	if err := c.ForceRelease(context.Background(), "reenter-lost"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Lock(l.Context(), "reenter-lost")
	if !errors.Is(err, ErrLockLost) {
		t.Errorf("re-entry = %v, want ErrLockLost", err)
	}
	select {
	case <-o.done:
	default:
		t.Fatal("the re-entry returned before the Observer's Close")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the re-entry (and Close from its Lost) took %v: Close waited for the call that reported Lost", d)
	}
}

// Close ends the Contexts of the locks it leaves held at once, as its doc
// says, not after waiting for the renewals under way: while it waits (up to
// 5 s for one stuck on a connection that stopped answering) the watchdog no
// longer watches their deadlines, so a Context would outlive its lease, and
// another client, which still reaches Redis, would take the lock meanwhile.
func TestCloseEndsLocksBeforeWaitingForStuckRenewals(t *testing.T) {
	srv := redistest.Start(t)
	proxy := startProxy(t, srv.Addr())
	// go-redis does not cut a read short at the context's cancellation
	// (no ContextTimeoutEnabled): the renewal stays stuck.
	rdbA := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 30 * time.Second})
	t.Cleanup(func() { rdbA.Close() })
	a := newClientOn(t, rdbA)
	b := newClientOn(t, srv.Client(t))
	ctx := context.Background()

	const lease = 600 * time.Millisecond // renewed every 200 ms
	sha := []byte(extendScript.Hash())
	frozen := proxy.FreezeOn(func(p []byte) bool { return bytes.Contains(p, sha) })
	la := mustLock(t, a, "k", WithTTL(lease))
	<-frozen // a renewal is stuck between a and Redis

	closed := make(chan struct{})
	go func() {
		_ = a.Close()
		close(closed)
	}()
	defer func() {
		proxy.Thaw()
		<-closed
	}()
	wctx, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	lb, err := b.Lock(wctx, "k") // granted once a's lease ran out in Redis
	if err != nil {
		t.Fatalf("b's Lock: %v", err)
	}
	defer lb.Unlock(ctx)
	select {
	case <-la.Done():
	default:
		t.Fatalf("b holds the lock (fence %d) while a's Context, of a %v lease, is still live: Close, under way, has not ended it",
			lb.Fence(), lease)
	}
}

// holdLog records, in order, the events that begin and end holds:
// "acquired KEY", ReleaseEnd's outcome label and KEY (outermost level
// only: "released KEY", "error KEY") and "lost KEY". If pauseAcquired is set, the first
// AcquireEnd of a grant reports on paused and waits for resume.
type holdLog struct {
	NopObserver
	pauseAcquired bool
	paused        chan struct{}
	resume        chan struct{}
	once          sync.Once

	mu     sync.Mutex
	events []string
}

func (o *holdLog) log(e string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, e)
}

func (o *holdLog) AcquireEnd(_ context.Context, e AcquireEndEvent) {
	if e.Outcome != AcquireOK {
		return
	}
	if o.pauseAcquired {
		o.once.Do(func() {
			o.paused <- struct{}{}
			<-o.resume
		})
	}
	o.log("acquired " + e.Key)
}

func (o *holdLog) ReleaseEnd(_ context.Context, e ReleaseEndEvent) {
	if e.Level == 1 {
		o.log(e.Outcome.String() + " " + e.Key)
	}
}

func (o *holdLog) Lost(e LostEvent) { o.log("lost " + e.Key) }

// check fails t unless key's events are exactly want.
func (o *holdLog) check(t *testing.T, key string, want ...string) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	var got []string
	for _, e := range o.events {
		if _, k, _ := strings.Cut(e, " "); k == key {
			got = append(got, e)
		}
	}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("events of %q = %q, want %q: a hold ends with exactly one ReleaseEnd(released) or Lost, after its AcquireEnd", key, got, want)
	}
}

// Close while an Unlock's release is on its way to Redis leaves that hold
// to the Unlock: it ends as released, or given up if the release fails,
// reported once, not also Lost (closed) by Close.
func TestCloseDuringUnlock(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name  string
		fail  error // the release's error, nil if it runs
		cause error // the lock's Context's
		want  []string
	}{
		{"released", nil, ErrReleased, []string{"acquired k", "released k"}},
		// Given up by the Unlock (LostReleaseFailed), which then reports
		// its error.
		{"release failed", errors.New("connection reset"), errReleaseFailed, []string{"acquired k", "lost k", "error k"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held := newHeldCall(tc.fail)
			o := &holdLog{}
			c, _ := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{releaseScript.Hash(): held.run}}, WithObserver(o))
			l := mustLock(t, c, "k")
			held.arm()
			unlocked := make(chan error, 1)
			go func() { unlocked <- l.Unlock(context.Background()) }()
			<-held.reached // the release is on its way
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			held.release()
			if err := testutil.Receive(t, unlocked, 5*time.Second, "Unlock"); !errors.Is(err, tc.fail) {
				t.Fatalf("Unlock = %v, want %v", err, tc.fail)
			}
			if cause := context.Cause(l.Context()); !errors.Is(cause, tc.cause) {
				t.Errorf("lock's Context ended with %v, want %v", cause, tc.cause)
			}
			o.check(t, "k", tc.want...)
		})
	}
}

// Close while the Observer hears of a grant (the hold is watched, its Lock
// not yet returned) ends the hold, but reports it Lost only after its
// AcquireEnd: a hold is not lost before it was acquired.
func TestCloseDuringGrant(t *testing.T) {
	o := &holdLog{pauseAcquired: true, paused: make(chan struct{}), resume: make(chan struct{})}
	c, _, _ := newTestClient(t, WithObserver(o))
	type result struct {
		l   *Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := c.Lock(context.Background(), "k")
		got <- result{l, err}
	}()
	<-o.paused // granted, AcquireEnd under way
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	o.check(t, "k") // nothing yet: the AcquireEnd has not been reported
	close(o.resume)
	r := testutil.Receive(t, got, 5*time.Second, "Lock")
	if r.err != nil {
		t.Fatalf("Lock = %v", r.err)
	}
	if cause := context.Cause(r.l.Context()); !errors.Is(cause, ErrClosed) {
		t.Errorf("lock's Context ended with %v, want ErrClosed", cause)
	}
	o.check(t, "k", "acquired k", "lost k")
}

// Close while the Observer hears of a grant, then a panic in the Observer
// (in the Lost that the Lock call reports; or in AcquireEnd, and in the
// ReleaseStart of the release that follows): the caller gets the panic,
// not the Lock, so the Client must release the lock (Observer's godoc);
// else the key stays in Redis for its whole lease, keeping others out.
func TestCloseDuringGrantObserverPanicDoesNotKeepTheLock(t *testing.T) {
	for _, tc := range []struct {
		name  string
		panic Observer // called after the pausing one
	}{
		{"Lost", panicOnEvents{}},
		{"AcquireEnd and ReleaseStart", &panicOnGrantAndRelease{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &holdLog{pauseAcquired: true, paused: make(chan struct{}), resume: make(chan struct{})}
			if p, ok := tc.panic.(*panicOnGrantAndRelease); ok {
				p.armed.Store(true)
			}
			c, rdb, _ := newTestClient(t, WithObserver(Observers(o, tc.panic)))
			done := make(chan struct{})
			panicked := false
			go func() {
				defer close(done)
				defer func() { panicked = recover() != nil }()
				_, _ = c.Lock(context.Background(), "k", WithTTL(time.Minute))
			}()
			<-o.paused // granted, AcquireEnd under way
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			close(o.resume)
			testutil.Receive(t, done, 5*time.Second, "Lock")
			if !panicked {
				t.Fatal("Lock did not panic")
			}
			if n, err := rdb.Exists(context.Background(), c.keys("k").lock).Result(); err != nil || n != 0 {
				t.Errorf("lock key after the Lock call panicked: exists = %d, %v; want released, as nobody got the Lock to unlock", n, err)
			}
		})
	}
}

// Close while a Lock's grant is on its way back from Redis: the Lock gives
// up with ErrClosed and releases what it got before Close returns, and the
// Observer hears of no hold.
func TestCloseDuringAcquireReply(t *testing.T) {
	srv := redistest.Start(t)
	held := newHeldCall(nil)
	o := &holdLog{}
	c, rdb := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{acquireScript.Hash(): held.run}}, WithObserver(o))
	held.arm()
	got := make(chan error, 1)
	go func() {
		_, err := c.Lock(context.Background(), "k")
		got <- err
	}()
	<-held.reached // Redis granted the lock; the reply is not read yet
	closed := make(chan struct{})
	go func() {
		_ = c.Close()
		close(closed)
	}()
	waitUntil(t, 5*time.Second, "Close to stop the watchdog", func() bool {
		select {
		case <-c.dog.stop:
			return true
		default:
			return false
		}
	})
	held.release()
	<-closed
	if n, err := rdb.Exists(context.Background(), c.keys("k").lock).Result(); err != nil || n != 0 {
		t.Errorf("lock key after Close: exists = %d, %v; want released by the Lock call Close waited for", n, err)
	}
	if err := testutil.Receive(t, got, 5*time.Second, "Lock"); !errors.Is(err, ErrClosed) {
		t.Errorf("Lock = %v, want ErrClosed", err)
	}
	o.check(t, "k")
}

// Close while an Unlock's release hangs: the hold is left to that Unlock,
// but its lease is renewed no more, so its Context must end by the lease's
// deadline, as it would have before Close, not stay live past it.
func TestCloseDuringHungUnlockEndsAtDeadline(t *testing.T) {
	srv := redistest.Start(t)
	held := newHeldCall(nil)
	o := &holdLog{}
	c, _ := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{releaseScript.Hash(): held.run}}, WithObserver(o))
	const ttl = 300 * time.Millisecond
	l := mustLock(t, c, "k", WithTTL(ttl))
	held.arm()
	unlocked := make(chan error, 1)
	go func() { unlocked <- l.Unlock(context.Background()) }()
	<-held.reached
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := c.dog.deadline(l.h)
	select {
	case <-l.Done():
	case <-time.After(time.Until(deadline) + ttl):
		t.Errorf("lock's Context still live %v after its lease's deadline, its Unlock hanging after Close", ttl)
	}
	if cause := context.Cause(l.Context()); l.Context().Err() != nil && !errors.Is(cause, ErrLockLost) {
		t.Errorf("cause = %v, want ErrLockLost", cause)
	}
	// The timer cancels the Context before it tells the Observer: the
	// Unlock is let go once the loss is reported (or after 5s, for the
	// check below to fail), so that the order of the events is the one
	// asserted, not a race between the timer and the Unlock.
	reported := func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		return slices.Contains(o.events, "lost k")
	}
	for end := time.Now().Add(5 * time.Second); !reported() && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	held.release()
	_ = testutil.Receive(t, unlocked, 5*time.Second, "Unlock")
	// Lost at its deadline, as the watchdog would have declared it before
	// Close; the Unlock's release then ran, before or after Redis expired
	// the key.
	o.mu.Lock()
	got := strings.Join(o.events, ", ")
	o.mu.Unlock()
	if !strings.HasPrefix(got, "acquired k, lost k, ") || strings.Count(got, "lost k") != 1 {
		t.Errorf("events = %q, want acquired, lost once, then the Unlock's outcome", got)
	}
}

// An Extend to a shorter lease after Close, while the lock's Unlock hangs,
// shortens the lease in Redis: the Context must end by that lease's
// deadline, not by the one Close found, or it is still live while another
// client holds the lock.
func TestShorteningExtendDuringHungUnlockAfterClose(t *testing.T) {
	srv := redistest.Start(t)
	held := newHeldCall(nil)
	c, _ := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{releaseScript.Hash(): held.run}})
	other := newClientOn(t, srv.Client(t))
	ctx := context.Background()
	l := mustLock(t, c, "k", WithTTL(10*time.Second))
	unlocked := unlockHeldBack(l, held)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	_ = l.Extend(ctx, 200*time.Millisecond)
	endsBeforeTaken(t, l, other, held.release)
	held.release()
	_ = testutil.Receive(t, unlocked, 5*time.Second, "Unlock")
}

// An Extend to a longer lease after Close, while the lock's Unlock hangs,
// moves the end Close set for the lock to the new lease's deadline: the
// lock is still held in Redis, and its Context must not end as if the
// old lease had run out.
func TestLengtheningExtendDuringHungUnlockAfterClose(t *testing.T) {
	srv := redistest.Start(t)
	held := newHeldCall(nil)
	c, _ := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{releaseScript.Hash(): held.run}})
	ctx := context.Background()
	const short = 300 * time.Millisecond
	l := mustLock(t, c, "k", WithTTL(short))
	unlocked := unlockHeldBack(l, held)
	defer func() { _ = testutil.Receive(t, unlocked, 5*time.Second, "Unlock") }()
	defer held.release()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("Extend after Close: %v", err)
	}
	select {
	case <-l.Done():
		t.Fatalf("the Context ended at the old lease's deadline although Extend set a lease of 10s: %v", context.Cause(l.Context()))
	case <-time.After(3 * short):
	}
}
