package dlock

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

// aclUser sets up the ACL user name with rules on srv and returns a client
// logged in as it.
func aclUser(t *testing.T, srv *redistest.Server, name string, rules ...string) *redis.Client {
	t.Helper()
	testutil.SetACLUser(t, srv.Client(t), name, rules...)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: name, Password: "pw"})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// A user with README's rules, and nothing else, runs every part of a
// lock's life, and the server refuses none of its commands (ACL LOG stays
// empty: the scripts' SPUBLISH, tried with pcall, would fall back
// unnoticed).
func TestACLRuleCoversTheLifecycle(t *testing.T) {
	master, _ := redistest.StartReplicated(t)
	admin := master.Client(t)
	ctx := context.Background()
	app := testutil.ACLRule + " " + testutil.ACLReplicaAckRule + " " + testutil.ACLTxnRule + " ~app:*"
	// Waiters re-check only every 20 s: a prompt hand-over can only come
	// from the hand-over message.
	c1 := newClientOn(t, aclUser(t, master, "locker", app), WithQueueTTL(time.Minute))
	c2 := newClientOn(t, aclUser(t, master, "locker2", app), WithQueueTTL(time.Minute),
		WithReplicaAck(1, 2*time.Second, FailClosed))
	ops := newClientOn(t, aclUser(t, master, "operator", testutil.ACLRule, testutil.ACLAdminRule))

	// A lock: renewed, re-entered, extended, read, guarding a Txn, and
	// handed over to a waiter.
	l := mustLock(t, c1, "job", WithTTL(900*time.Millisecond))
	if _, err := c2.TryLock(ctx, "job"); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock of a held lock = %v, want ErrNotObtained", err)
	}
	got := lockAsync(ctx, c2, "job", WithRetry(FixedRetry(time.Hour, 0)))
	waitQueuedAndSubscribed(t, admin, c2, "job")
	waitSubscribed(t, c2.be.(*node).wake, c2.wakeChannel("job"))
	last := admin.PTTL(ctx, c1.keys("job").lock).Val()
	waitUntil(t, 3*time.Second, "a renewal", func() bool {
		p := admin.PTTL(ctx, c1.keys("job").lock).Val()
		renewed := p > last
		last = p
		return renewed
	})
	inner, err := c1.Lock(l.Context(), "job")
	if err != nil {
		t.Fatalf("re-entry: %v", err)
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TTL(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Txn(ctx, func(pipe redis.Pipeliner) error { return pipe.Set(ctx, "app:data", "1", 0).Err() }); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := receiveLock(t, got, 5*time.Second, "the waiter to be handed the lock")
	if err := l2.Txn(ctx, func(pipe redis.Pipeliner) error { return pipe.Set(ctx, "app:data", "2", 0).Err() }); err != nil {
		t.Fatalf("Txn acknowledged by the replica: %v", err)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c1.Do(ctx, "job", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	al := mustLock(t, c1, "adaptive", WithoutRenewal(), WithAdaptiveTTL(2, time.Second))
	if err := al.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// A semaphore and an RWMutex, each with a waiter woken by a release.
	s := c1.Semaphore("pool", 2)
	both, err := s.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Semaphore("pool", 2).TryAcquire(ctx, 1); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryAcquire of a full semaphore = %v, want ErrNotObtained", err)
	}
	gotPermit := make(chan lockResult, 1)
	go func() {
		p, err := c2.Semaphore("pool", 2).Acquire(ctx, 1, WithRetry(FixedRetry(time.Hour, 0)))
		gotPermit <- lockResult{p, err}
	}()
	waitUntil(t, 5*time.Second, "the semaphore's waiter to queue", func() bool {
		info, err := ops.Semaphore("pool", 2).Inspect(ctx)
		return err == nil && info.Waiters == 1
	})
	if n, err := s.Available(ctx); err != nil || n != 0 {
		t.Fatalf("Available = %d, %v; want 0", n, err)
	}
	if err := both.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := receiveLock(t, gotPermit, 5*time.Second, "the semaphore's waiter").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	m := c1.RWMutex("rw")
	r, err := m.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gotWriter := make(chan lockResult, 1)
	go func() {
		w, err := c2.RWMutex("rw").Lock(ctx, WithRetry(FixedRetry(time.Hour, 0)))
		gotWriter <- lockResult{w, err}
	}()
	waitUntil(t, 5*time.Second, "the writer to queue", func() bool {
		info, err := ops.RWMutex("rw").Inspect(ctx)
		return err == nil && info.Waiters == 1
	})
	if err := r.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := receiveLock(t, gotWriter, 5*time.Second, "the writer").Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// An operator's inspection and force-release.
	// Short leases: their renewals find the force-release soon.
	stuck := mustLock(t, c1, "stuck", WithTTL(900*time.Millisecond))
	sp, err := s.Acquire(ctx, 1, WithTTL(900*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	info, err := ops.Inspect(ctx, "stuck")
	if err != nil || !info.Held {
		t.Fatalf("Inspect = %+v, %v", info, err)
	}
	if keys, err := ops.List(ctx, "*"); err != nil || len(keys) != 1 {
		t.Fatalf("List = %q, %v; want the one lock held", keys, err)
	}
	if keys, err := ops.List(ctx, "*", WithKind("semaphore")); err != nil || len(keys) != 1 {
		t.Fatalf("List of semaphores = %q, %v; want the one held", keys, err)
	}
	if si, err := ops.Semaphore("pool", 2).Inspect(ctx); err != nil || si.InUse != 1 {
		t.Fatalf("Semaphore Inspect = %+v, %v", si, err)
	}
	if err := ops.ForceRelease(ctx, "free"); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("ForceRelease of a free lock = %v, want ErrNotHeld", err)
	}
	if err := ops.ForceRelease(ctx, "stuck", WithExpectedOwner(info.Owner)); err != nil {
		t.Fatal(err)
	}
	if err := ops.Semaphore("pool", 2).ForceRelease(ctx, sp.Token()); err != nil {
		t.Fatal(err)
	}
	for _, lost := range []*Lock{stuck, sp} {
		testutil.Receive(t, lost.Done(), 5*time.Second, "the force-released holder to learn of it")
		_ = lost.Unlock(ctx)
	}

	if log, err := admin.Do(ctx, "ACL", "LOG").Slice(); err != nil || len(log) != 0 {
		t.Errorf("ACL LOG = %v, %v; want no refused command", log, err)
	}
}

// On a Redis Cluster, the same rules and testutil.ACLClusterRule, on
// every node, let locks be handed over on every master and listed.
func TestACLRuleOnCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	dial := func() *redis.ClusterClient {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Username: "locker", Password: "pw"})
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	for _, n := range cl.Nodes {
		aclUser(t, n, "locker", testutil.ACLRule, testutil.ACLAdminRule, testutil.ACLClusterRule)
	}
	// Waiters re-check only every 20 s: a prompt hand-over can only come
	// from the hand-over message.
	c1 := newClientOn(t, dial(), WithQueueTTL(time.Minute))
	c2 := newClientOn(t, dial(), WithQueueTTL(time.Minute))
	for _, key := range []string{"a", "b", "c", "d"} { // on every master
		l := mustLock(t, c1, key)
		got := lockAsync(ctx, c2, key)
		waitUntil(t, 5*time.Second, "the waiter to queue", func() bool {
			info, err := c1.Inspect(ctx, key)
			return err == nil && info.Waiters == 1
		})
		waitSubscribed(t, c2.be.(*node).wake, c2.wakeChannel(key))
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := receiveLock(t, got, 5*time.Second, "the waiter to be handed "+key).Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sp, err := c1.Semaphore("pool", 2).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if names, err := c1.List(ctx, "*", WithKind("semaphore")); err != nil || len(names) != 1 {
		t.Errorf("List of semaphores = %q, %v; want the one held", names, err)
	}
	if err := sp.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for i, n := range cl.Nodes {
		if log, err := n.Client(t).Do(ctx, "ACL", "LOG").Slice(); err != nil || len(log) != 0 {
			t.Errorf("node %d: ACL LOG = %v, %v; want no refused command", i, log, err)
		}
	}
}

// During a slot's migration, the source answers a lock's scripts with ASK
// (their keys are not there): go-redis sends ASKING and the script to the
// destination, which refuses it with TRYAGAIN (not all of its keys are
// there either) until the migration ends. testutil.ACLClusterRule's
// +asking lets the ASKING through: refused, a TryLock would fail with the
// ACL's refusal, and a Lock would not wait for the migration's end.
func TestACLRuleCoversASKRedirections(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	for _, n := range cl.Nodes {
		aclUser(t, n, "locker", testutil.ACLRule, testutil.ACLClusterRule)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Username: "locker", Password: "pw"})
	t.Cleanup(func() { cc.Close() })
	c := newClientOn(t, cc)
	admin := cl.Client(t)
	src := masterOf(t, admin, c, "moving")
	dst := otherMaster(cl, src)
	var got <-chan lockResult
	cl.MigrateSlot(t, int(admin.ClusterKeySlot(ctx, c.keys("moving").lock).Val()), src, dst, func() {
		if _, err := c.TryLock(ctx, "moving"); !redis.IsTryAgainError(err) {
			t.Errorf("TryLock during the migration = %v, want TRYAGAIN", err)
		}
		got = lockAsync(ctx, c, "moving")
	})
	if err := receiveLock(t, got, 10*time.Second, "the Lock begun during the migration").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for i, n := range cl.Nodes {
		nc := n.Client(t)
		if log, err := nc.Do(ctx, "ACL", "LOG").Slice(); err != nil || len(log) != 0 {
			t.Errorf("node %d: ACL LOG = %v, %v; want no refused command", i, log, err)
		}
		if stats := nc.Info(ctx, "commandstats").Val(); n.Addr() == dst && !strings.Contains(stats, "cmdstat_asking:") {
			t.Errorf("no ASKING reached the slot's new master: the lock was not reached by ASK")
		}
	}
}

// A waiter idle on its wake-up connection is pinged there, and one that
// leaves unsubscribes its channel: the rule's +ping and +sunsubscribe are
// what let it (refused, each would be logged, and a refused PING taken for
// a broken connection).
func TestACLRuleCoversIdleAndLeavingWaiters(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	// Waiters re-check only every 20 s: nothing else is sent meanwhile.
	c := newClientOn(t, aclUser(t, srv, "locker", testutil.ACLRule), WithQueueTTL(time.Minute))
	w := c.be.(*node).wake
	w.mu.Lock()
	w.health = backend.PubSubHealth{Idle: 50 * time.Millisecond, Wait: 5 * time.Second}
	w.linger = 50 * time.Millisecond
	w.mu.Unlock()
	l := mustLock(t, newClientOn(t, admin), "job")
	defer l.Unlock(ctx)

	wctx, leave := context.WithCancel(ctx)
	got := lockAsync(wctx, c, "job")
	waitQueuedAndSubscribed(t, admin, c, "job")
	waitUntil(t, 5*time.Second, "the idle wake-up connection to be pinged", func() bool {
		list, _ := admin.ClientList(ctx).Result()
		for _, conn := range strings.Split(list, "\n") {
			if strings.Contains(conn, " user=locker ") && strings.Contains(conn, " cmd=ping ") {
				return true
			}
		}
		return false
	})
	leave()
	if r := testutil.Receive(t, got, 5*time.Second, "the waiter to leave"); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Lock = %v, want context.Canceled", r.err)
	}
	// Sent (refused or not) by the waiter's Client only.
	waitUntil(t, 5*time.Second, "the channel to be unsubscribed", func() bool {
		stats, err := admin.Info(ctx, "commandstats").Result()
		return err == nil && strings.Contains(stats, "cmdstat_sunsubscribe:")
	})
	if log, err := admin.Do(ctx, "ACL", "LOG").Slice(); err != nil || len(log) != 0 {
		t.Errorf("ACL LOG = %v, %v; want no refused command", log, err)
	}
}

