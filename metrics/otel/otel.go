// Package otel reports what the locks of dlock Clients do through
// OpenTelemetry: the metrics of package metrics/prometheus through the OTel
// metric API, and a span around each acquisition and release, so that a
// slow lock shows up in the trace of the request that waited for it.
//
//	import dlockotel "github.com/dlock-go/dlock/metrics/otel"
//
//	obs, err := dlockotel.New() // the global MeterProvider and TracerProvider
//	...
//	locks, err := dlock.New(rdb, dlock.WithObserver(obs))
//
// Metrics carry the key's group (attribute dlock.key.group), never the key,
// so that their number stays bounded: by default a key's group is its text
// before the first ':' ("order:42" is in group "order"; a key without ':'
// is in group "default"), and past 100 distinct groups the others count as
// "other" (WithKeyGroup, WithMaxGroups). Metrics and spans carry what the
// key names too (dlock.kind: "lock", "semaphore" or "rwmutex", the permits
// of Client.Semaphore and Client.RWMutex), so that a lock and a semaphore
// of one name make separate points; re-entries are of locks only. For
// permits, the waiting calls (Acquire, RLock, an RWMutex's Lock) have
// dlock.mode "lock" and their Try forms "trylock". Spans carry the key
// itself (dlock.key; bytes that are not UTF-8 become U+FFFD) unless
// WithoutKeyInSpans.
//
// Instruments (meter "github.com/dlock-go/dlock/metrics/otel"):
//
//	dlock.acquire.attempts   counter     Lock and TryLock calls (dlock.mode: lock, trylock), re-entries aside
//	dlock.acquisitions       counter     how they ended (dlock.outcome: acquired, degraded, not_obtained, canceled, error)
//	dlock.acquire.duration   histogram   how long they took, waiting included, in seconds
//	dlock.acquire.pending    updown      calls waiting or under way now
//	dlock.hold.active        updown      locks held now by this process (a hold of n permits is one)
//	dlock.hold.duration      histogram   how long locks were held, at their last Unlock, in seconds
//	dlock.releases           counter     Unlock calls (dlock.outcome: released, not_held, error)
//	dlock.renewals           counter     watchdog renewals (dlock.outcome: renewed, not_held, no_answer)
//	dlock.lost               counter     locks lost while held (dlock.reason: not_held, expired, closed, release_failed)
//	dlock.reentries          counter     re-entries (dlock.outcome: reentered, error)
//
// Spans: "dlock.acquire" (from the call to the grant or failure; attribute
// dlock.outcome, dlock.fence, error status on errors) and "dlock.release"
// (the Unlock; dlock.level, dlock.hold_seconds). A re-entry adds the event
// "dlock.reenter" to the current span.
package otel

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/metrics/internal/keygroup"
	"github.com/dlock-go/dlock/metrics/internal/labels"
)

// ScopeName is the instrumentation scope of the meter and tracer.
const ScopeName = "github.com/dlock-go/dlock/metrics/otel"

// Attribute keys.
const (
	KeyGroup = attribute.Key("dlock.key.group")
	Key      = attribute.Key("dlock.key") // spans only
	Kind     = attribute.Key("dlock.kind")
	Mode     = attribute.Key("dlock.mode")
	Outcome  = attribute.Key("dlock.outcome")
	Reason   = attribute.Key("dlock.reason")
	Fence    = attribute.Key("dlock.fence")
	Level    = attribute.Key("dlock.level")
	HoldTime = attribute.Key("dlock.hold_seconds")
)

// Histogram bucket boundaries, in seconds.
var (
	// DefaultWaitBuckets go from 1 ms (an uncontended round trip) to 1 min.
	DefaultWaitBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	// DefaultHoldBuckets go from 1 ms to 1 h.
	DefaultHoldBuckets = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900, 3600}
)

// Option configures New.
type Option func(*config)

type config struct {
	mp         metric.MeterProvider
	tp         trace.TracerProvider
	groupFn    func(string) string
	maxGroups  int
	keyInSpans bool
}

