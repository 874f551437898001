package backend

import (
	"sync"
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
