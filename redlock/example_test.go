package redlock_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redlock"
)

// The example reads REDLOCK_ADDRS, set by the package's TestMain to three
// redis-servers it started.

// generateReport is application code: it takes a dlock.Locker, so it runs
// the same on one Redis (dlock.New) and on a Redlock quorum (redlock.New).
func generateReport(ctx context.Context, locks dlock.Locker) error {
	return locks.Do(ctx, "report:daily", func(ctx context.Context) error {
		// ctx is cancelled if the lock is lost (a majority of the nodes
		// could not be renewed in time).
		fmt.Println("generating the report")
		return nil
	})
}

func ExampleNew() {
	var nodes []redis.UniversalClient
	for _, addr := range strings.Split(os.Getenv("REDLOCK_ADDRS"), ",") {
		// A request to a hung node ends at the per-node deadline, and a dead
		// node fails at once: Redlock retries whole attempts itself.
		rdb := redis.NewClient(&redis.Options{
			Addr:                  addr,
			ContextTimeoutEnabled: true,
			MaxRetries:            -1,
			DialerRetries:         1,
		})
		defer rdb.Close()
		nodes = append(nodes, rdb)
	}

	// One Redis would be: locks, err := dlock.New(rdb)
	locks, err := redlock.New(nodes)
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	if err := generateReport(context.Background(), locks); err != nil {
		panic(err)
	}

	// A held lock is a *dlock.Lock, with its fencing token and loss signal.
	l, err := locks.Lock(context.Background(), "order:42")
	if err != nil {
		panic(err)
	}
	fmt.Println("fenced:", l.Fence() > 0, "- lost:", l.Context().Err() != nil)
	_ = l.Unlock(context.Background())
	// Output:
	// generating the report
	// fenced: true - lost: false
}
