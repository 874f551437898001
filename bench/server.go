// Package bench measures dlock against the Go Redis locks people already
// use (redsync, bsm/redislock, rueidislock) on one real redis-server.
//
// It is a separate module so that the library never depends on its
// competitors. The scenarios are plain functions; cmd/report runs them
// several times and writes docs/benchmarks.md, and bench_test.go holds the
// `go test -bench -benchmem` allocation benchmarks.
package bench

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redisserver"
)

// Server is a redis-server process started for a benchmark run: Addr,
// Port and PID say where it is, Stop ends it.
type Server = redisserver.Server

// FindBinary returns the path of a redis tool (redis-server,
// redis-benchmark), looking in $PATH and then in /usr/bin, /usr/sbin and
// /usr/local/bin.
func FindBinary(name string) (string, error) {
	p, err := redisserver.FindBinary(name, redisserver.SystemDirs()...)
	if err != nil {
		return "", fmt.Errorf("%w: install it with `apt-get install redis-server redis-tools`", err)
	}
	return p, nil
}

// StartServer launches redis-server on a free loopback port without
// persistence and waits until it answers PING.
func StartServer() (*Server, error) {
	bin, err := FindBinary("redis-server")
	if err != nil {
		return nil, err
	}
	s, err := redisserver.Start(context.Background(), bin, redisserver.Options{
		// Room for every connection the scenarios open at once.
		Args:        []string{"--maxclients", "4064"},
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return nil, fmt.Errorf("could not start %s: %w", bin, err)
	}
	return s, nil
}

// ServerInfo reads one section of INFO as a map.
func ServerInfo(ctx context.Context, rdb *redis.Client, section string) (map[string]string, error) {
	s, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	m := make(map[string]string)
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if ok {
			m[k] = v
		}
	}
	return m, nil
}
