package dlock

import (
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
)

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
