package redlock_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/redlock"
)

// resetStats resets the statistics of rdb's server (CONFIG RESETSTAT).
func resetStats(t *testing.T, rdb *redis.Client) {
	t.Helper()
	if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

// scriptsPerAttempt returns how many scripts one failing TryLock of "job"
// by c runs on the server of fine once they are cached there, and resets
// that server's statistics for what follows.
func scriptsPerAttempt(t *testing.T, c *dlock.Client, fine *redis.Client) int {
	t.Helper()
	ctx := context.Background()
	if _, err := c.TryLock(ctx, "job"); err == nil {
		t.Fatal("TryLock succeeded")
	}
	resetStats(t, fine) // the scripts are cached now
	_, err := c.TryLock(ctx, "job")
	once := scriptCalls(t, fine)
	if err == nil || once == 0 {
		t.Fatalf("TryLock = %v with %d script calls", err, once)
	}
	resetStats(t, fine)
	return once
}

// A majority of nodes answering with an error that will not pass (the ACL
// user may not run scripts or touch the lock's keys, the script command is
// renamed away) is a configuration error: Lock returns it after one
// attempt, as TryLock does, wrapping ErrNoQuorum and the nodes' replies,
// instead of retrying until the nodes are deemed out of reach.
func TestLockFailsAtOnceOnPermanentNodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		server []redistest.Option // the failing nodes'
		acl    []any              // applied to the user "locker" on the failing nodes
		prefix string             // of the failing nodes' reply
	}{
		{name: "no scripting", acl: []any{"-@scripting"}, prefix: "NOPERM"},
		{name: "no key access", acl: []any{"resetkeys", "~other:*"}, prefix: "NOPERM"},
		{name: "EVALSHA renamed", server: []redistest.Option{redistest.WithConfig("rename-command", "EVALSHA", "")}, prefix: "ERR unknown command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := startCluster(t, 3, func(i int) []redistest.Option {
				if i < 2 {
					return tc.server
				}
				return nil
			})
			ctx := context.Background()
			nodes := cl.lockerNodes(t, func(int) string { return "allchannels" })
			for _, srv := range cl.srvs[:2] {
				if tc.acl != nil {
					if err := srv.Client(t).Do(ctx, append([]any{"ACL", "SETUSER", "locker"}, tc.acl...)...).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			c, err := redlock.NewWithConfig(redlock.Config{Nodes: nodes, NodeTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// Node 2 answers: it counts the attempts.
			fine := cl.srvs[2].Client(t)
			once := scriptsPerAttempt(t, c, fine)
			// Long enough for a Lock that retries to give up on its own.
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			_, err = c.Lock(wctx, "job")
			if got := scriptCalls(t, fine); got != once {
				t.Errorf("Lock ran %d scripts on node 2, one attempt %d: Lock retried (%v)", got, once, err)
			}
			if !errors.Is(err, redlock.ErrNoQuorum) {
				t.Errorf("Lock = %v, want ErrNoQuorum", err)
			}
			if errors.Is(err, dlock.ErrWrongType) || errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Lock = %v", err)
			}
			var rerr redis.Error
			if !errors.As(err, &rerr) || !strings.HasPrefix(rerr.Error(), tc.prefix) {
				t.Errorf("Lock = %v, want it to wrap the nodes' %s reply", err, tc.prefix)
			}
		})
	}
}

// A node answering with an error that will not pass leaves a majority
// possible while the others may come back: Lock keeps trying until they
// are deemed out of reach.
func TestLockRetriesWhileMajorityPossible(t *testing.T) {
	cl := startCluster(t, 3)
	ctx := context.Background()
	nodes := cl.lockerNodes(t, func(int) string { return "allchannels" })
	if err := cl.srvs[0].Client(t).Do(ctx, "ACL", "SETUSER", "locker", "-@scripting").Err(); err != nil {
		t.Fatal(err)
	}
	c, err := redlock.NewWithConfig(redlock.Config{Nodes: nodes, NodeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl.srvs[1].Kill(t)
	fine := cl.srvs[2].Client(t)
	once := scriptsPerAttempt(t, c, fine)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = c.Lock(wctx, "job")
	if !errors.Is(err, redlock.ErrNoQuorum) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Lock = %v, want ErrNoQuorum with node 1 down", err)
	}
	if got := scriptCalls(t, fine); got <= once {
		t.Errorf("Lock ran %d scripts on node 2, one attempt %d: Lock did not retry", got, once)
	}
}

// Redlock given the masters of one Redis Cluster as its nodes, each through
// a plain Client: a node answers MOVED for the keys another serves, and
// will every time, as it would NOPERM. Lock returns after one attempt,
// and LocalFallback does not take those nodes for unreachable.
func TestLockFailsAtOnceOnClusterNodesAnsweringMoved(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	nodes := make([]redis.UniversalClient, len(cl.Nodes))
	for i, addr := range cl.Addrs() {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = rdb.Close() })
		nodes[i] = rdb
	}
	c, err := redlock.NewWithConfig(redlock.Config{Nodes: nodes, NodeTimeout: time.Second}, dlock.WithDegradedMode(dlock.LocalFallback))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Long enough for a Lock that retries to give up on its own.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := c.Lock(ctx, "job")
	if err == nil {
		_ = l.Unlock(ctx)
		t.Fatalf("Lock with 2 of 3 nodes answering MOVED = a lock (degraded %v), want ErrNoQuorum", l.Degraded())
	}
	if _, moved := redis.IsMovedError(err); !moved || !errors.Is(err, redlock.ErrNoQuorum) {
		t.Errorf("Lock = %v, want ErrNoQuorum wrapping MOVED", err)
	}
	if !strings.Contains(err.Error(), "an error that will not pass") {
		t.Errorf("Lock = %v, want it to give up after one attempt", err)
	}
}
