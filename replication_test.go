package dlock

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

// A write counts as acknowledged only once as many replicas as asked have
// it: one replica of two asked for falls short, however healthy it is.
func TestReplicaAckCountsEveryReplicaAskedFor(t *testing.T) {
	ctx := context.Background()
	master, _ := redistest.StartReplicated(t)
	var reports reportLog
	// WAIT waits all of the timeout for the second replica; the one there
	// acknowledges within milliseconds, well within it on a loaded machine.
	c := newClientOn(t, master.Client(t), WithReplicaAck(2, 2*time.Second, FailClosed), WithReplicaReport(reports.add))
	if _, err := c.TryLock(ctx, "two"); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("TryLock acknowledged by 1 replica of 2 = %v, want ErrNotReplicated", err)
	}
	reports.mu.Lock()
	defer reports.mu.Unlock()
	if len(reports.rs) == 0 || reports.rs[0].Op != "acquire" || reports.rs[0].Acked != 1 || reports.rs[0].Wanted != 2 {
		t.Fatalf("reports = %+v, want an acquire acknowledged by 1 of 2", reports.rs)
	}
}

// failWait is a go-redis hook that fails the reply of every WAIT as a
// connection reset would, after the server ran it.
type failWait struct{ testutil.PassHook }

func (failWait) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if cmd.Name() == "wait" {
				cmd.SetErr(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET})
			}
		}
		return err
	}
}

// A fail-closed acquisition whose WAIT got no answer was refused for its
// replicas, by a Redis that answered the write: it is not an unreachable
// Redis, which WithDegradedMode would answer with a lock of this process.
func TestReplicaAckFailedWaitIsNotAnUnreachableRedis(t *testing.T) {
	ctx := context.Background()
	master, _ := redistest.StartReplicated(t)
	rdb := master.Client(t)
	// The replica acknowledges; the answer is lost on the way back.
	rdb.AddHook(failWait{})
	var reports reportLog
	c := newClientOn(t, rdb, WithReplicaAck(1, time.Second, FailClosed), WithReplicaReport(reports.add), WithDegradedMode(LocalFallback))
	l, err := c.TryLock(ctx, "wait-failed")
	if !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("TryLock whose WAIT failed = %v (degraded: %v), want ErrNotReplicated", err, l.Degraded())
	}
	var op *net.OpError
	if errors.As(err, &op) {
		t.Errorf("TryLock = %v wraps the WAIT's network error", err)
	}
	reports.mu.Lock()
	defer reports.mu.Unlock()
	if len(reports.rs) == 0 || reports.rs[0].Op != "acquire" || reports.rs[0].Err == nil {
		t.Fatalf("reports = %+v, want an acquire with the WAIT's error", reports.rs)
	}
}

// A renewal that finds the lock gone wrote nothing for the replicas to
// miss: with FailClosed it is a loss, not a shortfall retried until the
// lease runs out, and it is not reported.
func TestReplicaAckRenewalOfALostLockIsNotReported(t *testing.T) {
	ctx := context.Background()
	master, replica := redistest.StartReplicated(t)
	rdb := master.Client(t)
	var reports reportLog
	c := newClientOn(t, rdb, WithReplicaAck(1, 100*time.Millisecond, FailClosed), WithReplicaReport(reports.add))
	l := lockAcked(t, c, "gone", WithTTL(3*time.Second))
	if err := rdb.Del(ctx, c.keys("gone").lock).Err(); err != nil {
		t.Fatal(err)
	}
	// Without a replica every WAIT falls short, even one after a call that
	// wrote nothing (WAIT counts the connection's last write).
	replica.Stop(t)
	testutil.Receive(t, l.Done(), 10*time.Second, "the lock's loss")
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", cause)
	}
	if ops := reports.ops(l.Token()); len(ops) != 0 {
		t.Fatalf("reported %v for a lock whose renewal found it gone", ops)
	}
}

// The release of a re-entry, which leaves the lock held, is not reported:
// the outer release sets the count whatever a failover lost, and only
// that one is.
func TestReplicaAckInnerReleaseIsNotReported(t *testing.T) {
	ctx := context.Background()
	// No replica: every WAIT falls short, after its timeout.
	srv := redistest.Start(t)
	var reports reportLog
	c := newClientOn(t, srv.Client(t), WithReplicaAck(1, 50*time.Millisecond, AcceptAndReport), WithReplicaReport(reports.add))
	l := mustLock(t, c, "reentered", WithoutRenewal())
	inner, err := c.Lock(l.Context(), "reentered", WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ops := strings.Join(reports.ops(l.Token()), ","); ops != "acquire,release" {
		t.Fatalf("reported %q, want acquire,release: the outer release only", ops)
	}
}
