package dlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

// failFastClient is a go-redis client of srv that fails at once while srv
// is down: no retries, no dial back-off.
func failFastClient(t *testing.T, srv *redistest.Server) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// degradedWhileDown returns a Client in the degraded mode, with an
// Observer, whose Redis is down.
func degradedWhileDown(t *testing.T) (*Client, *recorder) {
	t.Helper()
	srv := redistest.Start(t)
	rec := &recorder{}
	c := newClientOn(t, failFastClient(t, srv), WithDegradedMode(LocalFallback), WithObserver(rec))
	srv.Stop(t)
	return c, rec
}

func TestDegradedModeWhenRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	rdb := failFastClient(t, srv)
	var logs syncBuffer
	rec := &recorder{}
	c := newClientOn(t, rdb, WithDegradedMode(LocalFallback), WithObserver(rec),
		WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	failFast := newClientOn(t, rdb)
	ctx := context.Background()

	// Redis up: a lock from Redis.
	l := mustLock(t, c, "job")
	if l.Degraded() || l.Fence() == 0 {
		t.Fatalf("lock with Redis up: degraded %v, fence %d", l.Degraded(), l.Fence())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	srv.Stop(t)

	// The default fails fast.
	if _, err := failFast.Lock(ctx, "job"); err == nil || !unreachable(ctx, err) {
		t.Fatalf("fail-fast Lock with Redis down = %v, want the connection error", err)
	}
	// The fallback grants an in-process lock and says so.
	l, err := c.Lock(ctx, "job")
	if err != nil {
		t.Fatalf("Lock with Redis down and LocalFallback: %v", err)
	}
	if !l.Degraded() || l.Fence() != 0 || l.Context().Err() != nil {
		t.Fatalf("degraded lock: Degraded %v, Fence %d, Context %v", l.Degraded(), l.Fence(), l.Context().Err())
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "degraded") ||
		!strings.Contains(out, "key=job kind=lock") {
		t.Errorf("no warning logged for the degraded lock:\n%s", out)
	}
	if err := l.Extend(ctx, time.Second); !errors.Is(err, ErrDegraded) {
		t.Errorf("Extend of a degraded lock = %v, want ErrDegraded", err)
	}
	if _, err := l.TTL(ctx); !errors.Is(err, ErrDegraded) {
		t.Errorf("TTL of a degraded lock = %v, want ErrDegraded", err)
	}
	if err := l.Txn(ctx, func(redis.Pipeliner) error { return nil }); !errors.Is(err, ErrDegraded) {
		t.Errorf("Txn of a degraded lock = %v, want ErrDegraded", err)
	}
	// It still excludes the Client's other goroutines...
	if _, err := c.TryLock(ctx, "job"); !errors.Is(err, ErrNotObtained) {
		t.Errorf("TryLock while a degraded lock is held = %v, want ErrNotObtained", err)
	}
	next := make(chan *Lock, 1)
	go func() {
		w, err := c.Lock(ctx, "job")
		if err != nil {
			t.Error(err)
		}
		next <- w
	}()
	waitUntil(t, 5*time.Second, "the second goroutine to wait", func() bool { return localWaiting(c, "job") == 1 })
	// ...and re-enters.
	inner, err := c.Lock(l.Context(), "job")
	if err != nil {
		t.Fatalf("re-entering a degraded lock: %v", err)
	}
	if !inner.Degraded() {
		t.Error("re-entered degraded lock is not degraded")
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l.Context().Err() != nil {
		t.Fatal("inner Unlock ended the outer lock")
	}
	select {
	case <-next:
		t.Fatal("the second goroutine got the lock before the outer Unlock")
	default:
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of a degraded lock: %v", err)
	}
	if !errors.Is(context.Cause(l.Context()), ErrReleased) {
		t.Errorf("cause after Unlock = %v", context.Cause(l.Context()))
	}
	w := <-next
	if w == nil || !w.Degraded() {
		t.Fatal("the second goroutine did not get a degraded lock")
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "job", func(context.Context) error { return nil }); err != nil {
		t.Errorf("Do with Redis down: %v", err)
	}

	// Redis back: locks come from Redis again.
	srv.Restart(t)
	var back *Lock
	waitUntil(t, 10*time.Second, "a lock from Redis", func() bool {
		l, err := c.TryLock(ctx, "job")
		if err != nil {
			return false
		}
		if l.Degraded() {
			_ = l.Unlock(ctx)
			return false
		}
		back = l
		return true
	})
	if back.Fence() == 0 {
		t.Error("lock from Redis has no fence")
	}
	if err := back.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// Close loses a held degraded lock; its Unlock still frees it.
	srv.Stop(t)
	d, err := c.Lock(ctx, "other")
	if err != nil || !d.Degraded() {
		t.Fatalf("Lock = %v, %v", d, err)
	}
	c.Close()
	if !errors.Is(context.Cause(d.Context()), ErrClosed) {
		t.Errorf("degraded lock after Close: %v", context.Cause(d.Context()))
	}
	if err := d.Unlock(ctx); err != nil {
		t.Errorf("Unlock after Close: %v", err)
	}
	if c.ext.local.size() != 0 {
		t.Error("in-process locks left")
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	var degraded int
	for _, e := range rec.acquires {
		if e.Outcome == AcquireDegraded {
			degraded++
		}
	}
	if degraded < 4 { // l, w, Do, d
		t.Errorf("%d degraded acquisitions observed, want at least 4", degraded)
	}
}

func TestDegradedModeOption(t *testing.T) {
	srv := redistest.Start(t)
	for _, m := range []DegradedMode{LocalFallback + 1, 7} {
		if _, err := New(srv.Client(t), WithDegradedMode(m)); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("New with the unknown mode %d = %v", m, err)
		}
	}
	if FailFast.String() != "fail_fast" || LocalFallback.String() != "local_fallback" {
		t.Error("mode names")
	}
}

func TestUnreachable(t *testing.T) {
	live := context.Background()
	over, cancel := context.WithCancel(live)
	cancel()
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		want bool
	}{
		{live, fmt.Errorf("dlock: lock %q: %w", "k", dial), true},
		{live, fmt.Errorf("x: %w", io.EOF), true},
		{live, fmt.Errorf("x: %w", syscall.ECONNRESET), true},
		{live, redis.ErrPoolTimeout, true},
		{live, fmt.Errorf("x: %w", errNoAnswer), true}, // a batch Redis did not answer in time
		{live, fmt.Errorf("x: %w", errors.Join(context.DeadlineExceeded, dial)), true},
		{over, fmt.Errorf("x: %w", dial), false},                          // the caller gave up
		{lateContext{live, time.Now()}, fmt.Errorf("x: %w", dial), false}, // its deadline passed, Err not set yet
		{live, fmt.Errorf("x: %w", ErrNotObtained), false},
		// An answer wins over a failed connection it also wraps.
		{live, fmt.Errorf("x: %w: %w", ErrNotObtained, dial), false},
		{live, fmt.Errorf("x: %w: %w", ErrWrongType, dial), false},
		{live, fmt.Errorf("x: %w: %w", ErrClosed, dial), false},
		{live, ErrClosed, false},
		{live, redis.ErrClosed, false},
		{live, fmt.Errorf("x: %w", context.DeadlineExceeded), false},
		{live, fmt.Errorf("dlock: %w: %w", ErrWrongType, errors.New("WRONGTYPE x")), false},
		{live, errors.New("plain"), false},
		{live, redis.ErrCrossSlot, false}, // an answer, not an outage
	} {
		if got := unreachable(tc.ctx, tc.err); got != tc.want {
			t.Errorf("unreachable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// An Unlock that fails (Redis went down) may leave the Redis lock held
// until its lease runs out; it gives the lock up, ending its Context. The
// in-process lock stays taken until then, so that no degraded Lock of the
// same Client overlaps a live Context (WithDegradedMode's promise); once
// the hold ended, the next goroutine gets one.
func TestFailedUnlockKeepsTheLocalLock(t *testing.T) {
	srv := redistest.Start(t)
	rdb := failFastClient(t, srv)
	c := newClientOn(t, rdb, WithDegradedMode(LocalFallback))
	ctx := context.Background()
	first := mustLock(t, c, "job", WithTTL(time.Second))
	srv.Stop(t)
	if err := first.Unlock(ctx); err == nil {
		t.Fatal("Unlock with Redis down succeeded")
	}
	if l, err := c.TryLock(ctx, "job"); err == nil {
		l.Unlock(ctx)
		if first.Context().Err() == nil {
			t.Fatalf("a lock (degraded %v) was granted while the first Lock is live", l.Degraded())
		}
	} else if !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock while the first Lock is live = %v, want ErrNotObtained", err)
	}
	<-first.Done() // given up
	waitUntil(t, 5*time.Second, "a degraded lock once the first hold ended", func() bool {
		l, err := c.TryLock(ctx, "job")
		if err != nil {
			return false
		}
		defer l.Unlock(ctx)
		return l.Degraded()
	})
}

// A Redis that answers BUSY (a script running long elsewhere) cannot serve
// the lock for now: in the degraded mode, Lock falls back to the
// in-process lock, as when Redis cannot be reached.
func TestDegradedModeWhenRedisIsBusy(t *testing.T) {
	srv := redistest.Start(t)
	c := newClientOn(t, failFastClient(t, srv), WithDegradedMode(LocalFallback))
	mustLock(t, c, "warm").Unlock(context.Background()) // connected
	stop := busyScript(t, srv.Addr())
	l, err := c.Lock(context.Background(), "job")
	if err != nil || !l.Degraded() {
		t.Fatalf("Lock with Redis busy = %v, %v; want a degraded lock", l, err)
	}
	stop()
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A server that answers that it cannot take writes for now (a replica:
// READONLY; a replica cut off from its master that serves no stale data:
// MASTERDOWN; a master with fewer replicas than min-replicas-to-write:
// NOREPLICAS; one at its maxmemory: OOM; one whose last RDB save failed:
// MISCONF) cannot serve the lock either: in the degraded mode, Lock falls
// back to the in-process lock; without it, Lock returns that answer.
func TestDegradedModeWhenRedisRefusesWrites(t *testing.T) {
	ctx := context.Background()
	master := redistest.Start(t)
	gone := redistest.Start(t)
	gone.Stop(t) // nothing listens at its address any more
	for _, tc := range []struct {
		reply  string
		master *redistest.Server // nil: not a replica
		config []string
		then   func(*testing.T, *redis.Client)
	}{
		{"READONLY", master, nil, nil},
		{"MASTERDOWN", gone, []string{"replica-serve-stale-data", "no"}, nil},
		{"NOREPLICAS", nil, []string{"min-replicas-to-write", "1"}, nil},
		{"OOM", nil, []string{"maxmemory", "1"}, nil},
		{"MISCONF", nil, []string{"save", "3600 1"}, failSave},
	} {
		t.Run(tc.reply, func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := failFastClient(t, srv)
			if len(tc.config) > 0 {
				if err := rdb.ConfigSet(ctx, tc.config[0], tc.config[1]).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if tc.then != nil {
				tc.then(t, rdb)
			}
			if tc.master != nil {
				if err := rdb.ReplicaOf(ctx, "127.0.0.1", fmt.Sprint(tc.master.Port())).Err(); err != nil {
					t.Fatal(err)
				}
			}
			_, err := newClientOn(t, rdb).TryLock(ctx, "job")
			if err == nil || !strings.Contains(err.Error(), tc.reply) {
				t.Fatalf("TryLock on the server = %v, want the server's %s answer", err, tc.reply)
			}
			l, err := newClientOn(t, rdb, WithDegradedMode(LocalFallback)).Lock(ctx, "job")
			if err != nil || !l.Degraded() {
				t.Fatalf("Lock on the server = %v, %v; want a degraded lock", l, err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// failSave makes the server's next RDB save fail (a directory stands where
// the snapshot goes), saves, and waits until the server knows it failed:
// from then on it refuses writes with MISCONF.
func failSave(t *testing.T, rdb *redis.Client) {
	ctx := context.Background()
	dir, err := rdb.ConfigGet(ctx, "dir").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir["dir"], "dump.rdb"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := rdb.BgSave(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the failed save", func() bool {
		info, err := rdb.Info(ctx, "persistence").Result()
		return err == nil && strings.Contains(info, "rdb_last_bgsave_status:err")
	})
}

// Re-entering a degraded lock with an ended context fails, as it does for
// a lock from Redis, and leaves the hold count as it was.
func TestDegradedReenterWithEndedContext(t *testing.T) {
	c, _ := degradedWhileDown(t)
	l, err := c.Lock(context.Background(), "job")
	if err != nil || !l.Degraded() {
		t.Fatalf("Lock with Redis down = %v, %v; want a degraded lock", l, err)
	}
	ctx, cancel := context.WithCancel(l.Context())
	cancel()
	if _, err := c.Lock(ctx, "job"); !errors.Is(err, context.Canceled) {
		t.Fatalf("re-entering Lock with an ended context = %v; want context.Canceled", err)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l.Context().Err() == nil {
		t.Error("the lock is still held after its only Unlock: the failed re-entry added a hold")
	}
}

// TestDegradedLockMaxHold: a degraded lock has no lease, but WithMaxHold
// still bounds it, as it bounds a lock from Redis: once held for the max
// hold it is lost (its Context ends, the Observer is told) and the
// Client's next goroutine gets its turn, without the stuck holder's Unlock.
func TestDegradedLockMaxHold(t *testing.T) {
	c, rec := degradedWhileDown(t)
	ctx := context.Background()

	const maxHold = 200 * time.Millisecond
	start := time.Now()
	stuck, err := c.Lock(ctx, "job", WithMaxHold(maxHold))
	if err != nil || !stuck.Degraded() {
		t.Fatalf("Lock with Redis down = %v, %v; want a degraded lock", stuck, err)
	}
	next := make(chan *Lock, 1)
	errs := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, "job")
		errs <- err
		next <- l
	}()
	waitUntil(t, 5*time.Second, "the next goroutine to wait", func() bool { return localWaiting(c, "job") == 1 })

	select {
	case <-stuck.Done():
	case <-time.After(maxHold + 2*time.Second):
		t.Fatalf("a degraded lock with WithMaxHold(%v) still held after %v", maxHold, time.Since(start))
	}
	// Time is the subject: the watchdog ends it at the max hold, give or
	// take a timer's lateness on a loaded machine.
	if held := time.Since(start); held < maxHold || held > maxHold+700*time.Millisecond {
		t.Errorf("held %v, want about the max hold (%v)", held, maxHold)
	}
	if cause := context.Cause(stuck.Context()); !errors.Is(cause, ErrLockLost) {
		t.Errorf("cause = %v, want ErrLockLost", cause)
	}
	waitUntil(t, time.Second, "the Observer to hear of the loss", func() bool {
		return rec.count(func(r *recorder) int { return len(r.losts) }) == 1
	})
	rec.mu.Lock()
	if e := rec.losts[0]; e.Key != "job" || e.Reason != LostExpired || !errors.Is(e.Cause, ErrLockLost) {
		t.Errorf("Lost event = %+v", e)
	}
	rec.mu.Unlock()

	// The next goroutine gets its degraded lock; the stuck holder's late
	// Unlock does not free it.
	if err := <-errs; err != nil {
		t.Fatalf("the next goroutine's Lock: %v", err)
	}
	l := <-next
	if !l.Degraded() || l.Context().Err() != nil {
		t.Fatalf("next lock: degraded %v, Context %v", l.Degraded(), l.Context().Err())
	}
	_ = stuck.Unlock(ctx)
	if _, err := c.TryLock(ctx, "job"); !errors.Is(err, ErrNotObtained) {
		t.Errorf("TryLock while the next goroutine holds the lock = %v, want ErrNotObtained", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.ext.local.size(); n != 0 {
		t.Errorf("%d keys left in the local locks", n)
	}
}

// TestDegradedLockLostAtMaxHoldUnlockReportsTheLoss: a degraded lock lost
// at its max hold (its in-process lock handed to the next goroutine) is
// not held any more: its late Unlock, and its re-entered Lock's, report
// ErrNotHeld and ErrLockLost, as they do for a lock from Redis, rather
// than a successful release (Lock.Unlock's godoc).
func TestDegradedLockLostAtMaxHoldUnlockReportsTheLoss(t *testing.T) {
	c, rec := degradedWhileDown(t)
	ctx := context.Background()

	stuck, err := c.Lock(ctx, "job", WithMaxHold(100*time.Millisecond))
	if err != nil || !stuck.Degraded() {
		t.Fatalf("Lock with Redis down = %v, %v; want a degraded lock", stuck, err)
	}
	inner, err := c.Lock(stuck.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	<-stuck.Done()
	if cause := context.Cause(stuck.Context()); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", cause)
	}
	// Another goroutine holds the key now. (Lock, not TryLock: the
	// in-process lock goes back just after the Context ends.)
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	next, err := c.Lock(lctx, "job")
	if err != nil {
		t.Fatalf("Lock after the loss: %v", err)
	}
	defer next.Unlock(ctx)
	if err := inner.Unlock(ctx); !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrLockLost) {
		t.Errorf("inner Unlock after the loss = %v, want ErrNotHeld and ErrLockLost", err)
	}
	if err := stuck.Unlock(ctx); !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrLockLost) {
		t.Errorf("Unlock after the loss = %v, want ErrNotHeld and ErrLockLost", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, e := range rec.releases {
		if e.Outcome == ReleaseOK {
			t.Errorf("Observer told of a successful release of a lost lock: %+v", e)
		}
	}
}

// lateContext has a deadline that passes before its Done channel closes.
// A context.WithDeadline does so for an instant: a socket deadline that
// go-redis takes from it (ContextTimeoutEnabled) may fail a read before
// the context's own timer has set its error. lateContext makes that
// instant last.
type lateContext struct {
	context.Context
	deadline time.Time
}

func (c lateContext) Deadline() (time.Time, bool) { return c.deadline, true }

// A read that failed because the caller's deadline passed is the caller
// giving up, not Redis out of reach, even if the context has not said so
// yet: no degraded lock is granted to a call past its deadline.
func TestDegradedModeNotPastTheDeadline(t *testing.T) {
	srv := redistest.Start(t)
	failed := make(chan struct{})
	var once sync.Once
	h := scriptHook{after: map[string]func() error{acquireScript.Hash(): func() error {
		once.Do(func() { close(failed) })
		return nil
	}}}
	rec := &recorder{}
	c, _ := hookedClient(t, srv.Addr(), h, WithDegradedMode(LocalFallback), WithObserver(rec))
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx := lateContext{Context: parent, deadline: time.Now().Add(200 * time.Millisecond)}

	srv.Pause(t) // the acquire's read waits until the deadline
	got := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, "job")
		if err == nil {
			err = fmt.Errorf("granted (degraded %v)", l.Degraded())
			_ = l.Unlock(context.Background())
		}
		got <- err
	}()
	<-failed
	srv.Resume(t) // leaving the queue is not held up
	if err := <-got; !errors.As(err, new(net.Error)) {
		t.Fatalf("Lock past its deadline = %v, want the read's timeout", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.acquires) != 1 || rec.acquires[0].Outcome != AcquireCanceled {
		t.Errorf("AcquireEnd events = %+v, want one, canceled", rec.acquires)
	}
}

// A plain Client pointed at one node of a Redis Cluster is answered MOVED
// for a key whose slot another node serves, and will be every time: it
// follows no redirection. That is a misconfiguration to report, not Redis
// unable to serve the lock for now (as a ClusterClient's spent
// redirections are): the degraded mode must not take it for an outage and
// hand out locks that exclude no other process.
func TestDegradedModeNotOnMovedToAPlainClient(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	rdb := redis.NewClient(&redis.Options{Addr: cl.Addrs()[0]})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClientOn(t, rdb, WithDegradedMode(LocalFallback))
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("elsewhere:%d", i); masterOf(t, cc, c, k) != cl.Addrs()[0] {
			key = k
		}
	}
	for _, wait := range []bool{false, true} {
		lock := c.TryLock
		if wait {
			lock = c.Lock
		}
		l, err := lock(ctx, key)
		if err == nil {
			t.Fatalf("lock (wait %v) answered MOVED = a lock (degraded %v), want the MOVED error", wait, l.Degraded())
		}
		if _, moved := redis.IsMovedError(err); !moved {
			t.Fatalf("lock (wait %v) answered MOVED = %v, want the MOVED error", wait, err)
		}
	}
}

// cutOnAcquire is a go-redis hook that fails the acquire script as a
// connection reset would, after running before (if set).
type cutOnAcquire struct {
	testutil.PassHook
	before func()
}

func (h *cutOnAcquire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && a[0] == "evalsha" && a[1] == &acquireEval.sha {
			if h.before != nil {
				h.before()
			}
			err := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// A degraded lock that Close beats to the watchdog is not handed out, and
// gives its in-process lock back: a Lock of the key would otherwise wait
// for it for good.
func TestDegradedLockRefusedAtCloseGivesTheLocalLockBack(t *testing.T) {
	srv := redistest.Start(t)
	rdb := failFastClient(t, srv)
	hook := &cutOnAcquire{}
	rdb.AddHook(hook)
	c := newClientOn(t, rdb, WithDegradedMode(LocalFallback))
	closed := make(chan struct{})
	hook.before = func() {
		go func() {
			defer close(closed)
			c.Close() // waits for this TryLock to end
		}()
		<-c.dog.stop // the watchdog takes no more holds
	}
	if l, err := c.TryLock(context.Background(), "k"); !errors.Is(err, ErrClosed) {
		t.Errorf("TryLock as Close began = %v, %v; want ErrClosed", l, err)
	}
	<-closed
	if n, held := c.ext.local.waiting("k"); held || n != 0 {
		t.Errorf("in-process lock of the key: held %v, %d waiting; want free", held, n)
	}
}
