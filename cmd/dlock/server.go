//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisInstallHint says how to get redis-server when it is missing.
const redisInstallHint = "install Redis (from a dlock checkout: ./scripts/install-redis.sh; " +
	"on Debian/Ubuntu: sudo apt-get install redis-server; on macOS: brew install redis), " +
	"or point dlock at a running server with --redis URL"

// privateServer is a redis-server that dlock started for itself on a free
// loopback port, with no persistence, in a temporary directory.
type privateServer struct {
	cmd  *exec.Cmd
	dir  string
	addr string
	done chan struct{} // closed when the process has exited
}

// startPrivateServer starts redis-server from $PATH and waits until it
// answers PING.
func startPrivateServer(ctx context.Context) (*privateServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, exitf(exitUnavailable, "redis-server not found in $PATH: %s", redisInstallHint)
	}
	dir, err := os.MkdirTemp("", "dlock-redis-")
	if err != nil {
		return nil, exitf(exitFailure, "%v", err)
	}
	var lastErr error
	for range 5 { // another process may take the port between probe and bind
		s, err := launchServer(ctx, bin, dir)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, exitf(exitUnavailable, "could not start %s: %v", bin, lastErr)
}

func launchServer(ctx context.Context, bin, dir string) (*privateServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "redis.log")
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--protected-mode", "yes",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", logPath, "--daemonize", "no")
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &privateServer{cmd: cmd, dir: dir, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer func() { _ = rdb.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := rdb.Ping(pctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("it exited at once: %s", logTail(logPath))
		case <-ctx.Done():
			s.kill()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond): // poll again
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("no answer on %s within 10s: %s", s.addr, logTail(logPath))
		}
	}
}

// URL is the server's redis:// URL.
func (s *privateServer) URL() string { return "redis://" + s.addr }

// Stop shuts the server down (SIGTERM, SIGKILL after 5 s) and removes its
// directory.
func (s *privateServer) Stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		s.kill()
	}
	_ = os.RemoveAll(s.dir)
}

func (s *privateServer) kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// logTail returns the last lines of a log file, on one line.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "no log"
		}
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return strings.Join(lines, " | ")
}
