package redistest

import "syscall"

// sysProcAttr makes the kernel SIGKILL the child if the test binary dies
// without running cleanups (test timeout panic, os.Exit, SIGKILL), so no
// orphaned redis-server keeps running. (launch starts it through spawn,
// so the thread that forked it does not exit before it.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
