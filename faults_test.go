package dlock

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/tcpproxy"
	"github.com/dlock-go/dlock/internal/testutil"
)

func TestMutualExclusionGoroutines(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const workers, each = 8, 25
	var wg sync.WaitGroup
	var inside, overlaps atomic.Int32
	for i := 0; i < workers; i++ {
		c := newClientOn(t, srv.Client(t)) // a Client per worker, as separate services would have
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < each; j++ {
				err := c.Do(ctx, "counter", func(ctx context.Context) error {
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					defer inside.Add(-1)
					v, _ := rdb.Get(ctx, "count").Int()
					return rdb.Set(ctx, "count", v+1, 0).Err()
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got, _ := rdb.Get(ctx, "count").Int(); got != workers*each {
		t.Errorf("count = %d, want %d", got, workers*each)
	}
	if overlaps.Load() != 0 {
		t.Errorf("%d overlapping critical sections", overlaps.Load())
	}
}

// worker returns this test binary as a separate process in the given role,
// for testutil.StartProcess.
func worker(t *testing.T, srv *redistest.Server, role string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"="+role, "DLOCK_TEST_ADDR="+srv.Addr())
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	return cmd
}

func TestMutualExclusionProcesses(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const procs, each = 4, 25
	var cmds []*exec.Cmd
	for i := 0; i < procs; i++ {
		cmd := worker(t, srv, "counter", "DLOCK_TEST_N=25")
		testutil.StartProcess(t, cmd)
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("worker: %v", err)
		}
	}
	if got, _ := rdb.Get(ctx, "count").Int(); got != procs*each {
		t.Errorf("count = %d, want %d", got, procs*each)
	}
	if n := rdb.LLen(ctx, "overlaps").Val(); n != 0 {
		t.Errorf("%d overlapping critical sections", n)
	}
}

func TestKilledHolderFreesLockAfterLease(t *testing.T) {
	srv := redistest.Start(t)
	c := newClientOn(t, srv.Client(t))
	cmd := worker(t, srv, "holder")
	out, _ := cmd.StdoutPipe()
	testutil.StartProcess(t, cmd)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "locked") {
		t.Fatalf("holder said %q, %v", line, err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	killed := time.Now()
	l, err := c.Lock(context.Background(), "crash")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	// The holder renewed its 500 ms lease every ~167 ms until killed; the
	// waiter checks again when the lease it was told of runs out, not at
	// its next queue refresh (1 s). The slack is for a loaded machine.
	if d := time.Since(killed); d > 800*time.Millisecond {
		t.Errorf("lock free %v after its holder was killed, want within the 500ms lease", d)
	}
}

func TestHolderCutOffLearnsOfLossBeforeOthersAcquire(t *testing.T) {
	srv := redistest.Start(t)
	proxy := startProxy(t, srv.Addr())
	cut := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	defer cut.Close()
	holder := newClientOn(t, cut)
	other := newClientOn(t, srv.Client(t))

	l := mustLock(t, holder, "partition", WithTTL(400*time.Millisecond))
	proxy.Freeze() // renewals stop reaching Redis
	l2 := endsBeforeTaken(t, l, other, nil)
	if !errors.Is(context.Cause(l.Context()), ErrLockLost) {
		t.Errorf("cause = %v", context.Cause(l.Context()))
	}
	if l2.Fence() <= l.Fence() {
		t.Error("new holder's fence is not larger")
	}
	proxy.Thaw()
}

// endsBeforeTaken takes l's key through other, which gets it once l's
// lease in Redis has run out, and checks that l's Context ended before:
// never live while another client holds the lock. It returns other's lock,
// unlocked when the test ends. giveUp, if not nil, runs before the test
// fails (to let a call held back go on).
func endsBeforeTaken(t *testing.T, l *Lock, other *Client, giveUp func()) *Lock {
	t.Helper()
	fail := func(format string, args ...any) {
		if giveUp != nil {
			giveUp()
		}
		t.Fatalf(format, args...)
	}
	var lostAt time.Time
	lostSeen := make(chan struct{})
	go func() {
		<-l.Done()
		lostAt = time.Now()
		close(lostSeen)
	}()
	l2, err := other.Lock(context.Background(), l.Key())
	if err != nil {
		fail("%v", err)
	}
	acquiredAt := time.Now()
	// Read at once: lostAt is only when the goroutine above ran, which
	// under load can be well after the Context ended.
	ended := l.Context().Err() != nil
	t.Cleanup(func() { _ = l2.Unlock(context.Background()) })
	select {
	case <-lostSeen:
	case <-time.After(5 * time.Second):
		fail("the holder's Context outlived its lease in Redis")
	}
	if !ended {
		t.Errorf("holder learned of the loss %v after another client acquired", lostAt.Sub(acquiredAt))
	}
	return l2
}

func TestRedisRestartWhileHeld(t *testing.T) {
	srv := redistest.Start(t)
	c := newClientOn(t, srv.Client(t))
	l := mustLock(t, c, "restart", WithTTL(300*time.Millisecond))
	srv.Restart(t) // no persistence: the lock and the script cache are gone
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("holder not told that its lock vanished")
	}
	if !errors.Is(context.Cause(l.Context()), ErrLockLost) {
		t.Errorf("cause = %v", context.Cause(l.Context()))
	}
	l2 := mustLock(t, c, "restart")
	if err := l2.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// With appendonly yes and appendfsync always, a single server that crashes
// (SIGKILL: no shutdown) restarts with its locks, their absolute expiry and
// the fence counter, and the holder keeps renewing through the restart
// (README.md, docs/safety.md). A process crash keeps what Redis wrote to
// the AOF before replying whatever the fsync policy; "always" is for a
// crash of the host, which a test cannot cause.
func TestAOFAlwaysLocksSurviveCrash(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, redistest.WithConfig("appendonly", "yes"), redistest.WithConfig("appendfsync", "always"))
	rdb := srv.Client(t)
	c, other := newClientOn(t, rdb), newClientOn(t, rdb)
	held := mustLock(t, c, "renewed", WithTTL(4*time.Second))
	const fixedTTL = 5 * time.Second
	fixed := mustLock(t, c, "fixed", WithTTL(fixedTTL), WithoutRenewal())
	granted := time.Now()
	fence, err := rdb.Get(ctx, c.keys("fixed").fence).Uint64()
	if err != nil || fence != fixed.Fence() {
		t.Fatalf("fence counter before the crash = %d, %v; want %d", fence, err, fixed.Fence())
	}

	srv.Kill(t)
	srv.Restart(t)

	// The expiry is absolute: the time the server was down counts.
	asked := time.Now()
	if d, err := rdb.PTTL(ctx, c.keys("fixed").lock).Result(); err != nil || d <= 0 || d > fixedTTL-asked.Sub(granted)+time.Millisecond {
		t.Errorf("lease after the restart = %v, %v; want at most %v", d, err, fixedTTL-asked.Sub(granted))
	}
	if n, err := rdb.Get(ctx, c.keys("fixed").fence).Uint64(); err != nil || n != fence {
		t.Errorf("fence counter after the restart = %d, %v; want %d", n, err, fence)
	}
	k := c.keys(held.Key())
	for range 2 {
		waitRenewal(t, rdb, k.lock)
	}
	if held.Context().Err() != nil || fixed.Context().Err() != nil {
		t.Fatalf("lock lost across a crash with AOF: %v, %v", context.Cause(held.Context()), context.Cause(fixed.Context()))
	}
	for _, l := range []*Lock{held, fixed} {
		if _, err := other.TryLock(ctx, l.Key()); !errors.Is(err, ErrNotObtained) {
			t.Errorf("TryLock(%q) after the restart = %v, want ErrNotObtained", l.Key(), err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
}

func TestBadInput(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	if _, err := New(nil); !errors.Is(err, ErrNilClient) {
		t.Errorf("New(nil) = %v", err)
	}
	var typedNil *redis.Client
	if _, err := New(typedNil); !errors.Is(err, ErrNilClient) {
		t.Errorf("New((*redis.Client)(nil)) = %v", err)
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": rdb.Options().Addr}})
	defer ring.Close()
	if _, err := New(ring); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("New(a Ring) = %v, want ErrInvalidOption", err)
	}
	if _, err := New(rdb, WithPrefix("")); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("empty prefix = %v", err)
	}
	// A '{' in the prefix would start the hash tag there: "p" with key
	// "a}x{b" and "p{a}x" with key "b" would name one lock, and "{}" would
	// scatter a lock's names over cluster slots.
	for _, prefix := range []string{"p{a}x", "{}", "{app}:"} {
		if _, err := New(rdb, WithPrefix(prefix)); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("prefix %q = %v, want ErrInvalidOption", prefix, err)
		}
	}
	// Holder metadata is stored as JSON, which would change invalid UTF-8.
	if _, err := New(rdb, WithClientName("n\xffame")); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("client name that is not UTF-8 = %v, want ErrInvalidOption", err)
	}
	if _, err := New(rdb, WithQueueTTL(time.Millisecond)); !errors.Is(err, ErrInvalidTTL) {
		t.Errorf("tiny queue ttl = %v", err)
	}
	cases := []struct {
		name string
		key  string
		opts []LockOption
		want error
	}{
		{"empty key", "", nil, ErrInvalidKey},
		{"huge key", strings.Repeat("k", 2000), nil, ErrInvalidKey},
		{"zero ttl", "k", []LockOption{WithTTL(0)}, ErrInvalidTTL},
		{"negative ttl", "k", []LockOption{WithTTL(-time.Second)}, ErrInvalidTTL},
		{"absurd ttl", "k", []LockOption{WithTTL(365 * 24 * time.Hour)}, ErrInvalidTTL},
		{"negative max hold", "k", []LockOption{WithMaxHold(-1)}, ErrInvalidTTL},
		{"conflict", "k", []LockOption{WithoutRenewal(), WithMaxHold(time.Second)}, ErrInvalidOption},
		{"metadata not UTF-8", "k", []LockOption{WithMetadata("job\xff1")}, ErrInvalidOption},
		{"metadata too long", "k", []LockOption{WithMetadata(strings.Repeat("m", MaxKeyLen+1))}, ErrInvalidOption},
		// Zero delays would make Lock re-run its check in a tight loop.
		{"retry without delay", "k", []LockOption{WithRetry(FixedRetry(0, 0))}, ErrInvalidOption},
		{"retry with negative attempts", "k", []LockOption{WithRetry(FixedRetry(time.Second, -1))}, ErrInvalidOption},
		{"exponential retry capped at 0", "k", []LockOption{WithRetry(ExponentialRetry(10*time.Millisecond, 0, 0))}, ErrInvalidOption},
	}
	for _, tc := range cases {
		if _, err := c.Lock(ctx, tc.key, tc.opts...); !errors.Is(err, tc.want) {
			t.Errorf("%s: Lock = %v, want %v", tc.name, err, tc.want)
		}
		if _, err := c.TryLock(ctx, tc.key, tc.opts...); !errors.Is(err, tc.want) {
			t.Errorf("%s: TryLock = %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := c.Do(ctx, "k", nil); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("Do(nil fn) = %v", err)
	}
	// CheckMetadata, for callers that check before they connect, is the
	// rule Lock applies.
	for _, s := range []string{"job\xff1", strings.Repeat("m", MaxKeyLen+1)} {
		if err := CheckMetadata(s); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("CheckMetadata(%.10q...) = %v, want ErrInvalidOption", s, err)
		}
	}
	for _, s := range []string{"", "job 7", strings.Repeat("é", MaxKeyLen/2)} {
		if err := CheckMetadata(s); err != nil {
			t.Errorf("CheckMetadata(%.10q...) = %v, want nil", s, err)
		}
	}
}

func TestWrongTypeKey(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	rdb.Set(ctx, c.keys("str").lock, "not a lock", 0)
	if _, err := c.TryLock(ctx, "str"); !errors.Is(err, ErrWrongType) {
		t.Errorf("TryLock on a string key = %v, want ErrWrongType", err)
	}
	if _, err := c.Lock(ctx, "str"); !errors.Is(err, ErrWrongType) {
		t.Errorf("Lock on a string key = %v, want ErrWrongType", err)
	}
	if rdb.Get(ctx, c.keys("str").lock).Val() != "not a lock" {
		t.Error("the foreign value was changed")
	}
	// A hash that is not a lock (no ':fence'): taking it would write into
	// another's data, and Unlock (or ForceRelease) would delete it.
	rdb.HSet(ctx, c.keys("hash").lock, "user", "alice")
	for _, lock := range []func(context.Context, string, ...LockOption) (*Lock, error){c.TryLock, c.Lock} {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		l, err := lock(wctx, "hash")
		cancel()
		if !errors.Is(err, ErrWrongType) {
			t.Errorf("taking a hash that is not a lock = %v, want ErrWrongType", err)
		}
		if l != nil {
			_ = l.Unlock(ctx)
		}
	}
	if err := c.ForceRelease(ctx, "hash"); !errors.Is(err, ErrWrongType) {
		t.Errorf("ForceRelease of a hash that is not a lock = %v, want ErrWrongType", err)
	}
	if got := rdb.HGetAll(ctx, c.keys("hash").lock).Val(); len(got) != 1 || got["user"] != "alice" {
		t.Errorf("the foreign hash is now %v", got)
	}
	if ttl := rdb.PTTL(ctx, c.keys("hash").lock).Val(); ttl != -1 {
		t.Errorf("the foreign hash got an expiry: %v", ttl)
	}
	rdb.HSet(ctx, c.keys("fence").fence, "a", 1)
	if _, err := c.TryLock(ctx, "fence"); !errors.Is(err, ErrWrongType) {
		t.Errorf("TryLock with a fence counter of the wrong type = %v, want ErrWrongType", err)
	}
	if n := rdb.Exists(ctx, c.keys("fence").lock).Val(); n != 0 {
		t.Error("a lock was written beside a fence counter of the wrong type")
	}
}

// A fence counter that is not a number (written by hand), or not even a
// string, starts again from the server clock, the floor that covers a lost
// counter, when the grant is a hand-over, which must not stop half done
// (the release has deleted the lock and popped the waiter by then).
func TestCorruptFenceCounter(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	k := c.keys("corrupt")
	l := mustLock(t, c, "corrupt")
	got := make(chan *Lock, 1)
	// Clients made here, not on the waiters' goroutines: newClientOn may
	// call t.Fatal.
	waiter := newClientOn(t, rdb)
	go func() {
		w, err := waiter.Lock(ctx, "corrupt")
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	handed := func() *Lock {
		select {
		case w := <-got:
			return w
		case <-time.After(10 * time.Second):
			t.Fatal("no hand-over within 10s")
			return nil
		}
	}
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c, "corrupt") == 1 })
	for _, bad := range []string{"x", "inf", "1e300", "a list"} {
		if bad == "a list" {
			rdb.Del(ctx, k.fence)
			rdb.LPush(ctx, k.fence, "x")
		} else {
			rdb.Set(ctx, k.fence, bad, 0)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("counter %q: Unlock = %v", bad, err)
		}
		w := handed()
		if w == nil {
			return
		}
		if w.Fence() <= l.Fence() {
			t.Errorf("counter %q: handed-over fence %d <= previous %d", bad, w.Fence(), l.Fence())
		}
		if ttl := rdb.PTTL(ctx, k.fence).Val(); ttl <= 23*time.Hour {
			t.Errorf("counter %q: the repaired counter expires in %v, want about 24h", bad, ttl)
		}
		// The next round: w holds the lock, a new waiter queues behind it.
		l = w
		waiter := newClientOn(t, rdb)
		go func() {
			w, err := waiter.Lock(ctx, "corrupt")
			if err != nil {
				t.Error(err)
			}
			got <- w
		}()
		waitUntil(t, 5*time.Second, "the next waiter to queue", func() bool { return queued(t, rdb, c, "corrupt") == 1 })
	}
	_ = l.Unlock(ctx)
	if w := handed(); w != nil {
		_ = w.Unlock(ctx)
	}
}

func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer rdb.Close()
	c := newClientOn(t, rdb)
	srv.Stop(t)
	ctx := context.Background()
	_, err := c.Lock(ctx, "down")
	if err == nil || errors.Is(err, ErrNotObtained) {
		t.Fatalf("Lock with Redis down = %v, want the connection error", err)
	}
	if _, err := c.TryLock(ctx, "down"); err == nil {
		t.Fatal("TryLock with Redis down succeeded")
	}
	// goleak in TestMain checks that nothing was left running.
}

