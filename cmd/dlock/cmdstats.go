//go:build unix

package main

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// commandCounts are the calls per command from INFO commandstats, summed
// over every master of a cluster. Commands that scripts run are counted
// too, under their own names.
type commandCounts map[string]int64

// readCommandCounts reads INFO commandstats.
func readCommandCounts(ctx context.Context, rdb redis.UniversalClient) (commandCounts, error) {
	counts := commandCounts{}
	var mu sync.Mutex
	read := func(ctx context.Context, c redis.Cmdable) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, line := range strings.Split(info, "\n") {
			// cmdstat_get:calls=12,usec=34,usec_per_call=2.83,...
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			name, isCmd := strings.CutPrefix(name, "cmdstat_")
			if !ok || !isCmd {
				continue
			}
			calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
			n, _ := strconv.ParseInt(calls, 10, 64)
			counts[name] += n
		}
		return nil
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return read(ctx, node) })
	} else {
		err = read(ctx, rdb)
	}
	return counts, err
}

// since returns the calls made after before was read: all commands but
// INFO, and the script calls among them (one round trip each).
func (c commandCounts) since(before commandCounts) (commands, scripts int64) {
	for name, n := range c {
		d := n - before[name]
		switch name {
		case "info":
			continue
		case "evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro":
			scripts += d
		}
		commands += d
	}
	return commands, scripts
}
