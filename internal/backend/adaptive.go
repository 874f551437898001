package backend

import (
	"context"
	"time"
)

// HoldRecorder is an optional interface of a Backend that keeps, in its
// store, a moving average of how long each key's locks are held, for
// dlock.WithAdaptiveTTL. A Backend without it (Redlock) makes adaptive
// locks fall back to their fixed lease.
type HoldRecorder interface {
	// HoldStats reads the key's hold-time statistics (zero Samples if none).
	HoldStats(ctx context.Context, key string) (HoldStats, error)
	// ReleaseRecording does what Release does and then records held as one
	// more hold time of l's key (not if the release itself failed).
	ReleaseRecording(ctx context.Context, l *Lease, level int, held time.Duration) (int64, error)
}

// HoldStats are a key's recent hold times: exponentially weighted moving
// averages of the hold time and of its deviation from that average (as TCP
// estimates round-trip times, RFC 6298).
type HoldStats struct {
	Mean    time.Duration
	Dev     time.Duration
	Samples int64
}
