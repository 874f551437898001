package backend

import (
	"fmt"
	"time"
)

// RetrySchedule spends a Retry's attempts only on the checks it asked for.
// A waiter also checks when woken earlier (a hand-over or release message,
// a nudge after a reconnection, its queue refresh, the holder's lease
// running out); those checks are free, so that FixedRetry(d, n) waits about
// n times d, as its callers expect, however often the waiter wakes.
type RetrySchedule struct {
	Retry   Retry
	attempt int       // the counted checks so far
	due     time.Time // when the next counted check is due; zero at first
}

// Next records a check that began at start and found the lock taken. It
// returns when the Retry wants the next check, or false if it gives up.
func (s *RetrySchedule) Next(start time.Time) (time.Time, bool) {
	if start.Before(s.due) {
		return s.due, true // an early check: free
	}
	s.attempt++
	d, ok := s.Retry.Backoff(s.attempt)
	if !ok {
		return time.Time{}, false
	}
	s.due = start.Add(max(d, MinBackoff))
	if r, ok := s.Retry.(Resumed); ok && s.attempt == 1 {
		// d was read after this check's round trip: counted from start,
		// it would pull the check forward by that long.
		s.due = r.FirstDue()
	}
	return s.due, true
}

// Delay is Next as a wait from now: d, or less if the Retry wants the
// next check sooner; false if it gives up. Without a Retry it is d.
func (s *RetrySchedule) Delay(start time.Time, d time.Duration) (time.Duration, bool) {
	if s.Retry == nil {
		return d, true
	}
	due, ok := s.Next(start)
	if !ok {
		return 0, false
	}
	return min(d, max(time.Until(due), 0)), true
}

// Resumed is a Retry that continues a schedule begun elsewhere (a wait in
// the process, WithLocalQueue): its first counted check is due at a set
// instant, not a delay after the check that found the lock taken.
type Resumed interface {
	FirstDue() time.Time
	// Counted is how many checks the schedule counted before it resumed
	// here, where its first check still belongs to the last of them.
	Counted() int
}

// MinBackoff is the shortest wait before a counted check: a Retry that asks
// for less (a custom one returning 0) would otherwise run the check against
// Redis in a tight loop.
const MinBackoff = time.Millisecond

// Attempts returns how many checks the Retry counted, those of a schedule
// it resumes included: a wait that began in the process reports the same
// count as one spent in Redis alone.
func (s *RetrySchedule) Attempts() int {
	if r, ok := s.Retry.(Resumed); ok && s.attempt > 0 {
		return r.Counted() + s.attempt - 1
	}
	return s.attempt
}

// GaveUp says how many checks a wait made before its Retry gave up.
func GaveUp(checks int) string {
	if checks == 1 {
		return "gave up after 1 check"
	}
	return fmt.Sprintf("gave up after %d checks", checks)
}
