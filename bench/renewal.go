package bench

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/dlock-go/dlock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis/rueidislock"
)

// Held is a set of locks kept alive by a Renewer.
type Held interface {
	Lost() int // locks found lost so far
	Release()  // stops renewing, releases every lock, closes connections
}

// Renewer keeps many locks alive the way a user of one library would.
type Renewer struct {
	Lib              string
	Method           string
	CountsRoundTrips bool // go-redis based: requests are counted by a hook
	Hold             func(ctx context.Context, addr string, rt *RoundTrips, keys []string, lease, interval time.Duration) (Held, error)
}

// acquirers is how many goroutines take the locks of the renewal scenario.
const acquirers = 32

// Renewers returns one renewer per library.
func Renewers() []Renewer {
	return []Renewer{
		{Lib: "dlock", Method: "built-in watchdog (`WithTTL(lease)`, renews every lease/3, batched)", CountsRoundTrips: true, Hold: holdDlock},
		{Lib: "redsync", Method: "no watchdog: user loop, one goroutine per lock calling `ExtendContext` every interval", CountsRoundTrips: true, Hold: holdRedsync},
		{Lib: "redislock", Method: "no watchdog: user loop, one goroutine per lock calling `Refresh` every interval", CountsRoundTrips: true, Hold: holdRedislock},
		{Lib: "rueidislock", Method: "built-in (`KeyValidity: lease, ExtendInterval: interval`), one goroutine per lock", Hold: holdRueidislock},
	}
}

// --- dlock

type dlockHeld struct {
	rdb   *redis.Client
	c     *dlock.Client
	locks []*dlock.Lock
}

func holdDlock(ctx context.Context, addr string, rt *RoundTrips, keys []string, lease, _ time.Duration) (Held, error) {
	rdb := newRedis(addr, rt)
	c, err := dlock.New(rdb)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	h := &dlockHeld{rdb: rdb, c: c, locks: make([]*dlock.Lock, len(keys))}
	err = parallel(acquirers, len(keys), func(i int) error {
		l, err := c.Lock(ctx, keys[i], dlock.WithTTL(lease))
		h.locks[i] = l
		return err
	})
	if err != nil {
		h.Release()
		return nil, err
	}
	return h, nil
}

func (h *dlockHeld) Lost() int {
	n := 0
	for _, l := range h.locks {
		if l != nil && l.Context().Err() != nil {
			n++
		}
	}
	return n
}

func (h *dlockHeld) Release() {
	_ = parallel(acquirers, len(h.locks), func(i int) error {
		if l := h.locks[i]; l != nil {
			_ = l.Unlock(context.Background())
		}
		return nil
	})
	h.c.Close()
	h.rdb.Close()
}

// --- user renewal loops (redsync, redislock)

// loops runs one renewal goroutine per lock, as the libraries' docs leave
// it to the user.
type loops struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	lost    atomic.Int64
	release []func()
	close   func()
}

func (l *loops) run(interval time.Duration, extend func() error) {
	l.wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
				if err := extend(); err != nil {
					l.lost.Add(1)
					return
				}
			}
		}
	})
}

func (l *loops) Lost() int { return int(l.lost.Load()) }

func (l *loops) Release() {
	close(l.stop)
	l.wg.Wait()
	_ = parallel(acquirers, len(l.release), func(i int) error {
		if f := l.release[i]; f != nil {
			f()
		}
		return nil
	})
	l.close()
}

func holdRedsync(ctx context.Context, addr string, rt *RoundTrips, keys []string, lease, interval time.Duration) (Held, error) {
	rdb := newRedis(addr, rt)
	rs := redsync.New(goredis.NewPool(rdb))
	l := &loops{stop: make(chan struct{}), release: make([]func(), len(keys)), close: func() { rdb.Close() }}
	err := parallel(acquirers, len(keys), func(i int) error {
		m := rs.NewMutex(keys[i], redsync.WithExpiry(lease))
		if err := m.LockContext(ctx); err != nil {
			return err
		}
		l.release[i] = func() { _, _ = m.UnlockContext(context.Background()) }
		l.run(interval, func() error {
			ok, err := m.ExtendContext(context.Background())
			if err == nil && !ok {
				err = errors.New("not extended")
			}
			return err
		})
		return nil
	})
	if err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

func holdRedislock(ctx context.Context, addr string, rt *RoundTrips, keys []string, lease, interval time.Duration) (Held, error) {
	rdb := newRedis(addr, rt)
	c := redislock.New(rdb)
	l := &loops{stop: make(chan struct{}), release: make([]func(), len(keys)), close: func() { rdb.Close() }}
	err := parallel(acquirers, len(keys), func(i int) error {
		lk, err := c.Obtain(ctx, keys[i], lease, nil)
		if err != nil {
			return err
		}
		l.release[i] = func() { _ = lk.Release(context.Background()) }
		l.run(interval, func() error { return lk.Refresh(context.Background(), lease, nil) })
		return nil
	})
	if err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

// --- rueidislock

type rueidisHeld struct {
	l       rueidislock.Locker
	base    context.Context // the locks' parent: their contexts end with it
	stop    context.CancelFunc
	ctxs    []context.Context
	cancels []context.CancelFunc
	mu      sync.Mutex
}

func holdRueidislock(ctx context.Context, addr string, _ *RoundTrips, keys []string, lease, interval time.Duration) (Held, error) {
	opt := rueidisOptions(addr)
	opt.KeyValidity = lease
	opt.ExtendInterval = interval
	lk, err := rueidislock.NewLocker(opt)
	if err != nil {
		return nil, err
	}
	h := &rueidisHeld{l: lk, ctxs: make([]context.Context, len(keys)), cancels: make([]context.CancelFunc, len(keys))}
	// A lock's context is derived from the one WithContext gets, so that
	// one must outlive the acquisition phase; ctx only bounds the wait.
	h.base, h.stop = context.WithCancel(context.Background())
	err = parallel(acquirers, len(keys), func(i int) error {
		type got struct {
			c      context.Context
			cancel context.CancelFunc
			err    error
		}
		ch := make(chan got, 1)
		go func() {
			c, cancel, err := lk.WithContext(h.base, keys[i])
			ch <- got{c, cancel, err}
		}()
		select {
		case g := <-ch:
			h.mu.Lock()
			h.ctxs[i], h.cancels[i] = g.c, g.cancel
			h.mu.Unlock()
			return g.err
		case <-ctx.Done():
			return ctx.Err() // the wait goes on until Release closes the locker
		}
	})
	if err != nil {
		h.Release()
		return nil, err
	}
	return h, nil
}

func (h *rueidisHeld) Lost() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.ctxs {
		if c != nil && c.Err() != nil {
			n++
		}
	}
	return n
}

func (h *rueidisHeld) Release() {
	h.mu.Lock()
	cancels := h.cancels
	h.mu.Unlock()
	_ = parallel(acquirers, len(cancels), func(i int) error {
		if f := cancels[i]; f != nil {
			f()
		}
		return nil
	})
	h.stop()
	h.l.Close()
}
