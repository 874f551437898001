package backend

// Reacher is a Backend that judges its own Acquire errors for dlock's
// degraded mode. Redlock's: some nodes may have answered while too few
// others could be reached, and such an answer (the lock held elsewhere, an
// error that will not pass, as NOPERM) rules the in-process lock out
// whatever the other nodes' errors, and in whatever order they come.
type Reacher interface {
	// Unreachable reports whether err, an error of Acquire, means that the
	// store could not be reached, judging each of its causes (a node's
	// error) with cause. known is false for an error it leaves to the
	// caller.
	Unreachable(err error, cause func(error) bool) (unreachable, known bool)
}
