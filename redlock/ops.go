package redlock

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
)

// votes counts, for one lock, the nodes where the token holds it (yes),
// those where it does not (no), and those that did not answer.
type votes struct{ yes, no, unknown int }

// countVotes counts the replies of one call on every node; held says which
// reply means the token holds the lock there.
func countVotes(rs []reply[int64], held func(int64) bool) votes {
	var v votes
	for _, r := range rs {
		switch {
		case !r.ok():
			v.unknown++
		case held(r.val):
			v.yes++
		default:
			v.no++
		}
	}
	return v
}

// outcome turns renewal votes into an outcome. A node that said no never
// says yes again (a renewal does not give a node back a lock it lost), so
// once more than N-quorum said no, a majority is lost for good.
func (b *redlock) outcome(v votes) backend.Outcome {
	switch {
	case v.yes >= b.quorum:
		return backend.Held
	case v.no > len(b.nodes)-b.quorum:
		return backend.NotHeld
	default:
		return backend.Unknown
	}
}

// Renew resets the leases on every node, in one pipelined round trip per
// node, all nodes in parallel. A lease is renewed when a majority reset it;
// lost when more than a minority no longer hold it; else Unknown, and the
// Client's watchdog declares it lost when its validity ends.
func (b *redlock) Renew(ctx context.Context, rs []backend.Renewal) []backend.Renewed {
	return b.renew(ctx, "renew", rs, backend.Lengthen)
}

// renew resets each lease on every node; op names it in errors, mode is
// backend.Lengthen for the watchdog's renewals, or an Extend's number
// (lua/extend.lua). An Unknown outcome's error is an *Error with the
// votes and the nodes' errors.
func (b *redlock) renew(ctx context.Context, op string, rs []backend.Renewal, mode string) []backend.Renewed {
	out := make([]backend.Renewed, len(rs))
	if len(rs) == 0 {
		return out
	}
	shortest := rs[0].TTL
	for _, r := range rs {
		shortest = min(shortest, r.TTL)
	}
	timeout := b.opTimeout(shortest)
	replies := fanout(b, ctx, b.all(), timeout, timeout, func(rctx context.Context, _ int, rdb redis.UniversalClient) ([]int64, error) {
		// A node slower than the majority should still be renewed after
		// the caller stopped waiting and ended ctx (the watchdog does at
		// once): it may need more than one round trip (NOSCRIPT, then
		// the renewals again with the script). Only the deadline counts.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(rctx), timeout)
		defer cancel()
		return renewOn(dctx, rdb, rs, mode)
	}, func(replies []reply[[]int64]) bool {
		for j := range rs {
			if b.outcome(renewVotes(replies, j)) == backend.Unknown {
				return false
			}
		}
		return true
	})
	var nodes []error // the nodes' errors, shared by the renewals left Unknown
	for j, r := range rs {
		v := renewVotes(replies, j)
		if out[j].Outcome = b.outcome(v); out[j].Outcome == backend.Unknown {
			if nodes == nil {
				nodes, _ = nodeErrors(b, replies)
			}
			out[j].Err = &Error{Op: op, Key: r.Lease.Key, Granted: v.yes, Refused: v.no, Unreachable: v.unknown, Nodes: nodes, kind: ErrNoQuorum}
		}
	}
	return out
}

// renewVotes counts the votes on renewal j.
func renewVotes(replies []reply[[]int64], j int) votes {
	var v votes
	for _, rp := range replies {
		switch {
		case !rp.ok() || rp.val[j] < 0:
			v.unknown++
		case rp.val[j] == 1:
			v.yes++
		default:
			v.no++
		}
	}
	return v
}

