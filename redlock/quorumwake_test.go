package redlock_test

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/tcpproxy"
	"github.com/dlock-go/dlock/internal/testutil"
	"github.com/dlock-go/dlock/redlock"
)

// wakeups.go: a release that comes after a waiter's refused attempt but
// before its subscription is in effect is heard by no one. The waiter is
// woken to check again once a majority of the nodes confirmed the
// subscription, not only once every node did: one node that never
// confirms it must not leave the waiter asleep until the holder's lease
// would have run out.
func TestSubscriptionOnAMajorityWakesTheWaiter(t *testing.T) {
	cl := startCluster(t, 3)
	ctx := context.Background()
	holder := cl.locker(t)
	// A lease far longer than the test waits: the waiter's own re-check
	// comes when it would run out, so only a wake-up gets it the lock in
	// time.
	l := lockEveryNode(t, cl, holder, "k", dlock.WithTTL(time.Minute))
	waiter, proxies := proxiedWaiter(t, cl, func(int) redis.Hook { return testutil.PassHook{} })
	held := holdSubscribes(t, proxies, lockKey("k")+":wake")

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1) // never blocks, even after a failed test
	go func() {
		wl, err := waiter.Lock(wctx, "k", dlock.WithTTL(time.Minute))
		if err == nil {
			err = wl.Unlock(ctx)
		}
		done <- err
	}()
	// The waiter subscribes after its attempt was refused.
	for i, h := range held {
		testutil.Receive(t, h, 5*time.Second, "the waiter's SUBSCRIBE to node "+strconv.Itoa(i))
	}
	// Published on no node's subscription: missed.
	unlockEverywhere(t, cl, l, "k")
	// Nodes 0 and 1 confirm, a majority; node 2 never does.
	proxies[0].Thaw()
	proxies[1].Thaw()
	if err := testutil.Receive(t, done, 5*time.Second, "the waiter, woken by its subscription on a majority"); err != nil {
		t.Fatal(err)
	}
}

// wakeups.go: a waiter whose snapshot, before its attempt, found the
// channel subscribed on no majority, and which joins after the
// subscription reached one, starts woken: a release between its attempt
// and the confirmations was heard by no one, and the wake-up of the
// confirmations came before it joined. So it does if the subscription
// lost its majority again before it joined (a node's connection broke,
// and that node does not confirm it again soon): the wake-up of the
// majority is what it missed.
func TestWaiterJoiningAfterTheMajorityConfirmedChecksAgain(t *testing.T) {
	for _, lost := range []bool{false, true} {
		name := "majority held"
		if lost {
			name = "majority lost again"
		}
		t.Run(name, func(t *testing.T) { testJoinAfterMajority(t, lost) })
	}
}

func testJoinAfterMajority(t *testing.T, lost bool) {
	cl := startCluster(t, 3)
	cl.cacheScripts(t)
	ctx := context.Background()
	holder := cl.locker(t)
	l := lockEveryNode(t, cl, holder, "k", dlock.WithTTL(time.Minute))

	// Two waiters on one Client, told apart by their context. a probes
	// the hub's wake-ups: its attempts after its first are refused by
	// another owner for a minute without being sent (it must not take the
	// lock), and node 0 tells each of them to aTries. b's first attempt's
	// refusals are held back until gate is closed.
	type who struct{}
	aTries := make(chan int32, 16)
	bRefused := make(chan struct{}, 3)
	gate := make(chan struct{})
	waiter, proxies := proxiedWaiter(t, cl, func(i int) redis.Hook {
		var a, b atomic.Int32
		return &byCaller{fn: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			if !isAcquire(cmd, "k") {
				return next(ctx, cmd)
			}
			switch ctx.Value(who{}) {
			case "a":
				n := a.Add(1)
				if i == 0 {
					select {
					case aTries <- n:
					default:
					}
				}
				if n == 1 {
					return next(ctx, cmd)
				}
				cmd.(*redis.Cmd).SetVal([]any{int64(0), time.Minute.Milliseconds(), "other"})
				return nil
			case "b":
				if b.Add(1) > 1 {
					return next(ctx, cmd)
				}
				err := next(ctx, cmd)
				bRefused <- struct{}{}
				select {
				case <-gate:
				case <-ctx.Done():
				}
				return err
			}
			return next(ctx, cmd)
		}}
	})
	held := holdSubscribes(t, proxies, lockKey("k")+":wake")

	lock := func(ctx context.Context) <-chan error {
		done := make(chan error, 1) // never blocks, even after a failed test
		go func() {
			wl, err := waiter.Lock(ctx, "k", dlock.WithTTL(time.Minute))
			if err == nil {
				err = wl.Unlock(context.Background())
			}
			done <- err
		}()
		return done
	}
	actx, cancelA := context.WithCancel(context.WithValue(ctx, who{}, "a"))
	aDone := lock(actx)
	defer func() {
		cancelA()
		<-aDone
	}()
	// a's attempt was refused and it subscribes: the channel exists, on
	// no majority yet.
	for i, h := range held {
		testutil.Receive(t, h, 5*time.Second, "a's SUBSCRIBE to node "+strconv.Itoa(i))
	}
	bctx, cancelB := context.WithCancel(context.WithValue(ctx, who{}, "b"))
	defer cancelB()
	bDone := lock(bctx)
	for range 3 {
		testutil.Receive(t, bRefused, 5*time.Second, "b's first attempt to be refused on every node")
	}
	// After b's attempt, before the confirmations: heard by no one.
	unlockEverywhere(t, cl, l, "k")
	proxies[0].Thaw()
	proxies[1].Thaw()
	// a, woken by the majority, tries again: the hub has counted it.
	awaitTry := func(n int32, what string) {
		t.Helper()
		for testutil.Receive(t, aTries, 5*time.Second, what) < n {
		}
	}
	awaitTry(2, "a's attempt after its subscription reached a majority")
	if lost {
		// Node 0's connection breaks; the one dialed again has its
		// SUBSCRIBE held back: the subscription is on node 1 alone.
		again := proxies[0].FreezeOn(isSubscribe(lockKey("k") + ":wake"))
		if err := cl.rdbs[0].ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
		testutil.Receive(t, again, 5*time.Second, "node 0's SUBSCRIBE on the connection dialed again")
		// go-redis dials again before it reports the break: a, woken by
		// it, tries again once the hub has counted it.
		awaitTry(3, "a's attempt after node 0's connection broke")
	}
	close(gate)
	if err := testutil.Receive(t, bDone, 5*time.Second, "b, joining after the majority confirmed"); err != nil {
		t.Fatal(err)
	}
}

