package dlock

import (
	"context"
	"fmt"
	"math"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/tcpproxy"
)

// A master that lost its script cache (a restart, SCRIPT FLUSH, or a
// failover: Redis 7 does not replicate scripts, so a promoted replica has
// none) answers the watchdog's renewals with NOSCRIPT. The renewals must
// give that master the script and go on, as Extend does, whatever the
// other nodes do: here the master's replica has stopped answering (hung,
// or unreachable from this client), which the lock does not need.
func TestClusterRenewalAfterScriptFlushWithAReplicaHung(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	replica := cl.AddReplica(t, 0)
	ctx := context.Background()
	// The replica is in every node's slot map (CLUSTER SLOTS lists a
	// replica once it has a replication offset), as on any live cluster.
	waitUntil(t, 10*time.Second, "every node to list the replica", func() bool {
		for _, a := range cl.Addrs() {
			nc := redis.NewClient(&redis.Options{Addr: a})
			//lint:ignore SA1019 go-redis builds its slot map from CLUSTER SLOTS: that is what must list the replica
			slots, err := nc.ClusterSlots(ctx).Result()
			_ = nc.Close()
			listed := false
			for _, s := range slots {
				for _, n := range s.Nodes {
					listed = listed || n.Addr == replica.Addr()
				}
			}
			if err != nil || !listed {
				return false
			}
		}
		return true
	})
	cc := cl.Client(t)
	c := newClientOn(t, cc)

	master := cl.Nodes[0].Addr()
	key := "noscript:0"
	for i := 1; masterOf(t, cc, c, key) != master; i++ {
		key = fmt.Sprintf("noscript:%d", i)
	}
	l := mustLock(t, c, key, WithTTL(1500*time.Millisecond))
	mc := redis.NewClient(&redis.Options{Addr: master})
	defer mc.Close()
	name := c.keys(key).lock
	waitRenewal(t, mc, name)

	replica.Pause(t)
	t.Cleanup(func() { replica.Resume(t) })
	if err := mc.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// Two renewals reach the lock's master (its lease only shrinks
	// otherwise), well within cluster-node-timeout.
	prev, renewals := time.Duration(math.MaxInt64/2), 0
	waitUntil(t, 5*time.Second, "two renewals after the script flush", func() bool {
		if l.Context().Err() != nil {
			t.Fatalf("lock declared lost, its master healthy: %v", context.Cause(l.Context()))
		}
		d, err := mc.PTTL(ctx, name).Result()
		if err != nil || d <= 0 {
			return false
		}
		if d > prev+20*time.Millisecond {
			renewals++
		}
		prev = d
		return renewals >= 2
	})
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// Renewals are one pipeline that go-redis splits per master. A master
// that stops answering this client (a partition; the cluster itself is
// fine) must cost only the locks it serves: the locks on the other
// masters are renewed there in time and must not be declared lost while
// the round trip to the silent master waits for its timeout.
func TestClusterRenewalsOfHealthyMastersNotHeldBackByAHungOne(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	hung := cl.Nodes[1].Addr()
	proxy, err := tcpproxy.New(hung)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	// This client reaches the hung master through the proxy; everything
	// else goes straight to the nodes.
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cl.Addrs(),
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == hung {
				addr = proxy.Addr()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	})
	t.Cleanup(func() { _ = cc.Close() })
	c := newClientOn(t, cc)
	ctx := context.Background()

	byMaster := keysPerMaster(t, cl, cc, c, "isolated:", 1)
	healthy := cl.Nodes[0].Addr()
	const ttl = 1500 * time.Millisecond
	l := mustLock(t, c, byMaster[healthy][0], WithTTL(ttl))
	mustLock(t, c, byMaster[hung][0], WithTTL(ttl)) // renewed in the same rounds
	hc := redis.NewClient(&redis.Options{Addr: healthy})
	defer hc.Close()
	name := c.keys(l.Key()).lock
	waitRenewal(t, hc, name)

	proxy.Freeze()
	t.Cleanup(proxy.Thaw)
	// Several leases' worth of renewals reach the healthy master; the
	// lock it serves must stay live all along.
	deadline := time.Now().Add(3 * ttl)
	waitUntil(t, 10*time.Second, "three leases to pass", func() bool {
		if l.Context().Err() != nil {
			t.Fatalf("lock on a healthy master declared lost (its lease there: %v): %v", hc.PTTL(ctx, name).Val(), context.Cause(l.Context()))
		}
		return time.Now().After(deadline)
	})
	if d, err := hc.PTTL(ctx, name).Result(); err != nil || d < ttl/3 {
		t.Fatalf("lease on the healthy master: %v, %v", d, err)
	}
}
