// Package redistest starts real redis-server processes for tests: standalone
// servers, sentinel groups and clusters. Every process listens on a free
// 127.0.0.1 port, keeps its files in a t.TempDir() and is killed (and waited
// for) in t.Cleanup, even when the test fails.
//
// There are no mocks here on purpose: lock semantics depend on real Redis
// behaviour (expiry, scripting, replication, failover), so tests run against
// the real binary. If redis-server is missing, tests fail with an install hint
// instead of skipping, so a missing dependency is never mistaken for a pass.
//
// Goroutines: each process has exactly one goroutine blocked in cmd.Wait. It
// ends when the process exits, and cleanup always kills and waits, so after a
// test's cleanups have run nothing started here is left behind. This makes
// the package safe with goleak.VerifyTestMain. Note that a
// `defer goleak.VerifyNone(t)` in a test body runs BEFORE t.Cleanup, and so
// before the processes and clients are torn down; use VerifyTestMain instead.
package redistest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redisserver"
	"github.com/dlock-go/dlock/internal/spawn"
)

const (
	// readyTimeout bounds how long a freshly started process may take to
	// answer PING. Redis starts in milliseconds; the slack is for loaded CI
	// machines and for loading an AOF on Restart.
	readyTimeout = 10 * time.Second
	// pollInterval is the delay between readiness/state polls.
	pollInterval = 20 * time.Millisecond
	// exitTimeout bounds how long we wait for a signalled process to exit.
	exitTimeout = 10 * time.Second
	// startAttempts is how many fresh ports Start tries before giving up.
	// Another process can grab the port between our probe and Redis binding
	// it, so one retry is not always enough on a busy machine.
	startAttempts = 5
	// installHint is part of every "binary not found" failure.
	installHint = "install it with `apt-get install redis-server` (Debian/Ubuntu)"
)

// extraBinDirs are searched after $PATH: apt puts redis-server in /usr/bin,
// but test runners sometimes run with a minimal PATH.
var extraBinDirs = redisserver.SystemDirs()

// Option customises a server started by Start.
type Option func(*config)

// WithConfig appends one redis.conf directive, e.g.
// WithConfig("appendonly", "yes"). It is written after the defaults, so it
// overrides them. Arguments are quoted as needed; an empty argument becomes
// "" (as in `save ""`).
func WithConfig(directive string, args ...string) Option {
	return func(c *config) {
		c.extra = append(c.extra, append([]string{directive}, args...))
	}
}

// config describes how to launch one process.
type config struct {
	extra [][]string
	// sentinel runs the process with --sentinel.
	sentinel bool
	// clusterBus requires port+10000 to be free too (cluster bus port).
	clusterBus bool
}

// requirepass returns the password of the last requirepass directive in
// extra, or "" if there is none, so that the readiness probe can AUTH.
func (c config) requirepass() string {
	pass := ""
	for _, d := range c.extra {
		if len(d) == 2 && strings.EqualFold(d[0], "requirepass") {
			pass = d[1]
		}
	}
	return pass
}

// Server is one redis-server (or sentinel) process owned by a test. All
// methods are safe for concurrent use.
type Server struct {
	bin      string
	dir      string
	confPath string
	logPath  string
	cfg      config

	mu     sync.Mutex
	port   int
	cmd    *exec.Cmd
	done   chan struct{} // closed when the Wait goroutine has returned
	paused bool
	// tailShown records that a failure message already quoted the log, so
	// cleanup does not print it twice.
	tailShown bool
}

// Start launches a standalone redis-server on a free 127.0.0.1 port in
// t.TempDir(), waits until it answers PING, and registers a cleanup that kills
// the process and waits for it. It calls t.Fatalf (never t.Skip) if
// redis-server is not installed or does not come up; the failure message
// includes the tail of the server log.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	return start(t, cfg)
}

func start(t testing.TB, cfg config) *Server {
	t.Helper()
	bin := BinaryPath(t)
	dir := t.TempDir() // registered before our cleanup, so removed after the kill
	s := &Server{
		bin:      bin,
		dir:      dir,
		confPath: filepath.Join(dir, "redis.conf"),
		logPath:  filepath.Join(dir, "redis.log"),
		cfg:      cfg,
	}
	if cfg.sentinel {
		// Sentinel rewrites its config file, so each one gets its own.
		s.confPath = filepath.Join(dir, "sentinel.conf")
	}
	t.Cleanup(func() { s.cleanup(t) })

	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		port, err := freePort(cfg.clusterBus)
		if err != nil {
			lastErr = err
			continue
		}
		if err := s.writeConfig(port); err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s.mu.Lock()
		s.port = port
		s.mu.Unlock()
		// Fresh log per attempt so the failure tail is about this attempt.
		err = s.launch(true)
		if err == nil {
			return s
		}
		lastErr = err
		if !errors.Is(err, errPortInUse) {
			break
		}
	}
	s.mu.Lock()
	s.tailShown = true // the error already quotes the log
	s.mu.Unlock()
	t.Fatalf("redistest: starting %s failed: %v", s.describe(), lastErr)
	return nil
}

