// Package keygroup maps lock keys to a bounded set of groups, the label
// the metrics packages use instead of the raw key.
package keygroup

import (
	"strings"
	"sync"
	"unicode/utf8"
)

// Names used when a key maps to no group, or to one past the limit.
const (
	DefaultGroup = "default"
	OtherGroup   = "other"
)

// DefaultMax is the default limit on distinct groups.
const DefaultMax = 100

// Default maps a key to its text before the first ':' ("order:42" ->
// "order"), or to DefaultGroup if it has no ':' or starts with one.
func Default(key string) string {
	if i := strings.IndexByte(key, ':'); i > 0 {
		return key[:i]
	}
	return DefaultGroup
}

// Mapper maps keys to groups with a function, and caps the number of
// distinct groups: once max groups have been seen, new ones are reported
// as OtherGroup, so a function that leaks ids into its groups cannot blow
// up the number of time series. It is safe for concurrent use.
type Mapper struct {
	fn  func(key string) string
	max int

	mu   sync.RWMutex
	seen map[string]struct{}
}

// New returns a Mapper using fn (Default if nil) and at most max groups
// (DefaultMax if max <= 0).
func New(fn func(key string) string, max int) *Mapper {
	if fn == nil {
		fn = Default
	}
	if max <= 0 {
		max = DefaultMax
	}
	return &Mapper{fn: fn, max: max, seen: make(map[string]struct{})}
}

// Group returns key's group.
func (m *Mapper) Group(key string) string {
	g := m.fn(key)
	if g == "" {
		g = DefaultGroup
	}
	if !utf8.ValidString(g) { // keys are any bytes; label values must be UTF-8
		g = strings.ToValidUTF8(g, "\uFFFD")
	}
	m.mu.RLock()
	_, ok := m.seen[g]
	m.mu.RUnlock()
	if ok {
		return g
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.seen[g]; ok {
		return g
	}
	if len(m.seen) >= m.max {
		return OtherGroup
	}
	m.seen[g] = struct{}{}
	return g
}
