package dlock

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
)

// BenchmarkLocalQueue measures what goroutines of one Client contending
// for one key cost Redis, without and with WithLocalQueue: script calls
// (round trips of lock operations) and commands (those run by the scripts
// included) per acquisition, read from INFO commandstats. Each holder
// works 1 ms; waiters refresh their queue entry every 10 ms (a 30 ms queue
// TTL), as a waiter in a long queue does every second by default.
//
//	go test -run '^$' -bench LocalQueue -benchtime 2000x .
func BenchmarkLocalQueue(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts []Option
	}{
		{"off", nil},
		{"on", []Option{WithLocalQueue()}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv := redistest.Start(b)
			rdb := srv.Client(b)
			c := newClientTB(b, rdb, append(bc.opts, WithQueueTTL(30*time.Millisecond))...)
			ctx := context.Background()
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			b.SetParallelism(4) // 4 goroutines per core
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l, err := c.Lock(ctx, "hot")
					if err != nil {
						b.Error(err)
						return
					}
					time.Sleep(time.Millisecond) // the work under the lock
					if err := l.Unlock(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			scripts, all := commandCalls(b, rdb)
			b.ReportMetric(float64(scripts)/float64(b.N), "scripts/op")
			b.ReportMetric(float64(all)/float64(b.N), "cmds/op")
		})
	}
}

// commandCalls sums the calls of INFO commandstats: script calls (EVALSHA,
// EVAL) and all commands but the connection set-up and INFO itself.
func commandCalls(tb testing.TB, rdb *redis.Client) (scripts, all int64) {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		switch {
		case name == "info" || name == "hello" || name == "ping" || strings.HasPrefix(name, "client") || strings.HasPrefix(name, "config"):
			continue
		case name == "evalsha" || name == "eval":
			scripts += n
		}
		all += n
	}
	return scripts, all
}

// newClientTB is newClientOn for benchmarks.
func newClientTB(tb testing.TB, rdb redis.UniversalClient, opts ...Option) *Client {
	tb.Helper()
	c, err := New(rdb, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// newTestClientB starts a Redis server and a Client on it, for benchmarks.
func newTestClientB(tb testing.TB, opts ...Option) (*Client, *redis.Client, *redistest.Server) {
	tb.Helper()
	srv := redistest.Start(tb)
	rdb := srv.Client(tb)
	return newClientTB(tb, rdb, opts...), rdb, srv
}
