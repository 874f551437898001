package dlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// Inspect shows each live holder with its permits, fence and metadata,
// and the queue; it skips holders whose lease ran out and the bookkeeping
// fields (':'-prefixed) of the holders hash, whatever they hold.
func TestSemaphoreInspect(t *testing.T) {
	c, rdb, _ := newTestClient(t, WithClientName("billing"), noPolling)
	ctx := context.Background()
	s := c.Semaphore("pool", 5)
	a, err := s.Acquire(ctx, 2, WithMetadata("job a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiter := acquireAsync(wctx, s, 3)
	waitSemQueued(t, rdb, s, 1)

	host, _ := os.Hostname()
	check := func(info *SemaphoreInfo, err error, waiters int64) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if info.Key != "pool" || info.Kind != "semaphore" || info.Capacity != 5 || info.InUse != 3 || info.Waiters != waiters || len(info.Holders) != 2 {
			t.Fatalf("Inspect = %+v", info)
		}
		for i, want := range []struct {
			l       *Lock
			permits int64
			data    string
		}{{a, 2, "job a"}, {b, 1, ""}} {
			h := info.Holders[i]
			holder := Holder{Host: host, PID: os.Getpid(), Client: "billing", Data: want.data}
			if h.Owner != want.l.Token() || h.Permits != want.permits || h.Fence != want.l.Fence() || h.Holder != holder || h.TTL <= 0 || h.TTL > DefaultTTL {
				t.Errorf("holder %d = %+v, want token %s, %d permits, fence %d, %+v", i, h, want.l.Token(), want.permits, want.l.Fence(), holder)
			}
		}
	}
	info, err := s.Inspect(ctx)
	check(info, err, 1)
	cancel()
	if r := <-waiter; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the waiter that gave up: %v", r.err)
	}

	// A holder whose lease ran out, and a bookkeeping field of a kind
	// Inspect does not know, next to any it does.
	k := semKeys(s)
	if err := rdb.HSet(ctx, k.lock, "00000000000000000000000000000000", "1 3 5 7 0 {}", ":future", "not a holder").Err(); err != nil {
		t.Fatal(err)
	}
	before := rdb.HGetAll(ctx, k.lock).Val()
	info, err = s.Inspect(ctx)
	check(info, err, 0)
	if after := rdb.HGetAll(ctx, k.lock).Val(); !maps.Equal(before, after) {
		t.Errorf("Inspect wrote: the holders hash went from %v to %v", before, after)
	}
	rdb.HDel(ctx, k.lock, ":future")

	// Another handle's capacity: Inspect reads the holders'.
	if info, err := c.Semaphore("pool", 9).Inspect(ctx); err != nil || info.Capacity != 5 {
		t.Errorf("Inspect with another capacity = %+v, %v; want the holders' 5", info, err)
	}
	_ = a.Unlock(ctx)
	_ = b.Unlock(ctx)
	info, err = s.Inspect(ctx)
	if err != nil || len(info.Holders) != 0 || info.InUse != 0 || info.Capacity != 5 || info.Holders == nil {
		t.Errorf("Inspect of a free semaphore = %+v, %v", info, err)
	}
}

// Inspect lists the holders oldest grant first, whatever order the
// holders hash keeps: with values longer than 64 bytes (metadata) Redis
// stores a hash as a table, whose order is not the grants'.
func TestSemaphoreInspectListsHoldersByFence(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	const holders = 20
	s := c.Semaphore("crowd", holders)
	fences := make(map[string]uint64, holders)
	for range holders {
		l, err := s.TryAcquire(ctx, 1, WithoutRenewal(), WithMetadata(strings.Repeat("m", 100)))
		if err != nil {
			t.Fatal(err)
		}
		fences[l.Token()] = l.Fence()
	}
	info, err := s.Inspect(ctx)
	if err != nil || len(info.Holders) != holders || info.InUse != holders {
		t.Fatalf("Inspect = %d holders, %d in use, %v; want %d", len(info.Holders), info.InUse, err, holders)
	}
	for i, h := range info.Holders {
		if h.Fence != fences[h.Owner] {
			t.Fatalf("holder %s: fence %d, want its grant's %d", h.Owner, h.Fence, fences[h.Owner])
		}
		if i > 0 && h.Fence <= info.Holders[i-1].Fence {
			t.Fatalf("holder %d has fence %d after %d: not oldest grant first", i, h.Fence, info.Holders[i-1].Fence)
		}
	}
}

