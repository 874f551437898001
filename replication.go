package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
)

// Replica acknowledgement (WithReplicaAck).
//
// Redis replicates asynchronously: a master can grant a lock, die before
// any replica has the grant, and a promoted replica grants the lock again.
// With WithReplicaAck, every write that grants or prolongs a lock is
// followed by WAIT (WAITAOF on servers that have it and run with
// appendonly), in the same pipelined round trip and so on the same
// connection: WAIT only covers the writes of the connection it is sent on,
// so a WAIT sent separately, on whichever pooled connection, would say
// nothing about the lock's write. On Redis Cluster go-redis would route a
// keyless WAIT to any master, so the script and its WAIT are pipelined on
// the connection pool of the master of the lock's slot
// (ClusterClient.MasterForKey) instead; a write refused with a cluster
// redirection (MOVED, ASK, TRYAGAIN, CLUSTERDOWN: it did not run) is sent again: at
// once to the master that MOVED or ASK names (after ASKING for ASK: during
// a slot migration the keys that moved are on the importing master, which
// serves them only so), else after the client reloaded its slot map.

// ErrNotReplicated means that fewer replicas than WithReplicaAck asks for
// acknowledged the grant or extension of a lock (or of permits) within
// its timeout. With FailClosed, Lock and TryLock (and a Semaphore's or
// RWMutex's acquisitions) return it after releasing the lock again, and
// Extend returns it (the lease is then trusted no further than the last
// acknowledged one, nor than the one asked for), as does Lock.Txn (its
// write was applied on the master, and a failover may lose it).
var ErrNotReplicated = errors.New("dlock: lock write not acknowledged by enough replicas")

// ReplicaPolicy says what a Client does with a lock write that fewer
// replicas than WithReplicaAck asks for acknowledged in time.
type ReplicaPolicy int

const (
	// FailClosed trusts a lock only as far as the replicas have it. An
	// acquisition that was not acknowledged is released again and Lock or
	// TryLock returns an error wrapping ErrNotReplicated. An Extend that
	// was not acknowledged returns such an error, and a renewal that was
	// not acknowledged counts as failed: the watchdog retries it, and the
	// lock is lost (its Context cancelled) if the lease that the replicas
	// have runs out first.
	FailClosed ReplicaPolicy = iota
	// AcceptAndReport keeps the write: the lock is granted, extended or
	// renewed as without WithReplicaAck, and the shortfall is logged as a
	// warning and passed to the WithReplicaReport callback.
	AcceptAndReport
)

// String returns "fail-closed" or "accept-and-report".
func (p ReplicaPolicy) String() string {
	switch p {
	case FailClosed:
		return "fail-closed"
	case AcceptAndReport:
		return "accept-and-report"
	}
	return fmt.Sprintf("ReplicaPolicy(%d)", int(p))
}

// ReplicaReport describes one lock write that fewer replicas than asked
// acknowledged in time (see WithReplicaReport).
type ReplicaReport struct {
	Op     string        // "acquire", "extend", "renew", "release", "txn" (Lock.Txn) or "force release"
	Key    string        // the lock's (or semaphore's, or RWMutex's) name
	Kind   string        // what Key names: "lock", or "semaphore" or "rwmutex" (permits)
	Token  string        // the holder's token (Lock.Token)
	Acked  int           // replicas that acknowledged within the timeout
	Wanted int           // replicas asked for
	Policy ReplicaPolicy // the Client's policy
	Err    error         // the WAIT's own error, if it failed
}

