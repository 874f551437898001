package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/backend"
)

const (
	// Lock returns ErrNoQuorum once a majority of the nodes has failed
	// noQuorumTries attempts in a row over noQuorumFor at least: a node
	// that just came back can take go-redis a second to reconnect to.
	noQuorumTries = 3
	noQuorumFor   = 2 * time.Second
	// maxBackoffShift bounds the growth of the random retry delay: at most
	// RetryDelay << maxBackoffShift.
	maxBackoffShift = 4
	// fallbackWait bounds a waiter's sleep when no holder's remaining lease
	// is known (for example, the lock key has no expiry).
	fallbackWait = time.Second
	// endedReleaseWait bounds the wait for a failed attempt's release once
	// the caller's ctx has ended: a node that answers does so well within
	// it (the longest default per-node timeout), and a hung one is not
	// waited out.
	endedReleaseWait = MaxNodeTimeout
)

// Acquire takes the lock on a majority of the nodes, waiting if r.Wait.
func (b *redlock) Acquire(ctx context.Context, r backend.Request) (backend.Grant, error) {
	if r.Permits != nil {
		return backend.Grant{}, fmt.Errorf("dlock: %s %q: %w: needs one Redis deployment, not Redlock (%w)", r.Permits.Kind, r.Key, dlock.ErrInvalidOption, errors.ErrUnsupported)
	}
	if err := ctx.Err(); err != nil {
		// Send nothing: an attempt stops waiting for the nodes at once,
		// and its release may reach a node before its acquire does,
		// leaving a hold nobody owns for the whole lease.
		return backend.Grant{}, fmt.Errorf("redlock: lock %q: waiting ended: %w", r.Key, err)
	}
	if b.begin() {
		defer b.ops.Done()
	}
	k := b.keys(r.Key)
	// What the waiters' channel had seen before the first attempt: a release
	// published after it must not be missed by a waiter that joins later.
	var gen uint64
	var confirmed bool
	if r.Wait {
		gen, confirmed = b.hub.snapshot(k.channel)
	}
	var w *waiter
	defer func() {
		if w != nil {
			w.leave()
		}
	}()
	token := r.Token
	noQuorum, backoff := 0, 0
	var noQuorumSince time.Time
	retry := backend.RetrySchedule{Retry: r.Retry}
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			// A fresh token per attempt: a release of an earlier attempt
			// still on its way to a slow node cannot remove this one's hold.
			token = backend.NewToken()
		}
		if w != nil {
			// The release of this attempt's partial holds publishes its
			// token, and the message can come before the attempt returns.
			w.attempt()
		}
		start := time.Now()
		res := b.try(ctx, r, k, token)
		if res.err == nil {
			return res.grant, nil
		}
		switch {
		case ctx.Err() != nil:
			return backend.Grant{}, fmt.Errorf("redlock: lock %q: waiting ended: %w", r.Key, ctx.Err())
		case b.isClosed():
			return backend.Grant{}, fmt.Errorf("redlock: lock %q: %w", r.Key, dlock.ErrClosed)
		case !r.Wait, res.hopeless:
			return backend.Grant{}, res.err
		}
		if res.noQuorum {
			if noQuorum++; noQuorum == 1 {
				noQuorumSince = time.Now()
			}
			if noQuorum >= noQuorumTries && time.Since(noQuorumSince) >= noQuorumFor {
				res.err.detail += fmt.Sprintf(", %d attempts in a row over %v", noQuorum, time.Since(noQuorumSince).Round(time.Millisecond))
				return backend.Grant{}, res.err
			}
		} else {
			noQuorum = 0
		}

		var delay time.Duration
		if res.blocked {
			// Sleep until a release wakes us, or enough of the other holds'
			// leases would run out without renewal to free a majority.
			backoff = 0
			delay = fallbackWait
			if res.freeIn >= 0 {
				delay = res.freeIn + time.Millisecond
			}
		} else {
			// A race between contenders, or nodes failing: back off for a
			// random time so that the next attempts do not collide again,
			// growing while nothing changes (a node stays down).
			delay = randUpTo(grow(b.retryDelay, min(backoff, maxBackoffShift)))
			backoff++
			if res.pttl >= 0 {
				delay = min(delay, res.pttl+time.Millisecond)
			}
		}
		var ok bool
		if delay, ok = retry.Delay(start, delay); !ok {
			res.err.detail += "; " + backend.GaveUp(retry.Attempts())
			return backend.Grant{}, res.err
		}
		if w == nil {
			w = b.hub.join(k.channel, gen, confirmed)
		}
		// Only a blocked waiter listens for releases: one backing off after
		// a race or with nodes down retries after its delay anyway, and
		// waking it on every failed attempt of the others would make the
		// waiters wake each other in a loop.
		var wake <-chan struct{}
		if w != nil {
			var owners map[string]int
			if res.blocked {
				owners, wake = res.owners, w.wake
			}
			w.attempted(owners)
		}
		timer := time.NewTimer(delay)
		select {
		case <-wake:
			timer.Stop()
			// Every waiter of this key woke: spread their attempts out.
			if !b.sleep(ctx, randUpTo(b.retryDelay/10)) && ctx.Err() == nil {
				return backend.Grant{}, fmt.Errorf("redlock: lock %q: %w", r.Key, dlock.ErrClosed)
			}
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
		case <-b.done:
			timer.Stop()
			return backend.Grant{}, fmt.Errorf("redlock: lock %q: %w", r.Key, dlock.ErrClosed)
		}
		if ctx.Err() != nil {
			return backend.Grant{}, fmt.Errorf("redlock: lock %q: waiting ended: %w", r.Key, ctx.Err())
		}
	}
}

