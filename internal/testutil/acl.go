package testutil

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// The ACL rules of README's "Redis ACL", for the default prefix "dlock:".
// The scripts' own commands are checked too, each one on its keys.
const (
	// ACLRule: locks, semaphores and RWMutexes, waiting and hand-over,
	// renewal, Extend, TTL, Unlock. PUBLISH: a hand-over message that no
	// one heard by SPUBLISH (its waiter not subscribed yet) is sent so too.
	ACLRule = "resetkeys ~dlock:* resetchannels &dlock:* -@all " +
		"+evalsha +eval +time +get +set +del +hget +hset +hdel +hexists +hgetall +hmget +hvals " +
		"+zadd +zrange +zrem +zpopmin +pexpire +pttl +spublish +publish +ssubscribe +sunsubscribe +ping"
	// ACLReplicaAckRule: WithReplicaAck.
	ACLReplicaAckRule = "+wait +command|info"
	// ACLTxnRule: Txn, besides the commands fn queues and their keys.
	ACLTxnRule = "+watch +multi +exec"
	// ACLAdminRule: Inspect, List, ForceRelease and the permits' own.
	ACLAdminRule = "+exists +type +scan"
	// ACLRedlockRule: every Redlock call on one node, waiting included
	// (on classic pub/sub channels).
	ACLRedlockRule = "resetkeys ~dlock:* resetchannels &dlock:* -@all " +
		"+evalsha +eval +time +get +set +del +exists +hget +hset +hexists +hkeys +pexpire +pttl " +
		"+publish +subscribe +unsubscribe +ping"
	// ACLClusterRule: a ClusterClient reads the slot map and the command
	// table, and follows ASK redirections with ASKING.
	ACLClusterRule = "+cluster|slots +command +asking"
	// ACLCommandLineRule: dlock run and inspect read INFO memory, to warn
	// of a server that may evict locks.
	ACLCommandLineRule = "+info"
)

// SetACLUser makes name, password "pw", a user of rdb's server with rules
// and nothing else (each argument one rule or several, space separated).
func SetACLUser(t testing.TB, rdb redis.UniversalClient, name string, rules ...string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">pw"}
	for _, f := range strings.Fields(strings.Join(rules, " ")) {
		args = append(args, f)
	}
	if err := rdb.Do(context.Background(), args...).Err(); err != nil {
		t.Fatal(err)
	}
}
