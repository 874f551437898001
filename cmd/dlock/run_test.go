//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/tcpproxy"
	"github.com/dlock-go/dlock/internal/testutil"
)

func TestRunPassesExitStatusAndEnvironment(t *testing.T) {
	t.Parallel()
	r := dlockRun(t, nil, "--redis", sharedURL(), "run", "run-status", "--",
		"sh", "-c", `echo "$DLOCK_KEY $DLOCK_FENCE ${#DLOCK_TOKEN}"; exit 7`).want(t, 7)
	f := strings.Fields(r.stdout)
	if len(f) != 3 || f[0] != "run-status" || f[2] != "32" {
		t.Fatalf("command saw DLOCK_KEY DLOCK_FENCE len(DLOCK_TOKEN) = %q", r.stdout)
	}
	if fence, err := strconv.ParseUint(f[1], 10, 64); err != nil || fence == 0 {
		t.Fatalf("DLOCK_FENCE = %q", f[1])
	}
	if r.stderr != "" {
		t.Errorf("stderr: %q", r.stderr)
	}
	dlockRun(t, nil, "--redis", sharedURL(), "run", "run-status", "--", "true").want(t, 0)
	// 1 too, the status of most failures, with nothing said of it.
	if r := dlockRun(t, nil, "--redis", sharedURL(), "run", "run-status", "--", "false").want(t, 1); r.stderr != "" {
		t.Errorf("stderr: %q", r.stderr)
	}
	// Killed by a signal: 128 + its number, as a shell reports it.
	dlockRun(t, nil, "--redis", sharedURL(), "run", "run-status", "--", "sh", "-c", "kill -TERM $$").want(t, 128+15)
	r = dlockRun(t, nil, "--redis", sharedURL(), "run", "run-status", "--", "no-such-command-dlock").want(t, 127)
	if !strings.Contains(r.stderr, "command not found") {
		t.Errorf("stderr: %q", r.stderr)
	}
	if info := inspect(t, lockClient(t, shared.Addr()), "run-status"); info.Held {
		t.Errorf("lock still held after the commands: %+v", info)
	}
}

// A COMMAND that cannot be run exits as a shell (or env, timeout) reports
// it, without leaving the lock held: found in $PATH but not executable is
// 126 ("Permission denied"), not 127 and "command not found", which sends
// the user looking for a missing program; a script whose interpreter is
// missing (or a program whose loader is) is 127, as execve's ENOENT is.
func TestRunStatusOfCommandsThatCannotRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, file := range map[string]struct {
		text string
		mode fs.FileMode
	}{
		"dlock-no-x":      {"#!/bin/sh\ntrue\n", 0o644},
		"dlock-no-interp": {"#!/nonexistent/dlock-interp\n", 0o755},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(file.text), file.mode); err != nil {
			t.Fatal(err)
		}
	}
	env := baseEnv("PATH=" + dir + string(filepath.ListSeparator) + os.Getenv("PATH"))
	c := lockClient(t, shared.Addr())
	for _, tc := range []struct {
		command string
		code    int
		want    []string // in the one line on stderr
	}{
		{"dlock-no-x", 126, []string{"dlock-no-x: cannot run", "permission denied"}},
		{filepath.Join(dir, "dlock-no-interp"), 127, []string{"dlock-no-interp: cannot run", "no such file or directory"}},
	} {
		key := "run-cannot-" + filepath.Base(tc.command)
		r := dlockRun(t, env, "--redis", sharedURL(), "run", key, "--", tc.command).want(t, tc.code)
		if got := lines(r.stderr); len(got) != 1 || !strings.Contains(got[0], tc.want[0]) || !strings.Contains(got[0], tc.want[1]) {
			t.Errorf("%s: stderr %q: want one line with %q", tc.command, r.stderr, tc.want)
		}
		if info := inspect(t, c, key); info.Held {
			t.Errorf("%s: lock still held: %+v", tc.command, info)
		}
	}
}

// A COMMAND found through a relative $PATH entry ("bin", or "." and the
// empty entry, the current directory) runs, as a shell, env or timeout runs
// it: the user's $PATH says where to look.
func TestRunFindsCommandThroughRelativePath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := []byte("#!/bin/sh\necho \"ran $DLOCK_KEY\"\n")
	for _, p := range []string{"dlock-rel-here", filepath.Join("bin", "dlock-rel-bin")} {
		if err := os.WriteFile(filepath.Join(dir, p), script, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ path, command string }{
		{"bin", "dlock-rel-bin"},
		{".", "dlock-rel-here"},
		{"", "dlock-rel-here"},
	} {
		key := testKey(t)
		env := baseEnv("PATH=" + tc.path + string(filepath.ListSeparator) + os.Getenv("PATH"))
		// dlock runs in dir, which the relative entries are relative to.
		p := startProgram(t, env, "/bin/sh", "-c", `cd "$1" && exec "$2" --redis "$3" run "$4" -- "$5"`,
			"sh", dir, dlockBin, sharedURL(), key, tc.command)
		if code := p.wait(t); code != exitOK || strings.TrimSpace(p.stdout.String()) != "ran "+key {
			t.Errorf("PATH=%q:... run -- %s: exit status %d, want 0\nstdout:\n%s\nstderr:\n%s",
				tc.path, tc.command, code, p.stdout.String(), p.stderr.String())
		}
	}
}

