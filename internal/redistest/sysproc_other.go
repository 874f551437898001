//go:build !linux

package redistest

import "syscall"

// sysProcAttr returns nil: parent-death signals are Linux-only, elsewhere
// only t.Cleanup stops the processes.
func sysProcAttr() *syscall.SysProcAttr { return nil }
