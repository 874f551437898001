// Package dlock provides distributed locks on Redis that are safe by
// default: owner-checked atomic Lua scripts, millisecond leases renewed by a
// watchdog, a Context cancelled the moment a lock is lost, and a fencing
// token that increases with every grant so the protected resource can turn
// away a stale holder. For data kept in Redis, Lock.Txn applies a
// MULTI/EXEC only while the lock is still held.
//
// Waiting is fair and cheap: waiters queue in Redis in arrival order, and a
// release hands the lock to the next live waiter and wakes only that one.
//
// Client.Semaphore and Client.RWMutex give counting semaphores and
// readers-writer locks whose holders have the same leases, Context, fences
// and queue as a lock's (a fence orders grants; with several holders live
// at once, a smaller one is not a stale one: see docs/safety.md).
//
// A Client works on one Redis deployment (New: a server, a Sentinel
// failover client or a Cluster client); package redlock makes a Client on
// a quorum of independent masters. Both satisfy Locker.
//
// See docs/safety.md in the repository for what each deployment guarantees.
package dlock
