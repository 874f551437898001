package dlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

// lingeringChannel subscribes c's hand-over channel for key and lets it
// linger (lingerOn).
func lingeringChannel(t *testing.T, c *Client, key string) (*wakeups, string) {
	t.Helper()
	w := c.be.(*node).wake
	ch := c.keys(key).channel
	lingerOn(t, w, ch)
	return w, ch
}

// awaitEarly waits until the hand-over for token has reached w's channel
// ch and is kept there for a waiter yet to register.
func awaitEarly(t *testing.T, w *wakeups, ch, token string) {
	t.Helper()
	waitUntil(t, 5*time.Second, "the hand-over to "+token+" to arrive", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		_, ok := w.channels[ch].early[token]
		return ok
	})
}

// lingerOn subscribes w to ch and lets it linger, subscribed, with no
// waiter: as after a wait just ended. A waiter whose check comes after
// is not nudged to check again when it registers, as the first waiter of
// a new subscription is.
func lingerOn(t *testing.T, w *wakeups, ch string) {
	t.Helper()
	first, err := w.subscribe(context.Background(), ch, "first", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	waitSubscribed(t, w, ch)
	first.leave()
}

// A waiter registers after its check joined the queue. On a channel that
// is still subscribed, the hand-over can arrive in between; it must not be
// lost (the waiter would sleep until its next refresh).
func TestHandOverBeforeWaiterRegisters(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	w, ch := lingeringChannel(t, c, "early")

	if err := rdb.SPublish(ctx, ch, "late 42").Err(); err != nil {
		t.Fatal(err)
	}
	awaitEarly(t, w, ch, "late")
	late, err := w.subscribe(ctx, ch, "late", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer late.leave()
	select {
	case fence := <-late.granted:
		if fence != 42 {
			t.Errorf("fence = %d, want 42", fence)
		}
	default:
		t.Fatal("a hand-over that arrived before the waiter registered was lost")
	}
}

// One release of permits hands them to many waiters at once, and more
// than maxEarly of them can arrive before their waiters register: the
// oldest are dropped then, and a waiter whose hand-over was dropped must
// be told to check again, or it sleeps until its next refresh while it
// holds the permits.
func TestHandOverDroppedBeforeWaiterRegistersNudges(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	w, ch := lingeringChannel(t, c, "burst")

	checked := time.Now() // every late waiter's check starts
	for i := range maxEarly + 1 {
		if err := rdb.SPublish(ctx, ch, fmt.Sprintf("late%d %d", i, 42+i)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	last := fmt.Sprintf("late%d", maxEarly)
	awaitEarly(t, w, ch, last)
	late, err := w.subscribe(ctx, ch, "late0", checked)
	if err != nil {
		t.Fatal(err)
	}
	defer late.leave()
	select {
	case <-late.granted:
	case <-late.nudge:
	default:
		t.Fatal("a waiter whose hand-over was dropped before it registered was not told to check again")
	}
	freshIsNotNudged(t, w, ch)
}

// A hand-over kept for a waiter yet to register, and taken by it when it
// does, is no longer kept: once maxEarly of them have been taken, the next
// one kept drops nothing, and a waiter registering after it, whose check is
// older, has missed nothing either. Told to check again, every such waiter
// would make a round trip for nothing.
func TestHandOverTakenFromEarlyIsNotDroppedAgain(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	w, ch := lingeringChannel(t, c, "taken")

	for i := range maxEarly {
		token := fmt.Sprintf("late%d", i)
		if err := rdb.SPublish(ctx, ch, fmt.Sprintf("%s %d", token, 42+i)).Err(); err != nil {
			t.Fatal(err)
		}
		awaitEarly(t, w, ch, token)
		late, err := w.subscribe(ctx, ch, token, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		<-late.granted
		late.leave()
	}
	checked := time.Now() // the next waiter's check starts
	if err := rdb.SPublish(ctx, ch, "another 7").Err(); err != nil {
		t.Fatal(err)
	}
	awaitEarly(t, w, ch, "another")
	next, err := w.subscribe(ctx, ch, "next", checked)
	if err != nil {
		t.Fatal(err)
	}
	defer next.leave()
	select {
	case <-next.nudge:
		t.Error("a waiter was told to check again for a hand-over dropped that its own waiter had taken")
	default:
	}
}

// A waiter registers after its check joined the queue. If the pub/sub
// connection dropped in between, a hand-over sent while it was down is
// gone, and the nudges sent on reconnection reached only the waiters
// registered then: the late one must be told to check again at once.
func TestReconnectBeforeWaiterRegisters(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	w, ch := lingeringChannel(t, c, "gap")

	checked := time.Now() // the late waiter's check starts
	if err := rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	lost := func() time.Time {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.channels[ch].lost
	}
	waitUntil(t, 5*time.Second, "the drop to be noticed", func() bool { return lost().After(checked) })
	dropped := lost()
	waitUntil(t, 5*time.Second, "the subscription to come back", func() bool { return lost().After(dropped) })
	late, err := w.subscribe(ctx, ch, "late", checked)
	if err != nil {
		t.Fatal(err)
	}
	defer late.leave()
	select {
	case <-late.nudge:
	default:
		t.Fatal("a waiter whose check began before the connection dropped was not told to check again")
	}

	// A check that began after the loss saw every hand-over made before it.
	freshIsNotNudged(t, w, ch)
}

// A hand-over published after a waiter's check but before its new
// subscription took effect is missed. Whether the waiter registered before
// the subscription took effect or after, it is told to check again; one
// whose check came after is not.
func TestNewSubscriptionNudgesEarlierChecks(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	w := c.be.(*node).wake
	ch := c.keys("new").channel

	checked := time.Now()
	early, err := w.subscribe(ctx, ch, "early", checked) // subscribes the channel
	if err != nil {
		t.Fatal(err)
	}
	defer early.leave()
	waitSubscribed(t, w, ch)
	late, err := w.subscribe(ctx, ch, "late", checked)
	if err != nil {
		t.Fatal(err)
	}
	defer late.leave()
	for name, wt := range map[string]*waiter{"registered before": early, "registered after": late} {
		select {
		case <-wt.nudge:
		default:
			t.Errorf("a waiter %s the subscription took effect, whose check came earlier, was not told to check again", name)
		}
	}
	freshIsNotNudged(t, w, ch)
}

// freshIsNotNudged registers a waiter whose check starts now: it saw every
// hand-over made before, so nothing tells it to check again.
func freshIsNotNudged(t *testing.T, w *wakeups, ch string) {
	t.Helper()
	fresh, err := w.subscribe(context.Background(), ch, "fresh", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.leave()
	select {
	case <-fresh.nudge:
		t.Error("a waiter whose check came after every possible loss was nudged for nothing")
	default:
	}
}

// waitSubscribed waits until the server confirmed ch's subscription.
func waitSubscribed(t *testing.T, w *wakeups, ch string) {
	t.Helper()
	waitUntil(t, 5*time.Second, "the subscription of "+ch, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		cs := w.channels[ch]
		return cs != nil && cs.isReady
	})
}

// A SUBSCRIBE refused with an error reply (an ACL without the channel,
// while an operator edits it) leaves the connection as it is: go-redis
// does not reconnect and resubscribe, so the channel must be subscribed
// again, or its waiters get no hand-over message for the Client's life.
func TestWakeSubscriptionRecoversFromErrorReply(t *testing.T) {
	t.Run("Standalone", func(t *testing.T) {
		srv := redistest.Start(t)
		subscriptionRecoversFromErrorReply(t, []*redis.Client{srv.Client(t)}, func(user, pw string) redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: user, Password: pw})
		})
	})
	t.Run("Cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		var admins []*redis.Client
		for _, n := range cl.Nodes {
			admins = append(admins, n.Client(t))
		}
		subscriptionRecoversFromErrorReply(t, admins, func(user, pw string) redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Username: user, Password: pw})
		})
	})
}