// A holder whose permits were taken away, not renewed, learns of it at its
// next call: Extend and TTL fail with ErrLockLost, Unlock with ErrNotHeld
// and ErrLockLost, and its Context ends with ErrLockLost.
func TestSemaphorePermitsTakenAwayAreLostAtTheNextCall(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	s := c.Semaphore("pool", 2)
	for name, call := range map[string]func(*Lock) error{
		"Extend": func(l *Lock) error { return l.Extend(ctx, 10*time.Second) },
		"TTL":    func(l *Lock) error { _, err := l.TTL(ctx); return err },
		"Unlock": func(l *Lock) error {
			err := l.Unlock(ctx)
			if !errors.Is(err, ErrNotHeld) {
				return fmt.Errorf("%w, want ErrNotHeld too", err)
			}
			return err
		},
	} {
		l, err := s.Acquire(ctx, 1, WithoutRenewal())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ForceRelease(ctx, l.Token()); err != nil {
			t.Fatal(err)
		}
		if err := call(l); !errors.Is(err, ErrLockLost) {
			t.Errorf("%s of permits taken away = %v, want ErrLockLost", name, err)
		}
		if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
			t.Errorf("after %s, the Context's cause = %v, want ErrLockLost", name, cause)
		}
		_ = l.Unlock(ctx)
	}
}

// ForceRelease takes a stuck holder's permits away and the waiter first
// in line gets them, woken by the hand-over (no polling), even through a
// handle of another capacity; the old holder learns of it at its next
// call.
func TestSemaphoreForceReleaseHandsOver(t *testing.T) {
	c, rdb, _ := newTestClient(t, noPolling)
	ctx := context.Background()
	s := c.Semaphore("pool", 2)
	stuck, err := s.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(ctx, s, 1)
	waitSemQueued(t, rdb, s, 1)
	notYet(t, got, "the waiter")
	// A waiter's token holds nothing, and keeps its place in the queue.
	queued := rdb.ZRange(ctx, semKeys(s).queue, 0, -1).Val()
	if len(queued) != 1 {
		t.Fatalf("queue %q, want the one waiter", queued)
	}
	if err := s.ForceRelease(ctx, queued[0]); !errors.Is(err, ErrNotHeld) {
		t.Errorf("ForceRelease of a waiter's token = %v, want ErrNotHeld", err)
	}
	if n := rdb.ZCard(ctx, semKeys(s).queue).Val(); n != 1 {
		t.Fatalf("%d waiters queued after ForceRelease of the waiter's token, want it still there", n)
	}
	if err := s.ForceRelease(ctx, stuck.Token()); err != nil {
		t.Fatal(err)
	}
	l := received(t, got, "the waiter after ForceRelease")
	if l.Fence() <= stuck.Fence() {
		t.Errorf("fence %d after force release, not above %d", l.Fence(), stuck.Fence())
	}
	if _, err := stuck.TTL(ctx); !errors.Is(err, ErrLockLost) {
		t.Errorf("old holder TTL = %v, want ErrLockLost", err)
	}
	for _, token := range []string{stuck.Token(), "0123456789abcdef0123456789abcdef"} {
		if err := s.ForceRelease(ctx, token); !errors.Is(err, ErrNotHeld) {
			t.Errorf("ForceRelease(%s) of no holder = %v, want ErrNotHeld", token, err)
		}
	}

	// The permits go over under the holder's capacity, whatever the
	// handle's.
	got = acquireAsync(ctx, s, 2)
	waitSemQueued(t, rdb, s, 1)
	if err := c.Semaphore("pool", 7).ForceRelease(ctx, l.Token()); err != nil {
		t.Fatal(err)
	}
	last := received(t, got, "the waiter for 2 after ForceRelease with another capacity")
	if info, err := s.Inspect(ctx); err != nil || len(info.Holders) != 1 || info.Holders[0].Owner != last.Token() || info.InUse != 2 {
		t.Errorf("Inspect after the hand-over = %+v, %v", info, err)
	}
	_ = last.Unlock(ctx)
}

