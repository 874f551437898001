package dlock

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/tcpproxy"
	"github.com/dlock-go/dlock/internal/testutil"
	"github.com/redis/go-redis/v9"
)

func TestTxnAppliesWhileHeld(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "order:42")
	var stock *redis.IntCmd
	err := l.Txn(ctx, func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, "{order:42}:state", "paid", 0)
		stock = pipe.IncrBy(ctx, "{order:42}:stock", -1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if l.SlotKey("stock") != "{order:42}:stock" {
		t.Errorf("SlotKey = %q", l.SlotKey("stock"))
	}
	if stock.Val() != -1 || rdb.Get(ctx, "{order:42}:state").Val() != "paid" {
		t.Fatalf("after Txn: stock reply %d, state %q", stock.Val(), rdb.Get(ctx, "{order:42}:state").Val())
	}
	if l.Context().Err() != nil {
		t.Fatal("lock lost by a Txn")
	}
	_ = l.Unlock(ctx)
}

// A lock lost before Txn, or between its check and EXEC (taken away, or
// its lease run out), has nothing applied, and the Lock learns it.
func TestTxnOfALostLockAppliesNothing(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	admin := newClientOn(t, rdb)
	for _, tc := range []struct {
		name string
		opts []LockOption
		// lose loses the lock: before Txn if inside is false, else from
		// fn, after Txn's check and before its EXEC.
		lose   func(t *testing.T, l *Lock)
		inside bool
	}{
		{"force-released before", nil, func(t *testing.T, l *Lock) {
			if err := admin.ForceRelease(ctx, l.Key()); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"force-released during", nil, func(t *testing.T, l *Lock) {
			if err := admin.ForceRelease(ctx, l.Key()); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"lease run out during", []LockOption{WithTTL(50 * time.Millisecond), WithoutRenewal()}, func(t *testing.T, l *Lock) {
			// By the server's clock, without reading the key (which would
			// delete it, and so abort the EXEC, whether or not Redis
			// minds an expiry alone).
			at, err := rdb.Do(ctx, "PEXPIRETIME", c.keys(l.Key()).lock).Int64()
			if err != nil || at < 0 {
				t.Fatalf("PEXPIRETIME = %d, %v", at, err)
			}
			waitUntil(t, 5*time.Second, "the lease to run out", func() bool { return rdb.Time(ctx).Val().UnixMilli() > at })
		}, true},
		// Another kind of value at the lock's name: no token holds it, as
		// a renewal, TTL or Extend reads it (last: the lock cannot be taken
		// again while the value is there).
		{"overwritten before", nil, func(t *testing.T, l *Lock) {
			if err := rdb.Set(ctx, c.keys(l.Key()).lock, "other data", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := mustLock(t, c, "lost", tc.opts...)
			data := "{lost}:data"
			if !tc.inside {
				tc.lose(t, l)
			}
			calls := 0
			err := l.Txn(ctx, func(pipe redis.Pipeliner) error {
				if calls++; tc.inside && calls == 1 {
					tc.lose(t, l)
				}
				pipe.Set(ctx, data, "late write", 0)
				return nil
			})
			if !errors.Is(err, ErrLockLost) {
				t.Fatalf("Txn = %v, want ErrLockLost", err)
			}
			if n := rdb.Exists(ctx, data).Val(); n != 0 {
				t.Fatal("a lost lock's Txn was applied")
			}
			if !errors.Is(context.Cause(l.Context()), ErrLockLost) {
				t.Fatalf("the Lock's Context: %v", context.Cause(l.Context()))
			}
		})
	}
}

// A renewal or Extend between Txn's check and EXEC moves the key: Txn
// starts over and applies fn's commands once, and gives up if the key
// keeps moving.
func TestTxnStartsOverWhenTheKeyMoved(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "moved", WithTTL(time.Minute))
	extendFirst := func(times int) (calls int, err error) {
		err = l.Txn(ctx, func(pipe redis.Pipeliner) error {
			if calls++; calls <= times {
				if err := l.Extend(ctx, time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			pipe.Incr(ctx, "{moved}:n")
			return nil
		})
		return calls, err
	}
	if calls, err := extendFirst(1); err != nil || calls != 2 {
		t.Fatalf("Txn with one Extend inside = %v after %d calls of fn, want nil after 2", err, calls)
	}
	if n := rdb.Get(ctx, "{moved}:n").Val(); n != "1" {
		t.Fatalf("counter = %q, want 1: applied once", n)
	}
	if calls, err := extendFirst(maxTxnAttempts); !errors.Is(err, redis.TxFailedErr) || calls != maxTxnAttempts {
		t.Fatalf("Txn with the key always moving = %v after %d calls of fn, want TxFailedErr after %d", err, calls, maxTxnAttempts)
	}
	if n := rdb.Get(ctx, "{moved}:n").Val(); n != "1" {
		t.Fatalf("counter = %q, want 1: nothing applied by a Txn that gave up", n)
	}
	if l.Context().Err() != nil {
		t.Fatal("lock lost by a Txn")
	}
	_ = l.Unlock(ctx)
}

func TestTxnBadInput(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	queue := func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, "{k}:data", "x", 0)
		return nil
	}
	l := mustLock(t, c, "k")
	if err := l.Txn(ctx, nil); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("Txn(nil) = %v, want ErrInvalidOption", err)
	}
	mine := errors.New("fn's own")
	if err := l.Txn(ctx, func(pipe redis.Pipeliner) error { _ = queue(pipe); return mine }); err != mine {
		t.Errorf("Txn whose fn fails = %v, want fn's error as it is", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Txn(ctx, queue); !errors.Is(err, ErrReleased) {
		t.Errorf("Txn after Unlock = %v, want ErrReleased", err)
	}
	p, err := c.Semaphore("k", 2).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Txn(ctx, queue); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("Txn of permits = %v, want ErrInvalidOption", err)
	}
	_ = p.Unlock(ctx)
	if n := rdb.Exists(ctx, "{k}:data").Val(); n != 0 {
		t.Fatal("a refused Txn was applied")
	}
}

// A holder cut off from Redis in the middle of a Txn (its connection
// frozen after the check, with the MULTI/EXEC on its way) loses the lock to
// another, which writes; when the connection comes back, its EXEC applies
// nothing: only the newer holder's write is there.
func TestTxnOfAPausedHolderAppliesNothing(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	p, err := tcpproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	paused := newClientOn(t, redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 10 * time.Second}))
	other := newClientOn(t, rdb)
	const log = "{paused}:log"
	appendFence := func(l *Lock) func(redis.Pipeliner) error {
		return func(pipe redis.Pipeliner) error {
			pipe.RPush(ctx, log, l.Fence())
			return nil
		}
	}

	// A lease long enough that a loaded machine still freezes the Txn
	// before the lock is lost.
	old := mustLock(t, paused, "paused", WithTTL(time.Second))
	frozen := make(chan struct{})
	var freeze sync.Once
	done := make(chan error, 1)
	go func() {
		done <- old.Txn(ctx, func(pipe redis.Pipeliner) error {
			freeze.Do(func() {
				p.Freeze() // after the check: the EXEC waits behind it
				close(frozen)
			})
			return appendFence(old)(pipe)
		})
	}()
	select {
	case <-frozen:
	case err := <-done:
		t.Fatalf("Txn returned before its check: %v", err)
	}
	// The lease runs out unrenewed (the renewals are frozen too); the
	// other Client takes the lock and writes.
	newer := mustLock(t, other, "paused")
	if err := newer.Txn(ctx, appendFence(newer)); err != nil {
		t.Fatal(err)
	}
	p.Thaw()
	if err := <-done; !errors.Is(err, ErrLockLost) {
		t.Fatalf("the paused holder's Txn = %v, want ErrLockLost", err)
	}
	if got, want := rdb.LRange(ctx, log, 0, -1).Val(), []string{strconv.FormatUint(newer.Fence(), 10)}; !slices.Equal(got, want) {
		t.Fatalf("log = %v, want only the newer holder's fence %v", got, want)
	}
	_ = newer.Unlock(ctx)
}

