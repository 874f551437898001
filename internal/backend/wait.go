package backend

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// WaitBy waits for wg until deadline at the latest: Close's waits, which a
// hung Redis must not hold past their bound.
func WaitBy(wg *sync.WaitGroup, deadline time.Time) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	}
}

// Detach runs f on a goroutine of its own, counted in ops (if not nil) so
// that Close waits for it, and waits for it up to wait: a call whose
// caller has given up sends its clean-up all the same, but does not wait
// out a Redis that hangs. ops must be above 0 (the caller's own call is
// counted). A panic in f is raised here if it comes in that time; after,
// nobody is left to recover it, and it is logged to log as msg with args.
func Detach(ops *sync.WaitGroup, wait time.Duration, f func(), log *slog.Logger, msg string, args ...any) {
	if ops != nil {
		ops.Add(1)
	}
	// Whoever claims first: f once it has ended (the caller then gets its
	// panic, if any), or the caller once it stops waiting.
	var claimed atomic.Bool
	done := make(chan *Panic, 1)
	go func() {
		if ops != nil {
			defer ops.Done()
		}
		p := Run(f)
		if claimed.CompareAndSwap(false, true) {
			done <- p
		} else if p != nil {
			p.Log(log, msg, args...)
		}
	}()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case p := <-done:
		p.Raise()
	case <-timer.C:
		if !claimed.CompareAndSwap(false, true) {
			(<-done).Raise() // ended just now
		}
	}
}
