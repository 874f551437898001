package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// CmdCounts is a number of calls per Redis command name (lower case,
// subcommands as "client|setinfo"), as INFO commandstats reports them.
type CmdCounts map[string]int64

// ignored are the commands the harness itself sends to read statistics.
var ignored = map[string]bool{"info": true, "monitor": true, "config|resetstat": true}

// ReadCommandStats returns the cumulative calls per command.
func ReadCommandStats(ctx context.Context, rdb *redis.Client) (CmdCounts, error) {
	m, err := ServerInfo(ctx, rdb, "commandstats")
	if err != nil {
		return nil, err
	}
	out := make(CmdCounts)
	for k, v := range m {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			if n, ok := strings.CutPrefix(f, "calls="); ok {
				c, _ := strconv.ParseInt(n, 10, 64)
				out[name] = c
			}
		}
	}
	return out, nil
}

// Sub returns c - before, without the harness's own commands.
func (c CmdCounts) Sub(before CmdCounts) CmdCounts {
	out := make(CmdCounts)
	for k, v := range c {
		if ignored[k] {
			continue
		}
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// Total is the number of all calls, including those made inside scripts.
func (c CmdCounts) Total() int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

// String lists the commands by decreasing count.
func (c CmdCounts) String() string {
	type kv struct {
		k string
		v int64
	}
	var l []kv
	for k, v := range c {
		l = append(l, kv{k, v})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v || l[i].v == l[j].v && l[i].k < l[j].k })
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%d", e.k, e.v)
	}
	return b.String()
}

// Origin says, per command name, what share of a library's calls came
// from clients (top level) rather than from inside its Lua scripts. It is
// learnt by watching the library with MONITOR, which tags every command a
// script runs with "lua" (see Calibrate).
type Origin map[string]float64

// TopLevel returns the number of calls in c that clients sent themselves.
// Commands never seen during calibration count as top level: only the
// libraries' scripts run commands inside Redis.
func (o Origin) TopLevel(c CmdCounts) float64 {
	var n float64
	for k, v := range c {
		share, ok := o[k]
		if !ok {
			share = 1
		}
		n += share * float64(v)
	}
	return n
}

// ScriptOnly lists the commands that were only ever run by scripts.
func (o Origin) ScriptOnly() []string {
	var l []string
	for k, v := range o {
		if v == 0 {
			l = append(l, strings.ToUpper(k))
		}
	}
	slices.Sort(l)
	return l
}

// Monitor records, with the MONITOR command, how many calls of each
// command came from clients and how many from scripts.
type Monitor struct {
	conn net.Conn
	mu   sync.Mutex
	top  CmdCounts
	lua  CmdCounts
	done chan struct{}
	// on is true inside a measured window: MONITOR shows the harness's
	// INFO commandstats, which opens (Take) and closes (Since) every
	// window, in order with the commands. The shares come from the
	// windows, as only they are in the measured runs: set-up and warm-up
	// traffic (connections, subscriptions, one-off probes) would skew
	// them. A command seen only outside the windows keeps the share of all
	// its calls (outTop, outLua).
	on             bool
	outTop, outLua CmdCounts
}

// StartMonitor opens a MONITOR connection to addr.
func StartMonitor(addr string) (*Monitor, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		conn.Close()
		return nil, err
	}
	r := bufio.NewReaderSize(conn, 1<<16)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "+OK") {
		conn.Close()
		return nil, fmt.Errorf("MONITOR: %q %v", line, err)
	}
	m := &Monitor{conn: conn, top: CmdCounts{}, lua: CmdCounts{}, outTop: CmdCounts{}, outLua: CmdCounts{}, done: make(chan struct{})}
	go m.read(r)
	return m, nil
}