// A restart without persistence drops the lock, and the holder learns it
// at its next renewal, up to d/3 later (docs/safety.md), not at its
// deadline: the lease here is long enough for the two to differ.
func TestRestartLossKnownAtNextRenewal(t *testing.T) {
	c, _, srv := newTestClient(t)
	const ttl = 3 * time.Second // renewed every 1 s; deadline ~2.97 s
	l := mustLock(t, c, "restart-bound", WithTTL(ttl))
	srv.Restart(t)
	restarted := time.Now()
	select {
	case <-l.Done():
	case <-time.After(ttl):
		t.Fatal("holder not told within the lease that the restart dropped its lock")
	}
	late := time.Since(restarted)
	cause := context.Cause(l.Context())
	if !errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", cause)
	}
	if strings.Contains(cause.Error(), "ran out") {
		t.Errorf("lost at the deadline (%v), not by the next renewal: %v", late, cause)
	}
	// d/3, plus a retry period (d/10) for a renewal that met the server
	// while it was down, plus scheduling slack on a loaded machine.
	if limit := ttl/3 + ttl/10 + 200*time.Millisecond; late > limit {
		t.Errorf("holder told %v after the restart, want within d/3 (%v, limit %v)", late, ttl/3, limit)
	}
}

// A waiter whose check finds the lock's name taken by a value of another
// type (a string written over it while it waited) fails with ErrWrongType.
// Like every failed acquisition it must leave no queue entry behind: once
// the foreign value is gone, that entry would be handed the lock, held
// by nobody, until the hand-over lease runs out.
func TestWaiterFailingOnWrongTypeLeavesTheQueue(t *testing.T) {
	// A long queue TTL: an entry left behind stays live for the test; the
	// waiter's short lease makes it check every 100 ms all the same.
	c, rdb, _ := newTestClient(t, WithQueueTTL(time.Hour))
	ctx := context.Background()
	k := c.keys("foreign")
	l := mustLock(t, c, "foreign")
	got := lockThenUnlock(ctx, c, "foreign", WithTTL(300*time.Millisecond))
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, c, "foreign") == 1 })
	// Other code writes a string at the lock's name.
	if err := rdb.Set(ctx, k.lock, "not a lock", 0).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, ErrWrongType) {
			t.Fatalf("Lock = %v, want ErrWrongType", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not give up on the wrong-type key")
	}
	if n := queued(t, rdb, c, "foreign"); n != 0 {
		t.Errorf("%d entries left in the queue by the failed Lock", n)
	}
	// The foreign value goes away: the lock is free, nobody waits for it.
	rdb.Del(ctx, k.lock)
	_ = l.Unlock(ctx) // its lock is gone: ErrNotHeld
	other := newClientOn(t, rdb)
	o, err := other.TryLock(ctx, "foreign")
	if err != nil {
		t.Fatalf("TryLock of a free lock nobody waits for = %v", err)
	}
	_ = o.Unlock(ctx)
}

