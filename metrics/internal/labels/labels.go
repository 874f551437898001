// Package labels names the label values that the metrics packages derive
// from dlock's events themselves.
//
// Most values come with the event: its outcome or reason has a String
// method. Three do not: whether an acquisition was a Lock or a TryLock is a
// bool, whether a re-entry failed is an error, and an event's Kind is any
// string (the label keeps to dlock's three). metrics/prometheus and
// metrics/otel export the same metrics and document the same values for
// these (mode "lock" or "trylock"; re-entry outcome "reentered" or
// "error"; kind "lock", "semaphore" or "rwmutex"), so the values are
// spelled here once and the two cannot drift apart. Being under
// metrics/internal, nothing outside metrics can import it.
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

// Kinds of what an event's key names (dlock's events' Kind field): a label
// value is one of these or "other", so a hand-made event cannot add series.
const (
	KindLock      = "lock"
	KindSemaphore = "semaphore"
	KindRWMutex   = "rwmutex"
	KindOther     = "other"
)

// Kind is the kind label of an event of that Kind: the kind itself, or
// KindOther for one dlock does not make. A re-entry has no Kind (only
// locks re-enter): its kind is KindLock.
func Kind(kind string) string {
	switch kind {
	case KindLock, KindSemaphore, KindRWMutex:
		return kind
	}
	return KindOther
}
