package dlock

import (
	"cmp"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
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

// reportLog collects ReplicaReports.
type reportLog struct {
	mu sync.Mutex
	rs []ReplicaReport
}

func (r *reportLog) add(rep ReplicaReport) {
	r.mu.Lock()
	r.rs = append(r.rs, rep)
	r.mu.Unlock()
}

// first returns the first report for token (zero if none).
func (r *reportLog) first(token string) ReplicaReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rep := range r.rs {
		if rep.Token == token {
			return rep
		}
	}
	return ReplicaReport{}
}

func (r *reportLog) ops(token string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ops []string
	for _, rep := range r.rs {
		if rep.Token == token {
			ops = append(ops, rep.Op)
		}
	}
	return ops
}

// lockAcked takes key with a Client that asks for replica
// acknowledgement, trying again if it fails closed: a loaded machine can
// delay a healthy replica's acknowledgement past a short timeout, and
// only the set-up of a test does this.
func lockAcked(t *testing.T, c *Client, key string, opts ...LockOption) *Lock {
	t.Helper()
	return takeAcked(t, fmt.Sprintf("Lock(%q)", key), func() (*Lock, error) {
		return c.Lock(context.Background(), key, opts...)
	})
}

// takeAcked is lockAcked for any take: what names it in failures.
func takeAcked(t *testing.T, what string, take func() (*Lock, error)) *Lock {
	t.Helper()
	for range 10 {
		l, err := take()
		if err == nil {
			return l
		}
		if !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("%s: %v", what, err)
		}
	}
	t.Fatalf("%s: not acknowledged by the healthy replica in 10 tries", what)
	return nil
}

// unackedLeasesLost checks, on a FailClosed Client whose replica is
// paused, that an Extend of fixed (held without renewal) fails with
// ErrNotReplicated and is not trusted, nor are the renewals of renewed:
// both are lost when the lease the replica has runs out, although the
// master's (read by masterLease) has not, and reported.
func unackedLeasesLost(t *testing.T, reports *reportLog, renewed, fixed *Lock, masterLease func(*Lock) time.Duration) {
	t.Helper()
	if err := fixed.Extend(context.Background(), 20*time.Second); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("Extend = %v, want ErrNotReplicated", err)
	}
	if fixed.Context().Err() != nil {
		t.Fatal("lost by a failed extension")
	}
	for _, l := range []*Lock{renewed, fixed} {
		select {
		case <-l.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("%q kept although its lease is not replicated", l.Key())
		}
		if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
			t.Fatalf("%q: cause = %v", l.Key(), cause)
		}
		if d := masterLease(l); d <= 0 {
			t.Errorf("%q: the master's lease (%v) ran out before the holder gave up", l.Key(), d)
		}
	}
	if ops := reports.ops(renewed.Token()); len(ops) == 0 || ops[0] != "renew" {
		t.Errorf("reports for the renewed one: %v", ops)
	}
	if ops := reports.ops(fixed.Token()); len(ops) != 1 || ops[0] != "extend" {
		t.Errorf("reports for the extended one: %v", ops)
	}
}

// Every extend call answered "held" writes, even one that changes nothing:
// with WithReplicaAck, the WAIT sent after it must cover a write of its own
// connection (a server may count only those).
func TestAnsweredExtendAlwaysWrites(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "k", WithTTL(time.Minute))
	if err := l.Extend(ctx, time.Minute); err != nil { // Extend number 1
		t.Fatal(err)
	}
	keys := []string{c.keys("k").lock}
	for _, call := range []struct {
		what string
		args []any
	}{
		{"a renewal to a shorter lease (kept as it is)", []any{l.Token(), 1000, backend.Lengthen}},
		{"an Extend already applied, sent again", []any{l.Token(), 60000, "1"}},
	} {
		before := changes(t, rdb)
		if v, err := extendScript.Run(ctx, rdb, keys, call.args...).Int(); v != 1 || err != nil {
			t.Fatalf("%s = %v, %v; want 1 (held)", call.what, v, err)
		}
		if changes(t, rdb) == before {
			t.Errorf("%s wrote nothing: a WAIT after it would not cover it", call.what)
		}
	}
	if pttl := rdb.PTTL(ctx, keys[0]).Val(); pttl < 50*time.Second {
		t.Errorf("the lease is %v after calls that must keep it", pttl)
	}
	_ = l.Unlock(ctx)
}

// changes is the server's count of changes (rdb_changes_since_last_save;
// the test servers never save): it shows whether a script call wrote.
func changes(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	for _, line := range strings.Split(rdb.Info(context.Background(), "persistence").Val(), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "rdb_changes_since_last_save:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no rdb_changes_since_last_save in INFO persistence")
	return 0
}

// A replica that does not acknowledge the renewals of many locks is one
// warning per round of renewals, with the number of locks, not one per
// lock: under AcceptAndReport the locks are kept, and renewed every third
// of a lease for as long as the replica is gone. WithReplicaReport still
// hears of each lock.
func TestReplicaAckShortRenewalRoundIsLoggedOnce(t *testing.T) {
	master, replica := redistest.StartReplicated(t)
	var logs syncBuffer
	var renewReports atomic.Int64
	c := newClientOn(t, master.Client(t), WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))),
		WithReplicaAck(1, 50*time.Millisecond, AcceptAndReport),
		WithReplicaReport(func(r ReplicaReport) {
			if r.Op == "renew" {
				renewReports.Add(1)
			}
		}))
	const held = 50
	for i := range held {
		mustLock(t, c, fmt.Sprintf("unacked:%d", i), WithTTL(600*time.Millisecond))
	}
	replica.Stop(t)
	waitUntil(t, 10*time.Second, "two rounds of unacknowledged renewals", func() bool {
		return renewReports.Load() >= 2*held
	})
	records, locks := 0, 0
	for _, r := range logRecords(t, &logs) {
		if r.Msg == "dlock: lock write not acknowledged by enough replicas" && r.Op == "renew" {
			records++
			locks += r.Locks
			if r.Locks < 1 || !strings.HasPrefix(r.Key, "unacked:") || r.Token == "" {
				t.Errorf("record of a round = %+v, want the number of locks and the first's key and token", r)
			}
		}
	}
	if records == 0 || records >= held || locks < held {
		t.Errorf("%d records of unacknowledged renewals (%d locks) for %d locks held; want one per round", records, locks, held)
	}
}

// Under FailClosed a renewal the replica did not acknowledge is a failed
// renewal, retried every tenth of the lease until the lock is lost: the
// watchdog warns of the lock's first failure and of its loss, and the
// shortfall's own record of each retry is at Debug, not one more warning
// per retry.
func TestReplicaAckFailClosedRenewalRetriesDoNotWarn(t *testing.T) {
	master, replica := redistest.StartReplicated(t)
	logs := &levelCount{}
	// The acquisition must be acknowledged in time, by a replica on a
	// loaded machine too (FailClosed: else Lock fails); every renewal
	// then waits out the timeout, and the lease leaves room for retries.
	c := newClientOn(t, master.Client(t), WithLogger(slog.New(logs)), WithReplicaAck(1, 500*time.Millisecond, FailClosed))
	l := mustLock(t, c, "unacked", WithTTL(3*time.Second))
	replica.Stop(t)
	testutil.Receive(t, l.Done(), 10*time.Second, "the lock's end")
	waitUntil(t, 5*time.Second, "the loss logged", func() bool {
		return logs.count(slog.LevelWarn, "dlock: lock lost") == 1
	})
	const short = "dlock: lock write not acknowledged by enough replicas"
	if n := logs.count(slog.LevelWarn, "dlock: renewal failed"); n != 1 {
		t.Errorf("%d warnings of a failed renewal; want 1, the first", n)
	}
	if n := logs.count(slog.LevelWarn, short); n != 0 {
		t.Errorf("%d warnings of unacknowledged renewals; want none, the failed renewal's warning says it", n)
	}
	if n := logs.count(slog.LevelDebug, short); n < 1 {
		t.Errorf("%d debug records of unacknowledged renewals; want the retries'", n)
	}
}

