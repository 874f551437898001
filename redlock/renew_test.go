package redlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// lateRenewals makes the watchdog's renewal pipelines fail before they
// are sent, while armed, and keeps their commands to be sent later: a
// renewal its client gave up on that reaches the node afterwards.
type lateRenewals struct {
	armed atomic.Bool
	mu    sync.Mutex
	held  [][]any
	seen  chan struct{}
}

func (h *lateRenewals) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *lateRenewals) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *lateRenewals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.armed.Load() || cmds[0].Name() != "evalsha" {
			return next(ctx, cmds) // not a renewal: a connection's set-up
		}
		h.mu.Lock()
		for _, c := range cmds {
			h.held = append(h.held, c.Args())
		}
		h.mu.Unlock()
		select {
		case h.seen <- struct{}{}:
		default:
		}
		err := errors.New("i/o timeout")
		for _, c := range cmds {
			c.SetErr(err)
		}
		return err
	}
}

// A renewal that reaches the nodes after an Extend to a longer lease must
// not cut that lease short: renewals only ever lengthen a lease.
func TestLateRenewalDoesNotShortenExtend(t *testing.T) {
	cl := startCluster(t, 3)
	seen := make(chan struct{}, 1)
	hooks := make([]*lateRenewals, len(cl.rdbs))
	for i, rdb := range cl.rdbs {
		hooks[i] = &lateRenewals{seen: seen}
		rdb.AddHook(hooks[i])
	}
	c := cl.patientLocker(t)
	ctx := context.Background()
	const ttl = 900 * time.Millisecond // renewed every 300ms
	l := lockEveryNode(t, cl, c, "late-renewal", dlock.WithTTL(ttl))
	defer l.Unlock(ctx)
	// The nodes have the extend script cached, as after any renewal.
	if err := l.Extend(ctx, ttl); err != nil {
		t.Fatal(err)
	}
	for _, h := range hooks {
		h.armed.Store(true)
	}
	select {
	case <-seen:
	case <-time.After(5 * time.Second):
		t.Fatal("no renewal within 5s")
	}
	for _, h := range hooks {
		h.armed.Store(false)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	for i, rdb := range cl.rdbs {
		h := hooks[i]
		h.mu.Lock()
		late := h.held
		h.mu.Unlock()
		for _, args := range late {
			if err := rdb.Do(ctx, args...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if pttl := rdb.PTTL(ctx, lockKey("late-renewal")).Val(); pttl < 30*time.Second {
			t.Errorf("node %d: after a late renewal the lease is %v, the holder trusts about a minute", i, pttl)
		}
	}
}
