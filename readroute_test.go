package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
)

// go-redis clients that route read-only commands to replicas
// (ClusterOptions ReadOnly, RouteByLatency, RouteRandomly;
// NewFailoverClusterClient) send every dlock script to the master: EVALSHA
// and EVAL are not read-only. Only the waiters' subscriptions may go to a
// replica, which gets the hand-overs the master publishes.

// readRoutedLife runs a lock's and a semaphore's life on Clients made with
// mk: a hand-over to a waiter that only the hand-over message wakes
// (checks every 20 s), renewals by the watchdog (seen on master) and by
// Extend, Txn, TTL, Inspect, Available, Unlock. It fails if a replica
// served a script, or if onReplica and the waiter did not subscribe on a
// replica.
func readRoutedLife(t *testing.T, mk func() redis.UniversalClient, master redis.Cmdable, rcs []*redis.Client, onReplica bool) {
	ctx := context.Background()
	for _, rc := range rcs {
		if err := rc.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c := newClientOn(t, mk(), noPolling)
	other := newClientOn(t, mk(), noPolling)
	for i := range 3 {
		key := fmt.Sprint("routed:", i)
		l := mustLock(t, c, key)
		got := lockAsync(ctx, other, key, WithTTL(time.Second))
		ch := other.wakeChannel(key)
		waitUntil(t, 5*time.Second, "the waiter to queue and subscribe", func() bool {
			info, err := c.Inspect(ctx, key)
			return err == nil && info.Waiters == 1 && (!onReplica || shardSubscribers(ctx, rcs, ch) == 1)
		})
		l2 := handOverWithin(t, l, got, time.Second, 10*time.Second, key)
		waitRenewal(t, master, c.keys(key).lock)
		if err := l2.Extend(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		// Txn's check (HEXISTS) is read-only: it runs on the WATCHing
		// connection, to the master.
		data := l2.SlotKey("data")
		if err := l2.Txn(ctx, func(pipe redis.Pipeliner) error { pipe.Set(ctx, data, "x", time.Minute); return nil }); err != nil {
			t.Fatalf("%q: Txn: %v", key, err)
		}
		if v, err := master.Get(ctx, data).Result(); err != nil || v != "x" {
			t.Fatalf("%q: master has %q, %v after Txn", key, v, err)
		}
		if ttl, err := l2.TTL(ctx); err != nil || ttl < 50*time.Second {
			t.Fatalf("%q: TTL right after Extend(1m): %v, %v", key, ttl, err)
		}
		info, err := c.Inspect(ctx, key)
		if err != nil || !info.Held || info.Owner != l2.Token() || info.TTL < 50*time.Second {
			t.Fatalf("%q: Inspect right after Extend(1m): %+v, %v", key, info, err)
		}
		if err := l2.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if info, err := c.Inspect(ctx, key); err != nil || info.Held {
			t.Fatalf("%q: Inspect right after Unlock: %+v, %v", key, info, err)
		}
	}
	s := c.Semaphore("routed:pool", 3)
	p, err := s.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.Available(ctx); err != nil || n != 1 {
		t.Fatalf("Available with 2 of 3 permits held: %d, %v", n, err)
	}
	if err := p.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Available(ctx); err != nil || n != 3 {
		t.Fatalf("Available right after the release: %d, %v", n, err)
	}
	for _, rc := range rcs {
		stats, err := rc.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(stats, "cmdstat_eval") {
			t.Errorf("replica %s served scripts:\n%s", rc.Options().Addr, stats)
		}
	}
}

// shardSubscribers counts channel's sharded subscribers on the servers.
func shardSubscribers(ctx context.Context, rcs []*redis.Client, channel string) int64 {
	var n int64
	for _, rc := range rcs {
		m, _ := rc.PubSubShardNumSub(ctx, channel).Result()
		n += m[channel]
	}
	return n
}

func TestReadRoutingCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	var replicas []*redistest.Server
	for i := range cl.Nodes {
		replicas = append(replicas, cl.AddReplica(t, i))
	}
	// CLUSTER SLOTS leaves out a replica whose replication offset is still
	// 0 (go-redis then routes everything to the master): write to the
	// masters until every node lists every replica.
	var rcs []*redis.Client
	for _, r := range replicas {
		rcs = append(rcs, replicaClient(t, r.Addr()))
	}
	cc := cl.Client(t)
	ctx := context.Background()
	waitUntil(t, 10*time.Second, "CLUSTER SLOTS to list the replicas", func() bool {
		for i := range 30 {
			cc.Set(ctx, fmt.Sprint("offset:", i), 1, time.Minute)
		}
		for _, n := range append(cl.Nodes, replicas...) {
			// Each range: start, end, master, replicas.
			slots, err := replicaClient(t, n.Addr()).Do(ctx, "CLUSTER", "SLOTS").Slice()
			if err != nil {
				return false
			}
			for _, s := range slots {
				if r, ok := s.([]any); !ok || len(r) < 4 {
					return false
				}
			}
		}
		return true
	})
	for _, tc := range []struct {
		name      string
		opt       redis.ClusterOptions
		onReplica bool // go-redis never picks the master
	}{
		{"ReadOnly", redis.ClusterOptions{ReadOnly: true}, true},
		{"RouteByLatency", redis.ClusterOptions{RouteByLatency: true}, false},
		{"RouteRandomly", redis.ClusterOptions{RouteRandomly: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			readRoutedLife(t, func() redis.UniversalClient {
				o := tc.opt
				o.Addrs = cl.Addrs()
				c := redis.NewClusterClient(&o)
				t.Cleanup(func() { _ = c.Close() })
				return c
			}, cc, rcs, tc.onReplica)
		})
	}
	t.Run("SlotMovesUnderWaiterOnReplica", func(t *testing.T) {
		mk := func() *redis.ClusterClient {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ReadOnly: true})
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
		c := newClientOn(t, mk(), noPolling)
		other := newClientOn(t, mk(), noPolling)
		const key = "routed:moving"
		l := mustLock(t, c, key)
		got := lockAsync(ctx, other, key)
		ch := other.wakeChannel(key)
		waitUntil(t, 5*time.Second, "the waiter to subscribe on a replica", func() bool {
			return shardSubscribers(ctx, rcs, ch) == 1
		})
		src := masterOf(t, cc, c, key)
		slot := int(cc.ClusterKeySlot(ctx, c.keys(key).lock).Val())
		cl.MigrateSlot(t, slot, src, otherMaster(cl, src), nil)
		waitUntil(t, 5*time.Second, "the waiter to subscribe again", func() bool {
			return shardSubscribers(ctx, rcs, ch) == 1
		})
		releaseAndWaitHandOver(t, l, got, key)
	})
}

