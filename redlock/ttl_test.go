package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// TTL is how long a majority keeps the lock, the quorum-th longest of the
// leases: a minority holding it longer (an Extend that reached only it)
// does not keep the lock, since a majority is free once the others run out.
func TestTTLIsNotAMinorityLongerLease(t *testing.T) {
	cl := startCluster(t, 5)
	c := cl.patientLocker(t)
	ctx := context.Background()
	l := lockEveryNode(t, cl, c, "job", dlock.WithTTL(30*time.Second), dlock.WithoutRenewal())
	defer l.Unlock(ctx)
	for i := range 2 {
		if err := cl.rdbs[i].PExpire(ctx, lockKey("job"), time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ttl, err := l.TTL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ttl > 30*time.Second {
		t.Errorf("TTL = %v with 2 of 5 nodes holding the lock for an hour and 3 for 30 s, want at most 30 s", ttl)
	}
}
