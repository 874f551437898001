package redisserver

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/spawn"
)

const (
	// startAttempts is how many free ports Start tries: another process
	// may take the port between choosing it and redis-server binding it.
	startAttempts = 5
	// stopTimeout is how long Stop waits after SIGTERM before SIGKILL.
	stopTimeout = 5 * time.Second
)

// Options customise Start. The zero value starts a plain server.
type Options struct {
	// Args are extra redis-server command-line arguments, appended after
	// the defaults so that they win, e.g. {"--maxclients", "4064"}. Set a
	// password with Password, not with --requirepass here: the readiness
	// check would not know it, and Start would fail after 10 s of NOAUTH.
	Args []string
	// Password, if not empty, is set with --requirepass (before Args), and
	// the readiness check authenticates with it. Addr and URL do not carry
	// it: clients must set it themselves.
	Password string
	// SysProcAttr, if not nil, is set on the process: for example its own
	// process group, or (Linux) Pdeathsig so that the kernel kills it if
	// the caller dies without calling Stop.
	SysProcAttr *syscall.SysProcAttr
}

// Server is a redis-server process started by Start.
type Server struct {
	cmd  *exec.Cmd
	dir  string
	port int
	done chan struct{} // closed when the process has exited
}

// errPortInUse marks a launch whose server exited at once because another
// process took its port: only then does Start try another port.
var errPortInUse = errors.New("port already in use")

// Start runs bin (a redis-server, e.g. from FindBinary) on a free
// 127.0.0.1 port, without persistence, in a new temporary directory, and
// waits until it answers (at most 10 s). It tries other ports if one is
// taken before redis-server binds it; any other failure (a bad argument,
// say) is returned at once. If ctx ends first, the process is killed and
// ctx's error returned; if it has already ended, nothing is started.
// Errors do not name bin: callers say what they were starting. Call Stop
// when done.
func Start(ctx context.Context, bin string, opts Options) (*Server, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "dlock-redis-")
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		s, err := launch(ctx, bin, dir, opts)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortInUse) || attempt == startAttempts || ctx.Err() != nil {
			_ = os.RemoveAll(dir)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
	}
}

// launch starts one process on a fresh port and waits until it is ready.
func launch(ctx context.Context, bin, dir string, opts Options) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "redis.log")
	args := []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--protected-mode", "yes",
		"--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", logPath, "--daemonize", "no",
	}
	if opts.Password != "" {
		args = append(args, "--requirepass", opts.Password)
	}
	args = append(args, opts.Args...)
	// Errors printed before redis-server opens its log (a bad argument)
	// go to the log too, so that the error can quote them. The log is
	// truncated: it holds this attempt's lines only, not those of an
	// earlier attempt, whose process has exited.
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = opts.SysProcAttr
	s := &Server{cmd: cmd, dir: dir, port: port, done: make(chan struct{})}
	err = spawn.Start(cmd, func() {
		_ = cmd.Wait()
		close(s.done)
	})
	_ = logf.Close() // the child has its own descriptor
	if err != nil {
		return nil, err
	}
	if err := s.waitReady(ctx, logPath, opts.Password); err != nil {
		s.kill()
		return nil, err
	}
	return s, nil
}

// Addr is the server's address, "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port is the server's TCP port.
func (s *Server) Port() int { return s.port }

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr() }

// PID is the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Stop shuts the server down (SIGTERM, then SIGKILL if it has not exited
// after 5 s), waits for the process and removes its directory. Calling it
// again does nothing, so a test may both defer it and call it.
func (s *Server) Stop() {
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err == nil {
		select {
		case <-s.done:
		case <-time.After(stopTimeout):
		}
	}
	s.kill()
	_ = os.RemoveAll(s.dir)
}

// kill sends SIGKILL (a no-op once the process has exited) and waits for
// the process.
func (s *Server) kill() {
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