func (b *redlock) isClosed() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// grow returns d << shift, or the longest duration if that overflows.
func grow(d time.Duration, shift int) time.Duration {
	if d > math.MaxInt64>>shift {
		return math.MaxInt64
	}
	return d << shift
}

// randUpTo returns a random duration in [0, d].
func randUpTo(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	if d == math.MaxInt64 {
		return rand.N(d) // d + 1 would overflow
	}
	return rand.N(d + 1)
}

// tryResult is the outcome of one Redlock attempt.
type tryResult struct {
	grant    backend.Grant
	err      *Error         // nil: granted
	noQuorum bool           // too few nodes answered to decide
	blocked  bool           // other owners hold the lock on a majority
	pttl     time.Duration  // the least remaining lease of the other owners' holds; -1 if none was read
	owners   map[string]int // the other owners' tokens: on how many nodes each refused
	// freeIn, when blocked: how soon a majority of the nodes could be
	// free, the holds that refused running out one by one; -1 if not known
	// (a hold without expiry). The shortest lease frees only a minority
	// when the leases differ (a renewal that reached some of the nodes),
	// and an attempt then would be refused again.
	freeIn time.Duration
	// hopeless: a majority cannot be had, because too many nodes answered
	// with an error that will not pass (backend.Permanent): a value that
	// is not a lock at its name (dlock.ErrWrongType), an ACL that refuses
	// the scripts or the keys (NOPERM), a command unknown. Waiting would
	// not end.
	hopeless bool
}

// acquireReply is a node's answer to acquire.lua.
type acquireReply struct {
	granted bool
	counter uint64        // granted: the node's fence counter
	nowUs   uint64        // granted: the node's clock in microseconds
	pttl    time.Duration // refused: the other owner's remaining lease
	owner   string        // refused: the other owner's token
}