// unlockEverywhere unlocks l and waits until every node has released it:
// Unlock returns once a majority has, and a later node's release would
// publish after the test let the subscriptions be confirmed.
func unlockEverywhere(t *testing.T, cl *cluster, l *dlock.Lock, key string) {
	t.Helper()
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "every node to release "+key, func() bool { return len(cl.holders(t, key, l.Token())) == 0 })
}

// byCaller is a go-redis hook that passes each command to fn.
type byCaller struct {
	testutil.PassHook
	fn func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error
}

func (h *byCaller) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { return h.fn(ctx, cmd, next) }
}

// isAcquire reports whether cmd runs the acquire script on key.
func isAcquire(cmd redis.Cmder, key string) bool { return runs(cmd, key, ":fence", 3) }

// isFence reports whether cmd runs the fence script on key.
func isFence(cmd redis.Cmder, key string) bool { return runs(cmd, key, ":fence", 2) }

// isRelease reports whether cmd runs the release script on key.
func isRelease(cmd redis.Cmder, key string) bool { return runs(cmd, key, ":wake", 3) }

// runs reports whether cmd is an EVALSHA on key's lock and the name
// lockKey(key)+second, with n arguments: acquire.lua and fence.lua share
// their keys, not their number of arguments.
func runs(cmd redis.Cmder, key, second string, n int) bool {
	a := cmd.Args()
	return len(a) == 5+n && a[0] == "evalsha" && a[3] == lockKey(key) && a[4] == lockKey(key)+second
}

// proxiedWaiter returns a Client on cl's nodes, with a per-node timeout far
// longer than the test waits (an attempt whose replies a hook holds back
// still counts them), whose node i has the hook hook(i), and whose pub/sub
// connection to node i passes through the i-th proxy returned, its other
// connections going straight to the node: a test holds a node's SUBSCRIBE
// back there.
func proxiedWaiter(t *testing.T, cl *cluster, hook func(i int) redis.Hook) (*dlock.Client, []*tcpproxy.Proxy) {
	t.Helper()
	var nodes []redis.UniversalClient
	var proxies []*tcpproxy.Proxy
	for i, srv := range cl.srvs {
		p, err := tcpproxy.New(srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		o := nodeOptions(srv.Addr())
		o.ClientName = waiterConn
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if pubSubDial() {
				addr = p.Addr()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
		rdb := redis.NewClient(o)
		rdb.AddHook(hook(i))
		t.Cleanup(func() { rdb.Close() })
		nodes = append(nodes, rdb)
		proxies = append(proxies, p)
	}
	c, err := redlock.NewWithConfig(redlock.Config{Nodes: nodes, NodeTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, proxies
}

// holdSubscribes freezes each proxy once it forwards a SUBSCRIBE of
// channel, holding it back until the proxy is thawed, and thaws them all
// when the test ends. The channels it returns are closed as each proxy
// freezes.
func holdSubscribes(t *testing.T, proxies []*tcpproxy.Proxy, channel string) []<-chan struct{} {
	t.Helper()
	var held []<-chan struct{}
	for _, p := range proxies {
		held = append(held, p.FreezeOn(isSubscribe(channel)))
		// Before the Client closes (cleanups run last first): its
		// connections' Close would wait for the handshake of a connection
		// still frozen.
		t.Cleanup(p.Thaw)
	}
	return held
}

// isSubscribe returns a match for tcpproxy's FreezeOn: a SUBSCRIBE of
// channel.
func isSubscribe(channel string) func([]byte) bool {
	return func(b []byte) bool {
		return bytes.Contains(bytes.ToLower(b), []byte("subscribe")) && bytes.Contains(b, []byte(channel))
	}
}
