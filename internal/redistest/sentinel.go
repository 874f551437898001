package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// DefaultMasterName is the name the sentinels monitor the master under.
	DefaultMasterName = "mymaster"
	// SentinelDownAfter is down-after-milliseconds: how long the master
	// must be unreachable before a sentinel considers it down. Small so
	// failover tests finish in seconds (production uses ~30 s).
	SentinelDownAfter = 1000 * time.Millisecond
	// SentinelFailoverTimeout is failover-timeout. Besides bounding one
	// failover it sets the retry delay (2x) after a failed leader
	// election, so it is kept small too.
	SentinelFailoverTimeout = 2000 * time.Millisecond
	// groupReadyTimeout bounds StartSentinelGroup/StartCluster waits.
	// Sentinels discover each other through hello messages sent every 2 s.
	groupReadyTimeout = 20 * time.Second
)

// SentinelGroup is a master, its replicas and the sentinels monitoring it.
// Master, Replicas and Sentinels keep their initial roles; after a failover
// use WaitForFailover and ServerByAddr to find the current master.
type SentinelGroup struct {
	// MasterName is the name the sentinels know the master by.
	MasterName string
	// Master is the initial master.
	Master *Server
	// Replicas are the initial replicas (replicaof Master).
	Replicas []*Server
	// Sentinels are redis-server --sentinel processes; use their Addr()
	// with SentinelClient or redis.NewSentinelClient.
	Sentinels []*Server
	// Quorum is the configured quorum, len(Sentinels)/2+1.
	Quorum int
}

// StartSentinelGroup starts a master, replicas replicas of it and sentinels
// sentinels monitoring it with quorum sentinels/2+1, down-after-milliseconds
// SentinelDownAfter and failover-timeout SentinelFailoverTimeout. It returns
// once every replica is in sync and every sentinel knows the master, all
// replicas and all other sentinels, so a failover can start right away.
// Sentinels are started only after the replicas are in sync because a
// sentinel discovers replicas from the master's INFO, which it otherwise
// refreshes only every 10 s.
func StartSentinelGroup(t testing.TB, replicas, sentinels int) *SentinelGroup {
	t.Helper()
	if replicas < 0 || sentinels < 1 {
		t.Fatalf("redistest: StartSentinelGroup needs replicas >= 0 and sentinels >= 1, got %d, %d", replicas, sentinels)
	}
	g := &SentinelGroup{MasterName: DefaultMasterName, Quorum: sentinels/2 + 1}
	g.Master = Start(t)
	masterPort := strconv.Itoa(g.Master.Port())
	for i := 0; i < replicas; i++ {
		g.Replicas = append(g.Replicas, Start(t, WithConfig("replicaof", "127.0.0.1", masterPort)))
	}
	waitFor(t, groupReadyTimeout, "replicas to be in sync", func() (bool, string) {
		return g.replicasInSync()
	})

	name := g.MasterName
	for i := 0; i < sentinels; i++ {
		g.Sentinels = append(g.Sentinels, start(t, config{sentinel: true, extra: [][]string{
			{"sentinel", "monitor", name, "127.0.0.1", masterPort, strconv.Itoa(g.Quorum)},
			{"sentinel", "down-after-milliseconds", name, msString(SentinelDownAfter)},
			{"sentinel", "failover-timeout", name, msString(SentinelFailoverTimeout)},
			{"sentinel", "parallel-syncs", name, "1"},
		}}))
	}
	clients := make([]*redis.SentinelClient, len(g.Sentinels))
	for i, s := range g.Sentinels {
		clients[i] = newSentinelClient(s.Addr())
	}
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	waitFor(t, groupReadyTimeout, "sentinels to discover master, replicas and each other", func() (bool, string) {
		for i, c := range clients {
			if ok, status := g.sentinelReady(c); !ok {
				return false, fmt.Sprintf("sentinel %s: %s", g.Sentinels[i].Addr(), status)
			}
		}
		return true, ""
	})
	return g
}

// replicasInSync reports whether the master lists every replica as online
// and every replica reports master_link_status:up.
func (g *SentinelGroup) replicasInSync() (bool, string) {
	info, err := rawInfo(g.Master.Addr(), "replication")
	if err != nil {
		return false, "master: " + err.Error()
	}
	if n := infoField(info, "connected_slaves"); n != strconv.Itoa(len(g.Replicas)) {
		return false, "master connected_slaves=" + n
	}
	for i := range g.Replicas {
		if st := infoField(info, fmt.Sprintf("slave%d", i)); !strings.Contains(st, "state=online") {
			return false, fmt.Sprintf("master slave%d: %s", i, st)
		}
	}
	for _, r := range g.Replicas {
		info, err := rawInfo(r.Addr(), "replication")
		if err != nil {
			return false, r.Addr() + ": " + err.Error()
		}
		if st := infoField(info, "master_link_status"); st != "up" {
			return false, r.Addr() + " master_link_status=" + st
		}
	}
	return true, ""
}

