package redlock

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dlock-go/dlock/internal/backend"
)

// Errors of this package; the rest are dlock's (dlock.ErrNotObtained and
// so on). Match them with errors.Is.
var (
	// ErrNoQuorum: too few nodes answered to decide: a majority of them
	// failed or did not answer within the per-node timeout. Lock returns it
	// (in an *Error) instead of dlock.ErrNotObtained when the lock may be
	// free but a majority cannot be reached; at once, without waiting,
	// when so many nodes answered with an error that waiting will not end
	// (NOPERM, WRONGTYPE) that no majority is left. dlock's degraded mode
	// (LocalFallback) takes it for Redis unreachable only if no node said
	// the lock is held elsewhere and every node's error is one of a node
	// down, hung or unable to serve for now (not NOPERM, say, nor a request
	// that panicked in a go-redis hook).
	ErrNoQuorum = errors.New("redlock: no majority of nodes answered")
	// ErrNodeTimeout is the error of a node that did not answer within the
	// per-node timeout, in an *Error's Nodes. It is a net.Error whose
	// Timeout is true, as go-redis's own timeouts are.
	ErrNodeTimeout error = nodeTimeout{}
)

// nodeTimeout is ErrNodeTimeout: a timeout, so that callers (dlock's
// degraded mode) see a node that did not answer as unreachable.
type nodeTimeout struct{}

func (nodeTimeout) Error() string   { return "redlock: no reply within the per-node timeout" }
func (nodeTimeout) Timeout() bool   { return true }
func (nodeTimeout) Temporary() bool { return true }

// Error is a Redlock call that did not get a majority. It counts how the
// nodes voted and lists each node's error. errors.Is matches its kind
// (dlock.ErrNotObtained when other owners hold the lock or contenders
// split the vote, ErrNoQuorum when a majority did not answer) and the
// nodes' errors; errors.As finds it.
type Error struct {
	Op  string // "lock", "unlock", "extend", "renew" (the watchdog), "ttl", "re-enter"
	Key string // the lock's name

	// The votes. Granted: nodes where the caller's token holds the lock
	// (for Lock: nodes that granted it). Refused: nodes where it does not
	// (for Lock: another owner holds it there). Unreachable: nodes that
	// returned an error or did not answer within the per-node timeout, and
	// those whose request panicked (a go-redis hook's bug, logged; the
	// node's error names the panic).
	Granted, Refused, Unreachable int
	// Nodes has one entry per node, in the order given to New: nil where
	// the node answered, else a *NodeError.
	Nodes []error

	kind   error
	detail string
}

// Error says what happened, with the votes and the failed nodes' errors.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "redlock: %s %q: %v", e.Op, e.Key, e.kind)
	if e.detail != "" {
		b.WriteString(": " + e.detail)
	}
	n := len(e.Nodes)
	if e.Op == "lock" {
		fmt.Fprintf(&b, " (of %d nodes: %d granted, %d held elsewhere, %d unreachable)", n, e.Granted, e.Refused, e.Unreachable)
	} else {
		fmt.Fprintf(&b, " (of %d nodes: %d held, %d not held, %d unreachable)", n, e.Granted, e.Refused, e.Unreachable)
	}
	for _, ne := range e.Nodes {
		if ne != nil {
			b.WriteString("; " + ne.Error())
		}
	}
	return b.String()
}

// Unwrap returns the kind of failure and the nodes' errors.
func (e *Error) Unwrap() []error {
	errs := []error{e.kind}
	for _, ne := range e.Nodes {
		if ne != nil {
			errs = append(errs, ne)
		}
	}
	return errs
}

// NodeError is the error of one node.
type NodeError struct {
	Node int    // index in the nodes given to New
	Addr string // the node's address, as its client knows it
	Err  error  // what the node answered, or ErrNodeTimeout
}

// Error names the node and its error.
func (e *NodeError) Error() string {
	return fmt.Sprintf("node %d (%s): %v", e.Node, e.Addr, e.Err)
}

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

var _ backend.Reacher = (*redlock)(nil)

// Unreachable tells dlock's degraded mode whether an acquisition failed
// because the nodes could not be reached: only an ErrNoQuorum with no node
// saying that the lock is held elsewhere and every node's error one of an
// unreachable node (cause: down, hung, or cannot serve for now). A node
// that answered with an error that will not pass (NOPERM, WRONGTYPE) is a
// configuration error the caller must see, not a reason to lock in-process.
func (b *redlock) Unreachable(err error, cause func(error) bool) (bool, bool) {
	var e *Error
	if !errors.As(err, &e) || e.Op != "lock" {
		return false, false
	}
	if e.kind != ErrNoQuorum || e.Refused > 0 {
		return false, true
	}
	for _, ne := range e.Nodes {
		if ne != nil && !cause(ne) {
			return false, true
		}
	}
	return true, true
}
