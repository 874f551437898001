// Command report runs every benchmark scenario of the bench module several
// times against one redis-server and writes docs/benchmarks.md, a chart
// (docs/benchmarks.svg) and the raw numbers (docs/benchmarks.json).
//
//	cd bench && go run ./cmd/report -runs 5 -out ../docs
//
// By default it starts its own redis-server on a free loopback port (and
// stops it at the end). With -addr it measures an existing server instead:
// it never flushes it, its keys start with a run-unique prefix and are
// deleted at the end, but other traffic on that server skews the command
// counts.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/bench"
)

// Config is what one report measured.
type Config struct {
	Runs            int
	Goroutines      int
	UncontendedDur  time.Duration
	Warmup          time.Duration
	Workers         []int
	Hold            time.Duration
	ContendedDur    time.Duration
	RenewLocks      int
	RenewLease      time.Duration
	RenewInterval   time.Duration
	RenewSettle     time.Duration
	RenewDur        time.Duration
	CeilingClients  int
	CeilingRequests int
	AllocIterations int
}

// Machine describes where the numbers come from.
type Machine struct {
	CPUs         int
	CPUModel     string
	Kernel       string
	RedisVersion string
	GoVersion    string
	Libraries    map[string]string
	Date         string
	OwnServer    bool
	LoadStart    string // /proc/loadavg when the run started
	LoadEnd      string // ... and when it ended
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " ")
}

// Alloc is one line of `go test -bench -benchmem`.
type Alloc struct {
	NsOp, BytesOp, AllocsOp float64
}

// Run is one pass over every scenario.
type Run struct {
	Ceiling     bench.Ceiling
	Uncontended map[string]bench.UncontendedResult
	Contended   map[int]map[string]bench.ContendedResult
	Renewal     map[string]bench.RenewalResult
	Allocs      map[string]Alloc
	Failures    []string // scenarios that failed in this run (the report goes on without them)
}

// Report is everything the markdown is generated from.
type Report struct {
	Config   Config
	Machine  Machine
	Setups   []SetupInfo
	Renewers []RenewerInfo
	Origins  map[string]bench.Origin
	Runs     []Run
	Took     time.Duration // how long the measuring took
}

// SetupInfo describes a setup without its function.
type SetupInfo struct{ Name, Lib, Mode, Settings string }

// RenewerInfo describes a renewer without its function.
type RenewerInfo struct{ Lib, Method string }