// TestRunMutualExclusion runs two `dlock run` processes whose commands log
// start and end markers; the first blocks (on a FIFO) until the second is
// queued, so their sections would interleave without the lock.
func TestRunMutualExclusion(t *testing.T) {
	t.Parallel()
	log, fifos := logAndFifos(t, 2)
	script := `echo "start $1" >> "$LOG"; read x < "$2"; echo "end $1" >> "$LOG"`
	env := baseEnv("LOG=" + log)
	runOne := func(n int) *proc {
		return start(t, env, "--redis", sharedURL(), "run", "mutex", "--",
			"sh", "-c", script, "sh", strconv.Itoa(n), fifos[n-1])
	}
	c := lockClient(t, shared.Addr())

	p1 := runOne(1)
	waitUntil(t, 10*time.Second, "the first command to start", func() bool { return fileText(log) == "start 1\n" })
	p2 := runOne(2)
	waitUntil(t, 10*time.Second, "the second dlock to queue", func() bool { return inspect(t, c, "mutex").Waiters == 1 })
	if got := fileText(log); got != "start 1\n" {
		t.Fatalf("second command started while the first held the lock:\n%s", got)
	}
	release(t, fifos[0])
	waitUntil(t, 10*time.Second, "the second command to start", func() bool { return strings.Contains(fileText(log), "start 2") })
	release(t, fifos[1])
	if c1, c2 := p1.wait(t), p2.wait(t); c1 != 0 || c2 != 0 {
		t.Fatalf("exit statuses %d, %d\n%s\n%s", c1, c2, p1.stderr.String(), p2.stderr.String())
	}
	if got, want := fileText(log), "start 1\nend 1\nstart 2\nend 2\n"; got != want {
		t.Fatalf("log:\n%s\nwant:\n%s", got, want)
	}
}

// TestRunSemaphore runs two `dlock run --capacity 2` commands at once,
// both blocked on FIFOs: a third is refused with --no-wait, and with
// --permits 2 waits for both to end.
func TestRunSemaphore(t *testing.T) {
	t.Parallel()
	log, fifos := logAndFifos(t, 2)
	script := `echo "start $1" >> "$LOG"; [ -z "$2" ] || read x < "$2"; echo "end $1" >> "$LOG"`
	env := baseEnv("LOG=" + log)
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr()})
	defer rdb.Close()
	runOne := func(name string, fifo string, flags ...string) *proc {
		args := append([]string{"--redis", sharedURL(), "run", "--capacity", "2"}, flags...)
		return start(t, env, append(args, "encoders", "--", "sh", "-c", script, "sh", name, fifo)...)
	}
	p1, p2 := runOne("1", fifos[0]), runOne("2", fifos[1])
	waitUntil(t, 10*time.Second, "both commands to start", func() bool {
		return strings.Contains(fileText(log), "start 1") && strings.Contains(fileText(log), "start 2")
	})
	r := dlockRun(t, nil, "--redis", sharedURL(), "run", "--capacity", "2", "--no-wait", "encoders", "--", "true").want(t, exitNotObtained)
	if !strings.Contains(r.stderr, `semaphore "encoders" cannot give 1 of its 2 permits now (held, or others wait first); not waiting`) {
		t.Errorf("stderr: %q", r.stderr)
	}
	both := runOne("both", "", "--permits", "2")
	waitUntil(t, 10*time.Second, "the 2-permit dlock to queue", func() bool {
		return rdb.ZCard(context.Background(), "dlock:{encoders}:semaphore:queue").Val() == 1
	})
	release(t, fifos[0])
	if code := p1.wait(t); code != 0 {
		t.Fatalf("exit status %d\n%s", code, p1.stderr.String())
	}
	// The first dlock has given its permit back: had that let the 2-permit
	// one in, its release would have granted it, at once.
	if n := testutil.SemaphoreHolders(t, rdb, "dlock:{encoders}:semaphore"); n != 1 || strings.Contains(fileText(log), "start both") {
		t.Fatalf("%d holders with one permit free; log:\n%s", n, fileText(log))
	}
	release(t, fifos[1])
	for _, p := range []*proc{p2, both} {
		if code := p.wait(t); code != 0 {
			t.Fatalf("exit status %d\n%s", code, p.stderr.String())
		}
	}
	if got := fileText(log); !strings.HasSuffix(got, "end 2\nstart both\nend both\n") {
		t.Fatalf("log:\n%s", got)
	}
}

// logAndFifos makes, in a new temporary folder, the path of a log file and
// n FIFOs that the commands of a test block on until it releases them.
func logAndFifos(t *testing.T, n int) (log string, fifos []string) {
	dir := t.TempDir()
	for i := range n {
		f := filepath.Join(dir, "go"+strconv.Itoa(i+1))
		if err := syscall.Mkfifo(f, 0o600); err != nil {
			t.Fatal(err)
		}
		fifos = append(fifos, f)
	}
	return filepath.Join(dir, "log"), fifos
}

// release writes a line to a FIFO a command reads, once it has opened it.
func release(t *testing.T, fifo string) {
	t.Helper()
	var f *os.File
	waitUntil(t, 10*time.Second, "a reader on "+fifo, func() bool {
		var err error
		f, err = os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		return err == nil // ENXIO until the reader opens it
	})
	defer f.Close()
	if _, err := f.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
}

