package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestBench(t *testing.T) {
	t.Parallel()
	// Long enough for every worker to get turns even on a loaded machine,
	// where setting up four Clients' subscriptions takes a while.
	r := dlockRun(t, nil, "--redis", sharedURL(), "bench", "--duration", "1s", "--goroutines", "4", "--workers", "4", "--json").want(t, 0)
	var rep benchReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, r.stdout)
	}
	u, c := rep.Uncontended, rep.Contended
	if u == nil || c == nil {
		t.Fatalf("bench --json: %s", r.stdout)
	}
	if u.Pairs == 0 || u.PairsPerSecond <= 0 || u.LatencyP50 <= 0 || u.LatencyMax < u.LatencyP99 || u.CommandsPerPair <= 0 || u.ScriptsPerPair < 1 {
		t.Errorf("uncontended: %+v", u)
	}
	if c.Acquisitions == 0 || c.Overlaps != 0 || c.MinPerWorker == 0 || c.WaitMax < c.WaitP50 || c.CommandsPerAcq <= 0 || c.HandoverP50 <= 0 {
		t.Errorf("contended: %+v", c)
	}

	r = dlockRun(t, nil, "--redis", sharedURL(), "bench", "--duration", "100ms", "--goroutines", "0", "--workers", "2").want(t, 0)
	for _, want := range []string{"contended: 2 workers on one key", "acquisitions/s", "never held by two workers at once"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("bench report lacks %q:\n%s", want, r.stdout)
		}
	}
	dlockRun(t, nil, "bench", "--goroutines", "0", "--workers", "0").want(t, exitUsage)
}
