//go:build linux

package main

import (
	"bufio"
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

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/tcpproxy"
	"github.com/dlock-go/dlock/internal/testutil"
)

// How dlock ends when it is signalled or killed: what it leaves behind.

// A dlock that is killed outright (SIGKILL: `timeout -k`, the OOM killer)
// can neither renew the lock nor stop COMMAND. Its lease then runs out and
// another client takes the lock: COMMAND must not go on working beside it.
func TestRunKilledDlockDoesNotLeaveCommandRunning(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	const key = "killed-dlock"
	p := start(t, baseEnv("PIDF="+pidFile), "--redis", sharedURL(), "--ttl", "600ms",
		"run", key, "--", "sh", "-c", `echo $$ > "$PIDF"; exec sleep 1000`)
	waitUntil(t, 10*time.Second, "the command to start", func() bool { return strings.HasSuffix(fileText(pidFile), "\n") })
	pid, err := strconv.Atoi(strings.TrimSpace(fileText(pidFile)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Another client gets the lock once the lease has run out.
	l, err := lockClient(t, shared.Addr()).Lock(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	waitUntil(t, 3*time.Second, "COMMAND (pid "+strconv.Itoa(pid)+") to be stopped: dlock was killed and another client holds the lock now",
		func() bool { return processGone(pid) })
}

// README: "On your own server it uses keys under a random demo name and
// deletes them." An interrupted demo (Ctrl-C, or the terminal closing:
// SIGHUP) must not leave the lock its frozen worker held, nor its data.
func TestDemoInterruptedLeavesNoKeys(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			p := start(t, nil, "--redis", redisURL(srv.Addr()), "demo", "--workers", "2", "--increments", "5", "--lease", "1m")
			// Worker A holds the fenced lock with a 1m lease, and is frozen.
			waitUntil(t, 30*time.Second, "the frozen scene", func() bool {
				return len(rdb.Keys(t.Context(), "dlock:{demo-*:fenced}").Val()) == 1
			})
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			code := p.wait(t)
			if code != 128+int(sig) {
				t.Errorf("exit status %d after %v, want %d", code, sig, 128+int(sig))
			}
			if keys := rdb.Keys(t.Context(), "*").Val(); len(keys) != 0 {
				t.Errorf("after %v (exit status %d) the demo left keys behind: %q\nstderr: %s", sig, code, keys, p.stderr.String())
			}
		})
	}
}

// The private redis-server of the demo lives in a temporary directory,
// removed at the end: also when the terminal closes (SIGHUP).
func TestDemoHangupRemovesPrivateServerDir(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	p := start(t, baseEnv("TMPDIR="+tmp), "demo", "--lease", "1m")
	// The private server runs, and so do the workers.
	waitUntil(t, 30*time.Second, "a demo worker", func() bool {
		for _, pid := range descendants(p.cmd.Process.Pid) {
			if strings.Contains(fileText("/proc/"+strconv.Itoa(pid)+"/cmdline"), "demo-worker") {
				return true
			}
		}
		return false
	})
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	code := p.wait(t)
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("after SIGHUP (exit status %d) the demo left %s/%s behind\nstderr: %s", code, tmp, ents[0].Name(), p.stderr.String())
	}
}

// An interrupted bench must release the lock a worker holds: it used to
// release it with the cancelled context, so the release was never sent
// and the lock stayed held for a whole --ttl.
func TestBenchInterruptedReleasesLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	p := start(t, nil, "--redis", redisURL(srv.Addr()), "--ttl", "1m", "bench",
		"--goroutines", "0", "--workers", "1", "--hold", "1s", "--duration", "30s")
	waitUntil(t, 30*time.Second, "a worker to hold the lock", func() bool {
		return len(rdb.Keys(t.Context(), "dlock:{bench-*:c}").Val()) == 1
	})
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 130 {
		t.Errorf("exit status %d, want 130\nstderr: %s", code, p.stderr.String())
	}
	if keys := rdb.Keys(t.Context(), "*").Val(); len(keys) != 0 {
		t.Errorf("the interrupted bench left keys behind: %q", keys)
	}
}

