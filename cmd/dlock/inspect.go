package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// adminTimeout bounds the Redis calls of inspect, list and release.
const adminTimeout = 10 * pingTimeout

func (a *app) inspectCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect KEY",
		Short: "Show a lock's state: holder, lease, fencing token, waiters",
		Long: `Inspect reads a lock in one script, without changing it: whether it is
held, by whom (host, pid, client and metadata recorded when it was taken),
since when, how much lease is left, its fencing token, hold count (reentrant
holds) and how many waiters are queued. For a free lock the fence shown is
the last one issued. The exit status is 0 whether the lock is held or free.`,
		Example: `  dlock inspect nightly-report
  dlock inspect --json nightly-report | jq .held`,
		Args:              exactArgs(1, "one KEY"),
		ValidArgsFunction: a.completeKeys,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkKey(args[0]); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
			defer cancel()
			c, err := a.connect(ctx, "dlock inspect")
			if err != nil {
				return err
			}
			defer c.Close()
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
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the state as JSON (the library's LockInfo; ttl_ns in nanoseconds)")
	return cmd
}

// writeInfo prints a lock's state as aligned "name value" lines, each
// starting with indent. It returns the first write error (outputFailed).
func writeInfo(w io.Writer, info *dlock.LockInfo, indent string) (err error) {
	line := func(name, format string, args ...any) {
		if _, werr := fmt.Fprintf(w, "%s%-9s %s\n", indent, name, fmt.Sprintf(format, args...)); err == nil && werr != nil {
			err = outputFailed(werr)
		}
	}
	line("key", "%s", keyText(info.Key))
	if !info.Held {
		line("state", "free")
		if info.Fence != 0 {
			line("fence", "%d (the last one issued)", info.Fence)
		}
		line("waiters", "%d", info.Waiters)
		return err
	}
	line("state", "held")
	line("holder", "%s", holderText(info.Holder))
	line("acquired", "%s", ago(info.AcquiredAt))
	line("lease", "%s left", human(info.TTL))
	line("fence", "%d", info.Fence)
	line("holds", "%d", info.HoldCount)
	line("owner", "%s", info.Owner)
	line("waiters", "%d", info.Waiters)
	return err
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return outputFailed(enc.Encode(v))
}
