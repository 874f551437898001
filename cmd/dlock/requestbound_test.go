package main

import (
	"context"
	"testing"
	"time"
)

// run's requestBound is marked: it bounds the requests made with a context
// from boundRequests (those before the lock is held), and leaves any other
// (a renewal, the release after COMMAND) the deadline the library gave it.
func TestRequestBoundMarked(t *testing.T) {
	t.Parallel()
	marked := requestBound{d: time.Hour, marked: true}
	own, cancelOwn := context.WithTimeout(context.Background(), time.Minute)
	defer cancelOwn()
	ownDeadline, _ := own.Deadline()
	for _, tc := range []struct {
		name  string
		b     requestBound
		ctx   context.Context
		bound bool // whether the hook set a deadline of its own
	}{
		{"marked, unmarked context", marked, context.Background(), false},
		{"marked, unmarked context with a deadline", marked, own, false},
		{"marked, marked context", marked, boundRequests(context.Background()), true},
		{"unmarked", requestBound{d: time.Hour}, context.Background(), true},
	} {
		ctx, cancel := tc.b.bound(tc.ctx)
		d, ok := ctx.Deadline()
		cancel()
		switch {
		case tc.bound && (!ok || time.Until(d) < 59*time.Minute):
			t.Errorf("%s: deadline %v (%v), want about an hour from now", tc.name, d, ok)
		case !tc.bound && ctx != tc.ctx:
			t.Errorf("%s: context changed (deadline %v, was %v)", tc.name, d, ownDeadline)
		}
	}
}
