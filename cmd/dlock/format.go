package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dlock-go/dlock"
)

// human renders a duration for people: 3 significant digits at most.
func human(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.2fs", d.Seconds())
	default:
		return d.Round(time.Second).String()
	}
}

// keyText is a lock name as the human output shows it: as it is if it is
// printable UTF-8, else quoted as a Go string, so that a newline cannot
// split it over lines (and forge one) and a byte 0xff, text/tabwriter's
// escape character, cannot swallow the columns of list --long. A name that
// starts with '"' is quoted too, so a quoted name is never another's.
func keyText(key string) string {
	if key != "" && key[0] != '"' && utf8.ValidString(key) &&
		strings.IndexFunc(key, func(r rune) bool { return !strconv.IsPrint(r) }) < 0 {
		return key
	}
	return strconv.Quote(key)
}

// holderText describes a lock's holder in one phrase:
// `pid 4242 on web-1 (dlock run: "backup.sh")`. The host and client name,
// free text from whichever program took the lock, are shown as keyText
// shows a lock's name, so that they cannot forge a line or break a column.
func holderText(h dlock.Holder) string {
	h.Host, h.Client = textOrEmpty(h.Host), textOrEmpty(h.Client)
	var b strings.Builder
	switch {
	case h.PID != 0 && h.Host != "":
		fmt.Fprintf(&b, "pid %d on %s", h.PID, h.Host)
	case h.PID != 0:
		fmt.Fprintf(&b, "pid %d", h.PID)
	case h.Host != "":
		b.WriteString(h.Host)
	default:
		b.WriteString("an unknown holder")
	}
	var extra []string
	if h.Client != "" {
		extra = append(extra, h.Client)
	}
	if h.Data != "" {
		extra = append(extra, fmt.Sprintf("%q", h.Data))
	}
	if len(extra) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(extra, ": "))
	}
	return b.String()
}

// textOrEmpty is keyText of s, or "" for "".
func textOrEmpty(s string) string {
	if s == "" {
		return ""
	}
	return keyText(s)
}

// ago describes an instant relative to now: "3.20s ago".
func ago(t time.Time) string {
	if t.IsZero() {
		return "unknown"
	}
	return fmt.Sprintf("%s (%s ago)", t.UTC().Format(time.RFC3339Nano), human(time.Since(t)))
}
