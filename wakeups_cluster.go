package dlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sharded subscriptions on Redis Cluster follow their slot.
//
// A sharded subscription (SSUBSCRIBE) lives on the master that owns the
// channel's slot, or on one of its replicas for a client that routes reads
// to replicas (the master passes its messages on). When the slot moves to
// another master (resharding, a failover), Redis 7 ends it with a
// "sunsubscribe" message and go-redis does not subscribe again; a
// subscription sent with a stale slot map is refused with MOVED. In both
// cases rebind opens a new connection, chosen from a reloaded slot map,
// and subscribes there. Meanwhile the waiters
// were nudged to check the lock again, and they are nudged once more when
// the new subscription is confirmed (markReady), so no hand-over is missed.
//
// A cluster shard carries one channel: go-redis resubscribes all channels
// of a connection with one SSUBSCRIBE after a reconnection, which Redis
// refuses (CROSSSLOT) unless they share a slot, and distinct locks almost
// never do, so grouping channels per node or per slot would save nothing
// and break reconnection.

// conn returns the shard's current pub/sub connection.
func (w *wakeups) conn(sh *shard) *redis.PubSub {
	w.mu.Lock()
	defer w.mu.Unlock()
	return sh.ps
}

// droppedByServer reports whether a "sunsubscribe" for channel on sh was
// sent by the server (the slot moved) rather than asked for by us: the
// channel is still in use through sh, and sh is a cluster shard.
func (w *wakeups) droppedByServer(sh *shard, channel string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	cs := w.channels[channel]
	return sh.name != "" && cs != nil && cs.shard == sh
}

// rebind subscribes a cluster shard's channels again on a new connection to
// the master that owns their slot now (or one of its replicas).
func (w *wakeups) rebind(sh *shard) {
	cc, ok := w.rdb.(*redis.ClusterClient)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(sh.ctx, time.Second)
	defer cancel()
	// Before the lock: no other channel waits for the reload. Waited for,
	// so that the new subscription goes to the new master at once.
	_ = reloadSlotMap(ctx, cc)
	w.mu.Lock()
	if w.closed || w.shards[sh.name] != sh {
		w.mu.Unlock()
		return
	}
	var channels []string
	for channel, cs := range w.channels {
		if cs.shard == sh {
			channels = append(channels, channel)
		}
	}
	sharded := w.sharded != nil && *w.sharded
	w.mu.Unlock()
	// Subscribing dials the new master, which may not answer: not under
	// mu, or every other channel's hand-overs would wait. The read
	// goroutine, which calls this, is the only one to replace sh.ps; its
	// channel can only leave by dropping sh, checked after.
	ps := cc.Subscribe(ctx)
	for _, channel := range channels {
		if err := subscribeOn(ctx, ps, channel, sharded); err != nil {
			// The next Receive fails too and brings us back here.
			break
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.shards[sh.name] != sh {
		go ps.Close() // as dropShardIfEmpty
		return
	}
	old := sh.ps
	sh.ps = ps
	go old.Close() // as dropShardIfEmpty
}
