package dlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// nilRetry is a RetryStrategy whose nil pointer panics when asked.
type nilRetry struct{ d time.Duration }

func (r *nilRetry) Backoff(int) (time.Duration, bool) { return r.d, true }

// retryFunc is a RetryStrategy of a function type, whose nil value panics
// when asked.
type retryFunc func(int) (time.Duration, bool)

func (f retryFunc) Backoff(attempt int) (time.Duration, bool) { return f(attempt) }

// callSafely runs f and turns a panic into an error, so that a table of
// bad inputs reports every panicking case instead of stopping at the first.
func callSafely(f func() error) (err error, panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			err, panicked = fmt.Errorf("panic: %v", p), true
		}
	}()
	return f(), false
}

// TestBadInputTable calls the exported API with bad input: each call must
// return an error matching want, never panic, and write nothing to Redis.
func TestBadInputTable(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	expired, cancel2 := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel2()

	// A Client closed before use, its Semaphore and RWMutex.
	closed := newClientOn(t, rdb)
	closed.Close()

	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"Lock empty key", func() error { _, err := c.Lock(ctx, ""); return err }, ErrInvalidKey},
		{"Lock long key", func() error { _, err := c.Lock(ctx, strings.Repeat("k", MaxKeyLen+1)); return err }, ErrInvalidKey},
		{"Lock negative TTL", func() error { _, err := c.Lock(ctx, "k", WithTTL(-time.Second)); return err }, ErrInvalidTTL},
		{"Lock huge TTL", func() error { _, err := c.Lock(ctx, "k", WithTTL(1<<62)); return err }, ErrInvalidTTL},
		{"Lock TTL 1ns", func() error { _, err := c.Lock(ctx, "k", WithTTL(1)); return err }, ErrInvalidTTL},
		{"Lock TTL below MinTTL", func() error { _, err := c.Lock(ctx, "k", WithTTL(MinTTL-time.Microsecond)); return err }, ErrInvalidTTL},
		{"Lock zero TTL", func() error { _, err := c.Lock(ctx, "k", WithTTL(0)); return err }, ErrInvalidTTL},
		{"Lock MaxInt64 TTL", func() error { _, err := c.TryLock(ctx, "k", WithTTL(math.MaxInt64)); return err }, ErrInvalidTTL},
		{"Lock adaptive max below MinTTL", func() error {
			_, err := c.Lock(ctx, "k", WithoutRenewal(), WithAdaptiveTTL(2, time.Millisecond))
			return err
		}, ErrInvalidTTL},
		{"Lock adaptive infinite margin", func() error {
			_, err := c.Lock(ctx, "k", WithoutRenewal(), WithAdaptiveTTL(math.Inf(1), 0))
			return err
		}, ErrInvalidOption},
		{"Lock adaptive with renewal", func() error { _, err := c.Lock(ctx, "k", WithAdaptiveTTL(2, 0)); return err }, ErrInvalidOption},
		{"Lock max hold without renewal", func() error {
			_, err := c.Lock(ctx, "k", WithoutRenewal(), WithMaxHold(time.Second))
			return err
		}, ErrInvalidOption},
		{"Lock long metadata", func() error {
			_, err := c.Lock(ctx, "k", WithMetadata(strings.Repeat("m", MaxKeyLen+1)))
			return err
		}, ErrInvalidOption},
		{"TryLock empty key", func() error { _, err := c.TryLock(ctx, ""); return err }, ErrInvalidKey},
		{"Do long key", func() error {
			return c.Do(ctx, strings.Repeat("k", MaxKeyLen+1), func(context.Context) error { return nil })
		}, ErrInvalidKey},
		{"Inspect empty key", func() error { _, err := c.Inspect(ctx, ""); return err }, ErrInvalidKey},
		{"ForceRelease empty key", func() error { return c.ForceRelease(ctx, "") }, ErrInvalidKey},
		{"ForceRelease empty owner", func() error { return c.ForceRelease(ctx, "k", WithExpectedOwner("")) }, ErrInvalidOption},
		{"Semaphore long name", func() error {
			_, err := c.Semaphore(strings.Repeat("s", MaxKeyLen+1), 2).TryAcquire(ctx, 1)
			return err
		}, ErrInvalidKey},
		{"Semaphore Inspect empty name", func() error { _, err := c.Semaphore("", 2).Inspect(ctx); return err }, ErrInvalidKey},
		{"Semaphore MaxInt64 capacity", func() error { _, err := c.Semaphore("s", math.MaxInt64).Acquire(ctx, 1); return err }, ErrInvalidOption},
		{"Semaphore MinInt64 permits", func() error { _, err := c.Semaphore("s", 2).TryAcquire(ctx, math.MinInt64); return err }, ErrInvalidOption},
		{"Semaphore adaptive lease", func() error {
			_, err := c.Semaphore("s", 2).TryAcquire(ctx, 1, WithoutRenewal(), WithAdaptiveTTL(2, 0))
			return err
		}, ErrInvalidOption},
		{"Semaphore MaxInt64 TTL", func() error { _, err := c.Semaphore("s", 2).TryAcquire(ctx, 1, WithTTL(math.MaxInt64)); return err }, ErrInvalidTTL},
		{"Semaphore ForceRelease bookkeeping field", func() error { return c.Semaphore("s", 1).ForceRelease(ctx, ":state") }, ErrInvalidOption},
		{"RWMutex long name", func() error { _, err := c.RWMutex(strings.Repeat("m", MaxKeyLen+1)).TryRLock(ctx); return err }, ErrInvalidKey},
		{"RWMutex ForceRelease empty name", func() error {
			return c.RWMutex("").ForceRelease(ctx, "0123456789abcdef0123456789abcdef")
		}, ErrInvalidKey},
		{"RWMutex negative TTL", func() error { _, err := c.RWMutex("m").RLock(ctx, WithTTL(-1)); return err }, ErrInvalidTTL},
		{"Lock negative max hold", func() error { _, err := c.Lock(ctx, "k", WithMaxHold(-1)); return err }, ErrInvalidTTL},
		{"Lock FixedRetry(0)", func() error { _, err := c.Lock(ctx, "k", WithRetry(FixedRetry(0, 1))); return err }, ErrInvalidOption},
		{"Lock FixedRetry negative attempts", func() error { _, err := c.Lock(ctx, "k", WithRetry(FixedRetry(time.Millisecond, -1))); return err }, ErrInvalidOption},
		{"Lock ExponentialRetry max < base", func() error {
			_, err := c.Lock(ctx, "k", WithRetry(ExponentialRetry(time.Second, time.Millisecond, 1)))
			return err
		}, ErrInvalidOption},
		{"Lock ExponentialRetry negative base", func() error {
			_, err := c.Lock(ctx, "k", WithRetry(ExponentialRetry(-1, time.Millisecond, 1)))
			return err
		}, ErrInvalidOption},
		{"Lock nil LockOption", func() error {
			l, err := c.TryLock(ctx, "nilopt", nil)
			if err == nil {
				return l.Unlock(ctx)
			}
			return err
		}, nil},
		{"Lock huge max hold", func() error {
			l, err := c.Lock(ctx, "maxhold", WithTTL(MinTTL*10), WithMaxHold(math.MaxInt64))
			if err != nil {
				return err
			}
			if d := l.c.dog.deadline(l.h); time.Until(d) <= 0 {
				return fmt.Errorf("lease trusted until %v", d)
			}
			return l.Unlock(ctx)
		}, nil},
		{"Lock bad metadata", func() error { _, err := c.Lock(ctx, "k", WithMetadata("\xff")); return err }, ErrInvalidOption},
		// The documented bounds are inclusive: [MinTTL, MaxTTL] for a lease,
		// MaxKeyLen bytes for metadata.
		{"Lock TTL MaxTTL, Extend to MaxTTL", func() error {
			l, err := c.TryLock(ctx, "bounds", WithTTL(MaxTTL))
			if err != nil {
				return err
			}
			if err := l.Extend(ctx, MaxTTL); err != nil {
				return err
			}
			return l.Unlock(ctx)
		}, nil},
		{"Lock TTL MinTTL, Extend to MinTTL", func() error {
			// A lease this short may run out before the next call on a
			// loaded machine (ErrLockLost, ErrNotHeld): only a refusal of
			// the lease itself is wrong. The Extend goes to a lock of the
			// default lease, which cannot have run out first.
			short, err := c.TryLock(ctx, "bounds", WithTTL(MinTTL))
			if err == nil {
				_ = short.Unlock(ctx)
				var l *Lock
				if l, err = c.TryLock(ctx, "bounds2"); err != nil {
					return err
				}
				err = l.Extend(ctx, MinTTL)
				_ = l.Unlock(ctx)
			}
			if errors.Is(err, ErrInvalidTTL) {
				return err
			}
			return nil
		}, nil},
		{"Lock metadata of MaxKeyLen bytes", func() error {
			l, err := c.TryLock(ctx, "bounds", WithMetadata(strings.Repeat("m", MaxKeyLen)))
			if err != nil {
				return err
			}
			return l.Unlock(ctx)
		}, nil},
		{"Lock adaptive NaN margin", func() error {
			_, err := c.Lock(ctx, "k", WithoutRenewal(), WithAdaptiveTTL(0, 0))
			return err
		}, ErrInvalidOption},
		{"Lock cancelled ctx", func() error { _, err := c.Lock(cancelled, "k"); return err }, context.Canceled},
		{"TryLock cancelled ctx", func() error { _, err := c.TryLock(cancelled, "k"); return err }, context.Canceled},
		{"Lock expired ctx", func() error { _, err := c.Lock(expired, "k"); return err }, context.DeadlineExceeded},
		{"Do nil fn", func() error { return c.Do(ctx, "k", nil) }, ErrInvalidOption},
		{"Do cancelled ctx", func() error {
			return c.Do(cancelled, "k", func(context.Context) error { return nil })
		}, context.Canceled},
		{"Lock on closed Client", func() error { _, err := closed.Lock(ctx, "k"); return err }, ErrClosed},
		{"Semaphore on closed Client", func() error { _, err := closed.Semaphore("s", 1).Acquire(ctx, 1); return err }, ErrClosed},
		{"TryLock on closed Client", func() error { _, err := closed.TryLock(ctx, "k"); return err }, ErrClosed},
		{"Do on closed Client", func() error {
			return closed.Do(ctx, "k", func(context.Context) error { return nil })
		}, ErrClosed},
		{"Inspect on closed Client", func() error { _, err := closed.Inspect(ctx, "k"); return err }, ErrClosed},
		{"ForceRelease on closed Client", func() error { return closed.ForceRelease(ctx, "k") }, ErrClosed},
		{"List on closed Client", func() error { _, err := closed.List(ctx, "*"); return err }, ErrClosed},
		{"Close twice", func() error { return closed.Close() }, nil},
		{"Semaphore TryAcquire on closed Client", func() error { _, err := closed.Semaphore("s", 1).TryAcquire(ctx, 1); return err }, ErrClosed},
		{"Semaphore Available on closed Client", func() error { _, err := closed.Semaphore("s", 1).Available(ctx); return err }, ErrClosed},
		{"Semaphore Inspect on closed Client", func() error { _, err := closed.Semaphore("s", 1).Inspect(ctx); return err }, ErrClosed},
		{"Semaphore ForceRelease on closed Client", func() error {
			return closed.Semaphore("s", 1).ForceRelease(ctx, "0123456789abcdef0123456789abcdef")
		}, ErrClosed},
		{"RWMutex RLock on closed Client", func() error { _, err := closed.RWMutex("m").RLock(ctx); return err }, ErrClosed},
		{"RWMutex TryLock on closed Client", func() error { _, err := closed.RWMutex("m").TryLock(ctx); return err }, ErrClosed},
		{"Semaphore zero capacity", func() error { _, err := c.Semaphore("s", 0).Acquire(ctx, 1); return err }, ErrInvalidOption},
		{"Semaphore negative capacity", func() error { _, err := c.Semaphore("s", -1).TryAcquire(ctx, 1); return err }, ErrInvalidOption},
		{"Semaphore huge capacity", func() error { _, err := c.Semaphore("s", MaxPermits+1).Acquire(ctx, 1); return err }, ErrInvalidOption},
		{"Semaphore zero permits", func() error { _, err := c.Semaphore("s", 2).Acquire(ctx, 0); return err }, ErrInvalidOption},
		{"Semaphore negative permits", func() error { _, err := c.Semaphore("s", 2).Acquire(ctx, -1); return err }, ErrInvalidOption},
		{"Semaphore permits over capacity", func() error { _, err := c.Semaphore("s", 2).Acquire(ctx, 3); return err }, ErrInvalidOption},
		{"Semaphore empty name", func() error { _, err := c.Semaphore("", 2).Acquire(ctx, 1); return err }, ErrInvalidKey},
		{"Semaphore Available zero capacity", func() error { _, err := c.Semaphore("s", 0).Available(ctx); return err }, ErrInvalidOption},
		{"Semaphore ForceRelease empty token", func() error { return c.Semaphore("s", 1).ForceRelease(ctx, "") }, ErrInvalidOption},
		{"zero Semaphore Acquire", func() error { _, err := (&Semaphore{}).Acquire(ctx, 1); return err }, ErrInvalidOption},
		{"zero Semaphore Inspect", func() error { _, err := (&Semaphore{}).Inspect(ctx); return err }, ErrInvalidOption},
		{"zero RWMutex Lock", func() error { _, err := (&RWMutex{}).Lock(ctx); return err }, ErrInvalidOption},
		{"zero RWMutex RLock", func() error { _, err := (&RWMutex{}).TryRLock(ctx); return err }, ErrInvalidOption},
		{"zero RWMutex Inspect", func() error { _, err := (&RWMutex{}).Inspect(ctx); return err }, ErrInvalidOption},
		{"zero RWMutex ForceRelease", func() error { return (&RWMutex{}).ForceRelease(ctx, "abc") }, ErrInvalidOption},
		{"RWMutex empty name", func() error { _, err := c.RWMutex("").Lock(ctx); return err }, ErrInvalidKey},
		{"zero Client Lock", func() error { _, err := (&Client{}).Lock(ctx, "k"); return err }, ErrInvalidOption},
		{"zero Client TryLock", func() error { _, err := (&Client{}).TryLock(ctx, "k"); return err }, ErrInvalidOption},
		{"zero Client Do", func() error {
			return (&Client{}).Do(ctx, "k", func(context.Context) error { return nil })
		}, ErrInvalidOption},
		{"zero Client Semaphore", func() error { _, err := (&Client{}).Semaphore("s", 1).Acquire(ctx, 1); return err }, ErrInvalidOption},
		{"zero Client RWMutex", func() error { _, err := (&Client{}).RWMutex("m").RLock(ctx); return err }, ErrInvalidOption},
		{"zero Client Inspect", func() error { _, err := (&Client{}).Inspect(ctx, "k"); return err }, ErrInvalidOption},
		{"zero Client ForceRelease", func() error { return (&Client{}).ForceRelease(ctx, "k") }, ErrInvalidOption},
		{"zero Client List", func() error { _, err := (&Client{}).List(ctx, "*"); return err }, ErrInvalidOption},
		{"zero Client Close", func() error { return (&Client{}).Close() }, ErrInvalidOption},
		{"nil Client Lock", func() error { _, err := (*Client)(nil).Lock(ctx, "k"); return err }, ErrInvalidOption},
		{"nil Client Do", func() error {
			return (*Client)(nil).Do(ctx, "k", func(context.Context) error { return nil })
		}, ErrInvalidOption},
		{"nil Client Semaphore", func() error { _, err := (*Client)(nil).Semaphore("s", 1).Acquire(ctx, 1); return err }, ErrInvalidOption},
		{"nil Client RWMutex", func() error { _, err := (*Client)(nil).RWMutex("m").Lock(ctx); return err }, ErrInvalidOption},
		{"nil Client Inspect", func() error { _, err := (*Client)(nil).Inspect(ctx, "k"); return err }, ErrInvalidOption},
		{"nil Client ForceRelease", func() error { return (*Client)(nil).ForceRelease(ctx, "k") }, ErrInvalidOption},
		{"nil Client List", func() error { _, err := (*Client)(nil).List(ctx, "*"); return err }, ErrInvalidOption},
		{"nil Client Close", func() error { return (*Client)(nil).Close() }, ErrInvalidOption},
		{"nil Semaphore Acquire", func() error { _, err := (*Semaphore)(nil).Acquire(ctx, 1); return err }, ErrInvalidOption},
		{"nil Semaphore Inspect", func() error { _, err := (*Semaphore)(nil).Inspect(ctx); return err }, ErrInvalidOption},
		{"nil RWMutex Lock", func() error { _, err := (*RWMutex)(nil).Lock(ctx); return err }, ErrInvalidOption},
		{"nil RWMutex ForceRelease", func() error { return (*RWMutex)(nil).ForceRelease(ctx, "abc") }, ErrInvalidOption},
		{"nil Semaphore and RWMutex accessors", func() error {
			var s *Semaphore
			var m *RWMutex
			if s.Name() != "" || s.Capacity() != 0 || m.Name() != "" {
				return errors.New("a nil Semaphore or RWMutex reports a name or capacity")
			}
			_, err := s.Available(ctx)
			return err
		}, ErrInvalidOption},
		{"nil Lock Unlock", func() error { return (*Lock)(nil).Unlock(ctx) }, ErrNotHeld},
		{"nil Lock Extend", func() error { return (*Lock)(nil).Extend(ctx, time.Second) }, ErrNotHeld},
		{"nil Lock TTL", func() error { _, err := (*Lock)(nil).TTL(ctx); return err }, ErrNotHeld},
		{"nil Lock Txn", func() error {
			return (*Lock)(nil).Txn(ctx, func(redis.Pipeliner) error { return nil })
		}, ErrNotHeld},
		{"nil Lock accessors and Context", func() error {
			var l *Lock
			if l.Key() != "" || l.Token() != "" || l.Fence() != 0 || l.Degraded() {
				return errors.New("a nil Lock reports a lock")
			}
			<-l.Done()
			return context.Cause(l.Context())
		}, ErrNotHeld},
		{"zero Lock Unlock", func() error { return (&Lock{}).Unlock(ctx) }, ErrNotHeld},
		{"zero Lock Extend", func() error { return (&Lock{}).Extend(ctx, time.Second) }, ErrNotHeld},
		{"zero Lock TTL", func() error { _, err := (&Lock{}).TTL(ctx); return err }, ErrNotHeld},
		{"zero Lock Txn", func() error {
			return (&Lock{}).Txn(ctx, func(redis.Pipeliner) error { return nil })
		}, ErrNotHeld},
		{"zero Lock accessors and Context", func() error {
			l := &Lock{}
			if l.Key() != "" || l.Token() != "" || l.Fence() != 0 || l.Degraded() {
				return errors.New("a zero Lock reports a lock")
			}
			<-l.Done()
			return context.Cause(l.Context())
		}, ErrNotHeld},
		{"List open class", func() error { _, err := c.List(ctx, "a["); return err }, ErrInvalidOption},
		{"List bad kind", func() error { _, err := c.List(ctx, "*", WithKind("nope")); return err }, ErrInvalidOption},
		{"ForceRelease bad owner", func() error { return c.ForceRelease(ctx, "k", WithExpectedOwner(":meta")) }, ErrInvalidOption},
		{"Inspect long key", func() error { _, err := c.Inspect(ctx, strings.Repeat("k", MaxKeyLen+1)); return err }, ErrInvalidKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := rdb.FlushDB(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			err, panicked := callSafely(tt.call)
			if panicked {
				t.Fatal(err)
			}
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want one wrapping %v", err, tt.want)
			}
			if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 0 {
				keys, _ := rdb.Keys(ctx, "*").Result()
				t.Fatalf("Redis holds %v (%v) after the call", keys, err)
			}
		})
	}
}

