package backend

import "github.com/redis/go-redis/v9"

// RingRefused says why New and redlock.New refuse a go-redis Ring: it
// shards keys in the client, with no failover and no pub/sub a waiter
// could be woken on without a channel to pick the shard by.
const RingRefused = "a go-redis Ring is not supported (client-side sharding, no failover): use a Client, a FailoverClient or a ClusterClient"

// IsRing reports whether client is a go-redis Ring.
func IsRing(client any) bool {
	_, ok := client.(*redis.Ring)
	return ok
}
