package dlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/tcpproxy"
	"github.com/dlock-go/dlock/internal/testutil"
)

// The test binary doubles as a worker process for the tests that need
// several OS processes contending for one lock.
const roleEnv = "DLOCK_TEST_ROLE"

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role))
	}
	testutil.QuietRedisLog()
	// The Example functions read REDIS_ADDR.
	srv := redistest.StartMain()
	os.Setenv("REDIS_ADDR", srv.Addr())
	code := m.Run()
	srv.Close()
	testutil.Exit(code)
}

func runRole(role string) int {
	addr := os.Getenv("DLOCK_TEST_ADDR")
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := New(rdb)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer c.Close()
	ctx := context.Background()
	switch role {
	case "counter":
		n, _ := strconv.Atoi(os.Getenv("DLOCK_TEST_N"))
		for i := 0; i < n; i++ {
			if err := incrementUnderLock(ctx, c, rdb); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		return 0
	case "holder":
		l, err := c.Lock(ctx, "crash", WithTTL(500*time.Millisecond))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("locked", l.Fence())
		select {} // hold until killed
	}
	return 2
}

// incrementUnderLock does a non-atomic read-modify-write of a Redis counter
// under the lock, and flags any overlap of critical sections: exactness of
// the final count and an empty overlap list prove mutual exclusion.
func incrementUnderLock(ctx context.Context, c *Client, rdb *redis.Client) error {
	return c.Do(ctx, "counter", func(ctx context.Context) error {
		if ok, err := rdb.SetNX(ctx, "inside", "1", 0).Result(); err != nil {
			return err
		} else if !ok {
			rdb.RPush(ctx, "overlaps", "1")
		}
		v, err := rdb.Get(ctx, "count").Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if err := rdb.Set(ctx, "count", v+1, 0).Err(); err != nil {
			return err
		}
		return rdb.Del(ctx, "inside").Err()
	})
}

// newTestClient starts a Redis server and a Client on it.
func newTestClient(t *testing.T, opts ...Option) (*Client, *redis.Client, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	return newClientOn(t, rdb, opts...), rdb, srv
}

func newClientOn(t *testing.T, rdb redis.UniversalClient, opts ...Option) *Client {
	t.Helper()
	c, err := New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func mustLock(t *testing.T, c *Client, key string, opts ...LockOption) *Lock {
	t.Helper()
	l, err := c.Lock(context.Background(), key, opts...)
	if err != nil {
		t.Fatalf("Lock(%q): %v", key, err)
	}
	return l
}

// waitUntil is testutil.WaitUntil under the short name this package's
// tests use: a condition to wait on, not a sleep.
var waitUntil = testutil.WaitUntil

// lockInTurn takes key's lock with c in a goroutine of its own, sends turn
// on order once it holds it (-1 if Lock failed) and unlocks: the tests of
// the queue's order read from order which waiter was served when.
func lockInTurn(t *testing.T, c *Client, key string, turn int, order chan<- int) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	// The Unlock follows the send, so that the next waiter's turn comes
	// after this one's, and a test that has its last turn returns: its
	// clean-up, registered before this one and so run after it, closes c.
	// The waiter must have ended by then, its Unlock too; one never served
	// (a failed test) is let go.
	t.Cleanup(func() {
		cancel()
		testutil.Receive(t, done, 5*time.Second, "the waiter in turn "+strconv.Itoa(turn)+" to end")
	})
	go func() {
		defer close(done)
		w, err := c.Lock(ctx, key)
		if err != nil {
			if ctx.Err() == nil {
				t.Error(err)
			}
			order <- -1
			return
		}
		order <- turn
		if err := w.Unlock(context.Background()); err != nil {
			t.Error(err)
		}
	}()
}

// queued reports how many waiters are queued for key.
func queued(t *testing.T, rdb *redis.Client, c *Client, key string) int64 {
	n, err := rdb.ZCard(context.Background(), c.keys(key).queue).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// keys returns the Redis names of a lock of the Client's node backend.
func (c *Client) keys(key string) *lockKeys { return c.be.(*node).keys(key) }

// wakeChannel is the channel a waiter of this Client listens on for key.
func (c *Client) wakeChannel(key string) string { return c.keys(key).channel + ":" + c.be.(*node).id }

// waitQueuedAndSubscribed waits until waiter is queued for key and
// subscribed to its hand-over channel, as seen through admin: it has then
// read the reply that queued it (Redis may have run the script with the
// reply still on its way).
func waitQueuedAndSubscribed(t *testing.T, admin *redis.Client, waiter *Client, key string) {
	t.Helper()
	ch := waiter.wakeChannel(key)
	waitUntil(t, 5*time.Second, "the waiter to queue and subscribe", func() bool {
		shard, _ := admin.PubSubShardNumSub(context.Background(), ch).Result()
		classic, _ := admin.PubSubNumSub(context.Background(), ch).Result()
		return queued(t, admin, waiter, key) == 1 && shard[ch]+classic[ch] == 1
	})
}

// scriptHook runs a test's function when dlock sends a script, by SHA1:
// before, ahead of Redis (an error it returns fails the command, which
// never arrives, as over a dropped connection); after, once Redis ran it
// and before dlock reads the reply (an error replaces the reply, as if it
// were lost). Scripts sent in a pipeline (renewals, batched calls) count
// too.
type scriptHook struct {
	testutil.PassHook
	before map[string]func() error
	after  map[string]func() error
}

func (h scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.run(h.before, cmd); err != nil {
			return err
		}
		err := next(ctx, cmd)
		if lost := h.run(h.after, cmd); lost != nil {
			return lost
		}
		return err
	}
}

func (h scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if err := h.run(h.before, cmd); err != nil {
				return err
			}
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			_ = h.run(h.after, cmd)
		}
		return err
	}
}

