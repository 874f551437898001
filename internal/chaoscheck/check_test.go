package chaoscheck

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCheckRestartWindow replays the hold pair of TestChaos's seed
// 1795339274852774726 through Check: the first Lock was called 75 ms after
// a restart began (the old server, yet to act on SIGTERM, granted it), the
// second took the lock on the new server 27 ms after the first's grant. The
// restart wiped the first lease: no problem, unless Options.RestartWindow
// says the restart came too long before the second hold.
func TestCheckRestartWindow(t *testing.T) {
	t0 := time.Now()
	ms := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }
	holds := []*Hold{
		{Key: "k1", Token: "a", Fence: 1, Client: 4, Via: "lock", Call: ms(75), Start: ms(80), End: ms(113), TrustedEnd: ms(113), TrustedAny: true},
		{Key: "k1", Token: "b", Fence: 2, Client: 2, Via: "lock", Call: ms(90), Start: ms(107), End: ms(300), TrustedEnd: ms(300), TrustedAny: true},
	}
	res := Check(holds, Options{Restarts: []Restart{{ms(0), ms(100)}}, Logf: t.Logf})
	for _, p := range res.Problems {
		t.Error(p)
	}
	if res.Overlaps != 1 || res.Excused != 1 {
		t.Errorf("overlaps %d, excused %d; want 1, 1", res.Overlaps, res.Excused)
	}
	// Without the restart, the same pair is an overlap.
	if res := Check(holds, Options{Logf: t.Logf}); len(res.Problems) != 1 {
		t.Errorf("without a restart: problems %q, want one overlap", res.Problems)
	}
	// So it is when the second began later after the restart than the
	// RestartWindow (7 ms here).
	for _, tc := range []struct {
		window   time.Duration
		problems int
	}{{5 * time.Millisecond, 1}, {10 * time.Millisecond, 0}} {
		res := Check(holds, Options{Restarts: []Restart{{ms(0), ms(100)}}, RestartWindow: tc.window})
		if len(res.Problems) != tc.problems {
			t.Errorf("RestartWindow %v: problems %q, want %d", tc.window, res.Problems, tc.problems)
		}
	}
}

// TestCheckFencesAcrossRestart: a fence that did not grow between two
// successive holds is excused by a restart between them, unless
// ClockFencesAcrossRestarts and the second was called after the first was
// last seen live.
func TestCheckFencesAcrossRestart(t *testing.T) {
	t0 := time.Now()
	ms := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }
	hold := func(token string, fence uint64, call, start, end float64) *Hold {
		return &Hold{Key: "k", Token: token, Fence: fence, Via: "lock", Call: ms(call), Start: ms(start), End: ms(end), TrustedEnd: ms(end), TrustedAny: true}
	}
	restarts := []Restart{{ms(20), ms(30)}}
	for _, tc := range []struct {
		name     string
		b        *Hold
		clock    bool
		problems int
	}{
		{"called while the first was live", hold("b", 1, 40, 60, 80), false, 0},
		{"called while the first was live, clock fences", hold("b", 1, 40, 60, 80), true, 0},
		{"called after the first", hold("b", 1, 55, 60, 80), false, 0},
		{"called after the first, clock fences", hold("b", 1, 55, 60, 80), true, 1},
		{"larger fence, clock fences", hold("b", 2, 55, 60, 80), true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			holds := []*Hold{hold("a", 1, 10, 15, 50), tc.b}
			res := Check(holds, Options{Restarts: restarts, ClockFencesAcrossRestarts: tc.clock})
			if len(res.Problems) != tc.problems {
				t.Errorf("problems %q, want %d", res.Problems, tc.problems)
			}
		})
	}
}

// TestCheckFenceAfterTrustedEnd: the second hold began after the first's
// trusted end but while the first's Context was still live (its watchdog
// late, as on a loaded machine). The leases did not overlap, so the second
// must have the larger fence: a fence that did not grow is a problem.
func TestCheckFenceAfterTrustedEnd(t *testing.T) {
	t0 := time.Now()
	ms := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }
	for _, tc := range []struct {
		fence    uint64
		problems int
	}{{1, 1}, {2, 0}} {
		holds := []*Hold{
			{Key: "k", Token: "a", Fence: 1, Via: "lock", Call: ms(0), Start: ms(5), End: ms(70), TrustedEnd: ms(50), TrustedAny: true},
			{Key: "k", Token: "b", Fence: tc.fence, Via: "lock", Call: ms(10), Start: ms(60), End: ms(100), TrustedEnd: ms(100), TrustedAny: true},
		}
		res := Check(holds, Options{Logf: t.Logf})
		if len(res.Problems) != tc.problems {
			t.Errorf("second fence %d: problems %q, want %d", tc.fence, res.Problems, tc.problems)
		}
	}
}
