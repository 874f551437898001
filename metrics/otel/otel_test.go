package otel_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/metrics/internal/traffic"
	dlockotel "github.com/dlock-go/dlock/metrics/otel"
)

func TestMain(m *testing.M) {
	srv := redistest.StartMain() // for the Example
	os.Setenv("REDIS_ADDR", srv.Addr())
	code := m.Run()
	srv.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// point is one data point: a sum's value, or a histogram's count and sum.
type point struct {
	value, count, sum float64
}

// collect reads the metrics and returns the points of name by their
// attributes, written "k=v,k=v" in sorted order.
func collect(t *testing.T, r *sdkmetric.ManualReader, name string) map[string]point {
	t.Helper()
	return collectAll(t, r)[name]
}

// collectAll reads the metrics and returns the points of each, by metric
// name, then by attributes as collect writes them.
func collectAll(t *testing.T, r *sdkmetric.ManualReader) map[string]map[string]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]point{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			points := map[string]point{}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					points[attrs(p.Attributes)] = point{value: float64(p.Value)}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					points[attrs(p.Attributes)] = point{count: float64(p.Count), sum: p.Sum}
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
			out[m.Name] = points
		}
	}
	return out
}

func attrs(s attribute.Set) string {
	var kv []string
	for _, a := range s.ToSlice() {
		kv = append(kv, string(a.Key)+"="+a.Value.String())
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

func spanAttr(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, a := range s.Attributes() {
		if a.Key == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

func TestMetricsAndSpansAfterRealTraffic(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(context.Background())

	obs, err := dlockotel.New(dlockotel.WithMeterProvider(mp), dlockotel.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	gen := traffic.Start(t, obs)

	// Three orders locked and held a while each, inside a request's span.
	reqCtx, req := tp.Tracer("test").Start(context.Background(), "request")
	gen.Orders(reqCtx)
	req.End()
	// A slow acquisition, a failed TryLock and a re-entry.
	gen.Contend(func() float64 {
		return collect(t, reader, "dlock.acquire.pending")["dlock.key.group=invoice,dlock.kind=lock"].value
	})
	// Renewals, and a lock lost at the end of its lease.
	gen.RenewAndLose(
		func() float64 {
			return collect(t, reader, "dlock.renewals")["dlock.key.group=job,dlock.kind=lock,dlock.outcome=renewed"].value
		},
		func() float64 {
			return collect(t, reader, "dlock.lost")["dlock.key.group=job,dlock.kind=lock,dlock.reason=expired"].value
		},
	)
	// A lock, a semaphore and an RWMutex of one name.
	gen.Kinds(
		func(kind string) float64 {
			return collect(t, reader, "dlock.acquire.pending")["dlock.key.group=shared,dlock.kind="+kind].value
		},
		func(kind string) float64 {
			return collect(t, reader, "dlock.renewals")["dlock.key.group=shared,dlock.kind="+kind+",dlock.outcome=renewed"].value
		},
		func(kind string) float64 {
			return collect(t, reader, "dlock.lost")["dlock.key.group=shared,dlock.kind="+kind+",dlock.reason=expired"].value
		},
	)

	check := func(name, attrs string, want float64) {
		t.Helper()
		if got := collect(t, reader, name)[attrs].value; got != want {
			t.Errorf("%s{%s} = %v, want %v", name, attrs, got, want)
		}
	}
	check("dlock.acquire.attempts", "dlock.key.group=order,dlock.kind=lock,dlock.mode=lock", 3)
	check("dlock.acquisitions", "dlock.key.group=order,dlock.kind=lock,dlock.mode=lock,dlock.outcome=acquired", 3)
	check("dlock.acquisitions", "dlock.key.group=invoice,dlock.kind=lock,dlock.mode=lock,dlock.outcome=acquired", 2)
	check("dlock.acquisitions", "dlock.key.group=invoice,dlock.kind=lock,dlock.mode=trylock,dlock.outcome=not_obtained", 1)
	check("dlock.acquire.pending", "dlock.key.group=invoice,dlock.kind=lock", 0)
	check("dlock.releases", "dlock.key.group=order,dlock.kind=lock,dlock.outcome=released", 3)
	check("dlock.releases", "dlock.key.group=invoice,dlock.kind=lock,dlock.outcome=released", 3) // inner, outer, waiter
	check("dlock.reentries", "dlock.key.group=invoice,dlock.kind=lock,dlock.outcome=reentered", 1)
	check("dlock.lost", "dlock.key.group=job,dlock.kind=lock,dlock.reason=expired", 1)
	// One name, three kinds: separate points (as Kinds documents).
	for kind, want := range traffic.KindCounts {
		check("dlock.acquire.attempts", "dlock.key.group=shared,dlock.kind="+kind+",dlock.mode=lock", want.Acquired)
		check("dlock.acquisitions", "dlock.key.group=shared,dlock.kind="+kind+",dlock.mode=lock,dlock.outcome=acquired", want.Acquired)
		check("dlock.acquire.pending", "dlock.key.group=shared,dlock.kind="+kind, 0)
		check("dlock.releases", "dlock.key.group=shared,dlock.kind="+kind+",dlock.outcome=released", want.Released)
	}
	if n := collect(t, reader, "dlock.hold.duration")["dlock.key.group=shared,dlock.kind=lock"].count; n != 1 {
		t.Errorf("dlock.hold.duration{dlock.key.group=shared,dlock.kind=lock} count = %v, want 1", n)
	}
	holds := collect(t, reader, "dlock.hold.duration")["dlock.key.group=order,dlock.kind=lock"]
	gen.CheckHolds(holds.count, holds.sum)
	// The inner Unlock of the re-entry records no hold time.
	if n := collect(t, reader, "dlock.hold.duration")["dlock.key.group=invoice,dlock.kind=lock"].count; n != 2 {
		t.Errorf("dlock.hold.duration{dlock.key.group=invoice,dlock.kind=lock} count = %v, want 2", n)
	}
	waits := collect(t, reader, "dlock.acquire.duration")
	if n := waits["dlock.key.group=invoice,dlock.kind=lock,dlock.mode=trylock,dlock.outcome=not_obtained"].count; n != 1 {
		t.Errorf("dlock.acquire.duration{dlock.key.group=invoice,dlock.kind=lock,dlock.mode=trylock,dlock.outcome=not_obtained} count = %v, want 1", n)
	}
	invoice := waits["dlock.key.group=invoice,dlock.kind=lock,dlock.mode=lock,dlock.outcome=acquired"]
	gen.CheckInvoiceWaits(invoice.count, invoice.sum)
	order := waits["dlock.key.group=order,dlock.kind=lock,dlock.mode=lock,dlock.outcome=acquired"]
	gen.CheckOrderWaits(order.count, order.sum)
	// No metric attribute carries a raw key (attribute names have no ':').
	for name, points := range collectAll(t, reader) {
		for a := range points {
			if strings.Contains(a, ":") {
				t.Errorf("%s has attributes %s: a raw key", name, a)
			}
		}
	}

	// Spans: the orders' acquisitions and releases are children of the
	// request; the slow acquisition lasts as long as its wait.
	var acquires, releases, slow int
	shared := map[string]int{} // Kinds' spans, by name and kind
	for _, s := range spans.GetSpans().Snapshots() {
		key, _ := spanAttr(s, dlockotel.Key)
		kind, _ := spanAttr(s, dlockotel.Kind)
		if key.AsString() == traffic.Shared {
			shared[s.Name()+" "+kind.AsString()]++
			continue
		}
		if strings.HasPrefix(s.Name(), "dlock.") && kind.AsString() != "lock" {
			t.Errorf("span %s of %s: kind %q, want lock", s.Name(), key.AsString(), kind.AsString())
		}
		switch s.Name() {
		case "dlock.acquire":
			acquires++
			if strings.HasPrefix(key.AsString(), "order:") && s.Parent().SpanID() != req.SpanContext().SpanID() {
				t.Errorf("acquire span of %s is not a child of the request", key.AsString())
			}
			if out, _ := spanAttr(s, dlockotel.Outcome); key.AsString() == "invoice:7" && out.AsString() == "acquired" &&
				s.EndTime().Sub(s.StartTime()) >= traffic.Wait {
				slow++
				if f, ok := spanAttr(s, dlockotel.Fence); !ok || f.AsInt64() <= 0 {
					t.Error("the slow acquire span has no fence")
				}
			}
			if s.Status().Code == codes.Error {
				t.Errorf("acquire span of %s has an error status: %v", key.AsString(), s.Status())
			}
			if out, _ := spanAttr(s, dlockotel.Outcome); out.AsString() != "acquired" {
				if f, ok := spanAttr(s, dlockotel.Fence); ok {
					t.Errorf("acquire span of %s, %s: fence %v, want none", key.AsString(), out.AsString(), f.AsInt64())
				}
			}
		case "dlock.release":
			releases++
			if strings.HasPrefix(key.AsString(), "order:") {
				h, _ := spanAttr(s, dlockotel.HoldTime)
				if h.AsFloat64() < traffic.Hold.Seconds() {
					t.Errorf("release span of %s: hold %v s, want >= %v", key.AsString(), h.AsFloat64(), traffic.Hold.Seconds())
				}
			}
		}
	}
	// Acquires: order x3, invoice x3 (holder, TryLock, waiter), job x2;
	// releases: order x3, invoice x3 (inner, holder, waiter), job x2.
	if acquires != 8 || releases != 8 || slow != 1 {
		t.Errorf("spans: %d acquire (want 8), %d release (want 8), %d slow acquire (want 1)", acquires, releases, slow)
	}
	// Kinds: the lock's, the semaphore's (holder, waiter, the lost permit,
	// never released) and the RWMutex's acquisitions and releases.
	wantShared := map[string]int{
		"dlock.acquire lock": 1, "dlock.acquire semaphore": 3, "dlock.acquire rwmutex": 1,
		"dlock.release lock": 1, "dlock.release semaphore": 2, "dlock.release rwmutex": 1,
	}
	if !maps.Equal(shared, wantShared) {
		t.Errorf("spans of %s by name and kind: %v, want %v", traffic.Shared, shared, wantShared)
	}
}

// dlock.hold.active is back to zero on every path by which a hold ends
// (traffic.Held).
func TestHoldActiveBackToZeroOnEveryPath(t *testing.T) {
	obs, reader := meteredObserver(t)
	traffic.Start(t, obs).Held(func(kind string) float64 {
		return collect(t, reader, "dlock.hold.active")["dlock.key.group=held,dlock.kind="+kind].value
	})
	// Each loss under its reason, each failed release as one, the
	// renewal that found a lock gone, the failed re-entry and the degraded
	// grant as one.
	check := func(name, attrs string, want float64) {
		t.Helper()
		if got := collect(t, reader, name)[attrs].value; got != want {
			t.Errorf("%s{%s} = %v, want %v", name, attrs, got, want)
		}
	}
	for reason, n := range traffic.HeldLosses {
		check("dlock.lost", "dlock.key.group=held,dlock.kind=lock,dlock.reason="+reason, n)
	}
	check("dlock.releases", "dlock.key.group=held,dlock.kind=lock,dlock.outcome=error", traffic.HeldReleaseErrors)
	check("dlock.renewals", "dlock.key.group=held,dlock.kind=lock,dlock.outcome=not_held", 1)
	check("dlock.reentries", "dlock.key.group=held,dlock.kind=lock,dlock.outcome=error", 1)
	check("dlock.acquisitions", "dlock.key.group=held,dlock.kind=lock,dlock.mode=lock,dlock.outcome=degraded", 1)
}

func TestPermitsHoldActiveBackToZeroOnEveryPath(t *testing.T) {
	obs, reader := meteredObserver(t)
	traffic.Start(t, obs).HeldPermits(
		func(kind string) float64 {
			return collect(t, reader, "dlock.hold.active")["dlock.key.group=held,dlock.kind="+kind].value
		},
		func(kind string) float64 {
			return collect(t, reader, "dlock.hold.duration")["dlock.key.group=held,dlock.kind="+kind].count
		},
	)
}

// WithKeyGroup maps keys to groups, and past WithMaxGroups the groups seen
// later count as "other".
func TestKeyGroups(t *testing.T) {
	obs, reader := meteredObserver(t, dlockotel.WithMaxGroups(traffic.MaxGroups), dlockotel.WithKeyGroup(traffic.GroupBySlash))
	want := traffic.Start(t, obs).GroupedKeys()
	got := collect(t, reader, "dlock.acquisitions")
	if len(got) != len(want) {
		t.Errorf("points = %v, want groups %v", got, want)
	}
	for group, n := range want {
		a := "dlock.key.group=" + group + ",dlock.kind=lock,dlock.mode=lock,dlock.outcome=acquired"
		if got[a].value != n {
			t.Errorf("%s = %v, want %v", a, got[a].value, n)
		}
	}
}

// meteredObserver returns an Observer with opts whose metrics reader
// collects.
func meteredObserver(t *testing.T, opts ...dlockotel.Option) (*dlockotel.Observer, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	obs, err := dlockotel.New(append([]dlockotel.Option{dlockotel.WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return obs, reader
}

// spanObserver returns an Observer whose spans go to an in-memory
// exporter (read with its GetSpans), through tp.
func spanObserver(t *testing.T, opts ...dlockotel.Option) (obs *dlockotel.Observer, spans *tracetest.InMemoryExporter, tp *sdktrace.TracerProvider) {
	t.Helper()
	spans = tracetest.NewInMemoryExporter()
	tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	obs, err := dlockotel.New(append([]dlockotel.Option{dlockotel.WithTracerProvider(tp), dlockotel.WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return obs, spans, tp
}

func TestWithoutKeyInSpans(t *testing.T) {
	obs, spans, _ := spanObserver(t, dlockotel.WithoutKeyInSpans())
	locks := traffic.Start(t, obs).Locks
	if err := locks.Do(context.Background(), "secret:1", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for _, s := range spans.GetSpans().Snapshots() {
		if _, ok := spanAttr(s, dlockotel.Key); ok {
			t.Errorf("span %s carries the key", s.Name())
		}
		if g, _ := spanAttr(s, dlockotel.KeyGroup); g.AsString() != "secret" {
			t.Errorf("span %s: group %q", s.Name(), g.AsString())
		}
		if k, _ := spanAttr(s, dlockotel.Kind); k.AsString() != "lock" {
			t.Errorf("span %s: kind %q", s.Name(), k.AsString())
		}
	}
}

// Keys are any bytes, and a span's string attributes must be UTF-8: OTLP's
// protobuf refuses to marshal a span with invalid UTF-8, and with it the
// whole batch it is exported in. The key in spans is made valid, as its
// group is in the metrics.
func TestKeyInSpansIsValidUTF8(t *testing.T) {
	obs, spans, _ := spanObserver(t)
	locks := traffic.Start(t, obs).Locks
	if err := locks.Do(context.Background(), "order:\xff\xfe", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	snaps := spans.GetSpans().Snapshots()
	if len(snaps) != 2 {
		t.Fatalf("%d spans, want dlock.acquire and dlock.release", len(snaps))
	}
	for _, s := range snaps {
		if _, ok := spanAttr(s, dlockotel.Key); !ok {
			t.Errorf("span %s lacks the key", s.Name())
		}
		for _, a := range s.Attributes() {
			if a.Value.Type() == attribute.STRING && !utf8.ValidString(a.Value.AsString()) {
				t.Errorf("span %s: attribute %s = %q is not valid UTF-8", s.Name(), a.Key, a.Value.AsString())
			}
		}
	}
}

// WithoutKeyInSpans is for "keys that must not reach a tracing backend":
// a failed acquisition's span must not carry the key in its status or its
// exception event either.
func TestWithoutKeyInSpansOnError(t *testing.T) {
	const key = "secret:4711"
	s, _ := failedAcquireSpan(t, key, dlockotel.WithoutKeyInSpans())
	if s.Status().Description != dlock.ErrWrongType.Error() {
		t.Errorf("span %s status %q, want the error's kind %q", s.Name(), s.Status().Description, dlock.ErrWrongType.Error())
	}
	if strings.Contains(s.Status().Description, key) {
		t.Errorf("span %s status carries the key: %q", s.Name(), s.Status().Description)
	}
	for _, ev := range s.Events() {
		for _, a := range ev.Attributes {
			if strings.Contains(a.Value.String(), key) {
				t.Errorf("span %s event %s carries the key: %s=%q", s.Name(), ev.Name, a.Key, a.Value.String())
			}
		}
	}
}

// appTracer is an application's own Observer that starts a span of its
// own around each acquisition and release, next to dlockotel's.
type appTracer struct {
	dlock.NopObserver
	tracer trace.Tracer
}

func (a appTracer) AcquireStart(ctx context.Context, _ dlock.AcquireStartEvent) context.Context {
	ctx, _ = a.tracer.Start(ctx, "app.acquire")
	return ctx
}

func (a appTracer) AcquireEnd(ctx context.Context, _ dlock.AcquireEndEvent) {
	trace.SpanFromContext(ctx).End()
}

func (a appTracer) ReleaseStart(ctx context.Context, _ dlock.ReleaseStartEvent) context.Context {
	ctx, _ = a.tracer.Start(ctx, "app.release")
	return ctx
}

func (a appTracer) ReleaseEnd(ctx context.Context, _ dlock.ReleaseEndEvent) {
	trace.SpanFromContext(ctx).End()
}

// dlock.Observers passes the context one Observer's AcquireStart returned
// to the next, and the last one to every AcquireEnd. Combined with another
// Observer that starts a span (an application's own, or a second
// dlockotel Observer with another TracerProvider), dlockotel must end the
// spans it started, not whichever span is current in the context.
func TestSpansEndedWhenCombinedWithAnotherTracer(t *testing.T) {
	obs, spans, tp := spanObserver(t)
	locks := traffic.Start(t, dlock.Observers(obs, appTracer{tracer: tp.Tracer("app")})).Locks
	if err := locks.Do(context.Background(), "order:1", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	ended := map[string]int{}
	for _, s := range spans.GetSpans().Snapshots() {
		ended[s.Name()]++
		if s.Name() == "app.acquire" {
			if _, ok := spanAttr(s, dlockotel.Outcome); ok {
				t.Errorf("dlockotel set its attributes on the application's span %s", s.Name())
			}
		}
	}
	for _, name := range []string{"dlock.acquire", "dlock.release", "app.acquire", "app.release"} {
		if ended[name] != 1 {
			t.Errorf("span %s ended %d times, want 1 (ended spans: %v)", name, ended[name], ended)
		}
	}
}

// A re-entry adds the event "dlock.reenter" to the span current in its
// context: the request's, which the held lock's Context carries.
func TestReenterEventOnTheCurrentSpan(t *testing.T) {
	obs, spans, tp := spanObserver(t)
	locks := traffic.Start(t, obs).Locks
	ctx, req := tp.Tracer("test").Start(context.Background(), "request")
	l, err := locks.Lock(ctx, "order:1")
	if err != nil {
		t.Fatal(err)
	}
	inner, err := locks.Lock(l.Context(), "order:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	req.End()
	var events []string
	for _, s := range spans.GetSpans().Snapshots() {
		for _, ev := range s.Events() {
			set := attribute.NewSet(ev.Attributes...)
			level, _ := set.Value(dlockotel.Level)
			out, _ := set.Value(dlockotel.Outcome)
			events = append(events, fmt.Sprintf("%s: %s level=%d outcome=%s", s.Name(), ev.Name, level.AsInt64(), out.AsString()))
		}
	}
	want := []string{"request: dlock.reenter level=2 outcome=reentered"}
	if !slices.Equal(events, want) {
		t.Errorf("span events %q, want %q", events, want)
	}
}

// A failed acquisition's span has an error status with the error's
// message, and records the error as an exception event.
func TestFailedAcquireSpan(t *testing.T) {
	s, err := failedAcquireSpan(t, "order:4711")
	if s.Status().Code != codes.Error || s.Status().Description != err.Error() {
		t.Errorf("span %s status %v, want an error with %q", s.Name(), s.Status(), err.Error())
	}
	if ev := s.Events(); len(ev) != 1 || ev[0].Name != "exception" {
		t.Errorf("span %s events %v, want the exception", s.Name(), ev)
	}
}

// failedAcquireSpan has Lock fail on key, whose name holds a string, under
// an Observer made with opts, and returns the one span it left, and Lock's
// error.
func failedAcquireSpan(t *testing.T, key string, opts ...dlockotel.Option) (sdktrace.ReadOnlySpan, error) {
	t.Helper()
	obs, spans, _ := spanObserver(t, opts...)
	rdb := redistest.Start(t).Client(t)
	locks, err := dlock.New(rdb, dlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()
	if err := rdb.Set(ctx, "dlock:{"+key+"}", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err = locks.Lock(ctx, key); !errors.Is(err, dlock.ErrWrongType) {
		t.Fatalf("Lock = %v, want ErrWrongType", err)
	}
	snaps := spans.GetSpans().Snapshots()
	if len(snaps) != 1 {
		t.Fatalf("%d spans, want 1", len(snaps))
	}
	return snaps[0], err
}

// An event made by hand (a test of the caller's own Observer chain) that
// says it failed but carries no error still ends its span as failed,
// without a panic.
func TestFailedEventWithoutError(t *testing.T) {
	obs, spans, _ := spanObserver(t)
	ctx := context.Background()
	actx := obs.AcquireStart(ctx, dlock.AcquireStartEvent{Key: "order:1", Kind: "lock"})
	obs.AcquireEnd(actx, dlock.AcquireEndEvent{Key: "order:1", Kind: "lock", Outcome: dlock.AcquireError})
	rctx := obs.ReleaseStart(ctx, dlock.ReleaseStartEvent{Key: "order:1", Kind: "lock"})
	obs.ReleaseEnd(rctx, dlock.ReleaseEndEvent{Key: "order:1", Kind: "lock", Outcome: dlock.ReleaseError})
	snaps := spans.GetSpans().Snapshots()
	if len(snaps) != 2 {
		t.Fatalf("%d spans, want 2", len(snaps))
	}
	for _, s := range snaps {
		if s.Status().Code != codes.Error {
			t.Errorf("span %s status %v, want an error", s.Name(), s.Status())
		}
	}
}

// A failed release's span has an error status with Unlock's error, and
// records the error as an exception event; a release that found the lock
// gone (not_held) does not fail its span.
func TestFailedReleaseSpan(t *testing.T) {
	obs, spans, _ := spanObserver(t)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	locks, err := dlock.New(rdb, dlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()
	gone, err := locks.Lock(ctx, "order:1")
	if err != nil {
		t.Fatal(err)
	}
	failing, err := locks.Lock(ctx, "order:2")
	if err != nil {
		t.Fatal(err)
	}
	// Other data at the lock's name: its release finds it gone (not_held).
	if err := rdb.Del(ctx, "dlock:{order:1}").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.RPush(ctx, "dlock:{order:1}", "x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := gone.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock of a lock found gone = %v, want ErrNotHeld", err)
	}
	// Redis gone: the release fails, well within the default lease.
	srv.Kill(t)
	uerr := failing.Unlock(ctx)
	if uerr == nil || errors.Is(uerr, dlock.ErrNotHeld) {
		t.Fatalf("Unlock with Redis gone = %v, want its error", uerr)
	}
	spansOf := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans.GetSpans().Snapshots() {
		if key, _ := spanAttr(s, dlockotel.Key); s.Name() == "dlock.release" {
			spansOf[key.AsString()] = s
		}
	}
	if len(spansOf) != 2 {
		t.Fatalf("release spans %v, want one for each lock", spansOf)
	}
	if s := spansOf["order:1"]; s.Status().Code == codes.Error {
		t.Errorf("not_held release's span status %v, want no error", s.Status())
	}
	s := spansOf["order:2"]
	if out, _ := spanAttr(s, dlockotel.Outcome); out.AsString() != "error" {
		t.Errorf("failed release's span outcome %q, want error", out.AsString())
	}
	if s.Status().Code != codes.Error || s.Status().Description != uerr.Error() {
		t.Errorf("failed release's span status %v, want an error with %q", s.Status(), uerr.Error())
	}
	if ev := s.Events(); len(ev) != 1 || ev[0].Name != "exception" {
		t.Errorf("failed release's span events %v, want the exception", ev)
	}
}
