package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
)

// Client takes locks on one Redis deployment: a server, a Sentinel-managed
// master (go-redis failover client) or a Redis Cluster; or, made by
// redlock.New, on a quorum of independent masters. It is safe for
// concurrent use. It owns one background goroutine renewing its locks and
// one pub/sub connection for waiters (on Redis Cluster, one per waited
// lock), both started on first use and stopped by Close. Make it with New
// (or redlock.New): the calls of the zero Client and of a nil *Client (and
// of their Semaphores and RWMutexes, and of a nil *Semaphore or *RWMutex)
// return an error wrapping ErrInvalidOption.
type Client struct {
	be     backend.Backend
	cfg    clientConfig
	log    *slog.Logger
	holder string // holder metadata JSON without the closing brace
	// holderJSON is holder + "}": the metadata of a lock without WithMetadata.
	holderJSON string

	dog *watchdog
	ext clientExt // observer, local queue, degraded mode (hooks.go)

	closeOnce sync.Once
	closed    chan struct{}
	mu        sync.Mutex     // orders begin with Close
	ops       sync.WaitGroup // Lock and TryLock calls under way
}

// New returns a Client using rdb, which stays owned by the caller (Close
// does not close it): a *redis.Client, a Sentinel failover client or a
// *redis.ClusterClient. A *redis.Ring is refused with ErrInvalidOption.
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	if backend.IsNil(rdb) {
		return nil, ErrNilClient
	}
	if backend.IsRing(rdb) {
		return nil, fmt.Errorf("%w: %s", ErrInvalidOption, backend.RingRefused)
	}
	return newClient(func(s backend.Settings) (backend.Backend, error) {
		return newReplicatedNode(rdb, s, opts)
	}, opts)
}

func init() {
	backend.NewClient = func(newBackend func(backend.Settings) (backend.Backend, error), opts any) (any, error) {
		return newClient(newBackend, opts.([]Option))
	}
}

func newClient(newBackend func(backend.Settings) (backend.Backend, error), opts []Option) (*Client, error) {
	cfg := clientConfig{prefix: DefaultPrefix, queueTTL: DefaultQueueTTL}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ext, err := cfg.ext.build()
	if err != nil {
		return nil, err
	}
	log := cfg.logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	be, err := newBackend(backend.Settings{Prefix: cfg.prefix, QueueTTL: cfg.queueTTL, Log: log})
	if err != nil {
		return nil, err
	}
	c := &Client{
		be:     be,
		cfg:    cfg,
		log:    log,
		holder: holderPrefix(cfg.name),
		closed: make(chan struct{}),
		ext:    ext,
	}
	c.holderJSON = c.holder + "}"
	c.dog = newWatchdog(c)
	return c, nil
}

// Close stops renewing the Client's locks and closes its pub/sub
// connection. Locks still held are not released: they expire with their
// lease, and their Contexts are cancelled with ErrLockLost at once, since
// nothing renews them any more; a lock whose outermost Unlock is under way
// is left to that Unlock (and lost at its lease's deadline if that Unlock
// has not ended by then, which may be after Close returned); an Unlock
// still in its Observer's ReleaseStart is not under way yet: its lock ends
// as the others do (ErrLockLost), and that Unlock then releases it and
// returns nil, as an Unlock after Close does. Lock calls under way give up
// with ErrClosed, and Close waits for them to leave the queue or release
// what they got (and for the leaving of those that returned before it ended,
// see Lock), and for the renewals under way (5 s at most in all, if Redis
// does not answer). Calls of the Client's methods after Close return
// ErrClosed; Unlock still releases a lock that Close left held. Close of
// the zero Client returns an error wrapping ErrInvalidOption.
func (c *Client) Close() error {
	if c == nil || c.closed == nil {
		return errZeroClient
	}
	var lost map[*hold]error
	c.closeOnce.Do(func() {
		c.mu.Lock()
		close(c.closed)
		c.mu.Unlock()
		// A hung Redis is not waited for longer than releaseTimeout in
		// all (go-redis may not give up on its reads), the backend's own
		// shutdown included.
		deadline := time.Now().Add(releaseTimeout)
		// The locks left held end first: the backend may wait for its
		// pub/sub connections, or (Redlock) for requests to a hung node.
		lost = c.dog.close()
		// Bounded too: Redlock's waits for its requests in flight, which
		// a node client without ContextTimeoutEnabled may never end. Past
		// the deadline it goes on in the background.
		backend.Detach(nil, time.Until(deadline), func() { _ = c.be.Close() }, c.log, "dlock: panic while closing the backend")
		c.dog.wait(deadline)
		// The calls under way give up now; wait for them to leave the
		// queue or release what they got, while the caller's Redis
		// client is still open.
		backend.WaitBy(&c.ops, deadline)
	})
	// Once Close is done: the Observer's Lost may call Close itself. Each
	// loss is reported even if Lost panics for another: the first panic
	// goes on to the caller, the others to the log.
	var first *backend.Panic
	for h, cause := range lost {
		switch p := backend.Run(func() { c.observeLost(h, cause) }); {
		case first == nil:
			first = p
		case p != nil:
			p.Log(c.log, "dlock: panic in the Observer")
		}
	}
	first.Raise()
	return nil
}

