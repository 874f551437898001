//go:build unix

package redistest

import (
	"os"
	"syscall"
)

// The signals of Pause and Resume.
var sigStop, sigCont os.Signal = syscall.SIGSTOP, syscall.SIGCONT