// BinaryPath returns the path of redis-server, searching $PATH and then
// /usr/bin, /usr/sbin and /usr/local/bin. It calls t.Fatalf with an install
// hint if the binary cannot be found.
func BinaryPath(t testing.TB) string {
	t.Helper()
	p, err := findBinary("redis-server", extraBinDirs)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return p
}

// findBinary looks name up in $PATH, then in extra.
func findBinary(name string, extra []string) (string, error) {
	p, err := redisserver.FindBinary(name, extra...)
	if err != nil {
		return "", fmt.Errorf("%w; tests need a real Redis: %s", err, installHint)
	}
	return p, nil
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// Addr returns "127.0.0.1:port".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port()))
}

// Port returns the TCP port. It never changes after Start returns, also not
// across Restart.
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// Dir returns the server's working directory (data files, redis.conf,
// redis.log). It is removed when the test ends.
func (s *Server) Dir() string { return s.dir }

// LogPath returns the path of the server log (Redis log plus stdout/stderr).
func (s *Server) LogPath() string { return s.logPath }

// PID returns the process id of the most recently started process. The
// process may have exited since; see Running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Running reports whether the process has been started and has not exited.
// A paused process is running.
func (s *Server) Running() bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Client returns a new go-redis client for this server, closed in t.Cleanup.
// Options are go-redis defaults, without a password: a test that sets
// requirepass, or needs different timeouts, builds its own redis.Options
// with Addr().
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill sends SIGKILL (a crash: no shutdown, no final fsync) and waits for the
// process to exit. It is a no-op if the process is not running.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	if err := s.signalAndWait(syscall.SIGKILL, exitTimeout); err != nil {
		t.Fatalf("redistest: kill %s: %v", s.describe(), err)
	}
}

// Stop shuts the server down gracefully with SIGTERM (Redis then behaves like
// SHUTDOWN: RDB is saved only if save points are configured, which they are
// not by default; AOF is flushed if enabled) and waits for it to exit. A
// paused server is resumed first so it can handle the signal. If it does not
// exit within 10 s it is killed. It is a no-op if the process is not running.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	err := s.signalAndWait(syscall.SIGTERM, exitTimeout)
	if errors.Is(err, errExitTimeout) {
		t.Logf("redistest: %s ignored SIGTERM for %v, killing it", s.describe(), exitTimeout)
		err = s.signalAndWait(syscall.SIGKILL, exitTimeout)
	}
	if err != nil {
		t.Fatalf("redistest: stop %s: %v", s.describe(), err)
	}
}

// Restart starts the server again on the same port, in the same directory,
// with the same config file, and waits until it answers PING. A running
// server is stopped (Stop) first. Data survives only if persistence was
// configured (e.g. WithConfig("appendonly", "yes")). Sentinels and cluster
// nodes restart with the config they rewrote themselves, like in production.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if s.Running() {
		s.Stop(t)
	}
	if err := s.launch(false); err != nil {
		s.mu.Lock()
		s.tailShown = true
		s.mu.Unlock()
		t.Fatalf("redistest: restarting %s failed: %v", s.describe(), err)
	}
}

// Pause stops the process with SIGSTOP: it keeps its port and connections
// but answers nothing, like a server stuck in a long GC-free stall or a
// network partition towards it. No-op if not running.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() || s.paused {
		return
	}
	if err := s.cmd.Process.Signal(sigStop); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("redistest: pause %s: %v", s.describeLocked(), err)
	}
	s.paused = true
}

// Resume continues a process stopped by Pause with SIGCONT. No-op if it is
// not paused.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.paused {
		return
	}
	s.paused = false
	if !s.runningLocked() {
		return
	}
	if err := s.cmd.Process.Signal(sigCont); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("redistest: resume %s: %v", s.describeLocked(), err)
	}
}

// Paused reports whether the process is stopped by Pause.
func (s *Server) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused && s.runningLocked()
}

// Reap waits (up to 10 s) for a process that is exiting on its own, e.g.
// after the test sent SHUTDOWN through a client, so that its Wait goroutine
// has finished and Running reports false. It does not signal the process; it
// calls t.Fatalf if the process does not exit in time. Cleanup always kills
// and reaps, so Reap is only needed to observe the exit inside a test.
func (s *Server) Reap(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return
	}
	timer := time.NewTimer(exitTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Fatalf("redistest: %s did not exit within %v", s.describe(), exitTimeout)
	}
}

// cleanup kills the process, waits for it and, if the test failed, logs the
// tail of its log to help explain the failure.
func (s *Server) cleanup(t testing.TB) {
	if err := s.signalAndWait(syscall.SIGKILL, exitTimeout); err != nil {
		t.Errorf("redistest: cleanup of %s: %v", s.describe(), err)
	}
	s.mu.Lock()
	shown := s.tailShown
	s.mu.Unlock()
	if t.Failed() && !shown {
		t.Logf("redistest: tail of %s log:\n%s", s.describe(), logTail(s.logPath, 0))
	}
}

var (
	errPortInUse   = errors.New("port already in use")
	errExitTimeout = errors.New("process did not exit in time")
)