// A MONITOR line: +1700000000.123456 [0 127.0.0.1:5555] "set" "k" "v"
// or, for a command run by a script, [0 lua] instead of the address.
func (m *Monitor) read(r *bufio.Reader) {
	defer close(m.done)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		open := strings.IndexByte(line, '[')
		end := strings.IndexByte(line, ']')
		if open < 0 || end < open {
			continue
		}
		src := line[open+1 : end]
		rest := line[end+1:]
		q1 := strings.IndexByte(rest, '"')
		if q1 < 0 {
			continue
		}
		q2 := strings.IndexByte(rest[q1+1:], '"')
		if q2 < 0 {
			continue
		}
		name := strings.ToLower(rest[q1+1 : q1+1+q2])
		if name == "client" || name == "config" || name == "command" || name == "script" {
			// commandstats names these by subcommand.
			if q3 := strings.IndexByte(rest[q1+q2+2:], '"'); q3 >= 0 {
				sub := rest[q1+q2+2+q3+1:]
				if q4 := strings.IndexByte(sub, '"'); q4 >= 0 {
					name += "|" + strings.ToLower(sub[:q4])
				}
			}
		}
		if name == "info" {
			if strings.Contains(strings.ToLower(rest), `"commandstats"`) {
				m.on = !m.on
			}
			continue
		}
		top, lua := m.top, m.lua
		if !m.on {
			top, lua = m.outTop, m.outLua
		}
		m.mu.Lock()
		if strings.HasSuffix(src, " lua") {
			lua[name]++
		} else {
			top[name]++
		}
		m.mu.Unlock()
	}
}

// Stop closes the connection and returns what share of each command's
// calls were top level.
func (m *Monitor) Stop() Origin {
	time.Sleep(50 * time.Millisecond) // let the last lines arrive
	m.conn.Close()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	o := Origin{}
	for _, c := range []struct{ top, lua CmdCounts }{{m.top, m.lua}, {m.outTop, m.outLua}} {
		for k, v := range c.top {
			if _, ok := o[k]; !ok {
				o[k] = float64(v) / float64(v+c.lua[k])
			}
		}
		for k := range c.lua {
			if _, ok := o[k]; !ok {
				o[k] = float64(c.top[k]) / float64(c.top[k]+c.lua[k])
			}
		}
	}
	return o
}

// ProcessCPU returns the CPU time (user + system) this process used so far.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ServerCPU returns the CPU time redis-server reports having used.
func ServerCPU(ctx context.Context, rdb *redis.Client) time.Duration {
	m, err := ServerInfo(ctx, rdb, "cpu")
	if err != nil {
		return 0
	}
	u, _ := strconv.ParseFloat(m["used_cpu_user"], 64)
	s, _ := strconv.ParseFloat(m["used_cpu_sys"], 64)
	return time.Duration((u + s) * float64(time.Second))
}

// Snapshot is the server's counters at one instant.
type Snapshot struct {
	At        time.Time
	Cmds      CmdCounts
	ClientCPU time.Duration
	ServerCPU time.Duration
}

// Take reads a snapshot.
func Take(ctx context.Context, rdb *redis.Client) (Snapshot, error) {
	c, err := ReadCommandStats(ctx, rdb)
	if err != nil {
		return Snapshot{}, err
	}
	return Snapshot{At: time.Now(), Cmds: c, ClientCPU: ProcessCPU(), ServerCPU: ServerCPU(ctx, rdb)}, nil
}

// Window is what happened between two snapshots.
type Window struct {
	Dur       time.Duration
	Cmds      CmdCounts
	ClientCPU time.Duration
	ServerCPU time.Duration
}

// Since returns the window from s to now.
func Since(ctx context.Context, rdb *redis.Client, s Snapshot) (Window, error) {
	e, err := Take(ctx, rdb)
	if err != nil {
		return Window{}, err
	}
	return Window{Dur: e.At.Sub(s.At), Cmds: e.Cmds.Sub(s.Cmds), ClientCPU: e.ClientCPU - s.ClientCPU, ServerCPU: e.ServerCPU - s.ServerCPU}, nil
}

// Percentile returns the p-th percentile (0..100) of sorted durations.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1)*p/100 + 0.5)
	return sorted[min(i, len(sorted)-1)]
}

// Dist is a latency distribution.
type Dist struct {
	N             int
	P50, P99, Max time.Duration
}

// NewDist sorts samples and summarises them.
func NewDist(samples []time.Duration) Dist {
	slices.Sort(samples)
	if len(samples) == 0 {
		return Dist{}
	}
	return Dist{N: len(samples), P50: Percentile(samples, 50), P99: Percentile(samples, 99), Max: samples[len(samples)-1]}
}
