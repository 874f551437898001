package backend

import (
	"log/slog"
	"runtime/debug"
)

// Panic is a panic recovered in a goroutine the library started, carried
// to the goroutine waiting for that work, as golang.org/x/sync/singleflight
// does: there it is raised again (Raise), where the caller can recover it
// (as net/http does a handler's). Let go, it would end the process, with
// the caller's code (a go-redis hook, say) the cause and no way to stop it.
type Panic struct {
	Value any    // what was passed to panic
	Stack []byte // the stack of the goroutine that panicked, for a log
}

// Run calls f and returns the panic it ended with, or nil if it returned.
func Run(f func()) (p *Panic) {
	defer func() {
		if v := recover(); v != nil {
			p = &Panic{Value: v, Stack: debug.Stack()}
		}
	}()
	f()
	return nil
}

// Raise panics with the value p carries; it does nothing if p is nil. The
// value is the original one, not a wrapper: a caller that recovers sees
// what it would have if the panic had happened in its own goroutine (the
// calls made there panic with it unchanged).
func (p *Panic) Raise() {
	if p != nil {
		panic(p.Value)
	}
}

// Log logs p at level Error, as msg with args, for a panic with no caller
// to go to; a panic of the logger's handler itself is dropped.
func (p *Panic) Log(l *slog.Logger, msg string, args ...any) {
	Run(func() { l.Error(msg, append(args, "panic", p.Value, "stack", string(p.Stack))...) })
}
