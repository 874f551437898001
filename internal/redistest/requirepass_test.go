package redistest

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestStartWithRequirepass: a server with a password becomes ready (the
// readiness probe authenticates), also after Restart, and only clients
// with the password get in.
func TestStartWithRequirepass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := Start(t, WithConfig("requirepass", "s3cret pw"))
	for _, restarted := range []bool{false, true} {
		if restarted {
			s.Restart(t)
		}
		authed := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: "s3cret pw"})
		t.Cleanup(func() { _ = authed.Close() })
		if err := authed.Ping(ctx).Err(); err != nil {
			t.Fatalf("restarted=%v: PING with the password: %v", restarted, err)
		}
		err := s.Client(t).Ping(ctx).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
			t.Fatalf("restarted=%v: PING without the password: %v; want NOAUTH", restarted, err)
		}
	}
}

func TestConfigRequirepass(t *testing.T) {
	for _, tc := range []struct {
		opts []Option
		want string
	}{
		{nil, ""},
		{[]Option{WithConfig("maxmemory", "10mb")}, ""},
		{[]Option{WithConfig("requirepass", "a")}, "a"},
		{[]Option{WithConfig("REQUIREPASS", "a"), WithConfig("requirepass", "b")}, "b"},
		{[]Option{WithConfig("requirepass", "a"), WithConfig("requirepass", "")}, ""},
	} {
		var cfg config
		for _, o := range tc.opts {
			o(&cfg)
		}
		if got := cfg.requirepass(); got != tc.want {
			t.Errorf("requirepass() with %v = %q; want %q", cfg.extra, got, tc.want)
		}
	}
}