// A waiter's check that finds other data at the waiters' name fails with
// ErrWrongType having written nothing: Redis does not roll a failed script
// back, and a token queued without its entry would stay, in a queue key
// created without an expiry, if leaving the queue then failed too (the
// connection dropped).
func TestWaiterOnWrongTypeWaitersWritesNothing(t *testing.T) {
	srv := redistest.Start(t)
	holder := newClientOn(t, srv.Client(t))
	rdb := srv.Client(t)
	ctx := context.Background()
	dropped := errors.New("connection dropped")
	for _, tc := range []struct {
		name    string
		release *evalCall
		take    func(c *Client) (*Lock, error)
		keys    func(c *Client) *lockKeys
	}{
		{"lock", releaseEval,
			func(c *Client) (*Lock, error) { return c.Lock(ctx, "w") },
			func(c *Client) *lockKeys { return c.keys("w") }},
		{"semaphore", permitsReleaseEval,
			func(c *Client) (*Lock, error) { return c.Semaphore("w", 1).Acquire(ctx, 1) },
			func(c *Client) *lockKeys {
				return c.be.(*node).keysOf("w", &backend.Permits{Kind: "semaphore", Count: 1, Capacity: 1})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := tc.take(holder)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = l.Unlock(ctx) }()
			k := tc.keys(holder)
			if err := rdb.Set(ctx, k.waiters, "not a hash", 0).Err(); err != nil {
				t.Fatal(err)
			}
			fail, arm := failNext(dropped)
			waiter, _ := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{tc.release.sha: fail}})
			arm() // the waiter's leaving the queue never reaches Redis
			if w, err := tc.take(waiter); !errors.Is(err, ErrWrongType) {
				if w != nil {
					_ = w.Unlock(ctx)
				}
				t.Fatalf("waiting with other data at the waiters' name = %v, want ErrWrongType", err)
			}
			if got := rdb.ZRange(ctx, k.queue, 0, -1).Val(); len(got) != 0 {
				t.Errorf("the failed check left %v queued (queue expires in %v)", got, rdb.PTTL(ctx, k.queue).Val())
			}
		})
	}
}