// Txn costs three round trips, as its godoc says: WATCH, the check, and
// MULTI/EXEC.
func TestTxnIsThreeRoundTrips(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "order:42", WithTTL(time.Minute))
	defer l.Unlock(ctx)
	var n atomic.Int64
	rdb.AddHook(testutil.RoundTrips{N: &n})
	if err := l.Txn(ctx, func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, l.SlotKey("state"), "paid", 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("Txn took %d round trips, want 3", got)
	}
}

// BenchmarkTxn measures what guarding a write costs: a SET sent plainly,
// and the same SET through Txn on a held lock, with the commands each
// costs Redis (INFO commandstats: WATCH, the check, MULTI and EXEC come
// with the SET; go-redis sends no UNWATCH after an EXEC).
//
//	go test -run '^$' -bench Txn -benchmem .
func BenchmarkTxn(b *testing.B) {
	ctx := context.Background()
	c, rdb, _ := newTestClientB(b)
	l, err := c.Lock(ctx, "bench", WithTTL(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Unlock(ctx)
	for _, bc := range []struct {
		name  string
		write func() error
	}{
		{"plain", func() error { return rdb.Set(ctx, "{bench}:v", "x", 0).Err() }},
		{"txn", func() error {
			return l.Txn(ctx, func(pipe redis.Pipeliner) error {
				pipe.Set(ctx, "{bench}:v", "x", 0)
				return nil
			})
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if err := bc.write(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			_, all := commandCalls(b, rdb)
			b.ReportMetric(float64(all)/float64(b.N), "cmds/op")
		})
	}
}

// With WithReplicaAck the lock survives a failover only as far as the
// replicas have it; a guarded write must be held to the same standard, or
// a failover keeps the lock with its holder and drops the write that Txn
// reported done. A healthy replica has the write when Txn returns; one
// that does not acknowledge it fails the Txn with ErrNotReplicated under
// FailClosed (the write is applied on the master: Txn cannot undo it).
func TestTxnReplicaAck(t *testing.T) {
	ctx := context.Background()
	master, replica := redistest.StartReplicated(t)
	rdb, rr := master.Client(t), replica.Client(t)
	var reports reportLog
	// Long enough for a healthy replica on a loaded machine; the write
	// with the replica paused waits all of it.
	c := newClientOn(t, rdb, WithReplicaAck(1, time.Second, FailClosed), WithReplicaReport(reports.add))
	l := takeAcked(t, "Lock", func() (*Lock, error) { return c.Lock(ctx, "acked", WithTTL(time.Minute)) })
	set := func(v string) func(redis.Pipeliner) error {
		return func(pipe redis.Pipeliner) error {
			pipe.Set(ctx, "{acked}:data", v, 0)
			return nil
		}
	}
	if err := l.Txn(ctx, set("1")); err != nil {
		t.Fatal(err)
	}
	if v := rr.Get(ctx, "{acked}:data").Val(); v != "1" {
		t.Fatalf("replica right after Txn: %q, want 1", v)
	}

	replica.Pause(t)
	defer replica.Resume(t)
	if err := l.Txn(ctx, set("2")); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("Txn with the replica paused = %v, want ErrNotReplicated", err)
	}
	if r := reports.first(l.Token()); r.Op != "txn" || r.Kind != "lock" {
		t.Fatalf("report = %+v, want one of op txn", r)
	}
	if l.Context().Err() != nil {
		t.Fatal("lock lost by an unacknowledged Txn")
	}
}

// onCommand runs fn before each command named name is sent, or with do
// only before the first.
type onCommand struct {
	testutil.PassHook
	name string
	do   *sync.Once
	fn   func()
}

func (h onCommand) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch {
		case cmd.Name() != h.name:
		case h.do != nil:
			h.do.Do(h.fn)
		default:
			h.fn()
		}
		return next(ctx, cmd)
	}
}

