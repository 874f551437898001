package main

import (
	"context"
	"testing"
)

// The demo's fenced resource accepts a write whose fence is at least the
// highest it has seen (the same holder may write again) and rejects a
// smaller one, comparing fences as numbers: 10 comes after 9.
func TestGuardedWriteComparesFences(t *testing.T) {
	t.Parallel()
	rdb := shared.Client(t)
	ctx := context.Background()
	const resource = "guarded-write-test"
	if err := rdb.Del(ctx, resource).Err(); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		fence string
		ok    bool
		seen  string
	}{
		{"9", true, "9"},
		{"9", true, "9"},
		{"8", false, "9"},
		{"10", true, "10"},
		{"9", false, "10"},
		{"11", true, "11"},
	} {
		ok, seen, err := guardedWrite(ctx, rdb, resource, w.fence, "v"+w.fence)
		if err != nil || ok != w.ok || seen != w.seen {
			t.Fatalf("write with fence %s = %v, %q, %v; want %v, %q", w.fence, ok, seen, err, w.ok, w.seen)
		}
	}
	if got := rdb.HGet(ctx, resource, "value").Val(); got != "v11" {
		t.Errorf("value %q, want the last accepted write's", got)
	}
}