// waitThroughOutage queues a waiter on srv (with the Client and Lock
// options given) behind a held lock, then puts Redis out of its reach for
// good, and returns after how long its Lock returned (10 s at most), and
// what.
func waitThroughOutage(t *testing.T, srv *redistest.Server, clientOpts []Option, opts ...LockOption) (time.Duration, error) {
	t.Helper()
	holder := newClientOn(t, srv.Client(t))
	p := startProxy(t, srv.Addr())
	// Neither commands nor dials retried: a check fails as soon as it
	// cannot reach Redis.
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	waiter := newClientOn(t, rdb, clientOpts...)
	ctx := context.Background()
	l := mustLock(t, holder, "outage")
	// Held until the test ends: its release would hand the lock to the
	// waiter's entry, if that still lives.
	t.Cleanup(func() { _ = l.Unlock(ctx) })

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	got := lockThenUnlock(wctx, waiter, "outage", opts...)
	waitQueuedAndSubscribed(t, srv.Client(t), waiter, "outage")
	p.Close() // Redis is out of the waiter's reach from now on: every check fails
	err := <-got
	return time.Since(start), err
}

// A queued waiter keeps its place while Redis is out of reach (a
// failover), but WithRetry still bounds the wait: checks that fail count
// against the strategy like the others, or a Lock that asked to give up
// after about 2 s would wait as long as its queue entry lives (a minute
// here) before returning the connection error.
func TestRetryBoundsWaitWhileRedisIsOutOfReach(t *testing.T) {
	waited, err := waitThroughOutage(t, redistest.Start(t), []Option{WithQueueTTL(time.Minute)}, WithRetry(FixedRetry(time.Second, 2)))
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with FixedRetry(1s, 2) while Redis is out of reach = %v after %v, want it to give up after about 2s", err, waited)
	}
	if waited > 6*time.Second {
		t.Errorf("Lock with FixedRetry(1s, 2) gave up after %v", waited)
	}
}

// Without WithRetry, a waiter keeps its place while Redis is out of reach
// only while its queue entry lives: then Lock returns the connection error
// (the entry is gone, so is the place), not only when ctx ends.
func TestQueuedWaiterGivesUpWhenItsEntryRunsOut(t *testing.T) {
	waited, err := waitThroughOutage(t, redistest.Start(t), []Option{WithQueueTTL(600 * time.Millisecond)})
	if !connectionError(err) {
		t.Fatalf("Lock while Redis is out of reach past the queue TTL = %v after %v, want the connection error", err, waited)
	}
}

// connectionError reports whether err is that of a connection that failed
// (refused, reset, closed), not the end of a context.
func connectionError(err error) bool {
	var op *net.OpError
	connErr := errors.As(err, &op) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
	return connErr && !errors.Is(err, context.DeadlineExceeded)
}

// With WithReplicaAck a queued waiter's entry lasts the ack timeout +
// 100 ms longer than the queue TTL (its checks answer only after their
// WAIT): while Redis is out of reach, the waiter keeps its place as long
// as that entry lives, not only a queue TTL.
func TestReplicaAckWaiterKeepsPlaceWhileItsEntryLives(t *testing.T) {
	master, _ := redistest.StartReplicated(t)
	// queueTTL + timeout + 100 ms: the entry lives 2.4 s.
	const queueTTL, timeout = 300 * time.Millisecond, 2 * time.Second
	waited, err := waitThroughOutage(t, master, []Option{WithQueueTTL(queueTTL), WithReplicaAck(1, timeout, AcceptAndReport)})
	if !connectionError(err) {
		t.Fatalf("Lock while Redis is out of reach = %v after %v, want the connection error", err, waited)
	}
	// The waiter could not leave the queue (Redis was out of its reach),
	// and the lock is still held: its entry is as its last check wrote
	// it, unless it ran out.
	ctx := context.Background()
	rdb := master.Client(t)
	waiters := newClientOn(t, rdb).keys("outage").waiters
	now := rdb.Time(ctx).Val()
	for _, entry := range rdb.HGetAll(ctx, waiters).Val() {
		deadline, err := strconv.ParseInt(strings.Fields(entry)[0], 10, 64)
		if err != nil {
			t.Fatalf("queue entry %q: %v", entry, err)
		}
		// Drift (1% + 2 ms) and a round trip apart at most.
		if left := time.Duration(deadline-now.UnixMilli()) * time.Millisecond; left > 200*time.Millisecond {
			t.Fatalf("Lock gave up after %v, %v before its queue entry ran out", waited, left)
		}
	}
}

// A queued waiter keeps its place while the master is out of reach, not
// when its own go-redis client was closed (an application shutting down
// in the wrong order): no check can ever succeed again, and Lock must say
// so at once rather than fail every check until the queue entry runs out
// (a minute here).
func TestWaiterStopsWhenItsRedisClientIsClosed(t *testing.T) {
	holder, _, srv := newTestClient(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	c := newClientOn(t, rdb, WithQueueTTL(time.Minute))
	ctx := context.Background()
	l := mustLock(t, holder, "closed")
	defer l.Unlock(ctx)

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// A short lease: the waiter checks every 100 ms, subscribed or not.
	got := lockThenUnlock(wctx, c, "closed", WithTTL(300*time.Millisecond))
	waitQueuedAndSubscribed(t, srv.Client(t), c, "closed")
	start := time.Now()
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	err := <-got
	if !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("Lock after its Redis client was closed = %v after %v, want redis.ErrClosed at once", err, time.Since(start))
	}
}

// replySeen closes seen at the first error reply starting with prefix
// that a client's calls met.
type replySeen struct {
	testutil.PassHook
	prefix string
	once   sync.Once
	seen   chan struct{}
}

func newReplySeen(prefix string) *replySeen {
	return &replySeen{prefix: prefix, seen: make(chan struct{})}
}

func (h *replySeen) note(err error) {
	if err != nil && strings.HasPrefix(err.Error(), h.prefix) {
		h.once.Do(func() { close(h.seen) })
	}
}

func (h *replySeen) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.note(err)
		return err
	}
}

func (h *replySeen) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.note(cmd.Err())
		}
		return err
	}
}

// busyScript runs a script that loops until stop kills it, with Redis set
// to answer BUSY once a script has run for 50 ms. It returns once Redis
// answers BUSY.
func busyScript(t *testing.T, addr string) (stop func()) {
	t.Helper()
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { admin.Close() })
	if err := admin.ConfigSet(ctx, "busy-reply-threshold", "50").Err(); err != nil {
		t.Fatal(err)
	}
	looper := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { looper.Close() })
	looping := make(chan error, 1)
	go func() { looping <- looper.Eval(ctx, "while true do end", nil).Err() }()
	waitUntil(t, 10*time.Second, "Redis to answer BUSY", func() bool {
		err := admin.Ping(ctx).Err()
		return err != nil && strings.HasPrefix(err.Error(), "BUSY")
	})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			if err := admin.ScriptKill(ctx).Err(); err != nil {
				t.Error(err)
			}
			<-looping
		})
	}
	t.Cleanup(stop)
	return stop
}

