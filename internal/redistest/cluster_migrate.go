package redistest

import (
	"context"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"
)

// MigrateSlot moves slot from the master at src to the one at dst by hand,
// as redis-cli --cluster reshard does: IMPORTING on dst, MIGRATING on src,
// MIGRATE of every key, then SETSLOT NODE everywhere. mid, if set, runs
// after the keys moved and before the slot is reassigned: the source
// answers ASK for them and TRYAGAIN for scripts whose keys are split.
func (c *Cluster) MigrateSlot(t testing.TB, slot int, src, dst string, mid func()) {
	t.Helper()
	ctx := context.Background()
	node := func(addr string) *redis.Client { return redis.NewClient(&redis.Options{Addr: addr}) }
	s, d := node(src), node(dst)
	defer s.Close()
	defer d.Close()
	dstID, err := d.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	srcID, err := s.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	must := func(cmd *redis.Cmd) {
		t.Helper()
		if err := cmd.Err(); err != nil {
			t.Fatalf("%v: %v", cmd.Args(), err)
		}
	}
	must(d.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID))
	must(s.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID))
	host, port, _ := net.SplitHostPort(dst)
	for {
		keys, err := s.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must(s.Do(ctx, args...))
	}
	if mid != nil {
		mid()
	}
	// The destination first, so that the slot is never without an owner.
	addrs := []string{dst, src}
	for _, a := range c.Addrs() {
		if a != dst && a != src {
			addrs = append(addrs, a)
		}
	}
	for _, a := range addrs {
		n := node(a)
		must(n.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID))
		n.Close()
	}
}
