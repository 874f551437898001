package main

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// childProcAttr puts a helper process (private redis-server, demo worker)
// in its own process group, so that a Ctrl-C at the terminal reaches dlock
// alone and dlock stops its helpers in order, and has the kernel kill it if
// dlock dies without cleaning up.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// commandProcAttr is the SysProcAttr of `run`'s COMMAND: in its own process
// group if ownGroup, and killed by the kernel if dlock dies without stopping
// it (SIGKILL): nothing renews the lock then, and another holder gets it
// once the lease runs out.
func commandProcAttr(ownGroup bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: ownGroup, Pdeathsig: syscall.SIGKILL}
}

// descendants returns the processes descending from pid now, read from
// /proc: what a command started in dlock's own process group (at an
// interactive terminal), which a signal to the command alone would miss.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}
