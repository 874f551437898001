package main

import (
	"context"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// completeTimeout keeps shell completion snappy when Redis is slow or away.
const completeTimeout = 2 * time.Second

// globEscaper escapes the characters that are special in a Redis glob.
var globEscaper = strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)

// completeKeys completes a lock name from the locks held now, or with
// --capacity or --rwmutex, a semaphore's or an RWMutex's from those that
// have holders. It prints nothing if Redis cannot be reached. A name with
// a control character is left out (see completable).
func (a *app) completeKeys(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	a.setLogging()
	if a.conn.validate(cmd) != nil { // PersistentPreRunE does not run here
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(context.Background(), completeTimeout)
	defer cancel()
	a.conn.bound = completeTimeout
	c, err := a.connect(ctx, "dlock completion")
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer c.Close()
	names, err := c.locks.List(ctx, globEscaper.Replace(toComplete)+"*", dlock.WithKind(kindNamed(cmd)))
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return slices.DeleteFunc(names, func(n string) bool { return !completable(n) }), cobra.ShellCompDirectiveNoFileComp
}

// kindNamed is what cmd's KEY names, by its flags (kindFlags): a
// semaphore, an RWMutex or a lock.
func kindNamed(cmd *cobra.Command) string {
	switch {
	case cmd.Flags().Changed("rwmutex"):
		return "rwmutex"
	case cmd.Flags().Changed("capacity"):
		return "semaphore"
	}
	return "lock"
}

// completable reports whether a lock name can be offered to the shell. The
// completion protocol is one candidate a line, its description after a tab,
// so a newline or tab in a name would split it into other, wrong
// candidates, and an escape sequence would reach the terminal. Quoting it
// (keyText) would not help: the shell inserts a candidate as it is, and the
// quoted text names another lock. Such a name must be typed.
func completable(name string) bool {
	return !strings.ContainsFunc(name, unicode.IsControl)
}
