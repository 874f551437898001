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
type requestBound struct {
	d time.Duration
	// marked limits it to the requests made with a context from
	// boundRequests (connFlags.boundMarked).
	marked bool
}

// boundMark marks the contexts from boundRequests.
type boundMark struct{}

// boundRequests returns ctx, whose requests a marked requestBound bounds:
// run's before it holds the lock.
func boundRequests(ctx context.Context) context.Context {
	return context.WithValue(ctx, boundMark{}, true)
}

// bound returns ctx with the request's deadline, if b bounds it.
func (b requestBound) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if b.marked && ctx.Value(boundMark{}) == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, b.d)
}

func (requestBound) DialHook(next redis.DialHook) redis.DialHook { return next }

func (b requestBound) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		ctx, cancel := b.bound(ctx)
		defer cancel()
		return next(ctx, cmd)
	}
}

func (b requestBound) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		ctx, cancel := b.bound(ctx)
		defer cancel()
		return next(ctx, cmds)
	}
}
