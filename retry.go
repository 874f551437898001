package dlock

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// RetryStrategy bounds how long Lock waits. Lock asks it, after each failed
// check, how long to sleep before checking again. A waiter also checks when
// woken earlier (a hand-over or release of the lock, a refresh of its place
// in the queue); those checks spend none of the strategy's attempts, so
// FixedRetry(d, n) gives up after about n times d. Strategies hold no
// state: one value can be shared by any number of goroutines and calls.
type RetryStrategy interface {
	// Backoff returns the sleep before re-check number attempt (1, 2, ...)
	// and false when the caller should give up. A sleep under 1 ms counts
	// as 1 ms.
	Backoff(attempt int) (time.Duration, bool)
}

// NoRetry gives up after the first check, like TryLock.
func NoRetry() RetryStrategy { return noRetry{} }

type noRetry struct{}

func (noRetry) Backoff(int) (time.Duration, bool) { return 0, false }

// FixedRetry re-checks every interval, at most maxAttempts times
// (0 means no limit: wait until the context ends). The interval must be
// positive and maxAttempts not negative, or Lock returns ErrInvalidOption.
func FixedRetry(interval time.Duration, maxAttempts int) RetryStrategy {
	return fixedRetry{interval: interval, max: maxAttempts}
}

type fixedRetry struct {
	interval time.Duration
	max      int
}

// validate rejects delays that are zero or negative: Lock would re-run
// its check against Redis in a tight loop.
func (r fixedRetry) validate() error {
	if r.interval <= 0 || r.max < 0 {
		return fmt.Errorf("%w: FixedRetry(%v, %d)", ErrInvalidOption, r.interval, r.max)
	}
	return nil
}

func (r fixedRetry) Backoff(attempt int) (time.Duration, bool) {
	if r.max > 0 && attempt > r.max {
		return 0, false
	}
	return r.interval, true
}

// ExponentialRetry re-checks after delays that double from base up to max,
// each drawn uniformly from [d/2, d] so that waiters spread out, at most
// maxAttempts times (0 means no limit). It needs 0 < base <= max and
// maxAttempts not negative, or Lock returns ErrInvalidOption.
func ExponentialRetry(base, max time.Duration, maxAttempts int) RetryStrategy {
	return exponentialRetry{base: base, max: max, attempts: maxAttempts}
}

type exponentialRetry struct {
	base, max time.Duration
	attempts  int
}

func (r exponentialRetry) validate() error {
	if r.base <= 0 || r.max < r.base || r.attempts < 0 {
		return fmt.Errorf("%w: ExponentialRetry(%v, %v, %d)", ErrInvalidOption, r.base, r.max, r.attempts)
	}
	return nil
}

func (r exponentialRetry) Backoff(attempt int) (time.Duration, bool) {
	if r.attempts > 0 && attempt > r.attempts {
		return 0, false
	}
	d := r.base
	for i := 1; i < attempt && d < r.max; i++ {
		if d > r.max/2 {
			d = r.max // doubling would pass max, or overflow
			break
		}
		d *= 2
	}
	d = min(d, r.max)
	if d <= 1 {
		return d, true
	}
	return d/2 + rand.N(d/2+1), true
}
