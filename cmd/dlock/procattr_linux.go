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
	children := map[int][]int{}
	eachProcess(func(p int, st procStat) {
		children[st.ppid] = append(children[st.ppid], p)
	})
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// groupMembers returns the processes of process group pgid that have not
// exited (zombies have), read from /proc; ok is false if it cannot be read.
func groupMembers(pgid int) (pids []int, ok bool) {
	ok = eachProcess(func(p int, st procStat) {
		if st.pgrp == pgid && !st.exited() {
			pids = append(pids, p)
		}
	})
	return pids, ok
}

// exitedProcess reports whether pid is a zombie, by /proc.
func exitedProcess(pid int) bool {
	st, ok := readStat(strconv.Itoa(pid))
	return ok && st.exited()
}

// procStat is what dlock reads of /proc/PID/stat.
type procStat struct {
	state      string
	ppid, pgrp int
}

// exited reports whether the process is a zombie (or being reaped).
func (st procStat) exited() bool { return st.state == "Z" || st.state == "X" }

// eachProcess calls fn with each process in /proc. It reports whether
// /proc could be read.
func eachProcess(fn func(pid int, st procStat)) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(e.Name()); ok {
			fn(p, st)
		}
	}
	return true
}

// readStat reads /proc/PID/stat of the process named pid in /proc.
func readStat(pid string) (procStat, bool) {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 3 {
		return procStat{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return procStat{}, false
	}
	return procStat{state: f[0], ppid: ppid, pgrp: pgrp}, true
}