// WithReplicaAck makes the Client wait, after each write that acquires,
// extends, renews or releases a lock (or permits of a Semaphore or
// RWMutex), force releases included, and after each Lock.Txn, until
// replicas replicas acknowledged
// it or timeout passed
// (WAIT replicas timeout; WAITAOF 1 replicas timeout where the server has
// WAITAOF, Redis 7.2+, and runs with appendonly, so that the write is also
// on disk: its replicas must then run with appendonly too, or they never
// acknowledge). policy says what happens to a lock the replicas did not
// acknowledge in time.
//
// It narrows, but does not close, the failover gap of asynchronous
// replication: a replica that acknowledged has the lock, but Sentinel or
// Cluster may still promote one that did not. See docs/safety.md.
//
// Costs: the WAIT travels in the same round trip as the write (a Txn's in
// one of its own, after the EXEC), so a healthy replica adds its
// replication delay (well under a millisecond on a LAN) to every acquire,
// extend, renewal, release and Txn; while fewer than
// replicas replicas are connected each of these waits the whole timeout,
// and with FailClosed no lock can be taken. A renewal then answers only
// after timeout (and up to 100 ms more: Redis checks WAIT timeouts ten
// times a second), so keep leases above 3 x (timeout + 100 ms), or with
// AcceptAndReport too a lock runs out before its renewal answers, and is
// lost. timeout + 100 ms must be at most 3/4 of the Redis client's
// ReadTimeout (go-redis's default is 5 s), since the reply of WAIT is read
// with that deadline; with ContextTimeoutEnabled, at most 3.75 s too,
// since go-redis then also cuts it at the 5 s deadline of a renewal.
// Releases (and force releases) are waited for and reported too, but never
// fail: a release the replicas missed can only keep the lock unavailable
// until its lease ends. A re-entry (Lock or TryLock with a held
// lock's Context) is not waited for: the grant it re-enters was, and a
// count a failover lost matters only to releases, which set the count
// rather than lower it.
// The default is off: no waiting.
//
// It applies to a Client made by New; a Redlock Client ignores it.
func WithReplicaAck(replicas int, timeout time.Duration, policy ReplicaPolicy) Option {
	return func(c *clientConfig) {
		c.replica.on = true
		c.replica.replicas = replicas
		c.replica.timeout = timeout
		c.replica.policy = policy
	}
}

// WithReplicaReport calls fn, synchronously, for every lock write that
// fewer replicas than WithReplicaAck asks for acknowledged in time,
// whatever the policy. It is how a caller using AcceptAndReport learns
// which locks are at risk: match ReplicaReport.Token against Lock.Token.
// fn must be quick and must not call the Client. Without WithReplicaAck,
// New returns an error wrapping ErrInvalidOption.
func WithReplicaReport(fn func(ReplicaReport)) Option {
	return func(c *clientConfig) { c.replica.report = fn }
}

// replicaConfig is what WithReplicaAck and WithReplicaReport set.
type replicaConfig struct {
	on       bool
	replicas int
	timeout  time.Duration
	policy   ReplicaPolicy
	report   func(ReplicaReport)
}

// maxReplicaAckTimeout bounds WithReplicaAck's timeout; the Redis client's
// ReadTimeout usually bounds it further.
const maxReplicaAckTimeout = time.Minute

// waitLate is how late Redis may answer a WAIT whose timeout passed: it
// checks those timeouts ten times a second.
const waitLate = 100 * time.Millisecond

func (r replicaConfig) validate(rdb redis.UniversalClient) error {
	if !r.on {
		if r.report != nil {
			return fmt.Errorf("%w: WithReplicaReport without WithReplicaAck", ErrInvalidOption)
		}
		return nil
	}
	if r.replicas < 1 {
		return fmt.Errorf("%w: WithReplicaAck needs at least 1 replica, got %d", ErrInvalidOption, r.replicas)
	}
	if r.timeout < time.Millisecond || r.timeout > maxReplicaAckTimeout {
		return fmt.Errorf("%w: replica ack timeout %v outside [1ms, %v]", ErrInvalidTTL, r.timeout, maxReplicaAckTimeout)
	}
	if r.policy != FailClosed && r.policy != AcceptAndReport {
		return fmt.Errorf("%w: unknown replica policy %d", ErrInvalidOption, int(r.policy))
	}
	rt, fromCtx := readTimeout(rdb)
	if rt > 0 && r.timeout+waitLate > rt*3/4 {
		return fmt.Errorf("%w: replica ack timeout %v too close to the Redis client's ReadTimeout %v (timeout + %v at most 3/4 of it)",
			ErrInvalidOption, r.timeout, rt, waitLate)
	}
	// With ContextTimeoutEnabled, go-redis cuts a read at its context's
	// deadline too: the renewals and the releases sent on their own
	// (internalTimeout) would fail while WAIT still waits.
	if fromCtx && r.timeout+waitLate > internalTimeout*3/4 {
		return fmt.Errorf("%w: replica ack timeout %v too long for a Redis client with ContextTimeoutEnabled (timeout + %v at most 3/4 of the %v that renewals and background releases are given)",
			ErrInvalidOption, r.timeout, waitLate, internalTimeout)
	}
	return nil
}

