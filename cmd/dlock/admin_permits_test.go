package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// semInspect reads the semaphore key of capacity permits with the library.
func semInspect(t *testing.T, c *dlock.Client, key string, capacity int64) *dlock.SemaphoreInfo {
	t.Helper()
	info, err := c.Semaphore(key, capacity).Inspect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func TestInspectPermits(t *testing.T) {
	t.Parallel()
	url, c := adminServer(t)
	ctx := context.Background()
	l, err := c.Semaphore("encoders", 3).Acquire(ctx, 2, dlock.WithMetadata("job 7"))
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()

	r := dlockRun(t, nil, "--redis", url, "inspect", "--capacity", "3", "encoders").want(t, 0)
	for _, want := range []string{
		"key       encoders",
		"kind      semaphore",
		"capacity  3",
		"in use    2",
		"waiters   0",
		"holders   1",
		"  owner     " + l.Token(),
		"  holder    pid " + strconv.Itoa(os.Getpid()) + " on " + host + ` (admin-test: "job 7")`,
		"  permits   2",
		"  fence     " + strconv.FormatUint(l.Fence(), 10),
		"  lease     ",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("inspect --capacity output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = dlockRun(t, nil, "--redis", url, "inspect", "--capacity", "3", "--json", "encoders").want(t, 0)
	var info dlock.SemaphoreInfo
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, r.stdout)
	}
	if info.Key != "encoders" || info.Kind != "semaphore" || info.Capacity != 3 || info.InUse != 2 || len(info.Holders) != 1 {
		t.Fatalf("inspect --capacity --json: %+v", info)
	}
	if h := info.Holders[0]; h.Owner != l.Token() || h.Permits != 2 || h.Fence != l.Fence() || h.Holder.Data != "job 7" || h.TTL <= 0 || h.TTL > dlock.DefaultTTL {
		t.Errorf("inspect --capacity --json holder: %+v", h)
	}

	w, err := c.RWMutex("doc").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r = dlockRun(t, nil, "--redis", url, "inspect", "--rwmutex", "doc").want(t, 0)
	for _, want := range []string{"kind      rwmutex", "holders   1", "  owner     " + w.Token(), "  mode      write"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("inspect --rwmutex output lacks %q:\n%s", want, r.stdout)
		}
	}
	// A lock of the same name is another thing.
	if r := dlockRun(t, nil, "--redis", url, "inspect", "doc").want(t, 0); !strings.Contains(r.stdout, "state     free") {
		t.Errorf("inspect of the lock doc:\n%s", r.stdout)
	}

	for _, args := range [][]string{
		{"--capacity", "0"},
		{"--capacity", "-1"},
		{"--capacity", strconv.FormatInt(dlock.MaxPermits+1, 10)},
		{"--capacity", "3", "--rwmutex"},
	} {
		dlockRun(t, nil, append([]string{"--redis", url, "inspect", "encoders"}, args...)...).want(t, exitUsage)
	}
}