// try makes one Redlock attempt: acquire on every node in parallel; with a
// majority granted in time, store the new fence on the granting nodes; on
// any failure, release on every node that may have granted it.
func (b *redlock) try(ctx context.Context, r backend.Request, k keys, token string) tryResult {
	start := time.Now() // before the first request: the validity counts from here
	timeout := b.acquireTimeout(r.TTL)
	n, q := len(b.nodes), b.quorum
	lease := backend.Millis(r.TTL)
	// The requests to the nodes not waited for go on; they are given up
	// before this attempt's holds are released (at once if it fails, else
	// by Release), and each release waits for its node's request: see
	// acquireSends. Not by the caller's cancellation: once a majority
	// granted the lock, the caller may end ctx, and the slower nodes must
	// still get it.
	sends, actx := newAcquireSends(len(b.nodes))
	rs := fanout(b, ctx, b.all(), timeout, timeout, func(ctx context.Context, i int, rdb redis.UniversalClient) (acquireReply, error) {
		defer close(sends.done[i])
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		defer context.AfterFunc(actx, cancel)()
		if err := actx.Err(); err != nil {
			// Given up before it started (AfterFunc cancels on a
			// goroutine of its own, maybe later): not sent at all.
			return acquireReply{}, err
		}
		v, err := acquireScript.Run(ctx, rdb, []string{k.lock, k.fence}, token, lease, r.Meta).Slice()
		if err != nil {
			return acquireReply{}, err
		}
		rp, err := parseAcquire(v)
		sends.granted[i] = err == nil && rp.granted
		return rp, err
	}, func(rs []reply[acquireReply]) bool {
		// Stop at a majority granted. A failure waits for every node (up to
		// the timeout), to release wherever it was granted and to report
		// every node's vote.
		granted := 0
		for _, r := range rs {
			if r.ok() && r.val.granted {
				granted++
			}
		}
		return granted >= q
	})
	validity := func() time.Duration { return r.TTL - time.Since(start) - backend.Drift(r.TTL) }

	var granted []int
	refused := 0
	owners := make(map[string]int)
	pttl := time.Duration(-1) // 0 is a lease in its last millisecond
	var leases []time.Duration
	var fence, clock uint64
	for i, rp := range rs {
		switch {
		case !rp.ok():
		case rp.val.granted:
			granted = append(granted, i)
			fence = max(fence, rp.val.counter)
			clock = max(clock, rp.val.nowUs)
		default:
			refused++
			owners[rp.val.owner]++
			leases = append(leases, rp.val.pttl)
			if p := rp.val.pttl; p >= 0 && (pttl < 0 || p < pttl) {
				pttl = p
			}
		}
	}
	errs, unreachable := nodeErrors(b, rs)
	// The votes as the error reports them: a granting node that then did
	// not answer the fence counts as unreachable.
	nGranted, answered := len(granted), len(granted)+refused
	// The new fence is above every counter of the granting nodes and at
	// least their latest clock reading (see docs/safety.md).
	fence = max(fence+1, clock)
	detail := ""
	if len(granted) >= q {
		if validity() <= 0 {
			detail = "the majority came too late: the validity had run out"
		} else {
			var late []int // not waited for: they may grant yet
			for i, rp := range rs {
				if rp.asked && !rp.answered {
					late = append(late, i)
				}
			}
			stored, ferrs, lost := b.storeFence(ctx, k, token, fence, granted, late, sends, timeout)
			if stored >= q && validity() > 0 {
				d := &lockData{keys: k, sends: sends}
				d.lease.Store(int64(r.TTL))
				l := &backend.Lease{Key: r.Key, Token: token, Data: d}
				return tryResult{grant: backend.Grant{Lease: l, Fence: fence, Start: start, TTL: r.TTL}}
			}
			detail = fmt.Sprintf("the fence was stored on %d nodes only", stored)
			if stored >= q {
				detail = "the validity ran out while storing the fence"
			}
			for i, e := range ferrs {
				if e != nil && errs[i] == nil {
					errs[i] = e
				}
			}
			// The granting nodes that did not answer the fence are
			// unreachable now: they count as such, not as granted.
			nGranted -= lost
			unreachable += lost
			answered -= lost
		}
	}

	// Failed. Release wherever we may hold the lock: the nodes that granted
	// it, and those that did not answer (they may have granted it). The
	// release wakes the waiters on each node it frees (release.lua
	// publishes only when it deletes the lock), a late grant's too: it may
	// have blocked some meanwhile. Unless another owner holds a majority:
	// then nothing changed for them, and waking them would only make them
	// retry.
	majorityOwner := false
	for _, c := range owners {
		if c >= q {
			majorityOwner = true
		}
	}
	sends.stop()
	var mayHold []int
	for i, rp := range rs {
		if !rp.ok() || rp.val.granted {
			mayHold = append(mayHold, i)
		}
	}
	b.releaseAttempt(ctx, k, token, mayHold, !majorityOwner, sends, timeout, b.opTimeout(r.TTL))

	res := tryResult{blocked: refused >= q, pttl: pttl, owners: owners, freeIn: -1}
	if res.blocked {
		res.freeIn = freeIn(leases, n, q)
	}
	permanent := 0
	for _, e := range errs {
		if backend.Permanent(e) {
			permanent++
		}
	}
	res.hopeless = permanent > n-q
	kind := dlock.ErrNotObtained
	if answered < q {
		kind, res.noQuorum = ErrNoQuorum, true
	}
	if detail == "" {
		switch {
		case majorityOwner:
			detail = "held by another owner"
		case res.hopeless:
			detail = fmt.Sprintf("%d of %d nodes answered with an error that will not pass: no majority possible", permanent, n)
		case res.noQuorum:
			detail = fmt.Sprintf("%d of %d nodes answered, %d needed", answered, n, q)
		case refused > 0:
			detail = "no majority: held elsewhere or taken by competing attempts"
		default:
			detail = "no majority"
		}
	}
	res.err = &Error{
		Op: "lock", Key: r.Key,
		Granted: nGranted, Refused: refused, Unreachable: unreachable,
		Nodes: errs, kind: kind, detail: detail,
	}
	return res
}

