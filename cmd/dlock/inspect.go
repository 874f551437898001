package main

import (
	"context"
	"encoding/json"
	"io"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// adminTimeout bounds the Redis calls of inspect and release, and each of
// list's.
const adminTimeout = 10 * pingTimeout

func (a *app) inspectCmd() *cobra.Command {
	var asJSON bool
	var kind kindFlags
	cmd := &cobra.Command{
		Use:   "inspect KEY",
		Short: "Show a lock's (or semaphore's) state: holders, leases, fencing tokens, waiters",
		Long: `Inspect reads a lock in one script, without changing it: whether it is
held, by whom (host, pid, client and metadata recorded when it was taken),
since when, how much lease is left (or "no expiry" for a key made without
one, which never frees itself), its fencing token, hold count (reentrant
holds) and how many waiters are queued. For a free lock the fence shown is
the last one issued. The exit status is 0 whether the lock is held or free;
other code's data at the names of the lock's fence counter or waiters is
said on stderr after the state, with status 1.

With --capacity M, KEY names a semaphore (as for run --capacity), and with
--rwmutex a readers-writer lock: inspect shows each holder's owner token,
who it is, its permits (read or write for an RWMutex), lease left and
fence, and the capacity, the permits in use and the waiters queued. An M
other than the capacity the holders were granted under is refused (status
64), as run --capacity refuses it; with no holder, M is the capacity
shown. Without either flag, KEY names a lock: a semaphore or RWMutex of
that name is shown as a free lock.`,
		Example: `  dlock inspect nightly-report
  dlock inspect --json nightly-report | jq .held
  dlock inspect --capacity 3 encoders`,
		Args:              exactArgs(1, "one KEY"),
		ValidArgsFunction: a.completeKeys,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkKey(args[0]); err != nil {
				return err
			}
			if err := kind.validate(cmd); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
			defer cancel()
			a.conn.bound = adminTimeout
			c, err := a.connect(ctx, "dlock inspect")
			if err != nil {
				return err
			}
			defer c.Close()
			a.warnEviction(ctx, c)
			// With an error, Inspect's info is what it read despite other
			// code's data at one of the names: shown, then the error.
			if p := kind.permits(c.locks, args[0]); p != nil {
				info, err := p.Inspect(ctx)
				if info == nil {
					return redisFailure(err)
				}
				if err := kind.checkHeld(info); err != nil {
					return err
				}
				return a.show(asJSON, info, func() error { return writeSemaphoreInfo(a.stdout, info, "") }, err)
			}
			info, err := c.locks.Inspect(ctx, args[0])
			if info == nil {
				return redisFailure(err)
			}
			return a.show(asJSON, info, func() error { return writeInfo(a.stdout, info, "") }, err)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the state as JSON (the library's LockInfo, or SemaphoreInfo; ttl_ns in nanoseconds; a key that is not UTF-8 quoted as list --json does)")
	kind.add(cmd)
	return cmd
}

// show prints v, as JSON or with text, then fails with err if it is not
// nil: other code's data at one of the names, found while reading v.
func (a *app) show(asJSON bool, v any, text func() error, err error) error {
	var werr error
	if asJSON {
		werr = writeJSON(a.stdout, v)
	} else {
		werr = text()
	}
	if werr != nil || err == nil {
		return werr
	}
	return redisFailure(err)
}

// writeInfo prints a lock's state as aligned "name value" lines, each
// starting with indent. It returns the first write error (outputFailed).
func writeInfo(w io.Writer, info *dlock.LockInfo, indent string) error {
	f := &fields{w: w, indent: indent}
	f.line("key", "%s", keyText(info.Key))
	if !info.Held {
		f.line("state", "free")
		if info.Fence != 0 {
			f.line("fence", "%d (the last one issued)", info.Fence)
		}
		f.line("waiters", "%d", info.Waiters)
		return f.err
	}
	f.line("state", "held")
	f.line("holder", "%s", holderText(info.Holder))
	f.line("acquired", "%s", ago(info.AcquiredAt))
	if info.TTL > 0 {
		f.line("lease", "%s left", human(info.TTL))
	} else {
		f.line("lease", "%s", leaseText(info.TTL))
	}
	f.line("fence", "%d", info.Fence)
	f.line("holds", "%d", info.HoldCount)
	f.line("owner", "%s", textOrEmpty(info.Owner)) // free text, as the holder's host
	f.line("waiters", "%d", info.Waiters)
	return f.err
}

// writeJSON prints v as indented JSON, with the lock names in it as
// jsonKey writes them.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return outputFailed(enc.Encode(jsonKeys(v)))
}