// internalTimeout is the shortest time dlock gives a round trip of its own
// that may carry a WAIT: a renewal, the release of Do or of an abandoned
// wait.
const internalTimeout = min(renewTimeout, releaseTimeout)

// readTimeout returns the go-redis client's read deadline (0: none or
// unknown), and whether it also takes deadlines from contexts.
func readTimeout(rdb redis.UniversalClient) (d time.Duration, fromCtx bool) {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ReadTimeout, c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ReadTimeout, c.Options().ContextTimeoutEnabled
	}
	return 0, false
}

// newReplicatedNode is New's backend: a node, with replica acknowledgement
// if the options ask for it. It reads them by applying opts again to a
// fresh clientConfig (options only set fields), since backend.Settings
// carries only what every backend needs.
func newReplicatedNode(rdb redis.UniversalClient, s backend.Settings, opts []Option) (backend.Backend, error) {
	var cfg clientConfig
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if err := cfg.replica.validate(rdb); err != nil {
		return nil, err
	}
	n := newNode(rdb, s)
	if cfg.replica.on {
		n.ack = &acker{replicaConfig: cfg.replica, log: n.log}
	}
	return n, nil
}

// acker sends the WAITs of one node backend and applies its policy.
type acker struct {
	replicaConfig
	log *slog.Logger

	mu  sync.Mutex
	aof *bool // use WAITAOF; nil until the server was asked
}

// ack is what one WAIT (or WAITAOF) said.
type ack struct {
	acked int // replicas that acknowledged
	ok    bool
	err   error // the WAIT failed (no answer, error reply)
}

// both combines the acknowledgements of two round trips.
func (a ack) both(b ack) ack {
	return ack{acked: min(a.acked, b.acked), ok: a.ok && b.ok, err: errors.Join(a.err, b.err)}
}

// masterConn is a client whose pipelines run on one connection to the
// master of the keys sent through it: the node client itself, or on a
// cluster the client of one master.
type masterConn interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// useAOF reports whether to send WAITAOF rather than WAIT: the server has
// it (Redis 7.2+) and the master runs with appendonly. It asks once; an
// error means WAIT, and asking again next time, but for one that will not
// pass (an ACL refusing COMMAND or INFO: NOPERM), which settles it as WAIT:
// else every acknowledged write would ask again, a round trip more each.
// Not a login refused (NOAUTH, WRONGPASS: credentials being rotated), which
// says nothing of the server, or WAITAOF would be dropped for good.
func (a *acker) useAOF(ctx context.Context, conn masterConn) bool {
	a.mu.Lock()
	known := a.aof
	a.mu.Unlock()
	if known != nil {
		return *known
	}
	yes, err := hasAOF(ctx, conn)
	if err != nil && (!backend.Permanent(err) || redis.IsAuthError(err)) {
		return false
	}
	a.mu.Lock()
	a.aof = &yes
	a.mu.Unlock()
	return yes
}

// hasAOF asks conn's server whether it has WAITAOF and runs with
// appendonly.
func hasAOF(ctx context.Context, conn masterConn) (bool, error) {
	info, err := conn.Do(ctx, "COMMAND", "INFO", "WAITAOF").Slice()
	if err != nil || len(info) != 1 || info[0] == nil {
		return false, err
	}
	persistence, err := conn.Do(ctx, "INFO", "persistence").Text()
	if err != nil {
		return false, err
	}
	return strings.Contains(persistence, "aof_enabled:1"), nil
}

// appendWait adds WAIT (or WAITAOF) to pipe and returns how to read it once
// the pipeline ran.
func (a *acker) appendWait(ctx context.Context, pipe redis.Pipeliner, aof bool) func() ack {
	// A pipeline reads every reply with the client's ReadTimeout, so the
	// command's own timeout is not needed (validate keeps it shorter).
	timeout := a.timeout.Milliseconds()
	if aof {
		cmd := pipe.Do(ctx, "WAITAOF", 1, a.replicas, timeout)
		return func() ack {
			v, err := cmd.Int64Slice()
			if err != nil || len(v) != 2 {
				return ack{err: fmt.Errorf("WAITAOF: %v %w", v, err)}
			}
			return ack{acked: int(v[1]), ok: v[0] >= 1 && int(v[1]) >= a.replicas}
		}
	}
	cmd := pipe.Do(ctx, "WAIT", a.replicas, timeout)
	return func() ack {
		v, err := cmd.Int64()
		if err != nil {
			return ack{err: fmt.Errorf("WAIT: %w", err)}
		}
		return ack{acked: int(v), ok: int(v) >= a.replicas}
	}
}

