package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redlock"
)

// An attempt stops waiting for a node at the per-node timeout even when
// go-redis would wait longer: a client without ContextTimeoutEnabled
// gives a hung node its whole ReadTimeout. Here the hung node's vote
// decides (another owner holds node 1), so the attempt waits for it, up
// to the per-node timeout only.
func TestAttemptStopsWaitingForAHungNodeAtTheNodeTimeout(t *testing.T) {
	cl := startCluster(t, 3)
	ctx := context.Background()
	o := nodeOptions(cl.srvs[2].Addr())
	o.ContextTimeoutEnabled, o.ReadTimeout = false, 3*time.Second
	slow := redis.NewClient(o)
	t.Cleanup(func() { slow.Close() })
	const nodeTimeout = 100 * time.Millisecond
	c, err := redlock.NewWithConfig(redlock.Config{Nodes: []redis.UniversalClient{cl.nodes[0], cl.nodes[1], slow}, NodeTimeout: nodeTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mustLock(t, c, "warm").Unlock(ctx) // connect to every node first
	cl.holdOn(t, 1, "job", "other", 10*time.Second)
	cl.srvs[2].Pause(t)
	defer cl.srvs[2].Resume(t) // before Close, which waits for its requests
	start := time.Now()
	_, err = c.TryLock(ctx, "job")
	took := time.Since(start)
	if !errors.Is(err, dlock.ErrNotObtained) && !errors.Is(err, redlock.ErrNoQuorum) {
		t.Errorf("TryLock = %v, want it not obtained", err)
	}
	// The acquisition's timeout, then the release's (the same): well
	// below the node client's ReadTimeout.
	if took > time.Second {
		t.Errorf("TryLock took %v with a hung node and a per-node timeout of %v", took, nodeTimeout)
	}
}