// signalAndWait sends sig to a running process (resuming it first if paused,
// except for SIGKILL which works on stopped processes) and waits for its Wait
// goroutine to finish.
func (s *Server) signalAndWait(sig syscall.Signal, timeout time.Duration) error {
	s.mu.Lock()
	if !s.runningLocked() {
		s.paused = false
		done := s.done
		s.mu.Unlock()
		if done != nil {
			<-done // already closed, or closing: the process has exited
		}
		return nil
	}
	proc, done := s.cmd.Process, s.done
	if s.paused && sig != syscall.SIGKILL {
		_ = proc.Signal(sigCont)
	}
	s.paused = false
	err := proc.Signal(sig)
	s.mu.Unlock()
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-done:
		return nil
	case <-timer.C:
		return errExitTimeout
	}
}

func (s *Server) runningLocked() bool {
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// launch starts the process with the current config file and waits for it
// to answer. fresh truncates the log (initial start); otherwise the log is
// appended to and only the new part is quoted on failure.
func (s *Server) launch(fresh bool) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if fresh {
		flags |= os.O_TRUNC
	}
	logf, err := os.OpenFile(s.logPath, flags, 0o644)
	if err != nil {
		return err
	}
	var offset int64
	if fi, err := logf.Stat(); err == nil {
		offset = fi.Size()
	}

	args := []string{s.confPath}
	if s.cfg.sentinel {
		args = append(args, "--sentinel")
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	// Redis logs to the same file via the logfile directive; anything
	// printed before that takes effect (config errors) lands here too.
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	done := make(chan struct{})
	// The only goroutine per process; it ends when the process exits.
	err = spawn.Start(cmd, func() {
		_ = cmd.Wait()
		close(done)
	})
	_ = logf.Close() // the child has its own descriptor
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.cmd, s.done, s.paused = cmd, done, false
	s.mu.Unlock()

	addr := s.Addr()
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-done:
			tail := logTail(s.logPath, offset)
			err := fmt.Errorf("process exited early (%v); log tail:\n%s", cmd.ProcessState, tail)
			if strings.Contains(tail, "Address already in use") {
				err = fmt.Errorf("%w: %v", errPortInUse, err)
			}
			return err
		default:
		}
		if ready(addr, cmd.Process.Pid, s.cfg.requirepass()) {
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("no PING reply within %v; log tail:\n%s", readyTimeout, logTail(s.logPath, offset))
		}
		time.Sleep(pollInterval)
	}
}

// writeConfig writes the config file for port: defaults first, then the
// WithConfig directives so that they win.
func (s *Server) writeConfig(port int) error {
	lines := [][]string{
		{"bind", "127.0.0.1"},
		{"port", strconv.Itoa(port)},
		{"protected-mode", "no"},
		{"daemonize", "no"},
		{"dir", s.dir},
		{"logfile", s.logPath},
	}
	if !s.cfg.sentinel {
		lines = append(lines,
			[]string{"save", ""},
			[]string{"appendonly", "no"},
			// Replicas sync immediately instead of waiting 5 s for
			// more replicas to share a diskless transfer.
			[]string{"repl-diskless-sync-delay", "0"},
		)
	}
	lines = append(lines, s.cfg.extra...)
	var b strings.Builder
	for _, l := range lines {
		for i, a := range l {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(quoteArg(a))
		}
		b.WriteByte('\n')
	}
	return os.WriteFile(s.confPath, []byte(b.String()), 0o644)
}

// quoteArg quotes a config argument for Redis' config parser when needed.
func quoteArg(a string) string {
	if a != "" && !strings.ContainsAny(a, " \t\r\n\"'\\") {
		return a
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(a); i++ {
		switch c := a[i]; c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func (s *Server) describe() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.describeLocked()
}

func (s *Server) describeLocked() string {
	kind := "redis-server"
	if s.cfg.sentinel {
		kind = "redis-sentinel"
	}
	d := fmt.Sprintf("%s 127.0.0.1:%d (dir %s", kind, s.port, s.dir)
	if s.cmd != nil && s.cmd.Process != nil {
		d += fmt.Sprintf(", pid %d", s.cmd.Process.Pid)
	}
	return d + ")"
}

// freePort asks the kernel for a free loopback port. With clusterBus it also
// requires port+10000 (the cluster bus port) to be free.
func freePort(clusterBus bool) (int, error) {
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !clusterBus {
			_ = l.Close()
			return port, nil
		}
		ok := false
		if port+10000 <= 65535 {
			if bl, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000))); err == nil {
				_ = bl.Close()
				ok = true
			}
		}
		_ = l.Close()
		if ok {
			return port, nil
		}
	}
	return 0, errors.New("no free port pair (port, port+10000) found")
}

// logTail returns up to the last 4 KiB of the log written after offset.
func logTail(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer func() { _ = f.Close() }()
	const maxTail = 4096
	fi, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	start := offset
	if fi.Size()-start > maxTail {
		start = fi.Size() - maxTail
	}
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	if len(b) == 0 {
		return "(empty)"
	}
	return string(b)
}