// A script running long elsewhere makes Redis answer BUSY for a while: a
// queued waiter keeps its place through it, as through a failover, rather
// than give up (and fail to leave the queue, which answers BUSY too).
func TestWaiterKeepsPlaceThroughBusyScript(t *testing.T) {
	holder, rdb, srv := newTestClient(t)
	busy := newReplySeen("BUSY ")
	waiter, _ := hookedClient(t, srv.Addr(), busy, WithQueueTTL(time.Minute))
	ctx := context.Background()
	l := mustLock(t, holder, "busy")

	// A short lease: the waiter checks every 100 ms.
	got := lockThenUnlock(ctx, waiter, "busy", WithTTL(300*time.Millisecond))
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, holder, "busy") == 1 })
	stop := busyScript(t, srv.Addr())
	testutil.Receive(t, busy.seen, 10*time.Second, "a check of the waiter answered BUSY")
	stop()
	select {
	case err := <-got:
		t.Fatalf("the waiter gave up on a BUSY reply: %v", err)
	default:
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Receive(t, got, 10*time.Second, "the waiter to get the lock"); err != nil {
		t.Fatalf("Lock after the busy script ended = %v", err)
	}
}

// A Lock whose ctx ends while a check is on its way, and the check then
// fails (here the connection, as a deadline cutting a read does), returns
// an error that says the caller gave up, as when ctx ends while it waits:
// errors.Is(err, context.Canceled) holds, beside the check's own error.
// TryLock alike.
func TestCheckFailingAsCtxEndsSaysCtxEnded(t *testing.T) {
	srv := redistest.Start(t)
	broken := errors.New("connection broken as the context ended")
	var ctx context.Context
	var cancel context.CancelFunc
	var checks atomic.Int32
	var failOn int32
	fail := func() error {
		if checks.Add(1) == failOn {
			cancel()
			return broken
		}
		return nil
	}
	// The waiter checks again every 100 ms (a third of its queue TTL).
	c, _ := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{acquireEval.sha: fail}}, WithQueueTTL(300*time.Millisecond))
	holder := mustLock(t, newClientOn(t, srv.Client(t)), "k")
	defer holder.Unlock(context.Background())
	for _, tc := range []struct {
		name   string
		failOn int32 // which check fails: the waiter's first queues it
		take   func(ctx context.Context) (*Lock, error)
	}{
		{"Lock", 2, func(ctx context.Context) (*Lock, error) { return c.Lock(ctx, "k") }},
		{"TryLock", 1, func(ctx context.Context) (*Lock, error) { return c.TryLock(ctx, "k") }},
	} {
		ctx, cancel = context.WithCancel(context.Background())
		checks.Store(0)
		failOn = tc.failOn
		_, err := tc.take(ctx)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, broken) {
			t.Errorf("%s whose check failed as its ctx ended = %v, want both errors", tc.name, err)
		}
		cancel()
	}
}

// A waiter whose ctx ends while Redis does not answer returns about then:
// its leaving of the queue (the release, waited for up to releaseTimeout)
// is waited for no longer than an Unlock's past its ctx's end
// (endedUnlockWait), and goes on in the background, where Close waits for
// it before the caller closes its go-redis client.
func TestWaiterReturnsSoonAfterCtxWhileRedisHangs(t *testing.T) {
	srv := redistest.Start(t)
	proxy, cut := cutClient(t, srv.Addr())
	// The entry lives 30 s, refreshed every 10 s: it goes only if the
	// waiter's release removes it, and no check is on its way at the end.
	c := newClientOn(t, cut, WithQueueTTL(30*time.Second))
	rdb := srv.Client(t)
	holder := newClientOn(t, rdb)
	ctx := context.Background()
	const key = "hung"
	h := mustLock(t, holder, key, WithTTL(30*time.Second))
	defer h.Unlock(ctx)

	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	deadline, _ := wctx.Deadline()
	got := lockAsync(wctx, c, key)
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return queued(t, rdb, holder, key) == 1 })
	proxy.Freeze()
	defer proxy.Thaw()
	if time.Now().After(deadline) {
		t.Fatal("the waiter's ctx ended before Redis stopped answering")
	}
	var r lockResult
	select {
	case r = <-got:
	case <-time.After(time.Until(deadline) + endedUnlockWait + 2*time.Second):
		t.Fatalf("Lock still waiting %v past its ctx's end (Redis not answering)", time.Since(deadline).Round(time.Millisecond))
	}
	if !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("Lock whose ctx ended while Redis hung = %v, %v, want DeadlineExceeded", r.l, r.err)
	}
	proxy.Thaw()
	// The release written while Redis hung is answered now; Close waits
	// for it, and the caller's go-redis client is closed only after.
	c.Close()
	if n := queued(t, rdb, holder, key); n != 0 {
		t.Errorf("%d queue entries left once Close returned: the waiter's leaving did not end", n)
	}
}

// A waiter whose ctx ends while the server is frozen (SIGSTOP) returns
// about endedUnlockWait past that end also through a go-redis client that
// honours no deadline (without ContextTimeoutEnabled) and cuts a read short
// only after 30 s (ReadTimeout): longer than the leaving's wait for a check
// still on its way (batchTimeout). That leaving goes on in the background,
// and Close waits for it once the server answers again.
func TestWaiterReturnsSoonAfterCtxWhileServerFrozen(t *testing.T) {
	for _, tc := range []struct {
		name     string
		queueTTL time.Duration
		onItsWay int64 // checks sent and not answered when Lock returns
	}{
		{"CheckOnItsWay", 300 * time.Millisecond, 1}, // checks every 100 ms: one meets the frozen server
		{"BetweenChecks", 30 * time.Second, 0},       // checks every 10 s: none after the first
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			slow := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 30 * time.Second})
			t.Cleanup(func() { slow.Close() })
			c := newClientOn(t, slow, WithQueueTTL(tc.queueTTL))
			var sent, answered atomic.Int64
			sha := c.keys("frozen").scripts().acquire.sha
			slow.AddHook(scriptHook{
				before: map[string]func() error{sha: func() error { sent.Add(1); return nil }},
				after:  map[string]func() error{sha: func() error { answered.Add(1); return nil }},
			})
			rdb := srv.Client(t)
			holder := newClientOn(t, rdb)
			ctx := context.Background()
			const key = "frozen"
			h := mustLock(t, holder, key, WithTTL(30*time.Second))

			wctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			deadline, _ := wctx.Deadline()
			got := lockAsync(wctx, c, key)
			waitQueuedAndSubscribed(t, rdb, c, key)
			srv.Pause(t)
			defer srv.Resume(t)
			if time.Now().After(deadline) {
				t.Fatal("the waiter's ctx ended before the server was frozen")
			}
			r := testutil.Receive(t, got, time.Until(deadline)+endedUnlockWait+5*time.Second, "the waiter to return while the server is frozen")
			// The slack is for a loaded machine.
			if took := time.Since(deadline); took > endedUnlockWait+500*time.Millisecond {
				t.Errorf("the waiter returned %v after its ctx ended, with the server frozen", took.Round(time.Millisecond))
			}
			if !errors.Is(r.err, context.DeadlineExceeded) {
				t.Fatalf("Lock whose ctx ended while the server was frozen = %v, %v, want DeadlineExceeded", r.l, r.err)
			}
			if n := sent.Load() - answered.Load(); n != tc.onItsWay {
				t.Errorf("%d checks on their way when Lock returned, want %d", n, tc.onItsWay)
			}
			srv.Resume(t)
			c.Close()
			if n := queued(t, rdb, holder, key); n != 0 {
				t.Errorf("%d queue entries left once Close returned: the waiter's leaving did not end", n)
			}
			if err := h.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Permits share the waiting and leaving of a lock, with scripts of their
