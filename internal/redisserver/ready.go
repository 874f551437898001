package redisserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// readyTimeout bounds how long a new process may take to answer.
	readyTimeout = 10 * time.Second
	// pollInterval is the pause between two readiness probes.
	pollInterval = 10 * time.Millisecond
)

// waitReady polls the server until it answers, it exits, ctx ends or
// readyTimeout passes; it authenticates with password if that is not
// empty. The errors quote the end of the server log; if the server exited
// because its port was taken, the error wraps errPortInUse.
func (s *Server) waitReady(ctx context.Context, logPath, password string) error {
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: password, MaxRetries: -1})
	defer func() { _ = rdb.Close() }()
	deadline := time.Now().Add(readyTimeout)
	for !s.answers(ctx, rdb) {
		select {
		case <-s.done:
			err := fmt.Errorf("it exited at once: %s", logTail(logPath))
			if b, _ := os.ReadFile(logPath); strings.Contains(string(b), "Address already in use") {
				err = fmt.Errorf("%w: %w", errPortInUse, err)
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollInterval):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer on %s within %v: %s", s.Addr(), readyTimeout, logTail(logPath))
		}
	}
	return nil
}

// answers reports whether the server answers PING and is this process, not
// another server that took the port between freePort and our bind.
func (s *Server) answers(ctx context.Context, rdb *redis.Client) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	// Only hand the address to go-redis once it accepts connections: after
	// PoolSize failed dials its pool stops dialing and retries once a second.
	conn, err := (&net.Dialer{Timeout: 200 * time.Millisecond}).DialContext(ctx, "tcp", s.Addr())
	if err != nil {
		return false
	}
	_ = conn.Close()
	if rdb.Ping(ctx).Err() != nil {
		return false
	}
	info, err := rdb.Info(ctx, "server").Result()
	return err == nil && strings.Contains(info, "\nprocess_id:"+strconv.Itoa(s.PID())+"\r")
}

// logTail returns the last lines of a log file, on one line.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "no log"
		}
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return strings.Join(lines, " | ")
}
