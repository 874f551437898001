package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// listKinds are the values of list --kind: the library's (dlock.WithKind).
var listKinds = []string{"lock", "semaphore", "rwmutex"}

func (a *app) listCmd() *cobra.Command {
	var asJSON, long bool
	var kind string
	cmd := &cobra.Command{
		Use:   "list [PATTERN]",
		Short: "List the locks (or semaphores, RWMutexes) that are held",
		Long: `List prints the names of the locks held now under --prefix, one a line,
sorted (a name that is not printable UTF-8, or starts with '"', is quoted as
a Go string; with --json, one that is not UTF-8, which JSON cannot carry, or
starts with '"'). PATTERN is a Redis glob on the lock name (*, ?, [abc];
default all).
It walks the keyspace with SCAN, never KEYS, on every master of a cluster, so
it does not block Redis. With --long it also inspects each lock, and leaves
out the names SCAN cannot tell apart: a lock released meanwhile, and a hash
that other code stored at a lock's name. A lock whose fence counter's or
waiters' name holds other code's data is shown, and said so on stderr
(status 1).

With --kind semaphore it lists the semaphores that have holders instead
(those of run --capacity and inspect --capacity), and with --kind rwmutex
the readers-writer locks (inspect --rwmutex): a lock, a semaphore and an
RWMutex of one name are three things, each listed with its kind only.
With --long it shows each one's permits in use and capacity (the holders'
own), or whether it is read or write locked, with its holders and waiters,
and leaves out those nobody holds now and other code's hashes (other
code's data at their waiters' names is said as for a lock).`,
		Example: `  dlock list
  dlock list 'import:*'
  dlock list --long --json
  dlock list --kind semaphore --long`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("list takes at most one PATTERN (quote it so the shell does not expand it)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(listKinds, kind) {
				return usagef("--kind %q: must be lock, semaphore or rwmutex", kind)
			}
			pattern := ""
			if len(args) == 1 {
				pattern = args[0]
			}
			// A bad pattern is a usage error whether or not Redis can be
			// reached.
			if err := dlock.CheckListPattern(pattern); err != nil {
				return usagef("%v", err)
			}
			// The listing takes as many round trips as there are names
			// (with --long): adminTimeout bounds each, not all of them.
			ctx := context.Background()
			a.conn.bound = adminTimeout
			c, err := a.connect(ctx, "dlock list")
			if err != nil {
				return err
			}
			defer c.Close()
			names, err := c.locks.List(ctx, pattern, dlock.WithKind(kind))
			if err != nil {
				return redisFailure(err)
			}
			if names == nil {
				names = []string{}
			}
			if !long {
				if asJSON {
					return writeJSON(a.stdout, names)
				}
				for _, n := range names {
					if _, err := fmt.Fprintln(a.stdout, keyText(n)); err != nil {
						return outputFailed(err)
					}
				}
				return nil
			}
			if kind != "lock" {
				return a.listPermits(ctx, c.locks, kind, names, asJSON)
			}
			infos := []*dlock.LockInfo{}
			var unread []error // of locks listed, read despite other data at their other names
			for _, n := range names {
				info, err := c.locks.Inspect(ctx, n)
				if info == nil && errors.Is(err, dlock.ErrWrongType) {
					continue // a hash at a lock's name that is not a lock
				}
				if info == nil {
					return redisFailure(err)
				}
				if info.Held { // it may have been released since SCAN saw it
					infos = append(infos, info)
					if err != nil {
						unread = append(unread, err)
					}
				}
			}
			if asJSON {
				if err := writeJSON(a.stdout, infos); err != nil {
					return err
				}
				return a.listed(unread)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tLEASE LEFT\tFENCE\tWAITERS\tHOLDER")
			for _, i := range infos {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", keyText(i.Key), leaseLeft(i.TTL), i.Fence, i.Waiters, holderText(i.Holder))
			}
			if err := outputFailed(tw.Flush()); err != nil {
				return err
			}
			return a.listed(unread)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array (of names, or of LockInfo, or SemaphoreInfo, with --long)")
	cmd.Flags().BoolVarP(&long, "long", "l", false, "inspect each: lease left, fence, waiters, holder (a semaphore's permits in use, an RWMutex's mode, holders, waiters)")
	cmd.Flags().StringVar(&kind, "kind", "lock", "what to list: lock, semaphore or rwmutex")
	_ = cmd.RegisterFlagCompletionFunc("kind", cobra.FixedCompletions(listKinds, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// listed ends list --long once the names are printed: each error of errs
// (one shown, but other data at the names of its fence counter or
// waiters) on a line of its own on stderr, and status 1 if there is any.
func (a *app) listed(errs []error) error {
	for _, err := range errs {
		fmt.Fprintln(a.stderr, "dlock: "+a.errorLine(err))
	}
	if len(errs) > 0 {
		return &exitError{code: exitFailure}
	}
	return nil
}

// listPermits prints list --long of the semaphores or RWMutexes names
// (kind), inspected each; it leaves out those nobody holds now (the last
// holder left since SCAN saw them) and hashes that other code stored at
// their names.
func (a *app) listPermits(ctx context.Context, c *dlock.Client, kind string, names []string, asJSON bool) error {
	infos := []*dlock.SemaphoreInfo{}
	var unread []error // of those listed, read despite other data at their waiters' names
	for _, n := range names {
		var p permitsAdmin = c.RWMutex(n)
		if kind == "semaphore" {
			p = c.Semaphore(n, 1) // Inspect reads the holders' capacity, whatever this one
		}
		info, err := p.Inspect(ctx)
		if info == nil && errors.Is(err, dlock.ErrWrongType) {
			continue
		}
		if info == nil {
			return redisFailure(err)
		}
		if len(info.Holders) > 0 {
			infos = append(infos, info)
			if err != nil {
				unread = append(unread, err)
			}
		}
	}
	if asJSON {
		if err := writeJSON(a.stdout, infos); err != nil {
			return err
		}
		return a.listed(unread)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	if kind == "semaphore" {
		fmt.Fprintln(tw, "KEY\tIN USE\tCAPACITY\tHOLDERS\tWAITERS")
	} else {
		fmt.Fprintln(tw, "KEY\tMODE\tHOLDERS\tWAITERS")
	}
	for _, i := range infos {
		if kind == "semaphore" {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", keyText(i.Key), i.InUse, i.Capacity, len(i.Holders), i.Waiters)
			continue
		}
		mode := "read"
		if i.InUse >= dlock.MaxPermits {
			mode = "write"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", keyText(i.Key), mode, len(i.Holders), i.Waiters)
	}
	if err := outputFailed(tw.Flush()); err != nil {
		return err
	}
	return a.listed(unread)
}
