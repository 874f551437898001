package dlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchmarkSemaphore measures a Semaphore's permits against a lock on one
// redis-server, from INFO commandstats: script calls (round trips) and
// commands (those the scripts run included) per acquisition, and with
// -benchmem the allocations. "uncontended" is one goroutine taking and
// giving back a lock or one permit; "contended" is 16 goroutines of one
// Client sharing 4 permits, or one lock, with 1 ms of work each.
// "1000-readers" is one goroutine taking and giving back a read lock of an
// RWMutex that 1000 other readers hold: what one call costs does not grow
// with the holders (lua/semaphore.lua counts them instead of reading them).
//
//	go test -run '^$' -bench Semaphore -benchmem -benchtime 2000x .
func BenchmarkSemaphore(b *testing.B) {
	ctx := context.Background()
	for _, bc := range []struct {
		name    string
		workers int
		work    time.Duration
		held    int // read locks held by others throughout
		take    func(c *Client) (*Lock, error)
	}{
		{"uncontended/lock", 1, 0, 0, func(c *Client) (*Lock, error) { return c.Lock(ctx, "k") }},
		{"uncontended/semaphore", 1, 0, 0, func(c *Client) (*Lock, error) { return c.Semaphore("k", 4).Acquire(ctx, 1) }},
		{"contended/lock", 16, time.Millisecond, 0, func(c *Client) (*Lock, error) { return c.Lock(ctx, "k") }},
		{"contended/4-permits", 16, time.Millisecond, 0, func(c *Client) (*Lock, error) { return c.Semaphore("k", 4).Acquire(ctx, 1) }},
		{"uncontended/1000-readers", 1, 0, 1000, func(c *Client) (*Lock, error) { return c.RWMutex("k").RLock(ctx) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c, rdb, _ := newTestClientB(b)
			for range bc.held {
				if _, err := c.RWMutex("k").RLock(ctx, WithTTL(time.Hour), WithoutRenewal()); err != nil {
					b.Fatal(err)
				}
			}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			pair := func() bool {
				l, err := bc.take(c)
				if err != nil {
					b.Error(err)
					return false
				}
				time.Sleep(bc.work) // the work under the lock
				if err := l.Unlock(ctx); err != nil {
					b.Error(err)
					return false
				}
				return true
			}
			b.ResetTimer()
			if bc.workers == 1 {
				for i := 0; i < b.N && pair(); i++ {
				}
			} else {
				b.SetParallelism((bc.workers + 1) / 2) // per core: GOMAXPROCS is 2 here
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() && pair() {
					}
				})
			}
			b.StopTimer()
			reportCommands(b, rdb)
		})
	}
}

// reportCommands reports the script calls and commands per operation.
func reportCommands(b *testing.B, rdb *redis.Client) {
	scripts, all := commandCalls(b, rdb)
	b.ReportMetric(float64(scripts)/float64(b.N), "scripts/op")
	b.ReportMetric(float64(all)/float64(b.N), "cmds/op")
}
