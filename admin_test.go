package dlock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

func TestInspect(t *testing.T) {
	c, _, _ := newTestClient(t, WithClientName("billing"))
	ctx := context.Background()
	before := time.Now().Add(-time.Second)
	l := mustLock(t, c, "inv:1", WithMetadata("job 7"))
	if _, err := c.Lock(l.Context(), "inv:1"); err != nil {
		t.Fatal(err)
	}
	info, err := c.Inspect(ctx, "inv:1")
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	want := Holder{Host: host, PID: os.Getpid(), Client: "billing", Data: "job 7"}
	if !info.Held || info.Owner != l.Token() || info.Fence != l.Fence() || info.HoldCount != 2 || info.Holder != want {
		t.Errorf("Inspect = %+v", info)
	}
	if info.TTL <= 0 || info.TTL > DefaultTTL || info.AcquiredAt.Before(before) || info.AcquiredAt.After(time.Now().Add(time.Second)) {
		t.Errorf("Inspect TTL/time = %v, %v", info.TTL, info.AcquiredAt)
	}
	_ = l.Unlock(ctx)
	free, err := c.Inspect(ctx, "inv:1")
	if err != nil || free.Held || free.Fence != l.Fence() || free.TTL != 0 {
		t.Errorf("Inspect of a free lock = %+v, %v", free, err)
	}
}

func TestForceReleaseWakesWaiter(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	stuck := mustLock(t, c, "stuck")
	got := make(chan *Lock, 1)
	go func() {
		l, err := c.Lock(ctx, "stuck")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool {
		info, _ := c.Inspect(ctx, "stuck")
		return info != nil && info.Waiters == 1
	})
	if err := c.ForceRelease(ctx, "stuck"); err != nil {
		t.Fatal(err)
	}
	if l := <-got; l != nil {
		if l.Fence() <= stuck.Fence() {
			t.Error("no fresh fence after force release")
		}
		_ = l.Unlock(ctx)
	}
	if err := c.ForceRelease(ctx, "stuck"); !errors.Is(err, ErrNotHeld) {
		t.Errorf("ForceRelease of a free lock = %v", err)
	}
	// The old holder is told at its next renewal or call.
	if _, err := stuck.TTL(ctx); !errors.Is(err, ErrLockLost) {
		t.Errorf("old holder TTL = %v, want ErrLockLost", err)
	}
}

// WithExpectedOwner: ForceRelease removes the holder an operator inspected,
// never one that took the lock since.
func TestForceReleaseExpectedOwner(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	old := mustLock(t, c, "k")
	read, err := c.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.ForceRelease(ctx, "k", WithExpectedOwner(read.Owner)); !errors.Is(err, ErrNotHeld) {
		t.Errorf("ForceRelease of a free lock, expecting its old owner = %v, want ErrNotHeld", err)
	}
	taker := mustLock(t, c, "k")
	if err := c.ForceRelease(ctx, "k", WithExpectedOwner(read.Owner)); !errors.Is(err, ErrNotHeld) {
		t.Errorf("ForceRelease of another's lock, expecting its old owner = %v, want ErrNotHeld", err)
	}
	for _, bad := range []string{"", ":fence"} {
		if err := c.ForceRelease(ctx, "k", WithExpectedOwner(bad)); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("ForceRelease expecting owner %q = %v, want ErrInvalidOption", bad, err)
		}
	}
	if info, err := c.Inspect(ctx, "k"); err != nil || !info.Held || info.Owner != taker.Token() {
		t.Fatalf("the new holder lost the lock: %+v, %v", info, err)
	}
	// A nil option is skipped, as List's are.
	if err := c.ForceRelease(ctx, "k", nil, WithExpectedOwner(taker.Token())); err != nil {
		t.Fatalf("ForceRelease expecting the holder = %v", err)
	}
	if info, err := c.Inspect(ctx, "k"); err != nil || info.Held {
		t.Errorf("still held after ForceRelease expecting its holder: %+v, %v", info, err)
	}
}

func TestList(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	for _, k := range []string{"order:1", "order:2", "job:x"} {
		mustLock(t, c, k)
	}
	// Other data than a hash at a lock's name is not listed: SCAN filters
	// by type.
	rdb.Set(ctx, c.keys("order:str").lock, "other data", 0)
	all, err := c.List(ctx, "")
	if err != nil || !reflect.DeepEqual(all, []string{"job:x", "order:1", "order:2"}) {
		t.Errorf("List() = %v, %v", all, err)
	}
	orders, _ := c.List(ctx, "order:*")
	if !reflect.DeepEqual(orders, []string{"order:1", "order:2"}) {
		t.Errorf("List(order:*) = %v", orders)
	}
}