// TestReleaseForcePermits removes the permits of a `dlock run --capacity`
// holder while another waits: the waiter gets them and runs, and the
// holder learns it lost them.
func TestReleaseForcePermits(t *testing.T) {
	t.Parallel()
	url, c := adminServer(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	env := baseEnv("LOG=" + log)
	holder := start(t, env, "--redis", url, "--ttl", "600ms", "run", "--capacity", "2", "--permits", "2", "--meta", "the holder", "pool", "--",
		"sh", "-c", `echo holder >> "$LOG"; sleep 1000`)
	waitUntil(t, 10*time.Second, "the holder to run", func() bool { return fileText(log) == "holder\n" })
	waiter := start(t, env, "--redis", url, "run", "--capacity", "2", "pool", "--", "sh", "-c", `echo waiter >> "$LOG"`)
	waitUntil(t, 10*time.Second, "the waiter to queue", func() bool { return semInspect(t, c, "pool", 2).Waiters == 1 })
	before := semInspect(t, c, "pool", 2).Holders[0]

	r := dlockRun(t, nil, "--redis", url, "release", "--force", "--capacity", "2", "pool").want(t, exitUsage)
	if !strings.Contains(r.stderr, "--owner") {
		t.Errorf("release of permits without --owner: %q", r.stderr)
	}
	r = dlockRun(t, nil, "--redis", url, "release", "--force", "--capacity", "2", "--owner", before.Owner, "pool").want(t, 0)
	for _, want := range []string{
		"released the permits of owner " + before.Owner + ` in semaphore "pool"; they were:`,
		`(dlock run: "the holder")`,
		"  permits   2",
		"  fence     " + strconv.FormatUint(before.Fence, 10),
		"1 waiters were queued",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("release output lacks %q:\n%s", want, r.stdout)
		}
	}
	checkHandedOver(t, holder, waiter, log)
	// The holder lost permits, not a lock, and says so.
	for _, want := range []string{`lost the permits of semaphore "pool"`, `permits of semaphore "pool" were lost while the command ran`} {
		if !strings.Contains(holder.stderr.String(), want) {
			t.Errorf("holder's stderr lacks %q:\n%s", want, holder.stderr.String())
		}
	}
	if strings.Contains(holder.stderr.String(), `lock "pool"`) {
		t.Errorf("holder's stderr speaks of a lock:\n%s", holder.stderr.String())
	}
	// Each line names the semaphore once, and still gives the cause.
	for _, line := range lines(holder.stderr.String()) {
		if strings.Count(line, `"pool"`) > 1 || strings.Contains(line, "lost") && !strings.Contains(line, "(permits lost: ") {
			t.Errorf("holder's stderr line names the semaphore more than once, or lacks the cause: %q", line)
		}
	}

	r = dlockRun(t, nil, "--redis", url, "release", "--force", "--capacity", "2", "--owner", before.Owner, "pool").want(t, exitFailure)
	if got := lines(r.stderr); len(got) != 1 || !strings.Contains(got[0], "nothing was removed") {
		t.Errorf("release of an owner that holds nothing: %q", r.stderr)
	}

	l, err := c.RWMutex("pool").RLock(context.Background(), dlock.WithMetadata("json"))
	if err != nil {
		t.Fatal(err)
	}
	r = dlockRun(t, nil, "--redis", url, "release", "--force", "--rwmutex", "--owner", l.Token(), "--json", "pool").want(t, 0)
	var rep releaseReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("release --json: %v\n%s", err, r.stdout)
	}
	if !rep.Released || rep.Lock != nil || rep.Semaphore == nil || rep.Semaphore.Kind != "rwmutex" || rep.Holder == nil ||
		rep.Holder.Fence != l.Fence() || rep.Holder.Holder.Data != "json" {
		t.Errorf("release --json: %+v", rep)
	}
	if info, err := c.RWMutex("pool").Inspect(context.Background()); err != nil || len(info.Holders) != 0 {
		t.Errorf("still held after release --force: %+v, %v", info, err)
	}
	dlockRun(t, nil, "--redis", url, "release", "--force", "--rwmutex", "--owner", ":state", "pool").want(t, exitUsage)
}

// A lock's release --force with --owner removes only that owner's hold.
func TestReleaseForceLockOwner(t *testing.T) {
	t.Parallel()
	url, c := adminServer(t)
	l, err := c.Lock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	r := dlockRun(t, nil, "--redis", url, "release", "--force", "--owner", "0123456789abcdef0123456789abcdef", "k").want(t, exitFailure)
	if !strings.Contains(r.stderr, "nothing was removed") || !inspect(t, c, "k").Held {
		t.Errorf("release --owner of another token removed the lock: %q", r.stderr)
	}
	dlockRun(t, nil, "--redis", url, "release", "--force", "--owner", l.Token(), "k").want(t, 0)
	if inspect(t, c, "k").Held {
		t.Error("still held after release --force --owner of its holder")
	}
}

// Other data at a semaphore's name: inspect and release --force say wrong
// type, status 1.
func TestAdminPermitsWrongType(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := redisURL(srv.Addr())
	if err := srv.Client(t).HSet(context.Background(), "dlock:{foreign}:semaphore", "user", "alice").Err(); err != nil {
		t.Fatal(err)
	}
	r := dlockRun(t, nil, "--redis", url, "inspect", "--capacity", "2", "foreign").want(t, exitFailure)
	if !strings.Contains(r.stderr, "wrong type") {
		t.Errorf("inspect of a foreign hash: %q", r.stderr)
	}
	dlockRun(t, nil, "--redis", url, "release", "--force", "--capacity", "2", "--owner", "user", "foreign").want(t, exitFailure)
}