// An RWMutex is inspected and cleared as the semaphore it is: readers hold
// 1 permit, a writer MaxPermits, and the writer waiting gets the lock once
// the last reader is taken away.
func TestRWMutexInspectForceRelease(t *testing.T) {
	c, rdb, _ := newTestClient(t, noPolling)
	ctx := context.Background()
	m := c.RWMutex("doc")
	r1, err := m.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := m.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writer := inBackground(func() (*Lock, error) { return m.Lock(ctx) })
	waitSemQueued(t, rdb, &m.s, 1)
	info, err := m.Inspect(ctx)
	if err != nil || info.Kind != "rwmutex" || info.Capacity != MaxPermits || info.InUse != 2 || info.Waiters != 1 || len(info.Holders) != 2 ||
		info.Holders[0].Owner != r1.Token() || info.Holders[1].Owner != r2.Token() || info.Holders[0].Permits != 1 {
		t.Fatalf("Inspect = %+v, %v", info, err)
	}
	if err := m.ForceRelease(ctx, r1.Token()); err != nil {
		t.Fatal(err)
	}
	notYet(t, writer, "the writer while a reader holds the lock")
	if err := m.ForceRelease(ctx, r2.Token()); err != nil {
		t.Fatal(err)
	}
	w := received(t, writer, "the writer")
	info, err = m.Inspect(ctx)
	if err != nil || len(info.Holders) != 1 || info.Holders[0].Owner != w.Token() || info.Holders[0].Permits != MaxPermits || info.Waiters != 0 {
		t.Errorf("Inspect of the writer = %+v, %v", info, err)
	}
	if err := m.ForceRelease(ctx, r1.Token()); !errors.Is(err, ErrNotHeld) {
		t.Errorf("ForceRelease of a reader taken away = %v, want ErrNotHeld", err)
	}
	_ = w.Unlock(ctx)
}

func TestSemaphoreAdminBadInput(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	const token = "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		s    *Semaphore
		want error
	}{
		{c.Semaphore("", 2), ErrInvalidKey},
		{c.Semaphore(string(make([]byte, MaxKeyLen+1)), 2), ErrInvalidKey},
		{c.Semaphore("x", 0), ErrInvalidOption},
		{c.Semaphore("x", MaxPermits+1), ErrInvalidOption},
		{&Semaphore{name: "x", capacity: 1}, ErrInvalidOption},
	} {
		if _, err := tc.s.Inspect(ctx); !errors.Is(err, tc.want) {
			t.Errorf("Inspect of %q (capacity %d) = %v, want %v", tc.s.name, tc.s.capacity, err, tc.want)
		}
		if err := tc.s.ForceRelease(ctx, token); !errors.Is(err, tc.want) {
			t.Errorf("ForceRelease on %q (capacity %d) = %v, want %v", tc.s.name, tc.s.capacity, err, tc.want)
		}
	}
	for _, bad := range []string{"", ":state"} {
		if err := c.Semaphore("x", 2).ForceRelease(ctx, bad); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("ForceRelease(%q) = %v, want ErrInvalidOption", bad, err)
		}
	}
	c.Close()
	if _, err := c.RWMutex("x").Inspect(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Inspect after Close = %v, want ErrClosed", err)
	}
	if err := c.RWMutex("x").ForceRelease(ctx, token); !errors.Is(err, ErrClosed) {
		t.Errorf("ForceRelease after Close = %v, want ErrClosed", err)
	}
}

