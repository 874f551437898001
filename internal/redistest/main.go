package redistest

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// Main is a server started from TestMain, where there is no testing.TB:
// for example a server shared by a package's Example functions.
type Main struct {
	*Server
	tb *mainTB
}

// StartMain starts a standalone server outside any test. Call Close when
// m.Run returns. It exits the process with a message if the server cannot
// start (for example, redis-server is not installed).
func StartMain(opts ...Option) *Main {
	tb := &mainTB{}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	return &Main{Server: start(tb, cfg), tb: tb}
}

// Close stops the server and removes its files.
func (m *Main) Close() { m.tb.cleanup() }

// mainTB provides the few testing.TB methods this package uses. Embedding
// the interface satisfies its unexported method; calling any other method
// panics, which keeps this from being used as a general TB.
type mainTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

func (t *mainTB) Helper() {}

func (t *mainTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (t *mainTB) TempDir() string {
	dir, err := os.MkdirTemp("", "redistest")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (t *mainTB) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func (t *mainTB) Errorf(format string, args ...any) {
	t.failed = true
	t.Logf(format, args...)
}

func (t *mainTB) Fatalf(format string, args ...any) {
	t.Logf(format, args...)
	t.cleanup()
	os.Exit(1)
}

func (t *mainTB) Fatal(args ...any) { t.Fatalf("%s", fmt.Sprint(args...)) }

func (t *mainTB) Failed() bool { return t.failed }

// cleanup runs the cleanups in reverse order, as testing does.
func (t *mainTB) cleanup() {
	t.mu.Lock()
	fs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}
