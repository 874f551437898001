package dlock_test

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/chaoscheck"
)

// TestPermitsChaos is TestChaos for Semaphores and RWMutexes: the same
// Clients and faults, with traffic that takes random counts of permits of
// two semaphores (Acquire, TryAcquire) and reads or writes an RWMutex
// (RLock, TryRLock, Lock, TryLock), with random short leases, renewal on
// and off, Extend, TTL and random cancellations.
//
// Over the holds recorded, chaoscheck.CheckPermits then finds, at any
// instant, no more permits of one semaphore held over trusted intervals
// than its capacity, and no writer's trusted interval overlapping another
// holder's, except across a restart of redis-server without persistence;
// and a larger fence for a grant called after another was granted.
//
// CHAOS_DURATION (15s by default) and CHAOS_SEED are TestChaos's.
func TestPermitsChaos(t *testing.T) {
	// A server of its own, and checks of what the traffic recorded, not of
	// how long calls took: it runs beside the other chaos run.
	t.Parallel()
	seed, dur := chaoscheck.Settings(t, 15*time.Second)
	ch := newChaos(t)
	ch.Keys = []string{"s2", "s5", "rw"}
	ch.Capacities = map[string]int64{"s2": 2, "s5": 5, "rw": dlock.MaxPermits}
	ch.run(seed, dur)
}
