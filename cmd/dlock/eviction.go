package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// evictionCheckTimeout bounds the check: it only adds a warning, and must
// not hold up a command on a server slow to answer it.
const evictionCheckTimeout = time.Second

// warnEviction says on stderr when the server (on a cluster, any master)
// may evict keys at its maxmemory: a held lock's key can then vanish and
// the lock be taken by another client (docs/safety.md, Redis settings). It
// reads INFO memory, which managed services answer where CONFIG is
// disabled; a server that does not answer is not warned about, since the
// command's own requests will say what is wrong.
func (a *app) warnEviction(ctx context.Context, c *conn) {
	ctx, cancel := context.WithTimeout(ctx, evictionCheckTimeout)
	defer cancel()
	var mu sync.Mutex
	check := func(ctx context.Context, rdb *redis.Client, where string) error {
		info, err := rdb.Info(ctx, "memory").Result()
		if err != nil {
			return nil
		}
		if policy, ok := evicts(info); ok {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(a.stderr, "dlock: warning: Redis at %s may evict keys (maxmemory-policy %s): a held lock can vanish and another client take it; locks need maxmemory-policy noeviction\n", where, policy)
		}
		return nil
	}
	switch rdb := c.rdb.(type) {
	case *redis.ClusterClient:
		_ = rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return check(ctx, m, m.Options().Addr)
		})
	case *redis.Client:
		_ = check(ctx, rdb, c.desc)
	}
}

// evicts reports whether INFO memory describes a server that evicts keys
// at its maxmemory, and its policy: a maxmemory set, and a policy other
// than noeviction.
func evicts(info string) (policy string, ok bool) {
	limit := ""
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, found := strings.CutPrefix(line, "maxmemory:"); found {
			limit = v
		} else if v, found := strings.CutPrefix(line, "maxmemory_policy:"); found {
			policy = v
		}
	}
	return policy, limit != "" && limit != "0" && policy != "" && policy != "noeviction"
}