// A Lock given up on this side while Txn checks it (here by Close, which
// leaves the lock in Redis until its lease runs out) writes nothing,
// although Redis still names it the holder, and fn is not called.
func TestTxnOfALockEndedHereAppliesNothing(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	hooked := srv.Client(t)
	c := newClientOn(t, hooked)
	l := mustLock(t, c, "ended", WithTTL(time.Minute))
	hooked.AddHook(onCommand{name: "hexists", do: &sync.Once{}, fn: func() { c.Close() }})
	called := false
	err := l.Txn(ctx, func(pipe redis.Pipeliner) error {
		called = true
		pipe.Set(ctx, l.SlotKey("data"), "x", 0)
		return nil
	})
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Txn of a Lock closed during its check = %v, want ErrClosed", err)
	}
	if called {
		t.Error("fn was called for a Lock that had ended")
	}
	if rdb.Exists(ctx, l.SlotKey("data")).Val() != 0 {
		t.Fatal("applied although the Lock had ended")
	}
	if rdb.Exists(ctx, c.keys("ended").lock).Val() != 1 {
		t.Fatal("the lock was not in Redis any more: the test shows nothing")
	}
}

// A Lock given up on this side (Close) while Txn checks it, whose key is
// gone from Redis by then too (its lease ran out there, or an operator
// freed it), returns the Lock's own end, ErrClosed, as the godoc says of a
// Lock that ended first: not a loss found by the check.
func TestTxnOfALockEndedHereAndGoneSaysClosed(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	hooked := srv.Client(t)
	c := newClientOn(t, hooked)
	l := mustLock(t, c, "gone", WithTTL(time.Minute))
	hooked.AddHook(onCommand{name: "hexists", do: &sync.Once{}, fn: func() {
		c.Close()
		rdb.Del(ctx, c.keys("gone").lock)
	}})
	err := l.Txn(ctx, func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, l.SlotKey("data"), "x", 0)
		return nil
	})
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Txn of a Lock closed during its check, its key gone = %v, want ErrClosed", err)
	}
	if rdb.Exists(ctx, l.SlotKey("data")).Val() != 0 {
		t.Fatal("applied although the Lock had ended")
	}
}

