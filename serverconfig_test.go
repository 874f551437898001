package dlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
)

// Server settings production deployments use, and what dlock does under
// each (docs/safety.md, "Redis settings").

// A server hardened by renaming away the commands guides name (SCRIPT,
// KEYS, FLUSHALL, FLUSHDB, CONFIG, DEBUG) serves every call: dlock sends
// its scripts with EVALSHA, and with EVAL when the server has not cached
// them, never with SCRIPT LOAD, and lists with SCAN.
func TestHardenedServerServesEveryCall(t *testing.T) {
	var opts []redistest.Option
	for _, cmd := range []string{"SCRIPT", "KEYS", "FLUSHALL", "FLUSHDB", "CONFIG", "DEBUG"} {
		opts = append(opts, redistest.WithConfig("rename-command", cmd, ""))
	}
	rdb := redistest.Start(t, opts...).Client(t)
	if err := rdb.ScriptFlush(context.Background()).Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR unknown command") {
		t.Fatalf("SCRIPT FLUSH on the hardened server = %v, want an unknown command", err)
	}
	renewed := make(chan struct{}, 1)
	c := newClientOn(t, rdb, WithObserver(renewSignal{key: "job", ch: renewed}))
	c2 := newClientOn(t, rdb)
	ctx := context.Background()

	l := mustLock(t, c, "job", WithTTL(900*time.Millisecond))
	select {
	case <-renewed:
	case <-l.Done():
		t.Fatalf("lock lost before its first renewal: %v", context.Cause(l.Context()))
	case <-time.After(5 * time.Second):
		t.Fatal("no renewal within 5s")
	}
	if err := l.Extend(ctx, 2*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl <= time.Second {
		t.Fatalf("TTL = %v, %v", ttl, err)
	}
	if info, err := c.Inspect(ctx, "job"); err != nil || info.Fence != l.Fence() {
		t.Fatalf("Inspect = %+v, %v", info, err)
	}
	if names, err := c.List(ctx, "*"); err != nil || len(names) != 1 {
		t.Fatalf("List = %q, %v", names, err)
	}
	got := lockAsync(ctx, c2, "job")
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c, "job") == 1 })
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	w := receiveLock(t, got, 5*time.Second, "the hand-over")
	if w.Fence() <= l.Fence() {
		t.Errorf("handed-over fence %d <= %d", w.Fence(), l.Fence())
	}
	if err := c.ForceRelease(ctx, "job"); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}

	p, err := c.Semaphore("exports", 2).Acquire(ctx, 1)
	if err != nil {
		t.Fatalf("Semaphore Acquire: %v", err)
	}
	if n, err := c.Semaphore("exports", 2).Available(ctx); err != nil || n != 1 {
		t.Fatalf("Available = %d, %v", n, err)
	}
	if err := p.Unlock(ctx); err != nil {
		t.Fatalf("permits Unlock: %v", err)
	}
}

// A server that refuses the scripts themselves (EVALSHA or EVAL renamed
// away, or an ACL user without @scripting) is a configuration error: Lock
// returns the server's reply at once, as TryLock does, rather than wait.
func TestScriptsRefusedFailAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		start  func(t *testing.T) *redis.Client
		prefix string
	}{
		{"EVALSHA renamed", func(t *testing.T) *redis.Client {
			return redistest.Start(t, redistest.WithConfig("rename-command", "EVALSHA", "")).Client(t)
		}, "ERR unknown command 'evalsha'"},
		// EVALSHA answers NOSCRIPT, and the script itself cannot be sent.
		{"EVAL renamed", func(t *testing.T) *redis.Client {
			return redistest.Start(t, redistest.WithConfig("rename-command", "EVAL", "")).Client(t)
		}, "ERR unknown command 'eval'"},
		{"no @scripting", func(t *testing.T) *redis.Client {
			return aclUser(t, redistest.Start(t), "locker", "~* &* +@all -@scripting")
		}, "NOPERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClientOn(t, tc.start(t))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, call := range []struct {
				name string
				f    func() (*Lock, error)
			}{
				{"Lock", func() (*Lock, error) { return c.Lock(ctx, "job") }},
				{"TryLock", func() (*Lock, error) { return c.TryLock(ctx, "job") }},
				{"Acquire", func() (*Lock, error) { return c.Semaphore("exports", 2).Acquire(ctx, 1) }},
			} {
				_, err := call.f()
				var re redis.Error
				if !errors.As(err, &re) || !strings.HasPrefix(re.Error(), tc.prefix) {
					t.Errorf("%s = %v, want the server's %s reply", call.name, err, tc.prefix)
				}
				if ctx.Err() != nil {
					t.Fatalf("%s waited out its context: %v", call.name, err)
				}
			}
		})
	}
}

