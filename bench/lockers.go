package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/dlock-go/dlock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// Unlock releases a lock taken by Locker.Lock.
type Unlock func(ctx context.Context) error

// Locker is one library set up one way, as one process would use it.
type Locker interface {
	// Lock waits until the lock on key is held or ctx ends. A library
	// that gives up on its own returns ErrGaveUp; the caller may try again.
	Lock(ctx context.Context, key string) (Unlock, error)
	// Close releases the Locker's connections.
	Close()
}

// ErrGaveUp is returned by Locker.Lock when the library stopped waiting on
// its own (its tries ran out) while the caller's context was still live.
var ErrGaveUp = errors.New("library gave up waiting")

// Setup is one library configured one way.
type Setup struct {
	Name     string // short label used in tables and charts
	Lib      string // dlock, redsync, redislock, rueidislock
	Mode     string // "readme" (as the library's README or doc example shows), "tuned", or "default" for dlock
	Settings string // what was configured, for the report
	// Open starts a Locker against the Redis server at addr. rt, if not
	// nil, counts the requests of go-redis clients.
	Open func(addr string, rt *RoundTrips) (Locker, error)
}

// Jitter is the "tuned" polling delay: uniform in [1 ms, 3 ms), about two
// critical sections of the contended scenario, so that a waiter rarely
// sleeps through a release and waiters do not poll in step.
func Jitter() time.Duration {
	return time.Millisecond + rand.N(2*time.Millisecond)
}

// Setups returns every library setup the report compares.
func Setups() []Setup {
	return []Setup{
		{
			Name: "dlock", Lib: "dlock", Mode: "default",
			Settings: "`dlock.New(rdb)`, `Lock(ctx, key)`: defaults (lease 30 s renewed by the watchdog, FIFO hand-over, no polling)",
			Open:     openDlock,
		},
		{
			Name: "redsync", Lib: "redsync", Mode: "readme",
			Settings: "`rs.NewMutex(key)` with defaults: expiry 8 s, 32 tries, random 50-250 ms delay between tries",
			Open:     openRedsync(nil),
		},
		{
			Name: "redsync tuned", Lib: "redsync", Mode: "tuned",
			Settings: "`WithTries(1<<30)`, `WithRetryDelayFunc`: random 1-3 ms",
			Open: openRedsync([]redsync.Option{
				redsync.WithTries(1 << 30),
				redsync.WithRetryDelayFunc(func(int) time.Duration { return Jitter() }),
			}),
		},
		{
			Name: "redislock", Lib: "redislock", Mode: "readme",
			Settings: "`Obtain(ctx, key, 10s, &Options{RetryStrategy: LimitRetry(LinearBackoff(100ms), 3)})` (the package's retry example; Obtain is called again when it gives up) with a context deadline",
			Open: openRedislock(func() redislock.RetryStrategy {
				return redislock.LimitRetry(redislock.LinearBackoff(100*time.Millisecond), 3)
			}),
		},
		{
			Name: "redislock tuned", Lib: "redislock", Mode: "tuned",
			Settings: "`RetryStrategy`: random 1-3 ms, until the context deadline",
			Open:     openRedislock(func() redislock.RetryStrategy { return jitterStrategy{} }),
		},
		{
			Name: "rueidislock", Lib: "rueidislock", Mode: "readme",
			Settings: "`KeyMajority: 1, NoLoopTracking: true` (README), `WithContext`: waits for client-side-caching invalidations",
			Open:     openRueidislock(false),
		},
		{
			Name: "rueidislock tuned", Lib: "rueidislock", Mode: "tuned",
			Settings: "README options, but waiting by `TryWithContext` every random 1-3 ms instead of on invalidations (no herd on release)",
			Open:     openRueidislock(true),
		},
	}
}

// SetupNamed returns the setup with the given name.
func SetupNamed(name string) (Setup, bool) {
	for _, s := range Setups() {
		if s.Name == name {
			return s, true
		}
	}
	return Setup{}, false
}

func newRedis(addr string, rt *RoundTrips) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	if rt != nil {
		rdb.AddHook(rt)
	}
	return rdb
}

// --- dlock

type dlockLocker struct {
	rdb *redis.Client
	c   *dlock.Client
}

func openDlock(addr string, rt *RoundTrips) (Locker, error) {
	rdb := newRedis(addr, rt)
	c, err := dlock.New(rdb)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return &dlockLocker{rdb: rdb, c: c}, nil
}

