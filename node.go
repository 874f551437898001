package dlock

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
)

// node is the backend of a Client on one Redis deployment: a server, a
// Sentinel-managed master or a Redis Cluster. Its state lives in the keys
// of keys.go, changed only by the scripts in lua/.
type node struct {
	rdb      redis.UniversalClient
	prefix   string
	queueTTL time.Duration
	log      *slog.Logger
	wake     *wakeups
	closed   chan struct{} // closed by Close: waiters give up
	ack      *acker        // nil unless WithReplicaAck (replication.go)
	batch    *batcher      // sends concurrent acquires and releases together (batch.go)
	// id names this node's hand-over channels: a waiter's queue entry
	// records it, so a release wakes only the Client the next waiter is in.
	id string
}

func newNode(rdb redis.UniversalClient, s backend.Settings) *node {
	return &node{rdb: rdb, prefix: s.Prefix, queueTTL: s.QueueTTL, log: s.Log, wake: newWakeups(rdb), closed: make(chan struct{}),
		batch: newBatcher(rdb, s.Log), id: backend.NewToken()[:16]}
}

func leaseKeys(l *backend.Lease) *lockKeys { return l.Data.(*lockKeys) }

// Renew resets all the leases in one pipelined round trip.
func (n *node) Renew(ctx context.Context, rs []backend.Renewal) []backend.Renewed {
	if n.ack != nil {
		return n.renewAcked(ctx, rs)
	}
	cmds := n.renew(ctx, rs)
	n.renewFailedOver(ctx, rs, cmds)
	// A server that lost its script cache (restart, SCRIPT FLUSH, a
	// promoted replica: scripts are not replicated) refused those renewals
	// with NOSCRIPT: they did not run. They are sent again with the script
	// itself, which caches it there. Not SCRIPT LOAD: on a cluster it goes
	// to every node, replicas included, and one that does not answer would
	// fail the renewals on a healthy master until their locks are lost.
	var again redis.Pipeliner
	for i, cmd := range cmds {
		if backend.NoScript(cmd.Err()) {
			if again == nil {
				again = n.rdb.Pipeline()
			}
			r := rs[i]
			k := leaseKeys(r.Lease)
			cmds[i] = k.scripts().extend.Eval(ctx, again, []string{k.lock}, r.Lease.Token, backend.Millis(r.TTL), backend.Lengthen)
		}
	}
	if again != nil {
		execPipeline(ctx, again)
	}
	out := make([]backend.Renewed, len(rs))
	reloaded := false
	for i, cmd := range cmds {
		out[i] = renewed(cmd.Int64())
		if out[i].Outcome == backend.Unknown && !reloaded {
			reloaded = reloadSlots(ctx, n.rdb, cmd.Err()) // once per batch
		}
	}
	return out
}

