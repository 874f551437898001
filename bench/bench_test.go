package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/dlock-go/dlock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis/rueidislock"
	"go.uber.org/goleak"
)

// addr is the Redis server the benchmarks use: $DLOCK_BENCH_ADDR, or a
// redis-server TestMain starts when benchmarks are requested.
var addr string

func TestMain(m *testing.M) {
	flag.Parse()
	addr = os.Getenv("DLOCK_BENCH_ADDR")
	var srv *Server
	if f := flag.Lookup("test.bench"); addr == "" && f != nil && f.Value.String() != "" {
		var err error
		if srv, err = StartServer(); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		addr = srv.Addr()
	}
	code := m.Run()
	if srv != nil {
		srv.Stop()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func benchKey(b *testing.B, lib string) string {
	return fmt.Sprintf("benchalloc:%s:%d", lib, time.Now().UnixNano())
}

// BenchmarkAcquireRelease is one acquire + release of an uncontended lock
// from one goroutine, written as each library's README shows. Run with
// -benchmem: allocs/op is the number the report quotes.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("dlock", func(b *testing.B) {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		locks, err := dlock.New(rdb)
		if err != nil {
			b.Fatal(err)
		}
		defer locks.Close()
		key := benchKey(b, "dlock")
		one := func() {
			l, err := locks.Lock(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
		one() // loads the scripts
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			one()
		}
	})
	b.Run("redsync", func(b *testing.B) {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		rs := redsync.New(goredis.NewPool(rdb))
		mutex := rs.NewMutex(benchKey(b, "redsync"))
		one := func() {
			if err := mutex.LockContext(ctx); err != nil {
				b.Fatal(err)
			}
			if ok, err := mutex.UnlockContext(ctx); !ok || err != nil {
				b.Fatal("unlock failed", err)
			}
		}
		one()
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			one()
		}
	})
	b.Run("redislock", func(b *testing.B) {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		locker := redislock.New(rdb)
		key := benchKey(b, "redislock")
		one := func() {
			lock, err := locker.Obtain(ctx, key, redislockTTL, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := lock.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
		one()
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			one()
		}
	})
	b.Run("rueidislock", func(b *testing.B) {
		locker, err := rueidislock.NewLocker(rueidisOptions(addr))
		if err != nil {
			b.Fatal(err)
		}
		defer locker.Close()
		key := benchKey(b, "rueidislock")
		one := func() {
			_, cancel, err := locker.WithContext(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			cancel()
		}
		one()
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			one()
		}
	})
}

// BenchmarkUncontendedParallel is scenario 1 in go test form: 32
// goroutines, distinct keys, acquire + release pairs through one Locker.
func BenchmarkUncontendedParallel(b *testing.B) {
	for _, s := range Setups() {
		if s.Mode == "tuned" {
			continue // same code path as the README setup without contention
		}
		b.Run(s.Name, func(b *testing.B) {
			lk, err := s.Open(addr, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer lk.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			var seq atomic.Int64
			b.SetParallelism(16) // 32 goroutines on 2 cores
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				key := fmt.Sprintf("benchpar:%s:%d:%d", s.Lib, time.Now().UnixNano(), seq.Add(1))
				for pb.Next() {
					unlock, err := lk.Lock(ctx, key)
					if err != nil {
						b.Error(err)
						return
					}
					if err := unlock(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
