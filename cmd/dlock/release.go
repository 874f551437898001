package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// releaseReport is what `release --force --json` prints: Lock for a lock,
// Semaphore and Holder for permits.
type releaseReport struct {
	Released  bool                 `json:"released"`
	Lock      *dlock.LockInfo      `json:"lock,omitempty"`      // as read just before the release, removed only if Released
	Semaphore *dlock.SemaphoreInfo `json:"semaphore,omitempty"` // as read just before the release
	Holder    *dlock.PermitsInfo   `json:"holder,omitempty"`    // --owner's permits in Semaphore, removed only if Released
}

func (a *app) releaseCmd() *cobra.Command {
	var force, asJSON bool
	var owner string
	var kind kindFlags
	cmd := &cobra.Command{
		Use:   "release --force KEY",
		Short: "Remove a stuck lock (or a semaphore's holder), whoever holds it",
		Long: `Release --force removes the lock KEY whoever holds it, as an operator clearing
a stuck lock, and hands it to the first waiter in the queue (which is woken at
once). It prints what it removed, as read just before removing it. The holder
is not told until its next renewal (within a third of its lease, or half after
one that went early to share a round trip); a 'dlock run' holder then stops its
command and exits with status 79.

Only the holder it read is removed: if that one released the lock, or another
took it, between the read and the removal, nothing is removed and it exits
with status 1, as for a lock that is not held. With --owner TOKEN, only the
holder of that owner token (as inspect shows it) is removed.

With --capacity M (a semaphore, as for run --capacity) or --rwmutex (a
readers-writer lock), KEY has several holders: release --force removes the
one whose owner token --owner gives (inspect shows them), and hands its
permits to the waiters first in line, as its own release would. If that
token holds no permits, nothing is removed and it exits with status 1; if
the holders were granted another capacity than M, nothing is removed and
it exits with status 64, as run --capacity does.`,
		Example: `  dlock release --force nightly-report
  dlock inspect --capacity 3 encoders
  dlock release --force --capacity 3 --owner 0f3c...e1 encoders`,
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
			if err := kind.validate(cmd); err != nil {
				return err
			}
			ownerSet := cmd.Flags().Changed("owner")
			if ownerSet && (owner == "" || strings.HasPrefix(owner, ":")) {
				return usagef("--owner %q: not an owner token", owner)
			}
			// Usage is checked before connecting (exit 64 whether or not
			// Redis can be reached).
			if kind.named() && !ownerSet {
				return usagef("release --force of a semaphore's permits needs --owner TOKEN (dlock inspect shows the holders' tokens)")
			}
			ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
			defer cancel()
			a.conn.bound = adminTimeout
			c, err := a.connect(ctx, "dlock release")
			if err != nil {
				return err
			}
			defer c.Close()
			if p := kind.permits(c.locks, key); p != nil {
				return a.releasePermits(ctx, p, &kind, key, owner, asJSON)
			}
			info, other := c.locks.Inspect(ctx, key)
			other = asRelease(other)
			if info == nil {
				return redisFailure(other)
			}
			// other, if not nil, is other code's data at the lock's fence
			// counter's or waiters' names: the lock is removed all the same,
			// and that data left as it is.
			if !info.Held {
				if asJSON {
					_ = writeJSON(a.stdout, releaseReport{Released: false, Lock: info})
				}
				return exitf(exitFailure, "lock %q is not held; nothing was removed", key)
			}
			if ownerSet && info.Owner != owner {
				if asJSON {
					_ = writeJSON(a.stdout, releaseReport{Released: false, Lock: info})
				}
				return exitf(exitFailure, "lock %q is not held by owner %s; nothing was removed", key, owner)
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
			if other != nil {
				fmt.Fprintln(a.stderr, "dlock: "+a.errorLine(other)+" (left as it is)")
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
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"released": bool, "lock": LockInfo} as JSON (for permits: {"released", "semaphore": SemaphoreInfo, "holder": PermitsInfo})`)
	cmd.Flags().StringVar(&owner, "owner", "", "remove only the holder of this owner token (as inspect shows it); needed with --capacity and --rwmutex")
	kind.add(cmd)
	return cmd
}

// releasePermits is release --force of owner's permits in p: it prints
// what it removed, as read just before removing it.
func (a *app) releasePermits(ctx context.Context, p permitsAdmin, kind *kindFlags, key, owner string, asJSON bool) error {
	// other, if not nil, is other code's data at the waiters' name: the
	// permits are taken away all the same, and that data left as it is.
	info, other := p.Inspect(ctx)
	other = asRelease(other)
	if info == nil {
		return redisFailure(other)
	}
	if err := kind.checkHeld(info); err != nil {
		return err
	}
	rep := releaseReport{Semaphore: info}
	for i := range info.Holders {
		if info.Holders[i].Owner == owner {
			rep.Holder = &info.Holders[i]
		}
	}
	if rep.Holder != nil {
		err := p.ForceRelease(ctx, owner)
		if err != nil && !errors.Is(err, dlock.ErrNotHeld) {
			return redisFailure(err)
		}
		rep.Released = err == nil
	}
	if rep.Released && other != nil {
		fmt.Fprintln(a.stderr, "dlock: "+a.errorLine(other)+" (left as it is)")
	}
	if asJSON {
		if err := writeJSON(a.stdout, rep); err != nil || rep.Released {
			return err
		}
	}
	switch {
	case rep.Holder == nil:
		return exitf(exitFailure, "%s %q has no holder with owner %s; nothing was removed", info.Kind, key, owner)
	case !rep.Released:
		return exitf(exitFailure, "%s %q is no longer held by owner %s (released since it was read); nothing was removed", info.Kind, key, owner)
	}
	if _, err := fmt.Fprintf(a.stdout, "released the permits of owner %s in %s %q; they were:\n", owner, info.Kind, key); err != nil {
		return outputFailed(err)
	}
	if err := writePermits(a.stdout, rep.Holder, info.Kind, "  "); err != nil {
		return err
	}
	if info.Waiters > 0 {
		_, err := fmt.Fprintf(a.stdout, "%d waiters were queued: the first in line have been handed the permits that fit\n", info.Waiters)
		return outputFailed(err)
	}
	return nil
}

// asRelease is err, from the Inspect that release --force reads the holder
// with, said as the release's: the library's error names its Inspect
// (`inspect "KEY"`), and the operator ran no inspect. The library's
// ForceRelease, which comes next, names itself "force release".
func asRelease(err error) error {
	if err == nil {
		return nil
	}
	return releaseError{err}
}

// releaseError is an Inspect error as asRelease says it.
type releaseError struct{ error }

func (e releaseError) Error() string {
	return inspectOp.ReplaceAllString(e.error.Error(), "${1}force release ")
}

func (e releaseError) Unwrap() error { return e.error }

// inspectOp is the start of the library's Inspect errors: `dlock: inspect `,
// or for permits `dlock: semaphore inspect ` (rwmutex).
var inspectOp = regexp.MustCompile(`^(dlock: (?:semaphore |rwmutex )?)inspect `)
