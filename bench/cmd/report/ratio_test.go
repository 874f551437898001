package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/bench"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func loadReport(t *testing.T) *Report {
	t.Helper()
	raw, err := os.ReadFile("../../../docs/benchmarks.json")
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	return &rep
}

// "x ceiling" must be a ratio that some run showed: the median over runs of
// (pairs/s / that run's ceiling), not median(pairs/s) / median(ceiling),
// which divides numbers taken from different runs.
func TestCeilingRatioPerRun(t *testing.T) {
	rep := loadReport(t)
	var rs []float64
	for _, run := range rep.Runs {
		u, ok := run.Uncontended["dlock"]
		if c := run.Ceiling.Pairs(); ok && c > 0 {
			rs = append(rs, u.PerSec/c)
		}
	}
	want := fmt.Sprintf("%.2f", newStat(rs).Med)
	md := markdown(rep, rep.Took)
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "| **dlock** | **") && strings.Count(line, "|") == 13 {
			cells := strings.Split(line, " | ")
			t.Logf("per-run ratios %.3f; x ceiling cell %q", rs, cells[2])
			if cells[2] != want {
				t.Errorf("x ceiling of dlock: shown %s, median of the runs' ratios %s", cells[2], want)
			}
		}
		if strings.HasPrefix(line, "| uncontended pairs/s >= 0.75 x ceiling") && !strings.Contains(line, "(x"+want) {
			t.Errorf("target row %q: the runs' ratios have median x%s", line, want)
		}
	}
}

// Without contention a library's README and tuned setups run the same code
// (the first try succeeds), so they are two draws of one number. The best
// other library must not be the luckier of the two draws.
func TestBestOtherPoolsSameCodePath(t *testing.T) {
	run := func(dl, a, at float64) Run {
		return Run{Uncontended: map[string]bench.UncontendedResult{
			"dlock": {PerSec: dl}, "lib": {PerSec: a}, "lib tuned": {PerSec: at},
		}}
	}
	rep := &Report{
		Setups: []SetupInfo{{Name: "dlock", Lib: "dlock"}, {Name: "lib", Lib: "lib", Mode: "readme"}, {Name: "lib tuned", Lib: "lib", Mode: "tuned"}},
		// Same code, noise only: 90/110/100 and 110/95/105.
		Runs: []Run{run(100, 90, 110), run(100, 110, 95), run(100, 100, 105)},
	}
	md := markdown(rep, 0)
	// Pooled over both setups' runs: median of 90 95 100 105 110 110 = 102.5.
	want := "(x0.98)"
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "| uncontended pairs/s >= best other library") {
			t.Log(line)
			if !strings.Contains(line, want) {
				t.Errorf("best other is the max of two draws of one code path: %q, pooled gives %s", line, want)
			}
		}
	}
}