func TestRunNoWaitAndBoundedWait(t *testing.T) {
	t.Parallel()
	c := lockClient(t, shared.Addr())
	l, err := c.Lock(context.Background(), "busy", dlock.WithMetadata("held by the test"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())

	r := dlockRun(t, nil, "--redis", sharedURL(), "run", "--no-wait", "busy", "--", "true").want(t, exitNotObtained)
	if !strings.Contains(r.stderr, `lock "busy" is held by pid `+strconv.Itoa(os.Getpid())) || !strings.Contains(r.stderr, "held by the test") {
		t.Errorf("stderr does not say who holds the lock: %q", r.stderr)
	}
	begin := time.Now()
	r = dlockRun(t, nil, "--redis", sharedURL(), "run", "--wait", "300ms", "busy", "--", "true").want(t, exitNotObtained)
	if waited := time.Since(begin); waited < 300*time.Millisecond {
		t.Errorf("gave up after %v, before --wait 300ms", waited)
	}
	if !strings.Contains(r.stderr, "not obtained within --wait 300ms") {
		t.Errorf("stderr: %q", r.stderr)
	}
	if n := len(lines(r.stderr)); n != 1 {
		t.Errorf("%d lines on stderr, want 1: %q", n, r.stderr)
	}
	if info := inspect(t, c, "busy"); info.Waiters != 0 {
		t.Errorf("%d waiters left in the queue", info.Waiters)
	}
}

// TestRunLostLockStopsCommand force-releases the lock of a running
// command: dlock learns it at its next renewal, sends SIGTERM to the
// command's process group, SIGKILLs what is left of it when --grace ends,
// and exits with status 79.
func TestRunLostLockStopsCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log, pidFile := filepath.Join(dir, "log"), filepath.Join(dir, "pid")
	// The background sleep ignores SIGTERM: it must still not outlive dlock.
	script := stoppableScript
	p := start(t, baseEnv("LOG="+log, "PIDF="+pidFile),
		"--redis", sharedURL(), "--ttl", "600ms", "run", "--grace", "2s", "lost", "--", "sh", "-c", script)
	waitUntil(t, 10*time.Second, "the command to start", func() bool { return fileText(log) == "started\n" })
	if err := lockClient(t, shared.Addr()).ForceRelease(context.Background(), "lost"); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != exitLockLost {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitLockLost, p.stderr.String())
	}
	stderr := p.stderr.String()
	for _, want := range []string{`lost the lock "lost"`, "SIGTERM", `lock "lost" was lost while the command ran`, "its status: 3",
		"what the command started did not exit within --grace 2s: SIGKILL ended it"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	commandStopped(t, log, pidFile)
}

// stoppableScript is a command (sh -c) that logs "started" and then "TERM"
// when it gets SIGTERM (and exits 3), to $LOG, and starts a background
// process that ignores SIGTERM, whose pid it writes to $PIDF.
const stoppableScript = `trap 'echo TERM >> "$LOG"; exit 3' TERM
(trap '' TERM; exec sleep 1000) & echo $! > "$PIDF"
echo started >> "$LOG"
wait`

// commandStopped checks that the command of stoppableScript got SIGTERM
// (its log) and that its background process, which ignores SIGTERM, was
// killed with its process group.
func commandStopped(t *testing.T, log, pidFile string) {
	t.Helper()
	if got := fileText(log); got != "started\nTERM\n" {
		t.Errorf("command log %q: it did not get SIGTERM", got)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(fileText(pidFile)))
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the command's background process to be killed", func() bool { return processGone(pid) })
}

func TestRunLostLockKillsAfterGrace(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "log")
	p := start(t, baseEnv("LOG="+log), "--redis", sharedURL(), "--ttl", "600ms",
		"run", "--grace", "200ms", "stubborn", "--", "sh", "-c", `trap '' TERM; echo started >> "$LOG"; sleep 1000`)
	waitUntil(t, 10*time.Second, "the command to start", func() bool { return fileText(log) == "started\n" })
	if err := lockClient(t, shared.Addr()).ForceRelease(context.Background(), "stubborn"); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != exitLockLost {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitLockLost, p.stderr.String())
	}
	stderr := p.stderr.String()
	for _, want := range []string{"did not exit within --grace 200ms: SIGKILL ended it", "its status: 137"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

// With --grace 0 the SIGKILL follows the SIGTERM at once: dlock says the
// command did not exit in time only if SIGKILL is what ended it, not when
// the SIGTERM already had.
func TestRunLostLockGraceZero(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script string
		status       string
		killed       bool
	}{
		{"ends at SIGTERM", `echo started >> "$LOG"; exec sleep 1000`, "its status: 143", false},
		{"ignores SIGTERM", `trap '' TERM; echo started >> "$LOG"; exec sleep 1000`, "its status: 137", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := "grace-zero-" + strconv.FormatBool(tc.killed)
			log := filepath.Join(t.TempDir(), "log")
			p := start(t, baseEnv("LOG="+log), "--redis", sharedURL(), "--ttl", "600ms",
				"run", "--grace", "0s", key, "--", "sh", "-c", tc.script)
			waitUntil(t, 10*time.Second, "the command to start", func() bool { return fileText(log) == "started\n" })
			if err := lockClient(t, shared.Addr()).ForceRelease(context.Background(), key); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t); code != exitLockLost {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitLockLost, p.stderr.String())
			}
			stderr := p.stderr.String()
			if !strings.Contains(stderr, tc.status) {
				t.Errorf("stderr lacks %q:\n%s", tc.status, stderr)
			}
			if said := strings.Contains(stderr, "did not exit within --grace 0s"); said != tc.killed {
				t.Errorf("stderr says the command did not exit within --grace: %v, want %v:\n%s", said, tc.killed, stderr)
			}
		})
	}
}

