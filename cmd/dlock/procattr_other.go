//go:build unix && !linux

package main

import "syscall"

// childProcAttr puts a helper process (private redis-server, demo worker)
// in its own process group, so that a Ctrl-C at the terminal reaches dlock
// alone and dlock stops its helpers in order.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// commandProcAttr is the SysProcAttr of `run`'s COMMAND: in its own process
// group if ownGroup.
func commandProcAttr(ownGroup bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: ownGroup}
}

// descendants is unknown here: at an interactive terminal a lost lock stops
// the command alone.
func descendants(int) []int { return nil }

// groupMembers is unknown here: the kernel says whether the group has
// processes left, a zombie counting as one.
func groupMembers(int) ([]int, bool) { return nil, false }

// exitedProcess is unknown here: a process is taken as running until it is
// gone.
func exitedProcess(int) bool { return false }