func TestReplicaAck(t *testing.T) {
	ctx := context.Background()
	master, replica := redistest.StartReplicated(t)
	rdb, rr := master.Client(t), replica.Client(t)

	// The replica is healthy in the first subtests: a generous timeout
	// costs nothing there, and a replica slow to acknowledge on a loaded
	// machine does not fail the writes. Where it is paused, the timeout is
	// short, since every write waits for all of it.
	const healthy = 2 * time.Second

	t.Run("AcknowledgedWritesAreOnTheReplica", func(t *testing.T) {
		c := newClientOn(t, rdb, WithReplicaAck(1, healthy, FailClosed))
		k := c.keys("acked")
		l := mustLock(t, c, "acked")
		// WAIT returned 1: the replica applied the grant already.
		if n, err := rr.HGet(ctx, k.lock, l.Token()).Int(); err != nil || n != 1 {
			t.Fatalf("replica hold count right after Lock = %d, %v", n, err)
		}
		if err := l.Extend(ctx, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		if d := rr.PTTL(ctx, k.lock).Val(); d < 19*time.Second {
			t.Fatalf("replica lease right after Extend = %v", d)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if rr.Exists(ctx, k.lock).Val() != 0 {
			t.Fatal("replica still has the lock right after Unlock")
		}
		// Renewals are acknowledged too.
		r := mustLock(t, c, "renewed", WithTTL(300*time.Millisecond))
		waitRenewal(t, rr, c.keys("renewed").lock)
		waitRenewal(t, rr, c.keys("renewed").lock)
		if r.Context().Err() != nil {
			t.Fatal(context.Cause(r.Context()))
		}
		_ = r.Unlock(ctx)
		// Redis 7.0 has no WAITAOF: WAIT was used.
		if aof := c.be.(*node).ack.aof; aof == nil || *aof {
			t.Errorf("WAITAOF detection = %v, want false on Redis 7.0", aof)
		}
	})

	t.Run("HandOverIsAcknowledged", func(t *testing.T) {
		c := newClientOn(t, rdb, WithReplicaAck(1, healthy, FailClosed))
		waiter := newClientOn(t, rdb, WithReplicaAck(1, healthy, FailClosed))
		l := mustLock(t, c, "handed")
		got := lockAsync(ctx, waiter, "handed")
		waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c, "handed") == 1 })
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.err != nil {
			t.Fatal(r.err)
		}
		if n, err := rr.HGet(ctx, c.keys("handed").lock, r.l.Token()).Int(); err != nil || n != 1 {
			t.Fatalf("replica hold count right after the hand-over = %d, %v", n, err)
		}
		_ = r.l.Unlock(ctx)
	})

	t.Run("FailClosed", func(t *testing.T) {
		var reports reportLog
		c := newClientOn(t, rdb, WithReplicaAck(1, 100*time.Millisecond, FailClosed), WithReplicaReport(reports.add))
		plain := newClientOn(t, rdb)
		// Taken before the pause.
		renewed := lockAcked(t, c, "renewed", WithTTL(time.Second))
		fixed := lockAcked(t, c, "fixed", WithTTL(2*time.Second), WithoutRenewal())
		handed := mustLock(t, plain, "handed")

		replica.Pause(t)
		defer replica.Resume(t)

		// An acquisition the replica did not acknowledge is given back.
		_, err := c.TryLock(ctx, "fc")
		if !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("TryLock = %v, want ErrNotReplicated", err)
		}
		if info, _ := c.Inspect(ctx, "fc"); info.Held || info.Waiters != 0 {
			t.Fatalf("after a fail-closed acquire: %+v", info)
		}
		// So is a hand-over.
		got := lockAsync(ctx, c, "handed")
		waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c, "handed") == 1 })
		if err := handed.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if r := <-got; !errors.Is(r.err, ErrNotReplicated) {
			t.Fatalf("Lock by hand-over = %v, want ErrNotReplicated", r.err)
		}
		if info, _ := c.Inspect(ctx, "handed"); info.Held {
			t.Fatalf("a fail-closed hand-over is still held: %+v", info)
		}

		unackedLeasesLost(t, &reports, renewed, fixed, func(l *Lock) time.Duration {
			return rdb.PTTL(ctx, c.keys(l.Key()).lock).Val()
		})
	})

	// For a lock and for permits (whose reports carry their kind).
	t.Run("AcceptAndReport", func(t *testing.T) {
		var reports reportLog
		c := newClientOn(t, rdb, WithReplicaAck(1, 100*time.Millisecond, AcceptAndReport), WithReplicaReport(reports.add))
		replica.Pause(t)
		defer replica.Resume(t)
		for kind, take := range map[string]func() (*Lock, error){
			"lock":      func() (*Lock, error) { return c.TryLock(ctx, "accepted", WithoutRenewal()) },
			"semaphore": func() (*Lock, error) { return c.Semaphore("accepted", 2).TryAcquire(ctx, 1, WithoutRenewal()) },
			"rwmutex":   func() (*Lock, error) { return c.RWMutex("accepted").TryRLock(ctx, WithoutRenewal()) },
		} {
			l, err := take()
			if err != nil {
				t.Fatalf("%s: taking = %v", kind, err)
			}
			if err := l.Extend(ctx, time.Minute); err != nil {
				t.Fatalf("%s: Extend = %v", kind, err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("%s: Unlock = %v", kind, err)
			}
			if ops := strings.Join(reports.ops(l.Token()), ","); ops != "acquire,extend,release" {
				t.Errorf("%s: reported %q, want acquire,extend,release", kind, ops)
			}
			if rep := reports.first(l.Token()); rep.Key != "accepted" || rep.Kind != kind || rep.Acked != 0 || rep.Wanted != 1 || rep.Policy != AcceptAndReport {
				t.Errorf("%s: report = %+v", kind, rep)
			}
		}

		// An operator's force release is waited for too.
		sem := c.Semaphore("forced", 2)
		for kind, tc := range map[string]struct {
			take  func() (*Lock, error)
			force func(*Lock) error
		}{
			"lock": {
				func() (*Lock, error) { return c.TryLock(ctx, "forced", WithoutRenewal()) },
				func(l *Lock) error { return c.ForceRelease(ctx, "forced", WithExpectedOwner(l.Token())) },
			},
			"semaphore": {
				func() (*Lock, error) { return sem.TryAcquire(ctx, 1, WithoutRenewal()) },
				func(l *Lock) error { return sem.ForceRelease(ctx, l.Token()) },
			},
		} {
			l, err := tc.take()
			if err != nil {
				t.Fatalf("%s: taking = %v", kind, err)
			}
			if err := tc.force(l); err != nil {
				t.Fatalf("%s: ForceRelease = %v", kind, err)
			}
			if ops := strings.Join(reports.ops(l.Token()), ","); ops != "acquire,force release" {
				t.Errorf("%s: reported %q, want acquire,force release", kind, ops)
			}
		}
	})

	// The timeout + 100 ms may be up to 3/4 of the client's ReadTimeout,
	// so that WAIT's reply (up to 100 ms after the timeout) is read before
	// the deadline: at the bound, a write the replica missed fails with
	// WAIT's own answer (0 replicas), not a read timeout; past it, New
	// refuses.
	t.Run("TimeoutBoundByReadTimeout", func(t *testing.T) {
		const readTimeout = 2 * time.Second
		const bound = readTimeout*3/4 - waitLate
		bounded := redis.NewClient(&redis.Options{Addr: master.Addr(), ReadTimeout: readTimeout})
		t.Cleanup(func() { _ = bounded.Close() })
		if _, err := New(bounded, WithReplicaAck(1, bound+time.Millisecond, FailClosed)); !errors.Is(err, ErrInvalidOption) {
			t.Fatalf("New with a timeout + 100 ms past 3/4 of ReadTimeout = %v, want ErrInvalidOption", err)
		}
		var reports reportLog
		c := newClientOn(t, bounded, WithReplicaAck(1, bound, FailClosed), WithReplicaReport(reports.add))
		replica.Pause(t)
		defer replica.Resume(t)
		if _, err := c.TryLock(ctx, "bound"); !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("TryLock = %v, want ErrNotReplicated", err)
		}
		reports.mu.Lock()
		defer reports.mu.Unlock()
		if len(reports.rs) != 1 || reports.rs[0].Err != nil || reports.rs[0].Acked != 0 {
			t.Fatalf("reports = %+v, want one with WAIT's answer of 0", reports.rs)
		}
	})

	// With ContextTimeoutEnabled, go-redis also cuts a read at the
	// context's deadline, and a release Do sends on its own has
	// internalTimeout: at the bound, one the replica missed is reported
	// with WAIT's own answer, not a read timeout; past it, New refuses.
	t.Run("TimeoutBoundByInternalTimeout", func(t *testing.T) {
		const bound = internalTimeout*3/4 - waitLate
		ctxBound := redis.NewClient(&redis.Options{Addr: master.Addr(), ReadTimeout: 4 * internalTimeout, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = ctxBound.Close() })
		if _, err := New(ctxBound, WithReplicaAck(1, bound+time.Millisecond, AcceptAndReport)); !errors.Is(err, ErrInvalidOption) {
			t.Fatalf("New with ContextTimeoutEnabled and a timeout + 100 ms past 3/4 of %v = %v, want ErrInvalidOption", internalTimeout, err)
		}
		var reports reportLog
		c := newClientOn(t, ctxBound, WithReplicaAck(1, bound, AcceptAndReport), WithReplicaReport(reports.add))
		err := c.Do(ctx, "ctx-bound", func(context.Context) error {
			replica.Pause(t)
			return nil
		})
		defer replica.Resume(t)
		if err != nil {
			t.Fatalf("Do = %v", err)
		}
		reports.mu.Lock()
		defer reports.mu.Unlock()
		if len(reports.rs) != 1 || reports.rs[0].Op != "release" || reports.rs[0].Err != nil || reports.rs[0].Acked != 0 {
			t.Fatalf("reports = %+v, want one of the release, with WAIT's answer of 0", reports.rs)
		}
	})

	t.Run("Options", func(t *testing.T) {
		for name, opts := range map[string][]Option{
			"no replicas":        {WithReplicaAck(0, time.Second, FailClosed)},
			"no timeout":         {WithReplicaAck(1, 0, FailClosed)},
			"past ReadTimeout":   {WithReplicaAck(1, rdb.Options().ReadTimeout, FailClosed)},
			"unknown policy":     {WithReplicaAck(1, time.Second, ReplicaPolicy(7))},
			"report without ack": {WithReplicaReport(func(ReplicaReport) {})},
		} {
			if _, err := New(rdb, opts...); !errors.Is(err, ErrInvalidOption) && !errors.Is(err, ErrInvalidTTL) {
				t.Errorf("%s: New = %v, want an invalid option", name, err)
			}
		}
	})
}

