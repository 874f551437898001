//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"syscall"
	"unsafe"
)

// inForeground reports whether dlock runs in the foreground process group
// of a terminal on stdin, stdout or stderr: then the terminal's signals
// reach the whole group, and a command in another group could not read it.
func inForeground() bool {
	own := syscall.Getpgrp()
	for fd := 0; fd <= 2; fd++ {
		var pgrp int32
		_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), uintptr(syscall.TIOCGPGRP), uintptr(unsafe.Pointer(&pgrp)))
		if errno == 0 && int(pgrp) == own {
			return true
		}
	}
	return false
}
