package otel_test

import (
	"context"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dlock-go/dlock"
	dlockotel "github.com/dlock-go/dlock/metrics/otel"
)

func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()

	// A MeterProvider (most programs set a global one with an exporter, and
	// call dlockotel.New() with no options). Here a reader collects by hand.
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	obs, err := dlockotel.New(dlockotel.WithMeterProvider(mp))
	if err != nil {
		panic(err)
	}
	locks, err := dlock.New(rdb, dlock.WithObserver(obs))
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	_ = locks.Do(context.Background(), "report:daily", func(ctx context.Context) error { return nil })

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "dlock.acquisitions" {
				p := m.Data.(metricdata.Sum[int64]).DataPoints[0]
				group, _ := p.Attributes.Value(dlockotel.KeyGroup)
				fmt.Println(m.Name, group.AsString(), p.Value)
			}
		}
	}
	// Output: dlock.acquisitions report 1
}