// renewOn runs extend.lua for every renewal on one node in one pipeline.
// Each value is 1 (extended), 0 (not held there) or -1 (that command
// failed); the error is set when no command got an answer.
func renewOn(ctx context.Context, rdb redis.UniversalClient, rs []backend.Renewal, mode string) ([]int64, error) {
	type send func(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd
	run := func(script send) ([]*redis.Cmd, error) {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(rs))
		for i, r := range rs {
			cmds[i] = script(ctx, pipe, []string{data(r.Lease).keys.lock}, r.Lease.Token, backend.Millis(r.TTL), mode)
		}
		_, err := pipe.Exec(ctx)
		return cmds, err
	}
	cmds, err := run(extendScript.EvalSha)
	if backend.NoScript(err) {
		// The node lost its script cache (a restart, SCRIPT FLUSH): the
		// script itself, which caches it there. Not SCRIPT LOAD, which a
		// hardened server may have renamed away (docs/safety.md).
		cmds, err = run(extendScript.Eval)
	}
	vals := make([]int64, len(cmds))
	answered := false
	for i, c := range cmds {
		v, cerr := c.Int64()
		if backend.WrongType(cerr) {
			v, cerr = 0, nil // the key holds another kind of value: not held there
		}
		if cerr != nil {
			vals[i] = -1
			continue
		}
		answered = true
		vals[i] = v
	}
	if !answered {
		if err == nil {
			err = errors.New("redlock: no reply to the renewals")
		}
		return nil, err
	}
	return vals, nil
}

// Extend resets one lease to ttl on every node; it needs a majority.
func (b *redlock) Extend(ctx context.Context, l *backend.Lease, ttl time.Duration) (backend.Outcome, error) {
	r := b.renew(ctx, "extend", []backend.Renewal{{Lease: l, TTL: ttl}}, l.NextExtend())[0]
	d := data(l)
	switch {
	case r.Outcome == backend.Held:
		d.lease.Store(int64(ttl))
	case r.Outcome == backend.Unknown && int64(ttl) > d.lease.Load():
		// Some nodes may have the longer lease: allow for it.
		d.lease.Store(int64(ttl))
	}
	return r.Outcome, r.Err
}

// errorFrom builds the *Error of an operation whose node replies say yes
// (the token holds the lock there) or no.
func (b *redlock) errorFrom(op, key string, rs []reply[int64], yes func(int64) bool) *Error {
	e := &Error{Op: op, Key: key}
	for _, r := range rs {
		switch {
		case !r.ok():
		case yes(r.val):
			e.Granted++
		default:
			e.Refused++
		}
	}
	e.Nodes, e.Unreachable = nodeErrors(b, rs)
	e.kind = ErrNoQuorum
	return e
}

// ttlStragglerWait bounds how long TTL waits for the other nodes once a
// majority said it holds the lock: nodes that answer do so well within it
// (the longest default per-node timeout).
const ttlStragglerWait = MaxNodeTimeout

// TTL reads the remaining lease: how long a majority keeps the lock if it
// is not renewed, the quorum-th longest of the remaining leases read. Once
// a majority said it holds the lock, the other nodes are waited for up to
// ttlStragglerWait more: their leases may lengthen the answer (the nodes an
// Extend reached first, say, may answer last), but a hung node is not
// waited out while the leases read age.
func (b *redlock) TTL(ctx context.Context, l *backend.Lease) (time.Duration, backend.Outcome, error) {
	d := data(l)
	timeout := d.opTimeout(b)
	held := func(v int64) bool { return v != -3 }
	tally := func(rs []reply[int64]) votes { return countVotes(rs, held) }
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var straggle *time.Timer
	defer func() {
		if straggle != nil {
			straggle.Stop()
		}
	}()
	rs := fanout(b, wctx, b.all(), timeout, timeout, func(ctx context.Context, _ int, rdb redis.UniversalClient) (int64, error) {
		v, err := ttlScript.Run(ctx, rdb, []string{d.keys.lock}, l.Token).Int64()
		if backend.WrongType(err) {
			return -3, nil // another kind of value: not held there, as for a renewal
		}
		return v, err
	}, func(rs []reply[int64]) bool {
		v := tally(rs)
		switch b.outcome(v) {
		case backend.NotHeld:
			return true
		case backend.Held:
			if straggle == nil {
				straggle = time.AfterFunc(ttlStragglerWait, stop)
			}
		}
		return v.unknown == 0
	})
	switch b.outcome(tally(rs)) {
	case backend.NotHeld:
		return 0, backend.NotHeld, nil
	case backend.Unknown:
		return 0, backend.Unknown, b.errorFrom("ttl", l.Key, rs, held)
	}
	var pttls []time.Duration
	for _, r := range rs {
		if r.ok() && held(r.val) {
			p := time.Duration(r.val) * time.Millisecond
			if r.val < 0 {
				p = 0 // no expiry: a key changed behind our back
			}
			pttls = append(pttls, p)
		}
	}
	slices.Sort(pttls)
	slices.Reverse(pttls)
	return pttls[b.quorum-1], backend.Held, nil
}

