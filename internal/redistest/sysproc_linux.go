package redistest

import "syscall"

// sysProcAttr makes the kernel SIGKILL the child if the test binary dies
// without running cleanups (test timeout panic, os.Exit, SIGKILL), so no
// orphaned redis-server keeps running. Pdeathsig fires when the forking OS
// thread exits; Go only exits threads whose goroutine was locked with
// LockOSThread, which the harness never does.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
