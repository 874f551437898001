package backend

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// WrongType reports whether err is Redis's answer that a key holds
// another kind of value than a lock's. Before Redis 7.0 an error raised in
// a script comes after the script's own "ERR Error running script", so the
// reply is searched, not matched at its start.
func WrongType(err error) bool {
	return err != nil && strings.Contains(err.Error(), "WRONGTYPE") && errors.As(err, new(redis.Error))
}

// NoScript reports whether err is Redis's answer that it does not have a
// script cached (a restart, SCRIPT FLUSH, a promoted replica: scripts are
// not replicated): the command did not run, and runs once sent with the
// script itself.
func NoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

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
	return !NoScript(re) && (!strings.HasPrefix(re.Error(), "ERR Error running script") || WrongType(err))
}
