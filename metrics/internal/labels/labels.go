// Package labels names the label values that the metrics packages derive
// from dlock's events themselves.
//
// Most values come with the event: its outcome or reason has a String
// method. Two do not: whether an acquisition was a Lock or a TryLock is a
// bool, and whether a re-entry failed is an error. metrics/prometheus and
// metrics/otel export the same metrics and document the same values for
// these two (mode "lock" or "trylock"; re-entry outcome "reentered" or
// "error"), so the values are spelled here once and the two cannot drift
// apart. Being under metrics/internal, nothing outside metrics can import
// it.
package labels

// Mode is the mode of an acquisition: "lock" for Lock (wait is true, as in
// dlock.AcquireStartEvent.Wait), "trylock" for TryLock.
func Mode(wait bool) string {
	if wait {
		return "lock"
	}
	return "trylock"
}

// ReenterOutcome is the outcome of a re-entry: "reentered", or "error" if
// it failed with err (as in dlock.ReenterEvent.Err).
func ReenterOutcome(err error) string {
	if err != nil {
		return "error"
	}
	return "reentered"
}