// subscriptionRecoversFromErrorReply has the servers (admins: one client
// per server) refuse the channel of the lock "shut" to the user of the
// clients dial makes, then allow it, and checks that a hand-over wakes the
// waiter promptly.
func subscriptionRecoversFromErrorReply(t *testing.T, admins []*redis.Client, dial func(user, pw string) redis.UniversalClient) {
	ctx := context.Background()
	acl := func(args ...any) {
		t.Helper()
		for _, a := range admins {
			if err := a.Do(ctx, append([]any{"ACL", "SETUSER", "locker"}, args...)...).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Every key and command; of the channels, only the lock "open"'s.
	acl("on", ">pw", "~*", "resetchannels", "&dlock:{open}:*", "+@all")
	rdb := dial("locker", "pw")
	t.Cleanup(func() { rdb.Close() })
	// The waiter re-checks only every 20 s: a prompt wake-up can only come
	// from the hand-over message.
	c1 := newClientOn(t, rdb, WithQueueTTL(time.Minute))
	c2 := newClientOn(t, rdb, WithQueueTTL(time.Minute))
	// The waiter's Client learns how hand-overs are published, on a
	// channel it may use.
	w, _ := lingeringChannel(t, c2, "open")

	l := mustLock(t, c1, "shut")
	got := make(chan error, 1) // the goroutine never blocks, even after a failed test
	go func() {
		l2, err := c2.Lock(ctx, "shut", WithRetry(FixedRetry(time.Hour, 0)))
		if err == nil {
			err = l2.Unlock(ctx)
		}
		got <- err
	}()
	ch := c2.wakeChannel("shut")
	waitUntil(t, 5*time.Second, "the server to refuse the waiter's subscription", func() bool {
		for _, a := range admins {
			if testutil.ACLRefused(ctx, a, ch) {
				return true
			}
		}
		return false
	})
	acl("allchannels")
	// Subscribed again after a backoff, not at the waiter's next check.
	waitSubscribed(t, w, ch)
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Receive(t, got, 10*time.Second, "the waiter to be woken by the hand-over"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(released); d > time.Second {
		t.Errorf("waiter woke %v after the release", d)
	}
}

// hasSharded: an ACL's refusal of the probe's channel says nothing of
// whether SPUBLISH works. Remembered as "no", it would have the Client
// subscribe with SUBSCRIBE for good, and miss every hand-over sent with
// SPUBLISH once the channel is allowed.
func TestRefusedChannelDoesNotSettleTheKindOfSubscription(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := srv.Client(t)
	setUser := func(args ...any) {
		t.Helper()
		if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", "locker"}, args...)...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	setUser("on", ">pw", "~*", "resetchannels", "+@all") // every command, no channel
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "locker", Password: "pw"})
	t.Cleanup(func() { rdb.Close() })
	c := newClientOn(t, rdb)
	w, ch := c.be.(*node).wake, c.wakeChannel("k")
	if sharded, err := w.hasSharded(ctx, ch); err == nil {
		t.Fatalf("hasSharded with the channel refused = %v, nil; want the refusal", sharded)
	}
	setUser("allchannels")
	if sharded, err := w.hasSharded(ctx, ch); err != nil || !sharded {
		t.Errorf("hasSharded once the channel is allowed = %v, %v; want true (Redis 7 has SPUBLISH)", sharded, err)
	}
}

// commandDenied tells an ACL's refusal of SPUBLISH from one of its channel
// by the wording of each, as Redis 7.0 and 7.2 give them: 7.2 names the
// user, and a user's name may hold any word, "channel" too.
func TestCommandDeniedWording(t *testing.T) {
	for _, tc := range []struct {
		msg    string
		denied bool
	}{
		{"NOPERM this user has no permissions to run the 'spublish' command", true},                    // 7.0
		{"NOPERM User locker has no permissions to run the 'spublish' command", true},                  // 7.2
		{"NOPERM User channel-bot has no permissions to run the 'spublish' command", true},             // 7.2
		{"NOPERM this user has no permissions to access one of the channels used as arguments", false}, // 7.0
		{"NOPERM No permissions to access a channel", false},                                           // 7.2
		{"ERR unknown command 'spublish'", false},
	} {
		if got := commandDenied(errors.New(tc.msg)); got != tc.denied {
			t.Errorf("commandDenied(%q) = %v, want %v", tc.msg, got, tc.denied)
		}
	}
}

// A pub/sub connection that cannot be made again fails with an error
// reply at every Receive, read from no connection: the read goroutine must
// wait between tries, as for any other broken connection, not reconnect in
// a tight loop that hammers the server with logins. The reply comes
// wrapped by go-redis when the login is refused (the user's password was
// changed, and the server cut the connection), and bare when the Redis
// client's own OnConnect fails with it.
func TestWakeReconnectRefusedByServerBacksOff(t *testing.T) {
	type setup struct {
		rdb    *redis.Client
		refuse func() // from now on, every try to connect again fails
		cut    []any  // the CLIENT KILL filter that cuts the connection
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, srv *redistest.Server, admin *redis.Client) setup
	}{
		{"login refused", func(t *testing.T, srv *redistest.Server, admin *redis.Client) setup {
			if err := admin.Do(context.Background(), "ACL", "SETUSER", "locker", "on", ">pw", "~*", "allchannels", "+@all").Err(); err != nil {
				t.Fatal(err)
			}
			// Connections already logged in stay so until cut.
			return setup{
				rdb: redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "locker", Password: "pw"}),
				refuse: func() {
					if err := admin.Do(context.Background(), "ACL", "SETUSER", "locker", "resetpass", ">other").Err(); err != nil {
						t.Error(err)
					}
				},
				cut: []any{"USER", "locker"},
			}
		}},
		{"OnConnect failed", func(t *testing.T, srv *redistest.Server, _ *redis.Client) setup {
			var failing atomic.Bool
			return setup{
				rdb: redis.NewClient(&redis.Options{Addr: srv.Addr(), OnConnect: func(ctx context.Context, cn *redis.Conn) error {
					if failing.Load() {
						return cn.Do(ctx, "DLOCK-TEST-NO-SUCH-COMMAND").Err() // a bare error reply
					}
					return nil
				}}),
				refuse: func() { failing.Store(true) },
				cut:    []any{"TYPE", "pubsub"},
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			ctx := context.Background()
			admin := srv.Client(t)
			s := tc.setup(t, srv, admin)
			t.Cleanup(func() { s.rdb.Close() })
			c := newClientOn(t, s.rdb)
			lingeringChannel(t, c, "k")
			s.refuse()
			tries := func() int {
				t.Helper()
				info, err := admin.Info(ctx, "stats").Result()
				if err != nil {
					t.Fatal(err)
				}
				for _, line := range strings.Split(info, "\r\n") {
					if v, ok := strings.CutPrefix(line, "total_connections_received:"); ok {
						n, _ := strconv.Atoi(v)
						return n
					}
				}
				t.Fatal("no total_connections_received in INFO stats")
				return 0
			}
			before := tries()
			if err := admin.Do(ctx, append([]any{"CLIENT", "KILL"}, s.cut...)...).Err(); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, 5*time.Second, "a try to connect again", func() bool { return tries() > before })
			// A measurement window, not a synchronization: tries 100 ms
			// apart make about 5 in it (fewer on a loaded machine, never
			// more).
			from := tries()
			time.Sleep(500 * time.Millisecond)
			if n := tries() - from; n > 20 {
				t.Errorf("%d refused connections in 500 ms: the pub/sub connection is retried in a tight loop", n)
			}
		})
	}
}

