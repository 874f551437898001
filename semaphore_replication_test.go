package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

// Permits with WithReplicaAck: every write that grants, extends, renews or
// gives them back is followed by a WAIT, as a lock's (replication.go).

// entryLease is what is left of token's lease in the holders of s as
// rdb (the master or a replica) has them: the entry's expiry less rdb's
// clock; 0 if rdb has no entry for token.
func entryLease(t *testing.T, rdb *redis.Client, s *Semaphore, token string) time.Duration {
	t.Helper()
	expiry := entryExpiry(t, rdb, s, token)
	if expiry == 0 {
		return 0
	}
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(expiry-now.UnixMilli()) * time.Millisecond
}

// entryExpiry is the expiry (server time, in ms) of token's entry in the
// holders of s as rdb has them; 0 if rdb has none.
func entryExpiry(t *testing.T, rdb *redis.Client, s *Semaphore, token string) int64 {
	t.Helper()
	entry, err := rdb.HGet(context.Background(), semKeys(s).lock, token).Result()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	var expiry int64
	if _, serr := fmt.Sscan(entry, &expiry); err != nil || serr != nil {
		t.Fatalf("holder entry %q: %v %v", entry, err, serr)
	}
	return expiry
}

func TestSemaphoreReplicaAck(t *testing.T) {
	ctx := context.Background()
	master, replica := redistest.StartReplicated(t)
	rdb, rr := master.Client(t), replica.Client(t)
	// As in TestReplicaAck: generous while the replica is healthy, short
	// where it is paused.
	const healthy = 2 * time.Second

	t.Run("AcknowledgedWritesAreOnTheReplica", func(t *testing.T) {
		c := newClientOn(t, rdb, WithReplicaAck(1, healthy, FailClosed))
		s := c.Semaphore("acked", 3)
		l := takeAcked(t, "Acquire", func() (*Lock, error) { return s.Acquire(ctx, 2, WithoutRenewal()) })
		// WAIT returned 1: the replica applied the grant already.
		if d := entryLease(t, rr, s, l.Token()); d <= 0 {
			t.Fatalf("replica lease right after Acquire = %v", d)
		}
		if err := l.Extend(ctx, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		if d := entryLease(t, rr, s, l.Token()); d < 19*time.Second {
			t.Fatalf("replica lease right after Extend = %v", d)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if rr.Exists(ctx, semKeys(s).lock).Val() != 0 {
			t.Fatal("replica still has the permits right after Unlock")
		}
		// Renewals are acknowledged too.
		r := takeAcked(t, "Acquire", func() (*Lock, error) { return s.Acquire(ctx, 1, WithTTL(300*time.Millisecond)) })
		// Renewals move the entry's own expiry (the holders key's alone
		// would not keep the permits).
		for range 2 {
			seen := entryExpiry(t, rr, s, r.Token())
			waitUntil(t, 5*time.Second, "a renewal on the replica", func() bool { return entryExpiry(t, rr, s, r.Token()) > seen })
		}
		if r.Context().Err() != nil {
			t.Fatal(context.Cause(r.Context()))
		}
		_ = r.Unlock(ctx)
		// A read-write lock's writer likewise.
		m := c.RWMutex("acked")
		w := takeAcked(t, "RWMutex.Lock", func() (*Lock, error) { return m.Lock(ctx) })
		if d := entryLease(t, rr, &m.s, w.Token()); d <= 0 {
			t.Fatalf("replica lease right after RWMutex.Lock = %v", d)
		}
		_ = w.Unlock(ctx)
	})

	// Permits handed over to a waiter were written by the releasing
	// Client: the waiter writes its full lease itself and waits for that.
	t.Run("HandOverIsAcknowledged", func(t *testing.T) {
		c := newClientOn(t, rdb, WithReplicaAck(1, healthy, FailClosed))
		waiter := newClientOn(t, rdb, WithReplicaAck(1, healthy, FailClosed))
		s, ws := c.Semaphore("handed", 1), waiter.Semaphore("handed", 1)
		l := takeAcked(t, "Acquire", func() (*Lock, error) { return s.Acquire(ctx, 1) })
		// A lease longer than the queue TTL, which a hand-over grants at
		// first.
		got := inBackground(func() (*Lock, error) { return ws.Acquire(ctx, 1, WithTTL(20*time.Second)) })
		waitSemQueued(t, rdb, ws, 1)
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.err != nil {
			t.Fatal(r.err)
		}
		if d := entryLease(t, rr, ws, r.l.Token()); d < 19*time.Second {
			t.Fatalf("replica lease right after the hand-over = %v, want the full 20s", d)
		}
		_ = r.l.Unlock(ctx)
	})

	t.Run("FailClosed", func(t *testing.T) {
		var reports reportLog
		var logs syncBuffer
		c := newClientOn(t, rdb, WithReplicaAck(1, 100*time.Millisecond, FailClosed), WithReplicaReport(reports.add),
			WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		plain := newClientOn(t, rdb)
		// Taken before the pause.
		renewed := takeAcked(t, "Acquire", func() (*Lock, error) {
			return c.Semaphore("renewed", 2).Acquire(ctx, 1, WithTTL(time.Second))
		})
		fixed := takeAcked(t, "Acquire", func() (*Lock, error) {
			return c.Semaphore("fixed", 2).Acquire(ctx, 1, WithTTL(2*time.Second), WithoutRenewal())
		})
		handing, err := plain.Semaphore("handed", 1).Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		stuck, err := plain.Semaphore("stuck", 1).Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}

		replica.Pause(t)
		defer replica.Resume(t)

		// An acquisition the replica did not acknowledge is given back.
		s := c.Semaphore("fc", 2)
		if _, err := s.TryAcquire(ctx, 2); !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("TryAcquire = %v, want ErrNotReplicated", err)
		}
		if n, err := s.Available(ctx); n != 2 || err != nil {
			t.Fatalf("Available after a fail-closed acquire = %d, %v; want 2", n, err)
		}
		// So is a hand-over.
		hs := c.Semaphore("handed", 1)
		got := inBackground(func() (*Lock, error) { return hs.Acquire(ctx, 1) })
		waitSemQueued(t, rdb, hs, 1)
		if err := handing.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if r := <-got; !errors.Is(r.err, ErrNotReplicated) {
			t.Fatalf("Acquire by hand-over = %v, want ErrNotReplicated", r.err)
		}
		if n, err := hs.Available(ctx); n != 1 || err != nil {
			t.Fatalf("Available after a fail-closed hand-over = %d, %v; want 1", n, err)
		}

		// An operator's ForceRelease is reported as a release is.
		if err := c.Semaphore("stuck", 1).ForceRelease(ctx, stuck.Token()); err != nil {
			t.Fatal(err)
		}
		if rep := reports.first(stuck.Token()); rep.Op != "force release" || rep.Key != "stuck" || rep.Wanted != 1 {
			t.Errorf("report of the unacknowledged ForceRelease: %+v", rep)
		}

		unackedLeasesLost(t, &reports, renewed, fixed, func(l *Lock) time.Duration {
			return entryLease(t, rdb, c.Semaphore(l.Key(), 2), l.Token())
		})
		reports.mu.Lock()
		defer reports.mu.Unlock()
		for _, rep := range reports.rs {
			if rep.Kind != "semaphore" {
				t.Errorf("report %+v: want kind semaphore", rep)
			}
		}
		if out := logs.String(); !strings.Contains(out, "not acknowledged") || !strings.Contains(out, "key=fc kind=semaphore") {
			t.Errorf("no warning with the kind logged:\n%s", out)
		}
	})
}

// Permits handed over while the waiter's check is in flight (the replica
// down, the message missed) are found by its next check, which must set
// the full lease itself (ARGV[10]) in the write its WAIT covers, as for a
// lock (TestReplicaAckHandOverDuringCheck): the waiter gets the very
// permits it was handed, not new ones taken after those lapsed.
func TestSemaphoreReplicaAckHandOverDuringCheck(t *testing.T) {
	ctx := context.Background()
	master, replica := redistest.StartReplicated(t)
	rdb := master.Client(t)
	const timeout, queueTTL = 1500 * time.Millisecond, time.Second
	holder := newClientOn(t, rdb)
	check := &heldCheck{sha: permitsAcquireScript.Hash(), release: make(chan struct{})}
	waiter, wrdb := hookedClient(t, master.Addr(), check, WithQueueTTL(queueTTL), WithReplicaAck(1, timeout, AcceptAndReport))
	// Cached, as hookedClient does the lock's: none is sent twice.
	if err := permitsAcquireScript.Load(ctx, wrdb).Err(); err != nil {
		t.Fatal(err)
	}
	replica.Pause(t)
	defer replica.Resume(t)

	s := holder.Semaphore("in-check", 1)
	l, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	check.armed.Store(true)
	ws := waiter.Semaphore("in-check", 1)
	got := inBackground(func() (*Lock, error) { return ws.Acquire(ctx, 1, WithTTL(20*time.Second)) })
	// The first check has queued the waiter; its reply waits for the
	// hand-over, sent before the waiter subscribes: the message is missed.
	waitUntil(t, 10*time.Second, "the waiter to queue", func() bool { return rdb.ZCard(ctx, semKeys(s).queue).Val() == 1 })
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := s.Inspect(ctx)
	if err != nil || len(info.Holders) != 1 {
		t.Fatalf("no permits handed over: %+v, %v", info, err)
	}
	// The reply arrives late, so that the next check runs half a WAIT
	// before the hand-over's lease runs out, and answers half a WAIT after.
	late := time.AfterFunc(queueTTL+waitLate+timeout/2, func() { close(check.release) })
	defer late.Stop()
	// Two WAITs and a queue TTL away: longer than received's bound.
	var w *Lock
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("Acquire by hand-over = %v", r.err)
		}
		w = r.l
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter handed the permits got nothing within 30s")
	}
	defer func() { _ = w.Unlock(ctx) }()
	if w.Fence() != info.Holders[0].Fence {
		t.Fatalf("waiter holds fence %d, was handed %d: the hand-over lapsed before the waiter took it", w.Fence(), info.Holders[0].Fence)
	}
	// Redis holds them for the lease the waiter trusts, not for what was
	// left of the hand-over's.
	if d := entryLease(t, rdb, ws, w.Token()); d < 15*time.Second {
		t.Fatalf("lease on the master right after the grant = %v, want about the full 20s", d)
	}
	if err := w.Context().Err(); err != nil {
		t.Fatal(context.Cause(w.Context()))
	}
}