// A pattern matches keys, not their names in Redis: keys that start with
// '}' or '\xff' are stored escaped, and must match as they are.
func TestListPatternsMatchKeys(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	for _, k := range []string{"}a", "\xffb", "a", "ab", "a}b"} {
		defer mustLock(t, c, k).Unlock(ctx)
	}
	for pattern, want := range map[string][]string{
		"*":     {"a", "ab", "a}b", "}a", "\xffb"},
		"??":    {"ab", "}a", "\xffb"},
		"?a":    {"}a"},
		"}*":    {"}a"},
		"[^}]*": {"a", "ab", "a}b", "\xffb"},
		"*b":    {"ab", "a}b", "\xffb"},
	} {
		if got, err := c.List(ctx, pattern); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("List(%q) = %q, %v; want %q", pattern, got, err, want)
		}
	}
}

// A prefix is literal text, also where it holds characters special in a
// Redis glob: List finds its locks and only its locks.
func TestListPrefixIsLiteral(t *testing.T) {
	_, rdb, _ := newTestClient(t)
	ctx := context.Background()
	for _, prefix := range []string{"jobs[eu]:", "app?:", `a\b:`, "a*:"} {
		c := newClientOn(t, rdb, WithPrefix(prefix))
		l := mustLock(t, c, "k1")
		if got, err := c.List(ctx, ""); err != nil || !reflect.DeepEqual(got, []string{"k1"}) {
			t.Errorf("prefix %q: List() = %q, %v; want [k1]", prefix, got, err)
		}
		_ = l.Unlock(ctx)
	}
	mustLock(t, newClientOn(t, rdb, WithPrefix("ab:")), "theirs")
	rdb.HSet(ctx, "q:{}", "f", "v") // an application's own hash, shorter than "q*:{}"
	for _, prefix := range []string{"a*:", "q*:"} {
		if got, err := newClientOn(t, rdb, WithPrefix(prefix)).List(ctx, ""); err != nil || len(got) != 0 {
			t.Errorf("prefix %q: List() = %q, %v; want none (the only locks are under other prefixes)", prefix, got, err)
		}
	}
}

// shrinkAfterFirstScan deletes the filler keys once the first SCAN of a
// List has returned, and waits until Redis has shrunk its main hash table:
// SCAN may then return a key it returned before ("A given element may be
// returned multiple times", in Redis' SCAN documentation).
type shrinkAfterFirstScan struct {
	testutil.PassHook
	admin  *redis.Client
	filler []string
	done   atomic.Bool
}

func (h *shrinkAfterFirstScan) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "scan" && !h.done.Swap(true) {
			for i := 0; i < len(h.filler); i += 1000 {
				h.admin.Unlink(ctx, h.filler[i:min(i+1000, len(h.filler))]...)
			}
			// Until the server's cron has resized and rehashed the keyspace
			// (65536 buckets alone take 512 KiB).
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				stats, _ := h.admin.Do(ctx, "MEMORY", "STATS").Result()
				db := testutil.ReplyMap(testutil.ReplyMap(stats)["db.0"])
				if size, ok := db["overhead.hashtable.main"].(int64); ok && size < 256<<10 {
					break
				}
			}
		}
		return err
	}
}

