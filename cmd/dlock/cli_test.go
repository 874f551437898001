package main

import (
	"context"
	"slices"
	"strings"
	"testing"
)

func TestHelpOnEveryCommand(t *testing.T) {
	t.Parallel()
	for _, cmd := range [][]string{{}, {"run"}, {"inspect"}, {"list"}, {"release"}, {"demo"}, {"bench"}, {"version"}, {"completion"}, {"completion", "bash"}} {
		r := dlockRun(t, nil, append(cmd, "--help")...).want(t, 0)
		if !strings.Contains(r.stdout, "Usage:") {
			t.Errorf("dlock %s --help:\n%s", strings.Join(cmd, " "), r.stdout)
		}
	}
	r := dlockRun(t, nil, "run", "--help").want(t, 0)
	for _, want := range []string{"KEY -- COMMAND", "--no-wait", "--wait", "--grace", "DLOCK_FENCE", "--redis", "--ttl", "79"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("run --help lacks %q", want)
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := dlockRun(t, nil, "version").want(t, 0)
	if !strings.HasPrefix(r.stdout, "dlock ") || !strings.Contains(r.stdout, "go1.") {
		t.Errorf("version: %q", r.stdout)
	}
	if r2 := dlockRun(t, nil, "--version").want(t, 0); r2.stdout != r.stdout {
		t.Errorf("--version %q, version %q", r2.stdout, r.stdout)
	}
}

func TestCompletion(t *testing.T) {
	t.Parallel()
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		r := dlockRun(t, nil, "completion", shell).want(t, 0)
		if !strings.Contains(r.stdout, "dlock") || len(r.stdout) < 500 {
			t.Errorf("completion %s: %d bytes", shell, len(r.stdout))
		}
	}
	// Lock names complete from the locks held now.
	c := lockClient(t, shared.Addr())
	l, err := c.Lock(context.Background(), "complete-me:1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	r := dlockRun(t, nil, "__complete", "--redis", sharedURL(), "inspect", "complete-me").want(t, 0)
	if got := lines(r.stdout); len(got) != 2 || got[0] != "complete-me:1" || got[1] != ":4" {
		t.Errorf("completion of inspect complete-me: %q", got)
	}
	// With --capacity or --rwmutex, the names of those that have holders.
	p, err := c.Semaphore("complete-me:2", 2).Acquire(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Unlock(context.Background())
	for _, kind := range [][]string{{"--capacity", "2"}, {"--rwmutex"}} {
		args := append([]string{"__complete", "--redis", sharedURL(), "release", "--force"}, kind...)
		r := dlockRun(t, nil, append(args, "complete-me")...).want(t, 0)
		want := []string{"complete-me:2", ":4"}
		if kind[0] == "--rwmutex" {
			want = []string{":4"}
		}
		if got := lines(r.stdout); !slices.Equal(got, want) {
			t.Errorf("completion of release --force %v complete-me: %q, want %q", kind, got, want)
		}
	}
	// A URL every command rejects completes nothing (go-redis would panic).
	r = dlockRun(t, nil, "__complete", "--redis", sharedURL()+"?pool_size=-1", "inspect", "").want(t, 0)
	if got := lines(r.stdout); len(got) != 1 || got[0] != ":4" {
		t.Errorf("completion with pool_size=-1: %q, stderr %q", got, r.stderr)
	}
	// Commands complete without Redis.
	r = dlockRun(t, nil, "__complete", "ins").want(t, 0)
	if !strings.HasPrefix(r.stdout, "inspect\t") {
		t.Errorf("completion of ins: %q", r.stdout)
	}
}

// Shell completion prints one candidate a line, its description after a
// tab: a lock name with a newline or a tab would become other, wrong
// candidates. Such names are left out; the others still complete.
func TestCompletionSkipsNamesThatBreakTheProtocol(t *testing.T) {
	t.Parallel()
	url, c := adminServer(t)
	for _, key := range []string{"odd\nname", "odd\tname", "odd\x1b[2J", "odd name"} {
		if _, err := c.Lock(context.Background(), key); err != nil {
			t.Fatal(err)
		}
	}
	r := dlockRun(t, nil, "__complete", "--redis", url, "inspect", "odd").want(t, 0)
	if got := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n"); len(got) != 2 || got[0] != "odd name" || got[1] != ":4" {
		t.Errorf("completion of inspect odd: %q", r.stdout)
	}
}

// TestNodeAddressWithoutPort: a --cluster or --sentinel address is
// host:port (go-redis has no default port for them). One without a port
// is a usage error before connecting, with a line that names it, not "Redis
// unreachable" (exit 69) after a dial error or, for Sentinel, "context
// deadline exceeded" once the ping timeout has passed.
func TestNodeAddressWithoutPort(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster", "localhost", "list"}, `--cluster "localhost": an address must be host:port`},
		{[]string{"--cluster", shared.Addr() + ",", "inspect", "k"}, `--cluster "": an address must be host:port`},
		{[]string{"--sentinel-master", "m", "--sentinel", "localhost", "list"}, `--sentinel "localhost": an address must be host:port`},
		{[]string{"--sentinel-master", "m", "--sentinel", "localhost:notaport", "run", "k", "--", "true"}, `--sentinel "localhost:notaport": an address must be host:port`},
	} {
		r := dlockRun(t, nil, tc.args...)
		if got := lines(r.stderr); r.code != exitUsage || len(got) != 1 || !strings.Contains(got[0], tc.want) {
			t.Errorf("dlock %s: exit status %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), r.code, r.stderr, exitUsage, tc.want)
		}
	}
}

// TestHelpNamesInterruptedStatus: an interrupted wait exits 128+N (README,
// the package doc), and so does a COMMAND killed by signal N: the help of
// dlock and of dlock run, which list the exit statuses, must say so rather
// than leave it under "1 anything else".
func TestHelpNamesInterruptedStatus(t *testing.T) {
	t.Parallel()
	root := dlockRun(t, nil, "--help").want(t, 0)
	run := dlockRun(t, nil, "run", "--help").want(t, 0)
	for _, h := range []struct{ name, text string }{{"dlock --help", root.stdout}, {"dlock run --help", run.stdout}} {
		_, status, _ := strings.Cut(h.text, "Exit status:")
		status = strings.Join(strings.Fields(status), " ")
		if !strings.Contains(status, "128+N if signal N interrupted") && !strings.Contains(status, "128+N when signal N interrupted") {
			t.Errorf("%s: its exit statuses do not name 128+N for an interrupted wait:\n%s", h.name, status)
		}
	}
}

// version and completion never connect: they run whatever the connection
// settings say, so that `source <(dlock completion bash)` in a shell
// profile does not break on an unrelated, bad $DLOCK_REDIS_URL or flag.
func TestOfflineCommandsIgnoreConnectionSettings(t *testing.T) {
	t.Parallel()
	env := baseEnv("DLOCK_REDIS_URL=http://not-redis")
	for _, args := range [][]string{{"version"}, {"--ttl", "1ms", "version"}, {"completion", "bash"}} {
		r := dlockRun(t, env, args...).want(t, 0)
		if !strings.Contains(r.stdout, "dlock") {
			t.Errorf("dlock %s: stdout %q", strings.Join(args, " "), r.stdout)
		}
	}
	// A command that connects still refuses them.
	dlockRun(t, env, "list").want(t, exitUsage)
}

// The shell completion that `dlock completion bash` installs runs
// `dlock __complete ...` on every TAB: a $DLOCK_REDIS_URL that every
// command rejects must not break it any more than it breaks `completion`
// (TestOfflineCommandsIgnoreConnectionSettings). Commands still complete,
// and lock names complete from the server --redis names on the command
// line (completeKeys validates the settings itself).
func TestShellCompletionIgnoresBadEnvURL(t *testing.T) {
	t.Parallel()
	url, c := adminServer(t)
	l, err := c.Lock(context.Background(), "env-complete:1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	env := baseEnv("DLOCK_REDIS_URL=http://not-redis")
	r := dlockRun(t, env, "__complete", "ins").want(t, 0)
	if !strings.HasPrefix(r.stdout, "inspect\t") {
		t.Errorf("completion of ins: %q, stderr %q", r.stdout, r.stderr)
	}
	// Nor does `dlock help COMMAND` connect, any more than COMMAND --help.
	r = dlockRun(t, env, "help", "run").want(t, 0)
	if !strings.Contains(r.stdout, "Usage:") {
		t.Errorf("help run: %q, stderr %q", r.stdout, r.stderr)
	}
	r = dlockRun(t, env, "__complete", "--redis", url, "inspect", "env-complete").want(t, 0)
	if got := lines(r.stdout); len(got) != 2 || got[0] != "env-complete:1" || got[1] != ":4" {
		t.Errorf("completion of inspect env-complete: %q, stderr %q", got, r.stderr)
	}
}