// A waiter whose context ended gives up, but its subscription goes out
// without its deadline: it neither breaks the shared connection (a write
// past the deadline would) nor stays subscribed once its linger ends.
func TestFailedSubscribeLeavesNoSubscriptionBehind(t *testing.T) {
	c, rdb, _ := newTestClient(t)
	ctx := context.Background()
	w, keep := lingeringChannel(t, c, "keep") // the shared connection is up
	gone := c.keys("gone").channel
	w.mu.Lock()
	w.linger = 100 * time.Millisecond
	lost := w.channels[keep].lost
	w.mu.Unlock()

	dead, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	if wt, err := w.subscribe(dead, gone, "tok", time.Now()); err == nil {
		wt.leave()
	}
	waitUntil(t, 5*time.Second, "the channel "+gone+" to be unsubscribed on the server", func() bool {
		subs, err := rdb.PubSubShardNumSub(ctx, gone).Result()
		if err != nil {
			t.Fatal(err)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		return subs[gone] == 0 && w.channels[gone] == nil
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	if cs := w.channels[keep]; cs == nil || !cs.isReady || !cs.lost.Equal(lost) {
		t.Error("the shared connection broke")
	}
}

// A subscription that fails because the shared pub/sub connection cannot
// be dialed (another channel, lingering, keeps the connection's shard) is
// still in go-redis's set of channels, which go-redis subscribes again
// when it reconnects: it must be taken out, or the channel stays
// subscribed on the server with no waiter.
func TestFailedSubscribeNotResubscribedOnReconnection(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	var refuse atomic.Bool
	var refused atomic.Int32
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if refuse.Load() {
			refused.Add(1)
			return nil, errors.New("dial refused by the test")
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClientOn(t, rdb)
	w := c.be.(*node).wake
	w.mu.Lock()
	w.linger = time.Minute
	w.mu.Unlock()
	_, keep := lingeringChannel(t, c, "keep") // the shard stays up for it
	gone := c.keys("gone").channel

	refuse.Store(true)
	admin := srv.Client(t)
	if err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	// go-redis has seen the connection break (a write to it could still
	// succeed before), and has no connection now.
	waitUntil(t, 5*time.Second, "a dial of the broken connection", func() bool { return refused.Load() > 0 })
	if wt, err := w.subscribe(ctx, gone, "tok", time.Now()); err == nil {
		wt.leave()
		t.Fatal("subscribed with every dial refused")
	}
	refuse.Store(false)
	// go-redis subscribes its whole set again in one command.
	waitUntil(t, 10*time.Second, "the channel "+keep+" to be subscribed again", func() bool {
		return admin.PubSubShardNumSub(ctx, keep).Val()[keep] == 1
	})
	if n := admin.PubSubShardNumSub(ctx, gone).Val()[gone]; n != 0 {
		t.Errorf("the channel %s, whose subscription failed, has %d subscribers after the reconnection, want 0", gone, n)
	}
}

// Whether a hand-over goes by SPUBLISH depends on the ACL of the user
// whose release runs the script, while the kind of subscription is chosen
// by what the waiter's own user may do. A waiter whose user may not
// SPUBLISH subscribes with SUBSCRIBE; a holder whose user may SPUBLISH
// hands over with SPUBLISH alone, which the waiter never hears: it sleeps
// until its next check.
func TestHandOverWakesWaiterOfAUserDeniedSPUBLISH(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := srv.Client(t)
	for _, u := range [][]any{
		{"holder", "on", ">pw", "~*", "&*", "+@all"},
		{"waiter", "on", ">pw", "~*", "&*", "+@all", "-spublish"},
	} {
		if err := admin.Do(ctx, append([]any{"ACL", "SETUSER"}, u...)...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	dial := func(user string) *redis.Client {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: user, Password: "pw"})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	// The waiter re-checks only every 20 s: a prompt wake-up can only
	// come from the hand-over message.
	holder := newClientOn(t, dial("holder"), WithQueueTTL(time.Minute))
	waiter := newClientOn(t, dial("waiter"), WithQueueTTL(time.Minute))
	l := mustLock(t, holder, "mixed")
	got := lockAsync(ctx, waiter, "mixed", WithRetry(FixedRetry(time.Hour, 0)))
	waitQueuedAndSubscribed(t, admin, waiter, "mixed")
	waitSubscribed(t, waiter.be.(*node).wake, waiter.wakeChannel("mixed"))
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := receiveLock(t, got, 30*time.Second, "the waiter to get the lock")
	if d := time.Since(released); d > time.Second {
		t.Errorf("waiter woke %v after the release", d.Round(time.Millisecond))
	}
	_ = l2.Unlock(ctx)
}

// hungDial is a dialer for a Redis client whose dials to one server,
// hung, can be made to hang, as to a server that does not answer.
type hungDial struct {
	t        *testing.T
	hung     string
	admin    *redis.Client // a client of hung that does not dial through this
	blocking atomic.Bool
	dialing  chan struct{} // closed at the first dial that hangs
	release  chan struct{} // closed by unblock
	dials    atomic.Int32  // connections dialed

	dialingOnce, releaseOnce sync.Once
}

func newHungDial(t *testing.T, hung string, admin *redis.Client) *hungDial {
	return &hungDial{t: t, hung: hung, admin: admin, dialing: make(chan struct{}), release: make(chan struct{})}
}

func (hd *hungDial) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if addr == hd.hung && hd.blocking.Load() {
		hd.dialingOnce.Do(func() { close(hd.dialing) })
		select { // a server that does not answer the dial
		case <-hd.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var d net.Dialer
	cn, err := d.DialContext(ctx, network, addr)
	if err == nil {
		hd.dials.Add(1)
	}
	return cn, err
}

// block makes the dials to the hung server hang from now on.
func (hd *hungDial) block() { hd.blocking.Store(true) }

// hangRedial makes the dials hang, breaks the pub/sub connections to the
// hung server, and returns once go-redis dials one again.
func (hd *hungDial) hangRedial() {
	hd.t.Helper()
	hd.block()
	if err := hd.admin.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Err(); err != nil {
		hd.t.Fatal(err)
	}
	hd.waitDialing()
}

// waitDialing returns once a dial hangs.
func (hd *hungDial) waitDialing() {
	hd.t.Helper()
	testutil.Receive(hd.t, hd.dialing, 10*time.Second, "a dial to the hung server")
}

// unblock lets the dials through.
func (hd *hungDial) unblock() { hd.releaseOnce.Do(func() { close(hd.release) }) }

// hungDialClient returns a client of srv whose dials hd can hang.
func hungDialClient(t *testing.T, srv *redistest.Server) (*redis.Client, *hungDial) {
	t.Helper()
	hd := newHungDial(t, srv.Addr(), srv.Client(t))
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Dialer: hd.dial})
	t.Cleanup(func() { hd.unblock(); _ = rdb.Close() })
	return rdb, hd
}

// inPubSubCall reports whether a goroutine is in a call of ps, a
// go-redis PubSub, from frame (a function of this package).
func inPubSubCall(ps *redis.PubSub, frame string) bool {
	recv := []byte("go-redis/v9.(*PubSub).") // then the method, "(", ps, ", "
	self := []byte(fmt.Sprintf("(%p, ", ps))
	buf := make([]byte, 1<<20)
	for _, g := range bytes.Split(buf[:runtime.Stack(buf, true)], []byte("\n\n")) {
		i := bytes.Index(g, recv)
		if i >= 0 && bytes.Contains(g[i:], self) && bytes.Contains(g, []byte(frame)) {
			return true
		}
	}
	return false
}

// shardConn returns the connection of w's shard for channel.
func shardConn(w *wakeups, channel string) *redis.PubSub {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.channels[channel].shard.ps
}

// returnsSoon fails t unless done delivers within the bound after start;
// if it does not within 5 s, it lets the dials through and waits.
func returnsSoon[T any](t *testing.T, hd *hungDial, done <-chan T, start time.Time, bound time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-done:
		if d := time.Since(start); d > bound {
			t.Errorf("%s took %v, want at most %v", what, d.Round(time.Millisecond), bound)
		}
		return v
	case <-time.After(5 * time.Second):
		t.Errorf("%s: held back by a hung pub/sub connection for more than 5 s", what)
		hd.unblock()
		return <-done
	}
}

// go-redis waits for its PubSub's lock, whatever the context says, and
// its read goroutine holds it while it dials the connection again, for
// up to 5 tries of 5 s to a server that does not answer. A Lock whose
// context ends meanwhile must return then, not when the dial does.
func TestWakeSubscribeReturnsAtDeadlineWhileRedialing(t *testing.T) {
	srv := redistest.Start(t)
	rdb, hd := hungDialClient(t, srv)
	c := newClientOn(t, rdb)
	holder := newClientOn(t, srv.Client(t))
	lingeringChannel(t, c, "up") // the connection is up and read
	l := mustLock(t, holder, "k")
	defer l.Unlock(context.Background())

	hd.hangRedial()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	r := returnsSoon(t, hd, lockAsync(ctx, c, "k"), start, time.Second, "a Lock with a 200 ms context")
	if r.err == nil {
		_ = r.l.Unlock(context.Background())
		t.Fatal("Lock of a held lock succeeded")
	}
}

// A first subscription that fails is taken out of go-redis's set again
// with an UNSUBSCRIBE, which may have to dial the connection: a server
// that does not answer must hold back no other channel's waiter.
func TestWakeFailedSubscriptionCleanupDoesNotHoldBackOtherWaiters(t *testing.T) {
	srv := redistest.Start(t)
	rdb, hd := hungDialClient(t, srv)
	c := newClientOn(t, rdb)
	w := c.be.(*node).wake
	ctx := context.Background()
	chX, chY, chZ := c.wakeChannel("x"), c.wakeChannel("y"), c.wakeChannel("z")
	if _, err := w.hasSharded(ctx, chX); err != nil { // before the dials hang
		t.Fatal(err)
	}
	hd.block()
	subscribe := func(ctx context.Context, ch string) <-chan error {
		done := make(chan error, 1)
		go func() {
			wt, err := w.subscribe(ctx, ch, "tok", time.Now())
			if err == nil {
				wt.leave()
			}
			done <- err
		}()
		return done
	}
	// x's subscription dials the connection, y's waits for it.
	xctx, cancelX := context.WithCancel(ctx)
	doneX := subscribe(xctx, chX)
	hd.waitDialing()
	yctx, cancelY := context.WithCancel(ctx)
	defer cancelY()
	doneY := subscribe(yctx, chY)
	waitUntil(t, 5*time.Second, "y's subscription", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.channels[chY] != nil
	})
	ps := shardConn(w, chY)
	// x's dial fails; its channel is unsubscribed, on a connection that
	// y's subscription or the unsubscription itself dials.
	cancelX()
	waitUntil(t, 5*time.Second, "x's channel to be unsubscribed", func() bool {
		return inPubSubCall(ps, "(*wakeups).unsubscribeConn")
	})

	zctx, cancelZ := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelZ()
	if err := returnsSoon(t, hd, subscribe(zctx, chZ), time.Now(), 700*time.Millisecond, "a subscription with a 200 ms context"); err == nil {
		t.Error("a subscription on a connection that cannot be dialed succeeded")
	}
	cancelY()
	hd.unblock()
	<-doneX
	<-doneY
}

// endLinger has idle leave with a linger of 10 ms: its channel, which no
// other waiter has, is unsubscribed then.
func endLinger(w *wakeups, idle *waiter) {
	w.mu.Lock()
	w.linger = 10 * time.Millisecond
	w.mu.Unlock()
	idle.leave()
}

// refuseChannel treats idle's channel as one the server refused (an ACL):
// it is subscribed again after a backoff.
func refuseChannel(w *wakeups, idle *waiter) {
	w.mu.Lock()
	cs := w.channels[idle.channel]
	cs.isReady = false
	w.mu.Unlock()
	w.retryLater(cs.shard)
}

// go-redis waits for its PubSub's lock, held while it dials the
// connection again to a server that does not answer. The unsubscription
// of a channel whose linger ended, and the subscription again of one the
// server refused, wait for it: not holding the lock that every other
// waiter needs to register or leave.
func TestWakeHungConnectionDoesNotHoldBackOtherWaiters(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stuck string // the function whose PubSub call waits for the dial
		start func(w *wakeups, idle *waiter)
	}{
		{"linger end", "(*wakeups).unsubscribeConn", endLinger},
		{"resubscription", "(*wakeups).resubscribe", refuseChannel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			rdb, hd := hungDialClient(t, srv)
			c := newClientOn(t, rdb, WithQueueTTL(time.Minute))
			w := c.be.(*node).wake
			holder := newClientOn(t, srv.Client(t))
			ctx := context.Background()
			l := mustLock(t, holder, "k")
			defer l.Unlock(ctx)

			idle, err := w.subscribe(ctx, c.wakeChannel("idle"), "tok", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			defer idle.leave()
			defer hd.unblock() // first, if the test fails with the network call stuck
			// A waiter for k, subscribed.
			kctx, cancelK := context.WithCancel(ctx)
			defer cancelK()
			gotK := lockAsync(kctx, c, "k")
			waitSubscribed(t, w, c.wakeChannel("k"))

			hd.hangRedial()
			ps := shardConn(w, idle.channel)
			tc.start(w, idle)
			waitUntil(t, 5*time.Second, "the network call to wait for the dial", func() bool { return inPubSubCall(ps, tc.stuck) })

			// k's waiter gives up: Lock returns at once.
			start := time.Now()
			cancelK()
			if r := returnsSoon(t, hd, gotK, start, 500*time.Millisecond, "a Lock whose context ended"); r.err == nil {
				_ = r.l.Unlock(ctx)
				t.Error("Lock of a held lock succeeded")
			}
		})
	}
}

// A Lock whose context has a deadline returns at it while go-redis holds
// its PubSub's lock through a redial; its subscription goes out later.
// The deadline, passed by then, must not make that write fail: go-redis
// takes a failed write for a broken connection and closes the shared
// pub/sub connection of every other channel, just dialed again.
func TestWakeAbandonedSubscriptionDoesNotBreakTheConnection(t *testing.T) {
	srv := redistest.Start(t)
	rdb, hd := hungDialClient(t, srv)
	c, dials := newClientOn(t, rdb), &hd.dials
	w, up := lingeringChannel(t, c, "up")
	holder := newClientOn(t, srv.Client(t))
	l := mustLock(t, holder, "k")
	defer l.Unlock(context.Background())

	hd.hangRedial()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if r := <-lockAsync(ctx, c, "k"); r.err == nil {
		_ = r.l.Unlock(context.Background())
		t.Fatal("Lock of a held lock succeeded")
	}
	before := dials.Load()
	hd.unblock()
	chK := c.wakeChannel("k")
	waitUntil(t, 5*time.Second, "k's subscription to settle", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		cs := w.channels[chK]
		return cs == nil || (cs.pending == nil && cs.isReady)
	})
	time.Sleep(time.Second) // time for a second reconnection, which must not come
	waitSubscribed(t, w, up)
	if n := dials.Load() - before; n != 1 {
		t.Errorf("the pub/sub connection was dialed %d times after the dial was let through, want 1", n)
	}
	w.mu.Lock()
	cs := w.channels[chK]
	w.mu.Unlock()
	if cs == nil {
		t.Errorf("k's subscription, abandoned by its waiter, failed")
	}
}