// With maxmemory and an eviction policy other than noeviction, Redis may
// evict a held lock's key: volatile-* policies too, since it has a TTL
// (volatile-ttl picks it early, a lease being a short TTL). The lock is
// then free for another client, as after a restart without
// persistence: the holder learns it at its next renewal, and the new
// holder's fence is larger, even with the fence counter evicted too.
func TestEvictionDropsAHeldLock(t *testing.T) {
	for _, policy := range []string{"volatile-ttl", "allkeys-random"} {
		t.Run(policy, func(t *testing.T) {
			srv := redistest.Start(t, redistest.WithConfig("maxmemory-policy", policy))
			rdb := srv.Client(t)
			ctx := context.Background()
			c := newClientOn(t, rdb)
			// The waiter checks every second (its queue TTL / 3).
			c2 := newClientOn(t, rdb, WithQueueTTL(3*time.Second))
			l := mustLock(t, c, "evicted", WithTTL(3*time.Second))
			got := lockAsync(ctx, c2, "evicted")
			waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c, "evicted") == 1 })

			// Memory a little above what is used now, then values (with a
			// TTL longer than the fence counter's, for volatile-ttl) until
			// every one of the lock's keys has been evicted. A value may be
			// refused (OOM) while the connections' buffers take the
			// memory eviction frees.
			used := usedMemory(t, rdb)
			if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+1<<20, 10)).Err(); err != nil {
				t.Fatal(err)
			}
			k := c.keys("evicted")
			filler := strings.Repeat("x", 10<<10)
			for i := 0; rdb.Exists(ctx, k.lock, k.fence, k.queue, k.waiters).Val() > 0; i++ {
				if i == 20000 {
					t.Fatalf("the lock's keys not evicted after %d values", i)
				}
				err := rdb.Set(ctx, "filler:"+strconv.Itoa(i), filler, 48*time.Hour).Err()
				if err != nil && !strings.HasPrefix(err.Error(), "OOM ") {
					t.Fatal(err)
				}
			}
			if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
				t.Fatal(err)
			}

			w := receiveLock(t, got, 5*time.Second, "the waiter to take the evicted lock")
			defer w.Unlock(ctx)
			if w.Fence() <= l.Fence() {
				t.Errorf("fence after the eviction %d <= the evicted holder's %d", w.Fence(), l.Fence())
			}
			select {
			case <-l.Done():
				if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
					t.Errorf("evicted holder's cause = %v, want ErrLockLost", cause)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("the evicted holder was not told within its lease")
			}
		})
	}
}

// usedMemory returns INFO memory's used_memory.
func usedMemory(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no used_memory in INFO memory")
	return 0
}

// CLIENT PAUSE WRITE, as FAILOVER pauses while the replica catches up,
// holds every dlock script (none is flagged no-writes) until it ends. A
// pause shorter than half the lease costs a holder nothing, a queued
// waiter keeps its place, and a Lock whose context ends during it returns
// then (with ContextTimeoutEnabled), leaving nothing held once the pause
// is over.
func TestClientPauseWrite(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	admin := srv.Client(t)
	c := newClientOn(t, rdb)
	c2 := newClientOn(t, rdb, WithQueueTTL(1500*time.Millisecond))
	ctx := context.Background()
	l := mustLock(t, c, "paused", WithTTL(1500*time.Millisecond))
	got := lockAsync(ctx, c2, "paused")
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c, "paused") == 1 })

	const pause = 700 * time.Millisecond
	paused := time.Now()
	if err := admin.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := c.Lock(lctx, "other")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock during the pause = %v, want DeadlineExceeded", err)
	}
	// It left the queue: the release it sent was held until the pause
	// ended, and waited for up to 1 s past ctx's end.
	if elapsed := time.Since(paused); elapsed > pause+time.Second {
		t.Errorf("Lock returned %v after the pause began", elapsed)
	}
	// A write answers once the pause is over.
	if err := admin.Set(ctx, "after-pause", 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n := admin.Exists(ctx, c.keys("other").lock).Val(); n != 0 {
		t.Error("the Lock given up during the pause left the lock held")
	}
	if err := l.Context().Err(); err != nil {
		t.Fatalf("holder lost its lock through a %v pause: %v", pause, context.Cause(l.Context()))
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	_ = receiveLock(t, got, 5*time.Second, "the queued waiter to be handed the lock").Unlock(ctx)
}

// Under noeviction a server at its maxmemory refuses new grants and
// Extend (OOM), and still renews a held lock and releases it to a queued
// waiter: the scripts that do begin by extending or deleting, and Redis
// refuses a script only at a first write that may grow memory.
func TestNoevictionAtMaxmemory(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	renewed := make(chan struct{}, 1)
	c := newClientOn(t, rdb, WithObserver(renewSignal{key: "full", ch: renewed}))
	c2 := newClientOn(t, rdb)
	l := mustLock(t, c, "full", WithTTL(900*time.Millisecond))
	got := lockAsync(ctx, c2, "full")
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c, "full") == 1 })
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "other"); err == nil || !strings.Contains(err.Error(), "OOM ") {
		t.Errorf("TryLock at maxmemory = %v, want OOM", err)
	}
	if err := l.Extend(ctx, time.Second); err == nil || !strings.Contains(err.Error(), "OOM ") {
		t.Errorf("Extend at maxmemory = %v, want OOM", err)
	}
	for range 2 { // one may have been under way before maxmemory was set
		select {
		case <-renewed:
		case <-l.Done():
			t.Fatalf("lock lost at maxmemory: %v", context.Cause(l.Context()))
		case <-time.After(5 * time.Second):
			t.Fatal("no renewal within 5s")
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock at maxmemory: %v", err)
	}
	w := receiveLock(t, got, 5*time.Second, "the waiter to be handed the lock at maxmemory")
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
