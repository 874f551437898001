package redlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testutil"
)

// Contended locks of distinct keys leave no subscription on the nodes once
// their linger is over, and no key but the fence counters, which expire a
// day after their last fence (docs/safety.md, Fencing over Redlock).
func TestDistinctContendedKeysLeaveNoState(t *testing.T) {
	cl := startCluster(t, 3)
	holder, waiter := cl.locker(t), cl.locker(t)
	ctx := context.Background()
	const keys = 100
	var wg sync.WaitGroup
	errs := make(chan error, keys)
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < keys; i += 4 {
				key := fmt.Sprintf("order:%d", i)
				held, err := holder.Lock(ctx, key)
				if err != nil {
					errs <- err
					return
				}
				got := make(chan error, 1)
				go func() {
					l, err := waiter.Lock(ctx, key)
					if err == nil {
						err = l.Unlock(ctx)
					}
					got <- err
				}()
				// The waiter subscribes once refused.
				channel := lockKey(key) + ":wake"
				deadline := time.Now().Add(5 * time.Second)
				for cl.rdbs[0].PubSubNumSub(ctx, channel).Val()[channel] == 0 {
					if time.Now().After(deadline) {
						errs <- fmt.Errorf("%s: the waiter did not subscribe", key)
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
				if err := held.Unlock(ctx); err != nil {
					errs <- err
					return
				}
				if err := <-got; err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, rdb := range cl.rdbs {
		testutil.WaitUntil(t, 10*time.Second, fmt.Sprintf("node %d's channels to be unsubscribed", i), func() bool {
			chans, err := rdb.PubSubChannels(ctx, "*").Result()
			if err != nil {
				t.Fatal(err)
			}
			return len(chans) == 0
		})
		iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			if !strings.HasSuffix(key, ":fence") {
				t.Errorf("node %d: key %q left behind", i, key)
				continue
			}
			if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 23*time.Hour || ttl > 24*time.Hour {
				t.Errorf("node %d: fence counter %q expires in %v, want about a day", i, key, ttl)
			}
		}
	}
}
