package backend

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// CannotServe reports whether err is the answer of a Redis server that
// cannot serve the lock for now, though it may soon: loading its data, a
// replica or a master cut off from its replicas, one out of memory (until
// keys expire), one whose last snapshot failed (until a save succeeds), a
// cluster missing the slot or moving it, a script running long elsewhere,
// one at its maxclients (which may also just close the connection).
func CannotServe(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	for _, p := range []string{"LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "NOREPLICAS", "OOM ", "MISCONF ", "BUSY ", "ERR max number of clients reached"} {
		if strings.HasPrefix(re.Error(), p) {
			return true
		}
	}
	return false
}

// Permanent reports whether err is a Redis server's answer that will not
// pass by waiting: an error reply (NOPERM, WRONGTYPE, an unknown command)
// other than one that it cannot serve for now (CannotServe), or a nil
// reply. Not NOSCRIPT: the script is loaded again. Not a script error
// wrapped by a server before 7.0 ("ERR Error running script ... -OOM"):
// the reply inside may be one that passes.
func Permanent(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) || errors.Is(err, redis.Nil) || CannotServe(err) {
		return false
	}
	msg := re.Error()
	return !strings.HasPrefix(msg, "NOSCRIPT") && (!strings.HasPrefix(msg, "ERR Error running script") || WrongType(err))
}
