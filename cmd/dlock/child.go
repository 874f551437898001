//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/spawn"
)

// forwardedSignals are passed on to the command by `run`.
var forwardedSignals = []os.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
}

// canSupervise reports whether `run` can start and signal a command here:
// it can on every Unix system (see notunix.go for the others).
func canSupervise() error { return nil }

// child is the command `run` started.
type child struct {
	cmd *exec.Cmd
	// pgid is the command's own process group, which gets the signals, or
	// 0 when it shares dlock's group (at an interactive terminal).
	pgid int
	// started is, when the command shares dlock's group, the processes it
	// had started when it was last signalled: they are signalled with it,
	// and killed at the end, since no process group holds them apart. On
	// Linux each handle holds a pidfd, so one that has exited since is not
	// signalled even if another process got its PID.
	started []*os.Process
	// left is, when the command in a group of its own has exited during a
	// stop, the processes of its group that had not yet (running).
	left []*os.Process
	done chan struct{} // closed when the command has exited and been reaped
	// jobSigs gets SIGTSTP and SIGCONT for a command in a group of its own
	// (supervise), caught from before it started: a Ctrl-Z that comes as it
	// starts must stop it too. nil in a shared group.
	jobSigs chan os.Signal
}

// startChild starts argv in its own process group, so that signals reach
// the processes it starts too; at an interactive terminal it stays in
// dlock's group instead, so that it can read the terminal and the terminal's
// signals (Ctrl-C, Ctrl-Z) reach it directly.
func startChild(path string, argv, env []string, stdout, stderr io.Writer) (*child, error) {
	cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Stdin: os.Stdin, Stdout: stdout, Stderr: stderr}
	shared := inForeground()
	cmd.SysProcAttr = commandProcAttr(!shared)
	c := &child{cmd: cmd, done: make(chan struct{})}
	if !shared {
		c.jobSigs = make(chan os.Signal, 2)
		// Never empty (SIGCONT): Notify with no signal would catch them all.
		signal.Notify(c.jobSigs, append(notIgnored([]os.Signal{syscall.SIGTSTP}), syscall.SIGCONT)...)
	}
	err := spawn.Start(cmd, func() {
		_ = cmd.Wait() // the status is read from ProcessState
		close(c.done)
	})
	if err != nil {
		if c.jobSigs != nil {
			signal.Stop(c.jobSigs)
		}
		return nil, err
	}
	if !shared {
		c.pgid = cmd.Process.Pid
	}
	return c, nil
}

// signal sends sig to the command's process group or, if it shares
// dlock's group, to the command and the processes it started (found in
// /proc on Linux; elsewhere the command alone).
func (c *child) signal(sig syscall.Signal) {
	if c.pgid > 0 {
		_ = syscall.Kill(-c.pgid, sig)
		return
	}
	// Found before the command is signalled: once it exits, they are
	// no longer its descendants. Once it is reaped, its PID may be another
	// process's: those started before stay as they were.
	select {
	case <-c.done:
	default:
		if ds := descendants(c.cmd.Process.Pid); len(ds) > 0 {
			c.forget()
			for _, pid := range ds {
				if p, err := os.FindProcess(pid); err == nil {
					c.started = append(c.started, p)
				}
			}
		}
	}
	_ = c.cmd.Process.Signal(sig)
	for _, p := range c.started {
		_ = p.Signal(sig)
	}
}

// forget lets go of the handles of the processes the command had started.
func (c *child) forget() { c.started = releaseAll(c.started) }

// releaseAll lets go of the handles ps, and returns ps emptied.
func releaseAll(ps []*os.Process) []*os.Process {
	for _, p := range ps {
		_ = p.Release()
	}
	return ps[:0]
}

// running reports whether a process of the command's own process group,
// or of the processes it had started when it was last signalled, has yet
// to exit. A zombie has exited: one whose parent reaps nothing stays in the
// group (dlock as a container's PID 1 inherits the command's orphans).
func (c *child) running() bool {
	if c.pgid == 0 {
		return anyRunning(c.started)
	}
	if syscall.Kill(-c.pgid, 0) == syscall.ESRCH {
		return false
	}
	if anyRunning(c.left) {
		return true
	}
	// Those seen before have exited: look again, for any they started
	// since (and the first time, once the command has exited).
	c.left = releaseAll(c.left)
	pids, ok := groupMembers(c.pgid)
	if !ok {
		return true // as the kernel says
	}
	for _, pid := range pids {
		if p, err := os.FindProcess(pid); err == nil {
			c.left = append(c.left, p)
		}
	}
	return anyRunning(c.left)
}

// anyRunning reports whether a process of ps has yet to exit.
func anyRunning(ps []*os.Process) bool {
	for _, p := range ps {
		// The handle (a pidfd on Linux) keeps the PID p's while p is a
		// zombie, which has exited.
		if p.Signal(syscall.Signal(0)) == nil && !exitedProcess(p.Pid) {
			return true
		}
	}
	return false
}

// kill sends SIGKILL to what is left of the command's own process group,
// or of the processes it had started when it was last signalled.
func (c *child) kill() {
	if c.pgid > 0 {
		_ = syscall.Kill(-c.pgid, syscall.SIGKILL)
		c.left = releaseAll(c.left)
		return
	}
	for _, p := range c.started {
		_ = p.Signal(syscall.SIGKILL)
	}
	c.forget()
}

