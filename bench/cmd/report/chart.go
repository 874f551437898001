package main

import (
	"fmt"
	"html"
	"math"
	"strings"

	"github.com/dlock-go/dlock/bench"
)

// series is one set of bars in a panel, one value per setup.
type series struct {
	label  string
	color  string
	values []float64
}

// panel is one horizontal bar chart.
type panel struct {
	title  string
	unit   string
	log    bool
	series []series
	lines  []refLine
}

// refLine is a vertical reference line (a ceiling).
type refLine struct {
	label string
	value float64
}

const (
	chartWidth = 980
	labelW     = 150
	plotW      = 690
	barH       = 11
	rowGap     = 7
	titleH     = 40
	panelGap   = 26
)

var palette = []string{"#4c78a8", "#f58518", "#54a24b"}

func chart(r *Report) string {
	names := make([]string, len(r.Setups))
	for i, s := range r.Setups {
		names[i] = s.Name
	}
	vals := func(f func(name string) float64) []float64 {
		v := make([]float64, len(names))
		for i, n := range names {
			v[i] = f(n)
		}
		return v
	}
	var panels []panel
	unc := panel{title: "Uncontended: acquire + release pairs per second (32 goroutines, distinct keys; higher is better)", unit: "/s",
		series: []series{{"pairs/s", palette[0], vals(func(n string) float64 {
			return r.unc(n, func(u bench.UncontendedResult) float64 { return u.PerSec }).Med
		})}}}
	if c := r.ceil(bench.Ceiling.Pairs).Med; !math.IsNaN(c) && c > 0 {
		unc.lines = []refLine{{"redis-benchmark ceiling", c}, {"0.75 x ceiling", 0.75 * c}}
	}
	panels = append(panels, unc)
	acq := panel{title: "Contended: acquisitions per second on one key, 1 ms critical section (higher is better)", unit: "/s"}
	wait := panel{title: "Contended: wait p99 in ms, log scale (lower is better)", unit: " ms", log: true}
	cmds := panel{title: "Contended: Redis commands per acquisition incl. those run by scripts, log scale (lower is better)", log: true}
	for i, n := range r.Config.Workers {
		col := palette[i%len(palette)]
		acq.series = append(acq.series, series{fmt.Sprintf("%d workers", n), col, vals(func(s string) float64 {
			return r.con(n, s, func(x bench.ContendedResult) float64 { return x.PerSec }).Med
		})})
		wait.series = append(wait.series, series{fmt.Sprintf("%d workers", n), col, vals(func(s string) float64 {
			return r.con(n, s, func(x bench.ContendedResult) float64 { return ms(x.Wait.P99) }).Med
		})})
		cmds.series = append(cmds.series, series{fmt.Sprintf("%d workers", n), col, vals(func(s string) float64 {
			return r.con(n, s, func(x bench.ContendedResult) float64 { return x.TotalPerOp }).Med
		})})
	}
	panels = append(panels, acq, wait, cmds)

	var body strings.Builder
	y := 10
	for _, p := range panels {
		y = drawPanel(&body, p, names, y) + panelGap
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="11">`+"\n", chartWidth, y, chartWidth, y)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	b.WriteString(body.String())
	b.WriteString("</svg>\n")
	return b.String()
}

func drawPanel(b *strings.Builder, p panel, names []string, y int) int {
	fmt.Fprintf(b, `<text x="10" y="%d" font-size="13" font-weight="bold">%s</text>`+"\n", y+14, html.EscapeString(p.title))
	// legend
	lx := labelW
	for _, s := range p.series {
		if len(p.series) < 2 {
			break
		}
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", lx, y+22, s.color, lx+14, y+31, html.EscapeString(s.label))
		lx += 100
	}
	maxV := 0.0
	minV := math.Inf(1)
	for _, s := range p.series {
		for _, v := range s.values {
			if !math.IsNaN(v) && v > 0 {
				maxV = math.Max(maxV, v)
				minV = math.Min(minV, v)
			}
		}
	}
	for _, l := range p.lines {
		maxV = math.Max(maxV, l.value)
	}
	if maxV == 0 {
		maxV = 1
	}
	lo := 0.0
	hi := niceCeil(maxV * 1.05)
	if p.log {
		lo = math.Pow(10, math.Floor(math.Log10(math.Max(minV, 1e-3))))
		hi = math.Pow(10, math.Ceil(math.Log10(maxV*1.01)))
	}
	xOf := func(v float64) float64 {
		if v <= lo {
			return labelW
		}
		if p.log {
			return labelW + plotW*(math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))
		}
		return labelW + plotW*(v-lo)/(hi-lo)
	}
	top := y + titleH
	rowH := len(p.series)*barH + rowGap
	bottom := top + len(names)*rowH
	// grid
	for _, tv := range ticks(lo, hi, p.log) {
		x := xOf(tv)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e5e5e5"/>`+"\n", x, top-4, x, bottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#666">%s</text>`+"\n", x, bottom+13, tickLabel(tv))
	}
	for i, name := range names {
		ry := top + i*rowH
		weight := "normal"
		if strings.HasPrefix(name, "dlock") {
			weight = "bold"
			fmt.Fprintf(b, `<rect x="2" y="%d" width="%d" height="%d" fill="#fff3d6"/>`+"\n", ry-3, chartWidth-4, rowH-1)
		}
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end" font-weight="%s">%s</text>`+"\n", labelW-8, ry+len(p.series)*barH/2+4, weight, html.EscapeString(name))
		for j, s := range p.series {
			v := s.values[i]
			by := ry + j*barH
			if math.IsNaN(v) {
				continue
			}
			x := xOf(v)
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", labelW, by, math.Max(x-labelW, 1), barH-2, s.color)
			fmt.Fprintf(b, `<text x="%.1f" y="%d" fill="#333">%s</text>`+"\n", x+4, by+barH-3, html.EscapeString(num(v)+p.unit))
		}
	}
	for i, l := range p.lines {
		x := xOf(l.value)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#c00" stroke-dasharray="4,3"/>`+"\n", x, top-6, x, bottom)
		// Alternate sides so that neighbouring labels do not overlap.
		anchor, dx := "start", 3.0
		if i%2 == 1 {
			anchor, dx = "end", -3.0
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%d" fill="#c00" text-anchor="%s">%s</text>`+"\n", x+dx, top-8, anchor, html.EscapeString(l.label+" "+num(l.value)))
	}
	return bottom + 16
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func ticks(lo, hi float64, log bool) []float64 {
	var t []float64
	if log {
		for v := lo; v <= hi*1.0001; v *= 10 {
			t = append(t, v)
		}
		return t
	}
	step := niceCeil(hi / 5)
	for v := lo; v <= hi*1.0001; v += step {
		t = append(t, v)
	}
	return t
}

func tickLabel(v float64) string {
	switch {
	case v >= 1000 && math.Mod(v, 1000) == 0:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.1fk", v/1000)
	case v >= 1:
		return fmt.Sprintf("%g", v)
	default:
		return fmt.Sprintf("%g", v)
	}
}
