package spawn

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestChildOutlivesTheThreadThatAskedForIt starts a child with Pdeathsig
// from a goroutine locked to its thread, which then exits without
// unlocking, so the runtime ends that thread. The child must survive: the
// signal is for the death of dlock, not of one of its threads.
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
	type result struct {
		tid int
		err error
	}
	res := make(chan result, 1)
	// The runtime keeps the main thread when a goroutine locked to it
	// exits, so the asking goroutine must run on another: one that lands
	// on the main thread holds it until the test ends.
	release := make(chan struct{})
	defer close(release)
	var r result
	for r.tid = os.Getpid(); r.tid == os.Getpid(); r = <-res {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
			if tid := syscall.Gettid(); tid == os.Getpid() {
				res <- result{tid: tid}
				<-release
				runtime.UnlockOSThread()
				return
			}
			res <- result{syscall.Gettid(), Start(cmd, func() { _ = cmd.Wait(); close(waited) })}
		}()
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer func() {
		_ = stdin.Close() // cat exits at end of input
		<-waited
	}()

	// The asking thread is gone once its /proc entry is: by then the kernel
	// has sent the death signal to any child that thread started.
	task := "/proc/self/task/" + strconv.Itoa(r.tid)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d did not exit", r.tid)
		}
		runtime.Gosched()
	}

	// A SIGKILLed cat never echoes: its pipe reaches end of file instead.
	if _, err := stdin.Write([]byte("alive\n")); err != nil {
		t.Fatalf("child is gone: %v", err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "alive\n" {
		t.Fatalf("child killed when the thread that asked for it exited: read %q, %v", line, err)
	}
}
