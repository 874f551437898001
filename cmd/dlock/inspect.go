package main

import (
	"context"
	"encoding/json"
	"io"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// adminTimeout bounds the Redis calls of inspect, list and release.
const adminTimeout = 10 * pingTimeout

func (a *app) inspectCmd() *cobra.Command {
	var asJSON bool
	var kind kindFlags
	cmd := &cobra.Command{
		Use:   "inspect KEY",
		Short: "Show a lock's (or semaphore's) state: holders, leases, fencing tokens, waiters",
		Long: `Inspect reads a lock in one script, without changing it: whether it is
held, by whom (host, pid, client and metadata recorded when it was taken),
since when, how much lease is left, its fencing token, hold count (reentrant
holds) and how many waiters are queued. For a free lock the fence shown is
the last one issued. The exit status is 0 whether the lock is held or free.

With --capacity M, KEY names a semaphore (as for run --capacity), and with
--rwmutex a readers-writer lock: inspect shows each holder's owner token,
who it is, its permits (read or write for an RWMutex), lease left and
fence, and the capacity (the holders' own, whatever M), the permits in use
and the waiters queued. Without either flag, KEY names a lock: a semaphore
or RWMutex of that name is shown as a free lock.`,
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
			c, err := a.connect(ctx, "dlock inspect")
			if err != nil {
				return err
			}
			defer c.Close()
			if p := kind.permits(c.locks, args[0]); p != nil {
				info, err := p.Inspect(ctx)
				if err != nil {
					return redisFailure(err)
				}
				if asJSON {
					return writeJSON(a.stdout, info)
				}
				return writeSemaphoreInfo(a.stdout, info, "")
			}
			info, err := c.locks.Inspect(ctx, args[0])
			if err != nil {
				return redisFailure(err)
			}
			if asJSON {
				return writeJSON(a.stdout, info)
			}
			return writeInfo(a.stdout, info, "")
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the state as JSON (the library's LockInfo, or SemaphoreInfo; ttl_ns in nanoseconds; a key that is not UTF-8 quoted as list --json does)")
	kind.add(cmd)
	return cmd
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
	f.line("lease", "%s left", human(info.TTL))
	f.line("fence", "%d", info.Fence)
	f.line("holds", "%d", info.HoldCount)
	f.line("owner", "%s", info.Owner)
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
