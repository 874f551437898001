package dlock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu       sync.Mutex
	starts   []AcquireStartEvent
	acquires []AcquireEndEvent
	reenters []ReenterEvent
	rstarts  []ReleaseStartEvent
	releases []ReleaseEndEvent
	renews   []RenewEvent
	losts    []LostEvent
	ctxSeen  []any // the value of ctxMark in the contexts of the End calls
}

type ctxMark struct{}

var _ Observer = (*recorder)(nil)

func (r *recorder) AcquireStart(ctx context.Context, e AcquireStartEvent) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts = append(r.starts, e)
	return context.WithValue(ctx, ctxMark{}, "acquire:"+e.Key)
}

func (r *recorder) AcquireEnd(ctx context.Context, e AcquireEndEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acquires = append(r.acquires, e)
	r.ctxSeen = append(r.ctxSeen, ctx.Value(ctxMark{}))
}

func (r *recorder) Reenter(_ context.Context, e ReenterEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reenters = append(r.reenters, e)
}

func (r *recorder) ReleaseStart(ctx context.Context, e ReleaseStartEvent) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rstarts = append(r.rstarts, e)
	return context.WithValue(ctx, ctxMark{}, "release:"+e.Key)
}

func (r *recorder) ReleaseEnd(ctx context.Context, e ReleaseEndEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.releases = append(r.releases, e)
	r.ctxSeen = append(r.ctxSeen, ctx.Value(ctxMark{}))
}

func (r *recorder) Renew(e RenewEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.renews = append(r.renews, e)
}

func (r *recorder) Lost(e LostEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.losts = append(r.losts, e)
}

func (r *recorder) count(f func(r *recorder) int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return f(r)
}

// keyKinds is "event key kind" for each event heard but the renewals and
// re-entries: the acquisitions' starts and ends, the losses, the
// releases' starts and ends, in this order. Called with r.mu held.
func (r *recorder) keyKinds() []string {
	var got []string
	for _, e := range r.starts {
		got = append(got, "start "+e.Key+" "+e.Kind)
	}
	for _, e := range r.acquires {
		got = append(got, "end "+e.Key+" "+e.Kind)
	}
	for _, e := range r.losts {
		got = append(got, "lost "+e.Key+" "+e.Kind)
	}
	for _, e := range r.rstarts {
		got = append(got, "release "+e.Key+" "+e.Kind)
	}
	for _, e := range r.releases {
		got = append(got, "released "+e.Key+" "+e.Kind)
	}
	return got
}

func TestObserverSeesTheLockLife(t *testing.T) {
	rec := &recorder{}
	c, rdb, _ := newTestClient(t, WithObserver(rec))
	ctx := context.Background()

	// A granted lock, a refused TryLock, a re-entry, the releases.
	l := mustLock(t, c, "job:1")
	if _, err := c.TryLock(ctx, "job:1"); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock = %v", err)
	}
	inner, err := c.Lock(l.Context(), "job:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Unlock = %v", err)
	}

	rec.mu.Lock()
	if len(rec.starts) != 2 || !rec.starts[0].Wait || rec.starts[1].Wait {
		t.Errorf("acquire starts = %+v, want Lock then TryLock", rec.starts)
	}
	if len(rec.acquires) != 2 {
		t.Fatalf("acquire ends = %+v", rec.acquires)
	}
	if a := rec.acquires[0]; a.Outcome != AcquireOK || a.Key != "job:1" || a.Fence != l.Fence() || a.WaitTime <= 0 || a.Err != nil {
		t.Errorf("first acquire = %+v", a)
	}
	if a := rec.acquires[1]; a.Outcome != AcquireNotObtained || !errors.Is(a.Err, ErrNotObtained) {
		t.Errorf("TryLock = %+v", a)
	}
	if len(rec.reenters) != 1 || rec.reenters[0].Level != 2 || rec.reenters[0].Err != nil {
		t.Errorf("re-entries = %+v", rec.reenters)
	}
	// Inner and outer Unlock; the second Unlock of l fails before Redis and
	// is not an event.
	if len(rec.rstarts) != 2 || rec.rstarts[0].Level != 2 || rec.rstarts[1].Level != 1 {
		t.Errorf("release starts = %+v", rec.rstarts)
	}
	if len(rec.releases) != 2 || rec.releases[1].Outcome != ReleaseOK || rec.releases[1].Held <= 0 {
		t.Errorf("releases = %+v", rec.releases)
	}
	// The contexts returned by the Start calls reach the End calls.
	want := []any{"acquire:job:1", "acquire:job:1", "release:job:1", "release:job:1"}
	for i, v := range want {
		if i >= len(rec.ctxSeen) || rec.ctxSeen[i] != v {
			t.Errorf("contexts seen = %v, want %v", rec.ctxSeen, want)
			break
		}
	}
	rec.mu.Unlock()

	// Renewals, then a loss when the lease runs out unrenewed.
	r := mustLock(t, c, "job:2", WithTTL(60*time.Millisecond))
	waitUntil(t, 5*time.Second, "two renewals", func() bool {
		return rec.count(func(r *recorder) int { return len(r.renews) }) >= 2
	})
	if err := r.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	short := mustLock(t, c, "job:3", WithTTL(50*time.Millisecond), WithoutRenewal())
	<-short.Done()
	waitUntil(t, 5*time.Second, "the loss", func() bool {
		return rec.count(func(r *recorder) int { return len(r.losts) }) == 1
	})
	waitUntil(t, 5*time.Second, "the key to expire", func() bool { return rdb.Exists(ctx, c.keys("job:3").lock).Val() == 0 })
	if err := short.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock of a lost lock = %v", err)
	}
	// Close loses the locks still held.
	_ = mustLock(t, c, "job:4")
	c.Close()

	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, e := range rec.renews {
		if e.Key != "job:2" || e.Outcome != RenewOK {
			t.Errorf("renewal %+v", e)
		}
	}
	if len(rec.losts) != 2 {
		t.Fatalf("losses = %+v", rec.losts)
	}
	if e := rec.losts[0]; e.Key != "job:3" || e.Reason != LostExpired || !errors.Is(e.Cause, ErrLockLost) || e.Held < 30*time.Millisecond {
		t.Errorf("loss = %+v, want job:3 expired after ~50ms", e)
	}
	if e := rec.losts[1]; e.Key != "job:4" || e.Reason != LostClosed {
		t.Errorf("loss = %+v, want job:4 closed", e)
	}
	last := rec.releases[len(rec.releases)-1]
	if last.Key != "job:3" || last.Outcome != ReleaseNotHeld {
		t.Errorf("release of the lost lock = %+v", last)
	}
}