// freeIn returns how soon a majority of n nodes could be free when the
// holds that refused an attempt have the given remaining leases (-1: no
// expiry) and the other nodes are free: when the (q - (n - refused))-th
// shortest of them runs out; -1 if that one has no expiry.
func freeIn(leases []time.Duration, n, q int) time.Duration {
	slices.SortFunc(leases, func(a, b time.Duration) int {
		switch {
		case a < 0 && b < 0:
			return 0
		case a < 0:
			return 1 // no expiry: after every lease
		case b < 0:
			return -1
		}
		return cmp.Compare(a, b)
	})
	return leases[q-(n-len(leases))-1]
}

func parseAcquire(v []any) (acquireReply, error) {
	num := func(i int) (int64, error) {
		if i >= len(v) {
			return 0, fmt.Errorf("redlock: short reply from acquire.lua: %v", v)
		}
		switch n := v[i].(type) {
		case int64:
			return n, nil
		case string:
			// A fence counter of 2^53 or more, exact as a decimal string.
			if c, err := strconv.ParseInt(n, 10, 64); err == nil {
				return c, nil
			}
		}
		return 0, fmt.Errorf("redlock: unexpected reply from acquire.lua: %v", v)
	}
	status, err := num(0)
	if err != nil {
		return acquireReply{}, err
	}
	a, err := num(1)
	if err != nil {
		return acquireReply{}, err
	}
	if status == 1 {
		c, err := num(2)
		if err != nil {
			return acquireReply{}, err
		}
		return acquireReply{granted: true, counter: uint64(max(a, 0)), nowUs: uint64(max(c, 0))}, nil
	}
	owner := ""
	if len(v) > 2 {
		owner, _ = v[2].(string)
	}
	return acquireReply{pttl: time.Duration(a) * time.Millisecond, owner: owner}, nil
}

// storeFence writes the fence to the granting nodes while the token holds
// them there, and returns on how many it was stored, each granting node's
// error, and how many of them did not answer (or answered with an error).
// The late nodes, whose acquire requests were not waited for, get it too
// once they granted, in the background and not counted: stored on the
// first majority only, the counter would lag behind on the others, and a
// later majority sharing only a node that restarted empty since would
// read counters below this fence (see docs/safety.md).
func (b *redlock) storeFence(ctx context.Context, k keys, token string, fence uint64, nodes, late []int, sends *acquireSends, timeout time.Duration) (int, []error, int) {
	q := b.quorum
	f := strconv.FormatUint(fence, 10)
	rs := fanout(b, ctx, slices.Concat(nodes, late), timeout, timeout, func(ctx context.Context, i int, rdb redis.UniversalClient) (int64, error) {
		if slices.Contains(late, i) {
			// After its acquire, which may not have been sent yet.
			var cancel context.CancelFunc
			ctx, cancel = sends.after(ctx, i, timeout)
			defer cancel()
			if !sends.granted[i] {
				return 0, nil
			}
		}
		return fenceScript.Run(ctx, rdb, []string{k.lock, k.fence}, token, f).Int64()
	}, func(rs []reply[int64]) bool {
		// Stop at a majority stored. A failure waits for every granting
		// node (up to the timeout), as the acquisition does: a node not
		// waited for would be reported unreachable, and the attempt
		// ErrNoQuorum.
		stored, answered := 0, 0
		for _, i := range nodes {
			if rs[i].answered {
				answered++
			}
			if rs[i].ok() && rs[i].val == 1 {
				stored++
			}
		}
		return stored >= q || answered == len(nodes)
	})
	stored, failed := 0, 0
	errs := make([]error, len(rs))
	for i, r := range rs {
		switch {
		case slices.Contains(late, i):
			// Not counted: it granted after the attempt stopped waiting.
		case r.ok() && r.val == 1:
			stored++
		case r.asked && r.err != nil:
			errs[i] = b.nodeError(i, r.err)
			failed++
		case r.asked && r.val == 0:
			errs[i] = &NodeError{Node: i, Addr: b.nodes[i].addr, Err: fmt.Errorf("lost the lock before its fence was stored")}
		case r.asked:
			errs[i] = &NodeError{Node: i, Addr: b.nodes[i].addr, Err: fmt.Errorf("fence counter already at %d or more", fence)}
		}
	}
	return stored, errs, failed
}

