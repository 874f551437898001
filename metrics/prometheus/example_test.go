package prometheus_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	dlockprom "github.com/dlock-go/dlock/metrics/prometheus"
)

func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()

	// Metrics on a registry (prometheus.DefaultRegisterer in most programs,
	// served by promhttp.Handler() on /metrics)...
	reg := prometheus.NewRegistry()
	obs, err := dlockprom.New(reg)
	if err != nil {
		panic(err)
	}
	// ...and logs: lost locks and failed renewals are warnings, each
	// acquisition and release a debug record.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	locks, err := dlock.New(rdb, dlock.WithObserver(obs), dlock.WithLogger(log))
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	_ = locks.Do(context.Background(), "report:daily", func(ctx context.Context) error { return nil })

	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() == "dlock_acquisitions_total" {
			m := f.GetMetric()[0]
			fmt.Println(f.GetName(), m.GetLabel()[0].GetValue(), m.GetCounter().GetValue())
		}
	}
	// Output: dlock_acquisitions_total report 1
}
