// Package redisserver starts a throw-away redis-server for dlock's own
// tools: `dlock demo` and `dlock bench --private` in cmd/dlock, and the
// benchmark harness in the bench module.
//
// The server listens on a free 127.0.0.1 port, keeps nothing on disk (no
// RDB snapshots, no AOF) and works in a temporary directory that Stop
// removes. Tests use internal/redistest instead, which ties processes to a
// testing.TB and can also start sentinels and clusters; both packages find
// the binaries with FindBinary.
package redisserver
