//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/spawn"
)

// eventTimeout bounds how long the demo waits for a worker's next event.
const eventTimeout = 30 * time.Second

// workerProc is a running `dlock demo-worker` process.
type workerProc struct {
	name    string
	timeout time.Duration // for each event: eventTimeout, plus --lease that B may wait
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	events  chan workerEvent // closed when its stdout ends
	done    chan struct{}    // closed when it has exited
	stderr  strings.Builder  // what it said on stderr, for error messages
}

// spawnWorker starts `dlock demo-worker ROLE args...` from this binary.
func (d *demo) spawnWorker(name, role string, args ...string) (*workerProc, error) {
	argv := append([]string{"demo-worker", role}, d.connArgs...)
	argv = append(argv, args...)
	cmd := exec.Command(d.exe, argv...)
	cmd.Env = d.env
	cmd.SysProcAttr = childProcAttr()
	w := &workerProc{name: name, timeout: eventTimeout + d.f.lease, cmd: cmd, events: make(chan workerEvent, 16), done: make(chan struct{})}
	cmd.Stderr = &w.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	err = spawn.Start(cmd, func() {
		defer close(w.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			var e workerEvent
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				w.events <- e
			}
		}
		close(w.events)
		_ = cmd.Wait() // after stdout is drained, as os/exec requires
	})
	if err != nil {
		return nil, fmt.Errorf("starting worker %s: %w", name, err)
	}
	d.procs = append(d.procs, w)
	return w, nil
}

// next waits for the worker's next event, which must be want.
func (w *workerProc) next(ctx context.Context, want string) (workerEvent, error) {
	t := time.NewTimer(w.timeout)
	defer t.Stop()
	select {
	case e, ok := <-w.events:
		if !ok {
			<-w.done
			return e, w.failed(fmt.Errorf("worker %s exited (%v) before %q: %s", w.name, w.cmd.ProcessState, want, strings.TrimSpace(w.stderr.String())))
		}
		if e.Event != want {
			return e, fmt.Errorf("worker %s said %q, expected %q", w.name, e.Event, want)
		}
		return e, nil
	case <-t.C:
		return workerEvent{}, fmt.Errorf("worker %s: no %q within %v", w.name, want, w.timeout)
	case <-ctx.Done():
		return workerEvent{}, context.Cause(ctx)
	}
}

// tell writes a line to the worker's stdin.
func (w *workerProc) tell(line string) error {
	_, err := io.WriteString(w.stdin, line+"\n")
	return err
}

// wait waits for the worker to exit.
func (w *workerProc) wait(ctx context.Context) error {
	select {
	case <-w.done:
		if !w.cmd.ProcessState.Success() {
			return w.failed(fmt.Errorf("worker %s failed (%v): %s", w.name, w.cmd.ProcessState, strings.TrimSpace(w.stderr.String())))
		}
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// failed is err, the error of a worker that has exited, with exit status 69
// if the worker's was (Redis failed): the demo then exits as any command
// does when Redis goes away.
func (w *workerProc) failed(err error) error {
	if w.cmd.ProcessState.ExitCode() == exitUnavailable {
		return exitf(exitUnavailable, "demo: %v", err)
	}
	return err
}

// signal sends sig to the worker.
func (w *workerProc) signal(sig syscall.Signal) error { return w.cmd.Process.Signal(sig) }

// kill ends the worker if it still runs (SIGKILL works on a stopped
// process too) and waits for it.
func (w *workerProc) kill() {
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	_ = w.stdin.Close()
	for range w.events { // drain, so that the reader can reach Wait
	}
	<-w.done
}

// executable returns the path of this binary, to start workers from.
func executable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", exitf(exitFailure, "cannot find the dlock binary to start workers: %v", err)
	}
	return exe, nil
}
