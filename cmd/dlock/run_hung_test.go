//go:build unix

package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/tcpproxy"
)

// TestRunEndsOnAHungServer: a Redis that stops answering before the lock
// is taken, at the first PING or at the lock's own request, ends run with
// status 69 and COMMAND not run, even when the URL's read_timeout lets
// go-redis wait forever.
func TestRunEndsOnAHungServer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// Past both bounds (the PING's, a lock request's) and the leaving of
	// the queue, short of go test's own timeout.
	const limit = lockRequestTimeout + processTimeout
	for _, tc := range []struct {
		name, at string
		args     []string
		want     string // in stderr
	}{
		{"ping", "ping", nil, "cannot reach Redis at "},
		{"lock", "evalsha", nil, `lock "hung-lock": context deadline exceeded (no answer from Redis within 10s)`},
		{"no-wait", "evalsha", []string{"--no-wait"}, `lock "hung-no-wait": context deadline exceeded (no answer from Redis within 10s)`},
		{"semaphore", "evalsha", []string{"--capacity", "2"}, `semaphore "hung-semaphore": context deadline exceeded (no answer from Redis within 10s)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			proxy, err := tcpproxy.New(srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = proxy.Close() })
			proxy.FreezeOn(func(b []byte) bool { return bytes.Contains(bytes.ToLower(b), []byte(tc.at)) })
			ran := filepath.Join(t.TempDir(), "ran")
			args := append([]string{"--redis", redisURL(proxy.Addr()) + "?read_timeout=-1", "run"}, tc.args...)
			p := start(t, nil, append(args, "hung-"+tc.name, "--", "touch", ran)...)
			if code := p.waitUpTo(t, limit); code != exitUnavailable {
				t.Errorf("exit status %d, want %d\nstderr:\n%s", code, exitUnavailable, p.stderr.String())
			}
			if got := p.stderr.String(); !strings.Contains(got, tc.want) {
				t.Errorf("stderr:\n%s\nwant %q", got, tc.want)
			}
			if _, err := os.Stat(ran); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("COMMAND ran (%v)", err)
			}
		})
	}
}

// TestRunReleaseEndsOnAHungServer: the release once COMMAND has exited is
// still sent, and bounded, when Redis stops answering while COMMAND runs
// and the URL's read_timeout lets go-redis wait forever: dlock warns that
// the lock expires within --ttl and exits with COMMAND's status.
func TestRunReleaseEndsOnAHungServer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy, err := tcpproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	log, fifos := logAndFifos(t, 1)
	p := start(t, baseEnv("LOG="+log), "--redis", redisURL(proxy.Addr())+"?read_timeout=-1", "run", "hung-release", "--",
		"sh", "-c", `echo started >> "$LOG"; read x < "$1"; exit 3`, "sh", fifos[0])
	waitUntil(t, 10*time.Second, "the command to start", func() bool { return fileText(log) == "started\n" })
	proxy.Freeze()
	release(t, fifos[0])
	// The release's bound and Close's, short of go test's own timeout.
	if code := p.waitUpTo(t, processTimeout); code != 3 {
		t.Errorf("exit status %d, want COMMAND's 3\nstderr:\n%s", code, p.stderr.String())
	}
	if got := p.stderr.String(); !strings.Contains(got, `warning: could not release lock "hung-release"`) {
		t.Errorf("stderr does not warn of the release:\n%s", got)
	}
	// The library's error names the lock too: said once, with its cause.
	if got := p.stderr.String(); strings.Count(got, `"hung-release"`) != 1 || !strings.Contains(got, `(context deadline exceeded`) {
		t.Errorf("the warning names the lock more than once, or lacks the cause:\n%s", got)
	}
}
