package chaoscheck

import (
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Infra is the kind Classify gives a wrapped Redis or network error.
const Infra = "redis/network"

// Classify names the kind of err, an error the traffic met: the message of
// the first of sentinels it wraps, or Infra for a wrapped Redis or network
// error (documented as wrapped). ok is false for anything else: an untyped
// error, which the test reports.
func Classify(err error, sentinels []error) (kind string, ok bool) {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return s.Error(), true
		}
	}
	var ne net.Error
	var re redis.Error
	switch {
	case errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout), errors.As(err, &re):
		return Infra, true
	}
	return "", false
}
