package dlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
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
	dying, err := m.RLock(ctx, WithTTL(time.Minute), WithoutRenewal())
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
	if err := dying.Extend(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
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
	// The shorter lease runs from when Redis applies the Extend, which may
	// be long before its reply is read on a loaded machine: timed from
	// after the reply, the waiter could seem served early.
	start := time.Now()
	if err := held[0].Extend(ctx, lease); err != nil {
		t.Fatal(err)
	}
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

// Holders written by hand that hold more than the capacity leave no
// permit free: Available says 0, not a negative count.
func TestSemaphoreAvailableOfOverfullHolders(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	s := c.Semaphore("pool", 3)
	key := semKeys(s).lock
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	expiry := now.Add(time.Minute).UnixMilli()
	rdb.HSet(ctx, key, "aaaa", fmt.Sprintf("%d 2 3 7 0 meta", expiry), "bbbb", fmt.Sprintf("%d 2 3 8 0 meta", expiry))
	rdb.PExpire(ctx, key, time.Minute)
	if n, err := s.Available(ctx); err != nil || n != 0 {
		t.Fatalf("Available with 4 permits of 3 held: %d, %v; want 0", n, err)
	}
}

// checkSemState compares the bookkeeping of the holders hash at key with
// its entries: used must be their permits' sum, soonest at or before the
// earliest expiry, and no ':state' without entries.
func checkSemState(t *testing.T, rdb *redis.Client, key string, step string) {
	t.Helper()
	ctx := context.Background()
	// In this order, the PTTL is read no later than the time, so it may
	// only seem longer than it is.
	pttl := rdb.PTTL(ctx, key).Val()
	all, err := rdb.HGetAll(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var sum, live, liveCap, maxExp int64
	var minExp int64 = -1
	entries := 0
	for f, v := range all {
		if f == ":state" {
			continue
		}
		entries++
		p := strings.Fields(v)
		exp, _ := strconv.ParseInt(p[0], 10, 64)
		n, _ := strconv.ParseInt(p[1], 10, 64)
		sum += n
		if exp > now.UnixMilli() {
			live += n
			c, _ := strconv.ParseInt(p[2], 10, 64)
			if liveCap != 0 && c != liveCap {
				t.Fatalf("%s: live holders of capacities %d and %d: %v", step, c, liveCap, all)
			}
			liveCap = c
		}
		maxExp = max(maxExp, exp)
		if minExp < 0 || exp < minExp {
			minExp = exp
		}
	}
	if live > liveCap && liveCap > 0 {
		t.Fatalf("%s: %d permits live, capacity %d: %v", step, live, liveCap, all)
	}
	if left := time.Duration(maxExp-now.UnixMilli()) * time.Millisecond; entries > 0 && left > 0 {
		if pttl < left-time.Millisecond {
			t.Fatalf("%s: holders key PTTL %v, a holder's lease %v: %v", step, pttl, left, all)
		}
	}
	st, ok := all[":state"]
	if !ok {
		return
	}
	if entries == 0 {
		t.Fatalf("%s: ':state' %q left without any holder", step, st)
	}
	p := strings.Fields(st)
	used, _ := strconv.ParseInt(p[0], 10, 64)
	soonest, _ := strconv.ParseInt(p[1], 10, 64)
	if used != sum {
		t.Fatalf("%s: used %d != %d, the entries' permits: %v", step, used, sum, all)
	}
	if soonest > minExp {
		t.Fatalf("%s: soonest %d after the earliest expiry %d: %v", step, soonest, minExp, all)
	}
}

// A random run of every semaphore call (acquires, waiting or not, with
// hand-overs; releases, of holders and of waiters giving up; renewals;
// Extends shortening and lengthening, some out of order; Available;
// calls of another capacity; foreign data among the holders), the
// bookkeeping checked against the entries after each.
func TestSemaphoreBookkeepingUnderRandomCalls(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	const capacity = 5
	s := c.Semaphore("fuzz", capacity)
	k := semKeys(s)
	keys := k.all()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	tokens := make([]string, 12)
	for i := range tokens {
		tokens[i] = fmt.Sprintf("%032x", i+1)
	}
	ext := map[string]int{}
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		tok := tokens[rng.Intn(len(tokens))]
		var step string
		var err error
		cp := int64(capacity)
		if rng.Intn(8) == 0 {
			cp = 7
		}
		switch op := rng.Intn(8); op {
		case 0, 1:
			lease := 20 + rng.Intn(200)
			wait := "0"
			if rng.Intn(2) == 0 {
				wait = "1"
			}
			n := 1 + rng.Intn(3)
			step = fmt.Sprintf("%d acquire %s n=%d lease=%d wait=%s", i, tok[28:], n, lease, wait)
			err = permitsAcquireScript.Run(ctx, rdb, keys, tok, lease, "m", wait, 500, lease, "cl", n, cp).Err()
		case 2:
			step = fmt.Sprintf("%d release %s", i, tok[28:])
			err = permitsReleaseScript.Run(ctx, rdb, keys, tok, cp).Err()
		case 3:
			lease := 1 + rng.Intn(300)
			step = fmt.Sprintf("%d renew %s %d", i, tok[28:], lease)
			err = permitsExtendScript.Run(ctx, rdb, []string{k.lock}, tok, lease, "renew").Err()
		case 4:
			lease := 1 + rng.Intn(300)
			ext[tok]++
			e := ext[tok]
			if rng.Intn(4) == 0 && e > 1 {
				e -= 1 + rng.Intn(e-1+1)
			}
			step = fmt.Sprintf("%d extend %s %d ext=%d", i, tok[28:], lease, e)
			err = permitsExtendScript.Run(ctx, rdb, []string{k.lock}, tok, lease, e).Err()
		case 5:
			step = fmt.Sprintf("%d available", i)
			err = availableScript.Run(ctx, rdb, []string{k.lock}, cp).Err()
		case 6:
			// Leases run out: time is the subject.
			time.Sleep(time.Duration(rng.Intn(10)) * time.Millisecond)
			step = fmt.Sprintf("%d sleep", i)
		case 7:
			// Foreign data among the holders fails the calls that read
			// them all, before they write anything.
			step = fmt.Sprintf("%d foreign field, then acquire %s", i, tok[28:])
			rdb.HSet(ctx, k.lock, "zz", "not a holder")
			err = permitsAcquireScript.Run(ctx, rdb, keys, tok, 100, "m", "0", 500, 100, "cl", 1, cp).Err()
			rdb.HDel(ctx, k.lock, "zz")
			if err != nil && strings.Contains(err.Error(), "not a semaphore") {
				err = nil
			}
		}
		step += fmt.Sprintf(" cap=%d", cp)
		if err != nil && strings.Contains(err.Error(), "capacity mismatch") {
			err = nil
		}
		if err != nil && err != redis.Nil {
			t.Fatalf("%s: %v", step, err)
		}
		checkSemState(t, rdb, k.lock, step)
	}
}

// A call refused for its capacity must not have dropped expired holders
// first (Redis does not roll a failed script back): the count would go on
// counting them, and the last live holder leaving would leave the
// bookkeeping behind at the semaphore's name, alone, until the key
// expires.
func TestSemaphoreCapacityMismatchLeavesNoBookkeepingBehind(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	s := c.Semaphore("pool", 3)
	k := semKeys(s)
	dead, err := s.Acquire(ctx, 1, WithTTL(100*time.Millisecond), WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	live, err := s.Acquire(ctx, 1, WithTTL(time.Minute), WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	// The dead holder's lease runs out (the subject: no call drops it).
	waitUntil(t, 5*time.Second, "the short lease to run out", func() bool {
		v, err := permitsTTLScript.Run(ctx, rdb, []string{k.lock}, dead.Token()).Int64()
		return err == nil && v == -3
	})
	if _, err := c.Semaphore("pool", 5).TryAcquire(ctx, 1); err == nil || !strings.Contains(err.Error(), "capacity") {
		t.Fatalf("TryAcquire with another capacity: %v, want a capacity mismatch", err)
	}
	checkSemState(t, rdb, k.lock, "after the refused call")
	if err := live.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if all := rdb.HGetAll(ctx, k.lock).Val(); len(all) != 0 {
		t.Fatalf("holders key after every holder left: %v", all)
	}
}

// The README's figure: a read lock taken and given back costs Redis as
// many commands among 1000 other readers as among one other (and one
// fewer alone, whose release deletes the count instead of rewriting it).
func TestReadLockCostsTheSameAmongManyReaders(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	m := c.RWMutex("catalog")
	pair := func() int64 {
		t.Helper()
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		l, err := m.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		_, all := commandCalls(t, rdb)
		return all
	}
	pair() // the scripts loaded
	alone := pair()
	others := 0
	cost := map[int]int64{}
	for _, n := range []int{1, 1000} {
		for ; others < n; others++ {
			if _, err := m.RLock(ctx, WithTTL(time.Hour), WithoutRenewal()); err != nil {
				t.Fatal(err)
			}
		}
		cost[n] = pair()
	}
	if cost[1000] != cost[1] || cost[1] != alone+1 {
		t.Fatalf("commands per read lock: %d alone, %d among 1 other reader, %d among 1000; want the same among 1 and 1000, one more than alone", alone, cost[1], cost[1000])
	}
	t.Logf("commands per read lock: %d alone, %d among other readers", alone, cost[1])
}
