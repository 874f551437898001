package redlock_test

import (
	"context"
	"testing"
)

// A key that starts with '}' would give its names an empty hash tag, which
// Redis Cluster hashes whole, scattering one lock's names over slots. The
// Redlock names escape it as the single-deployment ones do.
func TestKeyStartingWithBrace(t *testing.T) {
	cl := startCluster(t, 3)
	c := cl.patientLocker(t)
	ctx := context.Background()
	l := mustLock(t, c, "}odd")
	escaped := lockKey("\xff}odd")
	if n := cl.rdbs[0].Exists(ctx, escaped, escaped+":fence").Val() +
		cl.rdbs[1].Exists(ctx, escaped, escaped+":fence").Val() +
		cl.rdbs[2].Exists(ctx, escaped, escaped+":fence").Val(); n < 4 {
		t.Errorf("%d of the escaped names %q and its fence exist on the nodes, want a majority of both", n, escaped)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