// List returns each lock once, even where SCAN returns a key twice: when
// the keyspace shrinks while List walks it (other keys deleted meanwhile).
func TestListReturnsEachLockOnce(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	hook := &shrinkAfterFirstScan{admin: admin}
	rdb.AddHook(hook)
	c := newClientOn(t, rdb)
	const locks = 4000 // the shrunk table has 4096 buckets
	// Whether SCAN repeats a key depends on where the table stands when it
	// shrinks: several rounds make it all but certain.
	for round := range 8 {
		if err := admin.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		// Lock hashes as the acquire script writes them (quicker than 4000
		// Lock calls), and other keys that make the table large.
		pipe := admin.Pipeline()
		for i := range locks {
			pipe.HSet(ctx, c.keys(fmt.Sprintf("job:%d:%d", round, i)).lock, "token", 1, ":fence", 1)
		}
		hook.filler = hook.filler[:0]
		for i := range 40000 {
			k := fmt.Sprintf("filler:%d:%d", round, i)
			hook.filler = append(hook.filler, k)
			pipe.Set(ctx, k, 1, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		hook.done.Store(false)
		names, err := c.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, n := range names {
			if seen[n]++; seen[n] == 2 {
				t.Errorf("round %d: List returned %q twice", round, n)
			}
		}
		if len(seen) != locks {
			t.Fatalf("round %d: List returned %d distinct names for %d locks", round, len(seen), locks)
		}
	}
}

// A waiter that died (here: cut off from Redis) leaves its queue entry
// until the entry expires; a live waiter behind it keeps the queue's keys.
// Inspect counts only the entries that have not expired.
func TestInspectCountsLiveWaitersOnly(t *testing.T) {
	c, _, srv := newTestClient(t)
	ctx := context.Background()
	held := mustLock(t, c, "busy")
	defer held.Unlock(ctx)
	waiting := func(t *testing.T) int64 {
		info, err := c.Inspect(ctx, "busy")
		if err != nil {
			t.Fatal(err)
		}
		return info.Waiters
	}

	proxy := startProxy(t, srv.Addr())
	dead, _ := hookedClient(t, proxy.Addr(), scriptHook{}, WithQueueTTL(300*time.Millisecond))
	deadCtx, cancelDead := context.WithCancel(ctx)
	deadDone := make(chan error, 1)
	go func() { _, err := dead.Lock(deadCtx, "busy"); deadDone <- err }()
	waitUntil(t, 5*time.Second, "the first waiter to queue", func() bool { return waiting(t) == 1 })
	proxy.Freeze() // its refreshes no longer arrive: its entry expires in 300ms

	liveCtx, cancelLive := context.WithCancel(ctx)
	liveDone := make(chan error, 1)
	go func() { _, err := c.Lock(liveCtx, "busy"); liveDone <- err }()
	waitUntil(t, 5*time.Second, "the second waiter to queue", func() bool { return waiting(t) == 2 })
	waitUntil(t, 5*time.Second, "Inspect to count the live waiter alone", func() bool { return waiting(t) == 1 })

	cancelLive()
	cancelDead()
	proxy.Thaw()
	for _, done := range []chan error{liveDone, deadDone} {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled waiter: %v", err)
		}
	}
}

// Inspect reads a lock as it is after an Extend, which keeps its number in
// the lock's hash (':ext'): the holder is still the lock's token, held
// once. A lock whose expiry someone removed (PERSIST) reads a TTL of 0, as
// LockInfo says, not PTTL's -1 ms.
func TestInspectAfterExtendAndPersist(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "ext")
	defer l.Unlock(ctx)
	if err := l.Extend(ctx, 2*DefaultTTL); err != nil {
		t.Fatal(err)
	}
	info, err := c.Inspect(ctx, "ext")
	if err != nil || !info.Held || info.Owner != l.Token() || info.HoldCount != 1 || info.TTL <= DefaultTTL || info.TTL > 2*DefaultTTL {
		t.Errorf("Inspect after Extend = %+v, %v; want held once by %s, with the extended lease", info, err, l.Token())
	}
	if !rdb.Persist(ctx, c.keys("ext").lock).Val() {
		t.Fatal("PERSIST did not remove the lock's expiry")
	}
	info, err = c.Inspect(ctx, "ext")
	if err != nil || !info.Held || info.Owner != l.Token() || info.TTL != 0 {
		t.Errorf("Inspect of a lock without expiry = %+v, %v; want held, TTL 0", info, err)
	}
}

// A hash at a lock's name without ':fence' is not a lock: Lock, TryLock and
// ForceRelease say ErrWrongType (TestWrongTypeKey). Inspect must say so too,
// not report it held by "the token" named after one of its fields, with no
// lease: an operator would then see a held lock that release --force
// refuses as the wrong type. List names it, as its godoc says: SCAN cannot
// tell it from a lock.
func TestInspectHashThatIsNotALock(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	rdb.HSet(ctx, c.keys("foreign").lock, "user", "alice")
	info, err := c.Inspect(ctx, "foreign")
	if !errors.Is(err, ErrWrongType) {
		t.Errorf("Inspect of a hash that is not a lock = %+v, %v; want ErrWrongType", info, err)
	}
	if err := c.ForceRelease(ctx, "foreign"); !errors.Is(err, ErrWrongType) {
		t.Errorf("ForceRelease of a hash that is not a lock = %v, want ErrWrongType", err)
	}
	if names, err := c.List(ctx, ""); err != nil || !reflect.DeepEqual(names, []string{"foreign"}) {
		t.Errorf("List() = %q, %v; want the hash's name, as documented", names, err)
	}
}

