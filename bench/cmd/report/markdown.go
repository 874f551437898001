package main

import (
	"cmp"
	_ "embed"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/dlock-go/dlock/bench"
)

// notes.md is the hand-written part of the report (findings, what we
// tried); it is copied into every regenerated report.
//
//go:embed notes.md
var notes string

// Command is the one documented way to regenerate the report.
const Command = "cd bench && go run ./cmd/report -runs 5 -out ../docs"

// stat is the median of a metric over runs, with its range.
type stat struct{ Med, Lo, Hi float64 }

func newStat(xs []float64) stat {
	xs = slices.DeleteFunc(slices.Clone(xs), math.IsNaN)
	if len(xs) == 0 {
		return stat{math.NaN(), math.NaN(), math.NaN()}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stat{m, s[0], s[len(s)-1]}
}

func (r *Report) unc(name string, f func(bench.UncontendedResult) float64) stat {
	var xs []float64
	for _, run := range r.Runs {
		if u, ok := run.Uncontended[name]; ok {
			xs = append(xs, f(u))
		}
	}
	return newStat(xs)
}

// uncCeilRatio is the median over runs of a setup's pairs/s divided by the
// ceiling measured in the same run: the median pairs/s over the median
// ceiling would divide numbers taken from different runs.
func (r *Report) uncCeilRatio(name string) stat {
	var xs []float64
	for _, run := range r.Runs {
		if u, ok := run.Uncontended[name]; ok && run.Ceiling.Pairs() > 0 {
			xs = append(xs, u.PerSec/run.Ceiling.Pairs())
		}
	}
	return newStat(xs)
}

// uncLib is a library's uncontended pairs/s over the runs of all its
// setups: without contention they run the same code (the first try
// succeeds), so each is one more draw of the same number, and the best of
// them would be the luckiest draw, not a better setup.
func (r *Report) uncLib(lib string) stat {
	var xs []float64
	for _, s := range r.Setups {
		if s.Lib != lib {
			continue
		}
		for _, run := range r.Runs {
			if u, ok := run.Uncontended[s.Name]; ok {
				xs = append(xs, u.PerSec)
			}
		}
	}
	return newStat(xs)
}

// bestOtherLib returns the library other than lib with the highest
// uncontended pairs/s (uncLib).
func (r *Report) bestOtherLib(lib string) (string, float64) {
	best, bv := "", math.NaN()
	for _, s := range r.Setups {
		if v := r.uncLib(s.Lib).Med; s.Lib != lib && !math.IsNaN(v) && !(v <= bv) {
			best, bv = s.Lib, v
		}
	}
	return best, bv
}

func (r *Report) con(n int, name string, f func(bench.ContendedResult) float64) stat {
	var xs []float64
	for _, run := range r.Runs {
		if c, ok := run.Contended[n][name]; ok {
			xs = append(xs, f(c))
		}
	}
	return newStat(xs)
}

func (r *Report) ren(lib string, f func(bench.RenewalResult) float64) stat {
	var xs []float64
	for _, run := range r.Runs {
		if x, ok := run.Renewal[lib]; ok {
			xs = append(xs, f(x))
		}
	}
	return newStat(xs)
}

func (r *Report) alloc(lib string, f func(Alloc) float64) stat {
	var xs []float64
	for _, run := range r.Runs {
		if a, ok := run.Allocs[lib]; ok {
			xs = append(xs, f(a))
		}
	}
	return newStat(xs)
}

func (r *Report) ceil(f func(bench.Ceiling) float64) stat {
	var xs []float64
	for _, run := range r.Runs {
		// A run whose redis-benchmark failed has zeros: it measured nothing.
		if x := f(run.Ceiling); x > 0 {
			xs = append(xs, x)
		}
	}
	return newStat(xs)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pms is a percentile of a distribution in ms, NaN if it has no samples.
func pms(d bench.Dist, p time.Duration) float64 {
	if d.N == 0 {
		return math.NaN()
	}
	return ms(p)
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// num formats a number with a sensible precision.
func num(x float64) string {
	switch {
	case math.IsNaN(x):
		return "n/a"
	case x == 0:
		return "0"
	case math.Abs(x) >= 1000:
		return commas(int64(math.Round(x)))
	case math.Abs(x) >= 100:
		return fmt.Sprintf("%.0f", x)
	case math.Abs(x) >= 10:
		return fmt.Sprintf("%.1f", x)
	case math.Abs(x) >= 1:
		return fmt.Sprintf("%.2f", x)
	default:
		return fmt.Sprintf("%.3f", x)
	}
}

func commas(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// withRange shows the median and, if the runs differ, their range.
func withRange(s stat) string {
	if len(num(s.Lo)) == 0 || num(s.Lo) == num(s.Hi) {
		return num(s.Med)
	}
	return fmt.Sprintf("%s (%s–%s)", num(s.Med), num(s.Lo), num(s.Hi))
}

func pct(x float64) string { return fmt.Sprintf("%.0f%%", 100*x) }

type table struct {
	b    *strings.Builder
	cols int
}

// newTable starts a markdown table. Columns are right-aligned (numbers)
// unless their heading starts with "<" (text), which is not shown.
func newTable(b *strings.Builder, head ...string) *table {
	align := make([]string, len(head))
	for i, h := range head {
		align[i] = " ---: |"
		if i == 0 {
			align[i] = " --- |"
		}
		if t, ok := strings.CutPrefix(h, "<"); ok {
			head[i], align[i] = t, " --- |"
		}
	}
	fmt.Fprintf(b, "| %s |\n|%s", strings.Join(head, " | "), strings.Join(align, ""))
	b.WriteString("\n")
	return &table{b: b, cols: len(head)}
}

func (t *table) row(cells ...string) {
	fmt.Fprintf(t.b, "| %s |\n", strings.Join(cells, " | "))
}

func bold(s string, yes bool) string {
	if yes {
		return "**" + s + "**"
	}
	return s
}

func mark(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

// competitors are the setups of other libraries.
func (r *Report) competitors() []SetupInfo {
	var l []SetupInfo
	for _, s := range r.Setups {
		if s.Lib != "dlock" {
			l = append(l, s)
		}
	}
	return l
}

func (r *Report) hasSetup(name string) bool {
	return slices.ContainsFunc(r.Setups, func(s SetupInfo) bool { return s.Name == name })
}

func markdown(r *Report, took time.Duration) string {
	var b strings.Builder
	c := r.Config
	m := r.Machine
	fmt.Fprintf(&b, "# Benchmarks\n\n")
	fmt.Fprintf(&b, "dlock against the Go Redis locks people already use: [redsync](https://github.com/go-redsync/redsync), "+
		"[bsm/redislock](https://github.com/bsm/redislock) and [rueidislock](https://github.com/redis/rueidis/tree/main/rueidislock), "+
		"on one real `redis-server`, in one run. Generated by the suite in [`bench/`](../bench) (a separate Go module, so the "+
		"library never depends on its competitors). Regenerate this page, its chart and the raw numbers "+
		"([benchmarks.json](benchmarks.json)) with one command (about %s on the machine below):\n\n```sh\n%s\n```\n\n",
		took.Round(time.Minute/2), Command)
	runs := fmt.Sprintf("%d runs", len(r.Runs))
	if len(r.Runs) == 1 {
		runs = "one run"
	}
	fmt.Fprintf(&b, "Every number is the **median of %s** (with the range of the runs in parentheses where it matters). "+
		"Client and server share the same %d cores, so absolute rates are noisy; compare ratios within one report.\n\n", runs, m.CPUs)
	fmt.Fprintf(&b, "To measure your own Redis: `dlock bench --redis redis://host:6379` measures dlock alone (see the README); "+
		"for this comparison, point the suite at it: `cd bench && go run ./cmd/report -addr host:6379 -runs 1 -out /tmp/report`. "+
		"It never flushes the server (keys get a run-unique prefix and are deleted at the end), but other traffic on that server "+
		"skews the command counts. `-quick` gives a smoke run in about a minute; "+
		"`cd bench && go vet ./... && go test -run XXX -bench . -benchtime 1x ./...` is the quick check that the suite still builds and runs.\n\n")

	b.WriteString("## Machine\n\n")
	t := newTable(&b, "what", "<value")
	t.row("CPUs (`nproc`)", fmt.Sprint(m.CPUs))
	t.row("CPU model", m.CPUModel)
	t.row("kernel", m.Kernel)
	t.row("Redis", m.RedisVersion+func() string {
		if m.OwnServer {
			return " (private `redis-server` on a loopback port, `save \"\"`, `appendonly no`)"
		}
		return " (existing server given with -addr)"
	}())
	t.row("Go", m.GoVersion)
	libs := make([]string, 0, len(m.Libraries))
	for k, v := range m.Libraries {
		libs = append(libs, k+" "+v)
	}
	sort.Strings(libs)
	t.row("libraries", strings.Join(libs, ", "))
	t.row("generated", m.Date)
	t.row("load average (1, 5, 15 min) at start / end", m.LoadStart+" / "+m.LoadEnd+" (anything above 0 is other work sharing the cores)")
	b.WriteString("\n")

	writeMethod(&b, r)
	writeTargets(&b, r)
	writeFailures(&b, r)
	b.WriteString("![Benchmark chart](benchmarks.svg)\n\n")
	writeCeiling(&b, r)
	writeUncontended(&b, r)
	for _, n := range c.Workers {
		writeContended(&b, r, n)
	}
	writeRenewal(&b, r)
	writeAllocs(&b, r)
	writeOrigins(&b, r)
	b.WriteString(notes)
	return b.String()
}

func writeMethod(b *strings.Builder, r *Report) {
	c := r.Config
	b.WriteString("## Method\n\n")
	b.WriteString("Each library is set up two ways: as its README (or its package example) shows, and tuned as a careful user would " +
		"(short jittered polling, enough tries), so that the comparison is fair to it. dlock has one setup: its defaults.\n\n")
	t := newTable(b, "setup", "<settings")
	for _, s := range r.Setups {
		t.row(s.Name, s.Settings)
	}
	fmt.Fprintf(b, "\nAll go-redis based setups use `redis.NewClient(&redis.Options{Addr: addr})` with go-redis defaults (pool of %d connections per client on this machine).\n\n", 10*r.Machine.CPUs)
	fmt.Fprintf(b, "1. **Uncontended**: %d goroutines in one process share one client; each locks and unlocks its own key in a loop "+
		"for %v after a %v warm-up. Pairs per second, and the latency of one acquire + release.\n", c.Goroutines, c.UncontendedDur, c.Warmup)
	fmt.Fprintf(b, "2. **Contended**: %s workers, each with its own client and connections (as separate processes would have), "+
		"take one key in turn and hold it for `time.Sleep(%v)`, for %v after a %v warm-up. A worker that gets its lock checks that "+
		"nobody else is inside (mutual exclusion), then records: its wait (from calling Lock to holding the lock, including any "+
		"retries after the library gave up by itself), the handoff gap (from the previous holder starting its release to this "+
		"acquisition, counted only when the previous holder was another worker), and its count (fairness: least / most served worker).\n",
		joinInts(c.Workers, " and "), c.Hold, c.ContendedDur, c.Warmup)
	fmt.Fprintf(b, "3. **Renewal load**: one process takes %s locks on distinct keys with a lease of %v and keeps them while they are "+
		"renewed every %v (dlock's watchdog renews every lease/3), then measures %v: Redis commands per renewal interval, "+
		"requests (round trips) the client sent per interval, and CPU per second of the client process and of redis-server. "+
		"Libraries without a watchdog get the user loop their docs leave to the user (one goroutine per lock with a ticker).\n",
		commas(int64(c.RenewLocks)), c.RenewLease, c.RenewInterval, c.RenewDur)
	fmt.Fprintf(b, "4. **Allocations**: `go test -run '^$' -bench '^BenchmarkAcquireRelease$' -benchmem -benchtime %dx` in `bench/` "+
		"(one goroutine, one key, acquire + release written as each README shows).\n\n", c.AllocIterations)
	b.WriteString("**Counting commands.** `INFO commandstats` is read before and after each measured window (the harness's own `INFO` " +
		"calls are left out). Redis counts the commands a Lua script runs (`redis.call`) in commandstats like any other, so the " +
		"difference of two snapshots is the **total** work including script internals. To get the **top-level** commands (what " +
		"clients sent: `EVALSHA`, `SET`, `SSUBSCRIBE`, ...), the suite first runs a small version of every scenario for each setup " +
		"under `MONITOR` (counting, like the measured runs, only its window after a warm-up), which tags every command run by a script " +
		"with `lua`; that gives, per command name, the share of calls that came from clients (for example `SET` is top-level for redsync but script-only for redislock). Top-level = sum over " +
		"commands of calls x that share (commands never seen in calibration count as top-level). MONITOR is never on during the " +
		"measured windows. Both numbers are divided by the successful acquisitions in the window.\n\n")
	fmt.Fprintf(b, "**Reference ceiling.** `redis-benchmark -c %d -n %s -r 10000000` on the same server for `SET key v NX PX 30000`, "+
		"`DEL key`, and `EVALSHA` of a one-line SET NX PX script and of a compare-and-delete script. One acquire + release needs one "+
		"of each, so the ceiling in pairs/s is 1 / (1/SET + 1/DEL). (It is not a hard limit: a client that pipelines, like "+
		"rueidis, can beat it.)\n\n", c.CeilingClients, commas(int64(c.CeilingRequests)))
}

func joinInts(xs []int, sep string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, sep)
}

func writeCeiling(b *strings.Builder, r *Report) {
	b.WriteString("## Reference ceiling (redis-benchmark)\n\n")
	t := newTable(b, "command", "requests/s")
	t.row("`SET k v NX PX 30000`", withRange(r.ceil(func(c bench.Ceiling) float64 { return c.SetNXPX })))
	t.row("`DEL k`", withRange(r.ceil(func(c bench.Ceiling) float64 { return c.Del })))
	t.row("`EVALSHA` (SET NX PX script)", withRange(r.ceil(func(c bench.Ceiling) float64 { return c.EvalSetNX })))
	t.row("`EVALSHA` (compare-and-delete script)", withRange(r.ceil(func(c bench.Ceiling) float64 { return c.EvalRelease })))
	t.row("**pairs/s ceiling, SET NX PX + DEL**", "**"+num(r.ceil(bench.Ceiling.Pairs).Med)+"**")
	t.row("pairs/s ceiling, two EVALSHA", num(r.ceil(bench.Ceiling.EvalPairs).Med))
	b.WriteString("\n")
}

// bestCompetitor returns the competitor setup with the highest value.
func (r *Report) bestCompetitor(f func(name string) float64) (string, float64) {
	best, bv := "", math.Inf(-1)
	for _, s := range r.competitors() {
		if v := f(s.Name); !math.IsNaN(v) && v > bv {
			best, bv = s.Name, v
		}
	}
	return best, bv
}

func writeUncontended(b *strings.Builder, r *Report) {
	c := r.Config
	fmt.Fprintf(b, "## 1. Uncontended: %d goroutines, distinct keys\n\n", c.Goroutines)
	bestOther := func(lib string) float64 {
		_, v := r.bestOtherLib(lib)
		return v
	}
	t := newTable(b, "setup", "pairs/s", "x ceiling", "x best other", "p50 ms", "p99 ms", "max ms", "top-level cmds/pair", "total cmds/pair", "client CPU µs/pair", "server CPU µs/pair", "lock errors (retried)")
	for _, s := range r.Setups {
		ps := r.unc(s.Name, func(u bench.UncontendedResult) float64 { return u.PerSec })
		t.row(bold(s.Name, s.Lib == "dlock"), bold(withRange(ps), s.Lib == "dlock"),
			fmt.Sprintf("%.2f", r.uncCeilRatio(s.Name).Med), fmt.Sprintf("%.2f", ps.Med/bestOther(s.Lib)),
			num(r.unc(s.Name, func(u bench.UncontendedResult) float64 { return ms(u.Latency.P50) }).Med),
			num(r.unc(s.Name, func(u bench.UncontendedResult) float64 { return ms(u.Latency.P99) }).Med),
			num(r.unc(s.Name, func(u bench.UncontendedResult) float64 { return ms(u.Latency.Max) }).Med),
			num(r.unc(s.Name, func(u bench.UncontendedResult) float64 { return u.TopPerOp }).Med),
			num(r.unc(s.Name, func(u bench.UncontendedResult) float64 { return u.TotalPerOp }).Med),
			num(r.unc(s.Name, func(u bench.UncontendedResult) float64 { return us(u.ClientCPUOp) }).Med),
			num(r.unc(s.Name, func(u bench.UncontendedResult) float64 { return us(u.ServerCPUOp) }).Med),
			num(r.unc(s.Name, func(u bench.UncontendedResult) float64 { return float64(u.Errors) }).Hi))
	}
	b.WriteString("\n\"x ceiling\" is against the SET NX PX + DEL pairs ceiling measured in the same run (median of the runs' ratios); \"x best other\" against the fastest other library, over the runs of all its setups (without contention they run the same code). CPU columns are CPU time of the benchmark process and of redis-server divided by pairs. \"lock errors\" is the maximum over runs, not the median (must be 0).\n\n")
}

func writeContended(b *strings.Builder, r *Report, n int) {
	c := r.Config
	fmt.Fprintf(b, "## 2. Contended: %d workers, one key, %v critical section\n\n", n, c.Hold)
	t := newTable(b, "setup", "acquisitions/s", "held p50 ms", "handoff gap p50 ms", "gap p99 ms", "wait p50 ms", "wait p99 ms", "wait max ms",
		"min/max per worker", "same worker again", "top-level cmds/acq", "total cmds/acq", "exclusion violations", "gave up (retried)")
	for _, s := range r.Setups {
		get := func(f func(bench.ContendedResult) float64) stat { return r.con(n, s.Name, f) }
		// min, max and their ratio from one run, the one with the median
		// ratio: medians taken separately do not divide to the median ratio.
		var rs []bench.ContendedResult
		for _, run := range r.Runs {
			if x, ok := run.Contended[n][s.Name]; ok {
				rs = append(rs, x)
			}
		}
		mn, mx, fair := math.NaN(), math.NaN(), math.NaN()
		if len(rs) > 0 {
			slices.SortFunc(rs, func(a, b bench.ContendedResult) int { return cmp.Compare(a.Fairness, b.Fairness) })
			m := rs[(len(rs)-1)/2]
			mn, mx, fair = float64(m.MinPerWorker), float64(m.MaxPerWorker), m.Fairness
		}
		t.row(bold(s.Name, s.Lib == "dlock"),
			bold(withRange(get(func(x bench.ContendedResult) float64 { return x.PerSec })), s.Lib == "dlock"),
			num(get(func(x bench.ContendedResult) float64 { return ms(x.Held.P50) }).Med),
			num(get(func(x bench.ContendedResult) float64 { return pms(x.Gap, x.Gap.P50) }).Med),
			num(get(func(x bench.ContendedResult) float64 { return pms(x.Gap, x.Gap.P99) }).Med),
			num(get(func(x bench.ContendedResult) float64 { return ms(x.Wait.P50) }).Med),
			num(get(func(x bench.ContendedResult) float64 { return ms(x.Wait.P99) }).Med),
			num(get(func(x bench.ContendedResult) float64 { return ms(x.Wait.Max) }).Med),
			fmt.Sprintf("%s/%s (%.2f)", num(mn), num(mx), fair),
			pct(get(func(x bench.ContendedResult) float64 { return x.SameWorker }).Med),
			num(get(func(x bench.ContendedResult) float64 { return x.TopPerOp }).Med),
			num(get(func(x bench.ContendedResult) float64 { return x.TotalPerOp }).Med),
			num(get(func(x bench.ContendedResult) float64 { return float64(x.Violations) }).Hi),
			num(get(func(x bench.ContendedResult) float64 { return float64(x.GiveUps) }).Med))
	}
	fmt.Fprintf(b, "\nFIFO bound for the wait: a waiter queues behind the other %d workers, so its wait is about (workers - 1) / (acquisitions/s). "+
		"\"held\" is how long the 1 ms sleep really took: all workers run in one benchmark process, so a library that keeps the process busy while a worker sleeps (waiters being woken, queue bookkeeping) also stretches the sleep; acquisitions/s is 1 / (held + gap) on average. "+
		"\"same worker again\" is the share of acquisitions by the worker that had just released the lock (a sign of starvation). "+
		"Exclusion violations is the maximum over runs (must be 0).\n\n", n-1)
}

func writeRenewal(b *strings.Builder, r *Report) {
	c := r.Config
	fmt.Fprintf(b, "## 3. Renewal load: %s locks held, lease %v, renewed every %v\n\n", commas(int64(c.RenewLocks)), c.RenewLease, c.RenewInterval)
	t := newTable(b, "library", "<how", "top-level cmds/interval", "total cmds/interval", "round trips/interval", "locks per round trip", "client CPU ms/s", "server CPU ms/s", "lost")
	for _, rn := range r.Renewers {
		get := func(f func(bench.RenewalResult) float64) stat { return r.ren(rn.Lib, f) }
		rt := get(func(x bench.RenewalResult) float64 { return x.RoundTrips }).Med
		rts, per := "n/a (auto-pipelined)", "n/a"
		if rt >= 0 && !math.IsNaN(rt) {
			rts, per = num(rt), num(float64(c.RenewLocks)/rt)
		}
		if math.IsNaN(rt) {
			rts = "not run"
		}
		t.row(bold(rn.Lib, rn.Lib == "dlock"), rn.Method,
			num(get(func(x bench.RenewalResult) float64 { return x.TopPerInterval }).Med),
			num(get(func(x bench.RenewalResult) float64 { return x.TotalPerInterval }).Med),
			bold(rts, rn.Lib == "dlock"), per,
			num(1000*get(func(x bench.RenewalResult) float64 { return x.ClientCPUPerSec }).Med),
			num(1000*get(func(x bench.RenewalResult) float64 { return x.ServerCPUPerSec }).Med),
			num(get(func(x bench.RenewalResult) float64 { return float64(x.Lost) }).Hi))
	}
	b.WriteString("\nRound trips are counted by a go-redis hook (one per command, one per pipeline); rueidis pipelines automatically, so it has no such count. Client CPU is the whole benchmark process (idle otherwise).\n\n")
}

func writeAllocs(b *strings.Builder, r *Report) {
	b.WriteString("## 4. Allocations per acquire + release (go test -benchmem)\n\n")
	t := newTable(b, "library", "allocs/op", "B/op", "ns/op (one goroutine)")
	for _, lib := range []string{"dlock", "redsync", "redislock", "rueidislock"} {
		a := r.alloc(lib, func(a Alloc) float64 { return a.AllocsOp })
		if math.IsNaN(a.Med) {
			continue
		}
		t.row(bold(lib, lib == "dlock"), bold(num(a.Med), lib == "dlock"),
			num(r.alloc(lib, func(a Alloc) float64 { return a.BytesOp }).Med),
			num(r.alloc(lib, func(a Alloc) float64 { return a.NsOp }).Med))
	}
	b.WriteString("\n")
}

func writeFailures(b *strings.Builder, r *Report) {
	var l []string
	for i, run := range r.Runs {
		for _, f := range run.Failures {
			l = append(l, fmt.Sprintf("- run %d: %s", i+1, f))
		}
	}
	if len(l) == 0 {
		return
	}
	b.WriteString("## Failures\n\nThese scenarios failed in some runs; their medians are over the other runs (n/a if none).\n\n")
	b.WriteString(strings.Join(l, "\n") + "\n\n")
}

func writeOrigins(b *strings.Builder, r *Report) {
	b.WriteString("## Commands that run inside scripts\n\n")
	b.WriteString("Found by the MONITOR calibration; they count in \"total\" but not in \"top-level\".\n\n")
	t := newTable(b, "setup", "<script-only commands")
	for _, s := range r.Setups {
		t.row(s.Name, "`"+strings.Join(r.Origins[s.Name].ScriptOnly(), "` `")+"`")
	}
	b.WriteString("\n")
}

func writeTargets(b *strings.Builder, r *Report) {
	if !r.hasSetup("dlock") {
		return
	}
	b.WriteString("## dlock against the targets\n\n")
	t := newTable(b, "target", "dlock", "<reference", "<")
	c := r.Config
	uncPS := func(n string) float64 {
		return r.unc(n, func(u bench.UncontendedResult) float64 { return u.PerSec }).Med
	}
	d := uncPS("dlock")
	bn, bv := r.bestOtherLib("dlock")
	t.row("uncontended pairs/s >= best other library", num(d), fmt.Sprintf("%s (all its setups): %s (x%.2f)", bn, num(bv), d/bv), mark(d >= bv))
	if ceiling := r.ceil(bench.Ceiling.Pairs).Med; !math.IsNaN(ceiling) {
		ratio := r.uncCeilRatio("dlock").Med
		t.row("uncontended pairs/s >= 0.75 x ceiling", num(d), fmt.Sprintf("0.75 x %s = %s (x%.2f of ceiling, median of the runs' ratios)", num(ceiling), num(0.75*ceiling), ratio), mark(ratio >= 0.75))
	}
	da := r.alloc("dlock", func(a Alloc) float64 { return a.AllocsOp }).Med
	minOther, minLib := math.Inf(1), ""
	for _, lib := range []string{"redsync", "redislock", "rueidislock"} {
		if a := r.alloc(lib, func(a Alloc) float64 { return a.AllocsOp }).Med; a < minOther {
			minOther, minLib = a, lib
		}
	}
	if !math.IsNaN(da) {
		t.row("fewer allocations per pair than every other library", num(da), fmt.Sprintf("%s: %s", minLib, num(minOther)), mark(da < minOther))
	}
	for _, n := range c.Workers {
		get := func(name string, f func(bench.ContendedResult) float64) float64 { return r.con(n, name, f).Med }
		ps := func(name string) float64 { return get(name, func(x bench.ContendedResult) float64 { return x.PerSec }) }
		d := ps("dlock")
		bn, bv := r.bestCompetitor(ps)
		t.row(fmt.Sprintf("%d workers: acquisitions/s >= best other", n), num(d), fmt.Sprintf("%s: %s (x%.2f)", bn, num(bv), d/bv), mark(d >= bv))
		top := get("dlock", func(x bench.ContendedResult) float64 { return x.TopPerOp })
		tot := get("dlock", func(x bench.ContendedResult) float64 { return x.TotalPerOp })
		t.row(fmt.Sprintf("%d workers: <= 4 commands per acquisition (top-level)", n), num(top), "client requests: EVALSHA and pub/sub", mark(top <= 4))
		t.row(fmt.Sprintf("%d workers: <= 4 commands per acquisition (total, incl. inside scripts)", n), num(tot), "as INFO commandstats counts them", mark(tot <= 4))
		f := get("dlock", func(x bench.ContendedResult) float64 { return x.Fairness })
		t.row(fmt.Sprintf("%d workers: min/max per worker >= 0.7", n), fmt.Sprintf("%.2f", f), "", mark(f >= 0.7))
		p99 := get("dlock", func(x bench.ContendedResult) float64 { return ms(x.Wait.P99) })
		fifo := float64(n-1) / d * 1000
		hold := float64(n) * ms(c.Hold)
		bestP99, bestName := math.Inf(1), ""
		for _, s := range r.competitors() {
			if v := get(s.Name, func(x bench.ContendedResult) float64 { return ms(x.Wait.P99) }); v < bestP99 {
				bestP99, bestName = v, s.Name
			}
		}
		t.row(fmt.Sprintf("%d workers: wait p99 close to the FIFO bound, far below every other", n), num(p99)+" ms",
			fmt.Sprintf("workers x hold = %s ms; (workers-1)/rate = %s ms; best other: %s %s ms", num(hold), num(fifo), bestName, num(bestP99)),
			mark(p99 <= 2*fifo && p99 < bestP99/2))
		g := get("dlock", func(x bench.ContendedResult) float64 { return pms(x.Gap, x.Gap.P50) })
		t.row(fmt.Sprintf("%d workers: handoff gap p50 < 0.3 ms", n), num(g)+" ms", "", mark(g < 0.3))
	}
	rt := r.ren("dlock", func(x bench.RenewalResult) float64 { return x.RoundTrips }).Med
	if !math.IsNaN(rt) {
		limit := float64(c.RenewLocks) / 100
		t.row(fmt.Sprintf("renewing %s locks: <= 1 round trip per 100 locks per interval", commas(int64(c.RenewLocks))), num(rt), fmt.Sprintf("<= %s", num(limit)), mark(rt <= limit))
	}
	b.WriteString("\nThe targets count commands the way INFO commandstats does (redislock's 5 commands per pair include the SET, GET and DEL its scripts run), so both readings of the 4-command target are shown. \"Close to the FIFO bound\" is read as at most twice (workers - 1) / rate, and at most half the best other library's p99.\n\n")
}
