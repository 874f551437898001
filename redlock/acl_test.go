package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testutil"
	"github.com/dlock-go/dlock/redlock"
)

// A user with README's rule for Redlock's nodes, and nothing else, runs
// every part of a lock's life on every node, and no node refuses any of
// its commands (ACL LOG stays empty: the release's PUBLISH, sent with
// pcall, would fail unnoticed). Each command of the rule is needed: the
// same life without it is refused it somewhere.
func TestACLRuleCoversRedlock(t *testing.T) {
	redlock.SetPubSubHealth(t, 50*time.Millisecond, 5*time.Second) // idle waiters ping soon
	redlock.SetLinger(t, 50*time.Millisecond)                      // and unsubscribe soon
	cl := startCluster(t, 3)
	ctx := context.Background()
	if err := aclLife(t, cl, testutil.ACLRedlockRule); err != nil {
		t.Fatal(err)
	}
	for i, rdb := range cl.rdbs {
		if log, err := rdb.Do(ctx, "ACL", "LOG").Slice(); err != nil || len(log) != 0 {
			t.Errorf("node %d: ACL LOG = %v, %v; want no refused command", i, log, err)
		}
	}
	rule := strings.Fields(testutil.ACLRedlockRule)
	for i, cmd := range rule {
		if !strings.HasPrefix(cmd, "+") {
			continue
		}
		t.Run("without "+cmd, func(t *testing.T) {
			without := strings.Join(append(rule[:i:i], rule[i+1:]...), " ")
			_ = aclLife(t, cl, without)
			for _, rdb := range cl.rdbs {
				if testutil.ACLRefused(ctx, rdb, cmd[1:]) {
					return
				}
			}
			t.Errorf("no node refused %s", cmd[1:])
		})
	}
}

// aclLife runs a lock's life on cl's nodes as a user with rule, its script
// caches emptied first: a grant, a refusal, a waiter subscribed on every
// node and pinged there while idle, renewal, re-entry, Extend, TTL, the
// release that wakes the waiter, and its channel unsubscribed after. It
// stops at the first error, or once a node refused a command.
func aclLife(t *testing.T, cl *cluster, rule string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var nodes []redis.UniversalClient
	for _, rdb := range cl.rdbs {
		for _, cmd := range [][]any{{"ACL", "LOG", "RESET"}, {"SCRIPT", "FLUSH"}, {"CONFIG", "RESETSTAT"}} {
			if err := rdb.Do(ctx, cmd...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		testutil.SetACLUser(t, rdb, "locker", rule)
		opts := nodeOptions(rdb.Options().Addr)
		opts.Username, opts.Password = "locker", "pw"
		node := redis.NewClient(opts)
		defer node.Close()
		nodes = append(nodes, node)
	}
	refused := func() bool {
		for _, rdb := range cl.rdbs {
			if log, _ := rdb.Do(ctx, "ACL", "LOG").Slice(); len(log) > 0 {
				return true
			}
		}
		return false
	}
	until := func(what string, cond func() bool) error {
		for !cond() {
			if refused() {
				return fmt.Errorf("refused while waiting for %s", what)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: %w", what, ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
		return nil
	}
	onEveryNode := func(cond func(rdb *redis.Client) bool) func() bool {
		return func() bool {
			for _, rdb := range cl.rdbs {
				if !cond(rdb) {
					return false
				}
			}
			return true
		}
	}
	obs := &renewCounter{}
	a, err := redlock.New(nodes, dlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	l, err := a.Lock(ctx, "job", dlock.WithTTL(900*time.Millisecond)) // renewed every 300ms
	if err != nil {
		return err
	}
	defer l.Unlock(context.Background())
	if _, err := b.TryLock(ctx, "job"); !errors.Is(err, dlock.ErrNotObtained) {
		return fmt.Errorf("TryLock of a held lock = %v, want ErrNotObtained", err)
	}
	wctx, stop := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() {
		w, err := b.Lock(wctx, "job", dlock.WithRetry(dlock.FixedRetry(time.Hour, 0)))
		if err == nil {
			err = w.Unlock(ctx)
		}
		got <- err
	}()
	defer func() { stop(); <-got }()
	channel := lockKey("job") + ":wake"
	if err := until("the waiter to subscribe on every node", onEveryNode(func(rdb *redis.Client) bool {
		return rdb.PubSubNumSub(ctx, channel).Val()[channel] == 1
	})); err != nil {
		return err
	}
	if err := until("the idle waiter's ping on every node", onEveryNode(func(rdb *redis.Client) bool {
		return strings.Contains(rdb.Info(ctx, "commandstats").Val(), "cmdstat_ping:")
	})); err != nil {
		return err
	}
	if err := until("a renewal", func() bool { return obs.ok.Load() > 0 || l.Context().Err() != nil }); err != nil {
		return err
	}
	inner, err := a.Lock(l.Context(), "job")
	if err != nil {
		return fmt.Errorf("re-entry: %w", err)
	}
	if err := inner.Unlock(ctx); err != nil {
		return err
	}
	if err := l.Extend(ctx, 2*time.Second); err != nil {
		return err
	}
	if _, err := l.TTL(ctx); err != nil {
		return err
	}
	if err := l.Unlock(ctx); err != nil {
		return err
	}
	select {
	case err := <-got:
		got <- err // for the deferred wait
		if err != nil {
			return fmt.Errorf("the waiter: %w", err)
		}
	case <-ctx.Done():
		return errors.New("the waiter was not handed the lock")
	}
	return until("the channel to be unsubscribed on every node", onEveryNode(func(rdb *redis.Client) bool {
		return rdb.PubSubNumSub(ctx, channel).Val()[channel] == 0
	}))
}