// list --kind lists the semaphores or RWMutexes that have holders, each
// kind apart from the others and from the locks; --long inspects each and
// leaves out a name with no live holder (here a holder whose lease ran
// out) and another program's hash at a semaphore's name, which SCAN cannot
// tell from a semaphore.
func TestListKinds(t *testing.T) {
	t.Parallel()
	url, c, rdb := adminServerAndConn(t)
	ctx := context.Background()
	take := func(l *dlock.Lock, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	take(c.Lock(ctx, "enc"))
	take(c.Semaphore("enc", 3).Acquire(ctx, 2))
	take(c.Semaphore("enc", 3).Acquire(ctx, 1))
	take(c.Semaphore("jobs", 5).Acquire(ctx, 1))
	take(c.RWMutex("doc").Lock(ctx))
	take(c.RWMutex("cfg").RLock(ctx))
	take(c.RWMutex("cfg").RLock(ctx))
	if err := rdb.HSet(ctx, "dlock:{ghost}:semaphore", "00000000000000000000000000000000", "1 1 3 7 0 {}").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, "dlock:{foreign}:semaphore", "user", "alice").Err(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"enc"}},
		{[]string{"--kind", "lock"}, []string{"enc"}},
		{[]string{"--kind", "semaphore"}, []string{"enc", "foreign", "ghost", "jobs"}},
		{[]string{"--kind", "semaphore", "[ej]*"}, []string{"enc", "jobs"}},
		{[]string{"--kind", "rwmutex"}, []string{"cfg", "doc"}},
		{[]string{"--kind", "rwmutex", "d*"}, []string{"doc"}},
	} {
		r := dlockRun(t, nil, append([]string{"--redis", url, "list"}, tc.args...)...).want(t, 0)
		if got := lines(r.stdout); !slices.Equal(got, tc.want) {
			t.Errorf("list %q: %q, want %q", tc.args, got, tc.want)
		}
	}

	r := dlockRun(t, nil, "--redis", url, "list", "--kind", "semaphore", "--long").want(t, 0)
	if got, want := table(r.stdout), [][]string{
		{"KEY", "IN", "USE", "CAPACITY", "HOLDERS", "WAITERS"},
		{"enc", "3", "3", "2", "0"},
		{"jobs", "1", "5", "1", "0"},
	}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("list --kind semaphore --long:\n%s", r.stdout)
	}
	r = dlockRun(t, nil, "--redis", url, "list", "--kind", "rwmutex", "--long").want(t, 0)
	if got, want := table(r.stdout), [][]string{
		{"KEY", "MODE", "HOLDERS", "WAITERS"},
		{"cfg", "read", "2", "0"},
		{"doc", "write", "1", "0"},
	}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("list --kind rwmutex --long:\n%s", r.stdout)
	}
	r = dlockRun(t, nil, "--redis", url, "list", "--kind", "semaphore", "--long", "--json").want(t, 0)
	var infos []dlock.SemaphoreInfo
	if err := json.Unmarshal([]byte(r.stdout), &infos); err != nil || len(infos) != 2 {
		t.Fatalf("list --kind semaphore --long --json: %v\n%s", err, r.stdout)
	}
	if i := infos[0]; i.Key != "enc" || i.Kind != "semaphore" || i.Capacity != 3 || i.InUse != 3 || len(i.Holders) != 2 || i.Holders[0].Holder.Client != "admin-test" {
		t.Errorf("list --kind semaphore --long --json: %+v", i)
	}
	r = dlockRun(t, nil, "--redis", url, "list", "--kind", "rwmutex", "--long", "--json", "nothing*").want(t, 0)
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("list --kind rwmutex --long --json of none: %q", r.stdout)
	}

	for _, bad := range []string{"locks", "Semaphore", ""} {
		r := dlockRun(t, nil, "--redis", url, "list", "--kind", bad).want(t, exitUsage)
		if !strings.Contains(r.stderr, "--kind") {
			t.Errorf("list --kind %q: %q", bad, r.stderr)
		}
	}
}

// table splits output into its non-empty lines' fields.
func table(s string) [][]string {
	var out [][]string
	for _, l := range lines(s) {
		out = append(out, strings.Fields(l))
	}
	return out
}