// The unsubscription of a channel whose linger ended waits, as the first
// subscription does, for a redial: a deadline that passes meanwhile must
// not make its write fail and close the connection just dialed again.
func TestWakeDelayedUnsubscriptionDoesNotBreakTheConnection(t *testing.T) {
	srv := redistest.Start(t)
	rdb, hd := hungDialClient(t, srv)
	c, dials := newClientOn(t, rdb), &hd.dials
	w, up := lingeringChannel(t, c, "up")
	idle, err := w.subscribe(context.Background(), c.wakeChannel("idle"), "tok", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	hd.hangRedial()
	ps := shardConn(w, idle.channel)
	w.mu.Lock()
	w.linger = 10 * time.Millisecond
	w.mu.Unlock()
	idle.leave()
	waitUntil(t, 5*time.Second, "the unsubscription to wait for the dial", func() bool { return inPubSubCall(ps, "(*wakeups).unsubscribeConn") })
	time.Sleep(1500 * time.Millisecond) // past the 1 s deadline unsubscriptions had
	before := dials.Load()
	hd.unblock()
	waitUntil(t, 5*time.Second, "the unsubscription", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.channels[idle.channel] == nil
	})
	time.Sleep(time.Second) // time for a second reconnection, which must not come
	waitSubscribed(t, w, up)
	if n := dials.Load() - before; n != 1 {
		t.Errorf("the pub/sub connection was dialed %d times after the dial was let through, want 1", n)
	}
}

