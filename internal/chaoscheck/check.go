package chaoscheck

import (
	"fmt"
	"sort"
	"time"
)

// Restart is a restart of a Redis server without persistence: it began
// (the signal was sent) and the old process had exited by Exited. The old
// process may grant leases until it exits, and every lease it granted is
// gone after.
type Restart struct{ Began, Exited time.Time }

// Options are what Check needs besides the holds.
type Options struct {
	// Restarts are the restarts that the safety model excuses an overlap
	// across: two holds may overlap when one of them was called before a
	// restart's old process exited and the other began after the restart
	// began. Restarts the model does not excuse (a node kept down past the
	// longest lease) are left out.
	Restarts []Restart
	// RestartWindow, if positive, bounds what a restart excuses: only
	// overlaps that began (the second hold verified live) within that long
	// after the old process exited. Redlock's: the longest lease, after
	// which every lease the lost node had granted has run out and its
	// holders have been told (docs/safety.md).
	RestartWindow time.Duration
	// ClockFencesAcrossRestarts: fences stay ordered across an excused
	// restart too, for two holds the second of which was called after the
	// first was last seen live (Redlock's clock floor, docs/safety.md).
	// Without it, a restart excuses a fence that did not grow, as it does
	// an overlap.
	ClockFencesAcrossRestarts bool
	// Logf, if set, is given a summary.
	Logf func(format string, args ...any)
}

// Result is what Check found.
type Result struct {
	Problems []string
	// Overlaps counts the pairs of holds of one key with different tokens
	// whose live intervals overlap (CheckPermits: the starts of trusted
	// intervals at which more than the capacity was held); Excused, those
	// excused by a restart.
	Overlaps, Excused int
}

// Check checks holds:
//   - no two trusted intervals of different holds of one key overlap,
//     except across a restart in o.Restarts;
//   - of two holds one of which ended before the other began, the later has
//     the larger fence.
//
// Holds that were never verified live are left out.
func Check(holds []*Hold, o Options) Result {
	var res Result
	problem := func(format string, args ...any) {
		res.Problems = append(res.Problems, fmt.Sprintf(format, args...))
	}
	logf := o.logf()
	byKey := started(holds, logf)
	describe := func(a, b *Hold) string {
		return fmt.Sprintf("key %s: overlap of %v: client %d (%s, fence %d, called %v before, live %v..%v, trusted until %v, lost %v) and client %d (%s, fence %d, began %v after the first began)",
			a.Key, a.TrustedEnd.Sub(b.Start), a.Client, a.Via, a.Fence, a.Start.Sub(a.Call), 0, a.End.Sub(a.Start), a.TrustedEnd.Sub(a.Start), a.LostCause,
			b.Client, b.Via, b.Fence, b.Start.Sub(a.Start))
	}
	for key, hs := range byKey {
		sort.Slice(hs, func(i, j int) bool { return hs[i].Start.Before(hs[j].Start) })
		for i, a := range hs {
			for _, b := range hs[i+1:] {
				// Successive: fences must increase.
				fenceOrder := func(end time.Time) {
					excused := o.restartBetween(a.Call, b.Start)
					if excused && o.ClockFencesAcrossRestarts && b.Call.After(a.End) {
						excused = false
					}
					if b.Fence <= a.Fence && !excused {
						problem("key %s: fence went from %d (client %d, %s) to %d (client %d, %s) although the first ended %v before the second began",
							key, a.Fence, a.Client, a.Via, b.Fence, b.Client, b.Via, b.Start.Sub(end))
					}
				}
				if b.Start.After(a.End) {
					fenceOrder(a.End)
					continue
				}
				if a.Token == b.Token {
					continue
				}
				res.Overlaps++
				if !a.TrustedAny || !b.TrustedAny || !b.Start.Before(a.TrustedEnd) {
					// Only the watchdog's lateness, not the lease: the
					// leases were successive all the same.
					if a.TrustedAny && b.TrustedAny {
						fenceOrder(a.TrustedEnd)
					}
					continue
				}
				if o.restartBetween(a.Call, b.Start) {
					res.Excused++
					logf("excused by a restart without persistence: %s", describe(a, b))
					continue
				}
				problem("%s", describe(a, b))
			}
		}
	}
	logf("overlaps of live Contexts: %d (of which excused by a restart without persistence: %d)", res.Overlaps, res.Excused)
	return res
}

// restartBetween reports whether a restart may have wiped, before b, a
// lease granted after a. A restart by SIGTERM is acted on only in
// serverCron (up to 1/hz = 100 ms later), the server serving clients
// meanwhile: the old process exits somewhere in [Began, Exited], and a
// lease it granted after the restart began (a Lock called in that window)
// is wiped too.
func (o *Options) restartBetween(a, b time.Time) bool {
	for _, r := range o.Restarts {
		if !r.Exited.Before(a) && r.Began.Before(b) &&
			(o.RestartWindow <= 0 || b.Sub(r.Exited) < o.RestartWindow) {
			return true
		}
	}
	return false
}

// logf returns o.Logf, or a func that logs nothing.
func (o *Options) logf() func(format string, args ...any) {
	if o.Logf == nil {
		return func(string, ...any) {}
	}
	return o.Logf
}

// started returns, by key, the holds that were verified live, and logs
// how late the Locks and the watchdogs were.
func started(holds []*Hold, logf func(format string, args ...any)) map[string][]*Hold {
	byKey := map[string][]*Hold{}
	pastAtStart := 0
	var maxLate, maxLateStart time.Duration
	for _, h := range holds {
		if h.PastAtStart {
			pastAtStart++
			maxLateStart = max(maxLateStart, h.Late)
		} else {
			maxLate = max(maxLate, h.Late)
		}
		if !h.Start.IsZero() {
			byKey[h.Key] = append(byKey[h.Key], h)
		}
	}
	logf("Locks returned with their deadline passed: %d (by up to %v); longest watchdog lateness otherwise: %v", pastAtStart, maxLateStart, maxLate)
	return byKey
}