// The clients of NewFailoverClusterClient are ClusterClients whose one
// slot range lists the Sentinel group's master and replicas. Their
// FailoverOptions ReplicaOnly, RouteByLatency and RouteRandomly become
// ClusterOptions ReadOnly, RouteByLatency and RouteRandomly. The test
// builds the same clients from the group's addresses: the Close of
// NewFailoverClusterClient's client leaves its Sentinel listener running.
func TestReadRoutingSentinel(t *testing.T) {
	g := redistest.StartSentinelGroup(t, 1, 1)
	slots := func(context.Context) ([]redis.ClusterSlot, error) {
		return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{
			{Addr: g.Master.Addr()}, {Addr: g.Replicas[0].Addr()},
		}}}, nil
	}
	for _, tc := range []struct {
		name      string
		opt       redis.ClusterOptions
		onReplica bool
	}{
		{"ReplicaOnly", redis.ClusterOptions{ReadOnly: true}, true},
		{"RouteByLatency", redis.ClusterOptions{RouteByLatency: true}, false},
		{"RouteRandomly", redis.ClusterOptions{RouteRandomly: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			readRoutedLife(t, func() redis.UniversalClient {
				o := tc.opt
				o.ClusterSlots = slots
				c := redis.NewClusterClient(&o)
				t.Cleanup(func() { _ = c.Close() })
				return c
			}, g.Master.Client(t), []*redis.Client{g.Replicas[0].Client(t)}, tc.onReplica)
		})
	}
	// Without RouteByLatency or RouteRandomly, UniversalOptions ReadOnly
	// with a MasterName makes a failover client that connects to replicas
	// only: every lock write is refused, and Lock does not wait.
	t.Run("UniversalReadOnlyReachesReplicasOnly", func(t *testing.T) {
		rdb := redis.NewUniversalClient(&redis.UniversalOptions{MasterName: g.MasterName, Addrs: g.SentinelAddrs(), ReadOnly: true})
		t.Cleanup(func() { _ = rdb.Close() })
		c := newClientOn(t, rdb)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := c.Lock(ctx, "replica-only"); !redis.IsReadOnlyError(err) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock through a replica-only client: %v, want READONLY at once", err)
		}
		if _, err := c.TryLock(ctx, "replica-only"); !redis.IsReadOnlyError(err) {
			t.Fatalf("TryLock through a replica-only client: %v, want READONLY", err)
		}
		if info, err := c.Inspect(ctx, "replica-only"); err != nil || info.Held {
			t.Fatalf("Inspect through a replica-only client: %+v, %v", info, err)
		}
		if _, err := c.List(ctx, ""); err != nil {
			t.Fatalf("List through a replica-only client: %v", err)
		}
		local := newClientOn(t, rdb, WithDegradedMode(LocalFallback))
		l, err := local.Lock(ctx, "replica-only")
		if err != nil || !l.Degraded() {
			t.Fatalf("Lock with LocalFallback through a replica-only client: %v, want a degraded lock", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
