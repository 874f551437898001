package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testutil"
	"github.com/dlock-go/dlock/redlock"
)

// A re-entry that go-redis delivers twice to every node (its reply was
// lost, and the client sent it again) adds one hold, not two: the inner
// Unlock gives back the only hold it took, and the hold count stays what
// the Locks account for.
func TestReenterDeliveredTwice(t *testing.T) {
	cl := startCluster(t, 3)
	cl.cacheScripts(t)
	c, hooks := cl.lossyLocker(t, "lua/reenter.lua")
	ctx := context.Background()
	outer := lockEveryNode(t, cl, c, "reenter-twice")
	inner, err := c.Lock(outer.Context(), "reenter-twice")
	if err != nil {
		t.Fatalf("re-entry with every reply lost and sent again: %v", err)
	}
	if hooks.lost() == 0 {
		t.Fatal("no re-entry reply was lost: the test did not test anything")
	}
	// A node slower than the majority is still sending its re-entry
	// again: its count is read once that is done.
	testutil.WaitUntil(t, 5*time.Second, "every node's re-entry ended", func() bool {
		n := 0
		for _, h := range hooks {
			n += int(h.Finished.Load())
		}
		return n == len(hooks)
	})
	count := func(i int) int {
		n, _ := cl.rdbs[i].HGet(ctx, lockKey("reenter-twice"), outer.Token()).Int()
		return n
	}
	for i := range cl.rdbs {
		if n := count(i); n != 2 {
			t.Errorf("node %d: hold count %d after one re-entry, want 2", i, n)
		}
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Unlock returns once a majority answered: the last node may be later.
	testutil.WaitUntil(t, 5*time.Second, "a hold count of 1 on every node after the inner Unlock", func() bool {
		return count(0) == 1 && count(1) == 1 && count(2) == 1
	})
	if err := outer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.WaitUntil(t, 5*time.Second, "the lock gone from every node", func() bool {
		return len(cl.holders(t, "reenter-twice", outer.Token())) == 0
	})
}

// A re-entry or a release that finds the lock key holding another kind of
// value (a string SET over it by other code) on a majority meets a lost
// lock, as a renewal, Extend and TTL do: not nodes that did not answer.
func TestReenterAndReleaseFindingWrongTypeAreLoss(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.locker(t)
	ctx := context.Background()
	overwrite := func(key string) {
		t.Helper()
		for _, rdb := range cl.rdbs[:2] {
			if err := rdb.Set(ctx, lockKey(key), "not a lock", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}

	l := lockEveryNode(t, cl, c, "wrong-reenter")
	overwrite("wrong-reenter")
	_, err := c.Lock(l.Context(), "wrong-reenter")
	if !errors.Is(err, dlock.ErrLockLost) || errors.Is(err, redlock.ErrNoQuorum) {
		t.Errorf("re-entry over a foreign value on 2 of 3 nodes = %v, want ErrLockLost, not ErrNoQuorum", err)
	}
	if !errors.Is(context.Cause(l.Context()), dlock.ErrLockLost) {
		t.Errorf("the lock's Context: cause %v, want ErrLockLost", context.Cause(l.Context()))
	}

	l = lockEveryNode(t, cl, c, "wrong-release")
	overwrite("wrong-release")
	err = l.Unlock(ctx)
	if !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, redlock.ErrNoQuorum) {
		t.Errorf("Unlock over a foreign value on 2 of 3 nodes = %v, want ErrNotHeld, not ErrNoQuorum", err)
	}
	for i, rdb := range cl.rdbs[:2] {
		if got := rdb.Get(ctx, lockKey("wrong-release")).Val(); got != "not a lock" {
			t.Errorf("node %d: the foreign value was changed to %q", i, got)
		}
	}
}
