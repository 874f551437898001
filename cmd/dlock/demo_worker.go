package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// workerEvent is one line a demo worker prints on stdout, as JSON.
type workerEvent struct {
	Event    string  `json:"event"`
	Fence    uint64  `json:"fence,omitempty"`
	Wait     int64   `json:"wait_ns,omitempty"`
	Accepted bool    `json:"accepted,omitempty"`
	Seen     string  `json:"seen,omitempty"` // the highest fence the resource had seen
	Cause    string  `json:"cause,omitempty"`
	At       int64   `json:"at_ns,omitempty"` // wall clock, Unix nanoseconds
	Acquired []int64 `json:"acquired_ns,omitempty"`
	Released []int64 `json:"released_ns,omitempty"`
	Waits    []int64 `json:"waits_ns,omitempty"`
}

// workerFlags are the flags of the hidden `dlock demo-worker`.
type workerFlags struct {
	key    string        // the lock
	data   string        // the counter or the guarded resource
	n      int           // counter: increments
	lease  time.Duration // stale, fresh: the lock's lease
	name   string        // stale, fresh: who writes
	noLock bool          // counter: increment without the lock
}

// demoWorkerCmd is the process the demo starts several times: the dlock
// binary itself, so that the demo needs nothing but Redis.
func (a *app) demoWorkerCmd() *cobra.Command {
	var f workerFlags
	cmd := &cobra.Command{
		Use:    "demo-worker counter|stale|fresh",
		Short:  "A worker process of the demo (internal)",
		Hidden: true,
		Args:   exactArgs(1, "one role"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(context.Background(), "dlock demo-worker")
			if err != nil {
				return err
			}
			defer c.Close()
			w := &demoWorker{c: c, f: f, out: json.NewEncoder(a.stdout), in: bufio.NewReader(os.Stdin)}
			switch args[0] {
			case "counter":
				err = w.counter()
			case "stale":
				err = w.stale()
			case "fresh":
				err = w.fresh()
			default:
				return usagef("unknown role %q", args[0])
			}
			if err != nil {
				// Redis failing is exit status 69, as for any command: the
				// demo passes it on.
				code := exitUnavailable
				if errors.As(err, new(notRedisError)) {
					code = exitFailure
				}
				return exitf(code, "demo worker %s: %v", args[0], err)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.key, "key", "", "the lock")
	fs.StringVar(&f.data, "data", "", "the counter or resource key")
	fs.IntVar(&f.n, "n", 0, "increments")
	fs.DurationVar(&f.lease, "lease", time.Second, "lease")
	fs.StringVar(&f.name, "name", "", "writer name")
	fs.BoolVar(&f.noLock, "no-lock", false, "increment without the lock")
	return cmd
}

type demoWorker struct {
	c   *conn
	f   workerFlags
	out *json.Encoder
	in  *bufio.Reader
}

// notRedisError is an error of a worker that is not Redis failing: all the
// others are.
type notRedisError struct{ error }

func (w *demoWorker) emit(e workerEvent) error {
	if err := w.out.Encode(e); err != nil {
		return notRedisError{fmt.Errorf("telling the demo: %w", err)}
	}
	return nil
}

// awaitLine blocks until the demo writes a line on our stdin.
func (w *demoWorker) awaitLine() error {
	if _, err := w.in.ReadString('\n'); err != nil {
		return notRedisError{fmt.Errorf("waiting for the demo: %w", err)}
	}
	return nil
}

// counter adds 1 to the shared counter n times with a GET then a SET, the
// classic lost-update race, each time under the lock (unless --no-lock),
// and reports when each critical section started and ended.
func (w *demoWorker) counter() error {
	ctx := context.Background()
	if err := w.emit(workerEvent{Event: "ready"}); err != nil {
		return err
	}
	if err := w.awaitLine(); err != nil {
		return err
	}
	done := workerEvent{Event: "done"}
	for range w.f.n {
		start := time.Now()
		var l *dlock.Lock
		if !w.f.noLock {
			var err error
			if l, err = w.c.locks.Lock(ctx, w.f.key); err != nil {
				return err
			}
		}
		acquired := time.Now()
		v, err := w.c.rdb.Get(ctx, w.f.data).Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if err := w.c.rdb.Set(ctx, w.f.data, v+1, 0).Err(); err != nil {
			return err
		}
		released := time.Now()
		if l != nil {
			if err := l.Unlock(ctx); err != nil {
				return err
			}
		}
		done.Acquired = append(done.Acquired, acquired.UnixNano())
		done.Released = append(done.Released, released.UnixNano())
		done.Waits = append(done.Waits, int64(acquired.Sub(start)))
	}
	return w.emit(done)
}

// stale takes the lock, checks that it holds it, then waits for a line on
// stdin before writing: the demo freezes it (SIGSTOP) in between, past its
// lease. It reports how the resource answered its late write and when it
// learned it had lost the lock.
func (w *demoWorker) stale() error {
	ctx := context.Background()
	l, err := w.c.locks.Lock(ctx, w.f.key, dlock.WithTTL(w.f.lease))
	if err != nil {
		return err
	}
	lostAt := make(chan time.Time, 1)
	go func() {
		<-l.Done()
		lostAt <- time.Now()
	}()
	if l.Context().Err() != nil {
		return notRedisError{errors.New("lock lost before it could be checked")}
	}
	if err := w.emit(workerEvent{Event: "checked", Fence: l.Fence()}); err != nil {
		return err
	}
	if err := w.awaitLine(); err != nil { // frozen here by the demo
		return err
	}
	ok, seen, err := guardedWrite(ctx, w.c.rdb, w.f.data, strconv.FormatUint(l.Fence(), 10), "written by "+w.f.name)
	if err != nil {
		return err
	}
	if err := w.emit(workerEvent{Event: "wrote", Fence: l.Fence(), Accepted: ok, Seen: seen}); err != nil {
		return err
	}
	select {
	case at := <-lostAt:
		cause := context.Cause(l.Context())
		_ = l.Unlock(ctx) // not held any more: tells Redis nothing
		return w.emit(workerEvent{Event: "lost", Cause: fmt.Sprint(cause), At: at.UnixNano()})
	case <-time.After(10 * time.Second):
		_ = l.Unlock(ctx)
		return w.emit(workerEvent{Event: "held"})
	}
}

// fresh waits for the lock, writes to the resource with its fence, and
// releases the lock.
func (w *demoWorker) fresh() error {
	ctx := context.Background()
	start := time.Now()
	l, err := w.c.locks.Lock(ctx, w.f.key, dlock.WithTTL(w.f.lease))
	if err != nil {
		return err
	}
	if err := w.emit(workerEvent{Event: "locked", Fence: l.Fence(), Wait: int64(time.Since(start))}); err != nil {
		return err
	}
	ok, seen, err := guardedWrite(ctx, w.c.rdb, w.f.data, strconv.FormatUint(l.Fence(), 10), "written by "+w.f.name)
	if err != nil {
		return err
	}
	if err := l.Unlock(ctx); err != nil {
		return err
	}
	return w.emit(workerEvent{Event: "wrote", Fence: l.Fence(), Accepted: ok, Seen: seen})
}
