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
	escaped, unescaped := lockKey("\xff}odd"), lockKey("}odd")
	var locks, fences int
	for i, rdb := range cl.rdbs {
		locks += int(rdb.Exists(ctx, escaped).Val())
		fences += int(rdb.Exists(ctx, escaped+":fence").Val())
		if names := rdb.Keys(ctx, unescaped+"*").Val(); len(names) != 0 {
			t.Errorf("node %d holds the unescaped names %q", i, names)
		}
	}
	if majority := len(cl.rdbs)/2 + 1; locks < majority || fences < majority {
		t.Errorf("%q exists on %d nodes and its fence on %d, want both on at least %d of %d",
			escaped, locks, fences, majority, len(cl.rdbs))
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