func TestObserverSeesAStolenLockAndCanceledWait(t *testing.T) {
	rec := &recorder{}
	c, rdb, _ := newTestClient(t, WithObserver(rec))
	ctx := context.Background()
	l := mustLock(t, c, "stolen", WithTTL(150*time.Millisecond))
	wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	_, err := c.Lock(wctx, "stolen")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock = %v", err)
	}
	rdb.Del(ctx, c.keys("stolen").lock) // an operator removed it
	<-l.Done()
	waitUntil(t, 5*time.Second, "the loss", func() bool {
		return rec.count(func(r *recorder) int { return len(r.losts) }) == 1
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	// The wait lasted until the 30 ms context ended, counted from a start
	// taken inside Lock, a little after the context began: most of 30 ms.
	if a := rec.acquires[1]; a.Outcome != AcquireCanceled || a.WaitTime < 20*time.Millisecond {
		t.Errorf("cancelled wait = %+v", a)
	}
	if e := rec.losts[0]; e.Reason != LostNotHeld {
		t.Errorf("loss = %+v, want not_held", e)
	}
	var notHeld bool
	for _, e := range rec.renews {
		notHeld = notHeld || e.Outcome == RenewNotHeld
	}
	if !notHeld {
		t.Errorf("renewals %+v: none found the lock gone", rec.renews)
	}
}

// A lock removed by an operator is found gone both by a renewal and by a
// TTL call in flight: the Observer hears of one loss, not two.
func TestLostIsReportedOnce(t *testing.T) {
	srv := redistest.Start(t)
	rec := &recorder{}
	losts := func() int { return rec.count(func(r *recorder) int { return len(r.losts) }) }
	c, rdb := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{ttlScript.Hash(): func() error {
		waitUntil(t, 5*time.Second, "the watchdog to report the loss", func() bool { return losts() >= 1 })
		return nil
	}}}, WithObserver(rec))
	ctx := context.Background()
	l := mustLock(t, c, "gone", WithTTL(300*time.Millisecond))
	rdb.Del(ctx, c.keys("gone").lock) // an operator removed it
	if _, err := l.TTL(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("TTL = %v, want ErrLockLost", err)
	}
	_ = l.Unlock(ctx)
	if n := losts(); n != 1 {
		t.Fatalf("Lost reported %d times for one lost lock", n)
	}
}

// A renewal whose answer comes after its lock was declared lost (the lease's
// deadline passed while it was on its way) is not reported: the Observer
// has heard Lost already, and the lock is no longer watched.
func TestRenewalAnsweredAfterLossNotReported(t *testing.T) {
	srv := redistest.Start(t)
	rec := &recorder{}
	losts := func() int { return rec.count(func(r *recorder) int { return len(r.losts) }) }
	c, _ := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{extendScript.Hash(): func() error {
		// Runs on the watchdog's renewal goroutine: no t.Fatal here.
		for end := time.Now().Add(5 * time.Second); losts() == 0 && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
		return nil
	}}}, WithObserver(rec))
	l := mustLock(t, c, "late", WithTTL(300*time.Millisecond))
	<-l.Done()
	waitRenewalsSettled(t)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.losts) != 1 || len(rec.renews) != 0 {
		t.Fatalf("Lost %+v, then Renew %+v: the renewal answered after the loss was reported", rec.losts, rec.renews)
	}
}

// Unlock that finds the lock gone ends the lock's context as lost: the
// Observer hears of that loss too.
func TestUnlockFindingLossReportsIt(t *testing.T) {
	rec := &recorder{}
	c, rdb, _ := newTestClient(t, WithObserver(rec))
	ctx := context.Background()
	l := mustLock(t, c, "vanish")
	rdb.Del(ctx, c.keys("vanish").lock) // an operator removed it
	if err := l.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock = %v, want ErrNotHeld", err)
	}
	if cause := context.Cause(l.h.ctx); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("the hold ended with %v, want ErrLockLost", cause)
	}
	if n := rec.count(func(r *recorder) int { return len(r.losts) }); n != 1 {
		t.Fatalf("the hold ended as lost, but Lost was reported %d times", n)
	}
	// ReleaseEndEvent.Err is "the error returned, if any".
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.releases) != 1 {
		t.Fatalf("releases = %+v", rec.releases)
	}
	if e := rec.releases[0]; e.Outcome != ReleaseNotHeld || !errors.Is(e.Err, ErrNotHeld) {
		t.Errorf("ReleaseEnd = %+v, want not_held with ErrNotHeld", e)
	}
}