// renewFailedOver sends the renewals of cmds that could not dial their
// master again, to the master promoted since, if the reloaded slot map
// names one (as followFailover does for one command), and puts their
// replies in cmds: go-redis gave up on the dead master after seconds of
// dial retries, and the watchdog would try again only a tenth of the lease
// later, all of it time off the lease. The slot map is reloaded once for
// the batch. Twice is as once: a renewal sets the same lease.
func (n *node) renewFailedOver(ctx context.Context, rs []backend.Renewal, cmds []*redis.Cmd) {
	cc, ok := n.rdb.(*redis.ClusterClient)
	if !ok {
		return
	}
	var again []int
	reloaded := false
	for i, cmd := range cmds {
		dead, ok := dialFailed(cmd.Err())
		if !ok {
			continue
		}
		if !reloaded {
			if reloadSlotMap(ctx, cc) != nil {
				return
			}
			reloaded = true
		}
		if m, err := cc.MasterForKey(ctx, leaseKeys(rs[i].Lease).lock); err == nil && m.Options().Addr != dead {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return
	}
	sub := make([]backend.Renewal, len(again))
	for j, i := range again {
		sub[j] = rs[i]
	}
	for j, cmd := range n.renew(ctx, sub) {
		cmds[again[j]] = cmd
	}
}

// RenewGroup names the server that renews l: on Redis Cluster, the master
// of its slot (the watchdog renews each master's locks in a round trip of
// their own); elsewhere, the one server.
func (n *node) RenewGroup(l *backend.Lease) string {
	cc, ok := n.rdb.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	m, err := cc.MasterForKey(context.Background(), leaseKeys(l).lock)
	if err != nil {
		return ""
	}
	return m.Options().Addr
}

// reloadSlots asks a ClusterClient to reload its slot map after err, a
// failure that is not a Redis reply (the node did not answer, or not in
// time). go-redis reloads the map on its own only after MOVED or READONLY,
// and otherwise every ClusterStateReloadInterval (a minute by default):
// after a failover, the commands it routes to the dead master's slots keep
// going to the dead address until then. The reload is asynchronous and
// coalesced, so one more than needed costs little. It reports whether it
// asked.
func reloadSlots(ctx context.Context, rdb redis.UniversalClient, err error) bool {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok || err == nil || errors.As(err, new(redis.Error)) || errors.As(err, new(notSentError)) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	cc.ReloadState(ctx)
	return true
}

// reloadSlotMap reloads cc's slot map and returns once it has
// (ReloadState only starts a reload): ForEachMaster reloads it first.
func reloadSlotMap(ctx context.Context, cc *redis.ClusterClient) error {
	return cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil })
}

// reloadedSlotMap reloads rdb's slot map if it is a ClusterClient's, and
// reports whether it did.
func reloadedSlotMap(ctx context.Context, rdb redis.UniversalClient) bool {
	cc, ok := rdb.(*redis.ClusterClient)
	return ok && reloadSlotMap(ctx, cc) == nil
}

// failedOver reports, after err, a failure to dial the master of key (a
// *string or a string), whether a reloaded slot map names another master
// for it now. It reloads the map before it returns.
func failedOver(ctx context.Context, rdb redis.UniversalClient, key any, err error) bool {
	cc, ok := rdb.(*redis.ClusterClient)
	dead, dialed := dialFailed(err)
	if !ok || !dialed {
		return false
	}
	name, ok := key.(string)
	if p, isPtr := key.(*string); isPtr {
		name, ok = *p, true
	}
	if !ok {
		return false
	}
	if reloadSlotMap(ctx, cc) != nil {
		return false
	}
	m, mErr := cc.MasterForKey(ctx, name)
	return mErr == nil && m.Options().Addr != dead
}

// dialFailed reports whether err is a failure to dial a server, and its
// address.
func dialFailed(err error) (addr string, ok bool) {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" || op.Addr == nil {
		return "", false
	}
	return op.Addr.String(), true
}

// followFailover sends a command for the master of key (as failedOver
// takes it) with send, and sends it once more if that master could not be
// dialled and the cluster has promoted another since: a Client idle
// through the failover still had the dead master in its slot map, which
// go-redis would not reload for up to a minute. The command may run twice
// (a retry by go-redis may have reached the old master before it died):
// only commands that allow it are sent so.
func followFailover(ctx context.Context, rdb redis.UniversalClient, key any, send func() *redis.Cmd) *redis.Cmd {
	cmd := send()
	if reloadSlots(ctx, rdb, cmd.Err()) && failedOver(ctx, rdb, key, cmd.Err()) {
		cmd = send()
		reloadSlots(ctx, rdb, cmd.Err())
	}
	return cmd
}

// renew sends the renewals in one pipeline; each command has its outcome.
func (n *node) renew(ctx context.Context, rs []backend.Renewal) []*redis.Cmd {
	pipe := n.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(rs))
	for i, r := range rs {
		k := leaseKeys(r.Lease)
		cmds[i] = k.scripts().extend.EvalSha(ctx, pipe, []string{k.lock}, r.Lease.Token, backend.Millis(r.TTL), backend.Lengthen)
	}
	execPipeline(ctx, pipe)
	return cmds
}

