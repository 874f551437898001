package main

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// The URL's protocol (protocol=2 for a proxy that speaks RESP2 only)
// reaches the clients of every deployment, not only a single server's.
func TestURLProtocolReachesEveryDeployment(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		f    connFlags
	}{
		{"server", connFlags{url: "redis://localhost:6379?protocol=2"}},
		{"cluster", connFlags{url: "redis://?protocol=2", cluster: []string{"localhost:7000"}}},
		{"sentinel", connFlags{url: "redis://?protocol=2", sentinelMaster: "m", sentinels: []string{"localhost:26379"}}},
	} {
		if got := builtOptions(t, tc.f).Protocol; got != 2 {
			t.Errorf("%s: protocol %d, want 2", tc.name, got)
		}
	}
}

// A command that needs more connections than go-redis's default pool
// (bench, one a goroutine) gets them on every deployment, unless the
// URL's pool_size says otherwise.
func TestPoolSizeTheCommandNeeds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		f    connFlags
		want int
	}{
		{"server", connFlags{url: "redis://localhost:6379", poolSize: 1003}, 1003},
		{"server, the URL's", connFlags{url: "redis://localhost:6379?pool_size=7", poolSize: 1003}, 7},
		{"cluster", connFlags{url: "redis://", cluster: []string{"localhost:7000"}, poolSize: 1003}, 1003},
		{"sentinel", connFlags{url: "redis://", sentinelMaster: "m", sentinels: []string{"localhost:26379"}, poolSize: 1003}, 1003},
	} {
		if got := builtOptions(t, tc.f).PoolSize; got != tc.want {
			t.Errorf("%s: pool size %d, want %d", tc.name, got, tc.want)
		}
	}
}

// builtOptions returns the options of the client f builds (a Sentinel's
// is a Client), without connecting it.
func builtOptions(t *testing.T, f connFlags) redis.UniversalOptions {
	t.Helper()
	rdb, _, err := f.redisClient()
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	switch c := rdb.(type) {
	case *redis.Client:
		return redis.UniversalOptions{Protocol: c.Options().Protocol, PoolSize: c.Options().PoolSize}
	case *redis.ClusterClient:
		return redis.UniversalOptions{Protocol: c.Options().Protocol, PoolSize: c.Options().PoolSize}
	}
	t.Fatalf("client of type %T", rdb)
	return redis.UniversalOptions{}
}
