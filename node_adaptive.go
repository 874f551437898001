package dlock

import (
	"context"
	"math"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/internal/backend"
)

// The node backend keeps the hold-time statistics of WithAdaptiveTTL in a
// small hash per key, prefix{key}:stats, beside the lock's other keys (same
// hash tag, so on a cluster it lives on the lock's node). Only adaptive
// locks read or write it: other locks cost nothing more.

var holdStatsScript = loadScript("holdstats")

// statsTTL is how long a key's statistics outlive their last update: a lock
// nobody took for that long starts again from its fixed lease.
const statsTTL = 7 * 24 * time.Hour

var _ backend.HoldRecorder = (*node)(nil)

func statsKey(k *lockKeys) string { return k.lock + ":stats" }

// HoldStats reads the key's statistics in one round trip.
func (n *node) HoldStats(ctx context.Context, key string) (backend.HoldStats, error) {
	v, err := n.rdb.HMGet(ctx, statsKey(n.keys(key)), "mean_us", "dev_us", "n").Result()
	if err != nil {
		return backend.HoldStats{}, err
	}
	var s backend.HoldStats
	mean, ok1 := asInt(v[0])
	dev, ok2 := asInt(v[1])
	samples, ok3 := asInt(v[2])
	if ok1 && ok2 && ok3 && samples > 0 {
		s = backend.HoldStats{Mean: micros(mean), Dev: micros(dev), Samples: samples}
	}
	return s, nil
}

// ReleaseRecording releases like Release (replica acknowledgement and
// all), then records the hold time: the lock is handed over first, and the
// caller waits one more round trip. A failed recording is only logged.
func (n *node) ReleaseRecording(ctx context.Context, l *backend.Lease, level int, held time.Duration) (int64, error) {
	left, err := n.Release(ctx, l, level)
	if err != nil {
		return left, err
	}
	stats := statsKey(leaseKeys(l))
	if rerr := holdStatsScript.Run(ctx, n.rdb, []string{stats}, max(held.Microseconds(), 0), backend.Millis(statsTTL)).Err(); rerr != nil {
		// Only locks take WithAdaptiveTTL: the kind is "lock".
		n.log.Debug("dlock: recording the hold time failed", "key", l.Key, "kind", kindOf(nil), "error", rerr)
	}
	return left, nil
}

// micros converts microseconds on record to a Duration, within
// [0, math.MaxInt64]: a value past what a Duration holds (a hash written
// by hand) must not wrap around to a short or negative hold time, and so
// to the shortest lease instead of the cap.
func micros(us int64) time.Duration {
	if us > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(max(us, 0)) * time.Microsecond
}

// asInt reads an HMGET value.
func asInt(v any) (int64, bool) {
	s, ok := v.(string)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
