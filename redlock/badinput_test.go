package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testutil"
	"github.com/dlock-go/dlock/redlock"
)

// countingHook counts the commands sent through a client.
type countingHook struct {
	testutil.PassHook
	n *atomic.Int64
}

func (h countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

// A Lock whose context has already ended sends nothing: its attempt would
// stop waiting at once, and the release that follows could reach a node
// before the acquire, which would leave a hold nobody owns for the whole
// lease (on a majority, the lock itself).
func TestCancelledLockSendsNothing(t *testing.T) {
	cl := startCluster(t, 3)
	var sent atomic.Int64
	var nodes []redis.UniversalClient
	for _, s := range cl.srvs {
		rdb := nodeClient(s.Addr())
		rdb.AddHook(countingHook{n: &sent})
		t.Cleanup(func() { rdb.Close() })
		nodes = append(nodes, rdb)
	}
	c, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	if _, err := c.Lock(cancelled, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Lock with a cancelled ctx: %v", err)
	}
	if _, err := c.TryLock(expired, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("TryLock with an expired ctx: %v", err)
	}
	c.Close() // waits for the requests in flight
	if n := sent.Load(); n != 0 {
		t.Errorf("%d commands sent", n)
	}
	for i, rdb := range cl.rdbs {
		if n := rdb.Exists(context.Background(), lockKey("k")).Val(); n != 0 {
			t.Errorf("node %d holds the lock", i)
		}
	}
}

// nilRetry is a RetryStrategy whose nil pointer panics when asked.
type nilRetry struct{ d time.Duration }

func (r *nilRetry) Backoff(int) (time.Duration, bool) { return r.d, true }

// callSafely runs f and turns a panic into an error.
func callSafely(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return f()
}

// TestBadInputCalls misuses a Redlock Client's calls: each returns an
// error matching want, never panics, and leaves no lock on the nodes.
func TestBadInputCalls(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.locker(t)
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	held, err := c.Lock(ctx, "held", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"long key", func() error { _, err := c.Lock(ctx, strings.Repeat("k", dlock.MaxKeyLen+1)); return err }, dlock.ErrInvalidKey},
		{"negative TTL", func() error { _, err := c.Lock(ctx, "k", dlock.WithTTL(-1)); return err }, dlock.ErrInvalidTTL},
		{"nil-pointer RetryStrategy", func() error {
			_, err := c.Lock(ctx, "held", dlock.WithRetry((*nilRetry)(nil)))
			return err
		}, dlock.ErrInvalidOption},
		{"cancelled ctx", func() error { _, err := c.Lock(cancelled, "k"); return err }, context.Canceled},
		{"TryLock cancelled ctx", func() error { _, err := c.TryLock(cancelled, "k"); return err }, context.Canceled},
		{"Semaphore", func() error { _, err := c.Semaphore("s", 2).Acquire(ctx, 1); return err }, dlock.ErrInvalidOption},
		{"Semaphore zero capacity", func() error { _, err := c.Semaphore("s", 0).Acquire(ctx, 1); return err }, dlock.ErrInvalidOption},
		{"Inspect", func() error { _, err := c.Inspect(ctx, "k"); return err }, errors.ErrUnsupported},
		{"List", func() error { _, err := c.List(ctx, "*"); return err }, errors.ErrUnsupported},
		{"ForceRelease", func() error { return c.ForceRelease(ctx, "held") }, errors.ErrUnsupported},
		{"Txn", func() error { return held.Txn(ctx, func(redis.Pipeliner) error { return nil }) }, errors.ErrUnsupported},
		{"Txn nil fn", func() error { return held.Txn(ctx, nil) }, dlock.ErrInvalidOption},
		{"Extend huge", func() error { return held.Extend(ctx, math.MaxInt64) }, dlock.ErrInvalidTTL},
		{"Extend cancelled ctx", func() error { return held.Extend(cancelled, time.Second) }, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := callSafely(tt.call); !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want one wrapping %v", err, tt.want)
			}
			for i, rdb := range cl.rdbs {
				if n, err := rdb.Exists(ctx, lockKey("k"), lockKey("s")).Result(); err != nil || n != 0 {
					t.Fatalf("node %d holds %d locks (%v)", i, n, err)
				}
			}
		})
	}

	// Two Unlocks at once: one releases, the other finds it released.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() { errs[i] = callSafely(func() error { return held.Unlock(ctx) }) })
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) || !errors.Is(errors.Join(errs...), dlock.ErrNotHeld) {
		t.Errorf("concurrent Unlocks: %v", errs)
	}

	// Odd keys, and a lock used after its Client's Close.
	for _, key := range []string{"}", "{}", "a\x00b", strings.Repeat("}", dlock.MaxKeyLen)} {
		err := callSafely(func() error {
			l, err := c.Lock(ctx, key, dlock.WithTTL(time.Second))
			if err != nil {
				return err
			}
			return l.Unlock(cancelled)
		})
		if err != nil {
			t.Errorf("key %q: %v", key, err)
		}
	}
	l, err := c.Lock(ctx, "closed", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := callSafely(func() error { return l.Extend(ctx, time.Second) }); err == nil || strings.HasPrefix(err.Error(), "panic") {
		t.Errorf("Extend after Close: %v", err)
	}
	if err := callSafely(func() error { _, err := c.Lock(ctx, "k"); return err }); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Lock after Close: %v", err)
	}
	if err := callSafely(func() error { return l.Unlock(ctx) }); err != nil {
		t.Errorf("Unlock after Close: %v", err)
	}
}