func (d *dlockLocker) Lock(ctx context.Context, key string) (Unlock, error) {
	l, err := d.c.Lock(ctx, key)
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

func (d *dlockLocker) Close() {
	d.c.Close()
	d.rdb.Close()
}

// --- redsync

type redsyncLocker struct {
	rdb  *redis.Client
	rs   *redsync.Redsync
	opts []redsync.Option
}

func openRedsync(opts []redsync.Option) func(string, *RoundTrips) (Locker, error) {
	return func(addr string, rt *RoundTrips) (Locker, error) {
		rdb := newRedis(addr, rt)
		return &redsyncLocker{rdb: rdb, rs: redsync.New(goredis.NewPool(rdb)), opts: opts}, nil
	}
}

func (r *redsyncLocker) Lock(ctx context.Context, key string) (Unlock, error) {
	// A Mutex is not safe for concurrent use: one per acquisition.
	m := r.rs.NewMutex(key, r.opts...)
	if err := m.LockContext(ctx); err != nil {
		if ctx.Err() == nil {
			return nil, fmt.Errorf("%w: %w", ErrGaveUp, err)
		}
		return nil, err
	}
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock failed")
		}
		return err
	}, nil
}

func (r *redsyncLocker) Close() { r.rdb.Close() }

// --- bsm/redislock

type redislockLocker struct {
	rdb   *redis.Client
	c     *redislock.Client
	retry func() redislock.RetryStrategy // a fresh one per Obtain: LimitRetry counts
}

// jitterStrategy is a stateless redislock.RetryStrategy: 1-3 ms, forever
// (the context deadline bounds the wait).
type jitterStrategy struct{}

func (jitterStrategy) NextBackoff() time.Duration { return Jitter() }

func openRedislock(retry func() redislock.RetryStrategy) func(string, *RoundTrips) (Locker, error) {
	return func(addr string, rt *RoundTrips) (Locker, error) {
		rdb := newRedis(addr, rt)
		return &redislockLocker{rdb: rdb, c: redislock.New(rdb), retry: retry}, nil
	}
}

// redislockTTL is the lease asked of redislock (it has no renewal).
const redislockTTL = 10 * time.Second

func (r *redislockLocker) Lock(ctx context.Context, key string) (Unlock, error) {
	l, err := r.c.Obtain(ctx, key, redislockTTL, &redislock.Options{RetryStrategy: r.retry()})
	if err != nil {
		if errors.Is(err, redislock.ErrNotObtained) && ctx.Err() == nil {
			return nil, fmt.Errorf("%w: %w", ErrGaveUp, err)
		}
		return nil, err
	}
	return l.Release, nil
}

func (r *redislockLocker) Close() { r.rdb.Close() }

// --- rueidislock

type rueidisLocker struct {
	l    rueidislock.Locker
	poll bool
}

func rueidisOptions(addr string) rueidislock.LockerOption {
	return rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{addr}},
		KeyMajority:    1,
		NoLoopTracking: true,
	}
}

func openRueidislock(poll bool) func(string, *RoundTrips) (Locker, error) {
	return func(addr string, _ *RoundTrips) (Locker, error) {
		l, err := rueidislock.NewLocker(rueidisOptions(addr))
		if err != nil {
			return nil, err
		}
		return &rueidisLocker{l: l, poll: poll}, nil
	}
}

func (r *rueidisLocker) Lock(ctx context.Context, key string) (Unlock, error) {
	if !r.poll {
		_, cancel, err := r.l.WithContext(ctx, key)
		if err != nil {
			return nil, err
		}
		return func(context.Context) error { cancel(); return nil }, nil
	}
	var t *time.Timer
	for {
		_, cancel, err := r.l.TryWithContext(ctx, key)
		if err == nil {
			return func(context.Context) error { cancel(); return nil }, nil
		}
		if !errors.Is(err, rueidislock.ErrNotLocked) {
			return nil, err
		}
		if t == nil {
			t = time.NewTimer(Jitter())
			defer t.Stop()
		} else {
			t.Reset(Jitter())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func (r *rueidisLocker) Close() { r.l.Close() }

// RoundTrips counts the requests a go-redis client sends: one per command,
// one per pipeline. (Pub/sub connections are not counted.)
type RoundTrips struct{ n atomic.Int64 }

// Load returns the count so far.
func (r *RoundTrips) Load() int64 { return r.n.Load() }

// DialHook leaves dialling alone.
func (r *RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts one request per command.
func (r *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts one request per pipeline.
func (r *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}
