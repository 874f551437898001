package bench

import (
	"context"
	"errors"
	"testing"
	"time"
)

// testEnv starts a private redis-server for a scenario test.
func testEnv(t *testing.T) *Env {
	t.Helper()
	if _, err := FindBinary("redis-server"); err != nil {
		t.Fatalf("redis-server is needed: %v", err)
	}
	srv, err := StartServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	env, err := NewEnv(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	return env
}

// failingUnlock takes every lock at once and fails every release.
type failingUnlock struct{}

func (failingUnlock) Lock(context.Context, string) (Unlock, error) {
	return func(context.Context) error { return errors.New("release failed") }, nil
}
func (failingUnlock) Close() {}

// A pair whose release failed is an error, not an acquire + release pair:
// it must not count in pairs/s or the latency.
func TestUncontendedFailedReleaseIsNoPair(t *testing.T) {
	env := testEnv(t)
	s := Setup{Name: "fails", Open: func(string, *RoundTrips) (Locker, error) { return failingUnlock{}, nil }}
	r, err := env.Uncontended(s, 2, 20*time.Millisecond, 100*time.Millisecond, Origin{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pairs %d (%.0f/s), latency samples %d, errors %d", r.Pairs, r.PerSec, r.Latency.N, r.Errors)
	if r.Errors == 0 {
		t.Fatal("no errors counted")
	}
	if r.Pairs != 0 || r.Latency.N != 0 {
		t.Errorf("%d failed releases counted as %d pairs (%.0f/s) and %d latency samples", r.Errors, r.Pairs, r.PerSec, r.Latency.N)
	}
}
