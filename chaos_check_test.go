package dlock

import (
	"testing"
	"time"
)

// TestChaosCheckRestartWindow replays the hold pair of seed
// 1795339274852774726 through the chaos test's check: the first Lock was
// called 75 ms after a restart began (the old server, yet to act on
// SIGTERM, granted it), the second took the lock on the new server 27 ms
// after the first's grant. The restart wiped the first lease: no problem.
func TestChaosCheckRestartWindow(t *testing.T) {
	t0 := time.Now()
	ms := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }
	ch := &chaos{t: t, restarts: [][2]time.Time{{ms(0), ms(100)}}}
	ch.holds = []*chaosHold{
		{key: "k1", token: "a", fence: 1, client: 4, via: "lock", call: ms(75), start: ms(80), end: ms(113), trustedEnd: ms(113), trustedAny: true},
		{key: "k1", token: "b", fence: 2, client: 2, via: "lock", call: ms(90), start: ms(107), end: ms(300), trustedEnd: ms(300), trustedAny: true},
	}
	ch.check()
	for _, p := range ch.problems {
		t.Error(p)
	}
	// Without the restart, the same pair is an overlap.
	ch2 := &chaos{t: t, holds: ch.holds}
	ch2.check()
	if len(ch2.problems) != 1 {
		t.Errorf("without a restart: problems %q, want one overlap", ch2.problems)
	}
}
