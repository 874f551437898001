// Package spawn starts child processes so that a parent-death signal
// (syscall.SysProcAttr.Pdeathsig) comes only when the parent dies.
package spawn

import (
	"os/exec"
	"runtime"
)

// Start starts cmd and then runs wait, which must end by calling cmd.Wait,
// on one goroutine locked to the OS thread that started cmd.
//
// Why the lock: the kernel sends Pdeathsig when the thread that started the
// child exits, not when the process does, and the Go runtime ends a thread
// when a goroutine locked to it (runtime.LockOSThread) returns without
// unlocking. Any later goroutine could be that one on the starting thread.
// Holding the thread until the child has been waited for leaves it
// nothing to run but this goroutine.
func Start(cmd *exec.Cmd, wait func()) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			wait()
		}
	}()
	return <-started
}
