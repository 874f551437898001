//go:build unix

// Helpers of the tests that start and signal processes, which need a Unix
// system as run, demo and bench do.

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// processGone reports whether the process pid has ended: it is gone, or a
// zombie that its new parent has not reaped yet (Linux /proc).
func processGone(pid int) bool {
	if syscall.Kill(pid, 0) == syscall.ESRCH {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return os.IsNotExist(err)
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return strings.HasPrefix(rest, "Z") || strings.HasPrefix(rest, "X")
}

// testKey is a lock name of the test's own (its temporary directory's, made
// unique per run), so that runs with -count do not share a lock.
func testKey(t *testing.T) string {
	t.Helper()
	return filepath.Base(filepath.Dir(t.TempDir()))
}
