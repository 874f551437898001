package redlock_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/tcpproxy"
	"github.com/dlock-go/dlock/internal/testutil"
	"github.com/dlock-go/dlock/redlock"
)

// acquire.go, wakeups.go: one release publishes on every node it frees,
// so a blocked waiter gets several messages for it. The first wakes it;
// the others, arriving while it spreads its retry out, must not leave a
// wake-up behind: if another owner took the lock meanwhile, the waiter's
// retry finds it held and it sleeps again, not retries at once for the
// same release.
func TestOneReleaseWakesAWaiterOnce(t *testing.T) {
	cl := startCluster(t, 5)
	ctx := context.Background()
	// A long RetryDelay: the woken waiter spreads its retry over up to
	// 200 ms, so that the release's other messages come meanwhile.
	w, err := redlock.NewWithConfig(redlock.Config{Nodes: cl.nodes, NodeTimeout: time.Second, RetryDelay: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	// Load the acquire script, so that each attempt is one script call a
	// node (no NOSCRIPT and EVAL); nothing is granted, so nothing released.
	src, err := os.ReadFile("lua/acquire.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, rdb := range cl.rdbs {
		if err := rdb.ScriptLoad(ctx, string(src)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	hold := func(owner string) {
		for _, rdb := range cl.rdbs {
			pipe := rdb.TxPipeline()
			pipe.Del(ctx, lockKey("job"))
			pipe.HSet(ctx, lockKey("job"), owner, 1, ":at", 0)
			pipe.PExpire(ctx, lockKey("job"), 30*time.Second)
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	hold("x")
	base := scriptCalls(t, cl.rdbs[4])
	attempts := func() int { return scriptCalls(t, cl.rdbs[4]) - base }

	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		l, err := w.Lock(wctx, "job")
		if err == nil {
			_ = l.Unlock(ctx)
		}
		done <- err
	}()
	returned := false
	defer func() {
		cancel()
		if !returned {
			<-done
		}
	}()
	ch := lockKey("job") + ":wake"
	waitUntil(t, 5*time.Second, "the waiter to subscribe on every node", func() bool {
		for _, rdb := range cl.rdbs {
			if rdb.PubSubNumSub(ctx, ch).Val()[ch] != 1 {
				return false
			}
		}
		return true
	})
	// Its first attempt, and the one when its subscription reached a
	// majority (a release may have been missed before).
	waitUntil(t, 5*time.Second, "the waiter's first two attempts", func() bool { return attempts() >= 2 })

	// x releases on every node, as release.lua does, but z takes the lock
	// before the waiter's retry.
	hold("z")
	for _, rdb := range cl.rdbs {
		if err := rdb.Publish(ctx, ch, "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 5*time.Second, "the waiter's retry after the release", func() bool { return attempts() >= 3 })
	select {
	case err := <-done:
		returned = true
		t.Fatalf("Lock returned while z held the lock: %v", err)
	case <-time.After(time.Second): // an observation window, not synchronization
	}
	if n := attempts(); n != 3 {
		t.Errorf("the waiter made %d attempts after x's release, want 1: woken again by the same release", n-2)
	}
}

// wakeups.go: Close while a node's pub/sub connection waits for its
// handshake, to a node that accepts connections and answers nothing: no
// context ends that read, only the node client's ReadTimeout (30 s here),
// and go-redis holds its PubSub's lock through it. Close returns within its
// bound all the same.
func TestCloseBoundedByHungPubSubHandshake(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     string // the goroutine the handshake holds
		redial bool
	}{
		// The first subscription's dial, sent by the node's control
		// goroutine with no deadline.
		{"first subscription", "redlock.(*nodeSub).control(", false},
		// A redial by the reader, once the health check dropped the
		// connection the node stopped answering on.
		{"redial", "redlock.(*nodeSub).read(", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redlock.SetPubSubHealth(t, 100*time.Millisecond, 100*time.Millisecond)
			cl := startCluster(t, 3)
			holder := cl.locker(t)
			l := mustLock(t, holder, "busy")
			defer l.Unlock(context.Background())
			otherSubscriber(t, lockKey("busy")+":wake", cl.rdbs[2])
			nodes := slices.Clone(cl.nodes)
			slow := redis.NewClient(&redis.Options{Addr: cl.srvs[2].Addr(), ClientName: waiterConn, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1, ReadTimeout: 30 * time.Second})
			t.Cleanup(func() { slow.Close() })
			nodes[2] = slow
			waiter, err := redlock.New(nodes)
			if err != nil {
				t.Fatal(err)
			}
			hung := cl.srvs[2]
			if !tc.redial {
				hung.Pause(t) // accepts connections, answers nothing
				defer hung.Resume(t)
			}
			errc := make(chan error, 1)
			go func() {
				_, err := waiter.Lock(context.Background(), "busy")
				errc <- err
			}()
			if tc.redial {
				waitUntil(t, 5*time.Second, "the subscription on the node to hang", waiterSubscribed(context.Background(), cl.rdbs[2], 1))
				hung.Pause(t)
				defer hung.Resume(t)
			}
			waitUntil(t, 10*time.Second, "the handshake of the pub/sub connection to the hung node", func() bool {
				return inOneGoroutine(tc.in, ".initConn(")
			})
			start := time.Now()
			closed := make(chan time.Duration, 1)
			go func() {
				waiter.Close()
				closed <- time.Since(start)
			}()
			select {
			case d := <-closed:
				t.Logf("Close took %v", d)
			case <-time.After(6 * time.Second):
				t.Errorf("Close still blocked after %v with a pub/sub handshake hung (documented: up to 5 s in all)", time.Since(start).Round(time.Millisecond))
				hung.Resume(t)
				<-closed
			}
			if err := <-errc; !errors.Is(err, dlock.ErrClosed) {
				t.Errorf("Lock after Close = %v, want ErrClosed", err)
			}
		})
	}
}

// inOneGoroutine reports whether some goroutine's stack holds every one
// of frames.
func inOneGoroutine(frames ...string) bool {
	buf := make([]byte, 1<<20)
	for _, g := range bytes.Split(buf[:runtime.Stack(buf, true)], []byte("\n\n")) {
		if !slices.ContainsFunc(frames, func(f string) bool { return !bytes.Contains(g, []byte(f)) }) {
			return true
		}
	}
	return false
}

// wakeups.go: a node's pub/sub connection whose path goes dead with no
// reset (a partition that drops packets) tells its reader nothing: every
// release published to it is lost, and a blocked waiter sleeps until the
// holder's lease would have run out. Pinged once idle and dropped when
// nothing answers, it is dialed again: the waiter whose wake-ups were
// lost checks again, and later releases wake their waiters again.
func TestDeadPubSubPathIsDropped(t *testing.T) {
	redlock.SetPubSubHealth(t, 200*time.Millisecond, 200*time.Millisecond)
	cl := startCluster(t, 3)
	var nodes []redis.UniversalClient
	var proxies []*tcpproxy.Proxy
	for _, srv := range cl.srvs {
		p, err := tcpproxy.New(srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		opt := nodeOptions(p.Addr())
		opt.ClientName = waiterConn
		rdb := redis.NewClient(opt)
		t.Cleanup(func() { rdb.Close() })
		proxies = append(proxies, p)
		nodes = append(nodes, rdb)
	}
	waiter, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { waiter.Close() })
	holder := cl.locker(t)
	ctx := context.Background()
	ch := lockKey("k") + ":wake"
	attempts := func() int {
		return scriptCalls(t, cl.rdbs[0]) + scriptCalls(t, cl.rdbs[1]) + scriptCalls(t, cl.rdbs[2])
	}
	// blockedWaiter has waiter wait for k, held by holder for a minute (a
	// waiter that is not woken sleeps that long), once the waiter's n
	// attempts were refused on every node.
	blockedWaiter := func(n int) <-chan error {
		base := attempts()
		done := make(chan error, 1)
		go func() {
			l, err := waiter.Lock(ctx, "k")
			if err == nil {
				err = l.Unlock(ctx)
			}
			done <- err
		}()
		waitUntil(t, 5*time.Second, "the waiter's attempts", func() bool { return attempts()-base >= n*len(nodes) })
		return done
	}

	l := mustLock(t, holder, "k", dlock.WithTTL(time.Minute))
	// Its first attempt, and the one when its subscription reached a
	// majority (a release may have been missed before).
	done := blockedWaiter(2)
	// Subscribed on every node, not only the majority that woke it: a
	// node still subscribing would have no release to drop.
	for i, rdb := range cl.rdbs {
		waitUntil(t, 5*time.Second, "the waiter's subscription on node "+strconv.Itoa(i), waiterSubscribed(ctx, rdb, 1))
	}
	var dropped []<-chan struct{}
	for _, p := range proxies {
		dropped = append(dropped, p.DropOn(func(b []byte) bool {
			return bytes.Contains(b, []byte("message\r\n")) && bytes.Contains(b, []byte(ch))
		}))
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, d := range dropped {
		testutil.Receive(t, d, 5*time.Second, "the release on a node's pub/sub connection")
	}
	if err := testutil.Receive(t, done, 5*time.Second, "the waiter whose wake-ups were lost"); err != nil {
		t.Fatal(err)
	}
	// The readers' last reads began at most the idle time before the release.
	if d, bound := time.Since(start), 400*time.Millisecond+time.Second; d > bound {
		t.Errorf("the waiter whose wake-ups were lost was served after %v, want at most %v", d.Round(time.Millisecond), bound)
	}

	// The next release comes on the connections dialed again, the channel
	// still subscribed there.
	l = mustLock(t, holder, "k", dlock.WithTTL(time.Minute))
	done = blockedWaiter(1)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Receive(t, done, 2*time.Second, "the next waiter, woken by the release"); err != nil {
		t.Fatal(err)
	}
}

// wakeups.go: a SUBSCRIBE sent while go-redis dials a node's pub/sub
// connection again waits for that dial, whatever its context says. Under a
// deadline that passes meanwhile, its write on the new connection fails at
// once, and go-redis, taking that for a broken connection, closes the
// connection it just made and dials again.
func TestSlowPubSubRedialIsNotMadeTwice(t *testing.T) {
	cl := startCluster(t, 3)
	holder := cl.locker(t)
	for _, key := range []string{"a", "b"} {
		l := mustLock(t, holder, key, dlock.WithTTL(time.Minute))
		defer l.Unlock(context.Background())
	}
	// Node 0's pub/sub connection is dialed in 2 s once slow is set.
	var slow atomic.Bool
	var dials atomic.Int32
	dialing := make(chan struct{}, 1)
	waiter := withPubSubDial(t, cl, 0, func(ctx context.Context) error {
		if !slow.Load() {
			return nil
		}
		dials.Add(1)
		select {
		case dialing <- struct{}{}:
		default:
		}
		// The subject: a dial slower than a second.
		select {
		case <-time.After(2 * time.Second):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _ = waiter.Lock(ctx, "a") }()
	waitUntil(t, 5*time.Second, "a's subscription on node 0", waiterSubscribed(ctx, cl.rdbs[0], 1))

	slow.Store(true)
	if err := cl.rdbs[0].ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	testutil.Receive(t, dialing, 5*time.Second, "the dial of node 0's pub/sub connection")
	// b's channel is subscribed while the dial goes on: its attempt runs
	// on a pooled connection.
	go func() { _, _ = waiter.Lock(ctx, "b") }()
	waitUntil(t, 10*time.Second, "b's subscription on node 0", waiterSubscribed(ctx, cl.rdbs[0], 2))
	if n := dials.Load(); n != 1 {
		t.Errorf("node 0's pub/sub connection was dialed %d times, want 1", n)
	}
}

// withPubSubDial returns a Client on cl's nodes whose node i calls before
// ahead of each dial of a pub/sub connection, which may hold the dial
// back or fail it (its error). Node i's connections are named
// waiterConn.
func withPubSubDial(t *testing.T, cl *cluster, i int, before func(ctx context.Context) error) *dlock.Client {
	t.Helper()
	nodes := slices.Clone(cl.nodes)
	node := redis.NewClient(&redis.Options{
		Addr: cl.srvs[i].Addr(), ClientName: waiterConn, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if pubSubDial() {
				if err := before(ctx); err != nil {
					return nil, err
				}
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	})
	t.Cleanup(func() { node.Close() })
	nodes[i] = node
	c, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waiterConn names the connections of the waiting Client's nodes:
// waiterNodes', lockerNodes', withPubSubDial's node,
// TestDeadPubSubPathIsDropped's.
const waiterConn = "waiter"

// waiterSubscribed is a condition for waitUntil: rdb's server has a pub/sub
// connection named waiterConn, subscribed to n channels. PUBSUB NUMSUB
// would count other clients' subscriptions too: the holder's, left to
// linger when its first attempt failed and it waited.
func waiterSubscribed(ctx context.Context, rdb *redis.Client, n int) func() bool {
	return func() bool {
		list, err := rdb.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Text()
		if err != nil {
			return false
		}
		for _, line := range strings.Split(list, "\n") {
			f := strings.Fields(line)
			if slices.Contains(f, "name="+waiterConn) && slices.Contains(f, "sub="+strconv.Itoa(n)) {
				return true
			}
		}
		return false
	}
}

// otherSubscriber subscribes channel on each of rdbs, until the test ends,
// as the holder is when its first attempt failed (a node slow under load)
// and it waited: the waiter's subscription must be told apart from it.
func otherSubscriber(t *testing.T, channel string, rdbs ...*redis.Client) {
	t.Helper()
	for _, rdb := range rdbs {
		ps := rdb.Subscribe(context.Background(), channel)
		t.Cleanup(func() { ps.Close() })
		if _, err := ps.Receive(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// pubSubDial reports whether the goroutine dials a go-redis pub/sub
// connection, not one of a client's pool.
func pubSubDial() bool {
	buf := make([]byte, 64<<10)
	return bytes.Contains(buf[:runtime.Stack(buf, false)], []byte("(*PubSubPool).NewConn"))
}

// wakeups.go: a node's pub/sub connection whose dial times out (a node
// gone from the network) is dialed again after the reader's backoff, once
// a round: the health check, which drops a connection whose read timed
// out, must not take the dial's timeout for one and dial again at once.
func TestTimedOutPubSubDialIsNotMadeTwice(t *testing.T) {
	cl := startCluster(t, 3)
	holder := cl.locker(t)
	l := mustLock(t, holder, "a", dlock.WithTTL(time.Minute))
	defer l.Unlock(context.Background())
	otherSubscriber(t, lockKey("a")+":wake", cl.rdbs[0])
	// Once unreachable is set, node 0's pub/sub dials time out at once.
	var unreachable atomic.Bool
	var mu sync.Mutex
	var dials []time.Time
	waiter := withPubSubDial(t, cl, 0, func(ctx context.Context) error {
		if err := ctx.Err(); err != nil {
			return err // as net.Dialer: no dial under an ended context
		}
		if !unreachable.Load() {
			return nil
		}
		mu.Lock()
		dials = append(dials, time.Now())
		mu.Unlock()
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _ = waiter.Lock(ctx, "a") }()
	waitUntil(t, 5*time.Second, "a's subscription on node 0", waiterSubscribed(ctx, cl.rdbs[0], 1))
	unreachable.Store(true)
	if err := cl.rdbs[0].ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "node 0's pub/sub dials", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(dials) >= 5
	})
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(dials); i++ {
		// The reader's backoff is 50 ms at least.
		if gap := dials[i].Sub(dials[i-1]); gap < 25*time.Millisecond {
			t.Errorf("node 0's pub/sub connection was dialed again %v after a dial that timed out, want the backoff between", gap)
		}
	}
}

// wakeups.go: a node's pub/sub connection whose first dial fails (the
// SUBSCRIBE of the first wait, to a node that refuses it) is dialed again
// after the reader's backoff, not at once by the reader as it starts.
func TestFailedFirstPubSubDialBacksOff(t *testing.T) {
	cl := startCluster(t, 3)
	holder := cl.locker(t)
	l := mustLock(t, holder, "a", dlock.WithTTL(time.Minute))
	defer l.Unlock(context.Background())
	var mu sync.Mutex
	var dials []time.Time
	waiter := withPubSubDial(t, cl, 0, func(ctx context.Context) error {
		mu.Lock()
		dials = append(dials, time.Now())
		mu.Unlock()
		return &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _ = waiter.Lock(ctx, "a") }()
	waitUntil(t, 10*time.Second, "node 0's pub/sub dials", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(dials) >= 3
	})
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(dials); i++ {
		// The reader's backoff is 50 ms at least.
		if gap := dials[i].Sub(dials[i-1]); gap < 25*time.Millisecond {
			t.Errorf("node 0's pub/sub dial %d came %v after the one that failed, want the backoff between", i+1, gap)
		}
	}
}
