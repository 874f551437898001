package main

import "syscall"

// childProcAttr puts a helper process (private redis-server, demo worker)
// in its own process group, so that a Ctrl-C at the terminal reaches dlock
// alone and dlock stops its helpers in order, and has the kernel kill it if
// dlock dies without cleaning up.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