func TestObservers(t *testing.T) {
	a, b := &recorder{}, &recorder{}
	c, _, _ := newTestClient(t, WithObserver(Observers(a, nil, b)))
	ctx := context.Background()
	if err := c.Do(ctx, "both", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*recorder{a, b} {
		if len(r.acquires) != 1 || len(r.releases) != 1 {
			t.Errorf("observer saw %d acquisitions and %d releases, want 1 each", len(r.acquires), len(r.releases))
		}
	}
}

// TestHooksCostNothingWhenOff checks that without an Observer, debug logs
// and the other optional features, the hooks on the lock's path do not
// allocate.
func TestHooksCostNothingWhenOff(t *testing.T) {
	c, _, _ := newTestClient(t)
	ctx := context.Background()
	l := mustLock(t, c, "cheap")
	defer l.Unlock(ctx)
	req := backend.Request{Key: "cheap", Token: l.Token(), TTL: DefaultTTL, Wait: true}
	cfg := lockConfig{ttl: DefaultTTL, renew: true}
	due := []*hold{l.h}
	outcomes := []backend.Renewed{{Outcome: backend.Held}}
	allocs := testing.AllocsPerRun(1000, func() {
		x, actx, err := c.prepare(ctx, &req, &cfg)
		if x != nil || actx != ctx || err != nil {
			t.Fatal("prepare did work with every feature off")
		}
		c.acquireEnd(actx, x, &req, l.h, nil)
		_ = x.granted()
		c.reentered(ctx, l.h, l, nil)
		c.releaseEnd(ctx, c.releaseStart(ctx, l.h, 1), l.h, 1, nil, true)
		c.renewed(due, outcomes)
		c.observeLost(l.h, ErrLockLost)
		_ = c.beFor(l.h)
	})
	if allocs != 0 {
		t.Errorf("hooks allocate %v times per lock with every feature off, want 0", allocs)
	}
}

// BenchmarkObserverOverhead measures an uncontended Lock + Unlock without
// and with an Observer (a NopObserver: the cost of the hooks alone).
func BenchmarkObserverOverhead(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts []Option
	}{{"none", nil}, {"nop", []Option{WithObserver(NopObserver{})}}} {
		b.Run(bc.name, func(b *testing.B) {
			c, _, _ := newTestClientB(b, bc.opts...)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				l, err := c.Lock(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestLogLevels(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, _, _ := newTestClient(t, WithLogger(log))
	ctx := context.Background()
	reenterAndUnlock(t, c, "logged")
	short := mustLock(t, c, "logged", WithTTL(30*time.Millisecond), WithoutRenewal())
	<-short.Done()
	waitUntil(t, 5*time.Second, "the loss to be logged", func() bool {
		return strings.Contains(buf.String(), `msg="dlock: lock lost" key=logged kind=lock`)
	})
	// Permits of the same name: their records say so (kind), or they would
	// read as the lock's.
	sem := c.Semaphore("logged", 1)
	p, err := sem.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctx, 1); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryAcquire of a full semaphore = %v, want ErrNotObtained", err)
	}
	_ = p.Unlock(ctx)
	w, err := c.RWMutex("logged").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Unlock(ctx)
	shortP, err := sem.Acquire(ctx, 1, WithTTL(30*time.Millisecond), WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	<-shortP.Done()
	waitUntil(t, 5*time.Second, "the permits' loss to be logged", func() bool {
		return strings.Contains(buf.String(), `msg="dlock: lock lost" key=logged kind=semaphore`)
	})
	out := buf.String()
	for _, want := range []string{
		`level=DEBUG msg="dlock: acquired" key=logged kind=lock`,
		`level=DEBUG msg="dlock: re-entered" key=logged kind=lock hold_level=2`,
		`level=DEBUG msg="dlock: released" key=logged kind=lock hold_level=1`,
		`level=WARN msg="dlock: lock lost" key=logged kind=lock`,
		`level=DEBUG msg="dlock: acquired" key=logged kind=semaphore`,
		`level=DEBUG msg="dlock: acquire failed" key=logged kind=semaphore outcome=not_obtained`,
		`level=DEBUG msg="dlock: released" key=logged kind=semaphore hold_level=1`,
		`level=WARN msg="dlock: lock lost" key=logged kind=semaphore`,
		`level=DEBUG msg="dlock: acquired" key=logged kind=rwmutex`,
		`level=DEBUG msg="dlock: released" key=logged kind=rwmutex hold_level=1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	// A loss says why under "error", as every other record does.
	lost := regexp.MustCompile(`level=WARN msg="dlock: lock lost" key=logged kind=lock fence=[0-9]+ error="dlock: lock lost: `)
	if !lost.MatchString(out) {
		t.Errorf("log lacks the loss with its fence and error (%s):\n%s", lost, out)
	}

	// At the default Info level, a lock's normal life logs nothing.
	buf.Reset()
	quiet := newClientOn(t, c.be.(*node).rdb, WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	if err := quiet.Do(ctx, "quiet", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if buf.String() != "" {
		t.Errorf("Info-level log of a normal lock: %s", buf.String())
	}
}

// Debug logging turned on while a lock is held (a slog.LevelVar set at
// run time) logs its release: the level is read at the release, not at
// the grant.
func TestReleaseLoggedAtDebugTurnedOnWhileHeld(t *testing.T) {
	var buf syncBuffer
	var level slog.LevelVar // Info
	c, _, _ := newTestClient(t, WithLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: &level}))))
	ctx := context.Background()
	l := mustLock(t, c, "k")
	p, err := c.Semaphore("k", 2).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	level.Set(slog.LevelDebug)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	released := map[string]bool{}
	if buf.String() != "" {
		for _, r := range logRecords(t, &buf) {
			if r.Msg == "dlock: released" && r.Key == "k" {
				released[r.Kind] = true
			}
		}
	}
	if !released["lock"] || !released["semaphore"] {
		t.Errorf("released records of kinds %v, want lock and semaphore:\n%s", released, buf.String())
	}
}

// No record reuses the keys a handler writes itself (time, level, msg):
// a JSON record would hold "level" twice, and a log pipeline keeping the
// last one would read a hold level where the severity is.
func TestLogRecordsKeepHandlerKeys(t *testing.T) {
	var buf syncBuffer
	c, _, _ := newTestClient(t, WithLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	ctx := context.Background()
	reenterAndUnlock(t, c, "logged")
	p, err := c.Semaphore("logged", 1).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Unlock(ctx)
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		dec := json.NewDecoder(strings.NewReader(line))
		if _, err := dec.Token(); err != nil { // {
			t.Fatalf("log record %q: %v", line, err)
		}
		seen := make(map[string]bool)
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				t.Fatalf("log record %q: %v", line, err)
			}
			if seen[k.(string)] {
				t.Errorf("log record has %q twice: %s", k, line)
			}
			seen[k.(string)] = true
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("log record %q: %v", line, err)
			}
			// A success's record has no error, not "error":null.
			if string(v) == "null" {
				t.Errorf("log record has %q null: %s", k, line)
			}
		}
	}
}

// reenterAndUnlock locks key, re-enters it and unlocks both levels: the
// acquisition, re-entry and release records of a lock.
func reenterAndUnlock(t *testing.T, c *Client, key string) {
	t.Helper()
	ctx := context.Background()
	l := mustLock(t, c, key)
	inner, err := c.Lock(l.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	_ = inner.Unlock(ctx)
	_ = l.Unlock(ctx)
}

// logRecord is what tests read of a JSON log record.
type logRecord struct {
	Msg   string `json:"msg"`
	Op    string `json:"op"`
	Key   string `json:"key"`
	Kind  string `json:"kind"`
	Locks int    `json:"locks"`
	Token string `json:"token"`
	Error string `json:"error"`
}

// logRecords decodes each record of a JSON log.
func logRecords(t *testing.T, log *syncBuffer) []logRecord {
	t.Helper()
	var out []logRecord
	for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		var r logRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log record %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// syncBuffer is a bytes.Buffer safe for the watchdog and the test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

// An Unlock whose reply was lost is retried; Redis had released the lock,
// and the retry returns nil. The Observer must not report that successful
// release as not_held ("the lock was not held any more: lost, expired or
// force-released"), nor a loss other than the failed release's.
func TestRetriedUnlockReportedAsReleased(t *testing.T) {
	srv := redistest.Start(t)
	rec := &recorder{}
	errLost := errors.New("reply lost")
	loseReply, arm := failNext(errLost)
	c, _ := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{releaseEval.sha: loseReply}}, WithObserver(rec))
	ctx := context.Background()
	l := mustLock(t, c, "k")
	arm()
	if err := l.Unlock(ctx); !errors.Is(err, errLost) {
		t.Fatalf("Unlock = %v, want the lost reply", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("retried Unlock = %v, want nil", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.releases) != 2 {
		t.Fatalf("releases = %+v", rec.releases)
	}
	if e := rec.releases[1]; e.Outcome != ReleaseOK || e.Err != nil {
		t.Errorf("retried Unlock returned nil but was reported as %v (%+v)", e.Outcome, e)
	}
	// The failed Unlock gave the lock up (its outcome was unknown): that,
	// and nothing else, is the one loss reported.
	if len(rec.losts) != 1 || rec.losts[0].Reason != LostReleaseFailed {
		t.Errorf("losts = %+v, want one, release_failed", rec.losts)
	}
}

// Do whose release fails gives the lock up (Lost), but nothing found it
// "not held": Redis still holds it with our token.
func TestDoFailedReleaseLostReason(t *testing.T) {
	srv := redistest.Start(t)
	rec := &recorder{}
	errDrop := errors.New("connection dropped")
	c, rdb := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{releaseEval.sha: func() error { return errDrop }}}, WithObserver(rec))
	ctx := context.Background()
	if err := c.Do(ctx, "k", func(context.Context) error { return nil }); !errors.Is(err, errDrop) {
		t.Fatalf("Do = %v", err)
	}
	if rdb.Exists(ctx, c.keys("k").lock).Val() != 1 {
		t.Fatal("the lock is gone")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.losts) != 1 || rec.losts[0].Reason == LostNotHeld {
		t.Errorf("losts = %+v: reported not_held (\"found another owner or none\") while Redis holds it", rec.losts)
	}
}

