//go:build unix

package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// interruptContext is watchSignals for demo and bench: a context that
// SIGINT, SIGTERM or SIGHUP ends (its cause a signalError), so that they
// clean up and then exit 128+N (interrupted), as `run` does. As for run, a
// SIGHUP or SIGINT dlock was started ignoring (nohup) stays ignored.
func interruptContext() (context.Context, func()) {
	catchSIGPIPE()
	sigs := make(chan os.Signal, 1)
	// Never empty (SIGTERM): Notify with no signal would catch them all.
	signal.Notify(sigs, notIgnored([]os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP})...)
	ctx, stopWatching := watchSignals(sigs)
	return ctx, func() {
		signal.Stop(sigs)
		_ = stopWatching()
	}
}

// startError is err, from setting up demo or bench (starting the private
// server, connecting), unless a signal ended ctx meanwhile: then that
// interruption is the error (128+N), as it is later on.
func startError(ctx context.Context, err error, what string) error {
	if ctx.Err() != nil {
		return interrupted(context.Cause(ctx), "%s", what)
	}
	return err
}

// catchSIGPIPE keeps dlock alive when it writes to a pipe whose reader has
// gone (`dlock demo | head -1`, a log shipper that died): the write then
// fails with EPIPE and is handled as any failed write, after dlock has
// cleaned up (and, for run, stopped COMMAND if the lock is lost), instead
// of SIGPIPE killing it on the spot. For the rest of the process: the last
// words come after the command returns. Programs dlock starts get SIGPIPE's
// default back.
func catchSIGPIPE() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}
