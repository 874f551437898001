// Command dlock runs commands under a distributed lock on Redis, inspects
// and releases locks, and demonstrates and measures the dlock library.
//
//	dlock run [flags] KEY -- COMMAND [ARGS...]   run COMMAND while holding KEY
//	dlock inspect KEY [--json]                  show a lock's state and holder
//	dlock list [PATTERN]                        list the locks that are held
//	dlock list --kind semaphore [PATTERN]       list the semaphores held (or --kind rwmutex)
//	dlock release --force KEY                   remove a stuck lock
//	dlock demo                                  show the lock at work, with real processes
//	dlock bench                                 measure dlock on a Redis server
//	dlock version                               print the version
//	dlock completion SHELL                      print a shell completion script
//
// Every command connects with --redis URL (or $DLOCK_REDIS_URL), or
// --sentinel-master NAME --sentinel ADDR,... for Sentinel, or
// --cluster ADDR,... for Redis Cluster. It is built on the public API of
// github.com/dlock-go/dlock only. run, demo and bench need a Unix-like
// system (they manage process groups and signals); elsewhere (Windows) it
// builds with inspect, list and release.
//
// Exit status: 0 on success; `run` exits with its command's status (128+N
// if a signal N killed it; 126 if it cannot be run, 127 if not found); 64
// for usage errors (bad flag, duration, URL, --prefix, KEY or --meta,
// missing --, an unknown command or help topic, whether or not Redis can
// be reached); 69 when Redis cannot be reached or fails; 75 when `run` did not
// get the lock (--no-wait, --wait); 79 when `run` lost the lock while its
// command ran; 128+N when signal N interrupted a wait for the lock, `demo`
// or `bench`; 1 for anything else (for example `release --force` of a lock
// that is not held, or output that cannot be written). A closed pipe
// (`dlock list | head -1`) ends dlock by SIGPIPE, as it does ls (the
// shell's 141), but for demo and bench, which clean up and exit 1.
package main

import "os"

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}
