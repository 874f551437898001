package prometheus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/metrics/internal/traffic"
	dlockprom "github.com/dlock-go/dlock/metrics/prometheus"
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

// sample is one metric's value: a counter's or gauge's value, or a
// histogram's count and sum.
type sample struct {
	value, count, sum float64
}

// scrape gathers reg and returns the samples of name by their labels,
// written "k=v,k=v" in sorted order.
func scrape(t *testing.T, reg *prometheus.Registry, name string) map[string]sample {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]sample{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			out[labels(m)] = value(m)
		}
	}
	return out
}

func labels(m *dto.Metric) string {
	var ls []string
	for _, l := range m.GetLabel() {
		ls = append(ls, l.GetName()+"="+l.GetValue())
	}
	sort.Strings(ls)
	return strings.Join(ls, ",")
}

func value(m *dto.Metric) sample {
	switch {
	case m.Counter != nil:
		return sample{value: m.Counter.GetValue()}
	case m.Gauge != nil:
		return sample{value: m.Gauge.GetValue()}
	case m.Histogram != nil:
		return sample{count: float64(m.Histogram.GetSampleCount()), sum: m.Histogram.GetSampleSum()}
	}
	return sample{}
}

func TestMetricsAfterRealTraffic(t *testing.T) {
	reg := prometheus.NewRegistry()
	obs, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	gen := traffic.Start(t, obs)

	// Three orders locked and held a while each.
	gen.Orders(context.Background())
	// A contended lock, a failed TryLock and a re-entry.
	gen.Contend(func() float64 { return scrape(t, reg, "dlock_acquires_in_flight")["group=invoice,kind=lock"].value })
	// A lock renewed by the watchdog, then one lost at the end of its lease.
	gen.RenewAndLose(
		func() float64 {
			return scrape(t, reg, "dlock_renewals_total")["group=job,kind=lock,outcome=renewed"].value
		},
		func() float64 { return scrape(t, reg, "dlock_lost_total")["group=job,kind=lock,reason=expired"].value },
	)
	// A lock, a semaphore and an RWMutex of one name.
	gen.Kinds(
		func(kind string) float64 {
			return scrape(t, reg, "dlock_acquires_in_flight")["group=shared,kind="+kind].value
		},
		func(kind string) float64 {
			return scrape(t, reg, "dlock_renewals_total")["group=shared,kind="+kind+",outcome=renewed"].value
		},
		func(kind string) float64 {
			return scrape(t, reg, "dlock_lost_total")["group=shared,kind="+kind+",reason=expired"].value
		},
	)

	check := func(name, labels string, want float64) {
		t.Helper()
		if got := scrape(t, reg, name)[labels].value; got != want {
			t.Errorf("%s{%s} = %v, want %v", name, labels, got, want)
		}
	}
	check("dlock_acquire_attempts_total", "group=order,kind=lock,mode=lock", 3)
	check("dlock_acquisitions_total", "group=order,kind=lock,mode=lock,outcome=acquired", 3)
	check("dlock_acquisitions_total", "group=invoice,kind=lock,mode=lock,outcome=acquired", 2)
	check("dlock_acquisitions_total", "group=invoice,kind=lock,mode=trylock,outcome=not_obtained", 1)
	check("dlock_acquires_in_flight", "group=invoice,kind=lock", 0)
	check("dlock_releases_total", "group=order,kind=lock,outcome=released", 3)
	check("dlock_releases_total", "group=invoice,kind=lock,outcome=released", 3) // inner, outer, waiter
	check("dlock_reentries_total", "group=invoice,kind=lock,outcome=reentered", 1)
	check("dlock_lost_total", "group=job,kind=lock,reason=expired", 1)
	// One name, three kinds: separate series (as Kinds documents).
	for kind, want := range traffic.KindCounts {
		check("dlock_acquire_attempts_total", "group=shared,kind="+kind+",mode=lock", want.Acquired)
		check("dlock_acquisitions_total", "group=shared,kind="+kind+",mode=lock,outcome=acquired", want.Acquired)
		check("dlock_acquires_in_flight", "group=shared,kind="+kind, 0)
		check("dlock_releases_total", "group=shared,kind="+kind+",outcome=released", want.Released)
	}
	if n := scrape(t, reg, "dlock_hold_seconds")["group=shared,kind=lock"].count; n != 1 {
		t.Errorf("dlock_hold_seconds{group=shared,kind=lock} count = %v, want 1", n)
	}

	holds := scrape(t, reg, "dlock_hold_seconds")["group=order,kind=lock"]
	gen.CheckHolds(holds.count, holds.sum)
	// The inner Unlock of the re-entry records no hold time.
	if n := scrape(t, reg, "dlock_hold_seconds")["group=invoice,kind=lock"].count; n != 2 {
		t.Errorf("dlock_hold_seconds{group=invoice,kind=lock} count = %v, want 2", n)
	}
	waits := scrape(t, reg, "dlock_acquire_wait_seconds")
	if n := waits["group=invoice,kind=lock,mode=trylock,outcome=not_obtained"].count; n != 1 {
		t.Errorf("dlock_acquire_wait_seconds{group=invoice,kind=lock,mode=trylock,outcome=not_obtained} count = %v, want 1", n)
	}
	invoice := waits["group=invoice,kind=lock,mode=lock,outcome=acquired"]
	gen.CheckInvoiceWaits(invoice.count, invoice.sum)
	order := waits["group=order,kind=lock,mode=lock,outcome=acquired"]
	gen.CheckOrderWaits(order.count, order.sum)
	// No label carries a raw key.
	families, _ := reg.Gather()
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), ":") {
					t.Errorf("%s has label %s=%q: a raw key", f.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}

func TestLocksHeldBackToZeroOnEveryPath(t *testing.T) {
	reg := prometheus.NewRegistry()
	obs, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	traffic.Start(t, obs).Held(func(kind string) float64 {
		return scrape(t, reg, "dlock_locks_held")["group=held,kind="+kind].value
	})
	// Each loss under its reason, each failed release as one, the
	// renewal that found a lock gone, the failed re-entry and the degraded
	// grant as one.
	check := func(name, labels string, want float64) {
		t.Helper()
		if got := scrape(t, reg, name)[labels].value; got != want {
			t.Errorf("%s{%s} = %v, want %v", name, labels, got, want)
		}
	}
	for reason, n := range traffic.HeldLosses {
		check("dlock_lost_total", "group=held,kind=lock,reason="+reason, n)
	}
	check("dlock_releases_total", "group=held,kind=lock,outcome=error", traffic.HeldReleaseErrors)
	check("dlock_renewals_total", "group=held,kind=lock,outcome=not_held", 1)
	check("dlock_reentries_total", "group=held,kind=lock,outcome=error", 1)
	check("dlock_acquisitions_total", "group=held,kind=lock,mode=lock,outcome=degraded", 1)
}

func TestKeyGroups(t *testing.T) {
	reg := prometheus.NewRegistry()
	obs, err := dlockprom.New(reg, dlockprom.WithNamespace("app_locks"),
		dlockprom.WithMaxGroups(traffic.MaxGroups), dlockprom.WithKeyGroup(traffic.GroupBySlash))
	if err != nil {
		t.Fatal(err)
	}
	gen := traffic.Start(t, obs)
	locks := gen.Locks
	want := gen.GroupedKeys()
	got := scrape(t, reg, "app_locks_acquisitions_total")
	if len(got) != len(want) {
		t.Errorf("series = %v, want groups %v", got, want)
	}
	for group, n := range want {
		l := "group=" + group + ",kind=lock,mode=lock,outcome=acquired"
		if got[l].value != n {
			t.Errorf("%s = %v, want %v", l, got[l].value, n)
		}
	}
	// A key is any bytes: a group that is not valid UTF-8 must not make
	// the Observer panic inside Lock.
	if err := locks.Do(context.Background(), "\xff\xfe:42", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// Registering twice on one registry fails.
	if _, err := dlockprom.New(reg, dlockprom.WithNamespace("app_locks")); err == nil {
		t.Error("a second registration of the same metrics succeeded")
	}
}

// dlock.WithObserver: "Without it, or with nil, nothing is reported." A
// program that builds its Observer only when metrics are on passes a nil
// *Observer otherwise; Lock must not panic.
func TestNilObserverPointer(t *testing.T) {
	var obs *dlockprom.Observer // metrics off
	rdb := redistest.Start(t).Client(t)
	for name, o := range map[string]dlock.Observer{"WithObserver": obs, "Observers": dlock.Observers(obs)} {
		t.Run(name, func(t *testing.T) {
			locks, err := dlock.New(rdb, dlock.WithObserver(o))
			if err != nil {
				t.Fatal(err)
			}
			defer locks.Close()
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("Do with a nil *dlockprom.Observer panicked: %v", p)
				}
			}()
			if err := locks.Do(context.Background(), "job:1", func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A New that fails must leave the registry as it found it, not with some
// of its metrics registered (they would block a later New on it).
func TestFailedNewRegistersNothing(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "dlock_hold_seconds", Help: "someone else's"}))
	if _, err := dlockprom.New(reg); err == nil {
		t.Fatal("New succeeded despite a conflicting metric")
	} else if errors.Is(err, dlock.ErrInvalidOption) {
		t.Errorf("a clash with the registry's metrics taken for a bad option: %v", err)
	}
	// Collectors are identified by their metrics' names and const labels.
	for _, name := range []string{"acquire_attempts_total", "acquisitions_total", "acquire_wait_seconds", "acquires_in_flight"} {
		probe := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "dlock", Name: name, Help: "probe"}, []string{"group"})
		if reg.Unregister(probe) {
			t.Errorf("the failed New left dlock_%s registered", name)
		}
	}
}