// outcome reads the reply of extend.lua: 1 extended, 0 not held. A
// WRONGTYPE reply is an answer too: the key holds another kind of value, so
// no token holds the lock there.
func outcome(n int64, err error) backend.Outcome {
	switch {
	case backend.WrongType(err):
		return backend.NotHeld
	case err != nil:
		return backend.Unknown
	case n == 1:
		return backend.Held
	default:
		return backend.NotHeld
	}
}

// renewed reads the reply of a renewal's extend.lua: its outcome, and
// its error if that leaves the outcome Unknown.
func renewed(v int64, err error) backend.Renewed {
	o := outcome(v, err)
	if o != backend.Unknown {
		err = nil
	}
	return backend.Renewed{Outcome: o, Err: err}
}

// Extend resets one lease.
func (n *node) Extend(ctx context.Context, l *backend.Lease, ttl time.Duration) (backend.Outcome, error) {
	if n.ack != nil {
		return n.extendAcked(ctx, l, ttl)
	}
	k := leaseKeys(l)
	// Twice is as once: the script applies an Extend's number once.
	ext := l.NextExtend()
	v, err := followFailover(ctx, n.rdb, k.lock, func() *redis.Cmd {
		return k.scripts().extend.Run(ctx, n.rdb, []string{k.lock}, l.Token, backend.Millis(ttl), ext)
	}).Int64()
	return extendOutcome(v, err)
}

// extendOutcome is an Extend's outcome and error: a WRONGTYPE reply is an
// answer (not held, as for a renewal), not an error of unknown outcome.
func extendOutcome(v int64, err error) (backend.Outcome, error) {
	o := outcome(v, err)
	if o == backend.NotHeld {
		return o, nil
	}
	return o, err
}

// TTL reads the remaining lease.
func (n *node) TTL(ctx context.Context, l *backend.Lease) (time.Duration, backend.Outcome, error) {
	k := leaseKeys(l)
	v, err := followFailover(ctx, n.rdb, k.lock, func() *redis.Cmd {
		return k.scripts().ttl.Run(ctx, n.rdb, []string{k.lock}, l.Token)
	}).Int64()
	switch {
	case backend.WrongType(err):
		return 0, backend.NotHeld, nil // as for a renewal: see outcome
	case err != nil:
		return 0, backend.Unknown, err
	case v == -3:
		return 0, backend.NotHeld, nil
	case v < 0:
		v = 0 // no expiry: the key was changed behind our back (PERSIST)
	}
	return time.Duration(v) * time.Millisecond, backend.Held, nil
}

// Release gives back holds down to level-1, handing the lock over when
// none are left. A release refused while the lock's slot is being
// migrated is sent again once the migration is over (migration.go).
func (n *node) Release(ctx context.Context, l *backend.Lease, level int) (int64, error) {
	var left int64
	var err error
	throughMigration(ctx, n.rdb, func() error {
		if n.ack != nil {
			left, err = n.releaseAcked(ctx, l, level)
		} else {
			k := leaseKeys(l)
			left, err = n.batch.run(ctx, k.scripts().release, k.args[:], &l.Token, k.releaseArg(level)).Int64()
		}
		return err
	})
	if backend.WrongType(err) {
		return -1, nil // another kind of value at the lock's name: not held, as for a renewal
	}
	return left, err
}

// Reenter raises the hold count to level.
func (n *node) Reenter(ctx context.Context, l *backend.Lease, level int) (int64, error) {
	// Twice is as once: a count already at level is left as it is.
	name := leaseKeys(l).lock
	v, err := followFailover(ctx, n.rdb, name, func() *redis.Cmd {
		return reenterScript.Run(ctx, n.rdb, []string{name}, l.Token, level)
	}).Int64()
	if backend.WrongType(err) {
		return 0, nil // another kind of value at the lock's name: not held, as for a renewal
	}
	return v, err
}

// Close closes the pub/sub connections. The Redis client stays open: it
// belongs to the caller.
func (n *node) Close() error {
	close(n.closed)
	n.wake.close()
	return nil
}