// panicDial is a go-redis hook whose dials panic while armed.
type panicDial struct {
	testutil.PassHook
	armed *atomic.Bool
}

func (h panicDial) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h.armed.Load() {
			panic("dial hook bug")
		}
		return next(ctx, network, addr)
	}
}

// A subscription is sent on a goroutine of the library's; a panic there
// (a go-redis dial hook's, as the pub/sub connection is dialled) is raised
// in the goroutine of the waiter that asked for it, where the caller can
// recover it: the waiter leaves the queue, and the next waiter subscribes
// and is handed the lock.
func TestSubscriptionPanicReachesTheWaiter(t *testing.T) {
	srv := redistest.Start(t)
	armed := new(atomic.Bool)
	c, _ := hookedClient(t, srv.Addr(), panicDial{armed: armed})
	rdb := srv.Client(t)
	other := newClientOn(t, rdb)
	ctx := context.Background()
	held := mustLock(t, other, "k")
	armed.Store(true)
	var p any
	func() {
		defer func() { p = recover() }()
		_, _ = c.Lock(ctx, "k")
	}()
	armed.Store(false)
	if p != "dial hook bug" {
		t.Fatalf("Lock's caller recovered %v, want the dial hook's panic", p)
	}
	nextWaiterServed(t, c, rdb, held)
}