// README: 128+N means "interrupted by signal N ... during demo or bench,
// after cleaning up". That holds from the start: a Ctrl-C while the private
// redis-server starts, or while dlock connects to a server that does not
// answer yet, is an interruption (130), not an unreachable Redis (69).
func TestDemoAndBenchInterruptedWhileStarting(t *testing.T) {
	t.Parallel()
	realServer := redistest.BinaryPath(t)
	// slowServer puts in $PATH a redis-server that starts only once a line
	// comes on a FIFO (it never does), and says when it has been started.
	slowServer := func(t *testing.T) (env []string, started func() bool) {
		dir := t.TempDir()
		mark, fifo := filepath.Join(dir, "started"), filepath.Join(dir, "go")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(dir, "bin")
		script := fmt.Sprintf("#!/bin/sh\necho started > '%s'\nread x < '%s'\nexec '%s' \"$@\"\n", mark, fifo, realServer)
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		testutil.WriteScript(t, filepath.Join(bin, "redis-server"), script)
		return baseEnv("PATH=" + bin + ":" + os.Getenv("PATH")), func() bool { return fileText(mark) != "" }
	}
	interrupt := func(t *testing.T, p *proc) {
		t.Helper()
		if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t); code != 130 {
			t.Errorf("exit status %d after SIGINT, want 130\nstderr: %s", code, p.stderr.String())
		}
	}
	for _, args := range [][]string{{"demo"}, {"bench", "--private"}} {
		t.Run(strings.Join(args, " ")+" starting its server", func(t *testing.T) {
			t.Parallel()
			env, started := slowServer(t)
			p := start(t, env, args...)
			waitUntil(t, 10*time.Second, "the private redis-server to be started", started)
			interrupt(t, p)
		})
	}
	t.Run("bench connecting", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		proxy, err := tcpproxy.New(srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer proxy.Close()
		proxy.Freeze()
		rdb := srv.Client(t)
		p := start(t, nil, "--redis", redisURL(proxy.Addr()), "bench")
		// The proxy dials the server for each connection it accepts.
		waitUntil(t, 10*time.Second, "dlock to connect", func() bool {
			return strings.Count(rdb.ClientList(t.Context()).Val(), "\n") >= 2
		})
		interrupt(t, p)
	})
}

// startIgnoringHangup starts dlock as start does, but with SIGHUP ignored,
// as nohup starts it: sh ignores it and execs dlock.
func startIgnoringHangup(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.Command("sh", append([]string{"-c", `trap '' HUP; exec "$@"`, "sh", dlockBin}, args...)...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
	return p
}

// `nohup dlock run KEY -- COMMAND &` (or a shell's background job, started
// with SIGINT and SIGQUIT ignored) must leave COMMAND as nohup leaves it:
// a signal dlock was started ignoring is not caught and forwarded (that
// would make the hang-up at logout kill COMMAND), and COMMAND inherits it
// ignored, as it would without dlock in between.
func TestRunKeepsIgnoredSignalsIgnored(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "log")
	const key = "nohup"
	p := startIgnoringHangup(t, baseEnv("LOG="+log), "--redis", sharedURL(), "run", key, "--", "sh", "-c",
		`trap 'echo USR1 >> "$LOG"; exit 0' USR1; echo started >> "$LOG"; sleep 1000 & wait`)
	waitUntil(t, 10*time.Second, "the command to start", func() bool { return fileText(log) == "started\n" })
	// The hang-up must not reach COMMAND; the SIGUSR1 after it must (and
	// ends it: dlock forwards signals in the order they came).
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1} {
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit status %d, want 0: the SIGHUP that nohup ignores killed COMMAND; log %q; stderr:\n%s", code, fileText(log), p.stderr.String())
	}
	if got := fileText(log); got != "started\nUSR1\n" {
		t.Errorf("command log %q", got)
	}
	if info := inspect(t, lockClient(t, shared.Addr()), key); info.Held {
		t.Errorf("lock still held after dlock exited: %+v", info)
	}
}

