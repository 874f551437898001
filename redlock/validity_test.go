package redlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/testutil"
	"github.com/dlock-go/dlock/redlock"
)

// slowGrants hands the replies of the acquire script (sha) back at one
// instant, delay after the first request reached any node: the nodes
// grant at once, and the replies are slow on their way back. first is
// set before that request is sent, so after the attempt's start.
type slowGrants struct {
	testutil.PassHook
	sha   string
	delay time.Duration

	mu    sync.Mutex
	first time.Time
}

func (h *slowGrants) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) < 2 || a[0] != "evalsha" || a[1] != h.sha {
			return next(ctx, cmd)
		}
		h.mu.Lock()
		if h.first.IsZero() {
			h.first = time.Now()
		}
		at := h.first.Add(h.delay)
		h.mu.Unlock()
		err := next(ctx, cmd)
		t := time.NewTimer(time.Until(at))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		return err
	}
}

func (h *slowGrants) firstSent() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.first
}

// slowGrantCluster starts three nodes whose acquire replies come back
// delay after the first request was sent, and a locker waiting for them
// up to 5 s per node (so that the delay, not the per-node timeout, decides).
func slowGrantCluster(t *testing.T, delay time.Duration) (*cluster, *slowGrants, *dlock.Client) {
	t.Helper()
	cl := startCluster(t, 3)
	cl.cacheScripts(t)
	h := &slowGrants{sha: scriptSHA(t, "acquire"), delay: delay}
	for _, rdb := range cl.rdbs {
		rdb.AddHook(h)
	}
	c, err := redlock.NewWithConfig(redlock.Config{Nodes: cl.nodes, NodeTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return cl, h, c
}

// The validity of a grant is lease - elapsed - drift, elapsed counted from
// before the first request: a majority that granted after lease - drift,
// though the nodes still hold it, came too late, and the attempt fails
// (and releases the nodes) rather than hand out a lock already expired.
func TestMajorityGrantingPastTheValidityIsTooLate(t *testing.T) {
	const lease = 3 * time.Second
	// Past lease - drift (by 8 ms of the drift's 32), before lease.
	cl, h, c := slowGrantCluster(t, lease-backend.Drift(lease)+8*time.Millisecond)
	ctx := context.Background()
	l, err := c.TryLock(ctx, "slow", dlock.WithTTL(lease), dlock.WithoutRenewal())
	if err == nil {
		t.Fatalf("TryLock granted %v after the first request, validity %v from it: want the majority too late",
			time.Since(h.firstSent()), time.Until(backend.TrustedUntil(l)))
	}
	if !errors.Is(err, dlock.ErrNotObtained) || !strings.Contains(err.Error(), "too late") {
		t.Errorf("TryLock = %v, want ErrNotObtained: the majority came too late", err)
	}
	for i, rdb := range cl.rdbs {
		if n := rdb.Exists(ctx, lockKey("slow")).Val(); n != 0 {
			t.Errorf("node %d still holds the failed attempt's lock", i)
		}
	}
}

// The holder trusts a grant from before the first request was sent, not
// from when the majority's replies came back: a node expires the lock a
// lease after it granted it, however slow its reply.
func TestGrantTrustedFromBeforeTheRequests(t *testing.T) {
	const lease, delay = 2 * time.Second, 300 * time.Millisecond
	_, h, c := slowGrantCluster(t, delay)
	l, err := c.TryLock(context.Background(), "slow", dlock.WithTTL(lease), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	// Every node granted after first, and expires the lock a lease later.
	latest := h.firstSent().Add(lease - backend.Drift(lease))
	if until := backend.TrustedUntil(l); until.After(latest) {
		t.Errorf("trusted until %v after the first request, want at most %v", until.Sub(h.firstSent()), lease-backend.Drift(lease))
	}
}
