package backend

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fixed struct {
	d   time.Duration
	max int
}

func (f fixed) Backoff(attempt int) (time.Duration, bool) { return f.d, attempt <= f.max }

// Early checks (a waiter woken by messages or its refresh) spend nothing:
// only the checks at or after the due time count.
func TestRetryScheduleCountsOnlyDueChecks(t *testing.T) {
	s := RetrySchedule{Retry: fixed{time.Second, 2}}
	t0 := time.Now()
	due, ok := s.Next(t0)
	if !ok || !due.Equal(t0.Add(time.Second)) {
		t.Fatalf("first check: due %v, %v", due.Sub(t0), ok)
	}
	for _, early := range []time.Duration{time.Millisecond, 300 * time.Millisecond, 999 * time.Millisecond} {
		if d, ok := s.Next(t0.Add(early)); !ok || !d.Equal(due) {
			t.Fatalf("early check at %v moved the schedule: %v, %v", early, d.Sub(t0), ok)
		}
	}
	if s.Attempts() != 1 {
		t.Fatalf("attempts = %d after one due check and three early ones", s.Attempts())
	}
	if d, ok := s.Next(t0.Add(time.Second)); !ok || !d.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("second due check: %v, %v", d.Sub(t0), ok)
	}
	if _, ok := s.Next(t0.Add(2 * time.Second)); ok {
		t.Fatal("the third due check did not give up (at most 2 attempts)")
	}
	if s.Attempts() != 3 {
		t.Fatalf("attempts = %d, want 3", s.Attempts())
	}
}

// A Retry asking for no wait (a custom one) still gets MinBackoff: the
// waiter must not run its check against Redis in a tight loop.
func TestRetryScheduleWaitsAtLeastMinBackoff(t *testing.T) {
	s := RetrySchedule{Retry: fixed{0, 5}}
	t0 := time.Now()
	if due, ok := s.Next(t0); !ok || !due.Equal(t0.Add(MinBackoff)) {
		t.Fatalf("a zero backoff: next check due %v after, %v; want %v", due.Sub(t0), ok, MinBackoff)
	}
}

func TestGaveUpCountsChecks(t *testing.T) {
	for checks, want := range map[int]string{1: "gave up after 1 check", 3: "gave up after 3 checks"} {
		if got := GaveUp(checks); got != want {
			t.Errorf("GaveUp(%d) = %q, want %q", checks, got, want)
		}
	}
}

// resumed continues, in this schedule, a fixed one that counted n checks
// elsewhere.
type resumed struct {
	fixed
	n   int
	due time.Time
}

func (r resumed) FirstDue() time.Time { return r.due }
func (r resumed) Counted() int        { return r.n }
func (r resumed) Backoff(attempt int) (time.Duration, bool) {
	if attempt == 1 {
		return time.Until(r.due), true
	}
	return r.fixed.Backoff(attempt - 1 + r.n)
}

// A resumed schedule counts the checks made before it too: the count it
// gives up with is the one the Retry gave up at.
func TestRetryScheduleCountsResumedChecks(t *testing.T) {
	t0 := time.Now()
	s := RetrySchedule{Retry: resumed{fixed: fixed{time.Second, 4}, n: 3, due: t0.Add(time.Second)}}
	next := t0
	for {
		due, ok := s.Next(next)
		if !ok {
			break
		}
		next = due
	}
	// Checks 1 to 3 before, then 4 and 5 here; Backoff(5) gives up.
	if s.Attempts() != 5 {
		t.Fatalf("attempts = %d, want 5", s.Attempts())
	}
}
