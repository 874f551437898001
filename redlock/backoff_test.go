package redlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/testutil"
	"github.com/dlock-go/dlock/redlock"
)

// attemptTimes records when each acquire script (sha) was sent to a node.
type attemptTimes struct {
	testutil.PassHook
	sha string

	mu sync.Mutex
	at []time.Time
}

func (h *attemptTimes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && a[0] == "evalsha" && a[1] == h.sha {
			h.mu.Lock()
			h.at = append(h.at, time.Now())
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h *attemptTimes) times() []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Time(nil), h.at...)
}

// Attempts that cannot reach a majority are retried after a random delay
// up to RetryDelay, the bound doubling with each attempt in a row up to 16
// x RetryDelay: contenders that collided do not collide again in step,
// and a majority down is not hammered.
func TestRetryDelayIsRandomAndGrows(t *testing.T) {
	const retry = 10 * time.Millisecond
	cl := startCluster(t, 3)
	cl.cacheScripts(t)
	h := &attemptTimes{sha: scriptSHA(t, "acquire")}
	cl.rdbs[0].AddHook(h)
	c, err := redlock.NewWithConfig(redlock.Config{Nodes: cl.nodes, NodeTimeout: time.Second, RetryDelay: retry})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl.srvs[1].Stop(t)
	cl.srvs[2].Stop(t)
	// Lock gives up with ErrNoQuorum after 2 s of attempts without one.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Lock(ctx, "down"); !errors.Is(err, redlock.ErrNoQuorum) {
		t.Fatalf("Lock = %v, want ErrNoQuorum", err)
	}
	at := h.times()
	// Random: a delay drawn up to its bound comes well before it now and
	// then; a fixed delay never does. The bounds of the first ten: 10, 20,
	// 40, 80 ms, then 160 ms.
	early := false
	for i := 1; i < len(at) && i <= 10; i++ {
		bound := retry << min(i-1, 4)
		if at[i].Sub(at[i-1]) < bound*9/10 {
			early = true
		}
	}
	if !early {
		t.Errorf("each of the first %d retries came at least 90%% of its bound after the attempt before: the delay is not random", min(len(at)-1, 10))
	}
	// Growing: about 30 attempts in those 2 s (the delays average 80 ms
	// from the sixth on), not hundreds of 5 ms apart.
	if n := len(at); n > 60 {
		t.Errorf("%d attempts in %v: the retry delay did not grow", n, at[len(at)-1].Sub(at[0]).Round(time.Millisecond))
	}
}
