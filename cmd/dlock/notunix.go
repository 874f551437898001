//go:build !unix

package main

import (
	"errors"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// On systems without Unix process groups and signals (Windows), dlock
// builds with inspect, list and release; run, demo and bench, which start
// and signal processes, say that they need a Unix system.

var errNeedsUnix = errors.New("needs a Unix system (process groups and signals)")

var forwardedSignals = []os.Signal{os.Interrupt}

func canSupervise() error { return errNeedsUnix }

func catchSIGPIPE() {}

// The rest is never reached: run stops at canSupervise.

type child struct{}

func startChild(string, []string, []string, io.Writer, io.Writer) (*child, error) {
	return nil, errNeedsUnix
}

func (c *child) status() int { return 0 }

func (c *child) kill() {}

func (a *app) supervise(*child, *dlock.Lock, string, <-chan os.Signal, time.Duration, time.Duration) error {
	return nil
}

func (a *app) demoCmd() *cobra.Command  { return needsUnixCmd("demo") }
func (a *app) benchCmd() *cobra.Command { return needsUnixCmd("bench") }

func needsUnixCmd(name string) *cobra.Command {
	return &cobra.Command{
		Use:    name,
		Short:  "Not available here: " + errNeedsUnix.Error(),
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return exitf(exitFailure, "%s %v", name, errNeedsUnix)
		},
	}
}
