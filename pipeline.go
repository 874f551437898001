package dlock

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// execPipeline sends pipe's commands, each of which then has its reply or
// its error. go-redis's Exec alone returns the error of a connection it
// could not set up when that error is a Redis reply (the handshake's AUTH
// refused with WRONGPASS or NOAUTH, after a password change): its commands
// are left with neither, and read as a reply of the wrong type ("redis:
// unexpected type=<nil>"), which would hide why. With no command failed on
// its own, none ran: each gets Exec's error.
func execPipeline(ctx context.Context, pipe redis.Pipeliner) {
	cmds, err := pipe.Exec(ctx)
	if err == nil {
		return
	}
	for _, cmd := range cmds {
		if cmd.Err() != nil {
			return // Exec's error is a command's own
		}
	}
	for _, cmd := range cmds {
		cmd.SetErr(err)
	}
}