// own: a waiter of a Semaphore or an RWMutex whose ctx ends while Redis
// hangs returns about endedUnlockWait later too, as does an Unlock of
// permits whose ctx has ended, and Close waits for the leaving.
func TestPermitsWaiterReturnsSoonAfterCtxWhileRedisHangs(t *testing.T) {
	sem := func(c *Client) *Semaphore { return c.Semaphore("hung", 2) }
	rw := func(c *Client) *Semaphore { return c.RWMutex("hung").sem() }
	for _, tc := range []struct {
		name       string
		hold, wait func(c *Client, name string) taker
		queue      func(c *Client) *Semaphore // whose queue the waiter joins
	}{
		{"SemaphoreAcquire", takePermits(2), takePermits(1), sem},
		{"RWMutexRLock", takeWrite, takeRead, rw},
		{"RWMutexLock", takeRead, takeWrite, rw},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			proxy, cut := cutClient(t, srv.Addr())
			c := newClientOn(t, cut, WithQueueTTL(30*time.Second))
			rdb := srv.Client(t)
			holder := newClientOn(t, rdb)
			ctx := context.Background()
			long := WithTTL(30 * time.Second)
			h, err := tc.hold(holder, "hung")(ctx, long)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Unlock(ctx)
			// Held through the Client whose Redis hangs: unlocked once it does.
			own, err := tc.hold(c, "own")(ctx, long)
			if err != nil {
				t.Fatal(err)
			}

			wctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			deadline, _ := wctx.Deadline()
			got := inBackground(func() (*Lock, error) { return tc.wait(c, "hung")(wctx) })
			waitSemQueued(t, rdb, tc.queue(c), 1)
			proxy.Freeze()
			defer proxy.Thaw()
			if time.Now().After(deadline) {
				t.Fatal("the waiter's ctx ended before Redis stopped answering")
			}
			r := <-got
			if took := time.Since(deadline); took > endedUnlockWait+time.Second {
				t.Errorf("the waiter returned %v after its ctx ended, with Redis not answering", took.Round(time.Millisecond))
			}
			if !errors.Is(r.err, context.DeadlineExceeded) {
				t.Fatalf("waiter whose ctx ended while Redis hung = %v, %v, want DeadlineExceeded", r.l, r.err)
			}

			ended, end := context.WithCancel(ctx)
			end()
			start := time.Now()
			_ = own.Unlock(ended)
			if took := time.Since(start); took > endedUnlockWait+time.Second {
				t.Errorf("Unlock with an ended ctx returned after %v, with Redis not answering", took.Round(time.Millisecond))
			}

			proxy.Thaw()
			c.Close()
			if n := rdb.ZCard(ctx, semKeys(tc.queue(c)).queue).Val(); n != 0 {
				t.Errorf("%d queue entries left once Close returned: the waiter's leaving did not end", n)
			}
		})
	}
}

// A waiter cancelled (no deadline, which go-redis would honour) while a
// request of its waiting is on its way to a Redis that hangs returns about
// as soon as one cancelled between checks does, not once go-redis's
// ReadTimeout (10 s here) has cut the read: a check made again (the queue
// entry's refresh), or the first wait's question of which pub/sub the
// hand-overs come by; with WithReplicaAck, a check and its WAIT, or the
// lease set again (and waited for) after a hand-over. Close waits for the
// leaving, which goes after the request: nothing is left queued, nor held
// (a lock handed over meanwhile is given back).
func TestWaiterCancelledMidRequestReturnsSoonWhileRedisHangs(t *testing.T) {
	for _, tc := range []struct {
		name       string
		hold, wait func(c *Client, name string) taker
		queue      func(c *Client) *lockKeys
	}{
		{"Lock", takeLock, takeLock, func(c *Client) *lockKeys { return c.keys("hung") }},
		{"SemaphoreAcquire", takePermits(2), takePermits(1), func(c *Client) *lockKeys { return semKeys(c.Semaphore("hung", 2)) }},
		{"RWMutexRLock", takeWrite, takeRead, func(c *Client) *lockKeys { return semKeys(c.RWMutex("hung").sem()) }},
		{"RWMutexLock", takeRead, takeWrite, func(c *Client) *lockKeys { return semKeys(c.RWMutex("hung").sem()) }},
	} {
		for _, at := range []string{"check", "subscription", "acked check", "acked hand-over"} {
			t.Run(tc.name+"/"+at, func(t *testing.T) {
				acked, handOver := strings.HasPrefix(at, "acked"), at == "acked hand-over"
				// Checks again every 100 ms; the hand-over rows wait for its
				// message alone (noPolling).
				opts := []Option{WithQueueTTL(300 * time.Millisecond)}
				if handOver {
					opts = []Option{noPolling}
				}
				var srv *redistest.Server
				if acked {
					srv, _ = redistest.StartReplicated(t)
					opts = append(opts, WithReplicaAck(1, time.Second, FailClosed))
				} else {
					srv = redistest.Start(t)
				}
				rdb := srv.Client(t)
				proxy := startProxy(t, srv.Addr())
				cut := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ReadTimeout: 10 * time.Second})
				t.Cleanup(func() { cut.Close() })
				c := newClientOn(t, cut, opts...)
				k := tc.queue(c)
				// The checks Redis answered: after a hand-over, the one the
				// subscription's taking effect asks for must have come
				// before, or it could find the hand-over itself.
				var checks atomic.Int32
				cut.AddHook(scriptHook{after: map[string]func() error{k.scripts().acquire.sha: func() error {
					checks.Add(1)
					return nil
				}}})
				ctx := context.Background()
				h, err := tc.hold(newClientOn(t, rdb), "hung")(ctx, WithTTL(30*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				defer h.Unlock(ctx)
				var frozen <-chan struct{}
				if at == "subscription" {
					frozen = proxy.FreezeOn(func(b []byte) bool { return bytes.Contains(bytes.ToLower(b), []byte("spublish")) })
				}
				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				got := inBackground(func() (*Lock, error) { return tc.wait(c, "hung")(wctx) })
				if at != "subscription" {
					ch := k.channel + ":" + c.be.(*node).id
					waitUntil(t, 5*time.Second, "the waiter to queue, subscribe and check again", func() bool {
						shard, _ := rdb.PubSubShardNumSub(ctx, ch).Result()
						return rdb.ZCard(ctx, k.queue).Val() == 1 && shard[ch] == 1 && (!handOver || checks.Load() >= 2)
					})
					sha := k.scripts().acquire.sha
					if handOver {
						sha = k.scripts().extend.Hash()
					}
					frozen = proxy.FreezeOn(func(b []byte) bool { return bytes.Contains(b, []byte(sha)) })
					if handOver {
						if err := h.Unlock(ctx); err != nil {
							t.Fatal(err)
						}
					}
				}
				testutil.Receive(t, frozen, 5*time.Second, "the request to reach the frozen proxy")
				defer proxy.Thaw()
				cancel()
				cancelled := time.Now()
				r := testutil.Receive(t, got, 15*time.Second, "the cancelled waiter to return")
				if took := time.Since(cancelled); took > endedUnlockWait+time.Second {
					t.Errorf("the waiter returned %v after its ctx was cancelled, with Redis not answering", took.Round(time.Millisecond))
				}
				if !errors.Is(r.err, context.Canceled) {
					t.Fatalf("waiter cancelled while Redis hung = %v, %v, want Canceled", r.l, r.err)
				}
				if !handOver {
					// Handed over to the waiter, still queued: the request
					// it no longer waits for may take it once Redis
					// answers, and the leaving after it gives it back.
					if err := h.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				}
				proxy.Thaw()
				c.Close()
				if n := rdb.ZCard(ctx, k.queue).Val(); n != 0 {
					t.Errorf("%d queue entries left once Close returned: the waiter's leaving did not end", n)
				}
				if rdb.Exists(ctx, k.lock).Val() != 0 {
					t.Errorf("%s still held once Close returned: the hand-over was not given back", k.lock)
				}
			})
		}
	}
}

