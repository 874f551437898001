package chaoscheck

import (
	"context"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
)

// permitsOp takes permits of one of the keys (Traffic.Capacities): random
// counts of a Semaphore's through Acquire and TryAcquire, or an RWMutex
// through RLock, TryRLock, Lock and TryLock, with the random options and
// cancellations of op, and works under them as under a lock.
func (tr *Traffic) permitsOp(id int, c *dlock.Client, r *rand.Rand) {
	key := tr.Keys[r.IntN(len(tr.Keys))]
	capacity := tr.Capacities[key]
	opts, bounded := tr.lockOptions(r)
	ctx, cancel, limit := callCtx(r)
	defer cancel()
	var via string
	var n int64
	var take func(context.Context, ...dlock.LockOption) (*dlock.Lock, error)
	if capacity == dlock.MaxPermits {
		m := c.RWMutex(key)
		// Readers twice as often as writers.
		switch k := r.IntN(6); {
		case k < 2:
			via, n, take = "rlock", 1, m.RLock
		case k < 4:
			via, n, take = "tryrlock", 1, m.TryRLock
		case k < 5:
			via, n, take = "wlock", capacity, m.Lock
		default:
			via, n, take = "trywlock", capacity, m.TryLock
		}
	} else {
		s := c.Semaphore(key, capacity)
		n = 1 + r.Int64N(capacity)
		via = "acquire"
		acquire := s.Acquire
		if r.IntN(3) == 0 {
			via, acquire = "tryacquire", s.TryAcquire
		}
		take = func(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
			return acquire(ctx, n, opts...)
		}
	}
	tr.Count(&tr.ops, via)
	call := time.Now()
	var l *dlock.Lock
	var err error
	tr.timed(via, limit, func() { l, err = take(ctx, opts...) })
	tr.checkErr(via, err)
	if !bounded && !strings.HasPrefix(via, "try") {
		tr.checkSentAgain(via, ctx, err)
	}
	if err == nil {
		tr.holdLock(id, c, r, l, via, call, n)
	}
}
