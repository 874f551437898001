package main

import (
	"testing"
	"time"
)

// Durations for people (inspect's lease, bench's and demo's timings): 3
// significant digits at most, in the unit that reads best.
func TestHumanDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:             "0s",
		0:                        "0s",
		500 * time.Microsecond:   "0.50ms",
		12345 * time.Microsecond: "12.3ms",
		250 * time.Millisecond:   "250ms",
		1500 * time.Millisecond:  "1.50s",
		90400 * time.Millisecond: "1m30s",
	} {
		if got := human(d); got != want {
			t.Errorf("human(%v) = %q, want %q", d, got, want)
		}
	}
}
