//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// An error Redis raised in one of dlock's scripts (a key of another type
// at a lock's name, a write to a replica) is printed without the place in
// the script that Redis adds to it (" script: SHA, on @user_script:N."):
// it tells someone running dlock nothing.
func TestErrorLineWithoutScriptPlace(t *testing.T) {
	t.Parallel()
	url, _, rdb := adminServerAndConn(t)
	for _, key := range []string{"dlock:{wt}", "dlock:{wt}:semaphore"} {
		if err := rdb.Set(context.Background(), key, "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	const wrongType = ": key holds a value of the wrong type: WRONGTYPE Operation against a key holding the wrong kind of value"
	_, replica := redistest.StartReplicated(t)
	const readOnly = ": READONLY You can't write against a read only replica."
	for _, tc := range []struct {
		url  string
		args []string
		code int
		want string // the whole line
	}{
		{url, []string{"inspect", "wt"}, exitFailure, `dlock: inspect "wt"` + wrongType},
		{url, []string{"release", "--force", "wt"}, exitFailure, `dlock: force release "wt"` + wrongType},
		{url, []string{"release", "--force", "--capacity", "2", "--owner", "t", "wt"}, exitFailure, `dlock: semaphore force release "wt"` + wrongType},
		{url, []string{"run", "wt", "--", "true"}, exitFailure, `dlock: lock "wt"` + wrongType},
		{url, []string{"run", "--no-wait", "wt", "--", "true"}, exitFailure, `dlock: lock "wt"` + wrongType},
		{redisURL(replica.Addr()), []string{"run", "ro", "--", "true"}, exitUnavailable, `dlock: lock "ro"` + readOnly},
		{redisURL(replica.Addr()), []string{"run", "--capacity", "2", "ro", "--", "true"}, exitUnavailable, `dlock: semaphore "ro"` + readOnly},
	} {
		r := dlockRun(t, nil, append([]string{"--redis", tc.url}, tc.args...)...).want(t, tc.code)
		if got := lines(r.stderr); len(got) != 1 || got[0] != tc.want {
			t.Errorf("dlock %s: stderr %q, want the line %q", strings.Join(tc.args, " "), r.stderr, tc.want)
		}
	}
}

// Before Redis 7.0 the place in the script came before the error, and
// before a command's own error once more: errorLine drops both. A lock
// name that holds such text, quoted, is kept as it is.
func TestErrorLineWithoutRedis6ScriptPlace(t *testing.T) {
	t.Parallel()
	a := &app{}
	for _, tc := range []struct{ err, want string }{
		{`dlock: lock "k": key holds a value of the wrong type: ERR Error running script (call to f_37e84f263684a72eb0081d2fe7f41daf125b9d3d): @user_script:248: WRONGTYPE Operation against a key holding the wrong kind of value`,
			`lock "k": key holds a value of the wrong type: WRONGTYPE Operation against a key holding the wrong kind of value`},
		{`dlock: lock "k": ERR Error running script (call to f_aa6538e2a31da80c8855f1c9abed27fecad58e0c): @user_script:81: @user_script: 81: -READONLY You can't write against a read only replica.`,
			`lock "k": READONLY You can't write against a read only replica.`},
		{`dlock: lock "k": ERR Error running script (call to f_c6b4e2e0648ad7f22ac802e4cdb5fc9e28417f09): @user_script:1: user_script:1: attempt to compare number with nil`,
			`lock "k": attempt to compare number with nil`},
		{`dlock: lock "a script: aa6538e2a31da80c8855f1c9abed27fecad58e0c, on @user_script:1.": READONLY You can't write against a read only replica. script: aa6538e2a31da80c8855f1c9abed27fecad58e0c, on @user_script:81.`,
			`lock "a script: aa6538e2a31da80c8855f1c9abed27fecad58e0c, on @user_script:1.": READONLY You can't write against a read only replica.`},
	} {
		if got := a.errorLine(errors.New(tc.err)); got != tc.want {
			t.Errorf("errorLine(%q)\n = %q\nwant %q", tc.err, got, tc.want)
		}
	}
}

// A runtime error of Lua itself (a nil where a number was expected) has
// the place in the script before it too ("ERR user_script:1: "), as
// Redis gives it: dropped as well, and the same line as before Redis 7.0.
func TestErrorLineWithoutRuntimeErrorPlace(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	err := rdb.Eval(t.Context(), "return 1 < nil", nil).Err()
	if err == nil {
		t.Fatal("the script raised no error")
	}
	a := &app{}
	const want = `lock "k": attempt to compare number with nil`
	if got := a.errorLine(fmt.Errorf("dlock: lock %q: %w", "k", err)); got != want {
		t.Errorf("errorLine of %q\n = %q\nwant %q", err, got, want)
	}
}
