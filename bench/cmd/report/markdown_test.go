package main

import (
	"fmt"
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
