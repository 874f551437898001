// Package redlock takes dlock locks on N independent Redis masters with the
// Redlock algorithm: a lock is held when a majority of the masters granted
// it, so it survives the loss of any minority of them.
//
// New returns the same *dlock.Client as dlock.New, with the same Lock,
// TryLock, Do and Close, the same lock options and the same *dlock.Lock:
// Fence, Context, Done, Extend, TTL and Unlock, reentrancy, and a watchdog
// that renews the lease on a majority and cancels the lock's Context with
// dlock.ErrLockLost before the validity runs out when it cannot. Code
// written against dlock.Locker switches between one Redis and Redlock
// without changes.
//
// # The algorithm
//
// As the Redis documentation states it: one random token for the attempt
// on every node; the requests go out in parallel, and a node that has not
// answered within a short per-node timeout counts as failed (the attempt
// does not wait for it); the lock is taken when a majority (N/2+1) granted
// it and the validity, lease - elapsed - drift with drift = lease/100 +
// 2 ms, measured from before the first request, is still positive, however
// little of it is left (as redsync does): a grant that took most of the
// lease is returned held, and its Context ends with dlock.ErrLockLost when
// the validity does unless a renewal succeeded first. A failed
// attempt releases the lock on every node that may have granted it and is
// retried after a random delay. The holder trusts the lock until that
// validity ends; each renewal needs a majority too, and is trusted from
// before it was sent. A node that lost the lock (it expired there, or the
// node restarted empty) is never given it back by a renewal, so a renewal
// that succeeds proves that a majority has held the token continuously.
//
// # Fencing
//
// Every grant carries a fencing token that increases across holders while
// any minority of the nodes is down: each node keeps a counter; an
// acquisition reads the counters of the nodes that granted it (exactly,
// past 2^53 too), takes their maximum plus one (and at least the largest
// server clock in microseconds among them), and writes it back to those
// nodes while it holds them (and to the nodes that grant it later); it
// succeeds only when a majority stored it.
// Any two majorities share a node, and that node granted the later holder
// only after the earlier one's hold there ended, after its fence was stored.
// docs/safety.md gives the argument and its limits (nodes that restart
// empty).
//
// # Waiting
//
// Waiters subscribe (pub/sub, one connection per node per Client, opened on
// the first wait) to the lock's channel; an Unlock publishes on every node,
// and waiters retry then, or when enough of the holds' leases would run out
// to free a majority, so they do not poll. There is no queue: Redlock is
// not fair, and a release wakes every waiter of the key (each retries
// after a small random delay, and one of them takes the lock). Only a
// waiter that other owners refused on a majority is woken so: one that
// could not reach a majority retries after Config.RetryDelay's growing
// delay. A node's connection that breaks is dialed again after a backoff
// (or by the next new subscription); a hung dial holds back that node's
// subscriptions only, and a majority of nodes suffices to wake the
// waiters.
//
// # Unlock
//
// Unlock sends the release to every node even if its ctx has ended (a
// deferred Unlock with the request's context), and waits for the nodes'
// answers until a majority decided it, at most the per-node timeout of
// releases (max(NodeTimeout, min(lease/4, 1 s)), with the lease as the
// last Extend set it): it reports what the nodes did.
//
// Close waits for the acquisitions under way and the requests still in
// flight to hung nodes, up to their timeouts (about a second at most with
// ContextTimeoutEnabled clients; twice that for a release that waited for
// its node's acquire to time out first), and for the waiters' pub/sub
// connections a second at most: Close ends their dials, and leaves the
// handshake of one with a hung node, which only the node client's
// ReadTimeout ends, to end on its own. It returns within 5 s in all, as
// dlock.Client.Close says: a request still in flight then (a client
// without ContextTimeoutEnabled, whose ReadTimeout is longer) ends on its
// own.
//
// Keys: for a lock K and the default prefix, each node has the hash
// dlock:{K} (owner token -> hold count, plus fence, metadata, grant time
// and the number of the last Extend), the counter dlock:{K}:fence (it
// expires a day after its last fence, once the node's clock is past that
// fence, see docs/safety.md) and the channel dlock:{K}:wake. Do not point
// a single-node dlock Client with the same prefix at a Redlock node.
package redlock

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/backend"
)

// Defaults of Config.
const (
	// MaxNodeTimeout bounds the default per-node timeout of an acquisition
	// attempt (a node that has not answered by then counts as failed): the
	// lease/10, at most MaxNodeTimeout (and at least 2 ms). An explicit
	// Config.NodeTimeout is not bounded by it.
	MaxNodeTimeout = 50 * time.Millisecond
	// DefaultRetryDelay is the default bound of the random delay before an
	// attempt that lost a race (no majority for anyone) is retried (see
	// Config.RetryDelay).
	DefaultRetryDelay = 50 * time.Millisecond
)

