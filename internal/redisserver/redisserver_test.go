package redisserver

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func redisServer(t *testing.T) string {
	t.Helper()
	bin, err := FindBinary("redis-server", SystemDirs()...)
	if err != nil {
		t.Fatalf("%v: install it with `apt-get install redis-server`", err)
	}
	return bin
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Start(ctx, redisServer(t), Options{Args: []string{"--maxclients", "1234"}})
	if err != nil {
		t.Fatal(err)
	}
	if s.URL() != "redis://"+s.Addr() || !strings.HasPrefix(s.Addr(), "127.0.0.1:") || s.Port() == 0 {
		t.Fatalf("Addr %q, Port %d, URL %q", s.Addr(), s.Port(), s.URL())
	}
	opts, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer func() { _ = rdb.Close() }()
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil || !strings.Contains(info, "process_id:") {
		t.Fatalf("INFO server = %q, %v", info, err)
	}
	for param, want := range map[string]string{"save": "", "appendonly": "no", "maxclients": "1234", "bind": "127.0.0.1"} {
		got, err := rdb.ConfigGet(ctx, param).Result()
		if err != nil || got[param] != want {
			t.Errorf("CONFIG GET %s = %v, %v; want %q", param, got, err, want)
		}
	}
	dir := s.dir
	s.Stop()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory %s left behind: %v", dir, err)
	}
	if conn, err := net.Dial("tcp", s.Addr()); err == nil {
		_ = conn.Close()
		t.Error("the server still accepts connections after Stop")
	}
}

func TestStartFailureQuotesLog(t *testing.T) {
	t.Parallel()
	_, err := Start(context.Background(), redisServer(t), Options{Args: []string{"--no-such-directive", "1"}})
	if err == nil || !strings.Contains(err.Error(), "exited at once") || !strings.Contains(err.Error(), "no-such-directive") {
		t.Fatalf("Start error = %v; want the exit and the log line about the bad directive", err)
	}
}

func TestStartCanceled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Start(ctx, redisServer(t), Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start error = %v; want %v", err, context.Canceled)
	}
}

func TestFindBinary(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", t.TempDir())
	if _, err := FindBinary("redis-server"); err == nil || err.Error() != "redis-server not found in $PATH" {
		t.Errorf("FindBinary without dirs: error = %v", err)
	}
	if _, err := FindBinary("redis-server", dir, "/nowhere"); err == nil ||
		err.Error() != "redis-server not found in $PATH or "+dir+", /nowhere" {
		t.Errorf("FindBinary with dirs: error = %v", err)
	}
	// Not executable: skipped.
	p := filepath.Join(dir, "redis-server")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := FindBinary("redis-server", dir); err == nil {
		t.Errorf("FindBinary found non-executable %s", got)
	}
	if err := os.Chmod(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := FindBinary("redis-server", "/nowhere", dir); err != nil || got != p {
		t.Errorf("FindBinary = %q, %v; want %q", got, err, p)
	}
}