// WithMeterProvider sets where the metrics go (default, or with nil: the
// global one, otel.GetMeterProvider()). A nil pointer (a nil
// *sdkmetric.MeterProvider) makes New fail with dlock.ErrInvalidOption.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithTracerProvider sets where the spans go (default, or with nil: the
// global one, otel.GetTracerProvider()). A nil pointer (a nil
// *sdktrace.TracerProvider) makes New fail with dlock.ErrInvalidOption.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithKeyGroup sets how a key maps to its group attribute. Keep the number
// of groups small (WithMaxGroups caps it anyway).
func WithKeyGroup(fn func(key string) string) Option { return func(c *config) { c.groupFn = fn } }

// WithMaxGroups caps the distinct groups (default 100, which n <= 0 also
// gives); groups seen after the cap is reached are reported as "other".
func WithMaxGroups(n int) Option { return func(c *config) { c.maxGroups = n } }

// WithoutKeyInSpans leaves the key out of spans (only its group is kept),
// for keys that must not reach a tracing backend. The errors of failed
// spans name the key: their status then gives only the error's kind
// (dlock.ErrWrongType's message, say), and no exception event is recorded.
func WithoutKeyInSpans() Option { return func(c *config) { c.keyInSpans = false } }

// Observer is a dlock.Observer that records OpenTelemetry metrics and
// spans. Pass it to dlock.WithObserver; it is safe for concurrent use by
// many Clients. The zero Observer, and a nil *Observer, record nothing:
// make one with New.
type Observer struct {
	groups     *keygroup.Mapper
	tracer     trace.Tracer
	keyInSpans bool

	attempts     metric.Int64Counter
	acquisitions metric.Int64Counter
	wait         metric.Float64Histogram
	pending      metric.Int64UpDownCounter
	held         metric.Int64UpDownCounter // +1 a grant, -1 its Lost or its Unlock that ended it
	hold         metric.Float64Histogram
	releases     metric.Int64Counter
	renewals     metric.Int64Counter
	lost         metric.Int64Counter
	reentries    metric.Int64Counter
}

var _ dlock.Observer = (*Observer)(nil)

// New creates the instruments. An error the MeterProvider returns for one
// of them makes New fail with it.
func New(opts ...Option) (*Observer, error) {
	cfg := config{keyInSpans: true}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	// A nil pointer would panic in Meter or Tracer, or in the callbacks.
	if cfg.mp != nil && backend.IsNil(cfg.mp) {
		return nil, fmt.Errorf("dlock/metrics/otel: %w: nil %T", dlock.ErrInvalidOption, cfg.mp)
	}
	if cfg.tp != nil && backend.IsNil(cfg.tp) {
		return nil, fmt.Errorf("dlock/metrics/otel: %w: nil %T", dlock.ErrInvalidOption, cfg.tp)
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	m := cfg.mp.Meter(ScopeName)
	o := &Observer{
		groups:     keygroup.New(cfg.groupFn, cfg.maxGroups),
		tracer:     cfg.tp.Tracer(ScopeName),
		keyInSpans: cfg.keyInSpans,
	}
	var errs []error
	check := func(name string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("instrument %s: %w", name, err))
		}
	}
	counter := func(name, desc, unit string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		check(name, err)
		return c
	}
	histogram := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(buckets...))
		check(name, err)
		return h
	}
	o.attempts = counter("dlock.acquire.attempts", "Lock and TryLock calls (re-entries aside).", "{call}")
	o.acquisitions = counter("dlock.acquisitions", "Lock and TryLock calls by outcome.", "{call}")
	o.wait = histogram("dlock.acquire.duration", "How long Lock and TryLock calls took, waiting included.", DefaultWaitBuckets)
	pending, err := m.Int64UpDownCounter("dlock.acquire.pending",
		metric.WithDescription("Lock and TryLock calls waiting or under way."), metric.WithUnit("{call}"))
	check("dlock.acquire.pending", err)
	o.pending = pending
	held, err := m.Int64UpDownCounter("dlock.hold.active",
		metric.WithDescription("Locks held now (a hold of n permits counts once)."), metric.WithUnit("{lock}"))
	check("dlock.hold.active", err)
	o.held = held
	o.hold = histogram("dlock.hold.duration", "How long locks were held, measured at their last Unlock.", DefaultHoldBuckets)
	o.releases = counter("dlock.releases", "Unlock calls by outcome.", "{call}")
	o.renewals = counter("dlock.renewals", "Lease renewals by the watchdog, by outcome.", "{renewal}")
	o.lost = counter("dlock.lost", "Locks lost while held, by reason.", "{lock}")
	o.reentries = counter("dlock.reentries", "Re-entries of held locks, by outcome.", "{call}")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("dlock/metrics/otel: %w", err)
	}
	return o, nil
}

