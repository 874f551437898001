package backend

import (
	"context"
	"fmt"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// replyError is an error reply as go-redis returns it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

func TestPermanent(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{replyError("NOPERM this user has no permissions to run the 'evalsha' command"), true},
		{replyError("NOPERM No permissions to access a key"), true},
		{replyError("WRONGTYPE Operation against a key holding the wrong kind of value"), true},
		{replyError("ERR unknown command 'evalsha', with args beginning with: "), true},
		{replyError("ERR syntax error"), true},
		// To a Redlock node's plain Client, every time (a ClusterClient's
		// pass: the root package's slotMoving).
		{replyError("MOVED 1999 127.0.0.1:7001"), true},
		{replyError("ASK 1999 127.0.0.1:7001"), true},
		{fmt.Errorf("node 0: %w", replyError("NOPERM this user has no permissions")), true},
		{replyError("ERR Error running script (call to f_0123): @user_script:1: WRONGTYPE Operation against a key holding the wrong kind of value"), true},
		{replyError("ERR Error running script (call to f_0123): @user_script:1: @user_script: 1: -OOM command not allowed when used memory > 'maxmemory'."), false},
		{replyError("NOSCRIPT No matching script. Please use EVAL."), false},
		{replyError("LOADING Redis is loading the dataset in memory"), false},
		{replyError("BUSY Redis is busy running a script."), false},
		{replyError("READONLY You can't write against a read only replica."), false},
		{replyError("MASTERDOWN Link with MASTER is down"), false},
		{replyError("OOM command not allowed when used memory > 'maxmemory'."), false},
		{replyError("TRYAGAIN Multiple keys request during rehashing of slot"), false},
		{replyError("CLUSTERDOWN The cluster is down"), false},
		{replyError("ERR max number of clients reached"), false},
		{redis.Nil, false},
		{context.DeadlineExceeded, false},
		{syscall.ECONNREFUSED, false},
		{nil, false},
	} {
		if got := Permanent(tc.err); got != tc.want {
			t.Errorf("Permanent(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
