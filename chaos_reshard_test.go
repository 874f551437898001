package dlock_test

import (
	"context"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/chaoscheck"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

// TestClusterReshardChaos is TestChaos's lock traffic (Lock, TryLock, Do,
// Unlock, Extend, TTL, re-entry) and TestPermitsChaos's (a Semaphore and
// an RWMutex) from several Clients, each on a ClusterClient of its own, on
// a 3-master Redis Cluster whose keys' slots are moved back and forth
// between the masters the whole time: some migrations quick, some left
// with every key on the destination and the slot still the source's (every
// script over a lock's names refused with TRYAGAIN) for up to
// maxMigrationPause.
//
// A migration loses nothing (MIGRATE keeps each key's expiry), so
// chaoscheck.Check and CheckPermits excuse nothing: no two trusted
// intervals of different holds of one key overlap (no more permits than
// the capacity held), and fences only grow. Every call returns within a
// couple of seconds of its context's end (a waiter refused with TRYAGAIN
// checks again, but not past its context; one that gives up while queued
// first leaves the queue, which waits for the migration to end), an
// Unlock, or a Lock or Acquire that WithRetry does not bound, never fails
// with TRYAGAIN while its context lasts, every error is of a documented kind,
// and each key can be taken once the traffic has stopped. TestMain's
// goleak finds no goroutine left running.
//
// CHAOS_DURATION (4s by default) and CHAOS_SEED are TestChaos's.
func TestClusterReshardChaos(t *testing.T) {
	seed, dur := chaoscheck.Settings(t, 4*time.Second)
	cl := redistest.StartCluster(t, 3)
	admin := cl.Client(t)

	locks, permits := newChaos(t), newChaos(t)
	locks.Keys = []string{"k0", "k1", "k2"}
	permits.Keys = []string{"s2", "rw"}
	permits.Capacities = map[string]int64{"s2": 2, "rw": dlock.MaxPermits}
	for _, tr := range []*chaos{locks, permits} {
		// A waiter that gives up while queued leaves the queue before it
		// returns, sending that again until the migration under way ends:
		// its call may outlast its context by a paused migration, and the
		// backoff between sends.
		tr.CallSlack = maxMigrationPause + time.Second
		tr.SentAgain = redis.IsTryAgainError
	}

	rng := rand.New(rand.NewPCG(seed, 1))
	const nClients = 4
	var clients []*dlock.Client
	for i := range nClients {
		opt := &redis.ClusterOptions{Addrs: cl.Addrs()}
		if i%2 == 0 {
			opt.MaxRetries = -1
			opt.ContextTimeoutEnabled = true
			opt.ReadTimeout = 800 * time.Millisecond
		}
		rdb := redis.NewClusterClient(opt)
		t.Cleanup(func() { rdb.Close() })
		var opts []dlock.Option
		if rng.IntN(2) == 0 {
			opts = append(opts, dlock.WithQueueTTL(time.Duration(300+rng.IntN(700))*time.Millisecond))
		}
		c, err := dlock.New(rdb, opts...)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}

	m := newReshard(t, cl, admin, append(append([]string(nil), locks.Keys...), permits.Keys...))
	end := time.Now().Add(dur)
	migrated := make(chan struct{})
	go func() {
		defer close(migrated)
		m.run(testutil.InGoroutine(t), rand.New(rand.NewPCG(seed, 7)), end)
	}()
	var wg sync.WaitGroup
	var lockOps, permitOps int64
	wg.Add(2)
	go func() { defer wg.Done(); lockOps = locks.Run(t, seed, end, clients) }()
	go func() { defer wg.Done(); permitOps = permits.Run(t, seed+1, end, clients) }()
	wg.Wait()
	<-migrated

	// Nothing is left wedged: with the traffic stopped, each key is free
	// within the longest lease, or its queue entries' lifetime.
	for _, key := range locks.Keys {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		l, err := clients[0].Lock(ctx, key, dlock.WithTTL(time.Second))
		if err != nil {
			t.Errorf("Lock(%q) after the traffic: %v", key, err)
		} else if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock(%q) after the traffic: %v", key, err)
		}
		cancel()
	}
	for _, c := range clients {
		c.Close()
	}

	o := chaoscheck.Options{Logf: t.Logf}
	for _, p := range chaoscheck.Check(locks.Holds(), o).Problems {
		locks.Problem("%s", p)
	}
	for _, p := range chaoscheck.CheckPermits(permits.Holds(), permits.Capacities, o).Problems {
		permits.Problem("%s", p)
	}
	for _, tr := range []*chaos{locks, permits} {
		byKind, errKinds := tr.Summary()
		t.Logf("%v: ops by kind %v, errors %v", tr.Keys, byKind, errKinds)
		for _, p := range tr.Problems() {
			t.Error(p)
		}
	}
	t.Logf("ops %d (locks %d, permits %d), holds %d, migrations %v",
		lockOps+permitOps, lockOps, permitOps, len(locks.Holds())+len(permits.Holds()), m.done)
}

// maxMigrationPause bounds how long a migration leaves a slot with its
// keys moved and not yet reassigned.
const maxMigrationPause = 800 * time.Millisecond

// reshard moves the slots of a few keys between a cluster's masters.
type reshard struct {
	cl     *redistest.Cluster
	slots  []int
	owners map[int]string // by slot: the master that serves it
	done   map[string]int // migrations by kind, read once run returned
}

// newReshard finds the slots of keys (a lock's or a semaphore's names all
// share the key's) and the masters that serve them.
func newReshard(t *testing.T, cl *redistest.Cluster, admin *redis.ClusterClient, keys []string) *reshard {
	ctx := context.Background()
	m := &reshard{cl: cl, owners: map[int]string{}, done: map[string]int{}}
	shards, err := admin.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		slot, err := admin.ClusterKeySlot(ctx, chaoscheck.GuardLog(key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		s := int(slot)
		if _, ok := m.owners[s]; ok {
			continue
		}
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if r.Start <= slot && slot <= r.End {
					m.owners[s] = net.JoinHostPort(sh.Nodes[0].IP, strconv.FormatInt(sh.Nodes[0].Port, 10))
				}
			}
		}
		if m.owners[s] == "" {
			t.Fatalf("no master serves slot %d", s)
		}
		m.slots = append(m.slots, s)
	}
	return m
}

// run moves a random slot to another random master, again and again until
// end: half the time at once, else leaving it between the masters (the
// keys moved, the slot not yet reassigned) for up to 800 ms. It runs on a
// goroutine of its own: t is from testutil.InGoroutine.
func (m *reshard) run(t testing.TB, r *rand.Rand, end time.Time) {
	addrs := m.cl.Addrs()
	for time.Now().Before(end) {
		slot := m.slots[r.IntN(len(m.slots))]
		src := m.owners[slot]
		dst := src
		for dst == src {
			dst = addrs[r.IntN(len(addrs))]
		}
		var mid func()
		if r.IntN(2) == 0 {
			m.done["quick"]++
		} else {
			pause := time.Duration(10+r.Int64N(int64((maxMigrationPause-10*time.Millisecond)/time.Millisecond))) * time.Millisecond
			m.done["paused"]++
			mid = func() { time.Sleep(pause) }
		}
		m.cl.MigrateSlot(t, slot, src, dst, mid)
		m.owners[slot] = dst
		time.Sleep(time.Duration(r.IntN(200)) * time.Millisecond)
	}
}