// A transaction that ran is waited for like any other, even when one of
// its commands failed when it ran (WRONGTYPE) or read a nil (a GET of a
// key not set yet): EXEC applied the others all the same, and with the
// replica not acknowledging them Txn must say so (ErrNotReplicated) next
// to the command's own error, and report them.
func TestTxnReplicaAckAfterACommandError(t *testing.T) {
	ctx := context.Background()
	master, replica := redistest.StartReplicated(t)
	rdb := master.Client(t)
	var reports reportLog
	c := newClientOn(t, rdb, WithReplicaAck(1, 200*time.Millisecond, FailClosed), WithReplicaReport(reports.add))
	l := takeAcked(t, "Lock", func() (*Lock, error) { return c.Lock(ctx, "acked-cmd-error", WithTTL(time.Minute)) })
	if err := rdb.Set(ctx, l.SlotKey("string"), "s", 0).Err(); err != nil {
		t.Fatal(err)
	}
	replica.Pause(t)
	defer replica.Resume(t)
	for _, tc := range []struct {
		name string
		fail func(pipe redis.Pipeliner)
		want error
	}{
		{"nil reply", func(pipe redis.Pipeliner) { pipe.Get(ctx, l.SlotKey("missing")) }, redis.Nil},
		{"wrong type", func(pipe redis.Pipeliner) { pipe.LPush(ctx, l.SlotKey("string"), "x") }, ErrWrongType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := l.SlotKey(tc.name)
			err := l.Txn(ctx, func(pipe redis.Pipeliner) error {
				tc.fail(pipe)
				pipe.Set(ctx, data, "1", 0)
				return nil
			})
			if rdb.Get(ctx, data).Val() != "1" {
				t.Fatal("the transaction was not applied: the test shows nothing")
			}
			if !errors.Is(err, ErrNotReplicated) || !errors.Is(err, tc.want) {
				t.Fatalf("Txn applied with the replica paused = %v, want ErrNotReplicated and %v", err, tc.want)
			}
		})
	}
	if ops := reports.ops(l.Token()); len(ops) != 2 || ops[0] != "txn" || ops[1] != "txn" {
		t.Fatalf("reports %v, want two of op txn", ops)
	}
}

// A Lock that ends here while its Txn's fn runs (Unlock, Close), after the
// check and before EXEC, applies nothing, and Txn returns the cause of the
// Lock's Context, whether Txn was given that Context or another. After
// Close Redis still names the holder, so only this side can stop the write.
func TestTxnOfALockEndedMidwayAppliesNothing(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	bg := context.Background()
	for _, tc := range []struct {
		name  string
		own   bool // Txn is given the Lock's Context
		close bool // Close the Client, else Unlock the Lock
		want  error
	}{
		{"unlocked", false, false, ErrReleased},
		{"unlocked, its own Context", true, false, ErrReleased},
		{"closed", false, true, ErrClosed},
		{"closed, its own Context", true, true, ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClientOn(t, rdb)
			l := mustLock(t, c, "midway")
			defer rdb.Del(bg, c.keys("midway").lock)
			ctx := bg
			if tc.own {
				ctx = l.Context()
			}
			calls := 0
			err := l.Txn(ctx, func(pipe redis.Pipeliner) error {
				if calls++; calls == 1 {
					end := func() error { return l.Unlock(bg) }
					if tc.close {
						end = c.Close
					}
					if err := end(); err != nil {
						t.Fatal(err)
					}
				}
				pipe.Set(bg, "{midway}:data", "late write", 0)
				return nil
			})
			if !errors.Is(err, tc.want) {
				t.Errorf("Txn = %v, want %v", err, tc.want)
			}
			if n := rdb.Exists(bg, "{midway}:data").Val(); n != 0 {
				rdb.Del(bg, "{midway}:data")
				t.Error("a Txn of a Lock ended midway was applied")
			}
		})
	}
}

// A Txn sent to a master demoted to a replica (a client still connected to
// it after a failover) applies nothing, and says why: the server's READONLY
// refusal of the queued write, which EXEC reports only as EXECABORT, is in
// the error, as it is in every other call's on that server, so that a
// caller can tell a failover under way from a bad command.
func TestTxnOnADemotedMasterSaysReadOnly(t *testing.T) {
	ctx := context.Background()
	master, replica := redistest.StartReplicated(t)
	rdb := master.Client(t)
	c := newClientOn(t, rdb)
	l := mustLock(t, c, "demoted", WithTTL(time.Minute))
	redistest.WaitReplicaAcks(t, rdb)
	redistest.Switchover(t, master, replica)
	err := l.Txn(ctx, func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, l.SlotKey("data"), "x", 0)
		return nil
	})
	if !redis.IsReadOnlyError(err) {
		t.Fatalf("Txn on a demoted master = %v, want the server's READONLY", err)
	}
	if l.Context().Err() != nil {
		t.Fatalf("lost by a refused Txn: %v", context.Cause(l.Context()))
	}
	if replica.Client(t).Exists(ctx, l.SlotKey("data")).Val() != 0 {
		t.Fatal("applied on a demoted master")
	}
}