// TestBadInputOptions checks New's options.
func TestBadInputOptions(t *testing.T) {
	_, rdb, _ := newTestClient(t)
	tests := []struct {
		name string
		opts []Option
		want error
	}{
		{"nil Option", []Option{nil}, nil},
		{"WithObserver(nil)", []Option{WithObserver(nil)}, nil},
		{"WithObserver(nil pointer)", []Option{WithObserver((*NopObserver)(nil))}, nil},
		{"Observers(nil pointer)", []Option{WithObserver(Observers((*NopObserver)(nil)))}, nil},
		{"WithLogger(nil)", []Option{WithLogger(nil)}, nil},
		{"WithPrefix empty", []Option{WithPrefix("")}, ErrInvalidOption},
		{"WithPrefix brace", []Option{WithPrefix("a{")}, ErrInvalidOption},
		{"WithQueueTTL negative", []Option{WithQueueTTL(-time.Second)}, ErrInvalidTTL},
		{"WithQueueTTL zero", []Option{WithQueueTTL(0)}, ErrInvalidTTL},
		{"WithQueueTTL huge", []Option{WithQueueTTL(1 << 62)}, ErrInvalidTTL},
		// The bounds WithQueueTTL documents, [30 ms, 1 h], are inclusive.
		{"WithQueueTTL 30ms", []Option{WithQueueTTL(3 * MinTTL)}, nil},
		{"WithQueueTTL below 30ms", []Option{WithQueueTTL(3*MinTTL - 1)}, ErrInvalidTTL},
		{"WithQueueTTL 1h", []Option{WithQueueTTL(time.Hour)}, nil},
		{"WithQueueTTL past 1h", []Option{WithQueueTTL(time.Hour + 1)}, ErrInvalidTTL},
		{"WithClientName bad UTF-8", []Option{WithClientName("\xff")}, ErrInvalidOption},
		{"WithDegradedMode unknown", []Option{WithDegradedMode(9)}, ErrInvalidOption},
		{"WithReplicaAck zero", []Option{WithReplicaAck(0, 0, 0)}, ErrInvalidOption},
		{"WithReplicaAck negative timeout", []Option{WithReplicaAck(1, -1, FailClosed)}, ErrInvalidTTL},
		{"WithReplicaAck bad policy", []Option{WithReplicaAck(1, time.Second, ReplicaPolicy(-1))}, ErrInvalidOption},
		{"WithReplicaReport(nil) alone", []Option{WithReplicaReport(nil)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c *Client
			err, panicked := callSafely(func() error {
				var err error
				c, err = New(rdb, tt.opts...)
				if err != nil {
					return err
				}
				defer c.Close()
				l, err := c.TryLock(context.Background(), "opts", WithTTL(time.Second))
				if err != nil {
					return err
				}
				return l.Unlock(context.Background())
			})
			if panicked {
				t.Fatal(err)
			}
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
		})
	}
	if _, err := New(nil); !errors.Is(err, ErrNilClient) {
		t.Fatalf("New(nil): %v", err)
	}
	if _, err := New((*redis.Client)(nil)); !errors.Is(err, ErrNilClient) {
		t.Fatalf("New(nil pointer): %v", err)
	}
}