func TestSentinel(t *testing.T) {
	ctx := context.Background()
	g := redistest.StartSentinelGroup(t, 1, 3)

	t.Run("Primitives", func(t *testing.T) {
		fc := g.FailoverClient(t)
		c := newClientOn(t, fc, WithQueueTTL(time.Minute))
		other := newClientOn(t, g.FailoverClient(t), WithQueueTTL(time.Minute))
		l := mustLock(t, c, "job")
		if _, err := other.TryLock(ctx, "job"); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("TryLock = %v", err)
		}
		inner, err := c.Lock(l.Context(), "job")
		if err != nil {
			t.Fatal(err)
		}
		if err := inner.Extend(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		_ = inner.Unlock(ctx)
		got := lockAsync(ctx, other, "job")
		waitUntil(t, 5*time.Second, "the waiter to subscribe", func() bool {
			ch := other.wakeChannel("job")
			n, _ := fc.PubSubShardNumSub(ctx, ch).Result()
			return n[ch] == 1
		})
		released := time.Now()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.err != nil {
			t.Fatal(r.err)
		}
		if d := time.Since(released); d > time.Second {
			t.Errorf("waiter woke %v after the release", d)
		}
		if names, _ := c.List(ctx, ""); len(names) != 1 || names[0] != "job" {
			t.Errorf("List = %v", names)
		}
		_ = r.l.Unlock(ctx)
	})

	t.Run("Failover", func(t *testing.T) {
		fc := g.FailoverClient(t)
		redistest.WaitReplicaAcks(t, fc)
		var renewals lastRenewal
		const ackTimeout = time.Second
		// Its renewals that meet the dead master fail in milliseconds, and
		// are retried a tenth of the lease later, not 1.6 s later.
		acked := newClientOn(t, oneDialFailoverClient(t, g), WithReplicaAck(1, ackTimeout, FailClosed), WithObserver(&renewals))
		plain := newClientOn(t, g.FailoverClient(t))
		other := newClientOn(t, g.FailoverClient(t))

		// Before: a lock the replica acknowledged, whose lease outlasts the
		// failover (about 2.5 s), and a few fences. (c) waits for its end.
		const lease = 7 * time.Second
		survivor := mustLock(t, acked, "survivor", WithTTL(lease))
		granted := time.Now()
		var maxBefore uint64
		takeFence := func() {
			l := mustLock(t, plain, "fenced")
			maxBefore = max(maxBefore, l.Fence())
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		takeFence()
		// Permits too: all of a semaphore's, acknowledged, and fences of
		// another semaphore.
		semSurvivor := takeAcked(t, "Acquire", func() (*Lock, error) {
			return acked.Semaphore("sem-survivor", 2).Acquire(ctx, 2, WithTTL(lease))
		})
		var maxSemBefore uint64
		takeSemFence := func() {
			l, err := plain.Semaphore("sem-fenced", 1).Acquire(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			maxSemBefore = max(maxSemBefore, l.Fence())
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		takeSemFence()

		// Cut the replica off (paused, its link dropped by the master):
		// what follows reaches the master alone. A lock, and fences.
		replica, oldMaster := g.Replicas[0], g.Master
		replica.Pause(t)
		defer replica.Resume(t)
		om := oldMaster.Client(t)
		if err := om.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
			t.Fatal(err)
		}
		unreplicated := mustLock(t, plain, "unreplicated", WithTTL(10*time.Second))
		for i := 0; i < 3; i++ {
			takeFence()
		}
		semUnreplicated, err := plain.Semaphore("sem-unreplicated", 1).Acquire(ctx, 1, WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			takeSemFence()
		}
		survivorExpiry := entryExpiry(t, om, acked.Semaphore("sem-survivor", 2), semSurvivor.Token())

		// The master crashes; Sentinel promotes the replica, which never
		// got those writes.
		oldMaster.Kill(t)
		replica.Resume(t)
		newAddr := g.WaitForFailover(t, oldMaster.Addr(), 20*time.Second)
		nm := g.ServerByAddr(newAddr).Client(t)
		if n, _ := nm.Get(ctx, plain.keys("fenced").fence).Uint64(); n >= maxBefore {
			t.Fatalf("the promoted replica has fence counter %d >= %d: no write was lost", n, maxBefore)
		}
		if nm.Exists(ctx, plain.keys("unreplicated").lock).Val() != 0 {
			t.Fatal("the promoted replica has the unreplicated lock")
		}
		if n, _ := nm.Get(ctx, semKeys(plain.Semaphore("sem-fenced", 1)).fence).Uint64(); n >= maxSemBefore {
			t.Fatalf("the promoted replica has semaphore fence counter %d >= %d: no write was lost", n, maxSemBefore)
		}
		if entryExpiry(t, nm, plain.Semaphore("sem-unreplicated", 1), semUnreplicated.Token()) != 0 {
			t.Fatal("the promoted replica has the unreplicated permits")
		}

		// (a) The acknowledged lock survived: the promoted replica has it,
		// and its holder keeps renewing it there through the failover
		// client, with its Context never cancelled.
		waitRenewal(t, nm, acked.keys("survivor").lock)
		if survivor.Context().Err() != nil {
			t.Fatalf("acknowledged lock lost: %v", context.Cause(survivor.Context()))
		}
		if _, err := other.TryLock(ctx, "survivor"); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("TryLock of the surviving lock = %v, want ErrNotObtained", err)
		}
		// So did the acknowledged permits: renewed on the promoted
		// replica, and no more of them granted than the capacity.
		waitUntil(t, 5*time.Second, "a renewal of the permits on the promoted replica", func() bool {
			return entryExpiry(t, nm, acked.Semaphore("sem-survivor", 2), semSurvivor.Token()) > survivorExpiry
		})
		if semSurvivor.Context().Err() != nil {
			t.Fatalf("acknowledged permits lost: %v", context.Cause(semSurvivor.Context()))
		}
		if _, err := other.Semaphore("sem-survivor", 2).TryAcquire(ctx, 1); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("TryAcquire of the surviving permits = %v, want ErrNotObtained", err)
		}
		// The lock and permits the replica never had are gone, and their
		// holders are told.
		for _, l := range []*Lock{unreplicated, semUnreplicated} {
			select {
			case <-l.Done():
				if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
					t.Fatalf("%s: cause = %v, want ErrLockLost", l.Key(), cause)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the holder of the lost %s was not told", l.Key())
			}
		}

		// (b) Fences issued after the failover exceed every fence issued
		// before it, although the counter lost its last increments.
		after := mustLock(t, other, "fenced")
		if after.Fence() <= maxBefore {
			t.Errorf("fence after the failover %d <= %d before it", after.Fence(), maxBefore)
		}
		again := mustLock(t, other, "unreplicated")
		if again.Fence() <= unreplicated.Fence() {
			t.Errorf("fence of the re-granted lock %d <= %d of the lost one", again.Fence(), unreplicated.Fence())
		}
		semAfter, err := other.Semaphore("sem-fenced", 1).Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if semAfter.Fence() <= maxSemBefore {
			t.Errorf("semaphore fence after the failover %d <= %d before it", semAfter.Fence(), maxSemBefore)
		}
		semAgain, err := other.Semaphore("sem-unreplicated", 1).Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if semAgain.Fence() <= semUnreplicated.Fence() {
			t.Errorf("fence of the re-granted permits %d <= %d of the lost ones", semAgain.Fence(), semUnreplicated.Fence())
		}
		for _, l := range []*Lock{after, again, semAfter, semAgain} {
			if err := l.Unlock(ctx); err != nil {
				t.Error(err)
			}
		}

		// (c) The promoted replica has no replica, so no renewal of the
		// surviving lock is acknowledged any more: its holder loses it when
		// the last acknowledged lease runs out (at most lease - drift after
		// that renewal was sent, which was before its answer), although the
		// unacknowledged renewals keep it on the master.
		select {
		case <-survivor.Done():
		case <-time.After(2 * lease):
			t.Fatal("the surviving lock is kept without acknowledged renewals")
		}
		lostAt := time.Now()
		if cause := context.Cause(survivor.Context()); !errors.Is(cause, ErrLockLost) || !errors.Is(cause, ErrNotReplicated) {
			t.Fatalf("cause = %v, want ErrLockLost, with the renewals' ErrNotReplicated", cause)
		}
		if d := nm.PTTL(ctx, acked.keys("survivor").lock).Val(); d < lease/2 {
			t.Errorf("the master's lease %v: the unacknowledged renewals did not reach it", d)
		}
		// The grant's or renewal's answer came at most ackTimeout after it
		// was sent; the slack above is for a loaded machine's late watchdog.
		lastAcked := renewals.at("survivor")
		if lastAcked.Before(granted) {
			lastAcked = granted // no renewal before the replica was cut off
		}
		deadline := lastAcked.Add(lease - lease/100)
		if lostAt.Before(deadline.Add(-ackTimeout)) || lostAt.After(deadline.Add(time.Second)) {
			t.Errorf("lost %v after the last acknowledged renewal, want about %v", lostAt.Sub(lastAcked), lease-lease/100)
		}

		// (d) Nothing can be locked until a replica is back.
		if _, err := acked.TryLock(ctx, "no-replica"); !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("TryLock without a replica = %v, want ErrNotReplicated", err)
		}
		if info, _ := acked.Inspect(ctx, "no-replica"); info.Held {
			t.Fatalf("a fail-closed lock is held: %+v", info)
		}
		_, port, _ := net.SplitHostPort(newAddr)
		redistest.Start(t, redistest.WithConfig("replicaof", "127.0.0.1", port))
		redistest.WaitReplicaAcks(t, nm)
		if err := lockAcked(t, acked, "no-replica").Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// oneDialFailoverClient is g.FailoverClient dialing once per attempt
// (go-redis dials up to five times, 100 ms apart): a command sent while
// the Sentinels still name a killed master fails in milliseconds, not
// after 1.6 s (four attempts of five dials), with the same dial error.
func oneDialFailoverClient(t *testing.T, g *redistest.SentinelGroup) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    g.MasterName,
		SentinelAddrs: g.SentinelAddrs(),
		DialerRetries: 1,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// lastRenewal records when each lock's last successful renewal answered.
type lastRenewal struct {
	NopObserver
	mu   sync.Mutex
	last map[string]time.Time
}

func (o *lastRenewal) Renew(e RenewEvent) {
	if e.Outcome != RenewOK {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.last == nil {
		o.last = map[string]time.Time{}
	}
	o.last[e.Key] = time.Now()
}

func (o *lastRenewal) at(key string) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last[key]
}

// panicOnPipeline is a go-redis hook that panics at every pipeline.
type panicOnPipeline struct{ testutil.PassHook }

func (panicOnPipeline) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(context.Context, []redis.Cmder) error { panic("hook bug") }
}

// Calls for several masters (a Redis Cluster's) go to each on a goroutine
// of its own. A panic there (a go-redis hook's) is raised in the caller's
// goroutine, where it can be recovered, once every master has answered:
// not on the library's goroutine, where it would end the process. Two
// clients of one server stand in for two masters (the masters a cluster
// redirection names: call.to).
func TestRunOnMastersPanicReachesItsCaller(t *testing.T) {
	c, rdb, srv := newTestClient(t, WithReplicaAck(1, 100*time.Millisecond, AcceptAndReport))
	hooked := srv.Client(t)
	hooked.AddHook(panicOnPipeline{})
	one := redis.NewScript("return 1")
	calls := []*call{{s: one, keys: []string{"a"}, to: hooked}, {s: one, keys: []string{"b"}, to: rdb}}
	var p any
	func() {
		defer func() { p = recover() }()
		c.be.(*node).runOnMasters(context.Background(), calls, false)
	}()
	if p != "hook bug" {
		t.Fatalf("runOnMasters' caller recovered %v, want the hook's panic", p)
	}
	if got, err := calls[1].cmd.Int64(); got != 1 || err != nil {
		t.Errorf("the other master's call = %d, %v; want 1: it was not waited for", got, err)
	}
}

// With FailClosed, a release the replicas did not acknowledge is still a
// release: reported, never an error (docs/safety.md), and a hand-over it
// made is not undone.
func TestReplicaAckFailClosedRelease(t *testing.T) {
	ctx := context.Background()
	master, replica := redistest.StartReplicated(t)
	rdb := master.Client(t)
	var reports reportLog
	c := newClientOn(t, rdb, WithReplicaAck(1, 100*time.Millisecond, FailClosed), WithReplicaReport(reports.add))
	plain := newClientOn(t, rdb)
	l := lockAcked(t, c, "fc-release")
	handing := lockAcked(t, c, "fc-handover")
	got := lockAsync(ctx, plain, "fc-handover")
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c, "fc-handover") == 1 })

	replica.Pause(t)
	defer replica.Resume(t)

	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with the replica paused = %v, want nil", err)
	}
	if rdb.Exists(ctx, c.keys("fc-release").lock).Val() != 0 {
		t.Fatal("the master still has the lock after an unacknowledged release")
	}
	if !errors.Is(context.Cause(l.Context()), ErrReleased) {
		t.Errorf("cause = %v, want ErrReleased", context.Cause(l.Context()))
	}
	if ops := reports.ops(l.Token()); len(ops) != 1 || ops[0] != "release" {
		t.Errorf("reports = %v, want one release", ops)
	}
	// A release that hands the lock over is not undone either: the waiter
	// (no acknowledgement asked) holds it.
	if err := handing.Unlock(ctx); err != nil {
		t.Fatalf("Unlock handing over with the replica paused = %v, want nil", err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		_ = r.l.Unlock(ctx)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not handed the lock")
	}
}

