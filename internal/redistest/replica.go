package redistest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartReplicated starts a master and one replica of it, and returns once
// the master's writes are acknowledged by the replica (WAIT answers 1).
func StartReplicated(t testing.TB, opts ...Option) (master, replica *Server) {
	t.Helper()
	master = Start(t, opts...)
	replica = Start(t, append(slices.Clip(opts), WithConfig("replicaof", "127.0.0.1", strconv.Itoa(master.Port())))...)
	WaitReplicaAcks(t, master.Client(t))
	return master, replica
}

// WaitReplicaAcks waits until a write on rdb's master is acknowledged by a
// replica: after its first sync a replica is streamed writes only once it
// has sent its first acknowledgement, up to a second later.
func WaitReplicaAcks(t testing.TB, rdb *redis.Client) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, 10*time.Second, "a replica to acknowledge writes", func() (bool, string) {
		pipe := rdb.Pipeline()
		pipe.Incr(ctx, "replica-ack-probe")
		wait := pipe.Do(ctx, "WAIT", 1, 50)
		_, err := pipe.Exec(ctx)
		return wait.Val() == int64(1), fmt.Sprintf("WAIT = %v, %v", wait.Val(), err)
	})
}
