package backend

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// NewToken returns a fresh owner token: 128 random bits in hex, so no
// other client can guess it and release or renew a lock it does not hold.
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	return hex.EncodeToString(b[:])
}

// Drift is the safety margin taken off a lease when computing how long the
// holder may trust it: clocks run at slightly different rates, and Redis
// expires keys on its own clock (the Redlock paper's 1% + 2 ms).
func Drift(lease time.Duration) time.Duration {
	return lease/100 + 2*time.Millisecond
}

// Millis converts a duration to whole milliseconds for Redis, rounding up
// so that a lease is never shorter than asked.
func Millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
