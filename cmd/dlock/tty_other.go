//go:build unix && !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package main

// inForeground is always false where the terminal cannot be asked: the
// command gets its own process group.
func inForeground() bool { return false }