// Close while go-redis's read goroutine dials the pub/sub connection again
// to a server that does not answer, holding its PubSub's lock for up to 5
// tries of 5 s: Close must end that dial, and the calls waiting for the
// lock (an unsubscription whose linger ended, a resubscription after a
// refusal) with it, not return with them, and the PubSub's Close waiting
// for them, left running.
func TestWakeCloseEndsHungRedial(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stuck string // the function whose PubSub call waits for the dial
		start func(w *wakeups, idle *waiter)
	}{
		{"read", "(*wakeups).read", func(*wakeups, *waiter) {}},
		{"linger end", "(*wakeups).unsubscribeConn", endLinger},
		{"resubscription", "(*wakeups).resubscribe", refuseChannel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			rdb, hd := hungDialClient(t, srv)
			c := newClientOn(t, rdb)
			w := c.be.(*node).wake
			idle, err := w.subscribe(context.Background(), c.wakeChannel("idle"), "tok", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			waitSubscribed(t, w, idle.channel) // the connection is up and read
			ps := shardConn(w, idle.channel)
			w.mu.Lock()
			sh := w.channels[idle.channel].shard
			w.mu.Unlock()

			hd.hangRedial()
			tc.start(w, idle)
			waitUntil(t, 5*time.Second, "the call to wait for the dial", func() bool { return inPubSubCall(ps, tc.stuck) })
			start := time.Now()
			closed := make(chan struct{})
			go func() {
				_ = c.Close()
				close(closed)
			}()
			returnsSoon(t, hd, closed, start, releaseTimeout, "Close")
			select {
			case <-sh.done:
			default:
				t.Error("Close returned with the read goroutine still held by the dial")
			}
			// Each try of the dial would last 5 s.
			waitUntil(t, 3*time.Second, "the calls on the connection to end", func() bool {
				return !inPubSubCall(ps, tc.stuck) && !inPubSubCall(ps, "(*wakeups).close")
			})
		})
	}
}

