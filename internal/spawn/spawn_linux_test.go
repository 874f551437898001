package spawn

import (
	"bufio"
	"os/exec"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestChildOutlivesTheThreadThatAskedForIt starts a child with Pdeathsig
// from a thread that then ends. The child must survive: the signal is for
// the death of dlock, not of one of its threads.
func TestChildOutlivesTheThreadThatAskedForIt(t *testing.T) {
	cmd := exec.Command("cat")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	testutil.RunOnEndingThread(t, func() {
		err = Start(cmd, func() { _ = cmd.Wait(); close(waited) })
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = stdin.Close() // cat exits at end of input
		<-waited
	}()
	// The kernel sent any death signal before the thread was gone, and a
	// SIGKILLed cat never echoes: its pipe reaches end of file instead.
	if _, err := stdin.Write([]byte("alive\n")); err != nil {
		t.Fatalf("child is gone: %v", err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "alive\n" {
		t.Fatalf("child killed when the thread that asked for it exited: read %q, %v", line, err)
	}
}
