package redlock

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// The scripts run on each node with (*redis.Script).Run: EVALSHA, and EVAL
// only when the node answers NOSCRIPT (after a restart, for example).
var (
	acquireScript = loadScript("acquire")
	fenceScript   = loadScript("fence")
	releaseScript = loadScript("release")
	extendScript  = loadScript("extend")
	ttlScript     = loadScript("ttl")
	reenterScript = loadScript("reenter")
)

func loadScript(name string) *redis.Script {
	b, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("redlock: missing embedded script " + name + ": " + err.Error())
	}
	return redis.NewScript(string(b))
}
