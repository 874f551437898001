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
// clean up and then exit 128+N (interrupted), as `run` does.
func interruptContext() (context.Context, func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
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
