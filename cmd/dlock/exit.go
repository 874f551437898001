package main

import (
	"errors"
	"fmt"
	"io"
)

// Exit statuses. The usage, unavailable and not-obtained values follow
// sysexits.h; `run` otherwise exits with its command's own status.
const (
	exitOK          = 0
	exitFailure     = 1  // anything else, e.g. releasing a lock that is not held
	exitUsage       = 64 // bad flag, duration, URL or arguments
	exitUnavailable = 69 // Redis unreachable or failing
	exitNotObtained = 75 // run: the lock was held elsewhere (--no-wait, --wait)
	exitLockLost    = 79 // run: the lock was lost while the command ran
)

// exitError is an error that ends the command with a given status. An empty
// message prints nothing (the status speaks for itself, as when `run`
// passes its command's status through).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// exitf returns an exitError with a formatted message.
func exitf(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// usagef returns a usage error (exit status 64).
func usagef(format string, args ...any) error {
	return exitf(exitUsage, format, args...)
}

// outputFailed is the error of output that could not be written (a full
// disk, a closed pipe): exit status 1, where the plain error would read as
// a usage error.
func outputFailed(err error) error {
	if err == nil {
		return nil
	}
	return exitf(exitFailure, "writing the output: %v", err)
}

// checkedOutput is the output of the commands that print as they go (demo,
// bench): it keeps the first write error and writes nothing after it, so
// that printing needs no check of its own (see printing).
type checkedOutput struct {
	w   io.Writer
	err error
}

func (o *checkedOutput) Write(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.w.Write(p)
	o.err = err
	return n, err
}

// printing runs a command that prints as it goes, and fails it (exit status
// 1, outputFailed) if any of its output could not be written. An error of
// the command's own comes first.
func (a *app) printing(run func() error) error {
	out := &checkedOutput{w: a.stdout}
	a.stdout = out
	if err := run(); err != nil {
		return err
	}
	return outputFailed(out.err)
}

// exitStatus returns the status an error from a command maps to: its own
// for an exitError, exitUsage for the errors cobra returns itself (unknown
// command or flag, wrong number of arguments).
func exitStatus(err error) int {
	if err == nil {
		return exitOK
	}
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return exitUsage
}
