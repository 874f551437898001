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