func main() {
	runs := flag.Int("runs", 5, "passes over every scenario; the report quotes medians")
	out := flag.String("out", "../docs", "directory for benchmarks.md, benchmarks.svg and benchmarks.json")
	addr := flag.String("addr", "", "measure this Redis (host:port) instead of starting a private redis-server")
	quick := flag.Bool("quick", false, "short windows and 1,000 renewal locks: a smoke test, not numbers to quote")
	only := flag.String("setups", "", "comma-separated setup names to run (default: all)")
	skipAllocs := flag.Bool("skip-allocs", false, "do not run the go test allocation benchmarks")
	render := flag.String("render", "", "only render benchmarks.md and benchmarks.svg again from this benchmarks.json (no measuring)")
	flag.Parse()
	if *render != "" {
		if err := rerender(*render, *out); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
		return
	}

	cfg := Config{
		Runs: *runs, Goroutines: 32, UncontendedDur: 2500 * time.Millisecond, Warmup: 300 * time.Millisecond,
		Workers: []int{16, 64}, Hold: time.Millisecond, ContendedDur: 3 * time.Second,
		RenewLocks: 10000, RenewLease: 3 * time.Second, RenewInterval: time.Second,
		RenewSettle: 1500 * time.Millisecond, RenewDur: 5 * time.Second,
		CeilingClients: 32, CeilingRequests: 100000, AllocIterations: 3000,
	}
	if *quick {
		cfg.UncontendedDur, cfg.ContendedDur, cfg.Warmup = 500*time.Millisecond, 700*time.Millisecond, 100*time.Millisecond
		cfg.RenewLocks, cfg.RenewSettle, cfg.RenewDur = 1000, 500*time.Millisecond, 2*time.Second
		cfg.CeilingRequests, cfg.AllocIterations = 20000, 300
	}
	if err := run(cfg, *out, *addr, *only, *skipAllocs); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func run(cfg Config, out, addr, only string, skipAllocs bool) error {
	started := time.Now()
	setups := bench.Setups()
	if only != "" {
		want := map[string]bool{}
		for _, n := range strings.Split(only, ",") {
			want[strings.TrimSpace(n)] = true
		}
		var l []bench.Setup
		for _, s := range setups {
			if want[s.Name] {
				l = append(l, s)
			}
		}
		setups = l
	}
	renewers := bench.Renewers()
	var srv *bench.Server
	if addr == "" {
		var err error
		if srv, err = bench.StartServer(); err != nil {
			return err
		}
		defer srv.Stop()
		addr = srv.Addr()
		logf("redis-server pid %d on %s", srv.PID(), addr)
	}
	env, err := bench.NewEnv(addr)
	if err != nil {
		return err
	}
	defer env.Close()
	defer env.Cleanup(context.Background())

	rep := &Report{Config: cfg, Machine: machine(env, srv != nil), Origins: map[string]bench.Origin{}}
	for _, s := range setups {
		rep.Setups = append(rep.Setups, SetupInfo{s.Name, s.Lib, s.Mode, s.Settings})
	}
	for _, r := range renewers {
		rep.Renewers = append(rep.Renewers, RenewerInfo{r.Lib, r.Method})
	}

	// Which commands run inside scripts, per setup (MONITOR, small runs).
	for _, s := range setups {
		var r *bench.Renewer
		for i := range renewers {
			if renewers[i].Lib == s.Lib {
				r = &renewers[i]
			}
		}
		o, err := env.Calibrate(s, r)
		if err != nil {
			return fmt.Errorf("calibrate %s: %w", s.Name, err)
		}
		rep.Origins[s.Name] = o
		logf("calibrated %s: script-only commands %v", s.Name, o.ScriptOnly())
	}
	originOfLib := func(lib string) bench.Origin {
		for _, s := range setups {
			if s.Lib == lib {
				return rep.Origins[s.Name]
			}
		}
		return bench.Origin{}
	}

	for i := range cfg.Runs {
		logf("run %d/%d", i+1, cfg.Runs)
		r := Run{Uncontended: map[string]bench.UncontendedResult{}, Contended: map[int]map[string]bench.ContendedResult{}, Renewal: map[string]bench.RenewalResult{}}
		// Rotate the order so that no setup always runs first or last.
		order := append(append([]bench.Setup{}, setups[i%len(setups):]...), setups[:i%len(setups)]...)

		if r.Ceiling, err = env.RunCeiling(cfg.CeilingClients, cfg.CeilingRequests); err != nil {
			r.fail("redis-benchmark: %v", err)
		}
		logf("  ceiling: SET NX PX %.0f/s, DEL %.0f/s, EVALSHA %.0f/s and %.0f/s", r.Ceiling.SetNXPX, r.Ceiling.Del, r.Ceiling.EvalSetNX, r.Ceiling.EvalRelease)
		// Its keys have 30 s leases: gone now, they cannot expire (and
		// cost the server) during the scenarios that follow.
		env.Cleanup(context.Background())
		for _, s := range order {
			u, err := env.Uncontended(s, cfg.Goroutines, cfg.Warmup, cfg.UncontendedDur, rep.Origins[s.Name])
			if err != nil {
				r.fail("uncontended %s: %v", s.Name, err)
				continue
			}
			r.Uncontended[s.Name] = u
			logf("  uncontended %-18s %7.0f pairs/s  p99 %v  %.1f/%.1f cmds", s.Name, u.PerSec, u.Latency.P99.Round(time.Microsecond), u.TopPerOp, u.TotalPerOp)
		}
		for _, n := range cfg.Workers {
			r.Contended[n] = map[string]bench.ContendedResult{}
			for _, s := range order {
				c, err := env.Contended(s, n, cfg.Hold, cfg.Warmup, cfg.ContendedDur, rep.Origins[s.Name])
				if err != nil {
					r.fail("contended %d %s: %v", n, s.Name, err)
					continue
				}
				r.Contended[n][s.Name] = c
				logf("  contended %2d %-18s %5.0f acq/s  gap p50 %v  wait p99 %v  min/max %d/%d  %.1f/%.1f cmds", n, s.Name, c.PerSec, c.Gap.P50.Round(time.Microsecond), c.Wait.P99.Round(time.Millisecond), c.MinPerWorker, c.MaxPerWorker, c.TopPerOp, c.TotalPerOp)
			}
		}
		for _, rn := range renewers {
			if only != "" && !hasLib(setups, rn.Lib) {
				continue
			}
			rr, err := env.Renewal(rn, cfg.RenewLocks, cfg.RenewLease, cfg.RenewInterval, cfg.RenewSettle, cfg.RenewDur, originOfLib(rn.Lib))
			if err != nil {
				r.fail("renewal %s: %v", rn.Lib, err)
				continue
			}
			r.Renewal[rn.Lib] = rr
			logf("  renewal %-12s %6.0f/%6.0f cmds per interval, %.1f round trips, client CPU %.3f s/s", rn.Lib, rr.TopPerInterval, rr.TotalPerInterval, rr.RoundTrips, rr.ClientCPUPerSec)
		}
		if !skipAllocs {
			if r.Allocs, err = allocs(addr, cfg.AllocIterations); err != nil {
				r.fail("allocation benchmarks: %v", err)
			}
			logf("  allocations: %v", r.Allocs)
		}
		rep.Runs = append(rep.Runs, r)
		env.Cleanup(context.Background())
	}

	rep.Machine.LoadEnd = loadavg()
	rep.Took = time.Since(started)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	raw, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(filepath.Join(out, "benchmarks.json"), raw, 0o644); err != nil {
		return err
	}
	if err := write(rep, out); err != nil {
		return err
	}
	logf("wrote %s in %v", filepath.Join(out, "benchmarks.md"), time.Since(started).Round(time.Second))
	return nil
}

// write renders the report's markdown and chart into out.
func write(rep *Report, out string) error {
	if err := os.WriteFile(filepath.Join(out, "benchmarks.svg"), []byte(chart(rep)), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "benchmarks.md"), []byte(markdown(rep, rep.Took)), 0o644)
}