// Config is what NewWithConfig needs: the nodes and, optionally, the
// algorithm's timings. The zero values of the timings are the defaults.
type Config struct {
	// Nodes are the independent Redis masters, at least one; use an odd
	// number, typically 5 (a majority of 5 survives 2 failures). Each may
	// be any go-redis client but a Ring (refused with
	// dlock.ErrInvalidOption), and stays owned by the caller. Two clients of
	// one address (or two ClusterClients of the same seed addresses) are
	// refused, but two names of one server (localhost and 127.0.0.1, two
	// DNS names) and two FailoverClients (or FailoverClusterClients) of
	// one master are not detected, and that server's vote would count
	// twice: list each server once.
	// Configure them with ContextTimeoutEnabled: a request to a node that
	// hangs is not waited for after the per-node timeout, but go-redis only
	// abandons it at the context's deadline with ContextTimeoutEnabled,
	// else at its ReadTimeout, and Close waits for it (5 s at most). And with MaxRetries -1 and
	// DialerRetries 1: Redlock retries whole attempts, and go-redis's own
	// retries make a dead node cost the whole per-node timeout.
	Nodes []redis.UniversalClient
	// NodeTimeout is how long an acquisition attempt waits for each node.
	// Default: lease/10, between 2 ms and MaxNodeTimeout. It must be well
	// below the lease, since the time spent waiting is taken off the
	// validity. Renewals, releases and reads wait max(NodeTimeout,
	// min(lease/4, 1 s)), with the lease as the last Extend set it;
	// releases wait that long even if the caller's context has ended.
	NodeTimeout time.Duration
	// RetryDelay bounds the random delay before retrying an attempt that
	// got no majority although the lock was not held by anyone else (a race
	// between contenders), or that could not reach a majority. The bound
	// doubles with each such attempt in a row, up to 16 x RetryDelay.
	// Default DefaultRetryDelay. Waiters woken by a release retry after a
	// random delay of up to RetryDelay/10. Only waiters that other owners
	// refused on a majority are woken by a release: one that could not
	// reach a majority (its connections to some nodes cut) waits this
	// delay, or until the holds it was refused for would run out.
	RetryDelay time.Duration
}

// New returns a Client taking Redlock locks on the given independent
// masters, with the default timings. opts are the usual Client options
// (dlock.WithPrefix and the rest); every Client sharing locks must use the
// same nodes, in any order, and the same prefix. The Client's Close stops
// its watchdog and pub/sub connections; the Redis clients stay open.
func New(clients []redis.UniversalClient, opts ...dlock.Option) (*dlock.Client, error) {
	return NewWithConfig(Config{Nodes: clients}, opts...)
}

// NewWithConfig is New with explicit timings.
func NewWithConfig(cfg Config, opts ...dlock.Option) (*dlock.Client, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c, err := backend.NewClient(func(s backend.Settings) (backend.Backend, error) {
		return newRedlock(cfg, s), nil
	}, opts)
	if err != nil {
		return nil, err
	}
	return c.(*dlock.Client), nil
}

func (cfg *Config) validate() error {
	if len(cfg.Nodes) == 0 {
		return fmt.Errorf("%w: redlock needs at least one node", dlock.ErrInvalidOption)
	}
	seen := make(map[any]int)
	for i, n := range cfg.Nodes {
		if backend.IsNil(n) {
			return fmt.Errorf("%w: node %d", dlock.ErrNilClient, i)
		}
		if backend.IsRing(n) {
			return fmt.Errorf("%w: node %d: %s", dlock.ErrInvalidOption, i, backend.RingRefused)
		}
		// Two clients of one server would count its vote twice.
		id := any(n)
		switch c := n.(type) {
		case *redis.Client:
			if c.Options().Addr != "FailoverClient" {
				id = c.Options().Addr
			}
		case *redis.ClusterClient:
			// Without seed addresses (a ClusterSlots function, as
			// NewFailoverClusterClient's), only the client itself is known.
			if len(c.Options().Addrs) > 0 {
				addrs := slices.Sorted(slices.Values(c.Options().Addrs))
				id = "cluster " + strings.Join(addrs, ",")
			}
		}
		if !reflect.ValueOf(id).Comparable() {
			continue // a type of the caller's that Go cannot compare
		}
		if j, dup := seen[id]; dup {
			return fmt.Errorf("%w: nodes %d and %d are the same server", dlock.ErrInvalidOption, j, i)
		}
		seen[id] = i
	}
	if cfg.NodeTimeout < 0 || cfg.RetryDelay < 0 {
		return fmt.Errorf("%w: negative redlock timing", dlock.ErrInvalidTTL)
	}
	return nil
}