// TestBadInputTimings: extreme timings are refused or work.
func TestBadInputTimings(t *testing.T) {
	cl := startCluster(t, 3)
	for _, cfg := range []redlock.Config{
		{NodeTimeout: 1},
		{RetryDelay: 1},
		{RetryDelay: math.MaxInt64},
		{NodeTimeout: math.MaxInt64},
	} {
		cfg.Nodes = cl.nodes
		err := callSafely(func() error {
			c, err := redlock.NewWithConfig(cfg)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			l, err := c.TryLock(ctx, "t", dlock.WithTTL(time.Second))
			if err != nil {
				return err
			}
			return l.Unlock(ctx)
		})
		if err != nil && (strings.HasPrefix(err.Error(), "panic") || !errors.Is(err, dlock.ErrNotObtained) && !errors.Is(err, redlock.ErrNoQuorum)) {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}

// TestBadInputWrongTypeNodes puts other data at a lock's name on some
// nodes, before the lock is taken or while it is held. On one node of
// three the majority still holds the lock: every call works. On two, a
// lock cannot be taken (ErrWrongType) and a held one is lost (ErrLockLost;
// ErrNotHeld for Unlock). No call panics or changes the other data.
func TestBadInputWrongTypeNodes(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.patientLocker(t)
	ctx := context.Background()
	values := map[string]func(rdb *redis.Client, k string) error{
		"string": func(rdb *redis.Client, k string) error { return rdb.Set(ctx, k, "x", 0).Err() },
		"list":   func(rdb *redis.Client, k string) error { return rdb.RPush(ctx, k, "x").Err() },
		"hash":   func(rdb *redis.Client, k string) error { return rdb.HSet(ctx, k, "user", "alice").Err() },
	}
	calls := map[string]func(*dlock.Lock) error{
		"Extend": func(l *dlock.Lock) error { return l.Extend(ctx, time.Minute) },
		"TTL":    func(l *dlock.Lock) error { _, err := l.TTL(ctx); return err },
		"Unlock": func(l *dlock.Lock) error { return l.Unlock(ctx) },
	}
	for what, write := range values {
		for _, nodes := range []int{1, 2} {
			for name, call := range calls {
				for _, held := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/%d nodes/%s/held %v", what, nodes, name, held), func(t *testing.T) {
						for _, rdb := range cl.rdbs {
							if err := rdb.FlushDB(ctx).Err(); err != nil {
								t.Fatal(err)
							}
						}
						key := lockKey("x")
						var want string // the data, as DUMP gives it
						writeAll := func() {
							for _, rdb := range cl.rdbs[:nodes] {
								rdb.Del(ctx, key)
								if err := write(rdb, key); err != nil {
									t.Fatal(err)
								}
								want = rdb.Dump(ctx, key).Val()
							}
						}
						var l *dlock.Lock
						err := callSafely(func() error {
							if !held {
								writeAll()
							}
							if held {
								// On every node first: the majority left
								// must be the nodes that have it.
								l = lockEveryNode(t, cl, c, "x", dlock.WithTTL(time.Second))
								writeAll()
								return call(l)
							}
							var err error
							if l, err = c.Lock(ctx, "x", dlock.WithTTL(time.Second)); err != nil {
								return err
							}
							return call(l)
						})
						switch {
						case nodes == 1 && err != nil:
							t.Errorf("error %v, want none", err)
						case nodes == 2 && !held && !errors.Is(err, dlock.ErrWrongType):
							t.Errorf("error %v, want one wrapping ErrWrongType", err)
						case nodes == 2 && held && name == "Unlock" && !errors.Is(err, dlock.ErrNotHeld):
							t.Errorf("error %v, want one wrapping ErrNotHeld", err)
						case nodes == 2 && held && name != "Unlock" && !errors.Is(err, dlock.ErrLockLost):
							t.Errorf("error %v, want one wrapping ErrLockLost", err)
						}
						if l != nil {
							_ = l.Unlock(ctx)
						}
						for i, rdb := range cl.rdbs[:nodes] {
							if got, ttl := rdb.Dump(ctx, key).Val(), rdb.PTTL(ctx, key).Val(); got != want || ttl != -1 {
								t.Errorf("node %d: the %s at the lock's name was changed (now a %s, expiry %v)", i, what, rdb.Type(ctx, key).Val(), ttl)
							}
						}
					})
				}
			}
		}
	}
}