// sentinelReady reports whether one sentinel sees a healthy master, all
// replicas and all other sentinels.
func (g *SentinelGroup) sentinelReady(c *redis.SentinelClient) (bool, string) {
	ctx := context.Background()
	m, err := c.Master(ctx, g.MasterName).Result()
	if err != nil {
		return false, err.Error()
	}
	if m["flags"] != "master" || m["num-slaves"] != strconv.Itoa(len(g.Replicas)) ||
		m["num-other-sentinels"] != strconv.Itoa(len(g.Sentinels)-1) {
		return false, fmt.Sprintf("flags=%s num-slaves=%s num-other-sentinels=%s",
			m["flags"], m["num-slaves"], m["num-other-sentinels"])
	}
	reps, err := c.Replicas(ctx, g.MasterName).Result()
	if err != nil {
		return false, err.Error()
	}
	for _, r := range reps {
		if r["flags"] != "slave" || r["master-link-status"] != "ok" {
			return false, fmt.Sprintf("replica %s:%s flags=%s master-link-status=%s",
				r["ip"], r["port"], r["flags"], r["master-link-status"])
		}
	}
	return true, ""
}

// SentinelAddrs returns the sentinels' addresses, for redis.FailoverOptions.
func (g *SentinelGroup) SentinelAddrs() []string {
	addrs := make([]string, len(g.Sentinels))
	for i, s := range g.Sentinels {
		addrs[i] = s.Addr()
	}
	return addrs
}

// FailoverClient returns a go-redis failover client (master discovery via the
// sentinels), closed in t.Cleanup.
func (g *SentinelGroup) FailoverClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    g.MasterName,
		SentinelAddrs: g.SentinelAddrs(),
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// SentinelClient returns a client for sentinel i (SENTINEL commands), closed
// in t.Cleanup.
func (g *SentinelGroup) SentinelClient(t testing.TB, i int) *redis.SentinelClient {
	t.Helper()
	c := redis.NewSentinelClient(&redis.Options{Addr: g.Sentinels[i].Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ServerByAddr returns the master or replica listening on addr (as returned by
// WaitForFailover), or nil.
func (g *SentinelGroup) ServerByAddr(addr string) *Server {
	for _, s := range append([]*Server{g.Master}, g.Replicas...) {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// WaitForFailover polls SENTINEL GET-MASTER-ADDR-BY-NAME until every running,
// unpaused sentinel that answers reports the same master address different
// from oldMasterAddr, and that server reports role:master. It returns the new
// master's address, or calls t.Fatalf after timeout. Waiting for all
// sentinels matters because clients may ask any of them.
func (g *SentinelGroup) WaitForFailover(t testing.TB, oldMasterAddr string, timeout time.Duration) string {
	t.Helper()
	clients := map[*Server]*redis.SentinelClient{}
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	var newAddr string
	waitFor(t, timeout, "sentinel failover away from "+oldMasterAddr, func() (bool, string) {
		newAddr = ""
		var seen []string
		for _, s := range g.Sentinels {
			if !s.Running() || s.Paused() {
				continue
			}
			c := clients[s]
			if c == nil {
				c = newSentinelClient(s.Addr())
				clients[s] = c
			}
			hp, err := c.GetMasterAddrByName(context.Background(), g.MasterName).Result()
			if err != nil || len(hp) != 2 {
				continue // a sentinel that cannot answer does not vote
			}
			addr := net.JoinHostPort(hp[0], hp[1])
			seen = append(seen, s.Addr()+"->"+addr)
			if addr == oldMasterAddr || (newAddr != "" && addr != newAddr) {
				return false, strings.Join(seen, ", ")
			}
			newAddr = addr
		}
		if newAddr == "" {
			return false, "no sentinel answered"
		}
		info, err := rawInfo(newAddr, "replication")
		if err != nil {
			return false, newAddr + ": " + err.Error()
		}
		if role := infoField(info, "role"); role != "master" {
			return false, newAddr + " role=" + role
		}
		return true, ""
	})
	return newAddr
}

// newSentinelClient is a client for internal polling: short timeouts and no
// retries so a dead or paused sentinel does not stall the poll loop.
func newSentinelClient(addr string) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{
		Addr:         addr,
		DialTimeout:  300 * time.Millisecond,
		ReadTimeout:  500 * time.Millisecond,
		WriteTimeout: 500 * time.Millisecond,
		MaxRetries:   -1,
	})
}

func msString(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