// A check of a waiter that a cancelled caller no longer waits for is not
// tried again by go-redis (MaxRetries) on the caller's behalf: made again
// at the next ReadTimeout (4 s here, with go-redis's other defaults), once
// the lock it waited for is free, it would take the lock for a token
// nobody holds, until the queue-leaving that waits for the check released
// it (and that leaving, and Close, would wait out every try). Here the
// check's first try goes over a connection that went dead, and the lock is
// free by the time a second would be made.
func TestWaiterCancelledMidCheckIsNotRetriedPastItsLeaving(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	proxy := startProxy(t, srv.Addr())
	hook := &cutCheck{proxy: proxy, cutting: make(chan (<-chan struct{}), 1), took: make(chan bool, 1)}
	cut := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 4 * time.Second})
	t.Cleanup(func() { cut.Close() })
	cut.AddHook(hook)
	// Checks again every 100 ms.
	c := newClientOn(t, cut, WithQueueTTL(300*time.Millisecond))
	other := newClientOn(t, rdb)
	ctx := context.Background()
	h := mustLock(t, other, "dead", WithTTL(30*time.Second))
	k := c.keys("dead")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := inBackground(func() (*Lock, error) { return c.Lock(wctx, "dead", WithTTL(30*time.Second)) })
	ch := k.channel + ":" + c.be.(*node).id
	waitUntil(t, 5*time.Second, "the waiter to queue and subscribe", func() bool {
		shard, _ := rdb.PubSubShardNumSub(ctx, ch).Result()
		return rdb.ZCard(ctx, k.queue).Val() == 1 && shard[ch] == 1
	})
	hook.armed.Store(true)
	cutting := testutil.Receive(t, hook.cutting, 5*time.Second, "the next check to start")
	testutil.Receive(t, cutting, 5*time.Second, "the check to be cut")
	// The waiter's Lock returns about endedUnlockWait on, and the lock is
	// free well before the check's first try times out.
	cancelMidCheck(t, cancel, got, h)
	if testutil.Receive(t, hook.took, 20*time.Second, "the check to end") {
		t.Errorf("the cancelled waiter's check was tried again once the lock was free, and took it for a token nobody holds")
	}
	left := make(chan struct{})
	go func() { c.ops.Wait(); close(left) }()
	testutil.Receive(t, left, 15*time.Second, "the waiter's leaving to end")
	if _, err := other.TryLock(ctx, "dead"); err != nil {
		owner, _ := rdb.HGetAll(ctx, k.lock).Result()
		t.Fatalf("TryLock once the cancelled waiter left and its check ended = %v (lock %v)", err, owner)
	}
}

// cutCheck, once armed, cuts the connection of the next acquire check's
// first try at proxy (cutting gets DropOn's channel), and tells took
// whether that check, go-redis's tries of it included, took the lock.
type cutCheck struct {
	testutil.PassHook
	proxy   *tcpproxy.Proxy
	armed   atomic.Bool
	cutting chan (<-chan struct{})
	took    chan bool
}

func (h *cutCheck) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if len(a) < 2 || a[0] != "evalsha" || a[1] != &acquireEval.sha || !h.armed.CompareAndSwap(true, false) {
			return next(ctx, cmd)
		}
		h.cutting <- h.proxy.DropOn(func(b []byte) bool { return bytes.Contains(b, []byte(acquireEval.sha)) })
		err := next(ctx, cmd)
		res, rerr := cmd.(*redis.Cmd).Slice()
		h.took <- rerr == nil && len(res) > 0 && res[0] == int64(1)
		return err
	}
}

// A check of a waiter that gave up, delayed on its way to Redis longer than
// batchTimeout, is still one go-redis waits for when its ReadTimeout is
// longer (30 s here, and no ContextTimeoutEnabled): the leaving's release
// goes after it, not before, or the check, reaching Redis after the
// release, would take the lock for a token nobody holds and keep everyone
// out for the whole lease.
func TestWaiterLeavesAfterItsSlowCheck(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	held := make(chan struct{})
	delayed := testutil.NewDelayedWrites(held)
	slow := redis.NewClient(&redis.Options{
		Addr:        srv.Addr(),
		ReadTimeout: 30 * time.Second,
		Dialer:      delayed.Dial,
	})
	t.Cleanup(func() { slow.Close() })
	// Checks again every 100 ms.
	c := newClientOn(t, slow, WithQueueTTL(300*time.Millisecond))
	other := newClientOn(t, rdb)
	ctx := context.Background()
	const key = "slow-check"
	k := c.keys(key)
	released := make(chan struct{}, 1)
	slow.AddHook(scriptHook{after: map[string]func() error{k.scripts().release.sha: func() error {
		select {
		case released <- struct{}{}:
		default:
		}
		return nil
	}}})
	h := mustLock(t, other, key, WithTTL(30*time.Second))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := lockAsync(wctx, c, key, WithTTL(30*time.Second))
	waitQueuedAndSubscribed(t, rdb, c, key)
	delayed.Match.Store(&k.scripts().acquire.sha)
	testutil.Receive(t, delayed.Reached, 5*time.Second, "a check to be delayed")
	cancelMidCheck(t, cancel, got, h)
	// The check arrives once the leaving has given up waiting for it, if
	// it does: then the release has gone first.
	select {
	case <-released:
	case <-time.After(batchTimeout + time.Second):
	}
	close(held)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if owner := rdb.HGetAll(ctx, k.lock).Val(); len(owner) != 0 {
		t.Fatalf("the lock is held once the cancelled waiter left and its check arrived: %v", owner)
	}
	if n := rdb.ZCard(ctx, k.queue).Val(); n != 0 {
		t.Errorf("%d queue entries left once the cancelled waiter left and its check arrived", n)
	}
}

