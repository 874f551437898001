package main

import (
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// run and inspect warn when the server may evict a held lock's keys at its
// maxmemory, and not when it evicts nothing.
func TestWarnsWhenRedisMayEvict(t *testing.T) {
	const warning = "may evict keys (maxmemory-policy allkeys-lru)"
	for _, tc := range []struct {
		name   string
		config []redistest.Option
		warn   bool
	}{
		{"allkeys-lru at 100mb", []redistest.Option{redistest.WithConfig("maxmemory", "100mb"), redistest.WithConfig("maxmemory-policy", "allkeys-lru")}, true},
		{"noeviction at 100mb", []redistest.Option{redistest.WithConfig("maxmemory", "100mb")}, false},
		{"allkeys-lru without maxmemory", []redistest.Option{redistest.WithConfig("maxmemory-policy", "allkeys-lru")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := redisURL(redistest.Start(t, tc.config...).Addr())
			for _, args := range [][]string{{"inspect", "job"}, {"run", "job", "--", "true"}} {
				r := dlockRun(t, nil, append([]string{"--redis", url}, args...)...).want(t, 0)
				if got := strings.Contains(r.stderr, warning); got != tc.warn {
					t.Errorf("dlock %s: stderr %q; want the warning: %v", args[0], r.stderr, tc.warn)
				}
			}
		})
	}
}
