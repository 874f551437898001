package dlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/backend"
)

func TestAdaptiveLeaseFollowsHoldTimes(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	const work = 40 * time.Millisecond
	opts := []LockOption{WithoutRenewal(), WithTTL(5 * time.Second), WithAdaptiveTTL(2, 0)}
	k := c.keys("batch")
	n := c.be.(*node)

	// No hold time on record: WithTTL's lease.
	l := mustLock(t, c, "batch", opts...)
	if pttl := rdb.PTTL(ctx, k.lock).Val(); pttl < 4900*time.Millisecond || pttl > 5*time.Second {
		t.Errorf("first lease: PTTL %v, want about 5s", pttl)
	}
	time.Sleep(work) // the work under the lock
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := n.HoldStats(ctx, "batch")
	if err != nil {
		t.Fatal(err)
	}
	if s.Samples != 1 || s.Mean < work || s.Mean > work+time.Second {
		t.Fatalf("stats after one hold = %+v, want 1 sample of about %v", s, work)
	}
	if ttl := rdb.PTTL(ctx, statsKey(k)).Val(); ttl < statsTTL-time.Minute {
		t.Errorf("stats expire in %v, want %v", ttl, statsTTL)
	}

	// From then on the lease covers the recorded hold times.
	a := &adaptiveConfig{margin: 2}
	for i := range 4 {
		s, err := n.HoldStats(ctx, "batch")
		if err != nil {
			t.Fatal(err)
		}
		want := time.Duration(ms(a.lease(s))) * time.Millisecond // Redis has milliseconds
		l := mustLock(t, c, "batch", opts...)
		pttl := rdb.PTTL(ctx, k.lock).Val()
		if pttl > want || pttl < want-50*time.Millisecond {
			t.Errorf("lease %d: PTTL %v, want %v (stats %+v)", i, pttl, want, s)
		}
		if want < 2*work || want > time.Second {
			t.Errorf("lease %d = %v for holds of %v", i, want, work)
		}
		time.Sleep(work)
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("hold %d: %v", i, err)
		}
	}
	if s, _ := n.HoldStats(ctx, "batch"); s.Samples != 5 {
		t.Errorf("%d samples, want 5", s.Samples)
	}
}

func TestAdaptiveLeaseLearnsFromOverrun(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	k := c.keys("overrun")
	// Recorded holds of 20 ms: a lease of about 30 ms.
	rdb.HSet(ctx, statsKey(k), "mean_us", 20000, "dev_us", 0, "n", 5)
	l := mustLock(t, c, "overrun", WithoutRenewal(), WithAdaptiveTTL(1.5, 0))
	if pttl := rdb.PTTL(ctx, k.lock).Val(); pttl > 35*time.Millisecond || pttl < 20*time.Millisecond {
		t.Errorf("PTTL %v, want about 30ms", pttl)
	}
	// This time the work takes longer: the lock is lost...
	<-l.Done()
	waitUntil(t, 5*time.Second, "the lease to run out", func() bool { return rdb.Exists(ctx, k.lock).Val() == 0 })
	if err := l.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock after the lease ran out = %v", err)
	}
	// ...and the overrun is on record, so the next lease is longer.
	s, err := c.be.(*node).HoldStats(ctx, "overrun")
	if err != nil {
		t.Fatal(err)
	}
	if s.Samples != 6 || s.Mean <= 20*time.Millisecond {
		t.Errorf("stats after the overrun = %+v, want 6 samples, mean above 20ms", s)
	}
}

func TestAdaptiveLeaseBounds(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	k := c.keys("long")
	rdb.HSet(ctx, statsKey(k), "mean_us", int64(time.Hour/time.Microsecond), "dev_us", 0, "n", 1)
	l := mustLock(t, c, "long", WithoutRenewal(), WithAdaptiveTTL(2, 2*time.Second))
	if pttl := rdb.PTTL(ctx, k.lock).Val(); pttl > 2*time.Second || pttl < 1900*time.Millisecond {
		t.Errorf("PTTL %v, want the 2s cap", pttl)
	}
	_ = l.Unlock(ctx)

	a := &adaptiveConfig{margin: 1}
	if d := a.lease(backend.HoldStats{Mean: time.Microsecond, Samples: 1}); d != MinTTL {
		t.Errorf("lease for tiny holds = %v, want MinTTL", d)
	}
	for _, bad := range []struct {
		opts []LockOption
		want error
	}{
		{[]LockOption{WithAdaptiveTTL(2, 0)}, ErrInvalidOption}, // renewal on
		{[]LockOption{WithoutRenewal(), WithAdaptiveTTL(0.5, 0)}, ErrInvalidOption},
		{[]LockOption{WithoutRenewal(), WithAdaptiveTTL(2, time.Millisecond)}, ErrInvalidTTL},
	} {
		if _, err := c.Lock(ctx, "bad", bad.opts...); !errors.Is(err, bad.want) {
			t.Errorf("Lock with bad adaptive options = %v, want %v", err, bad.want)
		}
	}
}

func TestAdaptiveLeaseOffWritesNothing(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	if err := c.Do(ctx, "plain", func(context.Context) error { return nil }, WithoutRenewal(), WithTTL(time.Second)); err != nil {
		t.Fatal(err)
	}
	if rdb.Exists(ctx, statsKey(c.keys("plain"))).Val() != 0 {
		t.Error("a lock without WithAdaptiveTTL wrote hold statistics")
	}
}
