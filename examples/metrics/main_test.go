package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRun(t *testing.T) {
	srv := redistest.Start(t)
	var out strings.Builder
	// Traffic for a second: every worker (one of them alone on "report")
	// finishes some Do calls, even on a loaded machine.
	if err := run(context.Background(), srv.Addr(), "127.0.0.1:0", time.Second, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`dlock_acquisitions_total{group="order",kind="lock",mode="lock",outcome="acquired"}`,
		`dlock_acquisitions_total{group="report",kind="lock",mode="lock",outcome="acquired"}`,
		`dlock_hold_seconds_count{group="order",kind="lock"}`,
		`dlock_acquire_wait_seconds_sum{group="order",kind="lock"`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %s:\n%s", want, out.String())
		}
	}
}
