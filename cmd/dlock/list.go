package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

func (a *app) listCmd() *cobra.Command {
	var asJSON, long bool
	cmd := &cobra.Command{
		Use:   "list [PATTERN]",
		Short: "List the locks that are held",
		Long: `List prints the names of the locks held now under --prefix, one a line,
sorted (a name that is not printable UTF-8, or starts with '"', is quoted as
a Go string). PATTERN is a Redis glob on the lock name (*, ?, [abc];
default all).
It walks the keyspace with SCAN, never KEYS, on every master of a cluster, so
it does not block Redis. With --long it also inspects each lock, and leaves
out the names SCAN cannot tell apart: a lock released meanwhile, and a hash
that other code stored at a lock's name.`,
		Example: `  dlock list
  dlock list 'import:*'
  dlock list --long --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("list takes at most one PATTERN (quote it so the shell does not expand it)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			pattern := ""
			if len(args) == 1 {
				pattern = args[0]
			}
			ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
			defer cancel()
			c, err := a.connect(ctx, "dlock list")
			if err != nil {
				return err
			}
			defer c.Close()
			names, err := c.locks.List(ctx, pattern)
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
			infos := []*dlock.LockInfo{}
			for _, n := range names {
				info, err := c.locks.Inspect(ctx, n)
				if errors.Is(err, dlock.ErrWrongType) {
					continue // a hash at a lock's name that is not a lock
				}
				if err != nil {
					return redisFailure(err)
				}
				if info.Held { // it may have been released since SCAN saw it
					infos = append(infos, info)
				}
			}
			if asJSON {
				return writeJSON(a.stdout, infos)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tLEASE LEFT\tFENCE\tWAITERS\tHOLDER")
			for _, i := range infos {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", keyText(i.Key), human(i.TTL), i.Fence, i.Waiters, holderText(i.Holder))
			}
			return outputFailed(tw.Flush())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array (of names, or of LockInfo with --long)")
	cmd.Flags().BoolVarP(&long, "long", "l", false, "inspect each lock: lease left, fence, waiters, holder")
	return cmd
}