// The watchdog renews a lock every third of its lease, and a renewal moves
// the key Txn WATCHes. A Txn whose check alone takes longer than that (a
// slow path to Redis), but less than half the lease, applies at its first
// try on a lock held throughout: a renewal due goes before it, the next
// waits for it, and the lease stays trusted meanwhile.
func TestTxnSlowerThanTheRenewalInterval(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	hooked := srv.Client(t)
	c := newClientOn(t, hooked)
	const ttl = 600 * time.Millisecond
	l := mustLock(t, c, "slow", WithTTL(ttl))
	defer l.Unlock(ctx)
	hooked.AddHook(onCommand{name: "hexists", fn: func() { time.Sleep(ttl * 5 / 12) }}) // a slow path
	const txns = 3
	for i := range txns {
		calls := 0
		err := l.Txn(ctx, func(pipe redis.Pipeliner) error {
			calls++
			pipe.Incr(ctx, l.SlotKey("n"))
			return nil
		})
		if err != nil {
			t.Fatalf("Txn %d = %v after %d calls of fn, on a lock held throughout (its Context: %v)", i+1, err, calls, context.Cause(l.Context()))
		}
		if calls != 1 {
			t.Errorf("Txn %d called fn %d times, want 1: a renewal moved the key meanwhile", i+1, calls)
		}
	}
	if n := rdb.Get(ctx, l.SlotKey("n")).Val(); n != strconv.Itoa(txns) {
		t.Fatalf("counter = %q, want %d", n, txns)
	}
	if l.Context().Err() != nil {
		t.Fatalf("lock lost: %v", context.Cause(l.Context()))
	}
}

// A Txn that hangs (its check held back past the whole lease) does not let
// the lease run out: the renewal waits for a Txn only until a third of the
// lease is left. The Txn then starts over, the key having moved, and
// applies.
func TestTxnHungPastTheLeaseKeepsTheLock(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	hooked := srv.Client(t)
	c := newClientOn(t, hooked)
	const ttl = 300 * time.Millisecond
	l := mustLock(t, c, "hung", WithTTL(ttl))
	defer l.Unlock(ctx)
	hooked.AddHook(onCommand{name: "hexists", do: &sync.Once{}, fn: func() { time.Sleep(2 * ttl) }})
	calls := 0
	err := l.Txn(ctx, func(pipe redis.Pipeliner) error {
		calls++
		pipe.Incr(ctx, l.SlotKey("n"))
		return nil
	})
	if err != nil {
		t.Fatalf("Txn = %v (its Context: %v)", err, context.Cause(l.Context()))
	}
	if calls < 2 {
		t.Fatalf("fn called %d times: the key did not move while the check hung, so the lease was not renewed", calls)
	}
	if n := rdb.Get(ctx, l.SlotKey("n")).Val(); n != "1" {
		t.Fatalf("counter = %q, want 1", n)
	}
	if l.Context().Err() != nil {
		t.Fatalf("lock lost: %v", context.Cause(l.Context()))
	}
}

// Txns of one Lock from several goroutines: one that begins while another
// runs, with less than half the lease left before the renewal they hold
// back goes all the same (a third of it left), waits for that renewal
// rather than be made to start over by it. The renewal goes as soon as the
// Txns under way end.
func TestTxnBegunDuringAnotherDoesNotStartOver(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	const ttl = 1500 * time.Millisecond
	l := mustLock(t, c, "overlap", WithTTL(ttl))
	defer l.Unlock(ctx)
	hold := func() (deadline, nextRenew time.Time, waiting bool) {
		c.dog.mu.Lock()
		defer c.dog.mu.Unlock()
		return l.h.deadline, l.h.nextRenew, l.h.idle != nil
	}
	granted, _, _ := hold()

	// The first Txn holds the renewal back until its fn is let go.
	first := startHeldTxn(l)
	<-first.in
	var secondCalls atomic.Int32
	// Past the renewal's due time (a third of the lease): the second Txn
	// has less than half the lease before the renewal goes regardless.
	waitUntil(t, 5*time.Second, "the renewal's due time", func() bool {
		_, next, _ := hold()
		return !time.Now().Before(next)
	})
	second := make(chan error, 1)
	go func() {
		second <- l.Txn(ctx, func(pipe redis.Pipeliner) error {
			secondCalls.Add(1)
			// Queued once the renewal has gone (from the first attempt on,
			// if the Txn waited for it, as it should): a Txn in flight then
			// starts over.
			for end := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
				if d, _, _ := hold(); d.After(granted) {
					break
				}
				if time.Now().After(end) {
					return errors.New("no renewal within 5s")
				}
			}
			pipe.Incr(ctx, l.SlotKey("n"))
			return nil
		})
	}()
	// The second Txn is in its fn, or waiting for the renewal.
	waitUntil(t, 5*time.Second, "the second Txn", func() bool {
		_, _, waiting := hold()
		return waiting || secondCalls.Load() > 0
	})
	close(first.letGo)
	if err := <-first.done; err != nil {
		t.Fatalf("first Txn = %v", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("second Txn = %v", err)
	}
	if n := first.calls.Load(); n != 1 {
		t.Errorf("first Txn called fn %d times, want 1", n)
	}
	if n := secondCalls.Load(); n != 1 {
		t.Errorf("second Txn called fn %d times, want 1: the renewal it held back went while it ran, and it started over", n)
	}
	if n := rdb.Get(ctx, l.SlotKey("n")).Val(); n != "2" {
		t.Fatalf("counter = %q, want 2", n)
	}
	if l.Context().Err() != nil {
		t.Fatalf("lock lost: %v", context.Cause(l.Context()))
	}
}