// A master that hangs, then fails over: the waiters' pub/sub connection
// stays on the old master, so a hand-over made on the new one wakes nobody,
// and each waiter finds its lock at its next check, at most a third of the
// queue TTL later (docs/safety.md).
func TestHungMasterWaiterFindsLockAtNextCheck(t *testing.T) {
	ctx := context.Background()
	g := redistest.StartSentinelGroup(t, 1, 3)
	hfc := g.FailoverClient(t)
	holder := newClientOn(t, hfc)
	wfc := g.FailoverClient(t)
	checks := &checkLog{}
	wfc.AddHook(checks)
	waiter := newClientOn(t, wfc) // default queue TTL: checks every 1 s
	const key = "hung-master"
	l := mustLock(t, holder, key, WithTTL(time.Minute)) // no renewal during the test
	got := lockAsync(ctx, waiter, key)
	queuedOnReplica(t, g, waiter, key)

	oldAddr := g.Master.Addr()
	g.Master.Pause(t)
	paused := time.Now()
	defer g.Master.Resume(t)
	newAddr := g.WaitForFailover(t, oldAddr, 30*time.Second)
	failedOver := time.Now()
	_, newPort, _ := net.SplitHostPort(newAddr)
	// The holder's client has followed the switch (its idle connections to
	// the hung master are closed on +switch-master).
	waitUntil(t, 20*time.Second, "the holder's client to reach the new master", func() bool {
		v, err := hfc.ConfigGet(ctx, "port").Result()
		return err == nil && v["port"] == newPort
	})
	// The worst case: release just after one of the waiter's checks found
	// the lock held on the new master, so that only the next one finds it.
	reached := time.Now()
	waitUntil(t, 20*time.Second, "a check of the waiter on the new master", func() bool { return checks.last().After(reached) })
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock on the new master: %v", err)
	}
	released := time.Now()
	var r lockResult
	select {
	case r = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter never found its lock")
	}
	acquired := time.Now()
	t.Logf("paused at 0, failover seen %v, released %v, waiter acquired %v",
		failedOver.Sub(paused).Round(time.Millisecond), released.Sub(paused).Round(time.Millisecond), acquired.Sub(paused).Round(time.Millisecond))
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	defer r.l.Unlock(ctx)
	if err := r.l.Context().Err(); err != nil {
		t.Fatalf("the waiter's lock is over already: %v", context.Cause(r.l.Context()))
	}
	if d, limit := acquired.Sub(released), DefaultQueueTTL/3+400*time.Millisecond; d > limit {
		t.Errorf("waiter got the lock %v after the release on the new master, want at most a third of the queue TTL (%v, limit %v)",
			d.Round(time.Millisecond), DefaultQueueTTL/3, limit)
	}
}