// node is one of the independent masters.
type node struct {
	rdb  redis.UniversalClient
	addr string // for error messages
}

// redlock is the backend.Backend of a Redlock Client.
type redlock struct {
	nodes      []node
	quorum     int
	prefix     string
	log        *slog.Logger
	nodeTO     time.Duration // 0: from the lease
	retryDelay time.Duration
	hub        *hub

	mu       sync.Mutex
	closed   bool
	done     chan struct{} // closed by Close
	inflight sync.WaitGroup
	// ops counts the Acquire calls begun before Close: an attempt under way
	// sends more requests (the fence, the release of a failed attempt)
	// after the fanout that was running when Close was called.
	ops sync.WaitGroup
}

func newRedlock(cfg Config, s backend.Settings) *redlock {
	b := &redlock{
		quorum:     len(cfg.Nodes)/2 + 1,
		prefix:     s.Prefix,
		log:        s.Log,
		nodeTO:     cfg.NodeTimeout,
		retryDelay: cfg.RetryDelay,
		done:       make(chan struct{}),
	}
	if b.retryDelay == 0 {
		b.retryDelay = DefaultRetryDelay
	}
	for _, rdb := range cfg.Nodes {
		b.nodes = append(b.nodes, node{rdb: rdb, addr: nodeAddr(rdb)})
	}
	b.hub = newHub(b)
	return b
}

func nodeAddr(rdb redis.UniversalClient) string {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		if len(c.Options().Addrs) == 0 {
			return "cluster by ClusterSlots" // its nodes are known only once it asks
		}
		return strings.Join(c.Options().Addrs, ",")
	}
	return fmt.Sprintf("%T", rdb)
}

// Close stops the pub/sub connections and waits for every request still
// in flight to a slow node.
func (b *redlock) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.done)
	b.mu.Unlock()
	b.hub.close()
	b.ops.Wait()
	b.inflight.Wait()
	return nil
}

// begin registers an Acquire call so that Close waits for it; false once
// closed (then every fanout of the call waits for its nodes).
func (b *redlock) begin() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.ops.Add(1)
	return true
}

// acquireTimeout is the per-node timeout of an acquisition attempt.
func (b *redlock) acquireTimeout(lease time.Duration) time.Duration {
	if b.nodeTO > 0 {
		return b.nodeTO
	}
	return min(max(lease/10, 2*time.Millisecond), MaxNodeTimeout)
}

// opTimeout is the per-node timeout of the other calls.
func (b *redlock) opTimeout(lease time.Duration) time.Duration {
	return max(b.acquireTimeout(lease), min(lease/4, time.Second))
}

// keys are the names one lock uses on every node. As in package dlock, the
// user's key is the Redis Cluster hash tag of all of them (escaped by
// backend.Tag if it starts with '}').
type keys struct {
	name    string // the lock's name, as the caller gave it: for the log
	lock    string // hash: owner token -> hold count, ':fence', ':meta', ':at', ':ext'
	fence   string // string: the highest fencing token stored on the node
	channel string // pub/sub: a message when the lock is released
}

func (b *redlock) keys(key string) keys {
	base := b.prefix + "{" + backend.Tag(key) + "}"
	return keys{name: key, lock: base, fence: base + ":fence", channel: base + ":wake"}
}

// lockData is what a Lease carries for this backend.
type lockData struct {
	keys keys
	// lease is the lease the nodes were last given, at acquisition or by
	// an Extend: it sizes the timeouts of Release, TTL and Reenter, so
	// that a short lease extended to a long one is not released with the
	// short one's patience (and left on the nodes for the long one).
	// Only Extend sets it, and the Client runs the Extends of a lock one
	// at a time (each waits for the others and for renewals); the other
	// calls read it concurrently.
	lease atomic.Int64
	// sends are the acquisition's requests, some maybe still on their way
	// to nodes it did not wait for: the outermost Release gives up those
	// not sent yet, and waits for each node's before releasing there.
	sends *acquireSends
}

func data(l *backend.Lease) *lockData { return l.Data.(*lockData) }

// opTimeout is the per-node timeout of the calls on a held lock.
func (d *lockData) opTimeout(b *redlock) time.Duration {
	return b.opTimeout(time.Duration(d.lease.Load()))
}

// sleep waits d or until ctx or the backend ends; false if they ended.
func (b *redlock) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-b.done:
		return false
	}
}