// noPanic runs f, work of one of the Client's own goroutines (the
// watchdog's) that calls the application's code: the Observer, the
// logger's handler. A panic there has no caller to go to, and would end
// the process: it is logged instead, and the goroutine goes on. So is one
// of the handler at a loss's record on any goroutine (watchdog.end).
func (c *Client) noPanic(what string, f func()) {
	if p := backend.Run(f); p != nil {
		p.Log(c.log, "dlock: panic in the "+what)
	}
}

func (c *Client) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// begin registers a Lock or TryLock call, so that Close waits for it;
// false once closed.
func (c *Client) begin() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isClosed() {
		return false
	}
	c.ops.Add(1)
	return true
}

// errZeroClient is the error of the zero Client's calls: it has no
// backend to send them to.
var errZeroClient = fmt.Errorf("%w: Client not made by New", ErrInvalidOption)

// check validates a call's key and the Client's state.
func (c *Client) check(key string) error {
	if c == nil || c.closed == nil {
		return errZeroClient
	}
	if c.isClosed() {
		return ErrClosed
	}
	return validateKey(key)
}

// errReleaseFailed is in the cause of a lock given up after its release
// failed (LostReleaseFailed).
var errReleaseFailed = errors.New("release failed")

// Do takes the lock, runs fn with a context that is cancelled if the lock is
// lost (or ctx ends), and releases the lock when fn returns, or panics (the
// panic then goes on). If the lock was lost meanwhile (fn's work may have
// overlapped another holder's), it returns an error wrapping ErrLockLost:
// the loss, with fn's error if fn failed too (as it does when it returns its
// context's error); else fn's error, or the release's. A release that fails
// ends the lock's renewal, so it is freed when its lease runs out.
func (c *Client) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...LockOption) error {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidOption)
	}
	l, err := c.Lock(ctx, key, opts...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(context.WithValue(ctx, heldKey{c, key}, l.h))
	stop := context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) })
	release := func() error {
		stop()
		uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer ucancel()
		defer cancel(ErrReleased)
		return l.Unlock(uctx) // if it fails, the lock is given up: renewed no more
	}
	panicked := true
	defer func() {
		if panicked {
			// Release before the panic goes on: whoever recovers it
			// (net/http does) would otherwise leave the lock held and
			// renewed until the Client closes.
			_ = release()
		}
	}()
	err = fn(fctx)
	panicked = false
	stop()
	lost := l.Context().Err() != nil
	lostCause := context.Cause(l.Context())
	uerr := release()
	if !lost && errors.Is(uerr, ErrNotHeld) {
		// The release found the lock gone while it was trusted (an
		// operator's ForceRelease, a deleted key): it was lost while fn
		// ran, and the release has just declared it so.
		if cause := context.Cause(l.Context()); errors.Is(cause, ErrLockLost) {
			lost, lostCause = true, cause
		}
	}
	switch {
	case err != nil && lost:
		// fn often fails because the loss cancelled its context: say
		// so, as its work may have overlapped another holder's.
		return fmt.Errorf("%w (%w)", err, lostCause)
	case err != nil:
		return err
	case lost:
		return lostCause
	default:
		return uerr
	}
}
