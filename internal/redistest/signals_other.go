//go:build !unix

package redistest

import (
	"os"
	"syscall"
)

// Pause and Resume need job-control signals, which only Unix has:
// elsewhere sending them fails, and so does a test that pauses a server.
var sigStop, sigCont os.Signal = syscall.Signal(-1), syscall.Signal(-1)