// A Txn waiting behind others for the renewal they hold back goes as soon
// as they end, though the loop's next look is for another lock's renewal,
// due before this one's: the last of them to end sends the loop to it.
func TestTxnBehindOthersGoesWhenTheyEnd(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	// The other lock's renewal is due at 1.8s, before this one's (2s) but
	// past the sixth of this one's lease (1s) from which a Txn waits.
	other := mustLock(t, c, "other", WithTTL(5400*time.Millisecond))
	defer other.Unlock(ctx)
	l := mustLock(t, c, "behind", WithTTL(6*time.Second))
	defer l.Unlock(ctx)
	hold := func() (renewFrom, otherRenew time.Time, waiting bool) {
		c.dog.mu.Lock()
		defer c.dog.mu.Unlock()
		return l.h.nextRenew.Add(-l.h.slack), other.h.nextRenew, l.h.idle != nil
	}

	first := startHeldTxn(l)
	<-first.in
	// Past the instant the renewal may go: the second Txn waits for it.
	waitUntil(t, 5*time.Second, "the renewal's first instant", func() bool {
		from, _, _ := hold()
		return !time.Now().Before(from)
	})
	var calledAt atomic.Pointer[time.Time]
	second := make(chan error, 1)
	go func() {
		second <- l.Txn(ctx, func(pipe redis.Pipeliner) error {
			now := time.Now()
			calledAt.CompareAndSwap(nil, &now)
			pipe.Incr(ctx, l.SlotKey("n"))
			return nil
		})
	}()
	waitUntil(t, 5*time.Second, "the second Txn waiting", func() bool {
		_, _, waiting := hold()
		return waiting
	})
	_, otherRenew, _ := hold()
	ended := time.Now()
	close(first.letGo)
	if err := <-first.done; err != nil {
		t.Fatalf("first Txn = %v", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("second Txn = %v", err)
	}
	waited, bound := calledAt.Load().Sub(ended), otherRenew.Sub(ended)/2
	if waited > bound {
		t.Fatalf("second Txn went %v after the first ended, want within %v (the other lock's renewal is due in %v)", waited, bound, otherRenew.Sub(ended))
	}
}

// A renewal that went early to share another lock's round trip does not
// shorten the time a Txn begun before the next one is due has: a Txn
// shorter than half the lease is still not made to start over.
func TestTxnAfterAnEarlyRenewal(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	hooked := srv.Client(t)
	rt := &renewalTimes{at: map[string][]time.Time{}}
	hooked.AddHook(renewalTimesHook{r: rt})
	c := newClientOn(t, hooked)
	const ttl = 6 * time.Second // due every 2 s, up to 1 s early
	began := time.Now()
	a := mustLock(t, c, "early:a", WithTTL(ttl))
	defer a.Unlock(ctx)
	at := func(d time.Duration) { time.Sleep(time.Until(began.Add(d))) }
	at(ttl / 12)
	b := mustLock(t, c, "early:b", WithTTL(ttl)) // due at 2.5 s: goes with a's at 2 s
	defer b.Unlock(ctx)
	renewed := func() int {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return len(rt.at[c.keys(b.Key()).lock])
	}
	waitUntil(t, ttl/2, "b renewed with a", func() bool { return renewed() > 0 })
	// Past a sixth of the lease after b's renewal, short of the next
	// one's due time: a Txn of a bit less than half the lease.
	at(ttl * 13 / 24) // 3.25 s
	hooked.AddHook(onCommand{name: "hexists", do: &sync.Once{}, fn: func() { time.Sleep(ttl*29/60 - 50*time.Millisecond) }})
	txnIncrOnce(t, rdb, b, "a renewal moved the key meanwhile")
}

// A Txn begun while its lock's renewal could go early (within a sixth of
// the lease of its due time) has that renewal sent at once, as a round
// trip of its own, and goes on once it is answered: it does not wait for
// the renewal's due time, up to a sixth of the lease later.
func TestTxnInTheEarlyRenewalWindowDoesNotWaitForTheDueTime(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	c := newClientOn(t, srv.Client(t))
	const ttl = 6 * time.Second // due at 2 s, may go from 1 s
	began := time.Now()
	l := mustLock(t, c, "window", WithTTL(ttl))
	defer l.Unlock(ctx)
	time.Sleep(time.Until(began.Add(ttl * 11 / 60))) // 1.1 s
	start := time.Now()
	txnIncrOnce(t, rdb, l, "a renewal moved the key meanwhile")
	took := time.Since(start)
	if took > ttl/10 { // the due time is 900 ms away
		t.Errorf("Txn took %v: it waited for the renewal's due time, 0.9 s away, instead of sending it", took.Round(time.Millisecond))
	}
}

// While a Txn is under way, its lock's renewal is not pulled forward into
// another lock's round trip: the early-renewal slack is for sharing round
// trips, and the Txn would start over. Here b's renewal, due while a's Txn
// waits, goes within a sixth of a's lease of the instant a's renewal is
// held back to (a third of its lease left): a's key must not move.
func TestTxnRenewalNotPulledIntoAnotherLocksRound(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	hooked := srv.Client(t)
	bRenewed := make(chan struct{}, 1)
	c := newClientOn(t, hooked, WithObserver(renewSignal{key: "pulled:b", ch: bRenewed}))
	// a's renewal is due at 1 s, held back by its Txn to 2 s (a third of
	// the lease left), which its slack, were it kept, would bring to 1.5 s;
	// b's is due at 1.7 s.
	const ttlA, ttlB = 3 * time.Second, 5100 * time.Millisecond
	a := mustLock(t, c, "pulled:a", WithTTL(ttlA))
	defer a.Unlock(ctx)
	b := mustLock(t, c, "pulled:b", WithTTL(ttlB))
	defer b.Unlock(ctx)
	// a's Txn checks its lock once b has been renewed.
	hooked.AddHook(onCommand{name: "hexists", do: &sync.Once{}, fn: func() {
		select {
		case <-bRenewed:
		case <-time.After(ttlB):
		}
	}})
	txnIncrOnce(t, rdb, a, "a's renewal went with b's and moved the key")
}

// After an Extend to a shorter lease whose outcome is unknown, a Txn holds
// the renewal back until a third of that shorter lease is left, not of
// the longer one trusted before: a Txn shorter than half the lease is not
// made to start over.
func TestTxnAfterShorterExtendOfUnknownOutcome(t *testing.T) {
	srv := redistest.Start(t)
	lost, arm := failNext(errors.New("reply lost"))
	c, hooked := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{extendScript.Hash(): lost}})
	rdb := srv.Client(t)
	ctx := context.Background()
	const short = 3 * time.Second // due at 1 s; a Txn holds it back to 2 s
	l := mustLock(t, c, "shortened", WithTTL(time.Minute))
	defer l.Unlock(ctx)
	arm()
	if err := l.Extend(ctx, short); err == nil {
		t.Fatal("Extend with its reply lost succeeded")
	}
	hooked.AddHook(onCommand{name: "hexists", do: &sync.Once{}, fn: func() { time.Sleep(short * 7 / 15) }}) // 1.4 s
	txnIncrOnce(t, rdb, l, "a renewal moved the key meanwhile")
}

