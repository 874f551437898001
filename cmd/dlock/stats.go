//go:build unix

package main

import (
	"math"
	"slices"
	"time"
)

// durations summarises a sample of durations.
type durations []time.Duration

// pct returns the p-th percentile (0 < p <= 100), nearest-rank, or 0 for an
// empty sample. It sorts the sample.
func (d durations) pct(p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(math.Ceil(float64(len(d))*p/100)) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// max returns the largest duration, or 0.
func (d durations) max() time.Duration {
	if len(d) == 0 {
		return 0
	}
	return slices.Max(d)
}

// summary renders "p50 X, p99 Y, max Z".
func (d durations) summary() string {
	return "p50 " + human(d.pct(50)) + ", p99 " + human(d.pct(99)) + ", max " + human(d.max())
}