// call is one script call to run and acknowledge.
type call struct {
	s    *redis.Script
	keys []string
	args []any

	cmd *redis.Cmd // its reply, once run
	ack ack        // what the WAIT after it said

	to     masterConn // where a redirection sent it; nil: its key's master
	asking bool       // precede it with ASKING (an ASK redirection)
}

// exec sends calls to conn followed by WAIT (if wait), in one pipelined
// round trip on one connection. Calls refused with NOSCRIPT (they did not
// run) are sent again with EVAL, followed by another WAIT.
func (a *acker) exec(ctx context.Context, conn masterConn, calls []*call, wait bool) {
	aof := wait && a.useAOF(ctx, conn)
	todo := calls
	for try := 0; try < 2 && len(todo) > 0; try++ {
		pipe := conn.Pipeline()
		for _, c := range todo {
			if c.asking {
				pipe.Do(ctx, "asking")
			}
			if try == 0 {
				c.cmd = c.s.EvalSha(ctx, pipe, c.keys, c.args...)
			} else {
				c.cmd = c.s.Eval(ctx, pipe, c.keys, c.args...)
			}
		}
		read := func() ack { return ack{ok: true} }
		if wait {
			read = a.appendWait(ctx, pipe, aof)
		}
		execPipeline(ctx, pipe)
		got := read()
		var again []*call
		for _, c := range calls {
			if try == 0 {
				c.ack = got
			} else {
				// A later write on the master is replicated after the
				// earlier ones, but the second WAIT may have run on
				// another connection: count only what both confirm.
				c.ack = c.ack.both(got)
			}
		}
		for _, c := range todo {
			if backend.NoScript(c.cmd.Err()) {
				again = append(again, c)
			}
		}
		todo = again
	}
}

// maxRedirectRetries bounds how often runAcked sends a call again after a
// cluster redirection.
const maxRedirectRetries = 4

// runAcked runs each call on the master of its first key and waits for the
// replicas after it, on the same connection. The calls of one master share
// one round trip; different masters are reached concurrently.
func (n *node) runAcked(ctx context.Context, calls []*call) { n.runOnMasters(ctx, calls, true) }

// runOnMasters is runAcked, with the WAIT only if wait. On a ClusterClient
// the calls go to the masters' own clients (MasterForKey), never through
// the ClusterClient's command routing: see attempt.leave.
func (n *node) runOnMasters(ctx context.Context, calls []*call, wait bool) {
	cc, cluster := n.rdb.(*redis.ClusterClient)
	todo := calls
	for attempt := 0; ; attempt++ {
		groups := make(map[masterConn][]*call)
		for _, c := range todo {
			var conn masterConn = n.rdb
			if c.to != nil {
				conn = c.to
			} else if cluster {
				mc, err := cc.MasterForKey(ctx, c.keys[0])
				if err != nil {
					c.cmd = redis.NewCmd(ctx)
					c.cmd.SetErr(err)
					continue
				}
				conn = mc
			}
			groups[conn] = append(groups[conn], c)
		}
		var wg sync.WaitGroup
		var panicked atomic.Pointer[backend.Panic]
		for conn, cs := range groups {
			if len(groups) == 1 {
				n.ack.exec(ctx, conn, cs, wait)
				break
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if p := backend.Run(func() { n.ack.exec(ctx, conn, cs, wait) }); p != nil {
					panicked.Store(p)
				}
			}()
		}
		wg.Wait()
		// A panic on a master's goroutine (a go-redis hook's) goes on in
		// the caller's, once every master has answered, as it would have
		// with a single master.
		panicked.Load().Raise()
		if cluster {
			// MasterForKey reads the cached slot map, which go-redis reloads
			// on its own only for commands it routed itself: a master that
			// is down (failed over to a replica) would be asked forever.
			for _, c := range todo {
				var re redis.Error
				if err := c.cmd.Err(); err != nil && !errors.As(err, &re) {
					cc.ReloadState(ctx)
					break
				}
			}
		}
		if !cluster || attempt == maxRedirectRetries {
			return
		}
		var again []*call
		followed := true // every call goes where a redirection named
		masters := make(map[string]*redis.Client)
		for _, c := range todo {
			err := c.cmd.Err()
			if c.to == nil && failedOver(ctx, cc, c.keys[0], err) {
				// The master we knew is dead and another has its slot
				// (failedOver reloaded the slot map): ask that one.
				again = append(again, c)
				continue
			}
			if !isRedirect(err) {
				continue
			}
			again = append(again, c)
			c.to, c.asking = nil, false
			if addr, ask, ok := redirectTarget(err); ok {
				mc, seen := masters[addr]
				if !seen {
					mc = masterAt(ctx, cc, addr)
					masters[addr] = mc
				}
				if mc != nil {
					c.to, c.asking = mc, ask
					continue
				}
			}
			followed = false
		}
		if len(again) == 0 {
			return
		}
		// The slot moved or is moving: retry the calls that did not run,
		// at once where MOVED or ASK named the master to ask (masterAt
		// reloaded the slot map), else after refreshing the slot map.
		if !followed {
			cc.ReloadState(ctx)
			t := time.NewTimer(time.Duration(10<<(2*attempt)) * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		todo = again
	}
}

// redirectTarget returns the address a MOVED or ASK error names ("MOVED
// 3999 127.0.0.1:6381"), and whether it is an ASK.
func redirectTarget(err error) (addr string, ask bool, ok bool) {
	f := strings.Fields(err.Error())
	if len(f) != 3 || (f[0] != "MOVED" && f[0] != "ASK") {
		return "", false, false
	}
	return f[2], f[0] == "ASK", true
}

// masterAt returns the client of the master at addr (reloading the slot
// map), or nil if the ClusterClient knows no such master.
func masterAt(ctx context.Context, cc *redis.ClusterClient, addr string) *redis.Client {
	var mu sync.Mutex
	var found *redis.Client
	_ = cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		if c.Options().Addr == addr {
			mu.Lock()
			found = c
			mu.Unlock()
		}
		return nil
	})
	return found
}