// A Lock waiting for the first subscription of its channel, whose dial
// hangs, gives up with ErrClosed when the Client closes, as a Lock
// sleeping between checks does: not when the dial ends, long after Close
// stopped waiting for it.
func TestWakeCloseEndsLockWaitingForHungSubscription(t *testing.T) {
	srv := redistest.Start(t)
	rdb, hd := hungDialClient(t, srv)
	c := newClientOn(t, rdb)
	holder := newClientOn(t, srv.Client(t))
	l := mustLock(t, holder, "k")
	defer l.Unlock(context.Background())
	w, ch := c.be.(*node).wake, c.wakeChannel("k")
	if _, err := w.hasSharded(context.Background(), ch); err != nil { // before the dials hang
		t.Fatal(err)
	}

	hd.block()
	got := lockAsync(context.Background(), c, "k")
	hd.waitDialing()
	var ps *redis.PubSub
	waitUntil(t, 5*time.Second, "the subscription to wait for the dial", func() bool {
		w.mu.Lock()
		if cs := w.channels[ch]; cs != nil {
			ps = cs.shard.ps
		}
		w.mu.Unlock()
		return ps != nil && inPubSubCall(ps, "(*wakeups).subscribeConn")
	})
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		_ = c.Close()
		close(closed)
	}()
	if r := returnsSoon(t, hd, got, start, releaseTimeout, "a Lock under way at Close"); !errors.Is(r.err, ErrClosed) {
		if r.err == nil {
			_ = r.l.Unlock(context.Background())
		}
		t.Errorf("Lock = %v, want ErrClosed", r.err)
	}
	returnsSoon(t, hd, closed, start, releaseTimeout, "Close")
	// Each try of the dial would last 5 s.
	waitUntil(t, 3*time.Second, "the dial to end", func() bool { return !inPubSubCall(ps, "(*wakeups).subscribeConn") })
}

// Close while go-redis's read goroutine waits for the handshake of the
// pub/sub connection it dialed again, to a server that accepts connections
// but answers nothing: no context ends that read, only the client's
// ReadTimeout (30 s here). Close waits for that reader closeReadersWait at
// most, not the whole of its 5 s bound, which its waits for the calls
// under way share, and the read goroutine ends once the server answers.
func TestWakeCloseBoundedByHungHandshake(t *testing.T) {
	srv := redistest.Start(t)
	hd := newHungDial(t, srv.Addr(), srv.Client(t))
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Dialer: hd.dial, ReadTimeout: 30 * time.Second})
	t.Cleanup(func() { hd.unblock(); _ = rdb.Close() })
	c := newClientOn(t, rdb)
	w, up := lingeringChannel(t, c, "up") // the connection is up and read
	ps := shardConn(w, up)
	w.mu.Lock()
	sh := w.channels[up].shard
	w.mu.Unlock()

	hd.hangRedial()
	srv.Pause(t) // accepts connections, answers nothing
	defer srv.Resume(t)
	hd.unblock()
	waitUntil(t, 5*time.Second, "the handshake of the connection dialed again", func() bool { return inPubSubCall(ps, "initConn") })
	start := time.Now()
	closeWithin(t, c, "a pub/sub connection's handshake hung")
	if d := time.Since(start); d > closeReadersWait+time.Second {
		t.Errorf("Close took %v with a pub/sub handshake hung: it waits for the reader %v at most", d, closeReadersWait)
	}
	srv.Resume(t)
	testutil.Receive(t, sh.done, 5*time.Second, "the read goroutine to end")
}