// AcquireStart counts an attempt and starts the "dlock.acquire" span.
func (o *Observer) AcquireStart(ctx context.Context, e dlock.AcquireStartEvent) context.Context {
	if o.off() {
		return ctx
	}
	g, k := o.keyAttrs(e.Key, e.Kind)
	attrs := metric.WithAttributes(g, k, Mode.String(labels.Mode(e.Wait)))
	o.attempts.Add(ctx, 1, attrs)
	o.pending.Add(ctx, 1, metric.WithAttributes(g, k))
	ctx, span := o.tracer.Start(ctx, "dlock.acquire", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(o.spanAttrs(e.Key, g, k, Mode.String(labels.Mode(e.Wait)))...))
	return context.WithValue(ctx, spanKey{o}, span)
}

// AcquireEnd records the outcome and the wait (a granted lock counts as
// held), and ends the span.
func (o *Observer) AcquireEnd(ctx context.Context, e dlock.AcquireEndEvent) {
	if o.off() {
		return
	}
	g, k := o.keyAttrs(e.Key, e.Kind)
	out := e.Outcome.String()
	o.pending.Add(ctx, -1, metric.WithAttributes(g, k))
	if e.Outcome == dlock.AcquireOK || e.Outcome == dlock.AcquireDegraded {
		o.held.Add(ctx, 1, metric.WithAttributes(g, k))
	}
	attrs := metric.WithAttributes(g, k, Mode.String(labels.Mode(e.Wait)), Outcome.String(out))
	o.acquisitions.Add(ctx, 1, attrs)
	o.wait.Record(ctx, e.WaitTime.Seconds(), attrs)
	span := o.span(ctx)
	span.SetAttributes(Outcome.String(out))
	if e.Fence != 0 {
		span.SetAttributes(Fence.Int64(int64(e.Fence)))
	}
	if e.Outcome == dlock.AcquireError {
		o.spanError(span, e.Err)
	}
	span.End()
}

// Reenter counts a re-entry and adds an event to the current span.
func (o *Observer) Reenter(ctx context.Context, e dlock.ReenterEvent) {
	if o.off() {
		return
	}
	g, k := o.keyAttrs(e.Key, labels.KindLock)
	out := labels.ReenterOutcome(e.Err)
	o.reentries.Add(ctx, 1, metric.WithAttributes(g, k, Outcome.String(out)))
	trace.SpanFromContext(ctx).AddEvent("dlock.reenter", trace.WithAttributes(Level.Int(e.Level), Outcome.String(out)))
}

// ReleaseStart starts the "dlock.release" span.
func (o *Observer) ReleaseStart(ctx context.Context, e dlock.ReleaseStartEvent) context.Context {
	if o.off() {
		return ctx
	}
	g, k := o.keyAttrs(e.Key, e.Kind)
	ctx, span := o.tracer.Start(ctx, "dlock.release", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(o.spanAttrs(e.Key, g, k, Level.Int(e.Level))...))
	return context.WithValue(ctx, spanKey{o}, span)
}

