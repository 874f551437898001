package main

import (
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// secret is the password in the URLs of these tests: it must never be
// printed.
const secret = "S3cret-pw"

// TestBadInput checks that each bad input ends dlock with one clear line on
// stderr, a non-zero status, and no password in the output.
func TestBadInput(t *testing.T) {
	t.Parallel()
	stopped := redistest.Start(t)
	stopped.Stop(t) // a port where nothing listens any more
	guarded := redistest.Start(t, redistest.WithConfig("requirepass", "the-right-one"))

	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
		want string // in the stderr line
	}{
		{"bad URL scheme", nil, []string{"--redis", "http://u:" + secret + "@localhost", "inspect", "k"}, exitUsage, "invalid Redis URL http://u:xxxxx@localhost"},
		{"unparsable URL", nil, []string{"--redis", "redis://u:" + secret + "@[::1", "list"}, exitUsage, "invalid Redis URL redis://u:xxxxx@[::1"},
		{"bad database", nil, []string{"--redis", "redis://:" + secret + "@localhost/x", "list"}, exitUsage, `invalid database number: "x"`},
		// go-redis parses it, then panics making the pool.
		{"negative pool size", nil, []string{"--redis", "redis://:" + secret + "@localhost?pool_size=-1", "run", "k", "--", "true"}, exitUsage, "pool_size -1 must not be negative"},
		{"database with --cluster", nil, []string{"--redis", "redis://localhost/2", "--cluster", "localhost:7000", "inspect", "k"}, exitUsage, "database 2: Redis Cluster has database 0 only"},
		{"negative pool size with --cluster", nil, []string{"--redis", "redis://?pool_size=-1", "--cluster", "localhost:7000", "inspect", "k"}, exitUsage, "pool_size -1 must not be negative"},
		// go-redis takes them as int32: past that, it panics making the pool.
		{"pool size past int32", nil, []string{"--redis", "redis://:" + secret + "@localhost?pool_size=2147483648", "run", "k", "--", "true"}, exitUsage, "pool_size 2147483648 is out of range"},
		{"pool size past int32 with --cluster", nil, []string{"--redis", "redis://?pool_size=2147483648", "--cluster", "localhost:7000", "inspect", "k"}, exitUsage, "pool_size 2147483648 is out of range"},
		{"min idle conns past int32", nil, []string{"--redis", "redis://localhost?min_idle_conns=-2147483649", "inspect", "k"}, exitUsage, "min_idle_conns -2147483649 is out of range"},
		{"max idle conns past int32", nil, []string{"--redis", "redis://localhost?max_idle_conns=2147483648", "inspect", "k"}, exitUsage, "max_idle_conns 2147483648 is out of range"},
		{"max active conns past int32", nil, []string{"--redis", "redis://localhost?max_active_conns=2147483648", "list"}, exitUsage, "max_active_conns 2147483648 is out of range"},
		{"pipeline pool size past int32", nil, []string{"--redis", "redis://localhost?pipeline_pool_size=2147483648", "list"}, exitUsage, "pipeline_pool_size 2147483648 is out of range"},
		// go-redis parses it, then sends no pipeline at all and says nothing.
		{"max retries below -1", nil, []string{"--redis", "redis://:" + secret + "@localhost?max_retries=-2", "inspect", "k"}, exitUsage, "max_retries -2 must be -1 (no retries) or more"},
		{"unknown completion shell", nil, []string{"completion", "fsh"}, exitUsage, `unknown command "fsh" for "dlock completion"`},
		{"bad URL in environment", []string{"DLOCK_REDIS_URL=redis://u:" + secret + "@localhost/1/2"}, []string{"list"}, exitUsage, "invalid Redis URL"},
		{"bad duration", nil, []string{"--ttl", "5x", "inspect", "k"}, exitUsage, `invalid argument "5x" for "--ttl" flag`},
		{"ttl too short", nil, []string{"--ttl", "1ms", "inspect", "k"}, exitUsage, "--ttl 1ms: must be between 10ms and 24h0m0s"},
		{"bad wait", nil, []string{"run", "--wait", "soon", "k", "--", "true"}, exitUsage, `invalid argument "soon" for "--wait" flag`},
		{"negative wait", nil, []string{"run", "--wait", "-1s", "k", "--", "true"}, exitUsage, "--wait -1s: must not be negative"},
		{"bad grace", nil, []string{"run", "--grace", "1y", "k", "--", "true"}, exitUsage, `invalid argument "1y" for "--grace" flag`},
		{"permits without capacity", nil, []string{"run", "--permits", "2", "k", "--", "true"}, exitUsage, "--permits needs --capacity"},
		{"negative capacity", nil, []string{"run", "--capacity", "-1", "k", "--", "true"}, exitUsage, "--capacity -1: must be between 1 and 1099511627776"},
		{"capacity 0", nil, []string{"run", "--capacity", "0", "k", "--", "true"}, exitUsage, "--capacity 0: must be between 1 and 1099511627776"},
		// pflag says strconv's "value out of range" for a number past int64.
		{"capacity past int64", nil, []string{"run", "--capacity", "99999999999999999999", "k", "--", "true"}, exitUsage, "dlock: --capacity 99999999999999999999: must be between 1 and 1099511627776 (see 'dlock run --help')"},
		{"negative capacity past int64", nil, []string{"inspect", "--capacity", "-99999999999999999999", "k"}, exitUsage, "dlock: --capacity -99999999999999999999: must be between 1 and 1099511627776 (see 'dlock inspect --help')"},
		{"capacity past int64, missing --", nil, []string{"run", "--capacity", "99999999999999999999", "k", "true"}, exitUsage, "(--capacity 99999999999999999999: must be between 1 and 1099511627776)"},
		{"permits past int64", nil, []string{"run", "--capacity", "2", "--permits", "99999999999999999999", "k", "--", "true"}, exitUsage, "dlock: --permits 99999999999999999999: out of range (see 'dlock run --help')"},
		{"capacity not a number", nil, []string{"release", "--force", "--capacity", "3x", "k"}, exitUsage, `dlock: invalid argument "3x" for "--capacity" flag: not a whole number (see 'dlock release --help')`},
		// Renewals are cut at their own 5 s, whatever the URL's read_timeout.
		{"replica timeout past a renewal's", nil, []string{"--redis", redisURL(stopped.Addr()) + "?read_timeout=10s", "run", "--replica-ack", "1", "--replica-timeout", "5s", "--ttl", "30s", "k", "--", "true"}, exitUsage, "--replica-timeout 5s: at most 3.65s (with the 100ms Redis may add, 3/4 of the 5s each renewal is given)"},
		{"more permits than capacity", nil, []string{"run", "--capacity", "2", "--permits", "3", "k", "--", "true"}, exitUsage, "--permits 3: must be between 1 and --capacity 2"},
		{"0 permits", nil, []string{"run", "--capacity", "2", "--permits", "0", "k", "--", "true"}, exitUsage, "--permits 0: must be between 1 and --capacity 2"},
		{"missing --", nil, []string{"run", "k", "echo", "hi"}, exitUsage, "missing -- before the command"},
		{"missing -- with a flag", nil, []string{"run", "k", "sh", "-c", "true"}, exitUsage, "missing -- before the command"},
		{"missing command", nil, []string{"run", "k", "--"}, exitUsage, "missing COMMAND after --"},
		{"missing key", nil, []string{"run", "--", "true"}, exitUsage, "missing KEY"},
		{"unknown command", nil, []string{"lock", "k"}, exitUsage, `unknown command "lock"`},
		{"unknown help topic", nil, []string{"help", "nosuch"}, exitUsage, `unknown help topic "nosuch" for "dlock"`},
		{"unknown help subtopic", nil, []string{"help", "run", "nosuch"}, exitUsage, `unknown help topic "run nosuch" for "dlock"`},
		{"unreachable", nil, []string{"--redis", "redis://:" + secret + "@" + stopped.Addr(), "run", "k", "--", "echo", "ran"}, exitUnavailable, "cannot reach Redis at " + stopped.Addr()},
		{"unreachable from environment", []string{"DLOCK_REDIS_URL=redis://u:" + secret + "@" + stopped.Addr()}, []string{"inspect", "k"}, exitUnavailable, "cannot reach Redis"},
		// Bad input is a usage error whether or not Redis can be reached.
		{"bad prefix, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "--prefix", "a{b", "inspect", "k"}, exitUsage, "prefix contains '{'"},
		{"empty key, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "inspect", ""}, exitUsage, "invalid key: empty key"},
		{"long key, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "release", "--force", strings.Repeat("k", 1025)}, exitUsage, "invalid key: key longer than 1024 bytes"},
		{"empty run key, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "run", "", "--", "echo", "ran"}, exitUsage, "invalid key: empty key"},
		{"long meta, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "run", "--meta", strings.Repeat("m", 1025), "k", "--", "echo", "ran"}, exitUsage, "invalid option: metadata longer than 1024 bytes"},
		{"meta not UTF-8, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "run", "--meta", "job \xff", "k", "--", "echo", "ran"}, exitUsage, "invalid option: metadata is not valid UTF-8"},
		{"longest meta, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "run", "--meta", strings.Repeat("m", 1024), "k", "--", "echo", "ran"}, exitUnavailable, "cannot reach Redis at " + stopped.Addr()},
		{"bench past the connection pool's size, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "bench", "--goroutines", "3000000000"}, exitUsage, "--goroutines 3000000000: at most 1000"},
		// Each a goroutine (with a connection) or a process of its own.
		{"bench goroutines past the bound, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "bench", "--goroutines", "1001"}, exitUsage, "--goroutines 1001: at most 1000"},
		{"bench workers past the bound, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "bench", "--workers", "100000"}, exitUsage, "--workers 100000: at most 1000"},
		{"demo workers past the bound, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "demo", "--workers", "65"}, exitUsage, "--workers 65: at most 64"},
		{"bench shorter than measurable", nil, []string{"--redis", redisURL(stopped.Addr()), "bench", "--duration", "1ns"}, exitUsage, "--duration 1ns: at least 100ms"},
		{"bench hold past its duration", nil, []string{"--redis", redisURL(stopped.Addr()), "bench", "--hold", "2s", "--duration", "1s"}, exitUsage, "--hold 2s: must be shorter than --duration 1s"},
		{"open class in list pattern, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "list", "a["}, exitUsage, `list pattern "a[" leaves a character class open`},
		{"permits' release without --owner, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "release", "--force", "--capacity", "3", "k"}, exitUsage, "needs --owner TOKEN"},
		{"max hold and grace past the longest duration", nil, []string{"--redis", redisURL(stopped.Addr()), "run", "--max-hold", "2562047h", "--grace", "2562047h", "k", "--", "echo", "ran"}, exitUsage, "--max-hold 2562047h0m0s with --grace 2562047h0m0s: too long"},
		// redis-cli reads a lone userinfo as the password; go-redis as a
		// user name. Either way it is not printed.
		{"lone userinfo in bad URL", nil, []string{"--redis", "http://" + secret + "@localhost", "inspect", "k"}, exitUsage, "invalid Redis URL http://xxxxx@localhost"},
		{"lone userinfo, password required", nil, []string{"--redis", "redis://" + secret + "@" + guarded.Addr(), "list"}, exitUnavailable, "NOAUTH Authentication required. (the URL gives a user name but no password: for a password alone, write redis://:PASSWORD@host)"},
		{"wrong password", nil, []string{"--redis", "redis://:" + secret + "@" + guarded.Addr(), "list"}, exitUnavailable, "WRONGPASS"},
		// Other clients (redis-py, ioredis) take the password from the
		// query too; go-redis refuses it, quoting the URL.
		{"password in the query", nil, []string{"--redis", "redis://localhost:6379/0?password=" + secret, "inspect", "k"}, exitUsage, "invalid Redis URL redis://localhost:6379/0?password=xxxxx: redis: unexpected option: password"},
		{"password in the query of an unparsable URL", nil, []string{"--redis", "redis://[::1?db=0&password=" + secret, "list"}, exitUsage, "invalid Redis URL redis://[::1?db=0&password=xxxxx"},
		{"sentinel password in the query", []string{"DLOCK_REDIS_URL=redis://localhost?sentinel_password=" + url.QueryEscape(secret+"/x")}, []string{"list"}, exitUsage, "invalid Redis URL redis://localhost?sentinel_password=xxxxx"},
		{"sentinel without master", nil, []string{"--sentinel", "localhost:26379", "list"}, exitUsage, "--sentinel-master and --sentinel go together"},
		// Flags that do not fit together, or values out of their range, are
		// refused before connecting; a value at the edge of its range is not.
		{"sentinel and cluster", nil, []string{"--sentinel-master", "m", "--sentinel", "localhost:26379", "--cluster", "localhost:7000", "list"}, exitUsage, "use either --sentinel or --cluster, not both"},
		{"cluster port past 65535", nil, []string{"--cluster", "localhost:65536", "list"}, exitUsage, `--cluster "localhost:65536": an address must be host:port`},
		{"negative grace, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "run", "--grace", "-1s", "k", "--", "echo", "ran"}, exitUsage, "--grace -1s: must not be negative"},
		{"negative max hold, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "run", "--max-hold", "-1s", "k", "--", "echo", "ran"}, exitUsage, "--max-hold -1s: must not be negative"},
		{"no-wait with wait, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "run", "--no-wait", "--wait", "1s", "k", "--", "echo", "ran"}, exitUsage, "use either --no-wait or --wait, not both"},
		{"two keys before --, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "run", "k", "echo", "--", "ran"}, exitUsage, "run takes one KEY before --, got 2 arguments"},
		{"lease shorter than 3 replica waits, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "--ttl", "3299ms", "run", "--replica-ack", "1", "k", "--", "echo", "ran"}, exitUsage, "--ttl 3.299s: must be at least 3 x (--replica-timeout 1s + 100ms)"},
		{"lease of 3 replica waits, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "--ttl", "3300ms", "run", "--replica-ack", "1", "k", "--", "echo", "ran"}, exitUnavailable, "cannot reach Redis at " + stopped.Addr()},
		{"longest replica timeout, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()) + "?read_timeout=10s", "run", "--replica-ack", "1", "--replica-timeout", "3650ms", "k", "--", "echo", "ran"}, exitUnavailable, "cannot reach Redis at " + stopped.Addr()},
		{"permits as many as capacity, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "run", "--capacity", "2", "--permits", "2", "k", "--", "echo", "ran"}, exitUnavailable, "cannot reach Redis at " + stopped.Addr()},
		{"capacity past the most permits, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "inspect", "--capacity", "1099511627777", "k"}, exitUsage, "--capacity 1099511627777: must be between 1 and 1099511627776"},
		{"capacity with rwmutex, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "inspect", "--capacity", "2", "--rwmutex", "k"}, exitUsage, "use either --capacity or --rwmutex, not both"},
		{"two list patterns, Redis unreachable", nil, []string{"--redis", redisURL(stopped.Addr()), "list", "a*", "b*"}, exitUsage, "list takes at most one PATTERN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := dlockRun(t, baseEnv(tc.env...), tc.args...).want(t, tc.code)
			if got := lines(r.stderr); len(got) != 1 || !strings.HasPrefix(got[0], "dlock: ") || !strings.Contains(got[0], tc.want) {
				t.Errorf("stderr %q: want one line with %q", r.stderr, tc.want)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q", r.stdout)
			}
			if strings.Contains(r.stderr+r.stdout, secret) {
				t.Errorf("the password was printed: %q", r.stderr)
			}
		})
	}
}

// README: "Passwords never appear in output or errors", -v's log included,
// which is not redacted as errors are: what it logs (go-redis's messages,
// the library's key, kind, fence and errors, whose Redis replies and
// network errors do not quote credentials) carries none. The URLs are
// checked before anything is logged.
func TestVerboseLogCarriesNoPassword(t *testing.T) {
	t.Parallel()
	guarded := redistest.Start(t, redistest.WithConfig("requirepass", secret))
	for _, tc := range []struct {
		url  string
		args []string
		code int
	}{
		{"redis://default:" + secret + "@" + guarded.Addr(), []string{"run", "k", "--", "true"}, 0},
		{"redis://:" + secret + "@" + guarded.Addr(), []string{"run", "--capacity", "2", "k", "--", "true"}, 0},
		{"redis://default:" + secret + "x@" + guarded.Addr(), []string{"list"}, exitUnavailable},
		{"redis://" + secret + "@" + guarded.Addr(), []string{"inspect", "k"}, exitUnavailable},
	} {
		r := dlockRun(t, nil, append([]string{"-v", "--redis", tc.url}, tc.args...)...).want(t, tc.code)
		if tc.code == 0 && !strings.Contains(r.stderr, "level=DEBUG") {
			t.Errorf("dlock -v %s: nothing logged: %q", strings.Join(tc.args, " "), r.stderr)
		}
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("dlock -v %s: the password was printed:\n%s", strings.Join(tc.args, " "), r.stderr)
		}
	}
}

// README: "Passwords never appear in output or errors." A password with a
// '/', '?' or '#' (base64 has '/') that is not percent-encoded ends the
// URL's host early, and url.Parse's error quotes what it took for the port:
// the password up to that character. The error must say what is wrong
// without any of it; percent-encoded, the same password works.
func TestBadURLDoesNotPrintPassword(t *testing.T) {
	t.Parallel()
	for _, sep := range []string{"/", "?", "#"} {
		pw := secret + sep + "tail"
		srv := redistest.Start(t, redistest.WithConfig("requirepass", pw))
		for _, user := range []string{"", "default"} {
			raw := "redis://" + user + ":" + pw + "@" + srv.Addr()
			r := dlockRun(t, nil, "--redis", raw, "inspect", "k").want(t, exitUsage)
			if got := lines(r.stderr); len(got) != 1 || !strings.Contains(got[0], "invalid Redis URL redis://"+user+":xxxxx@"+srv.Addr()) {
				t.Errorf("%s: stderr %q", raw, r.stderr)
			}
			if strings.Contains(r.stderr+r.stdout, secret) {
				t.Errorf("%s: part of the password was printed: %q", raw, r.stderr)
			}
			escaped := "redis://" + user + ":" + url.QueryEscape(pw) + "@" + srv.Addr()
			dlockRun(t, nil, "--redis", escaped, "inspect", "k").want(t, 0)
		}
	}
}

// As TestBadURLDoesNotPrintPassword, but with the part of the password
// before the '/' or '?' all digits: url.Parse then takes it for a port and
// accepts the URL, and the rest of the password for the path or query,
// which go-redis refuses quoting it (`invalid database number
// "S3cret-pw@host"`, `unexpected option: S3cret-pw@host`).
func TestBadURLDoesNotPrintPasswordAfterAPortLikeStart(t *testing.T) {
	t.Parallel()
	for _, sep := range []string{"/", "?"} {
		for _, user := range []string{"", "default"} {
			raw := "redis://" + user + ":6379" + sep + secret + "@localhost:6379"
			r := dlockRun(t, nil, "--redis", raw, "inspect", "k").want(t, exitUsage)
			if strings.Contains(r.stderr+r.stdout, secret) {
				t.Errorf("%s: part of the password was printed: %q", raw, r.stderr)
			}
		}
	}
}

// The one-line error names the lock the user gave, as given: the lock
// name is quoted (%q), and neither the "dlock: " a library error starts
// with nor the collapsing of whitespace runs into one line may change it,
// or `release --force 'dlock: x'` reports on lock "x", another lock.
func TestErrorLineKeepsOddKeyNames(t *testing.T) {
	t.Parallel()
	url, _ := adminServer(t)
	for _, key := range []string{"dlock: nightly", "a  b"} {
		r := dlockRun(t, nil, "--redis", url, "release", "--force", key).want(t, exitFailure)
		want := "lock " + strconv.Quote(key) + " is not held"
		if got := lines(r.stderr); len(got) != 1 || !strings.Contains(got[0], want) {
			t.Errorf("release --force %q: stderr %q, want one line with %q", key, r.stderr, want)
		}
	}
}

// A lone userinfo is redacted as a password (redis-cli reads it so), but
// go-redis reads it as a user name, and redis://default@host (Redis's
// default user) connects to a server without a password. Redacting it
// wherever it appears then misnames the lock in the one-line error, which
// must name the lock the user gave (TestErrorLineKeepsOddKeyNames): only
// the URL's userinfo is the secret.
func TestLoneUserinfoRedactedInURLOnly(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := "redis://default@" + srv.Addr()
	r := dlockRun(t, nil, "--redis", url, "release", "--force", "default-job").want(t, exitFailure)
	if want := `lock "default-job" is not held`; !strings.Contains(r.stderr, want) {
		t.Errorf("release --force default-job with %s: stderr %q, want %q", url, r.stderr, want)
	}
	// The URL itself is still printed without it.
	r = dlockRun(t, nil, "--redis", "http://default@localhost", "inspect", "default-job").want(t, exitUsage)
	if strings.Contains(r.stderr, "default@") || !strings.Contains(r.stderr, "http://xxxxx@localhost") {
		t.Errorf("bad URL with a lone userinfo: stderr %q", r.stderr)
	}
}

// A --cluster or --sentinel address with credentials in it (a URL pasted
// there, or user:password@host:port) is a usage error whose line names the
// address without them: the password belongs in the --redis URL, and must
// not be printed from here either, nor reach a dial error that quotes the
// host it could not look up ("lookup secret@host: no such host").
func TestNodeAddressDoesNotPrintPassword(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ addr, want string }{
		{"redis://:" + secret + "@127.0.0.1:6379", `"redis://xxxxx@127.0.0.1:6379"`},
		{"rediss://default:" + secret + "@127.0.0.1:6379", `"rediss://xxxxx@127.0.0.1:6379"`},
		{"default:" + secret + "@127.0.0.1:6379", `"xxxxx@127.0.0.1:6379"`},
		{secret + "@127.0.0.1:6379", `"xxxxx@127.0.0.1:6379"`},
	} {
		for _, args := range [][]string{
			{"--cluster", tc.addr, "list"},
			{"--sentinel-master", "m", "--sentinel", "127.0.0.1:26379," + tc.addr, "inspect", "k"},
		} {
			r := dlockRun(t, nil, args...)
			if got := lines(r.stderr); r.code != exitUsage || len(got) != 1 || !strings.Contains(got[0], tc.want) {
				t.Errorf("dlock %s: exit status %d, stderr %q; want %d and %s", strings.Join(args, " "), r.code, r.stderr, exitUsage, tc.want)
			}
			if strings.Contains(r.stderr+r.stdout, secret) {
				t.Errorf("dlock %s: the password was printed: %q", strings.Join(args, " "), r.stderr)
			}
		}
	}
}