// panicOnGrant panics in AcquireEnd for the first lock granted once armed.
type panicOnGrant struct {
	NopObserver
	armed atomic.Bool
}

func (o *panicOnGrant) AcquireEnd(_ context.Context, e AcquireEndEvent) {
	if e.Outcome == AcquireOK && o.armed.CompareAndSwap(true, false) {
		panic("observer bug")
	}
}

// A panic in the Observer's AcquireEnd leaves the caller without its Lock
// (an HTTP server recovers the handler's panic and goes on): the lock must
// not stay held, renewed by the watchdog, with nobody to unlock it.
func TestObserverPanicDoesNotKeepTheLock(t *testing.T) {
	o := &panicOnGrant{}
	c, _, _ := newTestClient(t, WithObserver(o))
	o.armed.Store(true)
	mustPanic(t, "AcquireEnd", func() { _, _ = c.Lock(context.Background(), "k") })
	notKept(t, 2*time.Second, "TryLock", func(ctx context.Context) (*Lock, error) { return c.TryLock(ctx, "k") })
}

// notKept checks that take, given up to d, gets a lock granted to a call
// whose AcquireEnd panicked: the lock was not kept for nobody.
func notKept(t *testing.T, d time.Duration, what string, take func(context.Context) (*Lock, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	l, err := take(ctx)
	if err != nil {
		t.Fatalf("%s after AcquireEnd panicked = %v: the lock granted then is still held", what, err)
	}
	_ = l.Unlock(ctx)
}

type panicOnReleaseStart struct{ NopObserver }

func (panicOnReleaseStart) ReleaseStart(context.Context, ReleaseStartEvent) context.Context {
	panic("observer bug")
}

// A panic in the Observer's ReleaseStart leaves the Lock held, as before the
// Unlock: a renewal that then finds the lock gone reports it lost, not
// released by that Unlock, which never reached Redis.
func TestObserverPanicAtReleaseStartKeepsTheHold(t *testing.T) {
	c, rdb, _ := newTestClient(t, WithObserver(panicOnReleaseStart{}))
	ctx := context.Background()
	l := mustLock(t, c, "k", WithTTL(300*time.Millisecond))
	mustPanic(t, "ReleaseStart", func() { _ = l.Unlock(ctx) })
	rdb.Del(ctx, c.keys("k").lock) // an operator removed it
	<-l.Done()
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("the lock ended with %v, want ErrLockLost: the failed Unlock counted as a release", cause)
	}
}

// A Lock call that panics (a RetryStrategy's bug, while waiting in the
// process or in Redis; net/http recovers a handler's panic and goes on)
// has ended: the Observer hears of its end, or the metrics count it as
// under way for good (acquires_in_flight) and its trace span never ends.
func TestObserverHearsTheEndOfAPanickedLock(t *testing.T) {
	rec := &recorder{}
	c, rdb, _ := newTestClient(t, WithObserver(rec), WithLocalQueue())
	other := newClientOn(t, rdb) // another process
	ctx := context.Background()
	mine := mustLock(t, c, "local") // the panic while waiting in the process
	lockPanics(t, c, "local")
	theirs := mustLock(t, other, "redis") // the panic while waiting in Redis
	lockPanics(t, c, "redis")
	_ = mine.Unlock(ctx)
	_ = theirs.Unlock(ctx)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.acquires) != len(rec.starts) {
		t.Fatalf("%d acquisitions started, %d ended: %+v", len(rec.starts), len(rec.acquires), rec.acquires)
	}
	for _, e := range rec.acquires[1:] {
		if e.Outcome != AcquireError || e.Err == nil {
			t.Errorf("end of a panicked Lock: %+v", e)
		}
	}
}

// panicOnRelease is a go-redis hook that panics at the next release script
// once armed (a buggy hook of the application's, before the command is
// sent).
type panicOnRelease struct {
	testutil.PassHook
	armed *atomic.Bool
}

func (h panicOnRelease) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && a[0] == "evalsha" && a[1] == &releaseEval.sha && h.armed.CompareAndSwap(true, false) {
			panic("hook bug")
		}
		return next(ctx, cmd)
	}
}

// An Unlock that panics (a go-redis hook's bug; net/http recovers a
// handler's panic, deferred Unlock included, and goes on) has ended: the
// Observer hears of its end, as of a Lock call that panics, or its trace
// span never ends.
func TestObserverHearsTheEndOfAPanickedUnlock(t *testing.T) {
	srv := redistest.Start(t)
	rec := &recorder{}
	armed := new(atomic.Bool)
	c, _ := hookedClient(t, srv.Addr(), panicOnRelease{armed: armed}, WithObserver(rec))
	ctx := context.Background()
	l := mustLock(t, c, "k")
	armed.Store(true)
	mustPanic(t, "Unlock", func() { _ = l.Unlock(ctx) })
	// As after a release that failed: given up, not renewed until Close.
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
		t.Errorf("the lock's Context after a panicked Unlock: %v, want ErrLockLost", cause)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.releases) != len(rec.rstarts) {
		t.Fatalf("%d releases started, %d ended: %+v", len(rec.rstarts), len(rec.releases), rec.releases)
	}
	if e := rec.releases[0]; e.Outcome != ReleaseError || e.Err == nil {
		t.Errorf("end of a panicked Unlock: %+v", e)
	}
}