// ReleaseEnd records the outcome and, for the last Unlock of a lock, its
// hold time (an Unlock that ended the hold, Ended, counts it held no
// more), and ends the span.
// An Unlock that failed (ReleaseError) records no hold time: it may be
// tried again, and the try Redis answers records it, once; if none is,
// the hold counts as lost (release_failed).
func (o *Observer) ReleaseEnd(ctx context.Context, e dlock.ReleaseEndEvent) {
	if o.off() {
		return
	}
	g, k := o.keyAttrs(e.Key, e.Kind)
	out := e.Outcome.String()
	o.releases.Add(ctx, 1, metric.WithAttributes(g, k, Outcome.String(out)))
	if e.Ended {
		o.held.Add(ctx, -1, metric.WithAttributes(g, k))
	}
	if e.Level == 1 && e.Outcome != dlock.ReleaseError {
		o.hold.Record(ctx, e.Held.Seconds(), metric.WithAttributes(g, k))
	}
	span := o.span(ctx)
	span.SetAttributes(Outcome.String(out), HoldTime.Float64(e.Held.Seconds()))
	if e.Outcome == dlock.ReleaseError {
		o.spanError(span, e.Err)
	}
	span.End()
}

// Renew counts a renewal.
func (o *Observer) Renew(e dlock.RenewEvent) {
	if o.off() {
		return
	}
	g, k := o.keyAttrs(e.Key, e.Kind)
	o.renewals.Add(context.Background(), 1, metric.WithAttributes(g, k, Outcome.String(e.Outcome.String())))
}

// Lost counts a lost lock, held no more.
func (o *Observer) Lost(e dlock.LostEvent) {
	if o.off() {
		return
	}
	g, k := o.keyAttrs(e.Key, e.Kind)
	o.lost.Add(context.Background(), 1, metric.WithAttributes(g, k, Reason.String(e.Reason.String())))
	o.held.Add(context.Background(), -1, metric.WithAttributes(g, k))
}

// off reports whether o was not made by New (nil, or the zero Observer),
// which a Client cannot tell from one that was: its callbacks then do
// nothing rather than panic inside the Client's calls.
func (o *Observer) off() bool { return o == nil || o.groups == nil }

// spanKey keys the span an Observer's AcquireStart or ReleaseStart began
// in the context it returned. The End call ends that span, not whichever is
// current in its context: dlock.Observers passes the context on to the
// Observers that come after, which may start spans of their own.
type spanKey struct{ o *Observer }

// span returns the span that o's AcquireStart or ReleaseStart began in ctx,
// or a span that records nothing if there is none.
func (o *Observer) span(ctx context.Context) trace.Span {
	if s, ok := ctx.Value(spanKey{o}).(trace.Span); ok {
		return s
	}
	return trace.SpanFromContext(context.Background())
}

// errorKinds are what a failed span's status says instead of the error's
// message, which names the key, under WithoutKeyInSpans.
var errorKinds = []error{dlock.ErrWrongType, dlock.ErrNotObtained, dlock.ErrLockLost, dlock.ErrNotHeld,
	dlock.ErrClosed, context.DeadlineExceeded, context.Canceled}

// spanError marks span as failed with err, or only with err's kind under
// WithoutKeyInSpans. err is nil in an event made by hand that says only
// its outcome: the span is marked failed all the same.
func (o *Observer) spanError(span trace.Span, err error) {
	if err == nil {
		span.SetStatus(codes.Error, "dlock: error")
		return
	}
	if o.keyInSpans {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return
	}
	kind := "dlock: error (its message names the key: withheld)"
	for _, k := range errorKinds {
		if errors.Is(err, k) {
			kind = k.Error()
			break
		}
	}
	span.SetStatus(codes.Error, kind)
}

// keyAttrs are what every metric and span says of the key: its group and
// its kind (bounded, as labels.Kind makes it).
func (o *Observer) keyAttrs(key, kind string) (group, kindAttr attribute.KeyValue) {
	return KeyGroup.String(o.groups.Group(key)), Kind.String(labels.Kind(kind))
}

func (o *Observer) spanAttrs(key string, group, kind, extra attribute.KeyValue) []attribute.KeyValue {
	if o.keyInSpans {
		// Keys are any bytes; attribute values must be UTF-8, or an
		// exporter (OTLP) refuses the span and the batch it is in.
		return []attribute.KeyValue{Key.String(strings.ToValidUTF8(key, "\uFFFD")), group, kind, extra}
	}
	return []attribute.KeyValue{group, kind, extra}
}
