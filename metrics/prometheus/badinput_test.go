package prometheus_test

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/metrics/internal/traffic"
	dlockprom "github.com/dlock-go/dlock/metrics/prometheus"
)

// TestBadInput: New with nil or odd values returns an error wrapping
// dlock.ErrInvalidOption, or an Observer whose callbacks do not panic.
func TestBadInput(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	tests := []struct {
		name string
		reg  prometheus.Registerer
		opts []dlockprom.Option
		want error
	}{
		{"nil Registerer", nil, nil, dlock.ErrInvalidOption},
		{"nil *Registry", (*prometheus.Registry)(nil), nil, dlock.ErrInvalidOption},
		{"nil Option", prometheus.NewRegistry(), []dlockprom.Option{nil}, nil},
		{"WithKeyGroup(nil)", prometheus.NewRegistry(), []dlockprom.Option{dlockprom.WithKeyGroup(nil)}, nil},
		{"WithKeyGroup empty group", prometheus.NewRegistry(), []dlockprom.Option{dlockprom.WithKeyGroup(func(string) string { return "" })}, nil},
		{"WithMaxGroups negative", prometheus.NewRegistry(), []dlockprom.Option{dlockprom.WithMaxGroups(-1)}, nil},
		{"WithConstLabels(nil)", prometheus.NewRegistry(), []dlockprom.Option{dlockprom.WithConstLabels(nil)}, nil},
		{"nil buckets", prometheus.NewRegistry(), []dlockprom.Option{dlockprom.WithWaitBuckets(nil), dlockprom.WithHoldBuckets([]float64{})}, nil},
		{"buckets not increasing", prometheus.NewRegistry(), []dlockprom.Option{dlockprom.WithWaitBuckets([]float64{2, 1})}, dlock.ErrInvalidOption},
		{"empty namespace", prometheus.NewRegistry(), []dlockprom.Option{dlockprom.WithNamespace("")}, nil},
		// Refused by client_golang when registered, not at use: still a bad
		// option, not a clash with metrics already on the registry.
		{"const label named as a variable one", prometheus.NewRegistry(), []dlockprom.Option{dlockprom.WithConstLabels(prometheus.Labels{"kind": "worker"})}, dlock.ErrInvalidOption},
		{"const label value not UTF-8", prometheus.NewRegistry(), []dlockprom.Option{dlockprom.WithConstLabels(prometheus.Labels{"app": "\xff"})}, dlock.ErrInvalidOption},
		{"const label __name__", prometheus.NewRegistry(), []dlockprom.Option{dlockprom.WithConstLabels(prometheus.Labels{"__name__": "x"})}, dlock.ErrInvalidOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := traffic.Observe(rdb, func() (dlock.Observer, error) { return dlockprom.New(tt.reg, tt.opts...) })
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
		})
	}
}

// TestBadInputZeroObserver: an Observer not made by New (the zero value, a
// nil pointer) records nothing: its callbacks, a Client reporting to it and
// a registry collecting it must not panic. Describe runs in a goroutine of
// the registry's, where a panic ends the process.
func TestBadInputZeroObserver(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	for name, obs := range map[string]*dlockprom.Observer{"zero": {}, "nil": nil} {
		t.Run(name, func(t *testing.T) {
			if err := traffic.CallEach(obs); err != nil {
				t.Fatal(err)
			}
			if err := traffic.Observe(rdb, func() (dlock.Observer, error) { return obs, nil }); err != nil {
				t.Fatal(err)
			}
			reg := prometheus.NewRegistry()
			if err := reg.Register(obs); err != nil {
				t.Fatalf("Register: %v", err)
			}
			if mfs, err := reg.Gather(); err != nil || len(mfs) != 0 {
				t.Fatalf("Gather = %v, %v; want no metrics", mfs, err)
			}
		})
	}
}