// isRedirect reports a cluster error meaning the command did not run here.
func isRedirect(err error) bool {
	return redirected(err) || redis.IsTryAgainError(err) || redis.IsClusterDownError(err)
}

// check applies the policy to one acknowledged write of a held lease, w
// (its Op, Key, Token and Kind): nil if the replicas have it or the
// policy accepts it, else an error wrapping ErrNotReplicated. A shortfall
// is logged and reported either way.
func (a *acker) check(got ack, w ReplicaReport) error {
	if !a.short(got, w) {
		return nil
	}
	return a.refusal(got)
}

// refusal is the error of a write whose ack got falls short: nil if the
// policy accepts it.
func (a *acker) refusal(got ack) error {
	if a.policy == AcceptAndReport {
		return nil
	}
	err := fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, got.acked, a.replicas, a.timeout)
	if got.err != nil {
		// Not wrapped: a fail-closed lock must not look like an unreachable
		// Redis (which WithDegradedMode would answer with a local lock).
		err = fmt.Errorf("%w (%v)", err, got.err)
	}
	return err
}

// short reports whether got falls short of the replicas asked for, and if
// so logs and reports it, completing w. A good ack needs no acker (nil
// without WithReplicaAck).
func (a *acker) short(got ack, w ReplicaReport) bool {
	if !a.reported(got, &w) {
		return false
	}
	a.logShort([]ReplicaReport{w})
	return true
}

// reported is short without the log record: the caller logs w, completed
// here, with the other shortfalls of its round (logShort).
func (a *acker) reported(got ack, w *ReplicaReport) bool {
	if got.ok {
		return false
	}
	w.Acked, w.Wanted, w.Policy, w.Err = got.acked, a.replicas, a.policy, got.err
	if a.report != nil {
		a.report(*w)
	}
	return true
}

// logShort logs the shortfalls ws of one round of writes: one record per
// op and outcome (replicas acknowledged, error), with the number of locks
// and the first one's key, not one per lock, so that a replica gone while
// many locks are renewed does not log a warning per lock every round. A
// renewal refused so (FailClosed) is a failed renewal, which the watchdog
// logs as one (a warning for a lock's first, Debug for its retries): its
// record here is at Debug, or each retry would warn again.
func (a *acker) logShort(ws []ReplicaReport) {
	same := func(w ReplicaReport) string { return fmt.Sprint(w.Op, "\x00", w.Acked, "\x00", w.Err) }
	for _, g := range tally(ws, same) {
		w := g.first
		level := slog.LevelWarn
		if w.Op == "renew" && w.Policy == FailClosed {
			level = slog.LevelDebug
		}
		attrs := []slog.Attr{slog.String("op", w.Op), slog.String("key", w.Key), slog.String("kind", w.Kind), slog.String("token", w.Token),
			slog.Int("locks", g.n), slog.Int("acked", w.Acked), slog.Int("wanted", w.Wanted), slog.String("policy", w.Policy.String())}
		a.log.LogAttrs(context.Background(), level, "dlock: lock write not acknowledged by enough replicas", withError(attrs, w.Err)...)
	}
}