// releaseAttempt releases the token's hold on the given nodes after a
// failed attempt, waiting for them up to the timeout, and at most
// endedReleaseWait once ctx has ended: its caller gave up, and no next
// attempt needs the nodes freed. The requests themselves may take up to
// life, each after its node's acquire request (sends), in the background
// if not waited for (counted for Close by fanout).
func (b *redlock) releaseAttempt(ctx context.Context, k keys, token string, nodes []int, wake bool, sends *acquireSends, timeout, life time.Duration) {
	if len(nodes) == 0 {
		return
	}
	pub := "0"
	if wake {
		pub = "1"
	}
	wctx, stop := endsAfter(ctx, endedReleaseWait)
	defer stop()
	// The requests outlive the wait (sends.after detaches them): a slow
	// node should still drop the hold.
	rs := fanout(b, wctx, nodes, timeout, life, func(ctx context.Context, i int, rdb redis.UniversalClient) (int64, error) {
		ctx, cancel := sends.after(ctx, i, life)
		defer cancel()
		return releaseScript.Run(ctx, rdb, []string{k.lock, k.channel}, token, 1, pub).Int64()
	}, nil)
	for i, r := range rs {
		// One not answered yet may still be applied.
		if r.answered && r.err != nil {
			b.log.Debug("redlock: release after a failed attempt failed; the hold expires with its lease",
				"key", k.name, "kind", "lock", "node", b.nodes[i].addr, "error", r.err)
		}
	}
}

// acquireSends are an attempt's acquire requests, one per node. A release
// must not overtake one: sent on another connection while the acquire is
// still on its way (written, but not answered), it could reach the node
// first and find nothing to release, and the acquire would then leave a
// hold nobody owns for the whole lease (on a majority, the lock itself).
// So a release to a node waits until its acquire request has returned.
// stop gives up the requests not sent yet, so that they never go out; one
// it cuts short after it was written (go-redis with ContextTimeoutEnabled)
// returns at once, and its release then follows it on another connection,
// after it: only a network that reorders packets across connections could
// still deliver the release first. Waiting for every reply instead would
// send the requests stop now spares, each a hold until its release.
type acquireSends struct {
	stop context.CancelFunc // gives up the requests not sent yet
	done []chan struct{}    // done[i] is closed once node i's request returned
	// granted[i], set before done[i] is closed: node i granted the lock.
	granted []bool
}

// newAcquireSends returns the sends of an attempt on n nodes, and the
// context whose end (stop) gives up those not sent yet.
func newAcquireSends(n int) (*acquireSends, context.Context) {
	ctx, stop := context.WithCancel(context.Background())
	s := &acquireSends{stop: stop, done: make([]chan struct{}, n), granted: make([]bool, n)}
	for i := range s.done {
		s.done[i] = make(chan struct{})
	}
	return s, ctx
}

// after waits until node i's acquire request has returned, and returns the
// context of a release to that node: ctx's values, and d from then (the
// wait does not eat the release's time).
func (s *acquireSends) after(ctx context.Context, i int, d time.Duration) (context.Context, context.CancelFunc) {
	<-s.done[i]
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}
