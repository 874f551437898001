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
// has sent its first acknowledgement, up to a second later. Only a write
// made while a replica is attached counts: one made before is not in the
// replication stream, and WAIT counts for it any replica online, streamed
// or not.
func WaitReplicaAcks(t testing.TB, rdb *redis.Client) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, 10*time.Second, "a replica to acknowledge writes", func() (bool, string) {
		pipe := rdb.Pipeline()
		repl := pipe.Info(ctx, "replication")
		pipe.Incr(ctx, "replica-ack-probe")
		wait := pipe.Do(ctx, "WAIT", 1, 50)
		_, err := pipe.Exec(ctx)
		attached := infoField(repl.Val(), "connected_slaves")
		return attached != "" && attached != "0" && wait.Val() == int64(1),
			fmt.Sprintf("connected_slaves:%s before the write, WAIT = %v, %v", attached, wait.Val(), err)
	})
}

// Switchover swaps the roles of master and its replica, as a failover
// that keeps the old master running: the replica is promoted, then the old
// master is made its replica. It returns once the old master is in sync,
// serving the promoted one's data read-only; clients still connected to it
// get READONLY for their writes.
func Switchover(t testing.TB, master, replica *Server) {
	t.Helper()
	ctx := context.Background()
	rc, mc := replica.Client(t), master.Client(t)
	if err := rc.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatalf("redistest: promoting %s: %v", replica.Addr(), err)
	}
	if err := mc.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(replica.Port())).Err(); err != nil {
		t.Fatalf("redistest: demoting %s: %v", master.Addr(), err)
	}
	waitFor(t, 10*time.Second, master.Addr()+" to sync with "+replica.Addr(), func() (bool, string) {
		info, err := rawInfo(master.Addr(), "replication")
		if err != nil {
			return false, err.Error()
		}
		st := infoField(info, "master_link_status")
		return st == "up", "master_link_status=" + st
	})
}
