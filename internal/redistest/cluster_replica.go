package redistest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// AddReplica starts one more cluster node and makes it a replica of
// c.Nodes[master]: CLUSTER MEET, then CLUSTER REPLICATE once it knows the
// master. It returns when the replica's link to the master is up and every
// master lists it, so that WAIT on the master counts it. The replica is not
// added to c.Nodes.
func (c *Cluster) AddReplica(t testing.TB, master int) *Server {
	t.Helper()
	r := start(t, config{clusterBus: true, extra: [][]string{
		{"cluster-enabled", "yes"},
		{"cluster-config-file", "nodes.conf"},
		{"cluster-node-timeout", msString(ClusterNodeTimeout)},
	}})
	ctx := context.Background()
	m := c.Nodes[master]
	mc := newPollClient(m.Addr())
	defer func() { _ = mc.Close() }()
	rc := newPollClient(r.Addr())
	defer func() { _ = rc.Close() }()
	masterID, err := mc.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatalf("redistest: CLUSTER MYID on %s: %v", m.Addr(), err)
	}
	replicaID, err := rc.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatalf("redistest: CLUSTER MYID on %s: %v", r.Addr(), err)
	}
	if err := rc.ClusterMeet(ctx, "127.0.0.1", fmt.Sprint(m.Port())).Err(); err != nil {
		t.Fatalf("redistest: CLUSTER MEET: %v", err)
	}
	waitFor(t, groupReadyTimeout, "the new node to replicate "+m.Addr(), func() (bool, string) {
		// REPLICATE fails until gossip has told the new node about the
		// master; asking again is harmless.
		if err := rc.Do(ctx, "CLUSTER", "REPLICATE", masterID).Err(); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	waitFor(t, groupReadyTimeout, "replica "+r.Addr()+" in sync and known to every master", func() (bool, string) {
		info, err := rawInfo(r.Addr(), "replication")
		if err != nil {
			return false, err.Error()
		}
		if st := infoField(info, "master_link_status"); st != "up" {
			return false, "master_link_status=" + st
		}
		for _, n := range c.Nodes {
			nc := newPollClient(n.Addr())
			nodes, err := nc.ClusterNodes(ctx).Result()
			_ = nc.Close()
			if err != nil {
				return false, err.Error()
			}
			if !knowsReplica(nodes, replicaID, masterID) {
				return false, n.Addr() + " does not list the replica yet"
			}
		}
		info, err = rawInfo(m.Addr(), "replication")
		if err != nil {
			return false, err.Error()
		}
		if !strings.Contains(info, fmt.Sprintf("port=%d,state=online", r.Port())) {
			return false, "master does not list the replica online"
		}
		return true, ""
	})
	return r
}

// knowsReplica reports whether a CLUSTER NODES reply lists id as a
// connected replica of masterID.
func knowsReplica(nodes, id, masterID string) bool {
	for _, l := range strings.Split(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(l)
		if len(f) >= 8 && f[0] == id && strings.Contains(f[2], "slave") && f[3] == masterID && f[7] == "connected" {
			return true
		}
	}
	return false
}

// newPollClient is a client for set-up polling: short timeouts, no retries.
func newPollClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:        addr,
		DialTimeout: 300 * time.Millisecond,
		ReadTimeout: time.Second,
		MaxRetries:  -1,
	})
}
