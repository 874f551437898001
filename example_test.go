package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// The examples read REDIS_ADDR, set by the package's TestMain to a
// redis-server it started.

func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	ctx := context.Background()
	l, err := locks.Lock(ctx, "order:42") // waits until the lock is free
	if err != nil {
		panic(err)
	}
	defer l.Unlock(ctx)

	// The watchdog renews the lease while we work. l.Context() is cancelled
	// the moment the lock is lost; pass it to the work so it stops then.
	work := l.Context()
	fmt.Println("holding", l.Key(), "- lost:", work.Err() != nil)
	// Output: holding order:42 - lost: false
}

func ExampleClient_Do() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()

	err := locks.Do(context.Background(), "report:daily", func(ctx context.Context) error {
		// ctx is cancelled if the lock is lost while we run.
		fmt.Println("generating the report")
		return nil
	}, dlock.WithTTL(10*time.Second))
	fmt.Println("err:", err)
	// Output:
	// generating the report
	// err: <nil>
}

func ExampleClient_TryLock() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	first, _ := locks.TryLock(ctx, "cron:cleanup")
	defer first.Unlock(ctx)

	_, err := locks.TryLock(ctx, "cron:cleanup")
	if errors.Is(err, dlock.ErrNotObtained) {
		fmt.Println("another instance runs the job")
	}
	// Output: another instance runs the job
}

func ExampleLock_Fence() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	// A resource that remembers the highest fence it has seen rejects a
	// holder that paused past its lease and writes late.
	var highest uint64
	write := func(fence uint64) error {
		if fence < highest {
			return fmt.Errorf("stale fence %d < %d", fence, highest)
		}
		highest = fence
		return nil
	}

	old, _ := locks.Lock(ctx, "stock:7", dlock.WithTTL(50*time.Millisecond), dlock.WithoutRenewal())
	<-old.Done() // the old holder froze past its lease...
	current, _ := locks.Lock(ctx, "stock:7")
	defer current.Unlock(ctx)

	fmt.Println("current holder:", write(current.Fence()))
	fmt.Println("late write:", write(old.Fence()) != nil)
	// Output:
	// current holder: <nil>
	// late write: true
}

func ExampleLock_Txn() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()
	rdb.Set(ctx, "{order:42}:stock", 10, 0)

	l, err := locks.Lock(ctx, "order:42")
	if err != nil {
		panic(err)
	}
	defer l.Unlock(ctx)
	// Applied only if this holder still holds the lock when Redis runs
	// it. SlotKey names keys in the lock's hash slot ("{order:42}:stock"),
	// so it works on Redis Cluster too.
	var stock *redis.IntCmd
	err = l.Txn(ctx, func(pipe redis.Pipeliner) error {
		stock = pipe.Decr(ctx, l.SlotKey("stock"))
		pipe.Set(ctx, l.SlotKey("state"), "reserved", 0)
		return nil
	})
	if err != nil {
		// stock is unset: not applied (ErrLockLost: another holder
		// may have written since), or unknown for a lost reply.
		panic(err)
	}
	fmt.Println("stock:", stock.Val())
	// Output: stock: 9
}

func ExampleWithRetry() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	held, _ := locks.Lock(ctx, "invoice:9")
	defer held.Unlock(ctx)

	// Check at most 3 more times, backing off from 10 ms.
	_, err := locks.Lock(ctx, "invoice:9", dlock.WithRetry(dlock.ExponentialRetry(10*time.Millisecond, 100*time.Millisecond, 3)))
	fmt.Println(errors.Is(err, dlock.ErrNotObtained))
	// Output: true
}

func ExampleClient_Semaphore() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	// At most 3 exports at once across every process using "exports".
	exports := locks.Semaphore("exports", 3)
	big, err := exports.Acquire(ctx, 2) // a large export takes 2 permits
	if err != nil {
		panic(err)
	}
	small, _ := exports.Acquire(ctx, 1)

	_, err = exports.TryAcquire(ctx, 1)
	fmt.Println("full:", errors.Is(err, dlock.ErrNotObtained))

	// Each holder has its own lease, renewed while it works, and its own
	// Context, cancelled if its permits are lost.
	_ = big.Unlock(ctx)
	again, err := exports.TryAcquire(ctx, 2)
	fmt.Println("after a release:", err)
	_ = again.Unlock(ctx)
	_ = small.Unlock(ctx)
	// Output:
	// full: true
	// after a release: <nil>
}

func ExampleClient_RWMutex() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	config := locks.RWMutex("config")
	r1, _ := config.RLock(ctx) // readers share the lock
	r2, _ := config.RLock(ctx)

	_, err := config.TryLock(ctx)
	fmt.Println("writer while reading:", errors.Is(err, dlock.ErrNotObtained))

	_ = r1.Unlock(ctx)
	_ = r2.Unlock(ctx)
	w, err := config.Lock(ctx) // a writer has it alone
	fmt.Println("writer after the readers:", err)
	_ = w.Unlock(ctx)
	// Output:
	// writer while reading: true
	// writer after the readers: <nil>
}

func ExampleSemaphore_Inspect() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	imports := locks.Semaphore("imports", 3)
	stuck, err := imports.Acquire(ctx, 2, dlock.WithMetadata("nightly import"))
	if err != nil {
		panic(err)
	}

	// An operator looks at the holders...
	info, err := imports.Inspect(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d of %d permits in use\n", info.InUse, info.Capacity)
	for _, h := range info.Holders {
		fmt.Printf("%d held for %q\n", h.Permits, h.Holder.Data)
	}
	// ...and takes a stuck one's permits away: the waiters first in line
	// get them, and the holder learns of it at its next renewal.
	fmt.Println("force release:", imports.ForceRelease(ctx, info.Holders[0].Owner))
	_, err = stuck.TTL(ctx)
	fmt.Println("the holder lost them:", errors.Is(err, dlock.ErrLockLost))
	// Output:
	// 2 of 3 permits in use
	// 2 held for "nightly import"
	// force release: <nil>
	// the holder lost them: true
}