// TestRunForwardsSignals sends SIGTERM and SIGINT to dlock: the command
// gets them, dlock exits with the command's status, and the lock is free.
func TestRunForwardsSignals(t *testing.T) {
	t.Parallel()
	c := lockClient(t, shared.Addr())
	for _, tc := range []struct {
		sig    syscall.Signal
		script string
		want   int
	}{
		// The command handles the signal and exits 42.
		{syscall.SIGTERM, `trap 'echo got >> "$LOG"; exit 42' TERM; echo started >> "$LOG"; sleep 1000 & wait`, 42},
		// The command dies of it: 128 + 2.
		{syscall.SIGINT, `echo started >> "$LOG"; exec sleep 1000`, 130},
	} {
		key := "forward-" + tc.sig.String()
		log := filepath.Join(t.TempDir(), "log")
		p := start(t, baseEnv("LOG="+log), "--redis", sharedURL(), "run", key, "--", "sh", "-c", tc.script)
		waitUntil(t, 10*time.Second, "the command to start", func() bool { return strings.HasPrefix(fileText(log), "started\n") })
		if err := p.cmd.Process.Signal(tc.sig); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t); code != tc.want {
			t.Errorf("%v: exit status %d, want %d; stderr:\n%s", tc.sig, code, tc.want, p.stderr.String())
		}
		if tc.sig == syscall.SIGTERM && fileText(log) != "started\ngot\n" {
			t.Errorf("%v: the command did not get the signal: log %q", tc.sig, fileText(log))
		}
		if info := inspect(t, c, key); info.Held {
			t.Errorf("%v: lock still held after dlock exited: %+v", tc.sig, info)
		}
	}
}