// checkLog records when the acquire script last returned a reply.
type checkLog struct {
	testutil.PassHook
	mu sync.Mutex
	at time.Time
}

func (h *checkLog) last() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.at
}

func (h *checkLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		a := cmd.Args()
		isAcquire := len(a) > 1 && ((a[0] == "evalsha" && argString(a[1]) == acquireScript.Hash()) || (a[0] == "eval" && sha1Hex(argString(a[1])) == acquireScript.Hash()))
		if err == nil && isAcquire {
			h.mu.Lock()
			h.at = time.Now()
			h.mu.Unlock()
		}
		return err
	}
}

func argString(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case *string:
		return *s
	}
	return ""
}

func sha1Hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// A waiter queued when the master crashes keeps waiting through the
// failover (docs/safety.md: dlock follows the master), keeps its place
// (its queue entry was replicated), and is handed the lock when the holder
// releases it on the new master. Before, the check nudged by the dropped
// subscription met the dead master and Lock returned its connection
// error.
func TestWaiterKeepsPlaceThroughFailover(t *testing.T) {
	ctx := context.Background()
	g := redistest.StartSentinelGroup(t, 1, 3)
	holder := newClientOn(t, oneDialFailoverClient(t, g))
	// A queue entry that outlives the failover (seconds here).
	waiter := newClientOn(t, g.FailoverClient(t), WithQueueTTL(15*time.Second))
	const key = "failover-waiter"
	// A lease that outlasts the failover (seconds here), short enough
	// that its first renewal, awaited on the new master, comes 3 s after
	// the grant, not 6.7 s.
	l := mustLock(t, holder, key, WithTTL(9*time.Second))
	got := lockAsync(ctx, waiter, key)
	queuedOnReplica(t, g, waiter, key)

	oldAddr := g.Master.Addr()
	g.Master.Kill(t)
	newAddr := g.WaitForFailover(t, oldAddr, 30*time.Second)
	nm := g.ServerByAddr(newAddr).Client(t)
	waitRenewal(t, nm, holder.keys(key).lock) // the holder follows the new master
	// So does the waiter's hand-over channel: it is woken by the release,
	// not found at its next check.
	ch := waiter.wakeChannel(key)
	waitUntil(t, 10*time.Second, "the waiter to subscribe on the new master", func() bool {
		subs, _ := nm.PubSubShardNumSub(ctx, ch).Result()
		return subs[ch] == 1
	})
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock on the new master: %v", err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("waiter queued through the failover: %v", r.err)
		}
		if r.l.Fence() <= l.Fence() {
			t.Errorf("waiter's fence %d <= the holder's %d", r.l.Fence(), l.Fence())
		}
		_ = r.l.Unlock(ctx)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter was not handed the lock")
	}
}

// queuedOnReplica waits until waiter is queued for key on g's master and
// subscribed to its hand-over channel there, and until the replica has the
// lock and the queue entry.
func queuedOnReplica(t *testing.T, g *redistest.SentinelGroup, waiter *Client, key string) {
	t.Helper()
	ctx := context.Background()
	om := g.Master.Client(t)
	ch := waiter.wakeChannel(key)
	waitUntil(t, 5*time.Second, "the waiter to queue and subscribe on the master", func() bool {
		subs, _ := om.PubSubShardNumSub(ctx, ch).Result()
		return om.ZCard(ctx, waiter.keys(key).queue).Val() == 1 && subs[ch] == 1
	})
	redistest.WaitReplicaAcks(t, om)
}

// renewOrLoss passes on the first renewal or loss the watchdog reports.
type renewOrLoss struct {
	NopObserver
	renewed chan RenewEvent
	lost    chan LostEvent
}

func (o *renewOrLoss) Renew(e RenewEvent) {
	select {
	case o.renewed <- e:
	default:
	}
}

func (o *renewOrLoss) Lost(e LostEvent) {
	select {
	case o.lost <- e:
	default:
	}
}

// pipelineDone signals on c each pipeline its client has had answered
// (a check or renewal sent with WithReplicaAck), dropping the signal if
// the last one was not taken yet.
type pipelineDone struct {
	testutil.PassHook
	c chan struct{}
}

func (p pipelineDone) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		select {
		case p.c <- struct{}{}:
		default:
		}
		return err
	}
}

