// Package testutil holds the helpers that the tests of several packages of
// this module share (the library, redlock, the dlock command), so that each
// package does not keep its own copy. Only test code imports it (test files,
// and metrics/internal/traffic, the metrics tests' shared lock traffic).
package testutil

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// pollInterval is how often WaitUntil checks its condition.
const pollInterval = 2 * time.Millisecond

// WaitUntil polls cond until it holds, and fails the test if timeout passes
// first: tests wait on a condition, not on a sleep of a guessed length.
// what names the condition in the failure message.
func WaitUntil(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(pollInterval)
	}
}

// QuietRedisLog silences go-redis's logger in the test binary: tests that
// stop Redis on purpose would fill the log with its reconnection messages.
func QuietRedisLog() { redis.SetLogger(quietLogger{}) }

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// Exit ends a TestMain with the exit code of m.Run, after checking that the
// tests left no goroutine running: a leak fails a run that passed. Call it
// once the servers started in TestMain are closed, or the goroutines that
// wait for them count as leaks.
func Exit(code int) {
	if code == 0 {
		if err := findLeaks(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakGrace is how long goroutines may take to end after the tests. A
// closed go-redis pool that failed to dial (a test killed its server) ends
// its redial goroutine only after that goroutine's 1 s sleep, and goleak on
// its own waits less than half a second.
const leakGrace = 3 * time.Second

func findLeaks() error {
	deadline := time.Now().Add(leakGrace)
	for {
		err := goleak.Find()
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

// PassHook is a go-redis hook that passes everything through. A test's hook
// embeds it and overrides only the stage it watches.
type PassHook struct{}

// DialHook passes dials through.
func (PassHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook passes commands through.
func (PassHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook passes pipelines through.
func (PassHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// RoundTrips is a go-redis hook that counts the requests a client sends:
// a command sent alone, and a pipeline or MULTI/EXEC, is one round trip
// each.
type RoundTrips struct {
	PassHook
	N *atomic.Int64
}

// ProcessHook counts a command sent alone.
func (h RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.N.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts a pipeline.
func (h RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.N.Add(1)
		return next(ctx, cmds)
	}
}

// ACLRefused reports whether the server's ACL LOG records a refusal of
// object (the name of a key or a pub/sub channel).
func ACLRefused(ctx context.Context, rdb redis.UniversalClient, object string) bool {
	return ACLRefusals(ctx, rdb, object) > 0
}

// ACLRefusals is how many refusals of object the server's ACL LOG counts.
func ACLRefusals(ctx context.Context, rdb redis.UniversalClient, object string) int64 {
	entries, _ := rdb.Do(ctx, "ACL", "LOG").Val().([]any)
	for _, e := range entries {
		if m := ReplyMap(e); m["object"] == object {
			n, _ := m["count"].(int64)
			return n
		}
	}
	return 0
}

// ReplyMap is a map reply as go-redis reads it over RESP3, or the flat
// field, value, ... array it reads over RESP2 as that map; nil for any
// other value.
func ReplyMap(v any) map[any]any {
	switch v := v.(type) {
	case map[any]any:
		return v
	case []any:
		m := make(map[any]any, len(v)/2)
		for i := 0; i+1 < len(v); i += 2 {
			m[v[i]] = v[i+1]
		}
		return m
	}
	return nil
}

// CheckResp fails t unless rdb's connections speak RESP resp (CLIENT
// INFO's resp=).
func CheckResp(t testing.TB, rdb redis.UniversalClient, resp string) {
	t.Helper()
	info, err := rdb.Do(context.Background(), "CLIENT", "INFO").Text()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Fields(info), "resp="+resp) {
		t.Fatalf("CLIENT INFO %q: want resp=%s", info, resp)
	}
}

// Receive returns what ch delivers within d, or fails t, saying what was
// awaited.
func Receive[T any](t testing.TB, ch <-chan T, within time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatalf("%s: not within %v", what, within)
		var zero T
		return zero
	}
}

// WriteScript writes an executable script to path. It holds off forks
// meanwhile: a child forked by a parallel test while the file is open for
// writing keeps it open until that child's exec, and running the script
// then fails with ETXTBSY ("text file busy").
func WriteScript(t testing.TB, path, script string) {
	t.Helper()
	syscall.ForkLock.Lock()
	err := os.WriteFile(path, []byte(script), 0o755)
	syscall.ForkLock.Unlock()
	if err != nil {
		t.Fatal(err)
	}
}

// StartProcess starts cmd and, unless the test has waited for it by then,
// kills and reaps it when the test ends: a test that fails part way must
// not leave its worker processes running. The test may call cmd.Wait on
// its own goroutine only, as the cleanup then reads cmd.ProcessState.
func StartProcess(t testing.TB, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
}

// InGoroutine returns t for a goroutine that the test started: the testing
// package allows Fatal and FailNow on the test's goroutine only, so here
// they report the failure and end the calling goroutine alone, running its
// deferred calls. Helpers that take a testing.TB (a redistest.Server's
// Pause, say) can then run on a fault goroutine.
func InGoroutine(t testing.TB) testing.TB { return goroutineTB{t} }

type goroutineTB struct{ testing.TB }

func (g goroutineTB) Fatal(args ...any) {
	g.TB.Helper()
	g.TB.Error(args...)
	runtime.Goexit()
}

func (g goroutineTB) Fatalf(format string, args ...any) {
	g.TB.Helper()
	g.TB.Errorf(format, args...)
	runtime.Goexit()
}

func (g goroutineTB) FailNow() {
	g.TB.Fail()
	runtime.Goexit()
}

// SemaphoreHolders counts the holder entries in the semaphore's holders
// hash at key, live or not yet dropped, leaving out its bookkeeping (the
// fields named ":...").
func SemaphoreHolders(t testing.TB, rdb redis.UniversalClient, key string) int {
	t.Helper()
	fields, err := rdb.HKeys(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fields {
		if !strings.HasPrefix(f, ":") {
			n++
		}
	}
	return n
}