// Other data at a semaphore's or RWMutex's name: a value of another type,
// or a hash whose fields are not holders. ForceRelease of a token that is
// not in it says so as Inspect does, not that the token holds nothing.
func TestSemaphoreAdminWrongType(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	s := c.Semaphore("other", 2)
	k := semKeys(s)
	m := c.RWMutex("other")
	const nobody = "0123456789abcdef0123456789abcdef"
	for _, x := range []struct {
		admin interface {
			Inspect(context.Context) (*SemaphoreInfo, error)
			ForceRelease(context.Context, string) error
		}
		key string
	}{{s, k.lock}, {m, semKeys(&m.s).lock}} {
		for _, write := range []func() error{
			func() error { return rdb.Set(ctx, x.key, "x", 0).Err() },
			func() error { return rdb.HSet(ctx, x.key, "user", "alice").Err() },
		} {
			rdb.Del(ctx, x.key)
			if err := write(); err != nil {
				t.Fatal(err)
			}
			typ := rdb.Type(ctx, x.key).Val()
			if _, err := x.admin.Inspect(ctx); !errors.Is(err, ErrWrongType) {
				t.Errorf("Inspect of a %s at %s = %v, want ErrWrongType", typ, x.key, err)
			}
			if err := x.admin.ForceRelease(ctx, nobody); !errors.Is(err, ErrWrongType) {
				t.Errorf("ForceRelease with a %s at %s = %v, want ErrWrongType", typ, x.key, err)
			}
		}
		if err := x.admin.ForceRelease(ctx, "user"); !errors.Is(err, ErrWrongType) {
			t.Errorf("ForceRelease of a field that is no holder = %v, want ErrWrongType", err)
		}
		// The value is left as it was.
		if v := rdb.HGetAll(ctx, x.key).Val(); len(v) != 1 || v["user"] != "alice" {
			t.Errorf("the hash at %s after ForceRelease = %v", x.key, v)
		}
	}

	// The release script is an Unlock's too, which reads its WRONGTYPE as
	// permits lost (node.go's Release), as for a lock.
	rdb.Del(ctx, k.lock)
	l, err := s.Acquire(ctx, 1, WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, k.lock, "x", 0)
	if err := l.Unlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Errorf("Unlock with other data at the holders' name = %v, want ErrLockLost", err)
	}
}

// Other data at a semaphore's waiters name is an error of Inspect's
// (ErrWrongType), but the holders are sound: Inspect still returns them,
// so that an operator sees the holder that ForceRelease removes.
func TestSemaphoreInspectForeignDataAtWaiters(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	s := c.Semaphore("other", 2)
	k := semKeys(s)
	l, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	rdb.RPush(ctx, k.waiters, "other data")
	info, err := s.Inspect(ctx)
	if !errors.Is(err, ErrWrongType) || !strings.Contains(err.Error(), "waiters") {
		t.Errorf("Inspect error %v, want ErrWrongType naming the waiters", err)
	}
	if info == nil || len(info.Holders) != 1 || info.Holders[0].Owner != l.Token() || info.InUse != 1 || info.Waiters != 0 {
		t.Fatalf("Inspect = %+v, want the holder %s", info, l.Token())
	}
	if err := s.ForceRelease(ctx, l.Token()); err != nil {
		t.Errorf("ForceRelease = %v", err)
	}
	if info, err := s.Inspect(ctx); info == nil || len(info.Holders) != 0 || !errors.Is(err, ErrWrongType) {
		t.Errorf("Inspect after ForceRelease = %+v, %v; want no holder, with ErrWrongType", info, err)
	}
	if got := rdb.LRange(ctx, k.waiters, 0, -1).Val(); !slices.Equal(got, []string{"other data"}) {
		t.Errorf("the other code's data is now %q", got)
	}
}
