package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
	"github.com/dlock-go/dlock/redlock"
)

// The test binary doubles as a worker process for the tests that need
// several OS processes contending for one lock.
const roleEnv = "REDLOCK_TEST_ROLE"

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role))
	}
	testutil.QuietRedisLog()
	// The Example functions read REDLOCK_ADDRS: three masters.
	var addrs []string
	var mains []*redistest.Main
	for range 3 {
		srv := redistest.StartMain()
		mains = append(mains, srv)
		addrs = append(addrs, srv.Addr())
	}
	os.Setenv("REDLOCK_ADDRS", strings.Join(addrs, ","))
	code := m.Run()
	for _, srv := range mains {
		srv.Close()
	}
	testutil.Exit(code)
}

// runRole is a worker process: it increments a counter on the resource
// server under the Redlock lock, flagging overlapping critical sections
// and recording each holder's fence in order.
func runRole(role string) int {
	var nodes []redis.UniversalClient
	for _, a := range strings.Split(os.Getenv("REDLOCK_TEST_NODES"), ",") {
		rdb := nodeClient(a)
		defer rdb.Close()
		nodes = append(nodes, rdb)
	}
	res := redis.NewClient(&redis.Options{Addr: os.Getenv("REDLOCK_TEST_RESOURCE")})
	defer res.Close()
	c, err := redlock.New(nodes)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer c.Close()
	if role != "counter" {
		return 2
	}
	ctx := context.Background()
	n, _ := strconv.Atoi(os.Getenv("REDLOCK_TEST_N"))
	for range n {
		if err := incrementUnderLock(ctx, c, res); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// incrementUnderLock does a non-atomic read-modify-write of a counter
// under the lock, flags any overlap of critical sections, and appends the
// holder's fence to a list: exact count, no overlaps and increasing fences
// prove mutual exclusion and fencing order.
func incrementUnderLock(ctx context.Context, c *dlock.Client, res *redis.Client) error {
	l, err := c.Lock(ctx, "counter", dlock.WithTTL(2*time.Second))
	if err != nil {
		return err
	}
	work := func(ctx context.Context) error {
		if ok, err := res.SetNX(ctx, "inside", "1", 0).Result(); err != nil {
			return err
		} else if !ok {
			res.RPush(ctx, "overlaps", "1")
		}
		v, err := res.Get(ctx, "count").Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if err := res.Set(ctx, "count", v+1, 0).Err(); err != nil {
			return err
		}
		if err := res.RPush(ctx, "fences", l.Fence()).Err(); err != nil {
			return err
		}
		return res.Del(ctx, "inside").Err()
	}
	werr := work(l.Context())
	if err := l.Unlock(ctx); err != nil && werr == nil {
		werr = err
	}
	return werr
}

// nodeClient is how the tests (and the docs) configure a Redlock node:
// ContextTimeoutEnabled, so that a request to a hung node ends at the
// per-node deadline, and no retries (Redlock retries whole attempts), so
// that a dead node fails at once with its connection error.
func nodeClient(addr string) *redis.Client { return redis.NewClient(nodeOptions(addr)) }

// nodeOptions are nodeClient's options, for a test to add its own.
func nodeOptions(addr string) *redis.Options {
	return &redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1}
}

// cluster is N independent redis-server processes and a client for each.
type cluster struct {
	srvs  []*redistest.Server
	nodes []redis.UniversalClient
	rdbs  []*redis.Client // the same clients, typed, for inspection
}

func startCluster(t *testing.T, n int, opts ...func(i int) []redistest.Option) *cluster {
	t.Helper()
	c := &cluster{}
	for i := range n {
		var o []redistest.Option
		for _, f := range opts {
			o = append(o, f(i)...)
		}
		srv := redistest.Start(t, o...)
		rdb := nodeClient(srv.Addr())
		t.Cleanup(func() { rdb.Close() })
		c.srvs = append(c.srvs, srv)
		c.nodes = append(c.nodes, rdb)
		c.rdbs = append(c.rdbs, rdb)
	}
	return c
}

// cacheScripts loads every Redlock script on every node, for tests whose
// hooks hold back an EVALSHA and read its outcome: a warm-up lock does not
// do it, since its Unlock returns once a majority has released it, and a
// slower node's warm-up may not have loaded the script yet (NOSCRIPT).
func (c *cluster) cacheScripts(t *testing.T) {
	t.Helper()
	files, err := filepath.Glob("lua/*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("the Redlock scripts: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, rdb := range c.rdbs {
			if err := rdb.ScriptLoad(context.Background(), string(src)).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func (c *cluster) addrs() string {
	var a []string
	for _, s := range c.srvs {
		a = append(a, s.Addr())
	}
	return strings.Join(a, ",")
}

// locker returns a Redlock Client on the cluster, closed at cleanup.
func (c *cluster) locker(t *testing.T, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	l, err := redlock.New(c.nodes, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// waiterNodes returns a client per node whose connections are named
// waiterConn, closed at cleanup: a Client on them is told apart from the
// cluster's others by waiterSubscribed.
func (c *cluster) waiterNodes(t *testing.T) []redis.UniversalClient {
	t.Helper()
	var nodes []redis.UniversalClient
	for _, srv := range c.srvs {
		o := nodeOptions(srv.Addr())
		o.ClientName = waiterConn
		rdb := redis.NewClient(o)
		t.Cleanup(func() { rdb.Close() })
		nodes = append(nodes, rdb)
	}
	return nodes
}

// patientLocker is locker with a per-node timeout of a second, for tests
// that count how the nodes voted: with the default (lease/10, 50 ms at
// most) a loaded machine can make a healthy node miss it.
func (c *cluster) patientLocker(t *testing.T, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	l, err := redlock.NewWithConfig(redlock.Config{Nodes: c.nodes, NodeTimeout: time.Second}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// holders returns the nodes on which token holds key.
func (c *cluster) holders(t *testing.T, key, token string) []int {
	t.Helper()
	var on []int
	for i, srv := range c.srvs {
		if !srv.Running() {
			continue
		}
		// A fresh client: the shared ones may still be backing off from a
		// node that was down.
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		held, err := rdb.HExists(context.Background(), lockKey(key), token).Result()
		rdb.Close()
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		if held {
			on = append(on, i)
		}
	}
	return on
}

// lockerNodes creates the user "locker" on every node, allowed every
// command on the lock keys and the pub/sub channels channels(i) says
// ("allchannels", "resetchannels" for none), and returns a client per node
// logged in as that user, closed at cleanup. Their connections are named
// waiterConn.
func (c *cluster) lockerNodes(t *testing.T, channels func(i int) string) []redis.UniversalClient {
	t.Helper()
	var nodes []redis.UniversalClient
	for i, srv := range c.srvs {
		if err := srv.Client(t).Do(context.Background(), "ACL", "SETUSER", "locker", "on", ">pw", "~dlock:*", channels(i), "+@all").Err(); err != nil {
			t.Fatal(err)
		}
		o := nodeOptions(srv.Addr())
		o.Username, o.Password, o.ClientName = "locker", "pw", waiterConn
		rdb := redis.NewClient(o)
		t.Cleanup(func() { rdb.Close() })
		nodes = append(nodes, rdb)
	}
	return nodes
}

func lockKey(key string) string { return "dlock:{" + key + "}" }

// lockEveryNode locks key and waits until every node has the lock, for a
// test that then takes nodes away. Lock returns once a majority granted
// it and the other nodes' grants follow; but on a loaded machine a request
// can miss the per-node timeout (50 ms at most) and never be sent, or come
// after another client's request for the lock: then it locks again.
func lockEveryNode(t *testing.T, cl *cluster, c *dlock.Client, key string, opts ...dlock.LockOption) *dlock.Lock {
	t.Helper()
	for range 10 {
		l := mustLock(t, c, key, opts...)
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			if len(cl.holders(t, key, l.Token())) == len(cl.srvs) {
				return l
			}
		}
		_ = l.Unlock(context.Background())
	}
	t.Fatalf("%q: not on every node in 10 tries", key)
	return nil
}

func mustLock(t *testing.T, c *dlock.Client, key string, opts ...dlock.LockOption) *dlock.Lock {
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

// fencedResource is a store that, like a database checking a version
// column, rejects writes carrying a smaller fence than one it accepted.
type fencedResource struct {
	highest uint64
	log     []string
}

func (r *fencedResource) write(fence uint64, who string) error {
	if fence < r.highest {
		return fmt.Errorf("write by %s rejected: fence %d < %d", who, fence, r.highest)
	}
	r.highest = fence
	r.log = append(r.log, who)
	return nil
}