// --capacity M says KEY is a semaphore of M permits, as for run: inspect
// and release --force refuse an M other than the one the holders were
// granted under (status 64, nothing removed), as run does, and say which
// one that is, where they showed, or took permits from, another
// semaphore than the operator named.
func TestAdminPermitsCapacityMismatch(t *testing.T) {
	t.Parallel()
	url, c := adminServer(t)
	l, err := c.Semaphore("encoders", 3).Acquire(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"inspect", "--capacity", "5", "encoders"},
		{"inspect", "--capacity", "5", "--json", "encoders"},
		{"release", "--force", "--capacity", "5", "--owner", l.Token(), "encoders"},
	} {
		r := dlockRun(t, nil, append([]string{"--redis", url}, args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "capacity 3") || r.stdout != "" {
			t.Errorf("dlock %s: status %d\nstdout:\n%s\nstderr: %s\nwant %d and the holders' capacity", strings.Join(args, " "), r.code, r.stdout, r.stderr, exitUsage)
		}
	}
	if info := semInspect(t, c, "encoders", 3); len(info.Holders) != 1 {
		t.Errorf("release --force --capacity 5 removed a holder of capacity 3: %+v", info)
	}
	// Nobody holds permits: M is the capacity, as run would take it.
	r := dlockRun(t, nil, "--redis", url, "inspect", "--capacity", "5", "idle").want(t, 0)
	if !strings.Contains(r.stdout, "capacity  5") {
		t.Errorf("inspect --capacity 5 of an idle semaphore:\n%s", r.stdout)
	}
}

// Other code's data at a semaphore's waiters name does not hide the
// semaphore's holders: list --long shows it and names the trouble on
// stderr (status 1), inspect prints it (status 1), and release --force
// takes a holder's permits away, leaving the other code's data as it was
// (and, refusing an owner that holds none, says only that).
func TestAdminPermitsForeignDataAtWaiters(t *testing.T) {
	t.Parallel()
	url, c, rdb := adminServerAndConn(t)
	ctx := context.Background()
	l, err := c.Semaphore("enc", 2).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	other := "dlock:{enc}:semaphore:waiters"
	if err := rdb.RPush(ctx, other, "other data").Err(); err != nil {
		t.Fatal(err)
	}
	reported := func(what string, r result) {
		t.Helper()
		if r.code != exitFailure || !strings.Contains(r.stderr, "wrong type") || !strings.Contains(r.stderr, `"enc"`) {
			t.Errorf("%s: status %d, stderr %q; want %d and the wrong type", what, r.code, r.stderr, exitFailure)
		}
	}
	r := dlockRun(t, nil, "--redis", url, "list", "--long", "--kind", "semaphore")
	if got := lines(r.stdout); len(got) != 2 || !strings.HasPrefix(got[1], "enc ") {
		t.Errorf("list --long --kind semaphore does not show the semaphore:\n%s", r.stdout)
	}
	reported("list --long", r)
	r = dlockRun(t, nil, "--redis", url, "list", "--long", "--kind", "semaphore", "--json")
	var infos []dlock.SemaphoreInfo
	if err := json.Unmarshal([]byte(r.stdout), &infos); err != nil || len(infos) != 1 || len(infos[0].Holders) != 1 {
		t.Errorf("list --long --kind semaphore --json: %v\n%s", err, r.stdout)
	}
	reported("list --long --json", r)
	r = dlockRun(t, nil, "--redis", url, "inspect", "--capacity", "2", "enc")
	if !strings.Contains(r.stdout, "owner     "+l.Token()) {
		t.Errorf("inspect does not show the holder:\n%s", r.stdout)
	}
	reported("inspect", r)
	// Nothing removed: nothing left as it is to tell of, only the refusal.
	r = dlockRun(t, nil, "--redis", url, "release", "--force", "--capacity", "2", "--owner", "nobody", "enc").want(t, exitFailure)
	if got := lines(r.stderr); len(got) != 1 || !strings.Contains(got[0], `semaphore "enc" has no holder with owner nobody; nothing was removed`) {
		t.Errorf("release --force of an owner that holds nothing: stderr %q", r.stderr)
	}
	r = dlockRun(t, nil, "--redis", url, "release", "--force", "--capacity", "2", "--owner", l.Token(), "enc")
	if r.code != 0 || !strings.Contains(r.stdout, "owner     "+l.Token()) {
		t.Errorf("release --force: status %d\nstdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, `semaphore force release "enc"`) || strings.Contains(r.stderr, "inspect") {
		t.Errorf("release --force does not name the release in its note: %q", r.stderr)
	}
	if n := rdb.Exists(ctx, "dlock:{enc}:semaphore").Val(); n != 0 {
		t.Error("the holder is still there after release --force")
	}
	if got := rdb.LRange(ctx, other, 0, -1).Val(); !slices.Equal(got, []string{"other data"}) {
		t.Errorf("the other code's data is now %q", got)
	}
}