// TestBadInputHeldLock misuses a held lock: Extend with leases out of
// range, Unlock twice at once, calls after the Client's Close, odd keys.
func TestBadInputHeldLock(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	l := mustLock(t, c, "held")
	for _, ttl := range []time.Duration{-time.Second, 0, MinTTL - 1, MaxTTL + 1, 1<<63 - 1} {
		if err, p := callSafely(func() error { return l.Extend(ctx, ttl) }); p || !errors.Is(err, ErrInvalidTTL) {
			t.Errorf("Extend(%v): %v", ttl, err)
		}
	}
	if err, p := callSafely(func() error { return l.Extend(cancelled, time.Second) }); p || !errors.Is(err, context.Canceled) {
		t.Errorf("Extend with a cancelled ctx: %v", err)
	}
	if err, p := callSafely(func() error { return l.Txn(ctx, nil) }); p || !errors.Is(err, ErrInvalidOption) {
		t.Errorf("Txn(nil): %v", err)
	}

	// A nil pointer or function as the RetryStrategy of a Lock that has
	// to wait.
	for _, retry := range []RetryStrategy{(*nilRetry)(nil), retryFunc(nil)} {
		err, p := callSafely(func() error {
			l, err := c.Lock(ctx, "held", WithRetry(retry))
			if err == nil {
				_ = l.Unlock(ctx)
			}
			return err
		})
		if p || !errors.Is(err, ErrInvalidOption) {
			t.Errorf("Lock with a nil %T as RetryStrategy: %v", retry, err)
		}
		if n := queued(t, rdb, c, "held"); n != 0 {
			t.Errorf("%d waiters left queued", n)
		}
	}

	// Two Unlocks at once: one releases, the other finds it released.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() {
			var p bool
			if errs[i], p = callSafely(func() error { return l.Unlock(ctx) }); p {
				t.Error(errs[i])
			}
		})
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) || !errors.Is(errors.Join(errs...), ErrNotHeld) {
		t.Errorf("concurrent Unlocks: %v", errs)
	}

	// Odd keys: braces, NUL bytes, the longest allowed.
	for _, key := range []string{"}", "{", "{}", "a}{b", "\x00", "a\x00b", strings.Repeat("}", MaxKeyLen)} {
		err, p := callSafely(func() error {
			l, err := c.Lock(ctx, key, WithMetadata("x\x00y"))
			if err != nil {
				return err
			}
			if info, err := c.Inspect(ctx, key); err != nil || !info.Held || info.Holder.Data != "x\x00y" {
				return fmt.Errorf("Inspect: %+v, %v", info, err)
			}
			if names, err := c.List(ctx, ""); err != nil || !slices.Contains(names, key) {
				return fmt.Errorf("List: %q, %v", names, err)
			}
			return l.Unlock(cancelled) // sent all the same
		})
		if p || err != nil {
			t.Errorf("key %q: %v", key, err)
		}
	}

	// After Close: the lock's calls fail, Unlock still releases.
	l = mustLock(t, c, "closed")
	c.Close()
	for name, f := range map[string]func() error{
		"Extend": func() error { return l.Extend(ctx, time.Second) },
		"TTL":    func() error { _, err := l.TTL(ctx); return err },
		"Txn":    func() error { return l.Txn(ctx, func(redis.Pipeliner) error { return nil }) },
		"Lock":   func() error { _, err := c.Lock(l.Context(), "closed"); return err },
	} {
		if err, p := callSafely(f); p || err == nil {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
	if err, p := callSafely(func() error { return l.Unlock(ctx) }); p || err != nil {
		t.Errorf("Unlock after Close: %v", err)
	}
	if n, err := rdb.DBSize(ctx).Result(); err != nil {
		t.Fatal(err)
	} else if keys, _ := rdb.Keys(ctx, "*{closed}").Result(); len(keys) != 0 {
		t.Errorf("lock left after Unlock: %v (%d keys)", keys, n)
	}
}

// TestBadInputWrongTypeEveryCall puts other data at the name of a lock, a
// Semaphore and an RWMutex (a value of each other Redis type, a hash of
// other code's, and the hash of a lock or of permits held under another
// name): every call that takes, reads or removes it returns an error
// wrapping ErrWrongType, never panics, leaves the data as it was and
// leaves nobody queued.
func TestBadInputWrongTypeEveryCall(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	const nobody = "0123456789abcdef0123456789abcdef"
	type call struct {
		name string
		do   func(context.Context, ...LockOption) (*Lock, error)
	}
	lockCalls := []call{
		{"TryLock", func(ctx context.Context, _ ...LockOption) (*Lock, error) { return c.TryLock(ctx, "x") }},
		{"Lock", func(ctx context.Context, _ ...LockOption) (*Lock, error) { return c.Lock(ctx, "x") }},
		{"Do", func(ctx context.Context, _ ...LockOption) (*Lock, error) {
			return nil, c.Do(ctx, "x", func(context.Context) error { return nil })
		}},
		{"Inspect", func(ctx context.Context, _ ...LockOption) (*Lock, error) {
			_, err := c.Inspect(ctx, "x")
			return nil, err
		}},
		{"ForceRelease", func(ctx context.Context, _ ...LockOption) (*Lock, error) { return nil, c.ForceRelease(ctx, "x") }},
		{"ForceRelease expected owner", func(ctx context.Context, _ ...LockOption) (*Lock, error) {
			return nil, c.ForceRelease(ctx, "x", WithExpectedOwner(nobody))
		}},
	}
	s, m := c.Semaphore("x", 3), c.RWMutex("x")
	semCalls := []call{
		{"TryAcquire", func(ctx context.Context, _ ...LockOption) (*Lock, error) { return s.TryAcquire(ctx, 1) }},
		{"Acquire", func(ctx context.Context, _ ...LockOption) (*Lock, error) { return s.Acquire(ctx, 3) }},
		{"Available", func(ctx context.Context, _ ...LockOption) (*Lock, error) { _, err := s.Available(ctx); return nil, err }},
		{"Inspect", func(ctx context.Context, _ ...LockOption) (*Lock, error) { _, err := s.Inspect(ctx); return nil, err }},
		{"ForceRelease", func(ctx context.Context, _ ...LockOption) (*Lock, error) { return nil, s.ForceRelease(ctx, nobody) }},
	}
	rwCalls := []call{
		{"TryRLock", m.TryRLock},
		{"RLock", m.RLock},
		{"TryLock", m.TryLock},
		{"Lock", m.Lock},
		{"Inspect", func(ctx context.Context, _ ...LockOption) (*Lock, error) { _, err := m.Inspect(ctx); return nil, err }},
		{"ForceRelease", func(ctx context.Context, _ ...LockOption) (*Lock, error) { return nil, m.ForceRelease(ctx, nobody) }},
	}
	// copyHeld writes at name the hash of a lock or permits held under
	// the name "other", without expiry.
	copyHeld := func(take func() (*Lock, error), from func(*Lock) string) func(string) error {
		return func(name string) error {
			l, err := take()
			if err != nil {
				return err
			}
			defer func() { _ = l.Unlock(ctx) }()
			if err := rdb.Copy(ctx, from(l), name, 0, false).Err(); err != nil {
				return err
			}
			return rdb.Persist(ctx, name).Err()
		}
	}
	lockData := copyHeld(func() (*Lock, error) { return c.TryLock(ctx, "other") },
		func(*Lock) string { return c.keys("other").lock })
	semData := copyHeld(func() (*Lock, error) { return c.Semaphore("other", 3).TryAcquire(ctx, 1) },
		func(*Lock) string { return semKeys(c.Semaphore("other", 3)).lock })
	rwData := copyHeld(func() (*Lock, error) { return c.RWMutex("other").RLock(ctx) },
		func(*Lock) string { return semKeys(&c.RWMutex("other").s).lock })
	values := map[string]func(string) error{
		"string": func(k string) error { return rdb.Set(ctx, k, "x", 0).Err() },
		"list":   func(k string) error { return rdb.RPush(ctx, k, "x").Err() },
		"set":    func(k string) error { return rdb.SAdd(ctx, k, "x").Err() },
		"zset":   func(k string) error { return rdb.ZAdd(ctx, k, redis.Z{Score: 1, Member: "x"}).Err() },
		"stream": func(k string) error { return rdb.XAdd(ctx, &redis.XAddArgs{Stream: k, Values: []any{"a", "b"}}).Err() },
		"hash":   func(k string) error { return rdb.HSet(ctx, k, "user", "alice").Err() },
	}
	for _, p := range []struct {
		kind   string
		keys   *lockKeys
		calls  []call
		others map[string]func(string) error // the data of the other kinds
	}{
		{"lock", c.keys("x"), lockCalls, map[string]func(string) error{"semaphore": semData, "rwmutex": rwData}},
		{"semaphore", semKeys(s), semCalls, map[string]func(string) error{"lock": lockData}},
		{"rwmutex", semKeys(&m.s), rwCalls, map[string]func(string) error{"lock": lockData}},
	} {
		data := maps.Clone(values)
		for kind, write := range p.others {
			data[kind+"'s hash"] = write
		}
		for what, write := range data {
			for _, cl := range p.calls {
				t.Run(p.kind+"/"+what+"/"+cl.name, func(t *testing.T) {
					if err := rdb.FlushDB(ctx).Err(); err != nil {
						t.Fatal(err)
					}
					if err := write(p.keys.lock); err != nil {
						t.Fatal(err)
					}
					before := rdb.Dump(ctx, p.keys.lock).Val()
					// Bounded, though none of them may wait.
					cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					defer cancel()
					var l *Lock
					err, panicked := callSafely(func() error {
						var err error
						l, err = cl.do(cctx)
						return err
					})
					if l != nil {
						_ = l.Unlock(ctx)
					}
					if panicked || !errors.Is(err, ErrWrongType) {
						t.Errorf("error %v, want one wrapping ErrWrongType", err)
					}
					if after, ttl := rdb.Dump(ctx, p.keys.lock).Val(), rdb.PTTL(ctx, p.keys.lock).Val(); after != before || ttl != -1 {
						t.Errorf("the data at %s was changed (expiry %v)", p.keys.lock, ttl)
					}
					if n := rdb.Exists(ctx, p.keys.queue, p.keys.waiters).Val(); n != 0 {
						t.Errorf("the call left a queue behind: %v", rdb.ZRange(ctx, p.keys.queue, 0, -1).Val())
					}
				})
			}
		}
	}
}

// TestBadInputOddPermitNames: a Semaphore's or RWMutex's name with braces,
// NUL or 0xff bytes, glob characters, a kind's suffix, or of the longest
// length works as any other: taken, inspected, counted, listed under its
// kind only, and force released.
func TestBadInputOddPermitNames(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	for _, name := range []string{"}", "{", "{}", "a}{b", "\x00", "a\x00b", "\xff", "\xff}", "*", "[", `a\`,
		"x}:semaphore", "}:rwmutex", strings.Repeat("}", MaxKeyLen), strings.Repeat("\xff", MaxKeyLen)} {
		for _, s := range []*Semaphore{c.Semaphore(name, 2), &c.RWMutex(name).s} {
			err, p := callSafely(func() error {
				l, err := s.TryAcquire(ctx, 1)
				if err != nil {
					return err
				}
				if info, err := s.Inspect(ctx); err != nil || len(info.Holders) != 1 || info.Holders[0].Owner != l.Token() {
					return fmt.Errorf("Inspect: %+v, %v", info, err)
				}
				if n, err := s.Available(ctx); err != nil || n != s.capacity-1 {
					return fmt.Errorf("Available: %d, %v", n, err)
				}
				if names, err := c.List(ctx, "", WithKind(s.kind)); err != nil || !slices.Contains(names, name) {
					return fmt.Errorf("List: %q, %v", names, err)
				}
				if names, err := c.List(ctx, ""); err != nil || slices.Contains(names, name) {
					return fmt.Errorf("List of locks: %q, %v", names, err)
				}
				if err := s.ForceRelease(ctx, l.Token()); err != nil {
					return fmt.Errorf("ForceRelease: %w", err)
				}
				if err := l.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
					return fmt.Errorf("Unlock after ForceRelease: %v", err)
				}
				return nil
			})
			if p || err != nil {
				t.Errorf("%s %.20q: %v", s.kind, name, err)
			}
		}
	}
}
