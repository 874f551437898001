package main

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// completeTimeout keeps shell completion snappy when Redis is slow or away.
const completeTimeout = 2 * time.Second

// globEscaper escapes the characters that are special in a Redis glob.
var globEscaper = strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)

// completeKeys completes a lock name from the locks held now. It prints
// nothing if Redis cannot be reached.
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
	c, err := a.connect(ctx, "dlock completion")
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer c.Close()
	names, err := c.locks.List(ctx, globEscaper.Replace(toComplete)+"*")
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