// A user the ACL refuses something dlock needs gets the server's refusal
// back at once, as a redis.Error (errors.As), from Lock as from TryLock:
// waiting would not end it.
func TestACLRefusalIsReturnedAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	holder := newClientOn(t, srv.Client(t))
	for _, tc := range []struct {
		name   string
		rdb    *redis.Client
		opts   []Option
		held   bool   // whether another Client holds the lock: Lock must queue
		prefix string // of the refusal
	}{
		// The rule's keys and channels are those of "dlock:".
		{name: "another prefix", rdb: aclUser(t, srv, "other-prefix", testutil.ACLRule), opts: []Option{WithPrefix("app:")}, prefix: "NOPERM"},
		// The acquire script may run but not queue a waiter (ZADD): Redis
		// 7.0 words a script's refused command so.
		{name: "queueing refused", rdb: aclUser(t, srv, "no-zadd", testutil.ACLRule, "-zadd"), held: true,
			prefix: "ERR The user executing the script can't run this command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClientOn(t, tc.rdb, tc.opts...)
			key := "job-" + tc.name
			if tc.held {
				l := mustLock(t, holder, key)
				defer l.Unlock(ctx)
			}
			check := func(op string, err error) {
				t.Helper()
				var rerr redis.Error
				if !errors.As(err, &rerr) || !strings.HasPrefix(rerr.Error(), tc.prefix) {
					t.Errorf("%s = %v, want the server's %q refusal", op, err, tc.prefix)
				}
				if errors.Is(err, ErrNotObtained) {
					t.Errorf("%s = %v, ErrNotObtained: the lock was not even looked at", op, err)
				}
			}
			_, err := c.TryLock(ctx, key)
			if tc.held {
				// TryLock does not queue: the lock is held elsewhere.
				if !errors.Is(err, ErrNotObtained) {
					t.Errorf("TryLock of a held lock = %v, want ErrNotObtained", err)
				}
			} else {
				check("TryLock", err)
			}
			// No deadline: a Lock that kept trying would never return.
			got := lockAsync(ctx, c, key)
			select {
			case r := <-got:
				check("Lock", r.err)
			case <-time.After(5 * time.Second):
				t.Fatal("Lock refused by the ACL still waiting after 5 s")
			}
			if !tc.held {
				_, err = c.Semaphore(key, 2).Acquire(ctx, 1)
				check("Semaphore Acquire", err)
			}
		})
	}
}

