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

// leaseLeft is the lease a held lock has left, as list --long shows it.
// The library reads a lock's key without an expiry (made by hand, or by a
// broken client) as a TTL of 0: such a lock never frees itself, which
// "0s" would hide.
func leaseLeft(ttl time.Duration) string {
	if ttl <= 0 {
		return "no expiry"
	}
	return human(ttl)
}

// leaseText is leaseLeft in a sentence: "29.50s of lease left".
func leaseText(ttl time.Duration) string {
	if ttl <= 0 {
		return "no expiry: it never frees itself"
	}
	return human(ttl) + " of lease left"
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

// jsonKey is a lock name as the JSON output writes it. JSON strings are
// UTF-8: encoding/json would write each byte of a name that is not as
// U+FFFD, which names another lock. Such a name is quoted as a Go string,
// as keyText shows it, and so is one that starts with '"', so a quoted
// name is never another's.
func jsonKey(key string) string {
	if key != "" && key[0] != '"' && utf8.ValidString(key) {
		return key
	}
	return strconv.Quote(key)
}

// jsonKeys returns v, a value the admin commands print as JSON, with the
// lock names in it as jsonKey writes them; any other value as it is.
func jsonKeys(v any) any {
	lock := func(i *dlock.LockInfo) *dlock.LockInfo {
		if i == nil {
			return nil
		}
		c := *i
		c.Key = jsonKey(c.Key)
		return &c
	}
	sem := func(i *dlock.SemaphoreInfo) *dlock.SemaphoreInfo {
		if i == nil {
			return nil
		}
		c := *i
		c.Key = jsonKey(c.Key)
		return &c
	}
	switch v := v.(type) {
	case []string: // list's names
		out := make([]string, len(v))
		for i, k := range v {
			out[i] = jsonKey(k)
		}
		return out
	case *dlock.LockInfo:
		return lock(v)
	case *dlock.SemaphoreInfo:
		return sem(v)
	case []*dlock.LockInfo:
		out := make([]*dlock.LockInfo, len(v))
		for i := range v {
			out[i] = lock(v[i])
		}
		return out
	case []*dlock.SemaphoreInfo:
		out := make([]*dlock.SemaphoreInfo, len(v))
		for i := range v {
			out[i] = sem(v[i])
		}
		return out
	case releaseReport:
		v.Lock, v.Semaphore = lock(v.Lock), sem(v.Semaphore)
		return v
	}
	return v
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