// `nohup dlock bench > out &` (or a script's background job) must run to
// its end when the terminal closes, as `run` does
// (TestRunKeepsIgnoredSignalsIgnored): a SIGHUP (or SIGINT) dlock was
// started ignoring stays ignored, and does not interrupt the bench (129).
func TestBenchKeepsIgnoredHangupIgnored(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	p := startIgnoringHangup(t, baseEnv(), "--redis", redisURL(srv.Addr()), "bench", "--goroutines", "1", "--workers", "0", "--duration", "3s")
	// The uncontended scenario runs once its key's fence counter exists.
	waitUntil(t, 30*time.Second, "the bench to run", func() bool {
		return len(rdb.Keys(t.Context(), "dlock:{bench-*:u:0}:fence").Val()) == 1
	})
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 0 || !strings.Contains(p.stdout.String(), "pairs/s") {
		t.Fatalf("exit status %d after a SIGHUP that nohup ignores, want 0 and a report\nstdout:\n%s\nstderr:\n%s", code, p.stdout.String(), p.stderr.String())
	}
}

// `dlock demo | head -1` and `dlock bench | head -1`: once the reader of
// stdout has gone, the next write must not kill dlock on the spot (SIGPIPE)
// before it has cleaned up: README: "On your own server it uses keys under
// a random demo name and deletes them"; the bench deletes its fence
// counters.
func TestDemoAndBenchStdoutClosedLeaveNoKeys(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"demo", "--workers", "2", "--increments", "5", "--lease", "200ms"},
		{"bench", "--goroutines", "2", "--workers", "2", "--duration", "200ms"},
	} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd := exec.Command(dlockBin, append([]string{"--redis", redisURL(srv.Addr())}, args...)...)
			cmd.Env, cmd.Stdout, cmd.Stderr = baseEnv(), w, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w.Close()
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
			// Read the first line, then go away, as `head -1` does.
			if _, err := bufio.NewReader(r).ReadString('\n'); err != nil {
				t.Fatal(err)
			}
			r.Close()
			<-done
			st := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if st.Signaled() {
				t.Errorf("dlock %s was killed by %v once its stdout was closed", args[0], st.Signal())
			} else if cmd.ProcessState.ExitCode() == 0 {
				t.Errorf("dlock %s exited 0 with its output cut short", args[0])
			}
			if keys := rdb.Keys(t.Context(), "*").Val(); len(keys) != 0 {
				t.Errorf("dlock %s (%v) left keys behind once its stdout was closed: %q\nstderr: %s", args[0], cmd.ProcessState, keys, stderr.String())
			}
		})
	}
}