// With AcceptAndReport a lock handed over while the replica is down is
// granted and renewed (reported), as WithReplicaAck's docs promise for a
// lease above 3 x (timeout + 100 ms): the lease the new holder sets at the
// hand-over must outlast the WAITs of that write and of the first renewal.
func TestReplicaAckAcceptHandOverKept(t *testing.T) {
	ctx := context.Background()
	master, replica := redistest.StartReplicated(t)
	rdb := master.Client(t)
	// 3 x (timeout + 100 ms) is under the waiter's lease (8 s, not the
	// default 30 s: its first renewal comes after 2.7 s, not 10 s), and
	// timeout + 100 ms under 3/4 of the 5 s ReadTimeout; a queued waiter's
	// checks (timeout, then a third of the 3 s queue TTL) keep its place.
	// The queue TTL is under the timeout less 100 ms: a hand-over lease of
	// the queue's life (queue TTL + timeout + 100 ms) would run out before
	// the first renewal, sent when the hand-over's WAIT answered, did.
	const timeout, queueTTL, lease = 1800 * time.Millisecond, 1200 * time.Millisecond, 8 * time.Second
	holder := newClientOn(t, rdb, WithReplicaAck(1, timeout, AcceptAndReport))
	wrdb := redis.NewClient(&redis.Options{Addr: master.Addr()})
	t.Cleanup(func() { _ = wrdb.Close() })
	checked := pipelineDone{c: make(chan struct{}, 1)}
	wrdb.AddHook(checked)
	obs := &renewOrLoss{renewed: make(chan RenewEvent, 1), lost: make(chan LostEvent, 1)}
	waiter := newClientOn(t, wrdb, WithQueueTTL(queueTTL), WithReplicaAck(1, timeout, AcceptAndReport), WithObserver(obs))

	// Every script is cached on the server: none is sent twice.
	warm := lockAcked(t, waiter, "warm")
	if err := warm.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := holder.Lock(ctx, "handed")
	if err != nil {
		t.Fatal(err)
	}
	got := lockAsync(ctx, waiter, "handed", WithTTL(lease))
	waitQueuedAndSubscribed(t, rdb, waiter, "handed")
	// Pause the replica and release right after a check of the waiter's
	// answered (quickly, the replica up): the waiter is then waiting a
	// third of the queue TTL, and takes the hand-over from its message
	// (with the replica paused, checks follow each other at once, and one
	// would find the lock handed over itself).
	select {
	case <-checked.c:
	default:
	}
	<-checked.c
	replica.Pause(t)
	defer replica.Resume(t)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("Lock by hand-over = %v", r.err)
	}
	defer func() { _ = r.l.Unlock(ctx) }()
	select {
	case e := <-obs.renewed:
		if e.Outcome != RenewOK {
			t.Fatalf("first renewal after the hand-over: %v", e.Outcome)
		}
	case e := <-obs.lost:
		t.Fatalf("handed-over lock lost before its first renewal answered: %v", e.Cause)
	case <-time.After(time.Minute):
		t.Fatal("no renewal nor loss of the handed-over lock")
	}
	if err := r.l.Context().Err(); err != nil {
		t.Fatal(context.Cause(r.l.Context()))
	}
}

// A queued waiter keeps its place while the replica is down
// (AcceptAndReport): each of its checks waits out the WAIT's timeout, and
// the next must still refresh its queue entry before that runs out (a
// release would skip it, and hand the lock to the waiter behind it).
func TestReplicaAckWaiterKeepsPlace(t *testing.T) {
	// Each subtest has servers of its own: they run side by side.
	//
	// With 100 ms, under 3/4 of the 5 s ReadTimeout; more than 2/3 of the
	// 3 s queue TTL.
	t.Run("TimeoutWithinQueueTTL", func(t *testing.T) {
		t.Parallel()
		replicaAckWaiterKeepsPlace(t, 2500*time.Millisecond)
	})
	// A WAIT longer than the queue TTL: the next check cannot run before
	// the entry the last one wrote would run out.
	t.Run("TimeoutBeyondQueueTTL", func(t *testing.T) {
		t.Parallel()
		replicaAckWaiterKeepsPlace(t, 3500*time.Millisecond)
	})
}

// replicaAckWaiterKeepsPlace checks, with the default queue TTL and a
// replica ack timeout of timeout, that a queued waiter's entry never runs
// out while its checks wait for the paused replica.
func replicaAckWaiterKeepsPlace(t *testing.T, timeout time.Duration) {
	ctx := context.Background()
	master, replica := redistest.StartReplicated(t)
	rdb := master.Client(t)
	holder := newClientOn(t, rdb)
	wrdb := redis.NewClient(&redis.Options{Addr: master.Addr()})
	t.Cleanup(func() { _ = wrdb.Close() })
	checked := pipelineDone{c: make(chan struct{}, 1)}
	wrdb.AddHook(checked)
	waiter := newClientOn(t, wrdb, WithReplicaAck(1, timeout, AcceptAndReport))

	replica.Pause(t)
	defer replica.Resume(t)
	l := mustLock(t, holder, "q")
	defer func() { _ = l.Unlock(ctx) }()
	wctx, cancel := context.WithCancel(ctx)
	got := lockAsync(wctx, waiter, "q")
	defer func() {
		cancel()
		<-got
	}()
	waitUntil(t, 10*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, holder, "q") == 1 })
	k := holder.keys("q")
	head := rdb.ZRange(ctx, k.queue, 0, 0).Val()[0]
	// The entry written by the check that has just answered either runs
	// out or is refreshed by the next check first; a few checks over (the
	// first may be followed at once by another, when the subscription
	// takes effect).
	select {
	case <-checked.c:
	default:
	}
	for range 3 {
		<-checked.c
		if !queueEntryRefreshed(t, rdb, k, head, queueEntryExpiry(t, rdb, k, head)) {
			t.Fatal("the waiter's queue entry ran out between its checks: it lost its place")
		}
	}
}

// heldCheck holds back the reply of the first acquire check pipelined once
// armed (the script has run and its WAIT answered) until release is
// closed: the check is in flight, for the client, all that time.
// held, if not nil, is closed when the holding begins. sha is the
// acquire script held: the lock's if empty.
type heldCheck struct {
	testutil.PassHook
	sha     string
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
}

func (h *heldCheck) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		sha := cmp.Or(h.sha, acquireScript.Hash())
		if a := cmds[0].Args(); len(a) > 1 && a[0] == "evalsha" && a[1] == sha && h.armed.CompareAndSwap(true, false) {
			if h.held != nil {
				close(h.held)
			}
			<-h.release
		}
		return err
	}
}

// A lock handed over while the waiter's check (script and WAIT, the
// replica down) is in flight is learnt of late: the check answers "held by
// another" after the hand-over, and only the next check, a WAIT later
// again, finds the lock ours. That check must set the full lease itself,
// in the write its WAIT covers: the hand-over's lease (queueLife) has run
// out by the time a further write after that WAIT would reach Redis. The
// waiter gets the very lock it was handed, not a new one taken after it
// lapsed.
func TestReplicaAckHandOverDuringCheck(t *testing.T) {
	ctx := context.Background()
	master, replica := redistest.StartReplicated(t)
	rdb := master.Client(t)
	const timeout, queueTTL = 1500 * time.Millisecond, time.Second
	holder := newClientOn(t, rdb)
	check := &heldCheck{release: make(chan struct{})}
	// Its scripts are cached (hookedClient): none is sent twice.
	waiter, _ := hookedClient(t, master.Addr(), check, WithQueueTTL(queueTTL), WithReplicaAck(1, timeout, AcceptAndReport))
	replica.Pause(t)
	defer replica.Resume(t)

	l := mustLock(t, holder, "in-check")
	check.armed.Store(true)
	got := lockAsync(ctx, waiter, "in-check")
	// The first check has queued the waiter; its reply waits for the
	// hand-over, sent before the waiter subscribes: the message is missed.
	waitUntil(t, 10*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, holder, "in-check") == 1 })
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	handed, err := rdb.HGet(ctx, holder.keys("in-check").lock, ":fence").Uint64()
	if err != nil {
		t.Fatalf("no lock handed over: %v", err)
	}
	// The reply arrives late (a slow network), so that the next check
	// runs half a WAIT before the hand-over's lease (queueTTL + timeout +
	// waitLate) runs out, and answers half a WAIT after.
	late := time.AfterFunc(queueTTL+waitLate+timeout/2, func() { close(check.release) })
	defer late.Stop()
	w := wantHanded(t, got, handed)
	// Redis holds it for the lease the waiter trusts (the default 30 s),
	// not for what was left of the hand-over's.
	if d := rdb.PTTL(ctx, holder.keys("in-check").lock).Val(); d < 20*time.Second {
		t.Fatalf("lease on the master right after the grant = %v, want about the full 30s", d)
	}
	if w.Context().Err() != nil {
		t.Fatal(context.Cause(w.Context()))
	}
}

