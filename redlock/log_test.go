package redlock_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testutil"
)

// logRecord is one record of a recordLog.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]slog.Value
}

// recordLog is a log handler that keeps every record.
type recordLog struct {
	mu   sync.Mutex
	recs []logRecord
}

func (h *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordLog) WithGroup(string) slog.Handler            { return h }

func (h *recordLog) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]slog.Value{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, rec)
	return nil
}

// records returns the records of msg at level.
func (h *recordLog) records(level slog.Level, msg string) []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []logRecord
	for _, r := range h.recs {
		if r.level == level && r.msg == msg {
			out = append(out, r)
		}
	}
	return out
}

// With a majority of nodes down and many locks held, the renewals that
// fail alike are one warning per round, as on one Redis, though each
// lock's error names its lock: an outage must not log a warning per lock.
func TestOutageWarnsPerRoundNotPerLock(t *testing.T) {
	cl := startCluster(t, 3)
	logs := &recordLog{}
	c := cl.locker(t, dlock.WithLogger(slog.New(logs)))
	const held = 50
	locks := make([]*dlock.Lock, held)
	for i := range locks {
		locks[i] = mustLock(t, c, fmt.Sprintf("outage:%d", i), dlock.WithTTL(time.Second))
	}
	cl.srvs[1].Stop(t)
	cl.srvs[2].Stop(t)
	for _, l := range locks {
		testutil.Receive(t, l.Done(), 5*time.Second, "the lock's end")
	}
	warns := logs.records(slog.LevelWarn, "dlock: renewal failed")
	named := 0
	for _, r := range warns {
		named += int(r.attrs["locks"].Int64())
	}
	if named < held || len(warns)*5 > held {
		t.Errorf("%d warnings of failed renewals naming %d locks, for %d locks held; want one per round, naming each lock once", len(warns), named, held)
	}
}

// A release after a failed attempt that a node refused names the lock as
// every other record does: by the name the caller gave, not its Redis key.
func TestFailedAttemptReleaseRecordNamesTheLock(t *testing.T) {
	cl := startCluster(t, 3)
	logs := &recordLog{}
	c := cl.locker(t, dlock.WithLogger(slog.New(logs)))
	cl.srvs[1].Stop(t)
	cl.srvs[2].Stop(t)
	if _, err := c.TryLock(context.Background(), "named"); err == nil {
		t.Fatal("TryLock with a majority of nodes down succeeded")
	}
	const msg = "redlock: release after a failed attempt failed; the hold expires with its lease"
	var recs []logRecord
	waitUntil(t, 5*time.Second, "the failed releases logged", func() bool {
		recs = logs.records(slog.LevelDebug, msg)
		return len(recs) > 0
	})
	for _, r := range recs {
		if key := r.attrs["key"].String(); key != "named" || r.attrs["node"].String() == "" || r.attrs["error"].Any() == nil {
			t.Errorf("record %v; want key named, the node and the error", r.attrs)
		}
	}
}
