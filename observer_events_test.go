package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// The String of a value dlock does not make (a hand-made event's, one
// added later) is "unknown": a label like any other, never a panic inside
// an Observer, which would end the Lock or Unlock call that reported it.
func TestObserverLabelOfUnknownValue(t *testing.T) {
	for _, s := range []fmt.Stringer{
		AcquireOutcome(len(acquireOutcomes)), ReleaseOutcome(len(releaseOutcomes)),
		RenewOutcome(len(renewOutcomes)), LostReason(len(lostReasons)), DegradedMode(2),
	} {
		var got string
		err, panicked := callSafely(func() error { got = s.String(); return nil })
		if panicked || got != "unknown" {
			t.Errorf("%T(%d).String() = %q (%v), want unknown", s, s, got, err)
		}
	}
}

// nilContext is an Observer whose Start calls return nil instead of ctx.
type nilContext struct{ NopObserver }

func (nilContext) AcquireStart(context.Context, AcquireStartEvent) context.Context { return nil }
func (nilContext) ReleaseStart(context.Context, ReleaseStartEvent) context.Context { return nil }

// A Start call that returns nil changes nothing: the call goes on with the
// context it had, which the Observers after it in Observers get too.
func TestObserverStartReturningNilChangesNothing(t *testing.T) {
	for name, wrap := range map[string]func(*recorder) Observer{
		"alone":        func(*recorder) Observer { return nilContext{} },
		"in Observers": func(rec *recorder) Observer { return Observers(nilContext{}, rec) },
	} {
		t.Run(name, func(t *testing.T) {
			rec := &recorder{}
			c, _, _ := newTestClient(t, WithObserver(wrap(rec)))
			err, panicked := callSafely(func() error {
				return c.Do(context.Background(), "job:1", func(context.Context) error { return nil })
			})
			if panicked || err != nil {
				t.Fatalf("Do = %v (panicked %v)", err, panicked)
			}
			if name == "alone" {
				return
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.starts) != 1 || len(rec.acquires) != 1 || len(rec.rstarts) != 1 || len(rec.releases) != 1 {
				t.Errorf("the Observer after it heard %d/%d acquisitions and %d/%d releases start/end, want 1 each",
					len(rec.starts), len(rec.acquires), len(rec.rstarts), len(rec.releases))
			}
		})
	}
}

// AcquireCanceled is also "the Client was closed while waiting": a Lock
// that Close ends while it waits did not fail, it was called off.
func TestObserverCloseEndsAWaitAsCanceled(t *testing.T) {
	rec := &recorder{}
	c, rdb, _ := newTestClient(t, WithObserver(rec))
	ctx := context.Background()
	holder := newClientOn(t, rdb)
	l := mustLock(t, holder, "job:1")
	defer l.Unlock(ctx)
	got := make(chan error, 1)
	go func() {
		_, err := c.Lock(ctx, "job:1")
		got <- err
	}()
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool { return rdb.ZCard(ctx, c.keys("job:1").queue).Val() == 1 })
	_ = c.Close()
	if err := <-got; !errors.Is(err, ErrClosed) {
		t.Fatalf("Lock ended by Close = %v, want ErrClosed", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.acquires) != 1 || rec.acquires[0].Outcome != AcquireCanceled {
		t.Errorf("AcquireEnd of a Lock ended by Close = %+v, want canceled", rec.acquires)
	}
}

// A renewal that got no answer says why (RenewEvent.Err), as the warning
// it is logged with does.
func TestObserverRenewalNoAnswerCarriesItsError(t *testing.T) {
	srv := redistest.Start(t)
	rec := &recorder{}
	errInjected := errors.New("injected renewal failure")
	var failed atomic.Bool
	c, _ := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{extendScript.Hash(): func() error {
		if failed.CompareAndSwap(false, true) {
			return errInjected
		}
		return nil
	}}}, WithObserver(rec))
	l := mustLock(t, c, "job:1", WithTTL(time.Second))
	defer l.Unlock(context.Background())
	waitUntil(t, 5*time.Second, "the failed renewal to be reported", func() bool {
		return rec.count(func(r *recorder) int { return len(r.renews) }) >= 1
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if e := rec.renews[0]; e.Outcome != RenewNoAnswer || !errors.Is(e.Err, errInjected) {
		t.Errorf("Renew = %+v, want no_answer with the renewal's error", e)
	}
}

// The release of a degraded lock says so (ReleaseEndEvent.Degraded), and
// that it ended the hold its AcquireEnd began.
func TestObserverReleaseOfADegradedLock(t *testing.T) {
	c, rec := degradedWhileDown(t)
	l := mustLock(t, c, "job:1")
	if !l.Degraded() {
		t.Fatal("Lock with Redis down: not degraded")
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.releases) != 1 {
		t.Fatalf("releases = %+v, want 1", rec.releases)
	}
	if e := rec.releases[0]; !e.Degraded || !e.Ended || e.Outcome != ReleaseOK {
		t.Errorf("ReleaseEnd = %+v, want released, degraded, ended", e)
	}
}
