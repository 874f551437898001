package redlock_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/chaoscheck"
	"github.com/dlock-go/dlock/internal/tcpproxy"
	"github.com/dlock-go/dlock/internal/testutil"
	"github.com/dlock-go/dlock/redlock"
)

// TestRedlockChaos is TestChaos (the library's randomized, fault-injecting
// property test) for Redlock: four Clients on five independent
// redis-server nodes (three of them reach every node through its own
// tcpproxy) take a few keys with Lock, TryLock and Do, with random leases of
// tens to hundreds of ms, renewal on and off, re-entry, Extend, TTL and
// random cancellations, while faults hit a minority of the nodes (at most
// two at any one time, chaos_faults_test.go): frozen connections, SIGSTOP,
// script-cache flushes, killed connections, and kills without persistence,
// restarted either after the longest lease (which docs/safety.md says keeps
// exclusion) or at once (the Redlock hole the docs excuse).
//
// The traffic and the checks a caller can make are chaoscheck.Traffic's,
// shared with TestChaos, here with calls that return long after their
// context's end counted as hangs. Over the holds it recorded,
// chaoscheck.Check then finds no two trusted intervals of different holds
// of one key that overlap, except across an immediate restart, and only
// when the second hold began within the longest lease after it; and a
// larger fence for the later of two holds one of which ended before the
// other began, across restarts too when the later was called after the
// earlier was last seen live (the clock floor).
//
// CHAOS_DURATION (a Go duration, 8s by default) sets its run time, and
// CHAOS_SEED replays a failure with its logged seed.
func TestRedlockChaos(t *testing.T) {
	seed, dur := chaoscheck.Settings(t, 8*time.Second)
	ch := &rlChaos{t: t}
	ch.Keys = []string{"k0", "k1", "k2"}
	ch.Sentinels = rlChaosSentinels
	ch.MinLease, ch.MaxLease = 60*time.Millisecond, rlChaosMaxLease
	ch.HoldMax = 250 * time.Millisecond
	// The requests under way end at their per-node timeouts (50 ms, or a
	// quarter of the lease for releases), far less than this.
	ch.CallSlack = 3 * time.Second
	ch.run(seed, dur)
}

const (
	rlChaosNodes   = 5
	rlChaosClients = 4
	rlChaosProxied = 3 // clients 0-2 reach the nodes through proxies
	// rlChaosMaxLease is the longest lease any call sets (WithTTL, Extend).
	rlChaosMaxLease = 400 * time.Millisecond
)

type rlClient struct {
	id      int
	c       *dlock.Client
	proxies []*tcpproxy.Proxy // one per node; nil for a direct client
}

type rlChaos struct {
	chaoscheck.Traffic
	t       *testing.T
	cl      *cluster
	clients []*rlClient
	admins  []*redis.Client // one per node, for the faults

	mu       sync.Mutex
	restarts []chaoscheck.Restart // the immediate ones: the docs excuse overlaps across them
	faults   map[string]int
	busy     [rlChaosNodes]bool // nodes under a fault
}

var rlChaosSentinels = []error{
	dlock.ErrNotObtained, redlock.ErrNoQuorum, dlock.ErrLockLost, dlock.ErrNotHeld, dlock.ErrReleased,
	dlock.ErrClosed, dlock.ErrInvalidKey, dlock.ErrInvalidTTL, dlock.ErrInvalidOption, dlock.ErrWrongType,
	redlock.ErrNodeTimeout, context.Canceled, context.DeadlineExceeded,
}

func (ch *rlChaos) newClient(id int, r *rand.Rand) *rlClient {
	t := ch.t
	cc := &rlClient{id: id}
	var nodes []redis.UniversalClient
	for _, srv := range ch.cl.srvs {
		addr := srv.Addr()
		if id < rlChaosProxied {
			p, err := tcpproxy.New(addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			cc.proxies = append(cc.proxies, p)
			addr = p.Addr()
		}
		rdb := nodeClient(addr)
		t.Cleanup(func() { rdb.Close() })
		nodes = append(nodes, rdb)
	}
	cfg := redlock.Config{Nodes: nodes}
	if r.IntN(2) == 0 {
		// The default (a tenth of the lease) is a few ms for the shortest
		// leases: some Clients wait longer for the nodes.
		cfg.NodeTimeout = time.Duration(10+r.IntN(20)) * time.Millisecond
	}
	c, err := redlock.NewWithConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cc.c = c
	return cc
}

func (ch *rlChaos) run(seed uint64, dur time.Duration) {
	t := ch.t
	ch.cl = startCluster(t, rlChaosNodes)
	for _, srv := range ch.cl.srvs {
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1})
		t.Cleanup(func() { admin.Close() })
		ch.admins = append(ch.admins, admin)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	var clients []*dlock.Client
	for i := range rlChaosClients {
		cc := ch.newClient(i, rng)
		ch.clients = append(ch.clients, cc)
		clients = append(clients, cc.c)
	}
	end := time.Now().Add(dur)
	// Two fault goroutines, each faulting one node at a time: at most two
	// of the five nodes are under a fault at any one time.
	var faults sync.WaitGroup
	for f := range 2 {
		faults.Add(1)
		go func() {
			defer faults.Done()
			ft := testutil.InGoroutine(t)
			fr := rand.New(rand.NewPCG(seed, uint64(7+f)))
			for time.Now().Add(time.Second).Before(end) {
				time.Sleep(time.Duration(100+fr.IntN(700)) * time.Millisecond)
				ch.fault(ft, fr)
			}
		}()
	}
	ops := ch.Run(t, seed, end, clients)
	faults.Wait()
	for _, cc := range ch.clients {
		for _, p := range cc.proxies {
			p.Thaw()
		}
		cc.c.Close()
	}
	res := chaoscheck.Check(ch.Holds(), chaoscheck.Options{
		Restarts:                  ch.restarts,
		RestartWindow:             rlChaosMaxLease, // docs/safety.md: "before the longest lease ran out"
		ClockFencesAcrossRestarts: true,            // docs/safety.md: "the clock term takes over"
		Logf:                      t.Logf,
	})
	for _, p := range res.Problems {
		ch.Problem("%s", p)
	}
	byKind, errKinds := ch.Summary()
	t.Logf("ops %d, holds %d, immediate restarts %d, ops by kind %v, faults %v, errors %v",
		ops, len(ch.Holds()), len(ch.restarts), byKind, ch.faults, errKinds)
	for _, p := range ch.Problems() {
		t.Error(p)
	}
}