// written names the write op of a's lease, for check.
func (a *attempt) written(op string) ReplicaReport {
	return ReplicaReport{Op: op, Key: a.r.Key, Token: a.r.Token, Kind: kindOf(a.r.Permits)}
}

// leaseWritten names the write op of lease l, for check.
func leaseWritten(op string, l *backend.Lease) ReplicaReport {
	return ReplicaReport{Op: op, Key: l.Key, Token: l.Token, Kind: kindOf(leaseKeys(l).permits)}
}

// tryAcquire runs the acquire script once, followed by WAIT if the Client
// asks for replica acknowledgement (the WAIT then covers a grant made by
// this call, even one whose caller stopped waiting for it). waiting says
// it is a check made again while the caller waits (waitingCall, counted
// in ops).
func (n *node) tryAcquire(ctx context.Context, k *lockKeys, args []any, waiting bool, ops *sync.WaitGroup) ([]int64, ack, error) {
	if n.ack == nil {
		var cmd *redis.Cmd
		if waiting {
			cmd = n.batch.runWaiting(ctx, ops, k.scripts().acquire, k.args[:], args...)
		} else {
			cmd = n.batch.run(ctx, k.scripts().acquire, k.args[:], args...)
		}
		res, err := cmd.Int64Slice()
		return res, ack{ok: true}, err
	}
	c := &call{s: k.scripts().acquire.script, keys: k.all(), args: args}
	if !waiting {
		n.runAcked(ctx, []*call{c})
	} else if err := waitingCall(ctx, ops, n.log, func(ctx context.Context) error { n.runAcked(ctx, []*call{c}); return c.cmd.Err() }); err != nil {
		return nil, ack{}, err
	}
	res, err := c.cmd.Int64Slice()
	return res, c.ack, err
}

// taken finishes an acquisition that the acquire script granted itself:
// with FailClosed, a grant the replicas did not acknowledge is released
// again.
func (a *attempt) taken(ctx context.Context, got ack, fence uint64, start time.Time) (backend.Grant, error) {
	if a.n.ack != nil {
		if err := a.n.ack.check(got, a.written("acquire")); err != nil {
			a.abandon(ctx)
			return backend.Grant{}, fmt.Errorf("dlock: %s %q: %w", kindOf(a.r.Permits), a.r.Key, err)
		}
	}
	return a.grant(fence, start, a.r.TTL, start)
}

// handedOver finishes an acquisition that a release handed over to this
// waiter, with a lease of ttl that Redis started after since, most likely
// at began (hold times count from there). That grant was written by the
// releasing client, so a WAIT on our connection says nothing about it:
// with replica acknowledgement, the lease is set again (to the full lease,
// from now) and that write is waited for. done is false if the lock turned
// out not to be ours any more (it was force-released meanwhile): the
// caller checks again.
func (a *attempt) handedOver(ctx context.Context, fence uint64, since time.Time, ttl time.Duration, began time.Time) (g backend.Grant, done bool, err error) {
	if a.n.ack == nil {
		g, err = a.grant(fence, since, ttl, began)
		return g, true, err
	}
	// The full lease, as a grant of our own: we are alive to set it, so
	// the queue TTL's short one (for a waiter that died) is not needed, and
	// would run out before a renewal after this WAIT answered, which waits
	// as long again. A renewal's lengthening sets it, and writes even in
	// the same millisecond, for the WAIT to cover.
	c := &call{s: a.keys.scripts().extend, keys: []string{a.keys.lock}, args: []any{a.r.Token, backend.Millis(a.r.TTL), backend.Lengthen}}
	set := time.Now()
	// Sent only while waiting: a cancelled caller does not wait for it
	// (waitingCall), and leaves after it (abandon), giving the lock back.
	err = waitingCall(ctx, a.r.Ops, a.n.log, func(ctx context.Context) error { a.n.runAcked(ctx, []*call{c}); return c.cmd.Err() })
	var v int64
	if err == nil {
		v, err = c.cmd.Int64()
	}
	switch {
	case err != nil:
		if fl := (inFlightError{}); errors.As(err, &fl) {
			a.inflight = fl.done
		}
		a.abandon(ctx)
		return backend.Grant{}, true, redisError(kindOf(a.r.Permits), a.r.Key, err)
	case v != 1:
		return backend.Grant{}, false, nil
	}
	if err := a.n.ack.check(c.ack, a.written("acquire")); err != nil {
		a.abandon(ctx)
		return backend.Grant{}, true, fmt.Errorf("dlock: %s %q: %w", kindOf(a.r.Permits), a.r.Key, err)
	}
	g, err = a.grant(fence, set, a.r.TTL, set)
	return g, true, err
}