// renewSignal sends on ch when key's lease is renewed.
type renewSignal struct {
	NopObserver
	key string
	ch  chan struct{}
}

func (o renewSignal) Renew(e RenewEvent) {
	if e.Key == o.key && e.Outcome == RenewOK {
		select {
		case o.ch <- struct{}{}:
		default:
		}
	}
}

// A Txn after Close, while the lock's Unlock hangs (the hold is left to
// that Unlock until its lease's deadline), with the renewal due: nothing
// renews the lock any more, so the Txn must not wait for that renewal,
// which would hold it until the lease's deadline.
func TestTxnAfterCloseDuringUnlockDoesNotWaitForARenewal(t *testing.T) {
	srv := redistest.Start(t)
	held := newHeldCall(nil)
	c, rdb := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{releaseScript.Hash(): held.run}})
	ctx := context.Background()
	const ttl = 3 * time.Second
	l := mustLock(t, c, "k", WithTTL(ttl))
	unlocked := unlockHeldBack(l, held)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ttl, "the renewal to be due", func() bool {
		c.dog.mu.Lock()
		defer c.dog.mu.Unlock()
		return l.h.txnDue(time.Now())
	})
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- l.Txn(ctx, func(pipe redis.Pipeliner) error {
			pipe.Set(ctx, l.SlotKey("data"), "x", 0)
			return nil
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Txn = %v, want nil: the lease is still trusted", err)
		}
		if rdb.Exists(ctx, l.SlotKey("data")).Val() != 1 {
			t.Error("Txn returned nil but applied nothing")
		}
	case <-time.After(ttl / 6):
		t.Errorf("Txn still waiting %v after it began (its lease's deadline is in %v)", time.Since(start), time.Until(c.dog.deadline(l.h)))
		<-done
	}
	held.release()
	_ = testutil.Receive(t, unlocked, 5*time.Second, "Unlock")
}