// A user whose ACL refuses COMMAND INFO (a rule without WithReplicaAck's
// additions but +wait) still gets its writes acknowledged with WAIT, and
// the refusal, which will not change, is taken as the answer: before,
// every acknowledged write asked again, one more round trip each.
func TestReplicaAckAsksOnceWhenCommandInfoIsRefused(t *testing.T) {
	master, _ := redistest.StartReplicated(t)
	admin := master.Client(t)
	ctx := context.Background()
	c := newClientOn(t, aclUser(t, master, "locker", testutil.ACLRule, "+wait"), WithReplicaAck(1, 2*time.Second, FailClosed))
	for range 3 {
		l := mustLock(t, c, "job")
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if aof := c.be.(*node).ack.aof; aof == nil || *aof {
		t.Errorf("WAITAOF detection = %v, want false, settled", aof)
	}
	if n := testutil.ACLRefusals(ctx, admin, "command|info"); n != 1 {
		t.Errorf("ACL LOG counts %d refusals of COMMAND INFO, want 1", n)
	}
}

// A login refused (WRONGPASS: credentials rotated, a token not yet
// renewed) is no answer about WAITAOF: asked again at the next write, not
// settled as WAIT for the Client's life, which on a server with
// appendonly would drop WAITAOF's guarantee for good.
func TestReplicaAckAsksAgainAfterALoginRefused(t *testing.T) {
	srv := redistest.Start(t)
	aclUser(t, srv, "locker", testutil.ACLRule, testutil.ACLReplicaAckRule)
	var password atomic.Value
	password.Store("expired")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), CredentialsProvider: func() (string, string) {
		return "locker", password.Load().(string)
	}})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); !redis.IsAuthError(err) {
		t.Fatalf("PING with the expired password = %v, want the login refused", err)
	}
	a := &acker{}
	if a.useAOF(ctx, rdb) {
		t.Error("WAITAOF chosen after a login refused")
	}
	if a.aof != nil {
		t.Fatalf("WAITAOF detection settled as %v by a login refused, want asked again", *a.aof)
	}
	password.Store("pw")
	a.useAOF(ctx, rdb)
	if a.aof == nil {
		t.Error("WAITAOF detection not settled once the server answered")
	}
}
