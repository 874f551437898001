package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Calibrate learns which commands of a library run inside its Lua scripts:
// it runs a small version of every scenario under MONITOR (which tags
// script calls with "lua") and returns, per command name, the share of
// calls that clients sent themselves. MONITOR slows the server down, so
// the measured runs never use it; they only apply these shares to the
// INFO commandstats deltas, which count script calls like any other.
func (e *Env) Calibrate(s Setup, r *Renewer) (Origin, error) {
	m, err := StartMonitor(e.Addr)
	if err != nil {
		return nil, err
	}
	none := Origin{}
	// Warm-ups as in the measured runs: only the windows are counted.
	_, err1 := e.Uncontended(s, 4, 100*time.Millisecond, 150*time.Millisecond, none)
	_, err2 := e.Contended(s, 4, time.Millisecond, 100*time.Millisecond, 300*time.Millisecond, none)
	var err3 error
	if r != nil {
		_, err3 = e.Renewal(*r, 20, 150*time.Millisecond, 50*time.Millisecond, 0, 250*time.Millisecond, none)
	}
	o := m.Stop()
	for _, err := range []error{err1, err2, err3} {
		if err != nil {
			return o, err
		}
	}
	return o, nil
}

// Ceiling is what redis-benchmark reaches on the same server.
type Ceiling struct {
	Clients     int
	SetNXPX     float64 // SET key v NX PX 30000, requests/s
	Del         float64 // DEL key
	EvalSetNX   float64 // EVALSHA of a SET NX PX script
	EvalRelease float64 // EVALSHA of a compare-and-delete script
}

// Pairs is the acquire+release pairs per second the server could do
// with plain SET NX PX and DEL: one of each per pair.
func (c Ceiling) Pairs() float64 { return harmonic(c.SetNXPX, c.Del) }

// EvalPairs is the same with one EVALSHA to acquire and one to release.
func (c Ceiling) EvalPairs() float64 { return harmonic(c.EvalSetNX, c.EvalRelease) }

func harmonic(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return 1 / (1/a + 1/b)
}

const (
	ceilSetScript = `return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`
	ceilDelScript = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`
)

// RunCeiling runs redis-benchmark with clients connections and requests
// requests per command against the Env's server. Keys are random in a
// space of 10 million, so nearly every SET NX succeeds.
func (e *Env) RunCeiling(clients, requests int) (Ceiling, error) {
	c := Ceiling{Clients: clients}
	bin, err := FindBinary("redis-benchmark")
	if err != nil {
		return c, err
	}
	host, port, _ := strings.Cut(e.Addr, ":")
	ctx := context.Background()
	setSHA, err := e.Stats.ScriptLoad(ctx, ceilSetScript).Result()
	if err != nil {
		return c, err
	}
	delSHA, err := e.Stats.ScriptLoad(ctx, ceilDelScript).Result()
	if err != nil {
		return c, err
	}
	k := e.Prefix + ":ceil:__rand_int__"
	runs := []struct {
		dst  *float64
		args []string
	}{
		{&c.SetNXPX, []string{"SET", k, "v", "NX", "PX", "30000"}},
		{&c.Del, []string{"DEL", k}},
		{&c.EvalSetNX, []string{"EVALSHA", setSHA, "1", k, "v", "30000"}},
		{&c.EvalRelease, []string{"EVALSHA", delSHA, "1", k, "v"}},
	}
	for _, r := range runs {
		args := append([]string{"-h", host, "-p", port, "-c", strconv.Itoa(clients), "-n", strconv.Itoa(requests),
			"-r", "10000000", "--csv"}, r.args...)
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			return c, fmt.Errorf("redis-benchmark %s: %w", r.args[0], err)
		}
		rps, err := parseBenchmarkCSV(out)
		if err != nil {
			return c, fmt.Errorf("redis-benchmark %s: %w", r.args[0], err)
		}
		*r.dst = rps
	}
	return c, nil
}

// parseBenchmarkCSV reads the "rps" column of redis-benchmark --csv.
func parseBenchmarkCSV(out []byte) (float64, error) {
	recs, err := csv.NewReader(bytes.NewReader(out)).ReadAll()
	if err != nil {
		return 0, err
	}
	if len(recs) < 2 || len(recs[0]) < 2 || recs[0][1] != "rps" {
		return 0, fmt.Errorf("unexpected output %q", out)
	}
	return strconv.ParseFloat(recs[len(recs)-1][1], 64)
}