// List matches a pattern against the keys as Redis matches a glob against
// names (KEYS, SCAN MATCH), also where the pattern ends open: Redis reads
// a trailing backslash as itself, so the '}' List puts after the pattern
// must not be what it escapes, nor end up inside a class left open.
func TestListPatternEndsAsInRedis(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	keys := []string{"a", `a\`, "ab", "a]"}
	// The keys themselves as names in another database: what Redis
	// matches there is what List must return.
	plain := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, DB: 1})
	defer plain.Close()
	for _, k := range keys {
		defer mustLock(t, c, k).Unlock(ctx)
		plain.Set(ctx, k, 1, 0)
	}
	for _, pattern := range []string{`a\`, `*\`, `a\\`, `a\]`, "a[]]", "a[]", "[a]?", "a*", "a[^-]", "a[^]]"} {
		want, err := plain.Keys(ctx, pattern).Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(want)
		if got, err := c.List(ctx, pattern); err != nil || !slices.Equal(got, want) {
			t.Errorf("List(%q) = %q, %v; want %q, as KEYS matches", pattern, got, err, want)
		}
		if err := CheckListPattern(pattern); err != nil {
			t.Errorf("CheckListPattern(%q) = %v, want nil", pattern, err)
		}
	}
	// A class left open would take in the '}': such a pattern is refused.
	for _, pattern := range []string{"a[", "[a", "a[b-", "a[b-]", `a[\`} {
		if got, err := c.List(ctx, pattern); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("List(%q) = %q, %v; want ErrInvalidOption", pattern, got, err)
		}
		// CheckListPattern, for callers that check before they connect,
		// says the same.
		if err := CheckListPattern(pattern); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("CheckListPattern(%q) = %v, want ErrInvalidOption", pattern, err)
		}
	}
}

// A lock whose queue or waiters key holds another type (other code wrote
// there) has no waiter to hand over to. Its release and force-release must
// still complete and say so: Redis does not roll a script back, so a
// script that failed in the hand-over had already deleted the lock while
// its caller heard of a failure (and Unlock then gave the lock up as lost).
func TestReleaseWithWrongTypeQueueCompletes(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	for _, force := range []bool{false, true} {
		for _, foreign := range []string{"queue", "waiters"} {
			key := fmt.Sprintf("%s-%v", foreign, force)
			k := c.keys(key)
			l := mustLock(t, c, key)
			name := k.queue
			if foreign == "waiters" {
				// A queued entry, so that the hand-over reads the waiters.
				rdb.ZAdd(ctx, k.queue, redis.Z{Score: 1, Member: "w"})
				name = k.waiters
			}
			rdb.Set(ctx, name, "other data", 0)
			var err error
			if force {
				err = c.ForceRelease(ctx, key)
			} else {
				err = l.Unlock(ctx)
			}
			if err != nil {
				t.Errorf("%s (force %v): release = %v, want nil", foreign, force, err)
			}
			if rdb.Exists(ctx, k.lock).Val() != 0 {
				t.Errorf("%s (force %v): the lock is still there", foreign, force)
			}
			if v := rdb.Get(ctx, name).Val(); v != "other data" {
				t.Errorf("%s (force %v): the other code's value is now %q", foreign, force, v)
			}
		}
	}
}

// List lists one kind at a time: locks by default, with WithKind the
// semaphores or RWMutexes that have holders, never another kind's names
// (a lock, a semaphore and an RWMutex of one name are three things) nor
// the fence, queue and waiters names of any kind, which exist here for
// each (a waiter is queued on "x" of every kind).
func TestListKinds(t *testing.T) {
	c, rdb, _ := newTestClient(t, noPolling)
	ctx := context.Background()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var waiting []<-chan lockResult
	for _, k := range []string{"x", "l", "y}:semaphore"} {
		defer mustLock(t, c, k).Unlock(ctx)
	}
	waiting = append(waiting, inBackground(func() (*Lock, error) { return c.Lock(wctx, "x") }))
	waitUntil(t, 5*time.Second, "the lock's waiter to queue", func() bool {
		info, _ := c.Inspect(ctx, "x")
		return info != nil && info.Waiters == 1
	})
	sems := []string{"x", "s1", "}a", "a}b", "\xffb", "y}"}
	for _, name := range sems {
		l, err := c.Semaphore(name, 1).Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(ctx)
	}
	waiting = append(waiting, acquireAsync(wctx, c.Semaphore("x", 1), 1))
	waitSemQueued(t, rdb, c.Semaphore("x", 1), 1)
	for _, name := range []string{"x", "r"} {
		l, err := c.RWMutex(name).RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(ctx)
	}
	waiting = append(waiting, inBackground(func() (*Lock, error) { return c.RWMutex("x").Lock(wctx) }))
	waitSemQueued(t, rdb, &c.RWMutex("x").s, 1)
	// The names of every kind that List must not return are there.
	for _, k := range []*lockKeys{c.keys("x"), semKeys(c.Semaphore("x", 1)), semKeys(&c.RWMutex("x").s)} {
		if n := rdb.Exists(ctx, k.fence, k.queue, k.waiters).Val(); n != 3 {
			t.Fatalf("%s: %d of its fence, queue and waiters names exist, want 3", k.lock, n)
		}
	}

	for _, tc := range []struct {
		opts    []ListOption
		pattern string
		want    []string
	}{
		{nil, "", []string{"l", "x", "y}:semaphore"}},
		{[]ListOption{WithKind("lock")}, "", []string{"l", "x", "y}:semaphore"}},
		{[]ListOption{WithKind("semaphore")}, "", []string{"a}b", "s1", "x", "y}", "}a", "\xffb"}},
		{[]ListOption{WithKind("rwmutex")}, "*", []string{"r", "x"}},
		{[]ListOption{WithKind("semaphore")}, "?", []string{"x"}},
		{[]ListOption{WithKind("semaphore")}, "}*", []string{"}a"}},
		{[]ListOption{WithKind("semaphore")}, "\xff*", []string{"\xffb"}},
		{[]ListOption{WithKind("semaphore")}, "y*", []string{"y}"}},
		{[]ListOption{WithKind("semaphore")}, "*b", []string{"a}b", "\xffb"}},
		{[]ListOption{WithKind("rwmutex")}, "s*", []string{}},
		{[]ListOption{nil, WithKind("rwmutex"), WithKind("semaphore")}, "s?", []string{"s1"}}, // the last kind counts
	} {
		got, err := c.List(ctx, tc.pattern, tc.opts...)
		if got == nil {
			got = []string{}
		}
		if err != nil || !slices.Equal(got, tc.want) {
			var kind listConfig
			for _, o := range tc.opts {
				if o != nil {
					o(&kind)
				}
			}
			t.Errorf("List(%q, kind %q) = %q, %v; want %q", tc.pattern, kind.kind, got, err, tc.want)
		}
	}
	for _, kind := range []string{"", "Semaphore", "locks", "semaphore:fence"} {
		if got, err := c.List(ctx, "", WithKind(kind)); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("List(kind %q) = %q, %v; want ErrInvalidOption", kind, got, err)
		}
	}
	cancel()
	for _, w := range waiting {
		if r := <-w; !errors.Is(r.err, context.Canceled) {
			t.Errorf("a waiter that gave up: %v", r.err)
		}
	}
}

// A semaphore is listed while it has holders: its holders hash goes with
// the last one.
func TestListSemaphoreWithoutHolders(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	s := c.Semaphore("pool", 3)
	check := func(want ...string) {
		t.Helper()
		if got, err := c.List(ctx, "", WithKind("semaphore")); err != nil || len(got)+len(want) > 0 && !slices.Equal(got, want) {
			t.Errorf("List(semaphores) = %q, %v; want %q", got, err, want)
		}
	}
	a, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	check("pool")
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	check("pool")
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	check()
}

// Other data at a lock's fence counter or waiters name is an error of
// Inspect's (ErrWrongType), but the lock itself is sound: Inspect still
// returns it, so that an operator sees the holder that ForceRelease
// removes.
func TestInspectForeignDataAtLockNames(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	for _, name := range []string{"fence", "waiters"} {
		k := c.keys(name)
		l := mustLock(t, c, name)
		other := k.fence
		if name == "waiters" {
			other = k.waiters
		}
		rdb.Del(ctx, other)
		rdb.RPush(ctx, other, "other data")
		info, err := c.Inspect(ctx, name)
		if !errors.Is(err, ErrWrongType) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: Inspect error %v, want ErrWrongType naming the %s", name, err, name)
		}
		if info == nil || !info.Held || info.Owner != l.Token() || info.Fence != l.Fence() || info.TTL <= 0 || info.Waiters != 0 {
			t.Errorf("%s: Inspect = %+v, want the lock as held by %s (fence %d)", name, info, l.Token(), l.Fence())
		}
		if err := c.ForceRelease(ctx, name, WithExpectedOwner(l.Token())); err != nil {
			t.Errorf("%s: ForceRelease = %v", name, err)
		}
		if info, err := c.Inspect(ctx, name); info == nil || info.Held || !errors.Is(err, ErrWrongType) {
			t.Errorf("%s: Inspect after ForceRelease = %+v, %v; want free, with ErrWrongType", name, info, err)
		}
		if got := rdb.LRange(ctx, other, 0, -1).Val(); !slices.Equal(got, []string{"other data"}) {
			t.Errorf("%s: the other code's data is now %q", name, got)
		}
	}
}
