package testutil

import (
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// RunOnEndingThread runs fn on a goroutine locked to an OS thread other
// than the main one, lets that goroutine end without unlocking, so that the
// runtime ends the thread as well, and returns once the thread is gone. It
// is for tests of Pdeathsig, which the kernel sends when the thread that
// started a process exits, not the parent process.
func RunOnEndingThread(t testing.TB, fn func()) {
	t.Helper()
	tids := make(chan int, 1)
	release := make(chan struct{})
	defer close(release)
	tid := os.Getpid()
	for tid == os.Getpid() {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
			id := syscall.Gettid()
			if id == os.Getpid() {
				// The runtime never ends the main thread: keep it busy
				// here, so that the next goroutine gets another.
				tids <- id
				<-release
				runtime.UnlockOSThread()
				return
			}
			defer func() { tids <- id }() // also if fn calls t.Fatal
			fn()
		}()
		tid = <-tids
	}
	task := "/proc/self/task/" + strconv.Itoa(tid)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d did not exit", tid)
		}
		runtime.Gosched()
	}
}