// rerender writes the markdown and chart again from saved raw numbers, for
// changes to the presentation or to notes.md.
func rerender(jsonPath, out string) error {
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		return err
	}
	var rep Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		return err
	}
	return write(&rep, out)
}

func (r *Run) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	logf("  FAILED %s", msg)
	r.Failures = append(r.Failures, msg)
}

func hasLib(setups []bench.Setup, lib string) bool {
	for _, s := range setups {
		if s.Lib == lib {
			return true
		}
	}
	return false
}

var benchLine = regexp.MustCompile(`^BenchmarkAcquireRelease/(\S+?)(-\d+)?\s+\d+\s+([\d.]+) ns/op\s+([\d.]+) B/op\s+([\d.]+) allocs/op`)

// allocs runs the allocation benchmarks of this module with go test.
func allocs(addr string, iterations int) (map[string]Alloc, error) {
	dir, err := moduleDir()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^BenchmarkAcquireRelease$", "-benchmem",
		"-benchtime", strconv.Itoa(iterations)+"x", "-count", "1", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DLOCK_BENCH_ADDR="+addr)
	outb, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go test -bench: %w\n%s", err, outb)
	}
	res := map[string]Alloc{}
	sc := bufio.NewScanner(strings.NewReader(string(outb)))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		ns, _ := strconv.ParseFloat(m[3], 64)
		b, _ := strconv.ParseFloat(m[4], 64)
		a, _ := strconv.ParseFloat(m[5], 64)
		res[m[1]] = Alloc{NsOp: ns, BytesOp: b, AllocsOp: a}
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("no benchmark lines in go test output:\n%s", outb)
	}
	return res, nil
}

// moduleDir is the bench module's directory (go test runs there).
func moduleDir() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("run the report from inside the bench module (cd bench)")
	}
	return filepath.Dir(mod), nil
}

func machine(env *bench.Env, own bool) Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Libraries: map[string]string{}, Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), OwnServer: own, LoadStart: loadavg()}
	if out, err := exec.Command("nproc").Output(); err == nil {
		m.CPUs, _ = strconv.Atoi(strings.TrimSpace(string(out)))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if out, err := exec.Command("uname", "-sr").Output(); err == nil {
		m.Kernel = strings.TrimSpace(string(out))
	}
	if info, err := bench.ServerInfo(context.Background(), env.Stats, "server"); err == nil {
		m.RedisVersion = info["redis_version"]
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/go-redsync/redsync/v4", "github.com/bsm/redislock", "github.com/redis/rueidis", "github.com/redis/go-redis/v9":
				m.Libraries[d.Path] = d.Version
			}
		}
	}
	return m
}
