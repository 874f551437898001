//go:build unix

package main

import (
	"context"

	"github.com/dlock-go/dlock/internal/redisserver"
)

// redisInstallHint says how to get redis-server when it is missing.
const redisInstallHint = "install Redis (from a dlock checkout: ./scripts/install-redis.sh; " +
	"on Debian/Ubuntu: sudo apt-get install redis-server; on macOS: brew install redis)"

// startPrivateServer starts redis-server from $PATH on a free loopback
// port, with no persistence, in a temporary directory, and waits until it
// answers PING. The caller stops it with Stop. If redis-server is missing,
// the error says how to install it, or else how to use a running server:
// useRunning, as the caller's flags allow (bench refuses --redis with
// --private).
func startPrivateServer(ctx context.Context, useRunning string) (*redisserver.Server, error) {
	bin, err := redisserver.FindBinary("redis-server") // $PATH only, as the help says
	if err != nil {
		return nil, exitf(exitUnavailable, "%v: %s, or %s", err, redisInstallHint, useRunning)
	}
	s, err := redisserver.Start(ctx, bin, redisserver.Options{SysProcAttr: childProcAttr()})
	if err != nil {
		return nil, exitf(exitUnavailable, "could not start %s: %v", bin, err)
	}
	return s, nil
}
