// Package prometheus reports what the locks of dlock Clients do as
// Prometheus metrics: acquisitions and their wait, hold times, releases,
// renewals, lost locks and re-entries.
//
//	import dlockprom "github.com/dlock-go/dlock/metrics/prometheus"
//
//	obs, err := dlockprom.New(prometheus.DefaultRegisterer)
//	...
//	locks, err := dlock.New(rdb, dlock.WithObserver(obs))
//
// Metrics are labelled by key group, never by key, so that their number
// stays bounded whatever keys are locked: by default a key's group is its
// text before the first ':' ("order:42" is in group "order"; a key without
// ':' is in group "default"), and past 100 distinct groups the others count
// as "other". WithKeyGroup and WithMaxGroups change both. The label kind
// says what the key names: "lock", "semaphore" or "rwmutex" (the permits of
// Client.Semaphore and Client.RWMutex), so that a lock and a semaphore of
// one name make separate series; re-entries are of locks only. For permits,
// the waiting calls (Acquire, RLock, an RWMutex's Lock) count as mode
// "lock" and their Try forms as "trylock".
//
// The metrics (with the default namespace "dlock"):
//
//	dlock_acquire_attempts_total{group,kind,mode}          Lock (mode="lock") and TryLock ("trylock") calls, re-entries aside
//	dlock_acquisitions_total{group,kind,mode,outcome}      how they ended: acquired, degraded, not_obtained, canceled, error
//	dlock_acquire_wait_seconds{group,kind,mode,outcome}    how long they took, waiting included (histogram)
//	dlock_acquires_in_flight{group,kind}                   calls waiting or under way now
//	dlock_locks_held{group,kind}                           locks held now by this process (a hold of n permits is one)
//	dlock_hold_seconds{group,kind}                         how long locks were held, at their last Unlock (histogram)
//	dlock_releases_total{group,kind,outcome}               Unlock calls: released, not_held, error
//	dlock_renewals_total{group,kind,outcome}               watchdog renewals: renewed, not_held, no_answer
//	dlock_lost_total{group,kind,reason}                    locks lost while held: not_held, expired, closed, release_failed
//	dlock_reentries_total{group,kind,outcome}              re-entries: reentered, error (kind="lock")
//
// One Observer can serve any number of Clients; New registers it once (it
// is a prometheus.Collector: reg.Unregister(obs) removes its metrics).
package prometheus

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/metrics/internal/keygroup"
	"github.com/dlock-go/dlock/metrics/internal/labels"
)

// Default histogram buckets, in seconds.
var (
	// DefaultWaitBuckets go from 1 ms (an uncontended round trip) to 1 min.
	DefaultWaitBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	// DefaultHoldBuckets go from 1 ms to 1 h.
	DefaultHoldBuckets = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900, 3600}
)

// Option configures New.
type Option func(*config)

type config struct {
	namespace   string
	constLabels prometheus.Labels
	groupFn     func(string) string
	maxGroups   int
	waitBuckets []float64
	holdBuckets []float64
}

// WithNamespace sets the metric names' prefix (default "dlock").
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithConstLabels adds labels with fixed values to every metric, for
// example to tell several Observers on one registry apart.
func WithConstLabels(l prometheus.Labels) Option { return func(c *config) { c.constLabels = l } }

// WithKeyGroup sets how a key maps to its group label. Keep the number of
// groups small: a group per id defeats the purpose (WithMaxGroups caps it
// anyway).
func WithKeyGroup(fn func(key string) string) Option { return func(c *config) { c.groupFn = fn } }

// WithMaxGroups caps the distinct group labels (default 100, which n <= 0
// also gives); groups seen after the cap is reached are labelled "other".
func WithMaxGroups(n int) Option { return func(c *config) { c.maxGroups = n } }

// WithWaitBuckets sets the buckets (seconds) of the wait histogram.
func WithWaitBuckets(b []float64) Option { return func(c *config) { c.waitBuckets = b } }

// WithHoldBuckets sets the buckets (seconds) of the hold-time histogram.
func WithHoldBuckets(b []float64) Option { return func(c *config) { c.holdBuckets = b } }