// TestRunSignalWhileWaiting interrupts a dlock that waits for the lock: it
// leaves the queue and exits 128+15 without running the command.
func TestRunSignalWhileWaiting(t *testing.T) {
	t.Parallel()
	c := lockClient(t, shared.Addr())
	l, err := c.Lock(context.Background(), "waiting")
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, nil, "--redis", sharedURL(), "run", "waiting", "--", "sh", "-c", "echo ran")
	waitUntil(t, 10*time.Second, "dlock to queue", func() bool { return inspect(t, c, "waiting").Waiters == 1 })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 128+15 {
		t.Fatalf("exit status %d; stderr:\n%s", code, p.stderr.String())
	}
	if strings.Contains(p.stdout.String(), "ran") {
		t.Error("the command ran")
	}
	if info := inspect(t, c, "waiting"); info.Waiters != 0 || info.Owner != l.Token() {
		t.Errorf("after the interrupted wait: %+v", info)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// README:242-245: "If the lock is lost while COMMAND runs (force-released,
// Redis unreachable for a whole lease, --max-hold passed), they get
// SIGTERM, then SIGKILL after --grace, and dlock says so and exits 79."
// TestRunLostLockStopsCommand covers a force release only. Here Redis
// stops answering (a frozen connection, as in a partition): dlock must
// stop the command when its lease can no longer be trusted, and before the
// lock could be given to anyone else.
func TestRunLostLockWhenRedisUnreachable(t *testing.T) {
	t.Parallel()
	proxy, err := tcpproxy.New(shared.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	log := filepath.Join(t.TempDir(), "log")
	const key = "unreachable"
	p := start(t, baseEnv("LOG="+log), "--redis", redisURL(proxy.Addr()), "--ttl", "900ms",
		"run", "--grace", "20s", key, "--", "sh", "-c", `trap 'echo TERM >> "$LOG"; exit 3' TERM; echo started >> "$LOG"; while :; do sleep 0.05; done`)
	waitUntil(t, 10*time.Second, "the command to start", func() bool { return fileText(log) == "started\n" })
	// Another client, straight to Redis, queues for the lock: it must not
	// get it before the command was told to stop.
	other := lockClient(t, shared.Addr())
	type result struct {
		l   *dlock.Lock
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := other.Lock(context.Background(), key)
		got <- result{l, err, time.Now()}
	}()
	proxy.Freeze()
	frozen := time.Now()
	var termAt time.Time
	waitUntil(t, 5*time.Second, "the command to get SIGTERM", func() bool {
		if strings.Contains(fileText(log), "TERM") {
			termAt = time.Now()
			return true
		}
		return false
	})
	if d := termAt.Sub(frozen); d > 900*time.Millisecond+300*time.Millisecond {
		t.Errorf("SIGTERM %v after Redis became unreachable, want within the 900ms lease", d)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.l.Unlock(context.Background())
	t.Logf("frozen at 0, SIGTERM seen %v, other client acquired %v", termAt.Sub(frozen).Round(time.Millisecond), r.at.Sub(frozen).Round(time.Millisecond))
	if code := p.wait(t); code != exitLockLost {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitLockLost, p.stderr.String())
	}
	if d := time.Since(frozen); d > 10*time.Second {
		t.Errorf("dlock exited %v after Redis became unreachable", d)
	}
	stderr := p.stderr.String()
	for _, want := range []string{`lost the lock "unreachable"`, "SIGTERM", `lock "unreachable" was lost while the command ran`, "its status: 3"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

// TestRunMaxHoldStopsCommand: --max-hold bounds how long COMMAND runs
// under the lock. When it passes, COMMAND is stopped as for a lost lock
// (status 79), well before the lease it was last granted runs out, and the
// lock is free for the next holder when dlock exits.
func TestRunMaxHoldStopsCommand(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "log")
	began := time.Now()
	p := start(t, baseEnv("LOG="+log), "--redis", sharedURL(), "--ttl", "20s",
		"run", "--max-hold", "300ms", "--grace", "5s", "maxhold", "--", "sh", "-c", `echo started >> "$LOG"; exec sleep 1000`)
	if code := p.wait(t); code != exitLockLost {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitLockLost, p.stderr.String())
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("COMMAND was stopped %v after the start with --max-hold 300ms (the --ttl 20s lease ran out first)", took.Round(time.Millisecond))
	}
	if fileText(log) != "started\n" {
		t.Errorf("the command did not start")
	}
	if info := inspect(t, lockClient(t, shared.Addr()), "maxhold"); info.Held {
		t.Errorf("lock still held after dlock exited: %+v", info)
	}
}

// With --capacity, what --max-hold ends is permits of a semaphore, and
// dlock says so.
func TestRunMaxHoldPermits(t *testing.T) {
	t.Parallel()
	r := dlockRun(t, nil, "--redis", sharedURL(), "run", "--capacity", "2", "--max-hold", "100ms", "--grace", "5s", "maxhold-permits", "--",
		"sh", "-c", "exec sleep 1000").want(t, exitLockLost)
	for _, want := range []string{`--max-hold 100ms passed for permits of semaphore "maxhold-permits"`, `permits of semaphore "maxhold-permits": --max-hold 100ms passed while the command ran`} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, `lock "maxhold-permits"`) {
		t.Errorf("stderr speaks of a lock:\n%s", r.stderr)
	}
}

// TestRunMaxHoldKeepsLockDuringGrace: after --max-hold, COMMAND runs on
// for up to --grace, so the lock must stay dlock's until COMMAND is gone,
// although that is longer than the lease: renewal goes on through the
// grace period.
func TestRunMaxHoldKeepsLockDuringGrace(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "log")
	const ttl, maxHold = 500 * time.Millisecond, 200 * time.Millisecond
	// The command ignores SIGTERM, so it is SIGKILLed when --grace ends.
	script := `trap 'echo TERM >> "$LOG"' TERM
echo started >> "$LOG"
while :; do sleep 0.05; done`
	began := time.Now()
	p := start(t, baseEnv("LOG="+log), "--redis", sharedURL(), "--ttl", ttl.String(),
		"run", "--max-hold", maxHold.String(), "--grace", "3s", "graced", "--", "sh", "-c", script)
	waitUntil(t, 10*time.Second, "SIGTERM at --max-hold", func() bool { return fileText(log) == "started\nTERM\n" })
	// Time is the subject here: past the longest lease granted before
	// --max-hold (taken at most maxHold after the start, lasting ttl),
	// the lock is still held only if it was renewed since.
	time.Sleep(time.Until(began.Add(maxHold + 2*ttl)))
	if info := inspect(t, lockClient(t, shared.Addr()), "graced"); !info.Held {
		t.Errorf("lock free during --grace, while COMMAND still runs: %+v", info)
	}
	if code := p.wait(t); code != exitLockLost {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitLockLost, p.stderr.String())
	}
	if info := inspect(t, lockClient(t, shared.Addr()), "graced"); info.Held {
		t.Errorf("lock still held after dlock exited: %+v", info)
	}
}

