package main

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// guardedWriteScript is the demo's fenced resource: a Redis hash holding a
// value and the highest fencing token it accepted. A write carrying a
// smaller fence than that comes from a holder that lost the lock, and is
// rejected. Fences are compared as decimal strings (length, then bytes), so
// no precision is lost to Lua's floating-point numbers.
var guardedWriteScript = redis.NewScript(`
local seen = redis.call('HGET', KEYS[1], 'fence') or '0'
local fence = ARGV[1]
if #fence < #seen or (#fence == #seen and fence < seen) then
  return {0, seen}
end
redis.call('HSET', KEYS[1], 'fence', fence, 'value', ARGV[2])
return {1, fence}
`)

// guardedWrite writes value to the resource if fence is at least the
// highest it has seen. It returns whether the write was accepted and the
// highest fence the resource had seen (now fence, if accepted).
func guardedWrite(ctx context.Context, rdb redis.Scripter, resource, fence, value string) (bool, string, error) {
	res, err := guardedWriteScript.Run(ctx, rdb, []string{resource}, fence, value).Slice()
	if err != nil {
		return false, "", err
	}
	ok, _ := res[0].(int64)
	seen, _ := res[1].(string)
	return ok == 1, seen, nil
}