// An Observer unregistered from its registry takes all its metrics with
// it, so that a new one can be registered in its place (a Client made
// again, a test run again); registering an identical one meanwhile says
// which is registered.
func TestUnregisterMakesRoomForAnother(t *testing.T) {
	reg := prometheus.NewRegistry()
	first, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	var already prometheus.AlreadyRegisteredError
	if _, err := dlockprom.New(reg); !errors.As(err, &already) || already.ExistingCollector != first {
		t.Fatalf("a second New on the registry = %v, want AlreadyRegisteredError naming the first", err)
	}
	if !reg.Unregister(first) {
		t.Fatal("Unregister of the Observer found nothing to remove")
	}
	if mfs, _ := reg.Gather(); len(mfs) != 0 {
		t.Fatalf("%d metrics left registered after Unregister", len(mfs))
	}
	second, err := dlockprom.New(reg)
	if err != nil {
		t.Fatalf("New after Unregister: %v", err)
	}
	second.AcquireStart(context.Background(), dlock.AcquireStartEvent{Key: "job:1", Kind: "lock"})
	if got := scrape(t, reg, "dlock_acquire_attempts_total"); got["group=job,kind=lock,mode=trylock"].value != 1 {
		t.Errorf("the new Observer's attempts read %v, want its one attempt", got)
	}
}

