package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// requestBound is a go-redis hook that gives each request (a command, or
// a pipeline) a deadline of its own, for a command of many round trips
// (list --long): one deadline over them all would run out on a large or
// distant keyspace while each request is answered in time, and read as a
// failed Redis. connFlags.bound installs it, on each node of a cluster too.
type requestBound time.Duration

func (requestBound) DialHook(next redis.DialHook) redis.DialHook { return next }

func (b requestBound) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		ctx, cancel := context.WithTimeout(ctx, time.Duration(b))
		defer cancel()
		return next(ctx, cmd)
	}
}

func (b requestBound) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		ctx, cancel := context.WithTimeout(ctx, time.Duration(b))
		defer cancel()
		return next(ctx, cmds)
	}
}
