package dlock

import (
	"context"
	"embed"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// Scripts run with (*redis.Script).Run: EVALSHA, and EVAL only when the
// server answers NOSCRIPT (it then caches the script).
//
// The scripts that may hand a lock over to a waiter share the helpers of
// lua/common.lua; Redis has no include, so they are joined here.
var (
	acquireScript      = loadScript("acquire", true)
	releaseScript      = loadScript("release", true)
	forceReleaseScript = loadScript("forcerelease", true)
	extendScript       = loadScript("extend", false)
	reenterScript      = loadScript("reenter", false)
	ttlScript          = loadScript("ttl", false)
	inspectScript      = loadScript("inspect", false)
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
	acquireEval = newEvalCall(acquireScript, "acquire")
	releaseEval = newEvalCall(releaseScript, "release")
)

func newEvalCall(s *redis.Script, name string) *evalCall {
	return &evalCall{script: s, sha: s.Hash(), src: mustRead("common") + "\n" + mustRead(name)}
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
	if isNoScript(cmd.Err()) {
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

func loadScript(name string, withCommon bool) *redis.Script {
	body := mustRead(name)
	if withCommon {
		body = mustRead("common") + "\n" + body
	}
	return redis.NewScript(body)
}

func mustRead(name string) string {
	b, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("dlock: missing embedded script " + name + ": " + err.Error())
	}
	return string(b)
}