// A check that finds permits handed over lengthens them to the full lease
// when asked (ARGV[10], with WithReplicaAck), and writes even when that
// changes nothing, so that the WAIT sent after it covers a write of its
// own connection (as TestAnsweredExtendAlwaysWrites for a lock).
func TestSemaphoreCheckLengthensHandOver(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	s := c.Semaphore("pool", 2)
	l, err := s.Acquire(ctx, 1, WithTTL(5*time.Second), WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	k := semKeys(s)
	check := lengtheningCheck(t, rdb, permitsAcquireEval.script, k.all(), l.Fence(), func(lengthenTo int64) []any {
		return []any{l.Token(), 1000, "", "0", 3000, 1000, "client", 1, 2, lengthenTo}
	})
	if res := check(60000); res[2] < 59000 {
		t.Fatalf("lease after lengthening to 60 s = %d ms", res[2])
	}
	// Shorter than what is left: kept as it is.
	if res := check(1000); res[2] < 58000 {
		t.Fatalf("lease after a check asking for less = %d ms", res[2])
	}
	if d := rdb.PTTL(ctx, k.lock).Val(); d < 58*time.Second {
		t.Fatalf("holders key lives %v, less than its holder's lease", d)
	}
	if n, err := s.Available(ctx); n != 1 || err != nil {
		t.Fatalf("Available = %d, %v; want 1", n, err)
	}
	_ = l.Unlock(ctx)
}

// failEvalSha fails each pipeline that has an EVALSHA of sha, without
// sending it, as a connection that broke would.
type failEvalSha struct {
	testutil.PassHook
	sha string
}

func (f failEvalSha) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if a := c.Args(); len(a) > 1 && a[0] == "evalsha" && a[1] == f.sha {
				err := errors.New("connection broke")
				for _, c := range cmds {
					c.SetErr(err)
				}
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// Permits handed over whose lease the waiter cannot set again (the write
// fails) are given back, and the error names the semaphore, not a lock.
func TestSemaphoreAckedHandOverErrorNamesKind(t *testing.T) {
	ctx := context.Background()
	c, rdb, srv := newTestClient(t)
	wrdb := srv.Client(t)
	wrdb.AddHook(failEvalSha{sha: permitsExtendScript.Hash()})
	// No replica: the queued checks' WAITs just time out. No polling: the
	// waiter learns of the hand-over from its message (handedOver), not
	// from a check.
	waiter := newClientOn(t, wrdb, WithReplicaAck(1, 10*time.Millisecond, FailClosed), noPolling)
	held, err := c.Semaphore("handed", 1).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	ws := waiter.Semaphore("handed", 1)
	got := acquireAsync(ctx, ws, 1)
	waitSemQueued(t, rdb, ws, 1)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err == nil || !strings.Contains(r.err.Error(), `semaphore "handed"`) {
		t.Fatalf("Acquire = %v, %v; want an error naming semaphore \"handed\"", r.l, r.err)
	}
	if n, err := ws.Available(ctx); n != 1 || err != nil {
		t.Fatalf("Available after the failed hand-over = %d, %v; want 1", n, err)
	}
}
