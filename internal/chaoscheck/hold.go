// Package chaoscheck is what the chaos tests (the library's TestChaos,
// TestPermitsChaos and TestClusterReshardChaos, redlock's
// TestRedlockChaos) share: the random lock or permits traffic (Traffic),
// the record of each hold's verified-live interval, the exclusion (or
// capacity) and fencing checks over those records, and the classification
// of the errors the traffic met. Each test keeps its own servers, clients
// and faults. Only test code imports it.
package chaoscheck

import "time"

// Hold records one hold of a lock: the instants at which its Context was
// verified live (a time read before a ctx.Err() == nil check), so that the
// recorded interval is one during which the Context really was live, and
// the instants at which the lock was also within its trusted deadline (the
// watchdog's, read at the same check), which leaves out the watchdog being
// scheduled late on a loaded machine.
type Hold struct {
	Key, Token string
	Fence      uint64
	Client     int
	Via        string // how it was taken: "lock", "trylock", "do", ...
	Permits    int64  // the permits it took (CheckPermits); 0 for a lock

	Call        time.Time     // Lock, TryLock or Do was called
	Start       time.Time     // verified live here (just after Lock returned); zero if it never was
	End         time.Time     // last instant verified live
	TrustedEnd  time.Time     // last instant verified live and before the deadline
	TrustedAny  bool          // some check found it live and before the deadline
	Late        time.Duration // longest a live check found the deadline passed
	PastAtStart bool          // Lock returned with its deadline already passed
	LostCause   error         // the cause if the Context ended while held
}

// Begin records the first check of h, made at now: whether its Context was
// live, and its trusted deadline read at the same check.
func (h *Hold) Begin(now, deadline time.Time, live bool) {
	if !live {
		return
	}
	h.Start, h.End = now, now
	if now.Before(deadline) {
		h.TrustedEnd, h.TrustedAny = now, true
	} else {
		h.PastAtStart = true
		h.Late = now.Sub(deadline)
	}
}

// Observe records a later check of h, made at now, and returns live.
func (h *Hold) Observe(now, deadline time.Time, live bool) bool {
	if !live {
		return false
	}
	if h.Start.IsZero() {
		return true
	}
	h.End = now
	if now.Before(deadline) {
		if !h.PastAtStart {
			h.TrustedEnd, h.TrustedAny = now, true
		}
	} else if l := now.Sub(deadline); l > h.Late {
		h.Late = l
	}
	return true
}