// Observer is a dlock.Observer that records Prometheus metrics. Pass it
// to dlock.WithObserver; it is safe for concurrent use by many Clients.
// The zero Observer, and a nil *Observer, record nothing and have no
// metrics to collect: make one with New.
type Observer struct {
	groups *keygroup.Mapper

	attempts     *prometheus.CounterVec
	acquisitions *prometheus.CounterVec
	wait         *prometheus.HistogramVec
	inFlight     *prometheus.GaugeVec
	held         *prometheus.GaugeVec // +1 a grant, -1 its Lost or its Unlock that ended it
	hold         *prometheus.HistogramVec
	releases     *prometheus.CounterVec
	renewals     *prometheus.CounterVec
	lost         *prometheus.CounterVec
	reentries    *prometheus.CounterVec

	metrics []prometheus.Collector // all of the above, which it collects
}

var (
	_ dlock.Observer       = (*Observer)(nil)
	_ prometheus.Collector = (*Observer)(nil)
)

// New creates the metrics and registers them on reg (for example
// prometheus.DefaultRegisterer, or a prometheus.NewRegistry()), as one
// Collector, the Observer: reg.Unregister(obs) removes them all, so that
// another Observer can be registered in their place. Options
// client_golang refuses (buckets not increasing, a const label "le" or
// named as a variable label, such as "group" or "kind") are an error
// wrapping dlock.ErrInvalidOption, and nothing is registered; so is a nil
// reg (a nil pointer too).
func New(reg prometheus.Registerer, opts ...Option) (*Observer, error) {
	// A nil *prometheus.Registry would panic in Register.
	if backend.IsNil(reg) {
		return nil, fmt.Errorf("dlock/metrics/prometheus: %w: nil Registerer", dlock.ErrInvalidOption)
	}
	cfg := config{namespace: "dlock", waitBuckets: DefaultWaitBuckets, holdBuckets: DefaultHoldBuckets}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: cfg.namespace, Name: name, Help: help, ConstLabels: cfg.constLabels,
		}, labels)
	}
	var errs []error
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		opts := prometheus.HistogramOpts{
			Namespace: cfg.namespace, Name: name, Help: help, ConstLabels: cfg.constLabels, Buckets: buckets,
		}
		errs = append(errs, checkHistogram(opts))
		return prometheus.NewHistogramVec(opts, labels)
	}
	o := &Observer{
		groups:       keygroup.New(cfg.groupFn, cfg.maxGroups),
		attempts:     counter("acquire_attempts_total", "Lock and TryLock calls (re-entries aside).", "group", "kind", "mode"),
		acquisitions: counter("acquisitions_total", "Lock and TryLock calls by outcome.", "group", "kind", "mode", "outcome"),
		wait:         histogram("acquire_wait_seconds", "How long Lock and TryLock calls took, waiting included.", cfg.waitBuckets, "group", "kind", "mode", "outcome"),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: cfg.namespace, Name: "acquires_in_flight", Help: "Lock and TryLock calls waiting or under way.", ConstLabels: cfg.constLabels,
		}, []string{"group", "kind"}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: cfg.namespace, Name: "locks_held", Help: "Locks held now (a hold of n permits counts once).", ConstLabels: cfg.constLabels,
		}, []string{"group", "kind"}),
		hold:      histogram("hold_seconds", "How long locks were held, measured at their last Unlock.", cfg.holdBuckets, "group", "kind"),
		releases:  counter("releases_total", "Unlock calls by outcome.", "group", "kind", "outcome"),
		renewals:  counter("renewals_total", "Lease renewals by the watchdog, by outcome.", "group", "kind", "outcome"),
		lost:      counter("lost_total", "Locks lost while held, by reason.", "group", "kind", "reason"),
		reentries: counter("reentries_total", "Re-entries of held locks, by outcome.", "group", "kind", "outcome"),
	}
	o.metrics = []prometheus.Collector{o.attempts, o.acquisitions, o.wait, o.inFlight, o.held, o.hold, o.releases, o.renewals, o.lost, o.reentries}
	errs = append(errs, checkDescs(o.metrics))
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("dlock/metrics/prometheus: %w: %w", dlock.ErrInvalidOption, err)
	}
	// One Collector: registered all or nothing.
	if err := reg.Register(o); err != nil {
		return nil, fmt.Errorf("dlock/metrics/prometheus: %w", err)
	}
	return o, nil
}

// Describe sends the descriptions of the Observer's metrics
// (prometheus.Collector).
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	if o.off() {
		return
	}
	for _, c := range o.metrics {
		c.Describe(ch)
	}
}

// Collect sends the Observer's metrics (prometheus.Collector).
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	if o.off() {
		return
	}
	for _, c := range o.metrics {
		c.Collect(ch)
	}
}

