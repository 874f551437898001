package main

import (
	"errors"
	"fmt"
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
