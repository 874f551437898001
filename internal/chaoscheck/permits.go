package chaoscheck

import (
	"fmt"
	"sort"
	"strings"
)

// CheckPermits is Check for holds of permits (Hold.Permits) of semaphores
// of the given capacities, by key (an RWMutex is one of dlock.MaxPermits
// whose writers take them all):
//   - at the start of each hold's trusted interval, and so at any instant,
//     the permits of the holds whose trusted intervals contain it add up
//     to the capacity at most (an RWMutex's writer overlaps no other
//     holder), except when leaving out the holds a restart in o.Restarts
//     may have wiped brings them within it;
//   - a hold called after another was verified live has the larger fence
//     (a grant's fence is greater than every earlier grant's), except
//     across a restart.
//
// Holds that were never verified live are left out.
func CheckPermits(holds []*Hold, capacity map[string]int64, o Options) Result {
	var res Result
	problem := func(format string, args ...any) {
		res.Problems = append(res.Problems, fmt.Sprintf(format, args...))
	}
	logf := o.logf()
	for key, hs := range started(holds, logf) {
		limit, ok := capacity[key]
		if !ok {
			problem("key %s: no capacity given", key)
			continue
		}
		sort.Slice(hs, func(i, j int) bool { return hs[i].Start.Before(hs[j].Start) })
		for i, a := range hs {
			for _, b := range hs[i+1:] {
				if b.Call.After(a.Start) && b.Fence <= a.Fence && !o.restartBetween(a.Call, b.Start) {
					problem("key %s: fence went from %d (client %d, %s) to %d (client %d, %s) although the second was called %v after the first was granted",
						key, a.Fence, a.Client, a.Via, b.Fence, b.Client, b.Via, b.Call.Sub(a.Start))
				}
			}
		}
		var trusted []*Hold // those whose trusted intervals contain the current start
		for _, b := range hs {
			if !b.TrustedAny {
				continue
			}
			trusted = trustedAt(trusted, b)
			sum, wiped := b.Permits, int64(0)
			for _, a := range trusted {
				sum += a.Permits
				if o.restartBetween(a.Call, b.Start) {
					wiped += a.Permits
				}
			}
			if sum <= limit {
				trusted = append(trusted, b)
				continue
			}
			res.Overlaps++
			if sum-wiped <= limit {
				res.Excused++
				logf("excused by a restart without persistence: %s", describeOver(b, trusted, sum, limit))
			} else {
				problem("%s", describeOver(b, trusted, sum, limit))
			}
			trusted = append(trusted, b)
		}
	}
	logf("instants over capacity: %d (of which excused by a restart without persistence: %d)", res.Overlaps, res.Excused)
	return res
}

// trustedAt returns, of the holds in trusted (which began no later than b),
// those whose trusted intervals contain b's start.
func trustedAt(trusted []*Hold, b *Hold) []*Hold {
	kept := trusted[:0]
	for _, a := range trusted {
		if b.Start.Before(a.TrustedEnd) {
			kept = append(kept, a)
		}
	}
	return kept
}

// describeOver describes b's start with others holding sum permits of
// limit.
func describeOver(b *Hold, others []*Hold, sum, limit int64) string {
	var w strings.Builder
	fmt.Fprintf(&w, "key %s: %d permits of %d held when client %d (%s, %d permits, fence %d, called %v before) began; also held by:",
		b.Key, sum, limit, b.Client, b.Via, b.Permits, b.Fence, b.Start.Sub(b.Call))
	for _, a := range others {
		fmt.Fprintf(&w, " client %d (%s, %d permits, fence %d, called %v before, trusted %v more, lost %v);",
			a.Client, a.Via, a.Permits, a.Fence, b.Start.Sub(a.Call), a.TrustedEnd.Sub(b.Start), a.LostCause)
	}
	return w.String()
}