// off reports whether o was not made by New (nil, or the zero Observer),
// which a Client cannot tell from one that was: its callbacks then do
// nothing rather than panic inside the Client's calls, and Describe sends
// nothing rather than panic in a registry's goroutine, ending the process.
func (o *Observer) off() bool { return o == nil || o.groups == nil }

// checkHistogram returns the error of opts that client_golang reports only
// by a panic when a vector's first series is made: inside the Observer's
// callbacks, so every Lock or Unlock call would panic.
func checkHistogram(opts prometheus.HistogramOpts) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("histogram %s: %v", opts.Name, p)
		}
	}()
	prometheus.NewHistogram(opts)
	return nil
}

// checkDescs returns the error of metrics whose options client_golang
// refuses only when they are registered (a const label named as one of
// their labels, or not a valid label, or a value that is not UTF-8): on a
// registry of their own, so that a clash with what reg already holds is
// not taken for a bad option.
func checkDescs(cs []prometheus.Collector) error {
	scratch := prometheus.NewRegistry()
	for _, c := range cs {
		if err := scratch.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// AcquireStart counts an attempt.
func (o *Observer) AcquireStart(ctx context.Context, e dlock.AcquireStartEvent) context.Context {
	if o.off() {
		return ctx
	}
	g, k := o.groups.Group(e.Key), labels.Kind(e.Kind)
	o.attempts.WithLabelValues(g, k, labels.Mode(e.Wait)).Inc()
	o.inFlight.WithLabelValues(g, k).Inc()
	return ctx
}

// AcquireEnd counts the outcome and observes the wait; a granted lock
// counts as held.
func (o *Observer) AcquireEnd(_ context.Context, e dlock.AcquireEndEvent) {
	if o.off() {
		return
	}
	g, k, m, out := o.groups.Group(e.Key), labels.Kind(e.Kind), labels.Mode(e.Wait), e.Outcome.String()
	o.inFlight.WithLabelValues(g, k).Dec()
	if e.Outcome == dlock.AcquireOK || e.Outcome == dlock.AcquireDegraded {
		o.held.WithLabelValues(g, k).Inc()
	}
	o.acquisitions.WithLabelValues(g, k, m, out).Inc()
	o.wait.WithLabelValues(g, k, m, out).Observe(e.WaitTime.Seconds())
}

// Reenter counts a re-entry.
func (o *Observer) Reenter(_ context.Context, e dlock.ReenterEvent) {
	if o.off() {
		return
	}
	out := labels.ReenterOutcome(e.Err)
	o.reentries.WithLabelValues(o.groups.Group(e.Key), labels.KindLock, out).Inc()
}

// ReleaseStart does nothing.
func (o *Observer) ReleaseStart(ctx context.Context, _ dlock.ReleaseStartEvent) context.Context {
	return ctx
}

// ReleaseEnd counts the outcome and, for the last Unlock of a lock,
// observes its hold time; an Unlock that ended the hold (Ended) counts it
// held no more.
// An Unlock that failed (ReleaseError) records no hold time: it may be
// tried again, and the try Redis answers records it, once; if none is,
// the hold counts as lost (release_failed).
func (o *Observer) ReleaseEnd(_ context.Context, e dlock.ReleaseEndEvent) {
	if o.off() {
		return
	}
	g, k := o.groups.Group(e.Key), labels.Kind(e.Kind)
	o.releases.WithLabelValues(g, k, e.Outcome.String()).Inc()
	if e.Ended {
		o.held.WithLabelValues(g, k).Dec()
	}
	if e.Level == 1 && e.Outcome != dlock.ReleaseError {
		o.hold.WithLabelValues(g, k).Observe(e.Held.Seconds())
	}
}

// Renew counts a renewal.
func (o *Observer) Renew(e dlock.RenewEvent) {
	if o.off() {
		return
	}
	o.renewals.WithLabelValues(o.groups.Group(e.Key), labels.Kind(e.Kind), e.Outcome.String()).Inc()
}

// Lost counts a lost lock, held no more.
func (o *Observer) Lost(e dlock.LostEvent) {
	if o.off() {
		return
	}
	g, k := o.groups.Group(e.Key), labels.Kind(e.Kind)
	o.lost.WithLabelValues(g, k, e.Reason.String()).Inc()
	o.held.WithLabelValues(g, k).Dec()
}
