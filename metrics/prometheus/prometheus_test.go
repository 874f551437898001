package prometheus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
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
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	reg := prometheus.NewRegistry()
	obs, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	locks, err := dlock.New(rdb, dlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()

	// Three orders locked and held a while each.
	const hold = 20 * time.Millisecond
	for i := range 3 {
		err := locks.Do(ctx, fmt.Sprintf("order:%d", i), func(context.Context) error {
			time.Sleep(hold) // the work under the lock
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// A contended lock: the waiter waits at least 50 ms.
	held, err := locks.Lock(ctx, "invoice:7")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locks.TryLock(ctx, "invoice:7"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock = %v", err)
	}
	got := make(chan error, 1)
	go func() {
		w, err := locks.Lock(ctx, "invoice:7")
		if err == nil {
			err = w.Unlock(ctx)
		}
		got <- err
	}()
	waitFor(t, "the waiter to queue", func() bool {
		return rdb.ZCard(ctx, "dlock:{invoice:7}:queue").Val() == 1
	})
	if s := scrape(t, reg, "dlock_acquires_in_flight")["group=invoice"]; s.value != 1 {
		t.Errorf("in flight while one waits = %v, want 1", s.value)
	}
	time.Sleep(50 * time.Millisecond) // make the wait measurable
	// A re-entry.
	inner, err := locks.Lock(held.Context(), "invoice:7")
	if err != nil {
		t.Fatal(err)
	}
	_ = inner.Unlock(ctx)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// A lock renewed by the watchdog, then one lost at the end of its lease.
	// Renewed every 100 ms: a lease long enough that a renewal delayed on
	// a loaded machine does not lose it (that would count as a loss).
	renewed, err := locks.Lock(ctx, "job:r", dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two renewals", func() bool {
		return scrape(t, reg, "dlock_renewals_total")["group=job,outcome=renewed"].value >= 2
	})
	_ = renewed.Unlock(ctx)
	short, err := locks.Lock(ctx, "job:s", dlock.WithTTL(30*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	<-short.Done()
	waitFor(t, "the loss to be counted", func() bool {
		return scrape(t, reg, "dlock_lost_total")["group=job,reason=expired"].value == 1
	})
	_ = short.Unlock(ctx)

	check := func(name, labels string, want float64) {
		t.Helper()
		if got := scrape(t, reg, name)[labels].value; got != want {
			t.Errorf("%s{%s} = %v, want %v", name, labels, got, want)
		}
	}
	check("dlock_acquire_attempts_total", "group=order,mode=lock", 3)
	check("dlock_acquisitions_total", "group=order,mode=lock,outcome=acquired", 3)
	check("dlock_acquisitions_total", "group=invoice,mode=lock,outcome=acquired", 2)
	check("dlock_acquisitions_total", "group=invoice,mode=trylock,outcome=not_obtained", 1)
	check("dlock_acquires_in_flight", "group=invoice", 0)
	check("dlock_releases_total", "group=order,outcome=released", 3)
	check("dlock_releases_total", "group=invoice,outcome=released", 3) // inner, outer, waiter
	check("dlock_reentries_total", "group=invoice,outcome=reentered", 1)
	check("dlock_lost_total", "group=job,reason=expired", 1)

	holds := scrape(t, reg, "dlock_hold_seconds")["group=order"]
	if holds.count != 3 || holds.sum < 3*hold.Seconds() || holds.sum > 3*(hold+time.Second).Seconds() {
		t.Errorf("hold histogram of order = %+v, want 3 holds of about %v", holds, hold)
	}
	waits := scrape(t, reg, "dlock_acquire_wait_seconds")
	if w := waits["group=invoice,mode=lock,outcome=acquired"]; w.count != 2 || w.sum < 0.05 {
		t.Errorf("wait histogram of invoice = %+v, want 2 waits, one of 50 ms or more", w)
	}
	if w := waits["group=order,mode=lock,outcome=acquired"]; w.count != 3 || w.sum <= 0 || w.sum > 1 {
		t.Errorf("wait histogram of order = %+v, want 3 short waits", w)
	}
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

func TestKeyGroups(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	obs, err := dlockprom.New(reg, dlockprom.WithNamespace("app_locks"), dlockprom.WithMaxGroups(2),
		dlockprom.WithKeyGroup(func(key string) string { return strings.SplitN(key, "/", 2)[0] }))
	if err != nil {
		t.Fatal(err)
	}
	locks, err := dlock.New(srv.Client(t), dlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	for _, key := range []string{"a/1", "b/1", "c/1", "a/2", "d/1"} {
		if err := locks.Do(context.Background(), key, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	got := scrape(t, reg, "app_locks_acquisitions_total")
	want := map[string]float64{
		"group=a,mode=lock,outcome=acquired":     2,
		"group=b,mode=lock,outcome=acquired":     1,
		"group=other,mode=lock,outcome=acquired": 2,
	}
	if len(got) != len(want) {
		t.Errorf("series = %v, want %v", got, want)
	}
	for l, v := range want {
		if got[l].value != v {
			t.Errorf("%s = %v, want %v", l, got[l].value, v)
		}
	}
	// Registering twice on one registry fails.
	if _, err := dlockprom.New(reg, dlockprom.WithNamespace("app_locks")); err == nil {
		t.Error("a second registration of the same metrics succeeded")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
