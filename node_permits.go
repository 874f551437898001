package dlock

import (
	"github.com/redis/go-redis/v9"
)

// A semaphore's permits (semaphore.go) live on a node like a lock: the
// same five names (keysOf), queue, hand-over channels and waiting
// (node_acquire.go), with scripts of their own (lua/sem*.lua). This file
// picks the scripts by the kind of names a lease has.

// scriptSet is the scripts of one kind of lease.
type scriptSet struct {
	acquire, release *evalCall
	extend, ttl      *redis.Script
}

var (
	lockScripts    = &scriptSet{acquire: acquireEval, release: releaseEval, extend: extendScript, ttl: ttlScript}
	permitsScripts = &scriptSet{acquire: permitsAcquireEval, release: permitsReleaseEval, extend: permitsExtendScript, ttl: permitsTTLScript}
)

// scripts returns the scripts for the lease these names belong to.
func (k *lockKeys) scripts() *scriptSet {
	if k.permits != nil {
		return permitsScripts
	}
	return lockScripts
}

// releaseArg is the release script's second argument: for a lock, the
// hold level being released; for permits, the semaphore's capacity, which
// says how many waiters the permits given back let in.
func (k *lockKeys) releaseArg(level int) any {
	if k.permits != nil {
		return &k.permits.Capacity
	}
	return level
}
