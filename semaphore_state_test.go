package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The tests of a semaphore's bookkeeping (lua/semaphore.lua, open): the
// permits in use are counted, not summed over every holder at each call.

// commandCount is how often Redis ran the command name (lower case),
// scripts' calls included, from INFO commandstats.
func commandCount(t *testing.T, rdb *redis.Client, name string) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(info, "cmdstat_"+name+":calls=")
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// wholeReads counts the commands that read every holder of a semaphore.
func wholeReads(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	return commandCount(t, rdb, "hgetall") + commandCount(t, rdb, "hvals") + commandCount(t, rdb, "hkeys")
}

func TestSemaphoreCallsDoNotReadEveryHolder(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	const holders = 40
	m := c.RWMutex("catalog")
	var readers []*Lock
	for range holders {
		l, err := m.RLock(ctx, WithTTL(time.Minute), WithoutRenewal())
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, l)
	}
	dying, err := m.RLock(ctx, WithTTL(400*time.Millisecond), WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	// While no lease has run out, a reader coming and going, a writer
	// queueing behind the readers, and the readers leaving read their own
	// entries and the count, never all the others.
	l, err := m.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock with %d readers: %v", holders+1, err)
	}
	writer := inBackground(func() (*Lock, error) { return m.Lock(ctx) })
	waitSemQueued(t, rdb, &m.s, 1)
	for _, r := range readers {
		if err := r.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	notYet(t, writer, "the writer, before the last reader's lease ran out")
	if n := wholeReads(t, rdb); n != 0 {
		t.Fatalf("%d reads of every holder while no lease had run out, want 0", n)
	}

	// Once a lease has run out, one call reads them all and drops it: the
	// writer is let in.
	w := received(t, writer, "the writer, after the last reader's lease")
	if n := holderCount(t, rdb, &m.s); n != 1 {
		t.Fatalf("%d holders with the writer in, want 1 (the dead reader dropped)", n)
	}
	if dying.Context().Err() == nil {
		t.Fatal("the reader whose lease ran out still has a live Context")
	}
	scans := wholeReads(t, rdb)
	if scans == 0 {
		t.Fatal("the dead reader's permit came back without the holders being read")
	}
	if n, err := m.s.Available(ctx); err != nil || n != 0 {
		t.Fatalf("Available with the writer in: %d, %v", n, err)
	}
	if n := wholeReads(t, rdb); n != scans {
		t.Fatalf("%d more reads of every holder after the dead reader was dropped, want 0", n-scans)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, semKeys(&m.s).lock).Val(); n != 0 {
		t.Fatal("the holders key outlived every holder: its bookkeeping was left behind")
	}
}

// An Extend that shortens a lease makes it the soonest to run out: a
// waiter must get its permits when it does, not when the lease that was
// the soonest before would have.
func TestSemaphoreShortenedLeaseFreesPermitsOnTime(t *testing.T) {
	c, rdb, _ := newTestClient(t, noPolling)
	ctx := context.Background()
	s := c.Semaphore("pool", 2)
	var held []*Lock
	for range 2 {
		l, err := s.Acquire(ctx, 1, WithTTL(time.Minute), WithoutRenewal())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	const lease = 300 * time.Millisecond
	if err := held[0].Extend(ctx, lease); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got := acquireAsync(ctx, s, 1)
	waitSemQueued(t, rdb, s, 1)
	l := received(t, got, "the waiter behind a shortened lease")
	if d := time.Since(start); d < lease-50*time.Millisecond {
		t.Fatalf("granted %v after the Extend to %v: before it ran out", d, lease)
	}
	_ = l.Unlock(ctx)
	_ = held[1].Unlock(ctx)
}

// Holders written without the bookkeeping (by hand, or by an older
// version) are counted by reading them all, once.
func TestSemaphoreHoldersWithoutBookkeeping(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	s := c.Semaphore("pool", 3)
	key := semKeys(s).lock
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	entry := func(expiry time.Time, permits int) string {
		return fmt.Sprintf("%d %d 3 7 0 meta", expiry.UnixMilli(), permits)
	}
	rdb.HSet(ctx, key, "aaaa", entry(now.Add(time.Minute), 2), "bbbb", entry(now.Add(-time.Second), 1))
	rdb.PExpire(ctx, key, time.Minute)
	if n, err := s.Available(ctx); err != nil || n != 1 {
		t.Fatalf("Available with 2 of 3 permits held by a live entry: %d, %v", n, err)
	}
	if _, err := s.TryAcquire(ctx, 2); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryAcquire of 2 with 2 of 3 held: %v", err)
	}
	l, err := s.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if rdb.HExists(ctx, key, "bbbb").Val() {
		t.Fatal("the entry whose lease ran out was not dropped")
	}
	if n, err := s.Available(ctx); err != nil || n != 0 {
		t.Fatalf("Available with all 3 held: %d, %v", n, err)
	}
	_ = l.Unlock(ctx)
	if n, err := s.Available(ctx); err != nil || n != 1 {
		t.Fatalf("Available after the release: %d, %v", n, err)
	}
}
