package redlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
	"github.com/dlock-go/dlock/redlock"
)

// lateRenewals makes the watchdog's renewal pipelines fail before they
// are sent, while armed, and keeps their commands to be sent later: a
// renewal its client gave up on that reaches the node afterwards.
type lateRenewals struct {
	testutil.PassHook
	armed atomic.Bool
	mu    sync.Mutex
	held  [][]any
	seen  chan struct{}
}

func (h *lateRenewals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.armed.Load() || cmds[0].Name() != "evalsha" {
			return next(ctx, cmds) // not a renewal: a connection's set-up
		}
		h.mu.Lock()
		for _, c := range cmds {
			h.held = append(h.held, c.Args())
		}
		h.mu.Unlock()
		select {
		case h.seen <- struct{}{}:
		default:
		}
		err := errors.New("i/o timeout")
		for _, c := range cmds {
			c.SetErr(err)
		}
		return err
	}
}

// A renewal that reaches the nodes after an Extend to a longer lease must
// not cut that lease short: renewals only ever lengthen a lease.
func TestLateRenewalDoesNotShortenExtend(t *testing.T) {
	cl := startCluster(t, 3)
	seen := make(chan struct{}, 1)
	hooks := make([]*lateRenewals, len(cl.rdbs))
	for i, rdb := range cl.rdbs {
		hooks[i] = &lateRenewals{seen: seen}
		rdb.AddHook(hooks[i])
	}
	c := cl.patientLocker(t)
	ctx := context.Background()
	const ttl = 900 * time.Millisecond // renewed every 300ms
	l := lockEveryNode(t, cl, c, "late-renewal", dlock.WithTTL(ttl))
	defer l.Unlock(ctx)
	// The nodes have the extend script cached, as after any renewal.
	if err := l.Extend(ctx, ttl); err != nil {
		t.Fatal(err)
	}
	for _, h := range hooks {
		h.armed.Store(true)
	}
	select {
	case <-seen:
	case <-time.After(5 * time.Second):
		t.Fatal("no renewal within 5s")
	}
	for _, h := range hooks {
		h.armed.Store(false)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	// Extend returns at a majority: the last node's may still be on its
	// way. The late renewals must come after it, on every node.
	waitUntil(t, 5*time.Second, "the Extend on every node", func() bool {
		for _, rdb := range cl.rdbs {
			if rdb.PTTL(ctx, lockKey("late-renewal")).Val() < 30*time.Second {
				return false
			}
		}
		return true
	})
	for i, rdb := range cl.rdbs {
		h := hooks[i]
		h.mu.Lock()
		late := h.held
		h.mu.Unlock()
		for _, args := range late {
			if err := rdb.Do(ctx, args...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if pttl := rdb.PTTL(ctx, lockKey("late-renewal")).Val(); pttl < 30*time.Second {
			t.Errorf("node %d: after a late renewal the lease is %v, the holder trusts about a minute", i, pttl)
		}
	}
}

// Extend resets the lease to ttl from now (dlock.Lock.Extend's contract,
// and what the single-node backend does): an Extend to a shorter lease
// must shorten it on the nodes, not only the holder's trust.
func TestExtendToShorterLease(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.patientLocker(t)
	other := cl.patientLocker(t)
	ctx := context.Background()
	l := lockEveryNode(t, cl, c, "shorten", dlock.WithTTL(20*time.Second), dlock.WithoutRenewal())
	if err := l.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	// Extend returns at a majority; the last node's reply may follow.
	waitUntil(t, 500*time.Millisecond, "a lease of at most 1s on every node after Extend(1s)", func() bool {
		for _, rdb := range cl.rdbs {
			if pttl := rdb.PTTL(ctx, lockKey("shorten")).Val(); pttl > time.Second {
				return false
			}
		}
		return true
	})
	if ttl, err := l.TTL(ctx); err != nil || ttl > time.Second {
		t.Errorf("TTL() after Extend(1s) = %v, %v", ttl, err)
	}
	// The holder stops trusting the lock about 1s from now; the nodes must
	// let it go soon after, not 20s after the grant.
	<-l.Done()
	if !errors.Is(context.Cause(l.Context()), dlock.ErrLockLost) {
		t.Fatalf("cause = %v", context.Cause(l.Context()))
	}
	tctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	o, err := other.Lock(tctx, "shorten", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatalf("another Client cannot take the lock 3s after its holder's 1s lease ended: %v", err)
	}
	_ = o.Unlock(ctx)
}

// A straggler of an earlier Extend to
// a shorter lease, reaching a node after a later Extend, must not cut the
// later one short there.
func TestLateExtendDoesNotUndoLaterExtend(t *testing.T) {
	cl := startCluster(t, 3)
	seen := make(chan struct{}, 1)
	h := &lateRenewals{seen: seen}
	cl.rdbs[2].AddHook(h)
	c := cl.patientLocker(t)
	ctx := context.Background()
	l := lockEveryNode(t, cl, c, "late-extend", dlock.WithoutRenewal())
	defer l.Unlock(ctx)
	h.armed.Store(true)
	if err := l.Extend(ctx, 2*time.Second); err != nil { // nodes 0 and 1 answer
		t.Fatal(err)
	}
	<-seen
	h.armed.Store(false)
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Second, "Extend(1m) on node 2", func() bool {
		return cl.rdbs[2].PTTL(ctx, lockKey("late-extend")).Val() > 30*time.Second
	})
	h.mu.Lock()
	late := h.held
	h.mu.Unlock()
	for _, args := range late {
		if err := cl.rdbs[2].Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if pttl := cl.rdbs[2].PTTL(ctx, lockKey("late-extend")).Val(); pttl < 30*time.Second {
		t.Errorf("node 2: a late Extend(2s) cut the lease to %v after Extend(1m)", pttl)
	}
}

// slowReplies delays the replies to the renewal pipelines of one node, as
// from a node farther away than the others: each command runs on the node
// at once, and its reply comes later.
type slowReplies struct {
	testutil.PassHook
	delay time.Duration
}

func (h *slowReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if cmds[0].Name() == "evalsha" {
			time.Sleep(h.delay) // network latency, not synchronization
		}
		return err
	}
}

// renewCounter counts the successful renewals.
type renewCounter struct {
	dlock.NopObserver
	ok atomic.Int32
}

func (o *renewCounter) Renew(e dlock.RenewEvent) {
	if e.Outcome == dlock.RenewOK {
		o.ok.Add(1)
	}
}

// The watchdog renews a lock on every node, not only on the majority that
// answers first. A node that does not have the extend script cached (new,
// restarted, SCRIPT FLUSH) answers NOSCRIPT and needs the renewal sent
// again with the script: those must still go out when that node is slower
// than the majority, or it never renews anything, its holds run out, and
// every lock survives one node failure fewer than it should.
func TestRenewalReachesTheSlowerNodes(t *testing.T) {
	cl := startCluster(t, 3)
	cl.rdbs[2].AddHook(&slowReplies{delay: 100 * time.Millisecond})
	obs := &renewCounter{}
	c := cl.locker(t, dlock.WithObserver(obs))
	ctx := context.Background()
	const lease = 1500 * time.Millisecond // renewed every 500ms
	l := lockEveryNode(t, cl, c, "far", dlock.WithTTL(lease))
	defer l.Unlock(ctx)
	// Four renewals: about 2s, past the lease node 2 granted.
	waitUntil(t, 10*time.Second, "four renewals", func() bool { return obs.ok.Load() >= 4 })
	onEveryNodeSurvivesOneDown(t, cl, obs, l, "far")
}

// Nodes hardened as docs/safety.md allows, with SCRIPT renamed away, renew
// a lock after losing their script cache (the extend script is first sent
// once a lock is held, and a restarted node has lost it): the renewal is
// sent again with the script, never with SCRIPT LOAD, which such a node
// refuses, so that every renewal would fail and the lock be lost.
func TestHardenedNodesRenewWithoutScriptLoad(t *testing.T) {
	const script = "hidden-script" // SCRIPT, for the test only
	cl := startCluster(t, 3, func(int) []redistest.Option {
		return []redistest.Option{redistest.WithConfig("rename-command", "SCRIPT", script)}
	})
	obs := &renewCounter{}
	c := cl.locker(t, dlock.WithObserver(obs))
	ctx := context.Background()
	l := lockEveryNode(t, cl, c, "job", dlock.WithTTL(900*time.Millisecond)) // renewed every 300ms
	defer l.Unlock(ctx)
	waitUntil(t, 10*time.Second, "a renewal or the loss", func() bool {
		return obs.ok.Load() >= 1 || l.Context().Err() != nil
	})
	for _, rdb := range cl.rdbs {
		if err := rdb.Do(ctx, script, "FLUSH").Err(); err != nil {
			t.Fatal(err)
		}
	}
	n := obs.ok.Load()
	waitUntil(t, 10*time.Second, "two more renewals or the loss", func() bool {
		return obs.ok.Load() >= n+2 || l.Context().Err() != nil
	})
	if err := l.Context().Err(); err != nil {
		t.Fatalf("lock lost on nodes that answer: %v", context.Cause(l.Context()))
	}
	if got := cl.holders(t, "job", l.Token()); len(got) != 3 {
		t.Errorf("the lock is on nodes %v, want all 3", got)
	}
}

// onEveryNodeSurvivesOneDown checks that l, of key on a 3-node cluster, is
// held on every node, so that with node 0 killed the other two keep it:
// it goes on being renewed.
func onEveryNodeSurvivesOneDown(t *testing.T, cl *cluster, obs *renewCounter, l *dlock.Lock, key string) {
	t.Helper()
	if got := cl.holders(t, key, l.Token()); len(got) != 3 {
		t.Errorf("the lock is on nodes %v, want all 3", got)
	}
	cl.srvs[0].Kill(t)
	n := obs.ok.Load()
	waitUntil(t, 10*time.Second, "three more renewals or the loss", func() bool {
		return obs.ok.Load() >= n+3 || l.Context().Err() != nil
	})
	if err := l.Context().Err(); err != nil {
		t.Errorf("lock lost with 2 of 3 nodes up: %v", context.Cause(l.Context()))
	}
}

// slowScripts delays, while armed, the replies to the scripts a node runs
// outside pipelines (TTL, release, re-enter), as from a node farther away:
// each runs on the node at once, and its reply comes later.
type slowScripts struct {
	testutil.PassHook
	armed atomic.Bool
	delay time.Duration
}

func (h *slowScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.armed.Load() && cmd.Name() == "evalsha" {
			time.Sleep(h.delay) // network latency, not synchronization
		}
		return err
	}
}

// The calls on a lock extended from a short lease to a long one wait for
// the nodes as the long lease allows (min(lease/4, 1s)), not as the lease
// at acquisition did: nodes answering in 300ms, well within the extended
// lease's timeout, must not make TTL fail, nor Unlock give the lock up as
// release_failed and leave it on the nodes for the extended lease.
func TestCallsAfterExtendWaitAsTheExtendedLeaseAllows(t *testing.T) {
	cl := startCluster(t, 3)
	var hooks []*slowScripts
	for _, rdb := range cl.rdbs {
		h := &slowScripts{delay: 300 * time.Millisecond}
		rdb.AddHook(h)
		hooks = append(hooks, h)
	}
	c := cl.locker(t) // the default timings, which follow the lease
	ctx := context.Background()
	// Per-node timeouts: 100ms (400ms/4) for the acquired lease, 1s once
	// extended to 30s.
	l := mustLock(t, c, "extended", dlock.WithTTL(400*time.Millisecond))
	if err := l.Extend(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, h := range hooks {
		h.armed.Store(true)
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl < 20*time.Second {
		t.Errorf("TTL() after Extend(30s), nodes answering in 300ms = %v, %v", ttl, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock after Extend(30s), nodes answering in 300ms: %v", err)
	}
	waitUntil(t, time.Second, "the lock gone from every node", func() bool {
		return len(cl.holders(t, "extended", l.Token())) == 0
	})
}

// lostRenewals loses, while armed, the replies to the renewals and Extends
// a node runs (pipelined): the node applies them, and the client does not
// learn of it.
type lostRenewals struct {
	testutil.PassHook
	armed atomic.Bool
}

var errReplyLost = errors.New("reply lost")

func (h *lostRenewals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if !h.armed.Load() {
			return err
		}
		for _, cmd := range cmds {
			cmd.SetErr(errReplyLost)
		}
		return errReplyLost
	}
}

// An Extend to a longer lease whose outcome is unknown (every reply lost)
// may have set that lease on the nodes: the calls after it wait for them as
// that lease allows, as after an Extend that succeeded. Unlock must not
// give up on nodes answering in 300ms and leave the lock there for 30s.
func TestCallsAfterUnknownExtendWaitAsTheLongerLeaseAllows(t *testing.T) {
	cl := startCluster(t, 3)
	var slow []*slowScripts
	var lost []*lostRenewals
	for _, rdb := range cl.rdbs {
		s, l := &slowScripts{delay: 300 * time.Millisecond}, &lostRenewals{}
		rdb.AddHook(s)
		rdb.AddHook(l)
		slow, lost = append(slow, s), append(lost, l)
	}
	c := cl.locker(t) // the default timings, which follow the lease
	ctx := context.Background()
	// Per-node timeouts: 100ms (400ms/4) for the acquired lease, 1s for
	// one of 30s.
	l := mustLock(t, c, "extended", dlock.WithTTL(400*time.Millisecond))
	for _, h := range lost {
		h.armed.Store(true)
	}
	if err := l.Extend(ctx, 30*time.Second); err == nil {
		t.Fatal("Extend(30s) with every reply lost = nil, want its unknown outcome")
	}
	for i := range lost {
		lost[i].armed.Store(false)
		slow[i].armed.Store(true)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock after an unknown Extend(30s), nodes answering in 300ms: %v", err)
	}
	waitUntil(t, time.Second, "the lock gone from every node", func() bool {
		return len(cl.holders(t, "extended", l.Token())) == 0
	})
}

// repeatAcquire keeps, while armed, the arguments of the acquire script of
// key sent to one node, for the test to send them again: a duplicate of the
// request, as go-redis sends when the reply to the first was lost
// (Options.MaxRetries: 3 by default).
type repeatAcquire struct {
	testutil.PassHook
	key   string
	armed atomic.Bool
	mu    sync.Mutex
	args  []any
}

func (h *repeatAcquire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		// The acquire script has three arguments (token, lease, metadata);
		// the fence script, on the same keys, two.
		if h.armed.Load() && len(a) == 8 && a[0] == "evalsha" && a[3] == lockKey(h.key) && a[4] == lockKey(h.key)+":fence" {
			h.mu.Lock()
			h.args = append([]any(nil), a...)
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

// A duplicate of an acquire request reaching a node after the holder
// extended the lock must not cut that node's lease back to the one
// acquired: the holder trusts the extended lease because a majority
// including that node said so. Here node 1 is down, so nodes 0 and 2 hold
// the lock; were node 2's lease cut short, another client could take nodes
// 1 and 2 while the holder still trusts the lock.
func TestDuplicateAcquireDoesNotShortenExtend(t *testing.T) {
	cl := startCluster(t, 3)
	h := &repeatAcquire{key: "dup"}
	cl.rdbs[2].AddHook(h)
	c, other := cl.locker(t), cl.locker(t)
	ctx := context.Background()
	const lease = time.Second
	cl.srvs[1].Kill(t) // down since before the lock was taken
	h.armed.Store(true)
	l := mustLock(t, c, "dup", dlock.WithTTL(lease)) // nodes 0 and 2
	h.armed.Store(false)
	defer l.Unlock(ctx)
	if err := l.Extend(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	args := h.args
	h.mu.Unlock()
	if args == nil {
		t.Fatal("no acquire request seen on node 2")
	}
	if err := cl.rdbs[2].Do(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	if pttl := cl.rdbs[2].PTTL(ctx, lockKey("dup")).Val(); pttl < 20*time.Second {
		t.Errorf("node 2: a duplicate acquire cut the lease to %v after Extend(30s)", pttl)
	}
	// Node 1 comes back (empty: it never had the lock).
	cl.srvs[1].Restart(t)
	octx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if o, err := other.Lock(octx, "dup"); err == nil {
		if l.Context().Err() == nil {
			t.Errorf("another client took the lock (nodes %v) while its holder trusts Extend(30s)", cl.holders(t, "dup", o.Token()))
		}
		_ = o.Unlock(ctx)
	}
}

// A renewal that finds the lock's key replaced by a value of another type
// on a majority of nodes has its answer: the lock is lost, at that
// renewal, not when its lease runs out after renewals "without answer".
func TestRenewalFindingWrongTypeKeyIsLoss(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.patientLocker(t)
	ctx := context.Background()
	const ttl = 3 * time.Second // renewed every 1 s
	l := mustLock(t, c, "wrong-type", dlock.WithTTL(ttl))
	waitUntil(t, 5*time.Second, "the lock on all 3 nodes", func() bool {
		return len(cl.holders(t, "wrong-type", l.Token())) == 3
	})
	for _, rdb := range cl.rdbs[:2] {
		if err := rdb.Set(ctx, lockKey("wrong-type"), "not a lock", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-l.Done():
	case <-time.After(3 * ttl):
		t.Fatal("the lock was not declared lost")
	}
	cause := context.Cause(l.Context())
	if !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", cause)
	}
	if strings.Contains(cause.Error(), "ran out") {
		t.Errorf("renewals found the key holding another value on a majority, yet the lock was lost only at its deadline: %v", cause)
	}
}

// TTL and Extend that find a value of another type at the lock's name on
// a majority meet a lost lock, as renewals do (above), and as on one
// server: ErrLockLost and the Context ended now.
func TestTTLAndExtendFindingWrongTypeKeyIsLoss(t *testing.T) {
	for name, call := range map[string]func(*dlock.Lock) error{
		"Extend": func(l *dlock.Lock) error { return l.Extend(context.Background(), time.Minute) },
		"TTL":    func(l *dlock.Lock) error { _, err := l.TTL(context.Background()); return err },
	} {
		t.Run(name, func(t *testing.T) {
			cl := startCluster(t, 3)
			c := cl.patientLocker(t)
			ctx := context.Background()
			l := mustLock(t, c, "wrong-type", dlock.WithTTL(time.Minute))
			waitUntil(t, 5*time.Second, "the lock on all 3 nodes", func() bool {
				return len(cl.holders(t, "wrong-type", l.Token())) == 3
			})
			for _, rdb := range cl.rdbs[:2] {
				if err := rdb.Set(ctx, lockKey("wrong-type"), "not a lock", 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if err := call(l); !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("%s = %v, want ErrLockLost", name, err)
			}
			select {
			case <-l.Done():
			default:
				t.Fatalf("%s found the lock gone on a majority, yet its Context is live", name)
			}
		})
	}
}

// A lock whose renewals a majority of the nodes refuses because their
// password changed (the connections the renewals dial fail AUTH) says so
// in its loss's cause, and so do an Extend and a TryLock meanwhile: not
// that a reply had the wrong type, which go-redis's pipeline leaves its
// commands reading when their connection's handshake is refused.
func TestPasswordChangeOnAMajoritySaysAuthFailed(t *testing.T) {
	var srvs []*redistest.Server
	var nodes []redis.UniversalClient
	for range 3 {
		srv := redistest.Start(t, redistest.WithConfig("requirepass", "old"))
		o := nodeOptions(srv.Addr())
		o.Password = "old"
		rdb := redis.NewClient(o)
		t.Cleanup(func() { rdb.Close() })
		srvs, nodes = append(srvs, srv), append(nodes, rdb)
	}
	c, err := redlock.NewWithConfig(redlock.Config{Nodes: nodes, NodeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	l := mustLock(t, c, "rekeyed", dlock.WithTTL(2*time.Second))
	for _, srv := range srvs[1:] {
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "old"})
		t.Cleanup(func() { admin.Close() })
		if err := admin.ConfigSet(ctx, "requirepass", "new").Err(); err != nil {
			t.Fatal(err)
		}
		// The connections open stay authenticated: the calls dial new ones.
		if err := admin.Do(ctx, "client", "kill", "type", "normal", "skipme", "yes").Err(); err != nil {
			t.Fatal(err)
		}
	}
	wrongPass := func(err error) bool {
		var re redis.Error
		return errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGPASS") && !strings.Contains(err.Error(), "unexpected type")
	}
	if err := l.Extend(ctx, 2*time.Second); !wrongPass(err) {
		t.Errorf("Extend = %v, want the nodes' WRONGPASS", err)
	}
	if _, err := c.TryLock(ctx, "other"); !wrongPass(err) {
		t.Errorf("TryLock = %v, want the nodes' WRONGPASS", err)
	}
	testutil.Receive(t, l.Done(), 5*time.Second, "the lock's end")
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrLockLost) || !wrongPass(cause) {
		t.Fatalf("cause = %v, want ErrLockLost and the renewals' WRONGPASS", cause)
	}
}

// A lease that runs out while a majority of the nodes does not answer its
// renewals says why: the per-node timeout ends each renewal, whatever the
// node clients' own timeouts, and the last one's nodes' errors are the
// cause.
func TestLeaseRunOutWithAMajorityHungSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(addr string) *redis.Options
	}{
		{"ContextTimeoutEnabled", nodeOptions},
		// Nothing cut short before 30 s, as TestReleaseGoesAfterItsSlowAcquire.
		{"ReadTimeout30s", func(addr string) *redis.Options {
			return &redis.Options{Addr: addr, ReadTimeout: 30 * time.Second, MaxRetries: -1, DialerRetries: 1}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := startCluster(t, 3)
			var nodes []redis.UniversalClient
			for _, srv := range cl.srvs {
				rdb := redis.NewClient(tc.opts(srv.Addr()))
				t.Cleanup(func() { rdb.Close() })
				nodes = append(nodes, rdb)
			}
			c, err := redlock.New(nodes)
			if err != nil {
				t.Fatal(err)
			}
			l := mustLock(t, c, "hung", dlock.WithTTL(600*time.Millisecond))
			cl.srvs[1].Pause(t)
			cl.srvs[2].Pause(t)
			testutil.Receive(t, l.Done(), 5*time.Second, "the lock's end")
			cause := context.Cause(l.Context())
			t.Logf("cause: %v", cause)
			if !errors.Is(cause, dlock.ErrLockLost) || !errors.Is(cause, redlock.ErrNodeTimeout) {
				t.Errorf("cause = %v, want ErrLockLost and the nodes' ErrNodeTimeout", cause)
			}
			cl.srvs[1].Resume(t)
			cl.srvs[2].Resume(t)
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