// A lock handed over while the waiter's check waits for the paused
// replica longer than the queue TTL: the check ran before the release and
// answers "held by another" a whole WAIT later; only then does the waiter
// take the hand-over it was told of. The lease the release gave it must
// last until then: the waiter gets the very lock it was handed, not a new
// one taken after it lapsed (the lock free meanwhile, for anyone).
func TestReplicaAckHandOverDuringLongWait(t *testing.T) {
	ctx := context.Background()
	master, replica := redistest.StartReplicated(t)
	rdb := master.Client(t)
	// timeout > queueTTL: each check answers after the entry it wrote,
	// and a queue TTL's lease, would have run out.
	const timeout, queueTTL = 1500 * time.Millisecond, time.Second
	holder := newClientOn(t, rdb)
	// Its scripts are cached (hookedClient): none is sent twice.
	waiter, _ := hookedClient(t, master.Addr(), testutil.PassHook{}, WithQueueTTL(queueTTL), WithReplicaAck(1, timeout, AcceptAndReport))
	replica.Pause(t)
	defer replica.Resume(t)

	const key = "long-wait"
	l := mustLock(t, holder, key)
	got := lockAsync(ctx, waiter, key)
	waitQueuedAndSubscribed(t, rdb, waiter, key)
	// Checks follow each other at once (each waits longer than a third of
	// the queue TTL): release right after the next one ran.
	k := holder.keys(key)
	token := rdb.ZRange(ctx, k.queue, 0, 0).Val()[0]
	entry := rdb.HGet(ctx, k.waiters, token).Val()
	waitUntil(t, 5*time.Second, "the next check to run", func() bool {
		e, err := rdb.HGet(ctx, k.waiters, token).Result()
		return err == nil && e != entry
	})
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	handed, err := rdb.HGet(ctx, k.lock, ":fence").Uint64()
	if err != nil {
		t.Fatalf("no lock handed over: %v", err)
	}
	wantHanded(t, got, handed)
}

// wantHanded waits for a waiter's Lock call on got and checks that it got
// the lock handed over to it with fence handed, not a new one taken after
// the hand-over lapsed. The lock is unlocked when the test ends.
func wantHanded(t *testing.T, got <-chan lockResult, handed uint64) *Lock {
	t.Helper()
	r := <-got
	if r.err != nil {
		t.Fatalf("Lock by hand-over = %v", r.err)
	}
	t.Cleanup(func() { _ = r.l.Unlock(context.Background()) })
	if r.l.Fence() != handed {
		t.Fatalf("waiter holds fence %d, was handed %d: the hand-over lapsed before the waiter took it", r.l.Fence(), handed)
	}
	return r.l
}

// An Extend or Unlock sent to a master that a failover demoted (a client
// still connected to it) is refused with READONLY and did not run. Extend
// returns that error and trusts no more than the lease it had: the lock is
// lost when that one runs out. Unlock returns it and gives the lock up: it
// stays on the promoted master until its lease runs out. With
// WithReplicaAck as without: the WAIT the replica refuses too does not hide
// the READONLY.
func TestExtendAndUnlockOnADemotedMasterSayReadOnly(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"NoAck", nil},
		{"ReplicaAck", []Option{WithReplicaAck(1, 100*time.Millisecond, FailClosed)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			master, replica := redistest.StartReplicated(t)
			c := newClientOn(t, failFastClient(t, master), tc.opts...)
			const lease = 2 * time.Second
			granted := time.Now()
			extended := lockAcked(t, c, "extended", WithTTL(lease))
			released := lockAcked(t, c, "released", WithTTL(lease))
			redistest.WaitReplicaAcks(t, master.Client(t))
			redistest.Switchover(t, master, replica)
			promoted := replica.Client(t)

			if err := extended.Extend(ctx, time.Minute); !redis.IsReadOnlyError(err) {
				t.Fatalf("Extend on a demoted master = %v, want its READONLY", err)
			}
			if extended.Context().Err() != nil {
				t.Fatalf("lost by a refused Extend: %v", context.Cause(extended.Context()))
			}
			if d := promoted.PTTL(ctx, c.keys("extended").lock).Val(); d > lease {
				t.Fatalf("the promoted master's lease %v: the refused Extend ran", d)
			}

			if err := released.Unlock(ctx); !redis.IsReadOnlyError(err) {
				t.Fatalf("Unlock on a demoted master = %v, want its READONLY", err)
			}
			if cause := context.Cause(released.Context()); !errors.Is(cause, ErrLockLost) || !redis.IsReadOnlyError(cause) {
				t.Errorf("cause after a refused Unlock = %v, want ErrLockLost with the READONLY", cause)
			}
			if promoted.Exists(ctx, c.keys("released").lock).Val() != 1 {
				t.Error("the refused release ran: the promoted master has no lock")
			}

			testutil.Receive(t, extended.Done(), lease+time.Second, "the end of the lease trusted before the refused Extend")
			// The Extend asked for a minute; the slack is for a loaded
			// machine's late watchdog.
			if lost := time.Since(granted); lost > lease+500*time.Millisecond {
				t.Errorf("lost %v after the grant, past its %v lease: the refused Extend was trusted", lost, lease)
			}
			if cause := context.Cause(extended.Context()); !errors.Is(cause, ErrLockLost) || !redis.IsReadOnlyError(cause) {
				t.Errorf("cause = %v, want ErrLockLost with the renewals' READONLY", cause)
			}
		})
	}
}

// go-redis asks a Sentinel for the master's address whenever it opens a
// connection. While no Sentinel answers, a renewal that needs a new
// connection (here the first: go-redis keeps pipelines' connections apart)
// waits for go-redis's dial retries and does not reach the master; the
// holder is told when the lease it trusts runs out, as with the master
// down, not when the renewal gives up (docs/safety.md).
func TestSentinelDownLockLostAtLeaseEnd(t *testing.T) {
	g := redistest.StartSentinelGroup(t, 0, 1)
	c := newClientOn(t, g.FailoverClient(t))
	const lease = 600 * time.Millisecond
	granted := time.Now()
	l := mustLock(t, c, "held", WithTTL(lease))
	for _, s := range g.Sentinels {
		s.Stop(t)
	}
	testutil.Receive(t, l.Done(), 2*lease, "the end of the lease trusted")
	// The slack is for a loaded machine's late watchdog.
	if d := time.Since(granted); d > lease+200*time.Millisecond {
		t.Errorf("lost %v after the grant, past its %v lease", d, lease)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", cause)
	}
}