// Release gives back holds down to level-1 on every node; the last hold
// deletes the lock and wakes the waiters. It returns the holds left when a
// majority held the lock, -1 when a majority did not, and an *Error when
// too few nodes answered to tell.
//
// The releases are sent, and waited for up to the per-node timeout, even
// if ctx has ended: a deferred Unlock with the request's ended context is
// the common case, and a release applied behind the caller's back must not
// be reported as failed (the lock would be given up as release_failed
// while the nodes had released it).
func (b *redlock) Release(ctx context.Context, l *backend.Lease, level int) (int64, error) {
	d := data(l)
	if level == 1 {
		// Only the outermost release frees the nodes: an acquire still on
		// its way to a slower node must not come after it. An inner one
		// keeps the lock held, and the slower nodes must still get it.
		d.sends.stop()
	}
	timeout := d.opTimeout(b)
	held := func(v int64) bool { return v >= 0 }
	rs := fanout(b, context.WithoutCancel(ctx), b.all(), timeout, timeout, func(rctx context.Context, i int, rdb redis.UniversalClient) (int64, error) {
		if level == 1 {
			var cancel context.CancelFunc
			rctx, cancel = d.sends.after(rctx, i, timeout)
			defer cancel()
		}
		v, err := releaseScript.Run(rctx, rdb, []string{d.keys.lock, d.keys.channel}, l.Token, level, "1").Int64()
		if backend.WrongType(err) {
			return -1, nil // another kind of value: not held there, as for a renewal
		}
		return v, err
	}, func(rs []reply[int64]) bool {
		v := countVotes(rs, held)
		return v.yes >= b.quorum || v.no > len(b.nodes)-b.quorum
	})
	yes, no := 0, 0
	left := int64(0)
	for _, r := range rs {
		if r.ok() && held(r.val) {
			yes++
			left = max(left, r.val)
		} else if r.ok() {
			no++
		}
	}
	switch {
	case yes >= b.quorum:
		return left, nil
	case no > len(b.nodes)-b.quorum: // no majority can hold it
		return -1, nil
	}
	return 0, b.errorFrom("unlock", l.Key, rs, held)
}

// Reenter raises the hold count to level on every node that holds the
// lock; it needs a majority. It returns level, or 0 when a majority is
// lost.
func (b *redlock) Reenter(ctx context.Context, l *backend.Lease, level int) (int64, error) {
	d := data(l)
	timeout := d.opTimeout(b)
	held := func(v int64) bool { return v > 0 }
	tally := func(rs []reply[int64]) votes { return countVotes(rs, held) }
	rs := fanout(b, ctx, b.all(), timeout, timeout, func(ctx context.Context, _ int, rdb redis.UniversalClient) (int64, error) {
		v, err := reenterScript.Run(ctx, rdb, []string{d.keys.lock}, l.Token, level).Int64()
		if backend.WrongType(err) {
			return 0, nil // another kind of value: not held there, as for a renewal
		}
		return v, err
	}, func(rs []reply[int64]) bool {
		return b.outcome(tally(rs)) != backend.Unknown
	})
	switch b.outcome(tally(rs)) {
	case backend.NotHeld:
		return 0, nil
	case backend.Unknown:
		return 0, b.errorFrom("re-enter", l.Key, rs, held)
	}
	n := int64(0)
	for _, r := range rs {
		if r.ok() && held(r.val) {
			n = max(n, r.val)
		}
	}
	return n, nil
}