// stallingLost is an Observer whose Lost of key blocks the watchdog's loop
// (which reports the losses it finds) until resume is closed.
type stallingLost struct {
	NopObserver
	key     string
	reached chan struct{}
	resume  chan struct{}
}

func (o *stallingLost) Lost(e LostEvent) {
	if e.Key == o.key {
		close(o.reached)
		<-o.resume
	}
}

// A Txn waiting for a due renewal when Close comes, while the lock's
// Unlock hangs, is not left waiting for that renewal, which the stopped
// loop never sends: it goes on without it, not at the lease's deadline.
func TestTxnWaitingForARenewalAtCloseDuringUnlock(t *testing.T) {
	srv := redistest.Start(t)
	held := newHeldCall(nil)
	o := &stallingLost{key: "stall", reached: make(chan struct{}), resume: make(chan struct{})}
	c, _ := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{releaseScript.Hash(): held.run}}, WithObserver(o))
	ctx := context.Background()
	const ttl = 3 * time.Second
	l := mustLock(t, c, "k", WithTTL(ttl))
	unlocked := unlockHeldBack(l, held)
	// The loop, reporting this lock's loss, sends no renewal meanwhile.
	mustLock(t, c, "stall", WithTTL(MinTTL), WithoutRenewal())
	testutil.Receive(t, o.reached, 5*time.Second, "the loss that stalls the loop")
	waitUntil(t, ttl, "the renewal to be due", func() bool {
		c.dog.mu.Lock()
		defer c.dog.mu.Unlock()
		return l.h.txnDue(time.Now())
	})
	done := make(chan error, 1)
	go func() {
		done <- l.Txn(ctx, func(pipe redis.Pipeliner) error {
			pipe.Set(ctx, l.SlotKey("data"), "x", 0)
			return nil
		})
	}()
	waitUntil(t, 5*time.Second, "the Txn to wait for the renewal", func() bool {
		c.dog.mu.Lock()
		defer c.dog.mu.Unlock()
		return l.h.idle != nil
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	close(o.resume)
	start := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Txn = %v, want nil: the lease is still trusted", err)
		}
	case <-time.After(ttl / 6):
		t.Errorf("Txn still waiting %v after Close (its lease's deadline is in %v)", time.Since(start), time.Until(c.dog.deadline(l.h)))
		<-done
	}
	held.release()
	_ = testutil.Receive(t, unlocked, 5*time.Second, "Unlock")
}

// txnIncrOnce runs a Txn of l that increments its "n" counter, and checks
// that it applied, with fn called once: why says what a second call means.
func txnIncrOnce(t *testing.T, rdb *redis.Client, l *Lock, why string) {
	t.Helper()
	ctx := context.Background()
	calls := 0
	err := l.Txn(ctx, func(pipe redis.Pipeliner) error {
		calls++
		pipe.Incr(ctx, l.SlotKey("n"))
		return nil
	})
	if err != nil {
		t.Fatalf("Txn = %v after %d calls of fn (its Context: %v)", err, calls, context.Cause(l.Context()))
	}
	if calls != 1 {
		t.Errorf("Txn called fn %d times, want 1: %s", calls, why)
	}
	if n := rdb.Get(ctx, l.SlotKey("n")).Val(); n != "1" {
		t.Fatalf("counter = %q, want 1", n)
	}
}

// heldTxn is a Txn of a Lock, run in the background, that increments the
// lock's "n" counter and whose fn, the first time it is called, waits
// until letGo is closed: a Txn under way for as long as a test needs.
type heldTxn struct {
	in    chan struct{} // closed once fn is first called
	letGo chan struct{}
	calls atomic.Int32 // of fn
	done  chan error   // the Txn's outcome
}

func startHeldTxn(l *Lock) *heldTxn {
	h := &heldTxn{in: make(chan struct{}), letGo: make(chan struct{}), done: make(chan error, 1)}
	ctx := context.Background()
	go func() {
		h.done <- l.Txn(ctx, func(pipe redis.Pipeliner) error {
			if h.calls.Add(1) == 1 {
				close(h.in)
				<-h.letGo
			}
			pipe.Incr(ctx, l.SlotKey("n"))
			return nil
		})
	}()
	return h
}
