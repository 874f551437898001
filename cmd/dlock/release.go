package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// releaseReport is what `release --force --json` prints.
type releaseReport struct {
	Released bool            `json:"released"`
	Lock     *dlock.LockInfo `json:"lock"` // as read just before the release, removed only if Released
}

func (a *app) releaseCmd() *cobra.Command {
	var force, asJSON bool
	cmd := &cobra.Command{
		Use:   "release --force KEY",
		Short: "Remove a stuck lock, whoever holds it",
		Long: `Release --force removes the lock KEY whoever holds it, as an operator clearing
a stuck lock, and hands it to the first waiter in the queue (which is woken at
once). It prints what it removed, as read just before removing it. The holder
is not told until its next renewal (within a third of its lease); a 'dlock run'
holder then stops its command and exits with status 79.

Only the holder it read is removed: if that one released the lock, or another
took it, between the read and the removal, nothing is removed and it exits
with status 1, as for a lock that is not held.`,
		Example:           `  dlock release --force nightly-report`,
		Args:              exactArgs(1, "one KEY"),
		ValidArgsFunction: a.completeKeys,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !force {
				return usagef("release removes the lock whoever holds it: add --force to confirm")
			}
			key := args[0]
			if err := checkKey(key); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
			defer cancel()
			c, err := a.connect(ctx, "dlock release")
			if err != nil {
				return err
			}
			defer c.Close()
			info, err := c.locks.Inspect(ctx, key)
			if err != nil {
				return redisFailure(err)
			}
			if !info.Held {
				if asJSON {
					_ = writeJSON(a.stdout, releaseReport{Released: false, Lock: info})
				}
				return exitf(exitFailure, "lock %q is not held; nothing was removed", key)
			}
			// Only the holder read (and printed) is removed, not one that
			// took the lock since.
			err = c.locks.ForceRelease(ctx, key, dlock.WithExpectedOwner(info.Owner))
			if errors.Is(err, dlock.ErrNotHeld) {
				if asJSON {
					_ = writeJSON(a.stdout, releaseReport{Released: false, Lock: info})
				}
				return exitf(exitFailure, "lock %q is no longer held by owner %s (released, or taken by another, since it was read); nothing was removed", key, info.Owner)
			}
			if err != nil {
				return redisFailure(err)
			}
			if asJSON {
				return writeJSON(a.stdout, releaseReport{Released: true, Lock: info})
			}
			if _, err := fmt.Fprintf(a.stdout, "released lock %q; it was:\n", key); err != nil {
				return outputFailed(err)
			}
			if err := writeInfo(a.stdout, info, "  "); err != nil {
				return err
			}
			if info.Waiters > 0 {
				_, err := fmt.Fprintf(a.stdout, "the first of %d waiters has been handed the lock\n", info.Waiters)
				return outputFailed(err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "confirm: remove the lock whoever holds it")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"released": bool, "lock": LockInfo} as JSON`)
	return cmd
}