// waitRenewalsSettled waits until no watchdog renewal goroutine runs: one
// may report to the Observer after the event a test waited for.
func waitRenewalsSettled(t *testing.T) {
	t.Helper()
	waitUntil(t, 5*time.Second, "the renewals' goroutines to end", func() bool {
		buf := make([]byte, 1<<20)
		return !bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("(*watchdog).renew"))
	})
}

// failNext returns a scriptHook function that fails the first call made
// after arm with err (before Redis runs the script, or after: a lost
// reply), and passes every other call.
func failNext(err error) (fn func() error, arm func()) {
	var armed atomic.Bool
	return func() error {
		if armed.CompareAndSwap(true, false) {
			return err
		}
		return nil
	}, func() { armed.Store(true) }
}

// heldCall holds back the first call made after arm, as a scriptHook
// function: it closes reached, waits for release, and fails the call with
// err (nil: passes it). Every other call passes.
type heldCall struct {
	armed    atomic.Bool
	err      error
	reached  chan struct{}
	released chan struct{}
}

func newHeldCall(err error) *heldCall {
	return &heldCall{err: err, reached: make(chan struct{}), released: make(chan struct{})}
}

func (c *heldCall) run() error {
	if !c.armed.CompareAndSwap(true, false) {
		return nil
	}
	close(c.reached)
	<-c.released
	return c.err
}

func (c *heldCall) arm()     { c.armed.Store(true) }
func (c *heldCall) release() { close(c.released) }

// unlockHeldBack starts l's Unlock, whose release held holds back, and
// returns once the release is held; Unlock's error comes on the channel.
func unlockHeldBack(l *Lock, held *heldCall) <-chan error {
	held.arm()
	unlocked := make(chan error, 1)
	go func() { unlocked <- l.Unlock(context.Background()) }()
	<-held.reached
	return unlocked
}

// run calls fns' function for cmd's script, if any, and sets its error.
func (h scriptHook) run(fns map[string]func() error, cmd redis.Cmder) error {
	a := cmd.Args()
	if len(a) < 2 || a[0] != "evalsha" {
		return nil
	}
	var sha string
	switch s := a[1].(type) {
	case string:
		sha = s
	case *string:
		sha = *s
	}
	if f := fns[sha]; f != nil {
		if err := f(); err != nil {
			cmd.SetErr(err)
			return err
		}
	}
	return nil
}

// hookedClient is a Client whose commands pass through h. The scripts are
// cached in Redis first, as after any first use: a NOSCRIPT reply would
// send them again, out of the hook's reach.
func hookedClient(t *testing.T, addr string, h redis.Hook, opts ...Option) (*Client, *redis.Client) {
	t.Helper()
	return hookedClientWith(t, &redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true}, h, opts...)
}

// hookedClientWith is hookedClient on a go-redis client made with ro.
func hookedClientWith(t *testing.T, ro *redis.Options, h redis.Hook, opts ...Option) (*Client, *redis.Client) {
	t.Helper()
	rdb := redis.NewClient(ro)
	t.Cleanup(func() { rdb.Close() })
	for _, s := range []*redis.Script{acquireScript, releaseScript, extendScript, ttlScript} {
		if err := s.Load(context.Background(), rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rdb.AddHook(h)
	return newClientOn(t, rdb, opts...), rdb
}

// lockThenUnlock calls Lock in a goroutine and, if it got the lock, Unlock
// at once; the channel gives Lock's error.
func lockThenUnlock(ctx context.Context, c *Client, key string, opts ...LockOption) <-chan error {
	got := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, key, opts...)
		if l != nil {
			_ = l.Unlock(context.Background())
		}
		got <- err
	}()
	return got
}

// mustPanic fails the test unless f panics; what names the call.
func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatalf("%s did not panic", what)
		}
	}()
	f()
}

// startProxy starts a tcpproxy to addr, closed when the test ends.
func startProxy(t *testing.T, addr string) *tcpproxy.Proxy {
	t.Helper()
	p, err := tcpproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