// cancelMidCheck cancels a waiter whose check is on its way, checks that
// its Lock (got) returns context.Canceled, and releases h, the lock it
// waited for.
func cancelMidCheck(t *testing.T, cancel context.CancelFunc, got <-chan lockResult, h *Lock) {
	t.Helper()
	cancel()
	r := testutil.Receive(t, got, 5*time.Second, "the cancelled waiter to return")
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("waiter cancelled mid-check = %v, %v, want Canceled", r.l, r.err)
	}
	if err := h.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A grant that cannot be handed out (its reply came after the lease could be
// trusted, or the Client was closed meanwhile) is released before TryLock
// returns, and that release waits for Redis as long as a waiter's leaving
// does: about endedUnlockWait, not releaseTimeout, past ctx's end while
// Redis hangs. Close still waits for it.
func TestUnusableGrantReturnsSoonAfterCtxWhileRedisHangs(t *testing.T) {
	for _, closed := range []bool{false, true} {
		t.Run(map[bool]string{false: "late", true: "closed"}[closed], func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			proxy := startProxy(t, srv.Addr())
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			const key = "unusable"
			var c *Client
			var frozen time.Time
			closing := make(chan struct{})
			hook := scriptHook{after: map[string]func() error{acquireScript.Hash(): func() error {
				// The grant ran in Redis; by the time its reply is read the
				// caller has given up, and Redis stops answering.
				if closed {
					go func() { c.Close(); close(closing) }()
					waitUntil(t, 5*time.Second, "Close to start", c.isClosed)
				} else {
					waitUntil(t, 5*time.Second, "the lease to run out", func() bool {
						n, _ := rdb.Exists(context.Background(), c.keys(key).lock).Result()
						return n == 0
					})
					close(closing)
				}
				cancel()
				proxy.Freeze()
				frozen = time.Now()
				return nil
			}}}
			c, _ = hookedClient(t, proxy.Addr(), hook)
			defer proxy.Thaw()
			// Closed, the lease lasts: only the release removes it.
			ttl := 100 * time.Millisecond
			if closed {
				ttl = 30 * time.Second
			}
			l, err := c.TryLock(ctx, key, WithTTL(ttl), WithoutRenewal())
			if took := time.Since(frozen); took > endedUnlockWait+time.Second {
				t.Errorf("TryLock returned %v after its ctx ended, with Redis not answering", took.Round(time.Millisecond))
			}
			want := ErrLockLost
			if closed {
				want = ErrClosed
			}
			if !errors.Is(err, want) {
				t.Errorf("TryLock of an unusable grant = %v, %v, want %v", l, err, want)
			}
			// The release is still on its way: Close, begun at the grant
			// or now, waits for it.
			done := (<-chan struct{})(closing)
			if !closed {
				ch := make(chan struct{})
				go func() { c.Close(); close(ch) }()
				done = ch
			}
			closesOnceRedisAnswers(t, proxy, done)
			if n, _ := rdb.Exists(context.Background(), c.keys(key).lock).Result(); n != 0 {
				t.Error("the unusable grant is still held once Close returned")
			}
		})
	}
}

// frozenAtGrant is an Observer whose AcquireEnd of a grant ends the
// caller's ctx, freezes the proxy to Redis, and panics.
type frozenAtGrant struct {
	NopObserver
	cancel context.CancelFunc
	proxy  interface{ Freeze() }
	frozen time.Time
}

func (o *frozenAtGrant) AcquireEnd(_ context.Context, e AcquireEndEvent) {
	if e.Err == nil {
		o.cancel()
		o.proxy.Freeze()
		o.frozen = time.Now()
		panic("observer bug")
	}
}

// The lock of a Lock whose Observer panicked at the grant is released on
// the panic's way out; that release waits for a Redis that hangs as long
// as a waiter's leaving does, not releaseTimeout, and Close waits for it.
func TestObserverPanicAtGrantReturnsSoonWhileRedisHangs(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	proxy, cut := cutClient(t, srv.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := &frozenAtGrant{cancel: cancel, proxy: proxy}
	c := newClientOn(t, cut, WithObserver(o))
	defer proxy.Thaw()
	mustPanic(t, "Lock whose Observer panicked", func() { _, _ = c.Lock(ctx, "k", WithTTL(30*time.Second)) })
	if took := time.Since(o.frozen); took > endedUnlockWait+time.Second {
		t.Errorf("Lock's panic went on %v after its ctx ended, with Redis not answering", took.Round(time.Millisecond))
	}
	// The release is still on its way: Close waits for it.
	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	closesOnceRedisAnswers(t, proxy, done)
	if n, _ := rdb.Exists(context.Background(), c.keys("k").lock).Result(); n != 0 {
		t.Error("the lock of a Lock whose Observer panicked is still held once Close returned")
	}
}

// closesOnceRedisAnswers checks that a Close (done, once it has returned)
// waits for a release on its way through proxy, frozen: it does not return
// while Redis hangs (its bound is 5 s), and does once the proxy is thawed.
func closesOnceRedisAnswers(t *testing.T, proxy *tcpproxy.Proxy, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
		t.Error("Close returned with a release still on its way to a Redis that hangs")
	case <-time.After(200 * time.Millisecond):
	}
	proxy.Thaw()
	testutil.Receive(t, done, 10*time.Second, "Close to return once Redis answers")
}

// cutClient returns a go-redis client that reaches addr through a proxy
// the test can freeze, honouring ctx's deadlines and never retrying. It is
// closed after the Client made on it (cleanups run last first).
func cutClient(t *testing.T, addr string) (*tcpproxy.Proxy, *redis.Client) {
	t.Helper()
	proxy := startProxy(t, addr)
	cut := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cut.Close() })
	return proxy, cut
}

// A taker takes a lock or permits of a name on a Client, as one of
// takeLock, takePermits(n) (of a Semaphore of 2), takeRead or takeWrite
// (of an RWMutex) makes it.
type taker func(ctx context.Context, opts ...LockOption) (*Lock, error)

func takeLock(c *Client, name string) taker {
	return func(ctx context.Context, opts ...LockOption) (*Lock, error) { return c.Lock(ctx, name, opts...) }
}

func takePermits(n int64) func(*Client, string) taker {
	return func(c *Client, name string) taker {
		return func(ctx context.Context, opts ...LockOption) (*Lock, error) {
			return c.Semaphore(name, 2).Acquire(ctx, n, opts...)
		}
	}
}

func takeRead(c *Client, name string) taker  { return c.RWMutex(name).RLock }
func takeWrite(c *Client, name string) taker { return c.RWMutex(name).Lock }

// The place kept while Redis is out of reach lasts no longer than the
// queue entry the last check made (queueLife less the drift): from the
// outage on, a waiter gives up within a queue TTL, not once a longer
// estimate of the entry's life has passed, when a release may already
// have skipped it.
func TestQueuedWaiterGivesUpWithinItsEntrysLife(t *testing.T) {
	const queueTTL = 1200 * time.Millisecond // checks every 400 ms
	srv := redistest.Start(t)
	holder := newClientOn(t, srv.Client(t))
	p := startProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	waiter := newClientOn(t, rdb, WithQueueTTL(queueTTL))
	ctx := context.Background()
	l := mustLock(t, holder, "entry-life")
	t.Cleanup(func() { _ = l.Unlock(ctx) })

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got := lockThenUnlock(wctx, waiter, "entry-life")
	waitQueuedAndSubscribed(t, srv.Client(t), waiter, "entry-life")
	p.Close()
	outage := time.Now()
	err := <-got
	waited := time.Since(outage)
	if !connectionError(err) {
		t.Fatalf("Lock while Redis is out of reach = %v after %v, want the connection error", err, waited)
	}
	// The last check ran before the outage: its entry ends within a queue
	// TTL of it (half a queue TTL of slack for a loaded machine; an
	// estimate of twice the entry's life would take 2.4 s).
	if waited > queueTTL+queueTTL/2 {
		t.Errorf("Lock gave up %v after Redis went out of reach, past the %v its queue entry lives", waited, queueTTL)
	}
}