// `dlock list | head -1`: once the reader of stdout has gone, the next
// write ends dlock by SIGPIPE, as it does ls (README: the shell's 141), not
// with an error of its own. Past a pipe's buffer of names, list is still
// writing when the reader goes.
func TestListStdoutClosedEndsBySIGPIPE(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := lockClient(t, srv.Addr())
	for i := range 100 {
		if _, err := c.Lock(t.Context(), fmt.Sprintf("%04d-%s", i, strings.Repeat("k", 1000))); err != nil {
			t.Fatal(err)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd := exec.Command(dlockBin, "--redis", redisURL(srv.Addr()), "list")
	cmd.Env, cmd.Stdout, cmd.Stderr = baseEnv(), w, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if _, err := bufio.NewReader(r).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	r.Close()
	_ = cmd.Wait()
	if st := cmd.ProcessState.Sys().(syscall.WaitStatus); !st.Signaled() || st.Signal() != syscall.SIGPIPE {
		t.Errorf("dlock list ended %v once its stdout was closed, want killed by SIGPIPE\nstderr: %s", cmd.ProcessState, stderr.String())
	}
}

// A signal that comes once the lock is granted but before COMMAND starts
// ends the run as one during the wait does: COMMAND does not start, the
// lock is released at once (not left to its lease), and dlock exits 128+N.
// The window is held open by a full stderr pipe: with --verbose the grant
// is logged before dlock goes on, and that write blocks until it is read.
func TestRunSignalAfterGrantBeforeCommandStarts(t *testing.T) {
	t.Parallel()
	c := lockClient(t, shared.Addr())
	key := testKey(t)
	r, w := fullPipe(t)
	defer r.Close()
	p := &proc{cmd: exec.Command(dlockBin, "--verbose", "--redis", sharedURL(), "run", key, "--", "sh", "-c", "echo ran"), done: make(chan struct{})}
	p.cmd.Env = baseEnv()
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, w
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
	waitUntil(t, 10*time.Second, "dlock to get the lock", func() bool { return inspect(t, c, key).Held })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Unblocked before its runtime has passed the signal on (the kernel
	// has delivered it, and no thread is left running), dlock could start
	// COMMAND and forward the signal to it.
	waitUntil(t, 10*time.Second, "dlock to take the signal", func() bool {
		return !signalPending(p.cmd.Process.Pid, syscall.SIGTERM) && !anyThreadRunning(p.cmd.Process.Pid)
	})
	stderr := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); stderr <- b }()
	code := p.wait(t)
	errText := <-stderr
	if code != 128+15 {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, 128+15, errText)
	}
	if strings.Contains(p.stdout.String(), "ran") {
		t.Error("the command ran after dlock was interrupted")
	}
	if info := inspect(t, c, key); info.Held {
		t.Errorf("lock still held after dlock exited: %+v", info)
	}
}

// processState is the state letter of process pid (Linux /proc): 'T' when
// stopped, 0 if it cannot be read.
func processState(pid int) byte {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	if rest == "" {
		return 0
	}
	return rest[0]
}

// A SIGTSTP to dlock (Ctrl-Z of a job that was started in the background,
// where COMMAND has a process group of its own) stops COMMAND and dlock
// together, as a shell job stops, and a SIGCONT to dlock (fg, bg) resumes
// both. Were dlock to stop alone, COMMAND would work on while nothing
// renews the lock.
func TestRunStopAndContinueReachCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile, fifo := filepath.Join(dir, "pid"), filepath.Join(dir, "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	key := testKey(t)
	p := start(t, baseEnv("PIDF="+pidFile, "FIFO="+fifo), "--redis", sharedURL(), "run", key, "--",
		"sh", "-c", `echo $$ > "$PIDF"; read x < "$FIFO"; echo done`)
	waitUntil(t, 10*time.Second, "the command to start", func() bool { return strings.HasSuffix(fileText(pidFile), "\n") })
	pid, err := strconv.Atoi(strings.TrimSpace(fileText(pidFile)))
	if err != nil {
		t.Fatal(err)
	}
	dpid := p.cmd.Process.Pid
	if err := p.cmd.Process.Signal(syscall.SIGTSTP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "dlock and the command to be stopped", func() bool {
		return processState(dpid) == 'T' && processState(pid) == 'T'
	})
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "dlock and the command to go on", func() bool {
		return processState(dpid) != 'T' && processState(pid) != 'T'
	})
	release(t, fifo)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", code, p.stderr.String())
	}
	if got := p.stdout.String(); got != "done\n" {
		t.Errorf("stdout %q", got)
	}
	if info := inspect(t, lockClient(t, shared.Addr()), key); info.Held {
		t.Errorf("lock still held after dlock exited: %+v", info)
	}
}

// signalPending reports whether sig is pending for process pid, not yet
// taken by any of its threads (Linux /proc).
func signalPending(pid int, sig syscall.Signal) bool {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(status), "\n") {
		name, mask, ok := strings.Cut(line, ":\t")
		if !ok || (name != "SigPnd" && name != "ShdPnd") {
			continue
		}
		if m, err := strconv.ParseUint(mask, 16, 64); err == nil && m&(1<<(sig-1)) != 0 {
			return true
		}
	}
	return false
}

