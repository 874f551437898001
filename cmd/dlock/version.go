package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// buildVersion is set at link time: go build -ldflags "-X main.buildVersion=v1.2.3".
var buildVersion = ""

// version describes this binary: its version (from the link flag or the
// module build info), the VCS revision if known, and the Go version.
func version() string {
	v, rev := buildVersion, ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = s.Value[:12]
			}
			if s.Key == "vcs.modified" && s.Value == "true" && rev != "" {
				rev += "+dirty"
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	out := "dlock " + v
	if rev != "" {
		out += " " + rev
	}
	return fmt.Sprintf("%s %s %s/%s", out, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of dlock",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(a.stdout, version())
			return outputFailed(err)
		},
	}
}
