package dlock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

// closeOnNotObtained closes its Client when an acquisition is refused, as
// an application shutting down on the first failure would.
type closeOnNotObtained struct {
	NopObserver
	c *Client
}

func (o *closeOnNotObtained) AcquireEnd(_ context.Context, e AcquireEndEvent) {
	if e.Outcome == AcquireNotObtained {
		_ = o.c.Close()
	}
}

// Close called from an Observer callback that runs inside Lock or TryLock
// does not wait for that very call.
func TestCloseFromAcquireEndObserver(t *testing.T) {
	obs := &closeOnNotObtained{}
	holder, rdb, _ := newTestClient(t)
	// No t.Cleanup Close: it would hang on the deadlock being shown.
	c, err := New(rdb, WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	obs.c = c
	ctx := context.Background()
	// Another Client holds the key.
	l := mustLock(t, holder, "busy")
	defer l.Unlock(ctx)

	done := make(chan error, 1)
	go func() {
		_, err := c.TryLock(ctx, "busy")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotObtained) {
			t.Fatalf("TryLock = %v, want ErrNotObtained", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("TryLock did not return within 5s: Close called from AcquireEnd waits for the TryLock that calls it")
	}
}

// sentHook reports the first script sent once armed.
type sentHook struct {
	testutil.PassHook
	armed atomic.Bool
	sent  chan struct{}
}

func (h *sentHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.armed.Load() && cmd.Name() == "evalsha" {
			select {
			case h.sent <- struct{}{}:
			default:
			}
		}
		return next(ctx, cmd)
	}
}

// Close waits for the Lock calls under way for 5 s at most, even when
// Redis hangs and the go-redis client would wait far longer for its reads
// (ReadTimeout 30s here, or -1).
func TestCloseWithHungRedisAndLockInFlight(t *testing.T) {
	srv := redistest.Start(t)
	h := &sentHook{sent: make(chan struct{}, 1)}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 30 * time.Second})
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(h)
	c, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := mustLock(t, c, "warm") // connected, scripts cached
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	defer srv.Resume(t)
	h.armed.Store(true)
	go func() { _, _ = c.Lock(ctx, "job") }()
	<-h.sent // the acquire is on its way to the hung server

	closed := make(chan time.Duration, 1)
	start := time.Now()
	go func() {
		_ = c.Close()
		closed <- time.Since(start)
	}()
	select {
	case d := <-closed:
		t.Logf("Close took %v", d)
	case <-time.After(releaseTimeout + time.Second):
		t.Fatalf("Close still blocked after %v with a hung Redis and one Lock in flight (documented: up to 5 s)", time.Since(start).Round(time.Millisecond))
	}
}