// README: when the lock is lost or --max-hold passes, "COMMAND's process
// group ... gets SIGTERM, then SIGKILL after --grace". A shell COMMAND
// running its program in the foreground ends at the SIGTERM, while the
// program shuts down in its own time: the program has --grace too, and
// after --max-hold the lock stays dlock's until it is done.
func TestRunStopGivesTheCommandsProcessesTheirGrace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string // of run, before KEY
		lose bool     // force-release the lock
	}{
		{"lost lock", []string{"--grace", "20s"}, true},
		{"max hold", []string{"--max-hold", "300ms", "--grace", "20s"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			log, leaderFile, goFile := filepath.Join(dir, "log"), filepath.Join(dir, "leader"), filepath.Join(dir, "go")
			key := testKey(t)
			// The program cleans up on SIGTERM until the test says go.
			program := `trap 'echo TERM >> "$LOG"; until [ -e "$GO" ]; do sleep 0.01; done; echo cleaned >> "$LOG"; exit 0' TERM
echo started >> "$LOG"
while :; do sleep 0.05; done`
			args := append([]string{"--redis", sharedURL(), "--ttl", "600ms", "run"}, tc.args...)
			p := start(t, baseEnv("LOG="+log, "GO="+goFile, "LEADER="+leaderFile, "PROGRAM="+program),
				append(args, key, "--", "sh", "-c", `echo $$ > "$LEADER"; sh -c "$PROGRAM"; echo "the program exited $?"`)...)
			t.Cleanup(func() { _ = os.WriteFile(goFile, nil, 0o644) }) // before dlock is killed, if the test fails
			waitUntil(t, 10*time.Second, "the program to start", func() bool { return fileText(log) == "started\n" })
			leader, err := strconv.Atoi(strings.TrimSpace(fileText(leaderFile)))
			if err != nil {
				t.Fatal(err)
			}
			if tc.lose {
				if err := lockClient(t, shared.Addr()).ForceRelease(context.Background(), key); err != nil {
					t.Fatal(err)
				}
			}
			waitUntil(t, 10*time.Second, "the shell to exit at the SIGTERM", func() bool { return processGone(leader) })
			if !tc.lose {
				if info := inspect(t, lockClient(t, shared.Addr()), key); !info.Held {
					t.Errorf("lock free after --max-hold while the program still cleans up within --grace: %+v", info)
				}
			}
			if err := os.WriteFile(goFile, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t); code != exitLockLost {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitLockLost, p.stderr.String())
			}
			if got := fileText(log); got != "started\nTERM\ncleaned\n" {
				t.Errorf("program log %q: it was killed within --grace 20s, once the shell had exited; stderr:\n%s", got, p.stderr.String())
			}
			if strings.Contains(p.stderr.String(), "SIGKILL ended") {
				t.Errorf("stderr tells of a SIGKILL:\n%s", p.stderr.String())
			}
			if info := inspect(t, lockClient(t, shared.Addr()), key); info.Held && !tc.lose {
				t.Errorf("lock still held after dlock exited: %+v", info)
			}
		})
	}
}

// dlock as PID 1 (a container's entrypoint) inherits the orphans of a
// stopped shell COMMAND and reaps none: its program, once it has exited,
// stays a zombie in the process group. A zombie is not a process shutting
// down within --grace: dlock must not wait for it.
func TestRunStopAsPIDOneDoesNotWaitForZombies(t *testing.T) {
	t.Parallel()
	// A PID namespace of its own, with its own /proc, makes dlock PID 1; a
	// user namespace lets a user who is not root make one.
	unshare := []string{"--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--kill-child"}
	if out, err := exec.Command("unshare", append(unshare, "true")...).CombinedOutput(); err != nil {
		t.Fatalf("this test runs dlock as PID 1 with unshare(1) (util-linux), in user and PID namespaces of its own: %v %s", err, out)
	}
	const grace = 20 * time.Second
	began := time.Now()
	p := startProgram(t, nil, "unshare", append(unshare, dlockBin, "--redis", sharedURL(), "--ttl", "600ms",
		"run", "--max-hold", "300ms", "--grace", grace.String(), testKey(t), "--",
		"sh", "-c", `sh -c 'trap "exit 0" TERM; while :; do sleep 0.05; done'; echo "the program exited $?"`)...)
	if code := p.wait(t); code != exitLockLost {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitLockLost, p.stderr.String())
	}
	if took := time.Since(began); took > grace/2 {
		t.Errorf("dlock exited %v after it started, with --max-hold 300ms: it waited out --grace %v for a zombie; stderr:\n%s", took.Round(time.Millisecond), grace, p.stderr.String())
	}
	if strings.Contains(p.stderr.String(), "SIGKILL ended") {
		t.Errorf("stderr tells of a SIGKILL:\n%s", p.stderr.String())
	}
}

// README: "--meta TEXT is stored with the holder (default: COMMAND's
// name)". A name the library would refuse as metadata (bytes that are not
// UTF-8, a path over 1 KiB) is still a command dlock must run: the user
// gave no bad flag, so it must not end with a usage error (64).
func TestRunDefaultMetaFromAnyCommandName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	long := dir
	for _, c := range "abcde" {
		long = filepath.Join(long, strings.Repeat(string(c), 250))
	}
	if err := os.MkdirAll(long, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "caf\xe9.sh"), filepath.Join(long, "job.sh")} {
		testutil.WriteScript(t, path, "#!/bin/sh\necho ran\n")
		r := dlockRun(t, nil, "--redis", sharedURL(), "run", "meta-default", "--", path).want(t, 0)
		if r.stdout != "ran\n" {
			t.Errorf("%q: stdout %q", path, r.stdout)
		}
	}

	// The default is the whole name up to maxCommandMeta bytes, and the
	// end of a longer one (the program's own name) after "…".
	env := baseEnv("DLOCK_BIN="+dlockBin, "URL="+sharedURL())
	whole := filepath.Join(dir, strings.Repeat("w", maxCommandMeta-len(dir)-1))
	longer := filepath.Join(long, "meta.sh")
	for path, want := range map[string]string{
		whole:  whole,
		longer: "…" + longer[len(longer)-(maxCommandMeta-len("…")):],
	} {
		testutil.WriteScript(t, path, "#!/bin/sh\nexec \"$DLOCK_BIN\" --redis \"$URL\" inspect --json \"$DLOCK_KEY\"\n")
		r := dlockRun(t, env, "--redis", sharedURL(), "run", "meta-default", "--", path).want(t, 0)
		var info dlock.LockInfo
		if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || info.Holder.Data != want {
			t.Errorf("run of a command named with %d bytes: metadata %q (%v), want %q", len(path), info.Holder.Data, err, want)
		}
	}
}

