package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

// The tests drive the dlock binary, built once here, as a real process
// against real redis-server processes.
var (
	dlockBin string
	shared   *redistest.Main // for tests that do not need a server of their own
)

// processTimeout bounds every dlock process a test runs.
const processTimeout = 45 * time.Second

func TestMain(m *testing.M) {
	testutil.QuietRedisLog()
	// Processes started here inherit a signal this one ignores, and dlock
	// keeps such a signal ignored (nohup): run under nohup (SIGHUP), or
	// as a background job of a shell without job control (SIGINT, when
	// not run by go test, which catches it), the tests that hang up or
	// interrupt dlock would find it still running after 45s. Caught
	// instead (and dropped, so still of no effect here), the signals
	// reach the children with their default action; the tests of an
	// ignored signal set it ignored themselves (startIgnoringHangup).
	for _, sig := range []os.Signal{syscall.SIGHUP, os.Interrupt} {
		if signal.Ignored(sig) {
			signal.Notify(make(chan os.Signal, 1), sig)
		}
	}
	dir, err := os.MkdirTemp("", "dlock-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dlockBin = filepath.Join(dir, "dlock")
	args := []string{"build", "-o", dlockBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command(goTool(), append(args, ".")...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building dlock: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	shared = redistest.StartMain()
	code := m.Run()
	shared.Close()
	os.RemoveAll(dir)
	testutil.Exit(code)
}

// goTool finds the go command that runs these tests.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}

// redisURL is the URL of a test server.
func redisURL(addr string) string { return "redis://" + addr }

// sharedURL is the URL of the shared test server.
func sharedURL() string { return redisURL(shared.Addr()) }

// baseEnv is the environment of a dlock process: the test's, without any
// DLOCK_ variable that could point it elsewhere. A race-enabled binary
// would wait a second before exiting (to report late races) without
// GORACE's atexit_sleep_ms=0; a race it finds makes it exit with 66.
func baseEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DLOCK_") && !strings.HasPrefix(kv, "GORACE=") {
			env = append(env, kv)
		}
	}
	env = append(env, "GORACE=atexit_sleep_ms=0 exitcode=66")
	return append(env, extra...)
}

// proc is a dlock process started by a test.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan struct{}
}

// start starts dlock with args and env (nil: baseEnv()). It is killed and
// reaped when the test ends, if it still runs.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startProgram(t, env, dlockBin, args...)
}

// startProgram is start for a program that runs dlock (unshare, say).
func startProgram(t *testing.T, env []string, program string, args ...string) *proc {
	t.Helper()
	if env == nil {
		env = baseEnv()
	}
	p := &proc{cmd: exec.Command(program, args...), done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	// The command of `dlock run` inherits these pipes in a process group of
	// its own: if the test kills dlock (it failed, or ran too long), a
	// command that lives on (`sleep 1000`) would hold them open, and Wait,
	// which waits for the pipes to close, would keep the test hanging
	// until go test's timeout. Wait gives up on the pipes this long after
	// dlock exited.
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits for the process to exit and returns its exit status.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	return p.waitUpTo(t, processTimeout)
}

// waitUpTo is wait for a process that may take longer than processTimeout
// (as long as limit), or must exit sooner.
func (p *proc) waitUpTo(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("dlock %s: still running after %v\nstdout:\n%s\nstderr:\n%s",
			strings.Join(p.cmd.Args[1:], " "), limit, p.stdout.String(), p.stderr.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// result is how a dlock process ended.
type result struct {
	code           int
	stdout, stderr string
}

// dlockRun runs dlock to completion.
func dlockRun(t *testing.T, env []string, args ...string) result {
	t.Helper()
	p := start(t, env, args...)
	code := p.wait(t)
	return result{code: code, stdout: p.stdout.String(), stderr: p.stderr.String()}
}

// want fails the test unless the process exited with code.
func (r result) want(t *testing.T, code int) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	return r
}

// waitUntil is testutil.WaitUntil under the short name this package's
// tests use: a condition to wait on, not a sleep.
var waitUntil = testutil.WaitUntil

// lockClient returns a dlock Client on addr, closed when the test ends.
func lockClient(t *testing.T, addr string) *dlock.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		_ = rdb.Close()
	})
	return c
}

// inspect reads a lock's state through the library.
func inspect(t *testing.T, c *dlock.Client, key string) *dlock.LockInfo {
	t.Helper()
	info, err := c.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// fileText returns a file's content, or "" if it does not exist yet.
func fileText(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// lines splits output into its non-empty lines.
func lines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}
