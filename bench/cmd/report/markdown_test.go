package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// The "min/max per worker" cell must be one consistent triple: the ratio in
// parentheses is min/max of the numbers shown.
func TestFairnessCellConsistent(t *testing.T) {
	rep := loadReport(t)
	md := markdown(rep, rep.Took)
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "| **dlock** |") && !strings.HasPrefix(line, "| redsync |") {
			continue
		}
		cells := strings.Split(line, " | ")
		if len(cells) < 10 {
			continue
		}
		var mn, mx, f float64
		if _, err := fmt.Sscanf(strings.ReplaceAll(cells[8], ",", ""), "%g/%g (%g)", &mn, &mx, &f); err != nil {
			continue
		}
		t.Logf("%s: %q -> min/max = %.3f, shown %.2f", cells[0], cells[8], mn/mx, f)
		if fmt.Sprintf("%.2f", mn/mx) != fmt.Sprintf("%.2f", f) {
			t.Errorf("%s: cell %q: %g/%g = %.2f, not %.2f", cells[0], cells[8], mn, mx, mn/mx, f)
		}
	}
}

// The committed report is what its raw numbers and notes.md render to:
// notes written into docs/benchmarks.md alone would be lost at the next
// run of the suite, and notes.md edited alone would not reach readers.
func TestCommittedReportMatchesItsSources(t *testing.T) {
	rep := loadReport(t)
	for name, want := range map[string]string{"benchmarks.md": markdown(rep, rep.Took), "benchmarks.svg": chart(rep)} {
		got, err := os.ReadFile("../../../docs/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("docs/%s differs from what benchmarks.json and notes.md render to: regenerate it with `go run ./cmd/report -render ../docs/benchmarks.json` in bench/", name)
		}
	}
}