// Histogram options that client_golang refuses (buckets out of order, a
// const label "le") must make New fail: client_golang panics only when a
// histogram's first series is made, inside the Observer's AcquireEnd or
// ReleaseEnd, so every Lock or Unlock call would panic.
func TestNewRefusesBadHistogramOptions(t *testing.T) {
	for name, opt := range map[string]dlockprom.Option{
		"buckets out of order": dlockprom.WithWaitBuckets([]float64{1, .5}),
		"duplicate buckets":    dlockprom.WithHoldBuckets([]float64{1, 1}),
		"const label le":       dlockprom.WithConstLabels(prometheus.Labels{"le": "x"}),
	} {
		reg := prometheus.NewRegistry()
		if _, err := dlockprom.New(reg, opt); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("%s: New = %v, want ErrInvalidOption", name, err)
		}
		if mfs, _ := reg.Gather(); len(mfs) != 0 {
			t.Errorf("%s: a refused New registered %d metrics", name, len(mfs))
		}
	}
}

func TestPermitsHeldBackToZeroOnEveryPath(t *testing.T) {
	reg := prometheus.NewRegistry()
	obs, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	traffic.Start(t, obs).HeldPermits(
		func(kind string) float64 { return scrape(t, reg, "dlock_locks_held")["group=held,kind="+kind].value },
		func(kind string) float64 { return scrape(t, reg, "dlock_hold_seconds")["group=held,kind="+kind].count },
	)
}
