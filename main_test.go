package dlock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
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
	go func() {
		ctx := context.Background()
		w, err := c.Lock(ctx, key)
		if err != nil {
			t.Error(err)
			order <- -1
			return
		}
		order <- turn
		_ = w.Unlock(ctx)
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
