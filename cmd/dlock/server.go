//go:build unix

package main

import (
	"context"

	"github.com/dlock-go/dlock/internal/redisserver"
)

// redisInstallHint says how to get redis-server when it is missing.
const redisInstallHint = "install Redis (from a dlock checkout: ./scripts/install-redis.sh; " +
	"on Debian/Ubuntu: sudo apt-get install redis-server; on macOS: brew install redis), " +
	"or point dlock at a running server with --redis URL"

// startPrivateServer starts redis-server from $PATH on a free loopback
// port, with no persistence, in a temporary directory, and waits until it
// answers PING. The caller stops it with Stop.
func startPrivateServer(ctx context.Context) (*redisserver.Server, error) {
	bin, err := redisserver.FindBinary("redis-server") // $PATH only, as the help says
	if err != nil {
		return nil, exitf(exitUnavailable, "%v: %s", err, redisInstallHint)
	}
	s, err := redisserver.Start(ctx, bin, redisserver.Options{SysProcAttr: childProcAttr()})
	if err != nil {
		return nil, exitf(exitUnavailable, "could not start %s: %v", bin, err)
	}
	return s, nil
}
