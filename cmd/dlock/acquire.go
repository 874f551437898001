package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/dlock-go/dlock"
)

// signalError is the cause of a wait ended by a signal.
type signalError struct{ sig os.Signal }

func (e signalError) Error() string { return "interrupted by " + e.sig.String() }

// lockRequestTimeout bounds each request run makes before it holds the
// lock (a check of the lock's queue, the leaving of it), as long as the
// library gives a batched round trip of such checks: go-redis would
// otherwise wait as long as the URL's read_timeout says, or forever.
const lockRequestTimeout = 2 * pingTimeout

// errWaitedTooLong is the cause of a wait ended by --wait.
var errWaitedTooLong = errors.New("--wait ran out")

// watchSignals returns a context cancelled (with a signalError) by the
// first signal from sigs, and a function that stops watching and returns
// that signal's error, if one came, even as it stopped. After it returns,
// sigs is the caller's again.
func watchSignals(sigs <-chan os.Signal) (context.Context, func() error) {
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	var caught os.Signal // read once done is closed
	go func() {
		defer close(done)
		select {
		case s := <-sigs:
			caught = s
			cancel(signalError{s})
		case <-ctx.Done():
		}
	}()
	return ctx, func() error {
		cancel(nil) // may come before the watcher's own, with its signal
		<-done
		if caught == nil {
			// One that came as the watch ended counts too: the caller has
			// not acted on the wait's outcome yet (run has not started
			// COMMAND, which must not start after an interrupt).
			select {
			case caught = <-sigs:
			default:
			}
		}
		if caught == nil {
			return nil
		}
		return signalError{caught}
	}
}

// interrupted is the exit error of a wait that a signal ended: 128+N, as if
// the signal had killed dlock.
func interrupted(err error, format string, args ...any) error {
	code := 128
	if se, ok := err.(signalError); ok {
		if s, ok := se.sig.(syscall.Signal); ok {
			code += int(s)
		}
	}
	return exitf(code, "%s: %v", fmt.Sprintf(format, args...), err)
}

// acquire takes the lock for `run`: one attempt with --no-wait, else a wait
// bounded by --wait (and by ctx, which a signal ends).
func (a *app) acquire(ctx context.Context, c *conn, f runFlags, key string) (*dlock.Lock, error) {
	opts := []dlock.LockOption{dlock.WithTTL(a.conn.ttl), dlock.WithMetadata(f.meta)}
	if f.maxHold > 0 {
		// supervise stops COMMAND when --max-hold passes; the lock is
		// renewed while COMMAND has its --grace to exit, and no longer.
		opts = append(opts, dlock.WithMaxHold(f.maxHold+f.grace))
	}
	if f.wait > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, f.wait, errWaitedTooLong)
		defer stop()
	}
	l, err := take(ctx, c, f, key, opts)
	// held says why KEY could not be taken.
	held := func() string {
		if f.capacity > 0 {
			return fmt.Sprintf("semaphore %q cannot give %d of its %d permits now (held, or others wait first)", key, f.permits, f.capacity)
		}
		return fmt.Sprintf("lock %q is held%s", key, a.heldBy(c, key))
	}
	switch {
	case err == nil:
		return l, nil
	case errors.Is(err, dlock.ErrNotObtained):
		return nil, exitf(exitNotObtained, "%s; not waiting (--no-wait)", held())
	case errors.Is(context.Cause(ctx), errWaitedTooLong):
		return nil, exitf(exitNotObtained, "%s; not obtained within --wait %v", held(), f.wait)
	case ctx.Err() != nil:
		return nil, context.Cause(ctx) // a signal: the caller says so
	case errors.Is(err, context.DeadlineExceeded):
		// A request's own (lockRequestTimeout): Redis hangs.
		return nil, exitf(exitUnavailable, "%v (no answer from Redis within %v)", err, lockRequestTimeout)
	default:
		return nil, redisFailure(err)
	}
}

// take makes run's request: the lock KEY, or --permits of the semaphore
// KEY with --capacity; one attempt with --no-wait.
func take(ctx context.Context, c *conn, f runFlags, key string, opts []dlock.LockOption) (*dlock.Lock, error) {
	if f.capacity > 0 {
		s := c.locks.Semaphore(key, f.capacity)
		if f.noWait {
			return s.TryAcquire(ctx, f.permits, opts...)
		}
		return s.Acquire(ctx, f.permits, opts...)
	}
	if f.noWait {
		return c.locks.TryLock(ctx, key, opts...)
	}
	return c.locks.Lock(ctx, key, opts...)
}

// heldBy says why key could not be taken, as " by ..." (its holder) or
// " ... queued" (free, but others wait first); "" if that cannot be read.
func (a *app) heldBy(c *conn, key string) string {
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	// An error with info is other code's data at the lock's other names:
	// the holder read is still worth naming.
	info, _ := c.locks.Inspect(ctx, key)
	switch {
	case info == nil:
		return ""
	case info.Held:
		return fmt.Sprintf(" by %s (fence %d, %s)", holderText(info.Holder), info.Fence, leaseText(info.TTL))
	case info.Waiters > 0:
		return fmt.Sprintf(" (just handed over: %d waiters are queued)", info.Waiters)
	default:
		return ""
	}
}
