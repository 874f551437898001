package dlock

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
)

// On Redis Cluster each waited lock has a pub/sub connection of its own,
// opened when its first waiter subscribes. A master that stops answering
// just then (busy with a slow command, or cut off from this client) must
// hold back only the waiters of its own locks: a hand-over made on a
// healthy master wakes its waiter at once, and a Lock that got its lock
// returns.
func TestClusterHungSubscriptionDoesNotHoldBackOtherWaiters(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc, proxy, hung := proxiedToOneMaster(t, cl)
	c := newClientOn(t, cc, WithQueueTTL(time.Minute))
	holder := newClientOn(t, cl.Client(t))
	ctx := context.Background()

	byMaster := keysPerMaster(t, cl, cc, c, "subhung:", 1)
	healthy := cl.Nodes[0].Addr()
	a, b := byMaster[healthy][0], byMaster[hung][0]
	la := mustLock(t, holder, a, WithTTL(time.Minute))
	lb := mustLock(t, holder, b, WithTTL(time.Minute))
	defer lb.Unlock(ctx)

	// A waiter for a, subscribed on its healthy master.
	gotA := lockAsync(ctx, c, a)
	hc := redis.NewClient(&redis.Options{Addr: healthy})
	defer hc.Close()
	chA := c.wakeChannel(a)
	waitUntil(t, 5*time.Second, "the waiter of a to subscribe", func() bool {
		subs, _ := hc.PubSubShardNumSub(ctx, chA).Result()
		return subs[chA] == 1
	})
	// The client's pooled connection to b's master is open: the next
	// connection it opens there is the subscription of b's waiter.
	if _, err := c.TryLock(ctx, b); err == nil {
		t.Fatal("TryLock of a held lock succeeded")
	}
	frozen := proxy.FreezeOn(func(p []byte) bool { return bytes.Contains(bytes.ToLower(p), []byte("hello")) })
	t.Cleanup(proxy.Thaw)
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gotB := lockAsync(bctx, c, b)
	select {
	case <-frozen:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter of b never opened its subscription")
	}

	// b's master is silent now. a's hand-over must still wake its waiter.
	released := time.Now()
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-gotA:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if d := time.Since(released); d > time.Second {
			t.Errorf("the waiter of a, on a healthy master, got its lock %v after the release", d.Round(time.Millisecond))
		}
		_ = r.l.Unlock(ctx)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter of a never got its lock")
	}
	proxy.Thaw()
	cancel()
	<-gotB
}
