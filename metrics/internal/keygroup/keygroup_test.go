package keygroup

import (
	"strconv"
	"testing"
	"unicode/utf8"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDefault(t *testing.T) {
	for key, want := range map[string]string{
		"order:42":       "order",
		"report:daily:1": "report",
		"plain":          DefaultGroup,
		":odd":           DefaultGroup,
		"":               DefaultGroup,
	} {
		if got := Default(key); got != want {
			t.Errorf("Default(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestMapperCapsGroups(t *testing.T) {
	m := New(func(key string) string { return key }, 3)
	for i := range 10 {
		g := m.Group("k" + strconv.Itoa(i))
		if i < 3 && g != "k"+strconv.Itoa(i) || i >= 3 && g != OtherGroup {
			t.Errorf("group of key %d = %q", i, g)
		}
	}
	if g := m.Group("k1"); g != "k1" {
		t.Errorf("a seen group became %q", g)
	}
	if g := New(func(string) string { return "" }, 0).Group("x"); g != DefaultGroup {
		t.Errorf("empty group = %q, want %q", g, DefaultGroup)
	}
}

// Without a limit of its own (the metrics packages' WithMaxGroups unset),
// a Mapper keeps DefaultMax (100) groups, as the metrics docs promise.
func TestMapperDefaultCap(t *testing.T) {
	m := New(func(key string) string { return key }, 0)
	for i := range DefaultMax {
		if g := m.Group("k" + strconv.Itoa(i)); g != "k"+strconv.Itoa(i) {
			t.Fatalf("group %d of %d = %q", i+1, DefaultMax, g)
		}
	}
	if g := m.Group("one-more"); g != OtherGroup {
		t.Errorf("group %d = %q, want %q", DefaultMax+1, g, OtherGroup)
	}
	if DefaultMax != 100 {
		t.Errorf("DefaultMax = %d, documented as 100", DefaultMax)
	}
}

// Keys are any bytes; label values must be UTF-8 (Prometheus panics on
// others, inside the caller's Lock).
func TestGroupIsValidUTF8(t *testing.T) {
	m := New(Default, 10)
	if g := m.Group("\xff\xfe:42"); !utf8.ValidString(g) {
		t.Errorf("group %q is not valid UTF-8", g)
	}
}