// panicOnReleaseEnd panics in ReleaseEnd once armed.
type panicOnReleaseEnd struct {
	NopObserver
	armed atomic.Bool
}

func (o *panicOnReleaseEnd) ReleaseEnd(context.Context, ReleaseEndEvent) {
	if o.armed.CompareAndSwap(true, false) {
		panic("observer bug")
	}
}

// panicOnStarts panics in the next AcquireStart, or ReleaseStart, once
// armed.
type panicOnStarts struct {
	NopObserver
	acquire, release atomic.Bool
}

func (o *panicOnStarts) AcquireStart(ctx context.Context, _ AcquireStartEvent) context.Context {
	if o.acquire.CompareAndSwap(true, false) {
		panic("observer bug")
	}
	return ctx
}

func (o *panicOnStarts) ReleaseStart(ctx context.Context, _ ReleaseStartEvent) context.Context {
	if o.release.CompareAndSwap(true, false) {
		panic("observer bug")
	}
	return ctx
}

// checkEnded reports acquisitions and releases that r heard start and not
// end; who names r in the message.
func (r *recorder) checkEnded(t *testing.T, who string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.acquires) != len(r.starts) {
		t.Errorf("%s saw %d acquisitions start, %d end", who, len(r.starts), len(r.acquires))
	}
	if len(r.releases) != len(r.rstarts) {
		t.Errorf("%s saw %d releases start, %d end", who, len(r.rstarts), len(r.releases))
	}
}

// Observers(a, b): a panic in b's AcquireStart or ReleaseStart ends the
// call, unreported; a, which was told it started, must hear of its end.
func TestObserversPanicAtStartEndsTheOthers(t *testing.T) {
	rec, p := &recorder{}, &panicOnStarts{}
	c, _, _ := newTestClient(t, WithObserver(Observers(rec, p)))
	ctx := context.Background()
	p.acquire.Store(true)
	mustPanic(t, "AcquireStart", func() { _, _ = c.Lock(ctx, "k") })
	l := mustLock(t, c, "k")
	p.release.Store(true)
	mustPanic(t, "ReleaseStart", func() { _ = l.Unlock(ctx) })
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	rec.checkEnded(t, "the first observer")
}

// Observers(a, b): a panic in a's AcquireEnd (documented: it releases the
// lock it reports) or ReleaseEnd must not rob b of its End calls, or b's
// in-flight gauge stays up for good and its spans never end.
func TestObserversPanicStillEndsTheOthers(t *testing.T) {
	grant, release, rec := &panicOnGrant{}, &panicOnReleaseEnd{}, &recorder{}
	c, _, _ := newTestClient(t, WithObserver(Observers(grant, release, rec)))
	ctx := context.Background()
	grant.armed.Store(true)
	mustPanic(t, "AcquireEnd", func() { _, _ = c.Lock(ctx, "k") })
	l := mustLock(t, c, "k")
	release.armed.Store(true)
	mustPanic(t, "ReleaseEnd", func() { _ = l.Unlock(ctx) })
	rec.checkEnded(t, "the last observer")
}

// panicOnEvents panics in Reenter and Lost.
type panicOnEvents struct{ NopObserver }

func (panicOnEvents) Reenter(context.Context, ReenterEvent) { panic("observer bug") }
func (panicOnEvents) Lost(LostEvent)                        { panic("observer bug") }

// Observers(a, b): a panic in a's Reenter or Lost must not keep the event
// from b, whose counters would miss it for good. A panic in Reenter leaves
// the caller without the inner Lock (an HTTP server recovers the handler's
// panic and goes on): the outer Unlock must still free the lock.
func TestObserversPanicStillTellsTheOthers(t *testing.T) {
	rec := &recorder{}
	c, rdb, _ := newTestClient(t, WithObserver(Observers(panicOnEvents{}, rec)))
	ctx := context.Background()
	l := mustLock(t, c, "k")
	mustPanic(t, "Reenter", func() { _, _ = c.Lock(l.Context(), "k") })
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, c.keys("k").lock).Val(); n != 0 {
		t.Error("the lock is still held after its only Unlock: the re-entry whose Observer panicked kept it")
	}
	mustLock(t, c, "k2")
	mustPanic(t, "Lost", func() { _ = c.Close() })
	if n := rec.count(func(r *recorder) int { return len(r.reenters) }); n != 1 {
		t.Errorf("the last observer heard %d re-entries, want 1", n)
	}
	if n := rec.count(func(r *recorder) int { return len(r.losts) }); n != 1 {
		t.Errorf("the last observer heard %d losses, want 1", n)
	}
}

// A lock force-released while held, whose Unlock is on its way when a
// renewal meets the key gone: the renewal takes it for that Unlock's
// release (the hold ends as released), but the release then finds the
// lock gone too, so it was lost, and Unlock says so (ErrLockLost). The
// Observer must hear of that loss, as when no renewal comes in between
// (TestUnlockFindingLossReportsIt).
func TestUnlockFindingLossDuringRenewalReportsIt(t *testing.T) {
	srv := redistest.Start(t)
	rec := &recorder{}
	ctx := context.Background()
	admin := srv.Client(t)
	var armed atomic.Bool
	var l *Lock
	c, _ := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{releaseEval.sha: func() error {
		if !armed.CompareAndSwap(true, false) {
			return nil
		}
		// An operator removes the lock; the release waits until the next
		// renewal has met the key gone.
		admin.Del(ctx, l.c.keys("k").lock)
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Error("no renewal ended the hold")
		}
		return nil
	}}}, WithObserver(rec))
	// Renewed every second, trusted for about 3 s: the renewal comes first.
	l = mustLock(t, c, "k", WithTTL(3*time.Second))
	armed.Store(true)
	err := l.Unlock(ctx)
	if !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrLockLost) {
		t.Fatalf("Unlock = %v, want ErrNotHeld and ErrLockLost", err)
	}
	waitRenewalsSettled(t)
	if n := rec.count(func(r *recorder) int { return len(r.losts) }); n != 1 {
		t.Errorf("Observer heard %d losses, want 1: Unlock said the lock was lost", n)
	}
}

