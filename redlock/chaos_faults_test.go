package redlock_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/chaoscheck"
)

// The faults of TestRedlockChaos. Each takes one node that no other fault
// holds and holds it until the node is back to normal; two goroutines
// inject them, so that at most two of the five nodes (a minority) are
// under a fault at any one time.

// takeNode picks a node under no fault and marks it, or returns -1.
func (ch *rlChaos) takeNode(r *rand.Rand) int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var free []int
	for i, b := range ch.busy {
		if !b {
			free = append(free, i)
		}
	}
	if len(free) == 0 {
		return -1
	}
	n := free[r.IntN(len(free))]
	ch.busy[n] = true
	return n
}

func (ch *rlChaos) giveNode(n int) {
	ch.mu.Lock()
	ch.busy[n] = false
	ch.mu.Unlock()
}

// fault injects one fault on one node. It runs on a fault goroutine: t is
// from testutil.InGoroutine.
func (ch *rlChaos) fault(t testing.TB, r *rand.Rand) {
	n := ch.takeNode(r)
	if n < 0 {
		return
	}
	defer ch.giveNode(n)
	srv, admin := ch.cl.srvs[n], ch.admins[n]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	switch k := r.IntN(100); {
	case k < 35:
		// Cut some proxied clients off the node, often past their leases.
		ch.Count(&ch.faults, "freeze")
		var frozen []int
		for len(frozen) == 0 {
			for i := range rlChaosProxied {
				if r.IntN(3) != 0 {
					frozen = append(frozen, i)
				}
			}
		}
		for _, i := range frozen {
			ch.clients[i].proxies[n].Freeze()
		}
		time.Sleep(time.Duration(50+r.IntN(1200)) * time.Millisecond)
		for _, i := range frozen {
			ch.clients[i].proxies[n].Thaw()
		}
	case k < 55:
		ch.Count(&ch.faults, "pause")
		srv.Pause(t)
		time.Sleep(time.Duration(30+r.IntN(800)) * time.Millisecond)
		srv.Resume(t)
	case k < 68:
		ch.Count(&ch.faults, "script flush")
		_ = admin.ScriptFlush(ctx).Err()
	case k < 76:
		ch.Count(&ch.faults, "client kill normal")
		_ = admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err()
	case k < 82:
		ch.Count(&ch.faults, "client kill pubsub")
		_ = admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err()
	case k < 94:
		// docs/safety.md, "Delayed restart": a node kept away for longer
		// than the longest lease comes back empty without harm. No excuse.
		ch.Count(&ch.faults, "delayed restart")
		srv.Kill(t)
		time.Sleep(rlChaosMaxLease + time.Duration(50+r.IntN(300))*time.Millisecond)
		srv.Restart(t)
	default:
		// The Redlock hole: a node that restarts empty at once may give a
		// second client a majority. The docs excuse overlaps across it.
		ch.mu.Lock()
		if len(ch.restarts) >= 2 {
			ch.mu.Unlock()
			return
		}
		ch.mu.Unlock()
		ch.Count(&ch.faults, "immediate restart")
		began := time.Now()
		srv.Kill(t)
		exited := time.Now()
		ch.mu.Lock()
		ch.restarts = append(ch.restarts, chaoscheck.Restart{Began: began, Exited: exited})
		ch.mu.Unlock()
		srv.Restart(t)
	}
}
