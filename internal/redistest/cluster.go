package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterNodeTimeout is cluster-node-timeout: small so node failures are
// detected quickly in tests.
const ClusterNodeTimeout = 2000 * time.Millisecond

// Cluster is a Redis Cluster of masters only (no replicas).
type Cluster struct {
	// Nodes are the cluster's masters, in creation order.
	Nodes []*Server
}

// StartCluster starts masters cluster-enabled nodes (masters >= 3, a
// redis-cli limit), creates the cluster with `redis-cli --cluster create
// --cluster-replicas 0 --cluster-yes`, and returns once every node reports
// cluster_state:ok, knows all nodes, and all nodes agree on the slot map, so
// a ClusterClient sees a stable topology from its first command.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: StartCluster needs at least 3 masters (redis-cli --cluster create requires 3), got %d", masters)
	}
	c := &Cluster{}
	for i := 0; i < masters; i++ {
		c.Nodes = append(c.Nodes, start(t, config{clusterBus: true, extra: [][]string{
			{"cluster-enabled", "yes"},
			// Relative to dir; each node has its own dir.
			{"cluster-config-file", "nodes.conf"},
			{"cluster-node-timeout", msString(ClusterNodeTimeout)},
		}}))
	}

	cli := cliPath(t)
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: %s %s: %v\n%s", cli, strings.Join(args, " "), err, out)
	}

	waitFor(t, groupReadyTimeout, "cluster to converge", c.converged)
	return c
}

// cliPath finds redis-cli, preferring the one next to redis-server.
func cliPath(t testing.TB) string {
	t.Helper()
	if p := filepath.Join(filepath.Dir(BinaryPath(t)), "redis-cli"); isExecutable(p) {
		return p
	}
	p, err := findBinary("redis-cli", extraBinDirs)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return p
}

// converged reports whether every node is in state ok, knows all nodes, and
// returns the same complete slot map.
func (c *Cluster) converged() (bool, string) {
	ctx := context.Background()
	var want string
	for _, n := range c.Nodes {
		ok, status := func() (bool, string) {
			rc := redis.NewClient(&redis.Options{
				Addr:        n.Addr(),
				DialTimeout: 300 * time.Millisecond,
				ReadTimeout: 500 * time.Millisecond,
				MaxRetries:  -1,
			})
			defer func() { _ = rc.Close() }()
			info, err := rc.ClusterInfo(ctx).Result()
			if err != nil {
				return false, err.Error()
			}
			if st := infoField(info, "cluster_state"); st != "ok" {
				return false, "cluster_state=" + st
			}
			if k := infoField(info, "cluster_known_nodes"); k != strconv.Itoa(len(c.Nodes)) {
				return false, "cluster_known_nodes=" + k
			}
			nodes, err := rc.ClusterNodes(ctx).Result()
			if err != nil {
				return false, err.Error()
			}
			got, covered, err := canonicalNodes(nodes)
			if err != nil {
				return false, err.Error()
			}
			if covered != 16384 {
				return false, fmt.Sprintf("%d slots covered", covered)
			}
			if want == "" {
				want = got
			} else if got != want {
				return false, "slot map differs: " + got + " vs " + want
			}
			return true, ""
		}()
		if !ok {
			return false, n.Addr() + ": " + status
		}
	}
	return true, ""
}

// canonicalNodes turns CLUSTER NODES output into a node-independent string
// (id, address, flags without "myself", slots; sorted) and counts the slots
// assigned. It fails if any link is not connected. CLUSTER NODES is used
// rather than CLUSTER SLOTS (deprecated) or CLUSTER SHARDS (Redis >= 7).
func canonicalNodes(out string) (string, int, error) {
	var lines []string
	covered := 0
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 8 {
			return "", 0, fmt.Errorf("bad CLUSTER NODES line %q", l)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		flags := strings.Join(slices.DeleteFunc(strings.Split(f[2], ","), func(s string) bool {
			return s == "myself"
		}), ",")
		if f[7] != "connected" {
			return "", 0, fmt.Errorf("node %s link %s", addr, f[7])
		}
		var slots []string
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // slot in migration
			}
			lo, hi, isRange := strings.Cut(r, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return "", 0, fmt.Errorf("bad slot range %q", r)
			}
			covered += b - a + 1
			slots = append(slots, r)
		}
		lines = append(lines, strings.Join(append([]string{f[0], addr, flags}, slots...), " "))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n"), covered, nil
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Client returns a go-redis cluster client seeded with all nodes, closed in
// t.Cleanup.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}
