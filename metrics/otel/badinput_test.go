package otel_test

import (
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/metrics/internal/traffic"
	dlockotel "github.com/dlock-go/dlock/metrics/otel"
)

// TestBadInput: New with nil or odd values returns an error wrapping
// dlock.ErrInvalidOption, or an Observer whose callbacks do not panic.
func TestBadInput(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	tests := []struct {
		name string
		opts []dlockotel.Option
		want error
	}{
		{"nil Option", []dlockotel.Option{nil}, nil},
		{"WithMeterProvider(nil)", []dlockotel.Option{dlockotel.WithMeterProvider(nil)}, nil},
		{"WithTracerProvider(nil)", []dlockotel.Option{dlockotel.WithTracerProvider(nil)}, nil},
		{"nil *MeterProvider", []dlockotel.Option{dlockotel.WithMeterProvider((*sdkmetric.MeterProvider)(nil))}, dlock.ErrInvalidOption},
		{"nil *TracerProvider", []dlockotel.Option{dlockotel.WithTracerProvider((*sdktrace.TracerProvider)(nil))}, dlock.ErrInvalidOption},
		{"WithKeyGroup(nil)", []dlockotel.Option{dlockotel.WithKeyGroup(nil)}, nil},
		{"WithMaxGroups negative", []dlockotel.Option{dlockotel.WithMaxGroups(-1)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := traffic.Observe(rdb, func() (dlock.Observer, error) { return dlockotel.New(tt.opts...) })
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
		})
	}
}

// refusingProvider is a MeterProvider whose meters refuse to make
// counters, as an SDK with a bad view or a custom provider can.
type refusingProvider struct{ noop.MeterProvider }

func (refusingProvider) Meter(string, ...metric.MeterOption) metric.Meter { return refusingMeter{} }

type refusingMeter struct{ noop.Meter }

var errRefused = errors.New("instrument refused")

func (refusingMeter) Int64Counter(string, ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return noop.Int64Counter{}, errRefused
}

// An instrument the MeterProvider refuses makes New fail with an error
// that says where it comes from, as New's other errors do.
func TestNewRefusedInstrument(t *testing.T) {
	_, err := dlockotel.New(dlockotel.WithMeterProvider(refusingProvider{}))
	if !errors.Is(err, errRefused) {
		t.Fatalf("New = %v, want the provider's error", err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "dlock/metrics/otel: ") || !strings.Contains(msg, "dlock.acquire.attempts") {
		t.Errorf("New = %q, want the package's prefix and the instrument's name", msg)
	}
}

// TestBadInputZeroObserver: an Observer not made by New (the zero value, a
// nil pointer) records nothing: neither its callbacks nor a Client
// reporting to it may panic.
func TestBadInputZeroObserver(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	for name, obs := range map[string]*dlockotel.Observer{"zero": {}, "nil": nil} {
		t.Run(name, func(t *testing.T) {
			if err := traffic.CallEach(obs); err != nil {
				t.Fatal(err)
			}
			if err := traffic.Observe(rdb, func() (dlock.Observer, error) { return obs, nil }); err != nil {
				t.Fatal(err)
			}
		})
	}
}
