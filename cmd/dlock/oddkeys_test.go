package main

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestOddKeysInHumanOutput: a lock name with a newline or a byte 0xff
// (not UTF-8; text/tabwriter's escape character) must not garble the human
// output: list prints one name a line, list --long keeps its columns for
// every lock, and inspect shows one state, the lock's. Such a name is shown
// quoted as a Go string, and so is one that starts with '"', so that a
// quoted name is never another's.
func TestOddKeysInHumanOutput(t *testing.T) {
	t.Parallel()
	url, c := adminServer(t)
	keys := []string{`"q"`, "a\xffb", "nl\nstate     free", "z"} // as list sorts them
	fences := map[string]uint64{}
	for _, k := range keys {
		l, err := c.Lock(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		fences[k] = l.Fence()
	}

	r := dlockRun(t, nil, "--redis", url, "list").want(t, 0)
	want := []string{strconv.Quote(`"q"`), strconv.Quote("a\xffb"), strconv.Quote("nl\nstate     free"), "z"}
	if got := lines(r.stdout); !slices.Equal(got, want) {
		t.Errorf("list: %q, want %q", got, want)
	}

	r = dlockRun(t, nil, "--redis", url, "list", "--long").want(t, 0)
	got := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(got) != 1+len(keys) {
		t.Fatalf("list --long: %d lines for %d locks:\n%s", len(got), len(keys), r.stdout)
	}
	col := strings.Index(got[0], "FENCE")
	for _, k := range keys {
		fence := strconv.FormatUint(fences[k], 10)
		found := false
		for _, line := range got[1:] {
			if i := strings.Index(line, fence); i >= 0 {
				found = true
				if i != col || strings.Contains(line, "\t") {
					t.Errorf("list --long: lock %q out of its columns (fence at %d, FENCE at %d):\n%s", k, i, col, r.stdout)
				}
			}
		}
		if !found {
			t.Errorf("list --long: no row for lock %q:\n%s", k, r.stdout)
		}
	}

	r = dlockRun(t, nil, "--redis", url, "inspect", "nl\nstate     free").want(t, 0)
	var states []string
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(line, "state") {
			states = append(states, line)
		}
	}
	if len(states) != 1 || states[0] != "state     held" {
		t.Errorf("inspect of a held lock shows states %q:\n%s", states, r.stdout)
	}
}

