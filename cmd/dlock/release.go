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
	Lock     *dlock.LockInfo `json:"lock"` // as read just before the release
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

Releasing a lock that is not held changes nothing and exits with status 1.`,
		Example:           `  dlock release --force nightly-report`,
		Args:              exactArgs(1, "one KEY"),
		ValidArgsFunction: a.completeKeys,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !force {
				return usagef("release removes the lock whoever holds it: add --force to confirm")
			}
			key := args[0]
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
			err = c.locks.ForceRelease(ctx, key)
			if errors.Is(err, dlock.ErrNotHeld) {
				if asJSON {
					info.Held = false
					_ = writeJSON(a.stdout, releaseReport{Released: false, Lock: info})
				}
				return exitf(exitFailure, "lock %q is not held; nothing was removed", key)
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