// status is the command's exit status in shell terms: 128+N if signal N
// killed it. Call it after done is closed.
func (c *child) status() int {
	ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok {
		return c.cmd.ProcessState.ExitCode()
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// lossCause is why l's Context ended while the command ran: only a loss
// can end it then.
func lossCause(l *dlock.Lock) error {
	cause := context.Cause(l.Context())
	if cause == nil || errors.Is(cause, dlock.ErrReleased) {
		cause = dlock.ErrLockLost
	}
	return cause
}

// leftoverPoll is how often supervise looks whether the processes a
// stopped command started have exited: nothing tells when a process group
// has emptied.
const leftoverPoll = 20 * time.Millisecond

// supervise waits for the command to exit, forwarding signals to it, and
// stops it if the lock is lost or maxHold (if positive) passes: SIGTERM,
// then SIGKILL after grace. It returns the cause of the stop (errMaxHold
// for maxHold), or nil if the lock was still held when the command exited.
// held names the lock in what it says (runFlags.held).
func (a *app) supervise(ch *child, l *dlock.Lock, held string, sigs <-chan os.Signal, grace, maxHold time.Duration) error {
	lockDone := l.Done()
	var lost error
	var graceC, holdC, leftC <-chan time.Time
	done := ch.done // nil once the command exited before the processes it started
	// killed is set once --grace ran out: SIGKILL was sent, but the
	// SIGTERM may have ended the command already (at once, with --grace 0).
	killed := false
	if maxHold > 0 {
		t := time.NewTimer(maxHold)
		defer t.Stop()
		holdC = t.C
	}
	graceTimer := time.NewTimer(grace)
	graceTimer.Stop()
	defer graceTimer.Stop()
	// In a group of its own COMMAND does not get the terminal's Ctrl-Z (nor
	// a SIGCONT to dlock's group): stopped alone, dlock would leave it
	// working while nothing renews the lock. So dlock stops and resumes
	// with it, as one shell job (in a shared group the kernel does that).
	jobSigs := ch.jobSigs
	if jobSigs != nil {
		defer signal.Stop(jobSigs)
	}
	// Telling of a stop waits for whoever reads stderr, which may hang: the
	// stop must not wait with it (the SIGKILL after grace above all). So
	// the notes are written in order on their own, and are out before
	// supervise returns, once what is left of a stopped command is killed.
	said := make(chan struct{})
	close(said)
	defer func() {
		if lost != nil {
			ch.kill() // whatever is left of its process group works without the lock
		}
		<-said
	}()
	note := func(format string, args ...any) {
		prev, done := said, make(chan struct{})
		said = done
		go func() {
			<-prev
			fmt.Fprintf(a.stderr, format, args...)
			close(done)
		}()
	}
	stop := func(cause error, what string) {
		lost, lockDone, holdC = cause, nil, nil
		ch.signal(syscall.SIGTERM) // before telling of it: stderr may be slow
		// A stopped command (SIGSTOP, a Ctrl-Z meant for it) cannot act on
		// the SIGTERM before it is continued, and would only be SIGKILLed
		// once --grace ends: resumed, as a service manager does.
		ch.signal(syscall.SIGCONT)
		note("dlock: %s: sent SIGTERM to the command, SIGKILL in %v\n", what, grace)
		graceTimer.Reset(grace)
		graceC = graceTimer.C
	}
	for {
		select {
		case <-done:
			if lost == nil && l.Context().Err() != nil {
				// Lost as the command ended (select picks either): it may
				// have been first, so report it, as Do does.
				lost = lossCause(l)
			}
			if killed && ch.status() == 128+int(syscall.SIGKILL) {
				note("dlock: the command did not exit within --grace %v: SIGKILL ended it\n", grace)
			}
			if graceC != nil && ch.running() {
				// The SIGTERM ended the command (a shell) before what it
				// started (its program, still shutting down): they got
				// the SIGTERM together, and have the same --grace.
				done = nil
				poll := time.NewTicker(leftoverPoll)
				defer poll.Stop()
				leftC = poll.C
				continue
			}
			return lost
		case <-leftC:
			if !ch.running() {
				return lost
			}
		case s := <-sigs:
			sig := s.(syscall.Signal)
			if ch.pgid == 0 && (sig == syscall.SIGINT || sig == syscall.SIGQUIT) {
				continue // the terminal sent it to the command as well
			}
			ch.signal(sig)
		case s := <-jobSigs:
			if s == syscall.SIGCONT {
				ch.signal(syscall.SIGCONT)
				continue
			}
			// SIGSTOP, not the SIGTSTP COMMAND could ignore and work on.
			ch.signal(syscall.SIGSTOP)
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		case <-lockDone:
			cause := lossCause(l)
			stop(cause, fmt.Sprintf("lost the %s (%s)", held, a.causeLine(cause, l.Key())))
		case <-holdC:
			stop(errMaxHold, fmt.Sprintf("--max-hold %v passed for %s", maxHold, held))
		case <-graceC:
			graceC, killed = nil, true
			ch.signal(syscall.SIGKILL) // told of once it is gone, if it ended it
			if done == nil {
				note("dlock: what the command started did not exit within --grace %v: SIGKILL ended it\n", grace)
				return lost
			}
		}
	}
}