// TestOddHolderInHumanOutput: the holder's client name is free text from
// whatever program took the lock (dlock.WithClientName), as a lock's name
// is. A newline in it must not forge a line of inspect's output, nor a tab
// or an escape sequence break list --long's
// columns: it is shown quoted, as an odd lock name is.
func TestOddHolderInHumanOutput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := redisURL(srv.Addr())
	for i, name := range []string{"job\nstate     free", "a\tb\x1b[2Jc"} {
		c, err := dlock.New(srv.Client(t), dlock.WithClientName(name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		key := "odd-holder-" + string(rune('a'+i))
		if _, err := c.Lock(context.Background(), key); err != nil {
			t.Fatal(err)
		}
		r := dlockRun(t, nil, "--redis", url, "inspect", key).want(t, 0)
		var states, holders []string
		for _, line := range strings.Split(r.stdout, "\n") {
			if strings.HasPrefix(line, "state") {
				states = append(states, line)
			}
			if strings.HasPrefix(line, "holder") {
				holders = append(holders, line)
			}
		}
		if len(states) != 1 || states[0] != "state     held" || len(holders) != 1 || strings.ContainsAny(holders[0], "\t\x1b") {
			t.Errorf("inspect of a lock held by client %q:\n%s", name, r.stdout)
		}
	}
	r := dlockRun(t, nil, "--redis", url, "list", "--long").want(t, 0)
	got := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(got) != 3 {
		t.Fatalf("list --long: %d lines for 2 locks:\n%s", len(got), r.stdout)
	}
	col := strings.Index(got[0], "HOLDER")
	for _, line := range got[1:] {
		if !strings.HasPrefix(line[col:], "pid ") || strings.ContainsAny(line, "\t\x1b") {
			t.Errorf("list --long: a row out of its columns (HOLDER at %d):\n%s", col, r.stdout)
		}
	}
}

// TestOddKeysInJSONOutput: JSON strings are UTF-8, and encoding/json
// writes each byte of a name that is not as U+FFFD: the operator would read
// another lock's name, and inspect or release --force that one. Such a name
// is written quoted as a Go string, as the human output shows it, and so
// is one that starts with '"', so that a quoted name is never another's.
func TestOddKeysInJSONOutput(t *testing.T) {
	t.Parallel()
	url, c := adminServer(t)
	keys := []string{`"q"`, "a\xffb", "z"} // as list sorts them
	want := []string{strconv.Quote(`"q"`), strconv.Quote("a\xffb"), "z"}
	for _, k := range keys {
		if _, err := c.Lock(context.Background(), k); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Semaphore(k, 1).Acquire(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
	}

	var names []string
	r := dlockRun(t, nil, "--redis", url, "list", "--json").want(t, 0)
	if err := json.Unmarshal([]byte(r.stdout), &names); err != nil || !slices.Equal(names, want) {
		t.Errorf("list --json = %q, %v; want %q", names, err, want)
	}
	var infos []dlock.LockInfo
	r = dlockRun(t, nil, "--redis", url, "list", "--long", "--json").want(t, 0)
	if err := json.Unmarshal([]byte(r.stdout), &infos); err != nil || len(infos) != len(keys) {
		t.Fatalf("list --long --json: %v\n%s", err, r.stdout)
	}
	var sems []dlock.SemaphoreInfo
	r = dlockRun(t, nil, "--redis", url, "list", "--kind", "semaphore", "--long", "--json").want(t, 0)
	if err := json.Unmarshal([]byte(r.stdout), &sems); err != nil || len(sems) != len(keys) {
		t.Fatalf("list --kind semaphore --long --json: %v\n%s", err, r.stdout)
	}
	for i, k := range keys {
		if infos[i].Key != want[i] || sems[i].Key != want[i] {
			t.Errorf("list --long --json: lock %q as %q, semaphore as %q; want %q", k, infos[i].Key, sems[i].Key, want[i])
		}
		var info dlock.LockInfo
		r = dlockRun(t, nil, "--redis", url, "inspect", "--json", k).want(t, 0)
		if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || info.Key != want[i] {
			t.Errorf("inspect --json %q: key %q, %v; want %q", k, info.Key, err, want[i])
		}
		var sem dlock.SemaphoreInfo
		r = dlockRun(t, nil, "--redis", url, "inspect", "--capacity", "1", "--json", k).want(t, 0)
		if err := json.Unmarshal([]byte(r.stdout), &sem); err != nil || sem.Key != want[i] {
			t.Errorf("inspect --capacity --json %q: key %q, %v; want %q", k, sem.Key, err, want[i])
		}
		var rep releaseReport
		r = dlockRun(t, nil, "--redis", url, "release", "--force", "--json", k).want(t, 0)
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Lock == nil || rep.Lock.Key != want[i] {
			t.Errorf("release --force --json %q: %v\n%s", k, err, r.stdout)
		}
	}
}

// TestOddOwnerInHumanOutput: a lock's owner token, as the holder's host and
// client, is written by whichever code took the lock; one made by other
// code may hold a newline. inspect and release --force show it quoted, so
// that it cannot forge a line ("state free") under a held lock.
func TestOddOwnerInHumanOutput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := redisURL(srv.Addr())
	owner := "tok\nstate     free"
	if err := srv.Client(t).HSet(context.Background(), "dlock:{odd-owner}", ":fence", "7", owner, "1").Err(); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"inspect", "odd-owner"}, {"release", "--force", "odd-owner"}} {
		r := dlockRun(t, nil, append([]string{"--redis", url}, args...)...).want(t, 0)
		var states []string
		for _, line := range strings.Split(r.stdout, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "state") {
				states = append(states, strings.TrimSpace(line))
			}
		}
		if len(states) != 1 || states[0] != "state     held" || !strings.Contains(r.stdout, strconv.Quote(owner)) {
			t.Errorf("dlock %s of a lock held by owner %q:\n%s", strings.Join(args, " "), owner, r.stdout)
		}
	}
}
