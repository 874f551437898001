package dlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// While a Redis Cluster slot is being migrated (resharding), every script
// over a lock's five names is refused with TRYAGAIN: the channel name
// never exists as a key, so the source sends it to the destination, which
// refuses a script whose keys it does not all have. Such a script did not
// run. A slot's keys usually move within milliseconds; go-redis gives up
// after a few tries within about as long.

// migrationWait bounds how long a release refused because its slot is
// moving (slotMoving: TRYAGAIN, or a ClusterClient's MOVED or ASK) is sent
// again. A slot left half moved (a reshard that stopped) waits for an
// operator: the release then fails as before, and the lock is given up.
const migrationWait = 5 * time.Second

// throughMigration calls send, and calls it again while its error says
// that the slot is moving (slotMoving), backing off, until migrationWait
// has passed or ctx ends. A release given up there would leave the lock
// held, renewed no more, for the rest of its lease, and its waiters
// waiting as long.
func throughMigration(ctx context.Context, rdb redis.UniversalClient, send func() error) {
	deadline := time.Now().Add(migrationWait)
	backoff := nextMigrationBackoff(0)
	for {
		if err := send(); !slotMoving(rdb, err) || time.Now().Add(backoff).After(deadline) {
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = nextMigrationBackoff(backoff)
	}
}

// slotMoving reports whether err, from rdb, refused a command, which did
// not run, because its slot is moving: TRYAGAIN, or MOVED or ASK, which a
// ClusterClient returns once its redirections are spent while the nodes
// disagree about the slot (it reloads its slot map after MOVED; ASK lasts
// until the migration ends). Not MOVED or ASK to a plain Client pointed
// at one node of a Cluster: it follows no redirection, and that node
// answers so every time.
func slotMoving(rdb redis.UniversalClient, err error) bool {
	if redis.IsTryAgainError(err) {
		return true
	}
	_, cluster := rdb.(*redis.ClusterClient)
	return cluster && redirected(err)
}

// redirected reports whether err is a MOVED or ASK reply: the command did
// not run on the node that answered.
func redirected(err error) bool {
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return moved || ask
}

// nextMigrationBackoff returns the delay before sending again a call
// refused because its slot is moving, after one of d (0: the first):
// from 10 ms, doubling up to 200 ms, for a slot's keys usually move
// within milliseconds.
func nextMigrationBackoff(d time.Duration) time.Duration {
	return min(max(2*d, 10*time.Millisecond), 200*time.Millisecond)
}