// A lock lost just as the command exits, both ready when supervise looks
// (its select picks either), is reported as lost: the loss may have come
// first, and the command may have overlapped another holder. Do does the
// same.
func TestSuperviseReportsALossAsTheCommandExits(t *testing.T) {
	t.Parallel()
	c := lockClient(t, shared.Addr())
	ctx := context.Background()
	l, err := c.Lock(ctx, "supervise-race", dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ForceRelease(ctx, "supervise-race"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done(): // found by its next renewal
	case <-time.After(5 * time.Second):
		t.Fatal("the force-released lock was not found lost")
	}
	ch, err := startChild("/bin/true", []string{"true"}, os.Environ(), io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	<-ch.done
	a := &app{stdout: io.Discard, stderr: io.Discard}
	// Each call's select picks at random: 20 are all wrong by chance once
	// in a million runs.
	for range 20 {
		if err := a.supervise(ch, l, "lock", nil, time.Second, 0); !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("supervise of a command that exited as its lock was lost = %v, want ErrLockLost", err)
		}
	}
}

// A lock found lost as the command exits ends supervise without a stop
// (no SIGTERM, no --grace to wait): what the command left running in its
// process group would go on working without the lock, and is killed.
// supervise's select picks the loss or the exit first at random, and only
// the exit first skips the stop: ten rounds miss a kill left out once in
// a thousand runs.
func TestSuperviseKillsWhatALostCommandLeft(t *testing.T) {
	t.Parallel()
	c := lockClient(t, shared.Addr())
	ctx := context.Background()
	key := testKey(t)
	a := &app{stdout: io.Discard, stderr: io.Discard}
	for range 10 {
		l, err := c.Lock(ctx, key, dlock.WithTTL(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.ForceRelease(ctx, key); err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Done(): // found by its next renewal
		case <-time.After(5 * time.Second):
			t.Fatal("the force-released lock was not found lost")
		}
		// In a process group of its own, as run starts it away from a
		// terminal. Its background process ignores SIGTERM, and leaves
		// the command's output, so that the command is reaped at once.
		pidFile := filepath.Join(t.TempDir(), "pid")
		cmd := exec.Command("sh", "-c", `(trap '' TERM; exec sleep 1000) >/dev/null 2>&1 & echo $! > "$PIDF"`)
		cmd.Env = append(os.Environ(), "PIDF="+pidFile)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ch := &child{cmd: cmd, pgid: cmd.Process.Pid, done: make(chan struct{})}
		go func() {
			_ = cmd.Wait()
			close(ch.done)
		}()
		<-ch.done
		pid, err := strconv.Atoi(strings.TrimSpace(fileText(pidFile)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
		if err := a.supervise(ch, l, "lock", nil, 0, 0); !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("supervise of a command that exited as its lock was lost = %v, want ErrLockLost", err)
		}
		waitUntil(t, 10*time.Second, "the command's background process to be killed", func() bool { return processGone(pid) })
	}
}

// TestRunLostBeforeTheCommandFinished: a lock (or permits) taken away
// while the command runs, and found gone only by the release after it (the
// next renewal is far off), was still lost while the command worked: dlock
// exits 79, as for a loss it saw, not with the command's status and a
// warning. The command takes the lock away itself (release --force, as an
// operator would), then exits 5.
func TestRunLostBeforeTheCommandFinished(t *testing.T) {
	t.Parallel()
	env := baseEnv("DLOCK_BIN="+dlockBin, "URL="+sharedURL())
	for _, tc := range []struct {
		flags   []string
		release string // the command's
		want    string
	}{
		{nil, `"$DLOCK_BIN" --redis "$URL" release --force "$DLOCK_KEY"`,
			`lock "gone-early" was lost before the command finished`},
		{[]string{"--capacity", "2"}, `"$DLOCK_BIN" --redis "$URL" release --force --capacity 2 --owner "$DLOCK_TOKEN" "$DLOCK_KEY"`,
			`permits of semaphore "gone-early" were lost before the command finished`},
	} {
		// A lease of 60s: no renewal (every 20s) finds the loss first.
		args := append(append([]string{"--redis", sharedURL(), "--ttl", "60s", "run"}, tc.flags...),
			"gone-early", "--", "sh", "-c", tc.release+` >/dev/null && exit 5`)
		r := dlockRun(t, env, args...).want(t, exitLockLost)
		// The cause, the library's error, does not name the key again.
		if got := lines(r.stderr); len(got) != 1 || !strings.Contains(got[0], tc.want) || strings.Count(got[0], `"gone-early"`) != 1 ||
			!strings.HasSuffix(got[0], "(its status: 5)") {
			t.Errorf("dlock %s: stderr %q; want one line with %q, the key once, and the command's status", strings.Join(args, " "), r.stderr, tc.want)
		}
	}
}

// TestRunLostLockWithBrokenStderr loses the lock while dlock's stderr is a
// pipe nobody reads any more (a log shipper that died). Telling of the loss
// must not kill dlock by SIGPIPE: it still stops COMMAND's whole process
// group, SIGTERM first, and exits with status 79.
func TestRunLostLockWithBrokenStderr(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log, pidFile := filepath.Join(dir, "log"), filepath.Join(dir, "pid")
	script := stoppableScript
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // nobody will read dlock's stderr
	cmd := exec.Command(dlockBin, "--redis", sharedURL(), "--ttl", "600ms",
		"run", "--grace", "2s", "broken-stderr", "--", "sh", "-c", script)
	cmd.Env = baseEnv("LOG="+log, "PIDF="+pidFile)
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if pid, err := strconv.Atoi(strings.TrimSpace(fileText(pidFile))); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	waitUntil(t, 10*time.Second, "the command to start", func() bool { return fileText(log) == "started\n" })
	if err := lockClient(t, shared.Addr()).ForceRelease(context.Background(), "broken-stderr"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(processTimeout):
		t.Fatalf("dlock still running %v after its lock was lost", processTimeout)
	}
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signaled() || ws.ExitStatus() != exitLockLost {
		t.Errorf("dlock ended with %v, want exit status %d", cmd.ProcessState, exitLockLost)
	}
	commandStopped(t, log, pidFile)
}

// dlock run catches SIGPIPE for itself (see TestRunLostLockWithBrokenStderr);
// COMMAND must still get the default, as a shell pipeline expects: `yes`
// writing into a closed pipe is killed by SIGPIPE (status 141), not told
// EPIPE.
func TestRunCommandKeepsDefaultSIGPIPE(t *testing.T) {
	t.Parallel()
	status := filepath.Join(t.TempDir(), "status")
	dlockRun(t, baseEnv("F="+status), "--redis", sharedURL(), "run", "sigpipe", "--",
		"sh", "-c", `{ yes; echo $? > "$F"; } | head -n 1 > /dev/null`).want(t, 0)
	if got := strings.TrimSpace(fileText(status)); got != "141" {
		t.Errorf("yes in COMMAND ended with status %q, want 141 (killed by SIGPIPE)", got)
	}
}

// README ("dlock run"): a process COMMAND left running in the background
// goes on after COMMAND exits, without the lock, which dlock has released.
func TestRunLeavesBackgroundProcessesRunning(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	key := testKey(t)
	dlockRun(t, baseEnv("PIDF="+pidFile), "--redis", sharedURL(), "run", key, "--",
		"sh", "-c", `sleep 1000 > /dev/null 2>&1 & echo $! > "$PIDF"`).want(t, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(fileText(pidFile)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if processGone(pid) {
		t.Errorf("the background process %d was stopped with COMMAND", pid)
	}
	if info := inspect(t, lockClient(t, shared.Addr()), key); info.Held {
		t.Errorf("lock still held after dlock exited: %+v", info)
	}
}

// With --replica-ack, each write of the lock is followed by WAIT, and a
// grant the replica does not acknowledge is given back: COMMAND does not
// run and dlock exits 69.
func TestRunReplicaAck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	master, replica := redistest.StartReplicated(t)
	rdb, url := master.Client(t), redisURL(master.Addr())
	// WAITs sent so far (StartReplicated sent some).
	waits := func() int {
		for _, line := range lines(rdb.Info(ctx, "commandstats").Val()) {
			if rest, ok := strings.CutPrefix(line, "cmdstat_wait:calls="); ok {
				n, _ := strconv.Atoi(strings.Split(rest, ",")[0])
				return n
			}
		}
		return 0
	}
	before := waits()
	dlockRun(t, nil, "--redis", url, "run", "--replica-ack", "1", "acked", "--", "true").want(t, 0)
	if sent := waits() - before; sent < 2 {
		t.Fatalf("%d WAITs sent, want at least 2 (after the grant and the release)", sent)
	}

	replica.Pause(t)
	defer replica.Resume(t)
	ran := filepath.Join(t.TempDir(), "ran")
	r := dlockRun(t, nil, "--redis", url, "run", "--replica-ack", "1", "--replica-timeout", "100ms", "stalled", "--", "touch", ran).want(t, 69)
	if !strings.Contains(r.stderr, "replicas") {
		t.Errorf("stderr: %q", r.stderr)
	}
	if _, err := os.Stat(ran); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("COMMAND ran although the grant was not acknowledged (%v)", err)
	}
	if info := inspect(t, lockClient(t, master.Addr()), "stalled"); info.Held {
		t.Errorf("lock still held after a grant that failed closed: %+v", info)
	}

	for _, args := range [][]string{
		{"--replica-ack", "-1"},
		{"--replica-timeout", "1s"}, // without --replica-ack
		{"--replica-ack", "1", "--replica-timeout", "0"},
		{"--replica-ack", "1", "--ttl", "2s"},                             // a lease shorter than 3 x (1s + 100ms)
		{"--replica-ack", "1", "--replica-timeout", "4s", "--ttl", "20s"}, // past 3/4 of the ReadTimeout (5s)
	} {
		args = append(append([]string{"--redis", url, "run"}, args...), "k", "--", "true")
		dlockRun(t, nil, args...).want(t, 64)
	}
}