// extendAcked is Extend with replica acknowledgement: with FailClosed an
// extension the replicas did not acknowledge returns Held with an error, so
// that the lock keeps trusting only its previous lease.
func (n *node) extendAcked(ctx context.Context, l *backend.Lease, ttl time.Duration) (backend.Outcome, error) {
	k := leaseKeys(l)
	c := &call{s: k.scripts().extend, keys: []string{k.lock}, args: []any{l.Token, backend.Millis(ttl), l.NextExtend()}}
	n.runAcked(ctx, []*call{c})
	o, err := extendOutcome(c.cmd.Int64())
	if o != backend.Held {
		return o, err
	}
	return o, n.ack.check(c.ack, leaseWritten("extend", l))
}

// renewAcked is Renew with replica acknowledgement: with FailClosed a
// renewal the replicas did not acknowledge is Unknown (retried soon; the
// lock's deadline stays that of the last acknowledged lease).
func (n *node) renewAcked(ctx context.Context, rs []backend.Renewal) []backend.Renewed {
	calls := make([]*call, len(rs))
	for i, r := range rs {
		k := leaseKeys(r.Lease)
		calls[i] = &call{s: k.scripts().extend, keys: []string{k.lock}, args: []any{r.Lease.Token, backend.Millis(r.TTL), backend.Lengthen}}
	}
	n.runAcked(ctx, calls)
	out := make([]backend.Renewed, len(rs))
	var short []ReplicaReport // logged together: one round, however many locks
	for i, c := range calls {
		out[i] = renewed(c.cmd.Int64())
		if w := leaseWritten("renew", rs[i].Lease); out[i].Outcome == backend.Held && n.ack.reported(c.ack, &w) {
			short = append(short, w)
			if err := n.ack.refusal(c.ack); err != nil {
				out[i] = backend.Renewed{Outcome: backend.Unknown, Err: err}
			}
		}
	}
	n.ack.logShort(short)
	return out
}

// releaseAcked is Release with replica acknowledgement. A shortfall is
// reported but not an error: the release happened, and a replica promoted
// without it only keeps the lock unavailable until its lease runs out.
func (n *node) releaseAcked(ctx context.Context, l *backend.Lease, level int) (int64, error) {
	k := leaseKeys(l)
	c := &call{s: k.scripts().release.script, keys: k.all(), args: []any{l.Token, k.releaseArg(level)}}
	n.runAcked(ctx, []*call{c})
	left, err := c.cmd.Int64()
	if err == nil && left == 0 {
		n.ack.short(c.ack, leaseWritten("release", l))
	}
	return left, err
}

// runForce runs an operator's force release, followed by WAIT if the
// Client asks for replica acknowledgement. As with a release, a shortfall
// is only reported (by the caller, with short: the holder was removed, and
// a replica promoted without that brings the stuck lock back until its
// lease ends); without acknowledgement the ack is a good one.
func (n *node) runForce(ctx context.Context, s *redis.Script, keys []string, args ...any) (*redis.Cmd, ack) {
	if n.ack == nil {
		// Sent again to a master promoted since, as a release is: run
		// twice, the second finds nothing to remove (ErrNotHeld) only if
		// the first reached the dead master and its replica in between.
		cmd := followFailover(ctx, n.rdb, keys[0], func() *redis.Cmd { return s.Run(ctx, n.rdb, keys, args...) })
		return cmd, ack{ok: true}
	}
	c := &call{s: s, keys: keys, args: args}
	n.runAcked(ctx, []*call{c})
	return c.cmd, c.ack
}
