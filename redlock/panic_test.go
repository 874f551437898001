package redlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/testutil"
	"github.com/dlock-go/dlock/redlock"
)

// panicAcquire panics at the acquire script of key while armed (a go-redis
// hook's bug).
type panicAcquire struct {
	testutil.PassHook
	key   string
	armed *atomic.Bool
}

func (h panicAcquire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.armed.Load() && isAcquire(cmd, h.key) {
			panic("hook bug")
		}
		return next(ctx, cmd)
	}
}

// Each node's request runs on a goroutine of the library's. One that
// panics there (a go-redis hook's bug) must not end the process: the node
// counts as failed, as one that does not answer, and the vote goes on
// without it. With the other nodes a majority, the lock is taken; without,
// the call fails with ErrNoQuorum, names the panic, and leaves no hold on
// the nodes that granted it. The Client works on afterwards.
func TestNodeRequestPanicIsANodeFailure(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.patientLocker(t)
	ctx := context.Background()
	armed := make([]*atomic.Bool, 3)
	for i, rdb := range cl.rdbs {
		armed[i] = new(atomic.Bool)
		rdb.AddHook(panicAcquire{key: "job", armed: armed[i]})
	}
	mustLock(t, c, "warm").Unlock(ctx)

	armed[2].Store(true)
	l, err := c.TryLock(ctx, "job")
	if err != nil {
		t.Fatalf("TryLock with one node of three panicking = %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	armed[1].Store(true)
	_, err = c.TryLock(ctx, "job")
	if !errors.Is(err, redlock.ErrNoQuorum) || !strings.Contains(err.Error(), "hook bug") {
		t.Fatalf("TryLock with two nodes of three panicking = %v, want ErrNoQuorum naming the panic", err)
	}
	testutil.WaitUntil(t, 5*time.Second, "the granting node's hold to be released", func() bool {
		return cl.rdbs[0].Exists(ctx, lockKey("job")).Val() == 0
	})

	armed[1].Store(false)
	armed[2].Store(false)
	l = mustLock(t, c, "job")
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