// muteListener returns the address of a listener that accepts connections
// and never answers, as a server that stalls new connections does; they
// are closed at the end of t.
func muteListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, cn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, cn := range conns {
			_ = cn.Close()
		}
	})
	return ln.Addr().String()
}

// A Lock waiting for the unsubscription of its channel (its linger just
// ended), which waits for go-redis's PubSub lock, held by a handshake that
// no context ends (a new connection the server does not answer), gives up
// with ErrClosed when the Client closes, not when the handshake ends.
func TestWakeCloseEndsLockWaitingForHungUnsubscription(t *testing.T) {
	srv := redistest.Start(t)
	mute := muteListener(t)
	var stall atomic.Bool // new connections go to mute
	rdb := redis.NewClient(&redis.Options{
		Addr: srv.Addr(), ReadTimeout: 30 * time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if stall.Load() {
				addr = mute
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClientOn(t, rdb, WithQueueTTL(time.Minute))
	admin := srv.Client(t)
	holder := newClientOn(t, admin)
	ctx := context.Background()
	l := mustLock(t, holder, "k")
	defer l.Unlock(ctx)
	w, ch := c.be.(*node).wake, c.wakeChannel("k")
	idle, err := w.subscribe(ctx, ch, "idle", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	waitSubscribed(t, w, ch)
	ps := shardConn(w, ch)

	stall.Store(true)
	if err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the handshake of the connection dialed again", func() bool { return inPubSubCall(ps, "initConn") })
	w.mu.Lock()
	w.linger = 10 * time.Millisecond
	w.mu.Unlock()
	idle.leave()
	waitUntil(t, 5*time.Second, "the unsubscription to wait for the handshake", func() bool { return inPubSubCall(ps, "(*wakeups).unsubscribeConn") })
	got := lockAsync(ctx, c, "k") // its check goes on a pooled connection
	waitUntil(t, 5*time.Second, "the Lock to wait for the unsubscription", func() bool { return parkedIn("dlock.(*wakeups).subscribe(") })

	start := time.Now()
	closed := make(chan struct{})
	go func() {
		_ = c.Close()
		close(closed)
	}()
	select {
	case r := <-got:
		if !errors.Is(r.err, ErrClosed) {
			t.Errorf("Lock = %v, want ErrClosed", r.err)
		}
		if d := time.Since(start); d > releaseTimeout {
			t.Errorf("Lock returned %v after Close began, want at most %v", d.Round(time.Millisecond), releaseTimeout)
		}
	case <-time.After(5 * time.Second):
		t.Error("a Lock under way at Close: held back by a hung handshake for more than 5 s")
	}
	testutil.Receive(t, closed, 6*time.Second, "Close")
}

// A pub/sub connection whose path goes dead with no reset (a partition
// that drops packets) tells its reader nothing: every hand-over sent to it
// is lost, and each waiter is served only at its next check. Pinged once
// idle and dropped when nothing answers, it is dialed again: the waiter
// whose hand-over was lost is told to check again, and later hand-overs
// wake their waiters again.
func TestWakeDeadPubSubPathIsDropped(t *testing.T) {
	srv := redistest.Start(t)
	proxy := startProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	// The waiters check again every 20 s: only a wake-up serves them sooner.
	c := newClientOn(t, rdb, WithQueueTTL(time.Minute))
	w, ch := c.be.(*node).wake, c.wakeChannel("k")
	health := backend.PubSubHealth{Idle: 200 * time.Millisecond, Wait: 200 * time.Millisecond}
	w.mu.Lock()
	w.health = health
	w.mu.Unlock()
	admin := srv.Client(t)
	holder := newClientOn(t, admin)
	ctx := context.Background()

	l := mustLock(t, holder, "k")
	got := lockAsync(ctx, c, "k")
	waitQueuedAndSubscribed(t, admin, c, "k")
	dropped := proxy.DropOn(func(b []byte) bool {
		return bytes.Contains(b, []byte("message\r\n")) && bytes.Contains(b, []byte(ch))
	})
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testutil.Receive(t, dropped, 5*time.Second, "the hand-over on the pub/sub connection")
	r := testutil.Receive(t, got, 5*time.Second, "the waiter whose hand-over was lost")
	if r.err != nil {
		t.Fatal(r.err)
	}
	// The reader's last read began at most health.Idle before the release.
	if d, bound := time.Since(start), health.Idle+health.Wait+time.Second; d > bound {
		t.Errorf("the waiter whose hand-over was lost was served after %v, want at most %v", d.Round(time.Millisecond), bound)
	}

	// The next hand-over comes on the connection dialed again. The dead
	// one's subscription stays on the server, which hears nothing either.
	if err := r.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l = mustLock(t, holder, "k")
	got = lockAsync(ctx, c, "k")
	waitUntil(t, 5*time.Second, "the waiter to queue and register", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		cs := w.channels[ch]
		return queued(t, admin, c, "k") == 1 && cs != nil && cs.isReady && len(cs.waiters) == 1
	})
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r = testutil.Receive(t, got, 2*time.Second, "the next waiter, woken by its hand-over")
	if r.err != nil {
		t.Fatal(r.err)
	}
	_ = r.l.Unlock(ctx)
}
