package redlock

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/backend"
)

// SetPubSubHealth sets the health check of the pub/sub connections of the
// Clients made from now on, until t ends: a test that waits for it waits a
// fraction of a second, not the default's seconds.
func SetPubSubHealth(t testing.TB, idle, wait time.Duration) {
	old := pubSubHealth
	pubSubHealth = backend.PubSubHealth{Idle: idle, Wait: wait}
	t.Cleanup(func() { pubSubHealth = old })
}

// SetLinger sets how long the Clients made from now on keep a channel
// subscribed after its last waiter left, until t ends.
func SetLinger(t testing.TB, d time.Duration) {
	old := linger
	linger = d
	t.Cleanup(func() { linger = old })
}
