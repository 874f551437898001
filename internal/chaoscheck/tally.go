package chaoscheck

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Settings returns a chaos test's seed and run time: CHAOS_SEED replays a
// run whose seed was logged, CHAOS_DURATION (a Go duration) replaces def.
func Settings(t *testing.T, def time.Duration) (seed uint64, dur time.Duration) {
	t.Helper()
	dur = def
	if s := os.Getenv("CHAOS_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		dur = d
	}
	seed = uint64(time.Now().UnixNano())
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d, duration %v", seed, dur)
	return seed, dur
}

// Tally collects, from the traffic's and the faults' goroutines, what a
// chaos run found wrong (problems, the first 200) and counts of what it
// did (in maps of the test's own).
type Tally struct {
	mu       sync.Mutex
	problems []string
}

// Problem records something the run found wrong.
func (y *Tally) Problem(format string, args ...any) {
	y.mu.Lock()
	defer y.mu.Unlock()
	if len(y.problems) < 200 {
		y.problems = append(y.problems, fmt.Sprintf(format, args...))
	}
}

// Problems returns what Problem recorded.
func (y *Tally) Problems() []string {
	y.mu.Lock()
	defer y.mu.Unlock()
	return append([]string(nil), y.problems...)
}

// Count adds one to (*m)[k], making the map if need be. Every use of *m
// during the run goes through Count.
func (y *Tally) Count(m *map[string]int, k string) {
	y.mu.Lock()
	defer y.mu.Unlock()
	if *m == nil {
		*m = map[string]int{}
	}
	(*m)[k]++
}

// CheckErr counts err, if any, in errKinds by op and kind (Classify); an
// error of no known kind is a problem.
func (y *Tally) CheckErr(errKinds *map[string]int, op string, err error, sentinels []error) {
	if err == nil {
		return
	}
	kind, ok := Classify(err, sentinels)
	if !ok {
		y.Problem("%s: untyped error %T: %v", op, err, err)
		return
	}
	y.Count(errKinds, op+": "+kind)
}