// TestObserverTellsPermitsFromLocks: a lock, a semaphore's permits and an
// RWMutex of one name reach the Observer with the same Key and their own
// Kind, from the grant to the loss.
func TestObserverTellsPermitsFromLocks(t *testing.T) {
	rec := &recorder{}
	c, rdb, _ := newTestClient(t, WithObserver(rec))
	ctx := context.Background()
	lock := mustLock(t, c, "x", WithTTL(300*time.Millisecond))
	perm, err := c.Semaphore("x", 2).Acquire(ctx, 1, WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.RWMutex("x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A renewal of each, then the permits lost (their holder removed).
	waitUntil(t, 5*time.Second, "a renewal of the lock and of the permits", func() bool {
		return rec.count(func(r *recorder) int {
			kinds := map[string]bool{}
			for _, e := range r.renews {
				kinds[e.Kind] = true
			}
			return len(kinds)
		}) == 2
	})
	rdb.HDel(ctx, semKeys(c.Semaphore("x", 2)).lock, perm.Token())
	<-perm.Done()
	// Its Context ends before the watchdog tells the Observer.
	waitUntil(t, 5*time.Second, "the permits' loss", func() bool {
		return rec.count(func(r *recorder) int { return len(r.losts) }) == 1
	})
	_ = lock.Unlock(ctx)
	_ = w.Unlock(ctx)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	got := rec.keyKinds()
	want := []string{
		"start x lock", "start x semaphore", "start x rwmutex",
		"end x lock", "end x semaphore", "end x rwmutex",
		"lost x semaphore",
		"release x lock", "release x rwmutex",
		"released x lock", "released x rwmutex",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Observers(a, b): an Unlock that finds the lock lost reports the loss,
// and a panic in a's Lost then must not rob b of the Unlock's ReleaseEnd,
// as a panic in a's ReleaseEnd does not: b's release span would never end.
func TestObserversPanicInLostAtUnlockStillEndsTheRelease(t *testing.T) {
	rec := &recorder{}
	c, rdb, _ := newTestClient(t, WithObserver(Observers(panicOnEvents{}, rec)))
	ctx := context.Background()
	l := mustLock(t, c, "vanish")
	rdb.Del(ctx, c.keys("vanish").lock) // an operator removed it
	mustPanic(t, "Lost", func() { _ = l.Unlock(ctx) })
	if n := rec.count(func(r *recorder) int { return len(r.losts) }); n != 1 {
		t.Errorf("the last observer heard %d losses, want 1", n)
	}
	rec.checkEnded(t, "the last observer")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.releases) == 1 {
		if e := rec.releases[0]; e.Outcome != ReleaseNotHeld || !errors.Is(e.Err, ErrNotHeld) {
			t.Errorf("ReleaseEnd = %+v, want not_held with ErrNotHeld", e)
		}
	}
}

// panicOnGrantAndRelease panics in AcquireEnd for a lock granted, and in
// ReleaseStart, once armed.
type panicOnGrantAndRelease struct {
	NopObserver
	armed atomic.Bool
}

func (o *panicOnGrantAndRelease) AcquireEnd(_ context.Context, e AcquireEndEvent) {
	if e.Outcome == AcquireOK && o.armed.Load() {
		panic("observer bug")
	}
}

func (o *panicOnGrantAndRelease) ReleaseStart(ctx context.Context, _ ReleaseStartEvent) context.Context {
	if o.armed.Load() {
		panic("observer bug")
	}
	return ctx
}

// A panic in AcquireEnd releases the lock it reports (Observer's godoc),
// even if the Observer's ReleaseStart panics too: nobody has the Lock to
// unlock, and the watchdog would keep it held, for every process, until
// the Client is closed.
func TestObserverPanicAtGrantAndReleaseStartDoesNotKeepTheLock(t *testing.T) {
	o := &panicOnGrantAndRelease{}
	c, rdb, _ := newTestClient(t, WithObserver(o))
	other := newClientOn(t, rdb)
	o.armed.Store(true)
	mustPanic(t, "AcquireEnd", func() { _, _ = c.Lock(context.Background(), "k", WithTTL(300*time.Millisecond)) })
	// Past a renewal or two of the lease, had the lock been kept.
	notKept(t, 5*time.Second, "Lock by another process", func(ctx context.Context) (*Lock, error) { return other.Lock(ctx, "k") })
}

// Observers(a, b): a re-entry that finds the lock gone reports the loss;
// a panic in a's Lost then must not rob b of the Reenter event.
func TestObserversPanicInLostAtReenterStillTellsTheOthers(t *testing.T) {
	rec := &recorder{}
	c, rdb, _ := newTestClient(t, WithObserver(Observers(panicOnEvents{}, rec)))
	ctx := context.Background()
	l := mustLock(t, c, "vanish")
	rdb.Del(ctx, c.keys("vanish").lock) // an operator removed it
	mustPanic(t, "Lost", func() { _, _ = c.Lock(l.Context(), "vanish") })
	if n := rec.count(func(r *recorder) int { return len(r.losts) }); n != 1 {
		t.Errorf("the last observer heard %d losses, want 1", n)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.reenters) != 1 || rec.reenters[0].Err == nil {
		t.Errorf("the last observer heard re-entries %+v, want one that failed", rec.reenters)
	}
}

// A lease that runs out while AcquireEnd reports its grant ends the
// lock's Context then, but the Observer hears Lost after AcquireEnd, not
// before: it knows of no such lock before (as when Close ends it then,
// TestCloseDuringGrant).
func TestLostComesAfterAcquireEnd(t *testing.T) {
	o := &holdLog{pauseAcquired: true, paused: make(chan struct{}), resume: make(chan struct{})}
	c, _, _ := newTestClient(t, WithObserver(o))
	got := make(chan *Lock, 1)
	go func() {
		l, err := c.Lock(context.Background(), "job", WithTTL(100*time.Millisecond), WithoutRenewal())
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	<-o.paused // granted, AcquireEnd under way
	h := onlyHold(c)
	<-h.ctx.Done() // the watchdog found the lease over
	waitUntil(t, 5*time.Second, "the loss to be reported, or held back", func() bool {
		c.dog.mu.Lock()
		defer c.dog.mu.Unlock()
		o.mu.Lock()
		defer o.mu.Unlock()
		return h.lostBy != nil || len(o.events) > 0
	})
	close(o.resume)
	l := testutil.Receive(t, got, 5*time.Second, "Lock")
	if l == nil {
		return
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
		t.Errorf("cause = %v, want ErrLockLost", cause)
	}
	o.check(t, "job", "acquired job", "lost job")
}

// holdEnds counts, from rec's events, the holds granted and the two ways a
// hold's end is reported: a ReleaseEnd with Ended, or a Lost.
func (r *recorder) holdEnds() (granted, ended, lost int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.acquires {
		if e.Outcome == AcquireOK || e.Outcome == AcquireDegraded {
			granted++
		}
	}
	for _, e := range r.releases {
		if e.Ended {
			ended++
		}
	}
	return granted, ended, len(r.losts)
}

// checkEndedOnce fails t unless rec saw one hold granted and its end
// reported once: by a Lost or by a ReleaseEnd with Ended, not both. A
// gauge of held locks counts by these events.
func checkEndedOnce(t *testing.T, rec *recorder, wantLost bool) {
	t.Helper()
	granted, ended, lost := rec.holdEnds()
	want := map[bool][2]int{false: {1, 0}, true: {0, 1}}[wantLost]
	if granted != 1 || ended != want[0] || lost != want[1] {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		t.Errorf("granted %d, ReleaseEnd with Ended %d, Lost %d; want 1, %d, %d (releases %+v, losts %+v)",
			granted, ended, lost, want[0], want[1], rec.releases, rec.losts)
	}
}

// ReleaseEndEvent.Ended is true for the one Unlock that ended a hold, and
// never for a hold reported Lost, however its Unlocks go.
func TestReleaseEndedOncePerHold(t *testing.T) {
	ctx := context.Background()
	errFail := errors.New("reply lost")
	cases := []struct {
		name     string
		wantLost bool
		run      func(t *testing.T, c *Client, rdb *redis.Client, arm func())
	}{
		{"unlock", false, func(t *testing.T, c *Client, _ *redis.Client, _ func()) {
			if err := mustLock(t, c, "k").Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"unlock after close", true, func(t *testing.T, c *Client, _ *redis.Client, _ func()) {
			l := mustLock(t, c, "k")
			c.Close()
			if err := l.Unlock(ctx); err != nil { // the key is still there
				t.Fatal(err)
			}
		}},
		{"unlock retried", true, func(t *testing.T, c *Client, _ *redis.Client, arm func()) {
			l := mustLock(t, c, "k")
			arm()
			if err := l.Unlock(ctx); !errors.Is(err, errFail) {
				t.Fatalf("Unlock = %v", err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("retried Unlock = %v", err)
			}
		}},
		{"do", false, func(t *testing.T, c *Client, _ *redis.Client, _ func()) {
			if err := c.Do(ctx, "k", func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}},
		{"do with failed release", true, func(t *testing.T, c *Client, _ *redis.Client, arm func()) {
			if err := c.Do(ctx, "k", func(context.Context) error { arm(); return nil }); !errors.Is(err, errFail) {
				t.Fatalf("Do = %v", err)
			}
		}},
		{"lost, then unlock", true, func(t *testing.T, c *Client, _ *redis.Client, _ func()) {
			l := mustLock(t, c, "k", WithTTL(250*time.Millisecond), WithoutRenewal())
			<-l.Done()
			_ = l.Unlock(ctx) // nil if the key is still there, within the drift margin
		}},
		{"found gone by unlock", true, func(t *testing.T, c *Client, rdb *redis.Client, _ func()) {
			l := mustLock(t, c, "k")
			rdb.Del(ctx, c.keys("k").lock)
			if err := l.Unlock(ctx); !errors.Is(err, ErrLockLost) {
				t.Fatalf("Unlock = %v, want ErrLockLost", err)
			}
		}},
		{"reentered", false, func(t *testing.T, c *Client, _ *redis.Client, _ func()) {
			l := mustLock(t, c, "k")
			inner, err := c.Lock(l.Context(), "k")
			if err != nil {
				t.Fatal(err)
			}
			if err := inner.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"semaphore", false, func(t *testing.T, c *Client, _ *redis.Client, _ func()) {
			l, err := c.Semaphore("k", 3).Acquire(ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			rec := &recorder{}
			fail, arm := failNext(errFail)
			c, rdb := hookedClient(t, srv.Addr(), scriptHook{after: map[string]func() error{releaseEval.sha: fail}}, WithObserver(rec))
			tc.run(t, c, rdb, arm)
			if tc.wantLost { // a loss the watchdog found is reported after the Context ends
				waitUntil(t, 5*time.Second, "the loss to be reported", func() bool { _, _, lost := rec.holdEnds(); return lost > 0 })
			}
			checkEndedOnce(t, rec, tc.wantLost)
		})
	}
	t.Run("degraded", func(t *testing.T) {
		c, rec := degradedWhileDown(t)
		l := mustLock(t, c, "k")
		if !l.Degraded() {
			t.Fatal("not degraded")
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		checkEndedOnce(t, rec, false)
	})
}

// Observers(a, b): a panic in a's Lost, for one of the locks a Close
// ends, must not keep the others' losses from b: its gauge of held locks
// would count them held for good.
func TestObserversPanicInLostAtCloseStillTellsEachLoss(t *testing.T) {
	rec := &recorder{}
	var buf syncBuffer
	c, _, _ := newTestClient(t, WithObserver(Observers(panicOnEvents{}, rec)), WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
	mustLock(t, c, "a")
	mustLock(t, c, "b")
	mustPanic(t, "Lost", func() { _ = c.Close() })
	if n := rec.count(func(r *recorder) int { return len(r.losts) }); n != 2 {
		t.Errorf("the last observer heard %d losses, want 2: Close ended both locks", n)
	}
	// The caller gets the first panic; the second is not dropped unseen.
	var logged int
	for _, r := range logRecords(t, &buf) {
		if r.Msg == "dlock: panic in the Observer" {
			logged++
		}
	}
	if logged != 1 {
		t.Errorf("%d panics of Lost logged, want 1 (the one Close did not raise)\n%s", logged, buf.String())
	}
}

// stallLost holds the watchdog in the Lost of key "z" until the instant
// until, so that the leases that run out meanwhile are found lost in one
// round.
type stallLost struct {
	NopObserver
	until time.Time
}

func (o *stallLost) Lost(e LostEvent) {
	if e.Key == "z" {
		time.Sleep(time.Until(o.until)) // the clock is what is waited for
	}
}

// Observers(a, b): a panic in a's Lost, for one of the locks the watchdog
// finds lost in a round, must not keep the others' losses from b.
func TestObserversPanicInLostStillTellsEachLossOfARound(t *testing.T) {
	rec, stall := &recorder{}, &stallLost{}
	c, _, _ := newTestClient(t, WithObserver(Observers(stall, panicOnEvents{}, rec)))
	a := mustLock(t, c, "a", WithTTL(300*time.Millisecond), WithoutRenewal())
	b := mustLock(t, c, "b", WithTTL(300*time.Millisecond), WithoutRenewal())
	last := c.dog.deadline(b.h)
	if d := c.dog.deadline(a.h); d.After(last) {
		last = d
	}
	stall.until = last.Add(10 * time.Millisecond)
	mustLock(t, c, "z", WithTTL(100*time.Millisecond), WithoutRenewal())
	waitUntil(t, 5*time.Second, "the three losses to be reported", func() bool {
		return rec.count(func(r *recorder) int { return len(r.losts) }) == 3
	})
}

// panicOnLossLog is a log handler that panics at the record of a lost
// lock, as a faulty handler or sink may; it drops the other records.
type panicOnLossLog struct{}

func (panicOnLossLog) Enabled(context.Context, slog.Level) bool { return true }
func (h panicOnLossLog) WithAttrs([]slog.Attr) slog.Handler     { return h }
func (h panicOnLossLog) WithGroup(string) slog.Handler          { return h }

func (panicOnLossLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "dlock: lock lost" {
		panic("log handler bug")
	}
	return nil
}

// A panic in the log handler at the "lock lost" warning must not keep the
// loss from the Observer (a gauge of held locks would count the lock held
// for good), as a panic in Lost for another lock does not: whether the
// watchdog found it (each lock of its round), Close ended it, or Unlock
// found it gone.
func TestLossLogPanicStillTellsTheObserver(t *testing.T) {
	ctx := context.Background()
	losts := func(rec *recorder) int { return rec.count(func(r *recorder) int { return len(r.losts) }) }
	newClient := func(t *testing.T) (*Client, *recorder) {
		rec := &recorder{}
		c, _, _ := newTestClient(t, WithObserver(rec), WithLogger(slog.New(panicOnLossLog{})))
		return c, rec
	}
	t.Run("watchdog", func(t *testing.T) {
		c, rec := newClient(t)
		a := mustLock(t, c, "a", WithTTL(100*time.Millisecond), WithoutRenewal())
		b := mustLock(t, c, "b", WithTTL(100*time.Millisecond), WithoutRenewal())
		<-a.Done()
		<-b.Done()
		waitUntil(t, 5*time.Second, "both losses to be reported", func() bool { return losts(rec) == 2 })
	})
	t.Run("close", func(t *testing.T) {
		c, rec := newClient(t)
		mustLock(t, c, "a")
		mustLock(t, c, "b")
		if p := backend.Run(func() { _ = c.Close() }); p != nil {
			t.Errorf("Close panicked: %v", p.Value)
		}
		if n := losts(rec); n != 2 {
			t.Errorf("the Observer heard %d losses, want 2: Close ended both locks", n)
		}
	})
	t.Run("unlock", func(t *testing.T) {
		c, rec := newClient(t)
		l := mustLock(t, c, "k")
		if err := c.ForceRelease(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		var err error
		if p := backend.Run(func() { err = l.Unlock(ctx) }); p != nil {
			t.Fatalf("Unlock panicked: %v", p.Value)
		}
		if !errors.Is(err, ErrLockLost) {
			t.Errorf("Unlock = %v, want an error wrapping ErrLockLost", err)
		}
		checkEndedOnce(t, rec, true)
	})
}

// panicOnGrantAfterLoss panics in AcquireEnd for a granted lock once its
// hold has ended (the test closes lost once it has).
type panicOnGrantAfterLoss struct {
	NopObserver
	paused, lost chan struct{}
}

func (o *panicOnGrantAfterLoss) AcquireEnd(_ context.Context, e AcquireEndEvent) {
	if e.Outcome == AcquireOK {
		close(o.paused)
		<-o.lost
		panic("observer bug")
	}
}

// A lock lost while AcquireEnd reports its grant is reported Lost after
// it (TestLostComesAfterAcquireEnd), also when AcquireEnd panics: else a
// gauge of held locks counts it held for good.
func TestObserverPanicAtGrantStillReportsALossMeanwhile(t *testing.T) {
	rec, o := &recorder{}, &panicOnGrantAfterLoss{paused: make(chan struct{}), lost: make(chan struct{})}
	c, _, _ := newTestClient(t, WithObserver(Observers(o, rec)))
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = recover() }()
		_, _ = c.Lock(context.Background(), "k", WithTTL(100*time.Millisecond), WithoutRenewal())
	}()
	<-o.paused
	h := onlyHold(c)
	<-h.ctx.Done() // the watchdog found the lease over
	waitUntil(t, 5*time.Second, "the loss to be held back for AcquireEnd", func() bool {
		c.dog.mu.Lock()
		defer c.dog.mu.Unlock()
		return h.lostBy != nil
	})
	close(o.lost)
	testutil.Receive(t, done, 5*time.Second, "Lock")
	checkEndedOnce(t, rec, true)
}

// A lock whose AcquireEnd panicked is released by the Client; a loss
// found while that release is under way (Redis slow to answer it, the
// lease running out) is reported as any other.
func TestObserverPanicAtGrantStillReportsALaterLoss(t *testing.T) {
	srv := redistest.Start(t)
	rec, grant := &recorder{}, &panicOnGrant{}
	held := newHeldCall(nil)
	c, _ := hookedClient(t, srv.Addr(), scriptHook{before: map[string]func() error{releaseEval.sha: held.run}},
		WithObserver(Observers(grant, rec)))
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(held.release) }
	t.Cleanup(release) // before Close, which would wait for it
	grant.armed.Store(true)
	held.arm()
	mustPanic(t, "AcquireEnd", func() { _, _ = c.Lock(context.Background(), "k", WithTTL(300*time.Millisecond), WithoutRenewal()) })
	<-held.reached
	waitUntil(t, 5*time.Second, "the loss to be reported", func() bool {
		return rec.count(func(r *recorder) int { return len(r.losts) }) == 1
	})
	release()
	waitUntil(t, 5*time.Second, "the release to end", func() bool {
		return rec.count(func(r *recorder) int { return len(r.releases) }) == 1
	})
	checkEndedOnce(t, rec, true)
}

// A lock whose AcquireEnd and ReleaseStart both panicked is released by
// the Client all the same (TestObserverPanicAtGrantAndReleaseStartDoesNotKeepTheLock):
// the Observers that heard its grant hear of its end.
func TestObserverPanicAtGrantAndReleaseStartReportsTheEnd(t *testing.T) {
	rec, o := &recorder{}, &panicOnGrantAndRelease{}
	c, _, _ := newTestClient(t, WithObserver(Observers(rec, o)))
	o.armed.Store(true)
	mustPanic(t, "AcquireEnd", func() { _, _ = c.Lock(context.Background(), "k") })
	checkEndedOnce(t, rec, true)
}

// onlyHold is the one hold c's watchdog keeps.
func onlyHold(c *Client) *hold {
	c.dog.mu.Lock()
	defer c.dog.mu.Unlock()
	for h := range c.dog.holds {
		return h
	}
	return nil
}
