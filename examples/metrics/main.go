// Command metrics shows how to wire dlock's metrics, traces and logs: a
// Prometheus registry served on /metrics, OpenTelemetry through the global
// providers, and slog. It runs a few workers contending for locks for a
// while, then prints the dlock_ lines of its own /metrics page.
//
//	go run ./examples/metrics -addr localhost:6379 -for 5s
//
// While it runs, `curl localhost:2112/metrics` shows the same figures.
// Afterwards only the locks' fence counters are left on the server
// (dlock:{order:N}:fence and dlock:{report:daily}:fence): they keep
// fences growing, and expire within 24 hours.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	dlockotel "github.com/dlock-go/dlock/metrics/otel"
	dlockprom "github.com/dlock-go/dlock/metrics/prometheus"
)

func main() {
	addr := flag.String("addr", envOr("REDIS_ADDR", "localhost:6379"), "Redis address")
	listen := flag.String("listen", "localhost:2112", "where to serve /metrics")
	d := flag.Duration("for", 3*time.Second, "how long the workers run")
	flag.Parse()
	if err := run(context.Background(), *addr, *listen, *d, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr, listen string, d time.Duration, out io.Writer) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()

	// 1. Prometheus: the metrics on a registry, served on /metrics. Most
	//    programs use prometheus.DefaultRegisterer and promhttp.Handler().
	reg := prometheus.NewRegistry()
	prom, err := dlockprom.New(reg,
		// Keys look like "report:daily" or "order:42": label by the part
		// before ':', never by the whole key (as the default does; ""
		// puts a key in the group "default").
		dlockprom.WithKeyGroup(func(key string) string {
			g, _, ok := strings.Cut(key, ":")
			if !ok {
				return ""
			}
			return g
		}))
	if err != nil {
		return err
	}
	// 2. OpenTelemetry: the same metrics and a span per acquisition and
	//    release, through the providers the program installed with
	//    otel.SetMeterProvider and otel.SetTracerProvider (none here: the
	//    global no-op ones).
	tel, err := dlockotel.New()
	if err != nil {
		return err
	}
	// 3. Logs: warnings (lost locks, failed renewals, degraded locks) by
	//    default; slog.LevelDebug adds every acquisition and release.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	locks, err := dlock.New(rdb,
		dlock.WithObserver(dlock.Observers(prom, tel)),
		dlock.WithLogger(log),
		dlock.WithClientName("metrics-example"))
	if err != nil {
		return err
	}
	defer locks.Close()

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	// Some traffic: workers contending for a few keys.
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; wctx.Err() == nil; i++ {
				key := fmt.Sprintf("order:%d", i%3)
				if w == 0 {
					key = "report:daily"
				}
				err := locks.Do(wctx, key, func(ctx context.Context) error {
					time.Sleep(10 * time.Millisecond) // the work
					return nil
				})
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					log.Error("worker", "error", err)
				}
			}
		}()
	}
	wg.Wait()

	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "dlock_") && !strings.Contains(line, "_bucket{") {
			fmt.Fprintln(out, line)
		}
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
