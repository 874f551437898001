package main

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestClusterAndSentinel drives run, list and inspect through --cluster
// and through --sentinel-master/--sentinel.
func TestClusterAndSentinel(t *testing.T) {
	t.Parallel()
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t, 3)
		checkDeployment(t, cl.Client(t), "--cluster", strings.Join(cl.Addrs(), ","))
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		g := redistest.StartSentinelGroup(t, 0, 1)
		checkDeployment(t, g.FailoverClient(t), "--sentinel-master", g.MasterName, "--sentinel", strings.Join(g.SentinelAddrs(), ","))
	})
	// Sentinels that ask for a password get it from
	// $DLOCK_SENTINEL_PASSWORD, which is never printed.
	t.Run("sentinel password", func(t *testing.T) {
		t.Parallel()
		g := redistest.StartSentinelGroup(t, 0, 1)
		const pw = "sentinel-s3cret"
		if err := g.SentinelClient(t, 0).Process(context.Background(),
			redis.NewStatusCmd(context.Background(), "ACL", "SETUSER", "default", "resetpass", ">"+pw)); err != nil {
			t.Fatal(err)
		}
		args := []string{"--sentinel-master", g.MasterName, "--sentinel", strings.Join(g.SentinelAddrs(), ","), "list"}
		r := dlockRun(t, nil, args...)
		if r.code != exitUnavailable || !strings.Contains(r.stderr, "NOAUTH") {
			t.Errorf("without the password: exit %d, want %d with NOAUTH\nstderr:\n%s", r.code, exitUnavailable, r.stderr)
		}
		dlockRun(t, baseEnv(envSentinelPassword+"="+pw), args...).want(t, 0)
		const wrong = "not-the-s3cret"
		r = dlockRun(t, baseEnv(envSentinelPassword+"="+wrong), args...)
		if r.code != exitUnavailable || strings.Contains(r.stderr, wrong) {
			t.Errorf("with a wrong password: exit %d, want %d, and the password not printed\nstderr:\n%s", r.code, exitUnavailable, r.stderr)
		}
	})
}

// checkDeployment holds locks on several keys (spread over the slots of a
// cluster) through rdb, and has dlock list, inspect and run against them.
func checkDeployment(t *testing.T, rdb redis.UniversalClient, conn ...string) {
	t.Helper()
	args := func(a ...string) []string { return append(slices.Clone(conn), a...) }
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := []string{"alpha", "bravo", "charlie", "delta"}
	for _, k := range keys {
		l, err := c.Lock(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(context.Background())
	}
	r := dlockRun(t, nil, args("list")...).want(t, 0)
	if got := lines(r.stdout); !slices.Equal(got, keys) {
		t.Errorf("list: %q", got)
	}
	r = dlockRun(t, nil, args("inspect", "charlie")...).want(t, 0)
	if !strings.Contains(r.stdout, "state     held") {
		t.Errorf("inspect:\n%s", r.stdout)
	}
	dlockRun(t, nil, args("run", "--no-wait", "bravo", "--", "true")...).want(t, exitNotObtained)
	dlockRun(t, nil, args("run", "echo", "--", "sh", "-c", "exit 3")...).want(t, 3)
}