// While no Sentinel answers, go-redis's nested dial retries make a call
// that needs a new connection fail only after about 37 s with its default
// options (docs/safety.md). The caller's deadline bounds TryLock (its
// request, then up to endedUnlockWait for the release it sends after a
// failed one), and so do go-redis's MaxRetries and DialerRetries.
func TestSentinelDownTryLockBounds(t *testing.T) {
	g := redistest.StartSentinelGroup(t, 0, 1)
	for _, s := range g.Sentinels {
		s.Stop(t)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		opts    redis.FailoverOptions
		timeout time.Duration // TryLock's ctx; 0: none
		within  time.Duration
	}{
		{"Deadline", redis.FailoverOptions{}, 500 * time.Millisecond, 500*time.Millisecond + endedUnlockWait},
		{"NoRetries", redis.FailoverOptions{MaxRetries: -1, DialerRetries: 1}, 0, 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.MasterName, o.SentinelAddrs = g.MasterName, g.SentinelAddrs()
			fc := redis.NewFailoverClient(&o)
			t.Cleanup(func() { _ = fc.Close() })
			c := newClientOn(t, fc)
			tctx := ctx
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				tctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			start := time.Now()
			l, err := c.TryLock(tctx, "sentinel-down")
			took := time.Since(start)
			if err == nil || errors.Is(err, ErrNotObtained) {
				t.Fatalf("TryLock with no Sentinel answering = %v, %v, want its error", l, err)
			}
			// The slack is for a loaded machine.
			if limit := tc.within + 500*time.Millisecond; took > limit {
				t.Errorf("TryLock with no Sentinel answering failed after %v, want at most %v: %v", took.Round(time.Millisecond), limit, err)
			}
		})
	}
}

// A check whose reply comes late (a slow link), its script run long
// before: the queue entry it wrote counts from then, so the waiter checks
// again at once rather than a third of the queue TTL after the reply, by
// when the entry would have run out and a release skipped the waiter.
func TestWaiterLateReplyKeepsPlace(t *testing.T) {
	ctx := context.Background()
	// The replica answers: each WAIT is quick, and the checks pipelined.
	master, _ := redistest.StartReplicated(t)
	rdb := master.Client(t)
	// Checks every 500 ms; the reply is held until 250 ms of the entry are
	// left.
	const queueTTL, left = 1500 * time.Millisecond, 250 * time.Millisecond
	holder := newClientOn(t, rdb)
	check := &heldCheck{held: make(chan struct{}), release: make(chan struct{})}
	waiter, _ := hookedClient(t, master.Addr(), check, WithQueueTTL(queueTTL), WithReplicaAck(1, 100*time.Millisecond, AcceptAndReport))

	const key = "late-reply"
	l := mustLock(t, holder, key)
	defer func() { _ = l.Unlock(ctx) }()
	wctx, cancel := context.WithCancel(ctx)
	got := lockAsync(wctx, waiter, key)
	defer func() {
		cancel()
		<-got
	}()
	waitQueuedAndSubscribed(t, rdb, waiter, key)
	check.armed.Store(true)
	select {
	case <-check.held:
	case <-time.After(5 * time.Second):
		t.Fatal("no check held")
	}
	k := holder.keys(key)
	token := rdb.ZRange(ctx, k.queue, 0, 0).Val()[0]
	until := queueEntryExpiry(t, rdb, k, token)
	waitUntil(t, 5*time.Second, "the held reply's entry to near its end", func() bool {
		return rdb.Time(ctx).Val().UnixMilli() >= until-left.Milliseconds()
	})
	close(check.release)
	if !queueEntryRefreshed(t, rdb, k, token, until) {
		t.Fatal("the waiter's queue entry ran out after a late reply: it lost its place")
	}
}

// queueEntryExpiry returns when token's entry in k's queue runs out (Redis
// time, ms); 0 once it is gone.
func queueEntryExpiry(t *testing.T, rdb *redis.Client, k *lockKeys, token string) int64 {
	f := strings.Fields(rdb.HGet(context.Background(), k.waiters, token).Val())
	if len(f) == 0 {
		return 0
	}
	until, _ := strconv.ParseInt(f[0], 10, 64)
	return until
}

// queueEntryRefreshed waits until token's entry in k's queue, last seen to
// run out at until, either runs out (false) or is refreshed (true).
func queueEntryRefreshed(t *testing.T, rdb *redis.Client, k *lockKeys, token string, until int64) bool {
	t.Helper()
	ranOut := false
	waitUntil(t, 5*time.Second, "the queue entry to run out or be refreshed", func() bool {
		now := rdb.Time(context.Background()).Val().UnixMilli()
		e := queueEntryExpiry(t, rdb, k, token)
		ranOut = e == 0 || now > e
		return ranOut || e != until
	})
	return !ranOut
}

// A planned failover (SENTINEL FAILOVER) leaves the old master running, as
// a replica of the promoted one. A holder keeps its lock: its renewals
// reach the new master, and Unlock releases it there. Waiters queued
// before it keep their places in order: the first is handed the lock at
// the release, found at its next check at the latest (its pub/sub
// connection may still be on the old master, docs/safety.md), the second
// at the first's release.
func TestPlannedFailoverKeepsHolderAndWaiters(t *testing.T) {
	ctx := context.Background()
	g := redistest.StartSentinelGroup(t, 1, 1)
	holder := newClientOn(t, g.FailoverClient(t))
	first := newClientOn(t, g.FailoverClient(t))
	second := newClientOn(t, g.FailoverClient(t))
	const key = "planned"
	// Renewed every second: several renewals fall in the failover.
	const lease = 3 * time.Second
	l := mustLock(t, holder, key, WithTTL(lease))
	got1 := lockAsync(ctx, first, key)
	queuedOnReplica(t, g, first, key)
	got2 := lockAsync(ctx, second, key)
	om := g.Master.Client(t)
	ch := second.wakeChannel(key)
	waitUntil(t, 5*time.Second, "the second waiter to queue and subscribe on the master", func() bool {
		subs, _ := om.PubSubShardNumSub(ctx, ch).Result()
		return om.ZCard(ctx, second.keys(key).queue).Val() == 2 && subs[ch] == 1
	})
	redistest.WaitReplicaAcks(t, om)

	oldAddr := g.Master.Addr()
	if err := g.SentinelClient(t, 0).Failover(ctx, g.MasterName).Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	newAddr := g.WaitForFailover(t, oldAddr, 20*time.Second)
	if !g.Master.Running() {
		t.Fatal("the old master stopped in a planned failover")
	}
	nm := g.ServerByAddr(newAddr).Client(t)
	// Renewals after the switch, and nothing lost meanwhile.
	waitRenewal(t, nm, holder.keys(key).lock)
	waitRenewal(t, nm, holder.keys(key).lock)
	if err := l.Context().Err(); err != nil {
		t.Fatalf("the holder lost its lock in a planned failover: %v", context.Cause(l.Context()))
	}
	if n := nm.ZCard(ctx, holder.keys(key).queue).Val(); n != 2 {
		t.Fatalf("%d waiters queued on the new master, want 2", n)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after a planned failover: %v", err)
	}
	released := time.Now()
	r1 := testutil.Receive(t, got1, 5*time.Second, "the first waiter to get the lock")
	if r1.err != nil {
		t.Fatalf("first waiter: %v", r1.err)
	}
	// Woken by the hand-over, or its next check finds it (within a third of
	// the queue TTL); the slack is for a loaded machine.
	if d, limit := time.Since(released), DefaultQueueTTL/3+500*time.Millisecond; d > limit {
		t.Errorf("first waiter got the lock %v after the release, want at most %v", d.Round(time.Millisecond), limit)
	}
	if r1.l.Fence() <= l.Fence() {
		t.Errorf("first waiter's fence %d <= the holder's %d", r1.l.Fence(), l.Fence())
	}
	select {
	case r := <-got2:
		t.Fatalf("the second waiter returned while the first holds the lock: %v, %v", r.l, r.err)
	default:
	}
	if err := r1.l.Unlock(ctx); err != nil {
		t.Fatalf("first waiter's Unlock: %v", err)
	}
	r2 := testutil.Receive(t, got2, 5*time.Second, "the second waiter to get the lock")
	if r2.err != nil {
		t.Fatalf("second waiter: %v", r2.err)
	}
	if r2.l.Fence() <= r1.l.Fence() {
		t.Errorf("second waiter's fence %d <= the first's %d", r2.l.Fence(), r1.l.Fence())
	}
	if err := r2.l.Unlock(ctx); err != nil {
		t.Fatalf("second waiter's Unlock: %v", err)
	}
}
