package redlock

import (
	"context"
	"testing"
	"time"
)

// The requests of a fanout outlive the caller's cancellation, up to their
// own deadline: Unlock's caller cancelling its context once Unlock returned
// must not cut off the release still on its way to a slow node.
func TestFanoutRequestsOutliveTheCaller(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	rctx, rcancel := detachedTimeout(ctx, time.Minute)
	defer rcancel()
	cancel()
	if err := rctx.Err(); err != nil {
		t.Fatalf("the requests' context ended with the caller's: %v", err)
	}
	if d, ok := rctx.Deadline(); !ok || time.Until(d) < 50*time.Second {
		t.Errorf("the requests' deadline = %v, %v; want a minute from now", d, ok)
	}
}
