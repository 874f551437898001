//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// openPTY returns the master and slave ends of a new pseudo-terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal: %v", err)
	}
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatal(e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatal(e)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// atTerminal runs sh -c script with args as an interactive shell runs a
// command: in a new session whose controlling terminal is the
// pseudo-terminal slave, in its foreground process group. The session's
// leader stays until the test ends; its process group is killed then.
func atTerminal(t *testing.T, slave *os.File, env []string, script string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", script, "sh"}, args...)...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	// The whole process group: dlock and COMMAND share the leader's at a
	// terminal, and killing the leader alone leaves them running.
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-done })
	return cmd
}

// At an interactive terminal COMMAND shares dlock's process group, yet a
// lost lock must still stop what COMMAND started, as it does elsewhere
// (TestRunLostLockStopsCommand): dlock exits 79 saying "the command was
// stopped", and nothing of it may go on working without the lock.
func TestLostLockAtTerminalStopsTheCommandsProcesses(t *testing.T) {
	t.Parallel()
	master, slave := openPTY(t)
	go func() { _, _ = io.Copy(io.Discard, master) }() // the terminal's screen
	dir := t.TempDir()
	log, pidFile := filepath.Join(dir, "log"), filepath.Join(dir, "pid")
	exitFile := filepath.Join(dir, "exit")
	// An interactive session: its leader (the shell, here a small one that
	// stays until the test ends) runs dlock in the terminal's foreground
	// process group, and dlock ending is not the session ending.
	cmd := atTerminal(t, slave, baseEnv("LOG="+log, "PIDF="+pidFile, "EXITF="+exitFile),
		`"$@"; echo $? > "$EXITF"; exec sleep 1000`,
		dlockBin, "--redis", sharedURL(), "--ttl", "600ms", "run", "--grace", "2s", "lost-at-tty", "--",
		"sh", "-c", `sleep 1000 & echo $! > "$PIDF"; echo started >> "$LOG"; wait`)
	waitUntil(t, 10*time.Second, "the command to start", func() bool { return fileText(log) == "started\n" })
	pid, err := strconv.Atoi(strings.TrimSpace(fileText(pidFile)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if pg, _ := syscall.Getpgid(pid); pg != cmd.Process.Pid {
		t.Fatalf("the command runs in process group %d, not the terminal's foreground group (%d)", pg, cmd.Process.Pid)
	}
	if err := lockClient(t, shared.Addr()).ForceRelease(context.Background(), "lost-at-tty"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, processTimeout, "dlock to exit", func() bool { return fileText(exitFile) != "" })
	if code := strings.TrimSpace(fileText(exitFile)); code != strconv.Itoa(exitLockLost) {
		t.Fatalf("exit status %s, want %d", code, exitLockLost)
	}
	// The lock is free for others now: take it, as another dlock would.
	l, err := lockClient(t, shared.Addr()).TryLock(context.Background(), "lost-at-tty")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	waitUntil(t, 5*time.Second, fmt.Sprintf("the command's background process %d to be stopped: dlock exited %d (lock lost) and another client holds the lock now (fence %d)", pid, exitLockLost, l.Fence()),
		func() bool { return processGone(pid) })
}

// At a terminal, the processes COMMAND started are remembered from the last
// signal dlock passed on. One that has exited since may have given its PID
// to an unrelated process: a lost lock must not signal that one.
func TestLostLockAtTerminalSparesReusedPIDs(t *testing.T) {
	// Another process (a thread of a test binary running beside) may take
	// the exited child's PID before we can: then try with a new command.
	for attempt := 1; !spareReusedPID(t, fmt.Sprintf("stale-pids-%d", attempt)); attempt++ {
		if attempt == 3 {
			t.Fatal("could not get the PID reused: other processes took it first, 3 times")
		}
	}
}

// spareReusedPID runs the scenario of TestLostLockAtTerminalSparesReusedPIDs
// for key; false if another process took the exited child's PID first.
func spareReusedPID(t *testing.T, key string) bool {
	master, slave := openPTY(t)
	go func() { _, _ = io.Copy(io.Discard, master) }()
	dir := t.TempDir()
	log, pidFile, dlockPidFile := filepath.Join(dir, "log"), filepath.Join(dir, "pid"), filepath.Join(dir, "dpid")
	atTerminal(t, slave, baseEnv("LOG="+log, "PIDF="+pidFile, "DPIDF="+dlockPidFile),
		`"$@"; exec sleep 1000`,
		dlockBin, "--redis", sharedURL(), "--ttl", "600ms", "run", "--grace", "1s", key, "--",
		"sh", "-c", `echo $PPID > "$DPIDF"; trap 'echo usr1 >> "$LOG"' USR1; sleep 30 & echo $! > "$PIDF"; echo started >> "$LOG"; wait; wait; echo child-gone >> "$LOG"; exec sleep 1000`)
	waitUntil(t, 10*time.Second, "the command to start", func() bool { return strings.Contains(fileText(log), "started\n") })
	bg, _ := strconv.Atoi(strings.TrimSpace(fileText(pidFile)))
	dpid, _ := strconv.Atoi(strings.TrimSpace(fileText(dlockPidFile)))
	// Until it runs sleep, the child is the shell just forked, which may
	// still have the parent's trap: the signal would not end it.
	waitUntil(t, 10*time.Second, "the background child to run sleep", func() bool {
		return fileText(fmt.Sprintf("/proc/%d/comm", bg)) == "sleep\n"
	})
	// SIGUSR1 to dlock: forwarded to the command and its child `sleep 30`
	// (which dies of it); c.started = [bg].
	if err := syscall.Kill(dpid, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the background child to die", func() bool { return strings.Contains(fileText(log), "child-gone\n") })
	// An unrelated process gets bg's PID (forced here via ns_last_pid; on
	// a busy machine it happens by itself once PIDs wrap).
	var victim *exec.Cmd
	for i := 0; i < 2000 && victim == nil; i++ { // other processes starting meanwhile take it first
		if !processGone(bg) {
			return false // taken for good, by a process or a thread
		}
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(bg-1)), 0); err != nil {
			t.Fatalf("cannot force PID reuse: %v", err)
		}
		c := exec.Command("sleep", "1000")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		if c.Process.Pid == bg {
			victim = c
		} else {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	if victim == nil {
		return false
	}
	vdone := make(chan struct{})
	go func() { _ = victim.Wait(); close(vdone) }()
	t.Cleanup(func() { _ = victim.Process.Kill(); <-vdone })
	t.Logf("unrelated process %d (sleep 1000, not started by dlock) has the PID of the command's exited child", bg)
	// The lock is lost: dlock stops the command.
	if err := lockClient(t, shared.Addr()).ForceRelease(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, processTimeout, "dlock to stop the command and exit", func() bool { return processGone(dpid) })
	select {
	case <-vdone:
		t.Errorf("dlock killed unrelated process %d (%v): a stale PID from an earlier SIGUSR1", bg, victim.ProcessState)
	default:
		// Dead, but not reaped yet by the goroutine that waits for it.
		if processGone(bg) {
			t.Errorf("dlock killed unrelated process %d: a stale PID from an earlier SIGUSR1", bg)
		}
	}
	return true
}

// Ctrl-Z at a terminal stops dlock and COMMAND together, and fg resumes
// both: in the foreground COMMAND shares dlock's process group and the
// kernel does it; started in the background (then brought to the
// foreground) COMMAND has a group of its own, and dlock does it. A stopped
// dlock renews nothing: a stop longer than the lease loses the lock, and
// once resumed dlock stops COMMAND and exits 79, as for any lost lock. The
// shell does job control (set -m), as an interactive one does: the kernel
// stops no job of a session whose shell is not there to resume it.
func TestCtrlZAtTerminalStopsDlockWithCommand(t *testing.T) {
	for _, tc := range []struct {
		name, job string
		ownGroup  bool
	}{
		{"foreground", `"$@"`, false},
		{"background then fg", `"$@" & read x < "$FIFO"; fg`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			master, slave := openPTY(t)
			go func() { _, _ = io.Copy(io.Discard, master) }()
			dir := t.TempDir()
			pidFile, dlockPidFile := filepath.Join(dir, "pid"), filepath.Join(dir, "dpid")
			stopFile, exitFile, fifo := filepath.Join(dir, "stop"), filepath.Join(dir, "exit"), filepath.Join(dir, "fg")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			key := testKey(t)
			atTerminal(t, slave, baseEnv("PIDF="+pidFile, "DPIDF="+dlockPidFile, "STOPF="+stopFile, "EXITF="+exitFile, "FIFO="+fifo),
				`set -m; `+tc.job+`; echo $? > "$STOPF"; read x < "$FIFO"; fg; echo $? > "$EXITF"; exec sleep 1000`,
				dlockBin, "--redis", sharedURL(), "--ttl", "600ms", "run", "--grace", "1s", key, "--",
				"sh", "-c", `echo $PPID > "$DPIDF"; echo $$ > "$PIDF"; exec sleep 1000`)
			waitUntil(t, 10*time.Second, "the command to start", func() bool {
				return strings.HasSuffix(fileText(pidFile), "\n") && strings.HasSuffix(fileText(dlockPidFile), "\n")
			})
			pid, _ := strconv.Atoi(strings.TrimSpace(fileText(pidFile)))
			dpid, _ := strconv.Atoi(strings.TrimSpace(fileText(dlockPidFile)))
			dpg, _ := syscall.Getpgid(dpid)
			if pg, _ := syscall.Getpgid(pid); (pg != dpg) != tc.ownGroup {
				t.Fatalf("the command runs in process group %d, dlock in %d", pg, dpg)
			}
			if tc.ownGroup {
				release(t, fifo) // fg
			}
			waitUntil(t, 10*time.Second, "dlock to be in the foreground", func() bool { return foregroundGroup(dpid) == dpg })
			if _, err := master.Write([]byte{0x1a}); err != nil { // Ctrl-Z
				t.Fatal(err)
			}
			waitUntil(t, 10*time.Second, "the shell to see the job stopped", func() bool { return fileText(stopFile) != "" })
			// The shell reports the job stopped once dlock is; each process
			// of the group stops when it next runs, the command maybe later.
			waitUntil(t, 10*time.Second, "dlock and the command to be stopped (state T)", func() bool {
				return processState(dpid) == 'T' && processState(pid) == 'T'
			})
			c := lockClient(t, shared.Addr())
			waitUntil(t, 10*time.Second, "the lease to run out while dlock is stopped", func() bool { return !inspect(t, c, key).Held })
			release(t, fifo) // fg
			waitUntil(t, processTimeout, "dlock to exit", func() bool { return fileText(exitFile) != "" })
			if code := strings.TrimSpace(fileText(exitFile)); code != strconv.Itoa(exitLockLost) {
				t.Fatalf("exit status %s, want %d", code, exitLockLost)
			}
			waitUntil(t, 5*time.Second, "the command to be stopped", func() bool { return processGone(pid) })
		})
	}
}

// foregroundGroup is the foreground process group of the terminal of
// process pid (Linux /proc), or -1.
func foregroundGroup(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	f := strings.Fields(rest)
	if len(f) < 6 {
		return -1
	}
	pg, err := strconv.Atoi(f[5])
	if err != nil {
		return -1
	}
	return pg
}
