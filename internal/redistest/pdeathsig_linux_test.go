package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testutil"
)

// A server gets Pdeathsig so that it dies with the test binary, and only
// then: started from a thread that then ends, it must keep running.
func TestServerOutlivesTheThreadThatStartedIt(t *testing.T) {
	var s *Server
	// Start runs on the ending thread's goroutine, where its t.Fatal
	// may not be called.
	testutil.RunOnEndingThread(t, func() { s = Start(testutil.InGoroutine(t)) })
	if s == nil {
		t.FailNow() // Start failed
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("redis-server killed when the thread that started it exited: PING: %v", err)
	}
}