// anyThreadRunning reports whether a thread of process pid is running or
// runnable (Linux /proc).
func anyThreadRunning(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err == nil && processState(tid) == 'R' {
			return true
		}
	}
	return false
}

// A signal that came before the watch of a wait was stopped is the stop's
// to return, even if it came just as the wait ended (the lock granted):
// dropped, or left for the caller to forward once COMMAND runs, it would
// not keep COMMAND from starting after the interrupt. The watcher may not
// have run yet, or be about to cancel with it: many tries meet both.
func TestStopWatchingReturnsTheSignalThatCameBefore(t *testing.T) {
	for i := 0; i < 5000; i++ {
		sigs := make(chan os.Signal, 1)
		_, stop := watchSignals(sigs)
		sigs <- syscall.SIGTERM
		if err := stop(); err == nil {
			t.Fatalf("try %d: a SIGTERM that came before the stop is not returned (left in the channel: %v)", i, len(sigs) == 1)
		}
	}
}

// A lost lock stops COMMAND within --grace even while dlock's stderr is a
// pipe that is full and not read (a log reader that hangs): telling of the
// loss waits for the reader, and the SIGKILL must not wait with it, or a
// COMMAND that ignores SIGTERM works on without the lock for as long as
// the reader hangs.
func TestRunLostLockWithBlockedStderr(t *testing.T) {
	t.Parallel()
	key := testKey(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	r, w := fullPipe(t)
	defer r.Close()
	p := &proc{cmd: exec.Command(dlockBin, "--redis", sharedURL(), "--ttl", "600ms", "run", "--grace", "200ms", key, "--",
		"sh", "-c", `trap '' TERM; echo $$ > "$PIDF"; exec sleep 1000`), done: make(chan struct{})}
	p.cmd.Env = baseEnv("PIDF=" + pidFile)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, w
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if pid, err := strconv.Atoi(strings.TrimSpace(fileText(pidFile))); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	waitUntil(t, 10*time.Second, "the command to start", func() bool { return strings.HasSuffix(fileText(pidFile), "\n") })
	pid, err := strconv.Atoi(strings.TrimSpace(fileText(pidFile)))
	if err != nil {
		t.Fatal(err)
	}
	if err := lockClient(t, shared.Addr()).ForceRelease(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the command to be killed after --grace", func() bool { return processGone(pid) })
	stderr := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); stderr <- b }()
	code := p.wait(t)
	errText := strings.TrimLeft(string(<-stderr), "\x00") // after what filled the pipe
	if code != exitLockLost {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitLockLost, errText)
	}
	for _, want := range []string{`lost the lock "` + key + `"`, "SIGKILL ended it", "its status: 137"} {
		if !strings.Contains(errText, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errText)
		}
	}
}

