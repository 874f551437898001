package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// kindFlags say what KEY names for inspect and release: a lock (neither
// flag), a semaphore of --capacity permits (as for run) or an RWMutex.
type kindFlags struct {
	capacity int64
	rwmutex  bool
}

func (f *kindFlags) add(cmd *cobra.Command) {
	cmd.Flags().Int64Var(&f.capacity, "capacity", 0, "KEY is a semaphore of this many permits (as given to run --capacity), not a lock")
	cmd.Flags().BoolVar(&f.rwmutex, "rwmutex", false, "KEY is a readers-writer lock (the library's RWMutex), not a lock")
}

func (f *kindFlags) validate(cmd *cobra.Command) error {
	if f.rwmutex && cmd.Flags().Changed("capacity") {
		return usagef("use either --capacity or --rwmutex, not both")
	}
	return checkCapacity(cmd, f.capacity)
}

// checkCapacity checks --capacity. An explicit 0 is no semaphore: not a
// silent fallback to a lock.
func checkCapacity(cmd *cobra.Command, capacity int64) error {
	if capacity < 0 || capacity > dlock.MaxPermits || capacity == 0 && cmd.Flags().Changed("capacity") {
		return usagef("--capacity %d: %s", capacity, capacityRange)
	}
	return nil
}

// capacityRange says which --capacity is good.
var capacityRange = fmt.Sprintf("must be between 1 and %d", int64(dlock.MaxPermits))

// checkHeld refuses a --capacity other than the one info's holders were
// granted under, as run's Acquire does (status 64): KEY would then name
// another semaphore than the operator's. Semaphore.Inspect reads the
// holders' capacity whatever the Semaphore's, so it is checked here.
func (f *kindFlags) checkHeld(info *dlock.SemaphoreInfo) error {
	if f.capacity > 0 && len(info.Holders) > 0 && info.Capacity != f.capacity {
		return usagef("--capacity %d: semaphore %s is held with capacity %d", f.capacity, keyText(info.Key), info.Capacity)
	}
	return nil
}

// permitsAdmin is what Semaphore and RWMutex offer operators.
type permitsAdmin interface {
	Inspect(ctx context.Context) (*dlock.SemaphoreInfo, error)
	ForceRelease(ctx context.Context, token string) error
}

// named reports whether KEY names a semaphore or an RWMutex, not a lock.
func (f *kindFlags) named() bool { return f.rwmutex || f.capacity > 0 }

// permits returns the semaphore or RWMutex KEY names, or nil for a lock.
func (f *kindFlags) permits(c *dlock.Client, key string) permitsAdmin {
	switch {
	case f.rwmutex:
		return c.RWMutex(key)
	case f.capacity > 0:
		return c.Semaphore(key, f.capacity)
	}
	return nil
}

// fields prints aligned "name value" lines, each starting with indent,
// and keeps the first write error (outputFailed).
type fields struct {
	w      io.Writer
	indent string
	err    error
}

func (f *fields) line(name, format string, args ...any) {
	if _, err := fmt.Fprintf(f.w, "%s%-9s %s\n", f.indent, name, fmt.Sprintf(format, args...)); f.err == nil && err != nil {
		f.err = outputFailed(err)
	}
}

// writeSemaphoreInfo prints a semaphore's state, then each holder's lines
// indented under it.
func writeSemaphoreInfo(w io.Writer, info *dlock.SemaphoreInfo, indent string) error {
	f := &fields{w: w, indent: indent}
	f.line("key", "%s", keyText(info.Key))
	f.line("kind", "%s", info.Kind)
	if info.Kind == "semaphore" {
		f.line("capacity", "%d", info.Capacity)
		f.line("in use", "%d", info.InUse)
	}
	f.line("waiters", "%d", info.Waiters)
	f.line("holders", "%d", len(info.Holders))
	for _, h := range info.Holders {
		if _, err := fmt.Fprintln(w); err != nil { // a blank line before each holder
			return outputFailed(err)
		}
		if err := writePermits(w, &h, info.Kind, indent+"  "); err != nil {
			return err
		}
	}
	return f.err
}

// writePermits prints one holder's permits; an RWMutex's as a reader or
// the writer.
func writePermits(w io.Writer, h *dlock.PermitsInfo, kind, indent string) error {
	f := &fields{w: w, indent: indent}
	f.line("owner", "%s", textOrEmpty(h.Owner)) // free text, as the holder's host
	f.line("holder", "%s", holderText(h.Holder))
	switch {
	case kind != "rwmutex":
		f.line("permits", "%d", h.Permits)
	case h.Permits == dlock.MaxPermits:
		f.line("mode", "write")
	default:
		f.line("mode", "read")
	}
	f.line("lease", "%s left", human(h.TTL))
	f.line("fence", "%d", h.Fence)
	return f.err
}
