package dlock

import (
	"context"
	"embed"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// Scripts run with (*redis.Script).Run: EVALSHA, and EVAL only when the
// server answers NOSCRIPT (it then caches the script).
//
// The scripts that may hand a lock over to a waiter share the helpers of
// lua/common.lua; Redis has no include, so they are joined here.
var (
	acquireScript      = loadScript("acquire", "common")
	releaseScript      = loadScript("release", "common")
	forceReleaseScript = loadScript("forcerelease", "common")
	extendScript       = loadScript("extend")
	reenterScript      = loadScript("reenter")
	ttlScript          = loadScript("ttl")
	inspectScript      = loadScript("inspect", "common")

	// A semaphore's scripts (semaphore.lua) share common.lua's queue and
	// fences with the lock's.
	permitsAcquireScript = loadScript("semacquire", "common", "semaphore")
	permitsReleaseScript = loadScript("semrelease", "common", "semaphore")
	permitsExtendScript  = loadScript("semextend", "common", "semaphore")
	permitsTTLScript     = loadScript("semttl", "common", "semaphore")
	availableScript      = loadScript("semavailable", "common", "semaphore")
	permitsInspectScript = loadScript("seminspect", "common", "semaphore")
)

// evalCall is a script sent as EVALSHA with arguments built by hand: its
// digest, keys and string arguments are passed by pointer, so a command
// allocates its argument slice and nothing per argument.
type evalCall struct {
	script *redis.Script
	sha    string
	src    string
}

var (
	acquireEval        = newEvalCall(acquireScript, "acquire", "common")
	releaseEval        = newEvalCall(releaseScript, "release", "common")
	permitsAcquireEval = newEvalCall(permitsAcquireScript, "semacquire", "common", "semaphore")
	permitsReleaseEval = newEvalCall(permitsReleaseScript, "semrelease", "common", "semaphore")
)

func newEvalCall(s *redis.Script, name string, include ...string) *evalCall {
	return &evalCall{script: s, sha: s.Hash(), src: source(name, include)}
}

// cmd builds EVALSHA sha len(keys) keys... args...
func (s *evalCall) cmd(ctx context.Context, keys []any, args ...any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, "evalsha", &s.sha, len(keys))
	a = append(a, keys...)
	a = append(a, args...)
	return redis.NewCmd(ctx, a...)
}

// processor sends a command: a client or a pipeline.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// run sends the command, and the script itself if the server lost its
// cache (NOSCRIPT), like (*redis.Script).Run.
func (s *evalCall) run(ctx context.Context, rdb processor, keys []any, args ...any) *redis.Cmd {
	cmd := s.cmd(ctx, keys, args...)
	_ = rdb.Process(ctx, cmd)
	if backend.NoScript(cmd.Err()) {
		return s.retry(ctx, rdb, cmd)
	}
	return cmd
}

// retry sends cmd again as EVAL with the script's source.
func (s *evalCall) retry(ctx context.Context, rdb processor, cmd *redis.Cmd) *redis.Cmd {
	a := append([]any{}, cmd.Args()...)
	a[0], a[1] = "eval", &s.src
	again := redis.NewCmd(ctx, a...)
	_ = rdb.Process(ctx, again)
	return again
}

// loadScript is the script in lua/<name>.lua, after the helper files it
// includes.
func loadScript(name string, include ...string) *redis.Script {
	return redis.NewScript(source(name, include))
}

// source joins the helper files and the script: Redis has no include.
func source(name string, include []string) string {
	body := ""
	for _, f := range include {
		body += mustRead(f) + "\n"
	}
	return body + mustRead(name)
}

func mustRead(name string) string {
	b, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("dlock: missing embedded script " + name + ": " + err.Error())
	}
	return string(b)
}