// fullPipe returns a pipe whose buffer is full: a write to w blocks until
// r is read. w is for a child's stderr, which then blocks on its first
// write.
func fullPipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	r, w = os.NewFile(uintptr(fds[0]), "stderr-r"), os.NewFile(uintptr(fds[1]), "stderr-w")
	for {
		if _, err := syscall.Write(fds[1], make([]byte, 4096)); err == syscall.EAGAIN {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.SetNonblock(fds[1], false); err != nil {
		t.Fatal(err)
	}
	return r, w
}

// A COMMAND that is stopped (SIGSTOP, or a Ctrl-Z meant for it alone)
// when dlock stops it for a lost lock cannot act on the SIGTERM until it
// is continued: dlock sends SIGCONT after it, as a service manager does,
// so that it shuts down within --grace rather than being SIGKILLed when
// --grace ends.
func TestRunStopContinuesAStoppedCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log, pidFile := filepath.Join(dir, "log"), filepath.Join(dir, "pid")
	key := testKey(t)
	const grace = 30 * time.Second
	p := start(t, baseEnv("LOG="+log, "PIDF="+pidFile), "--redis", sharedURL(), "--ttl", "600ms",
		"run", "--grace", grace.String(), key, "--",
		"sh", "-c", `trap 'echo TERM >> "$LOG"; exit 3' TERM; echo $$ > "$PIDF"; echo started >> "$LOG"; sleep 1000 & wait`)
	waitUntil(t, 10*time.Second, "the command to start", func() bool { return fileText(log) == "started\n" })
	pid, err := strconv.Atoi(strings.TrimSpace(fileText(pidFile)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the command to be stopped", func() bool { return processState(pid) == 'T' })
	released := time.Now()
	if err := lockClient(t, shared.Addr()).ForceRelease(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != exitLockLost {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitLockLost, p.stderr.String())
	}
	if took := time.Since(released); took >= grace {
		t.Errorf("dlock exited %v after the loss: the stopped command waited out --grace %v", took.Round(time.Millisecond), grace)
	}
	if got := fileText(log); got != "started\nTERM\n" {
		t.Errorf("command log %q: it did not act on the SIGTERM", got)
	}
	if stderr := p.stderr.String(); !strings.Contains(stderr, "its status: 3") {
		t.Errorf("stderr lacks the command's own status 3:\n%s", stderr)
	}
}

// A worker of bench's contended scenario holds the lock for --hold: an
// interrupt during the hold ends the bench at once (releasing the lock),
// not once the hold is over.
func TestBenchInterruptedDuringHold(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	const hold = 30 * time.Second
	p := start(t, nil, "--redis", redisURL(srv.Addr()), "--ttl", "2m", "bench",
		"--goroutines", "0", "--workers", "1", "--hold", hold.String(), "--duration", "1m")
	// Held for a while, the lock is the hold's, not the warm-up's (taken
	// and released at once).
	c := lockClient(t, srv.Addr())
	waitUntil(t, 30*time.Second, "a worker to hold the lock for --hold", func() bool {
		keys := rdb.Keys(t.Context(), "dlock:{bench-*:c}").Val()
		if len(keys) != 1 {
			return false
		}
		info, err := c.Inspect(t.Context(), strings.TrimSuffix(strings.TrimPrefix(keys[0], "dlock:{"), "}"))
		return err == nil && info.Held && time.Since(info.AcquiredAt) > 200*time.Millisecond
	})
	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit status %d, want %d\nstderr: %s", code, 128+int(syscall.SIGTERM), p.stderr.String())
	}
	if took := time.Since(sent); took > hold/2 {
		t.Errorf("bench exited %v after SIGTERM: it waited for the --hold %v to end", took.Round(time.Millisecond), hold)
	}
	if keys := rdb.Keys(t.Context(), "*").Val(); len(keys) != 0 {
		t.Errorf("the interrupted bench left keys behind: %q", keys)
	}
}

// An interrupt while Redis hangs ends bench once the locks are given up
// and its fence counters deleted, each within a bound of its own, not
// after a round trip per key, each waiting out the read timeout and its
// retries: that took most of a minute with the default 32 goroutines.
func TestBenchInterruptedWithHungRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	p := start(t, nil, "--redis", redisURL(srv.Addr()), "bench", "--goroutines", "32", "--duration", "1m")
	waitUntil(t, 30*time.Second, "the last goroutine to lock", func() bool {
		return len(rdb.Keys(t.Context(), "*:u:31}:fence").Val()) > 0
	})
	srv.Pause(t)
	defer srv.Resume(t)
	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit status %d, want %d\nstderr: %s", code, 128+int(syscall.SIGTERM), p.stderr.String())
	}
	// The release (releaseTimeout), the cleanup (as long) and closing the
	// Client (as long), with room for a loaded machine.
	if took, bound := time.Since(sent), 6*releaseTimeout; took > bound {
		t.Errorf("bench exited %v after SIGTERM with Redis hung, more than %v", took.Round(time.Millisecond), bound)
	}
}
