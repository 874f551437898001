package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dlock-go/dlock"
)

// Environment variables read when the matching flag is not given.
const (
	envRedisURL         = "DLOCK_REDIS_URL"
	envSentinelPassword = "DLOCK_SENTINEL_PASSWORD"
	defaultRedisURL     = "redis://localhost:6379"
)

// pingTimeout bounds the first PING that tells a command whether Redis can
// be reached at all.
const pingTimeout = 5 * time.Second

// connFlags are the global flags that say which Redis to use and how locks
// are named and leased.
type connFlags struct {
	url            string
	sentinelMaster string
	sentinels      []string
	cluster        []string
	prefix         string
	ttl            time.Duration
	// poolSize is the connection pool size the command needs at least
	// (bench); the URL's pool_size wins if given.
	poolSize int
	// bound, if not 0, is each request's deadline (requestBound), kept
	// even in the middle of a read: a command that must end on a hung
	// server (inspect, list, release; run until it holds the lock) sets
	// it, whatever the URL's read_timeout lets go-redis wait.
	bound time.Duration
	// boundMarked keeps bound to the requests made with a context from
	// boundRequests (run's, until it holds the lock). The others keep to
	// the deadline their context carries, which go-redis then honours
	// even in the middle of a read (ContextTimeoutEnabled): the library's
	// own for a renewal or a release.
	boundMarked bool
}

func (f *connFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.url, "redis", "", "Redis URL: redis://[user:password@]host:port[/db] or rediss:// for TLS (default $"+envRedisURL+", else "+defaultRedisURL+")")
	fs.StringVar(&f.sentinelMaster, "sentinel-master", "", "Sentinel master name (with --sentinel)")
	fs.StringSliceVar(&f.sentinels, "sentinel", nil, "Sentinel addresses host:port,... (with --sentinel-master)")
	fs.StringSliceVar(&f.cluster, "cluster", nil, "Redis Cluster node addresses host:port,...")
	fs.StringVar(&f.prefix, "prefix", dlock.DefaultPrefix, "prefix of every Redis key dlock uses; clients that must exclude each other need the same")
	fs.DurationVar(&f.ttl, "ttl", dlock.DefaultTTL, "lease of a lock: renewed every ttl/3 while held, so a crashed holder frees it within ttl")
}

// rawURL is the URL given by flag or environment, or "".
func (f *connFlags) rawURL() string {
	if f.url != "" {
		return f.url
	}
	return os.Getenv(envRedisURL)
}

// configured reports whether the user said which Redis to use, by flag or
// environment (the demo starts its own server otherwise).
func (f *connFlags) configured() bool {
	return f.rawURL() != "" || len(f.cluster) > 0 || f.sentinelMaster != "" || len(f.sentinels) > 0
}

// validate checks the flags that every command shares, before anything
// connects.
func (f *connFlags) validate(cmd *cobra.Command) error {
	if f.ttl < dlock.MinTTL || f.ttl > dlock.MaxTTL {
		return usagef("--ttl %v: must be between %v and %v", f.ttl, dlock.MinTTL, dlock.MaxTTL)
	}
	if f.prefix == "" {
		return usagef("--prefix must not be empty")
	}
	if (f.sentinelMaster == "") != (len(f.sentinels) == 0) {
		return usagef("--sentinel-master and --sentinel go together")
	}
	if f.sentinelMaster != "" && len(f.cluster) > 0 {
		return usagef("use either --sentinel or --cluster, not both")
	}
	if err := checkAddrs("--sentinel", f.sentinels); err != nil {
		return err
	}
	if err := checkAddrs("--cluster", f.cluster); err != nil {
		return err
	}
	if raw := f.rawURL(); raw != "" {
		o, err := redis.ParseURL(raw)
		if err != nil {
			return badURL(raw, err)
		}
		if o.PoolSize < 0 {
			// go-redis panics on it (makechan: size out of range).
			return usagef("invalid Redis URL %s: pool_size %d must not be negative", redactURL(raw), o.PoolSize)
		}
		for _, n := range []struct {
			name  string
			value int
		}{
			{"pool_size", o.PoolSize}, {"min_idle_conns", o.MinIdleConns}, {"max_idle_conns", o.MaxIdleConns},
			{"max_active_conns", o.MaxActiveConns}, {"pipeline_pool_size", o.PipelinePoolSize},
		} {
			if n.value < math.MinInt32 || n.value > math.MaxInt32 {
				// go-redis makes its pools with int32 sizes, and panics.
				return usagef("invalid Redis URL %s: %s %d is out of range", redactURL(raw), n.name, n.value)
			}
		}
		if o.MaxRetries < -1 {
			// go-redis then sends no pipeline at all, and reports no error.
			return usagef("invalid Redis URL %s: max_retries %d must be -1 (no retries) or more", redactURL(raw), o.MaxRetries)
		}
		if len(f.cluster) > 0 && o.DB != 0 {
			return usagef("invalid Redis URL %s: database %d: Redis Cluster has database 0 only", redactURL(raw), o.DB)
		}
	}
	return nil
}

// checkAddrs refuses a --sentinel or --cluster address that is not
// host:port: go-redis has no default port for them, and would report a
// dial error (or, for Sentinel, only a timeout), or dial localhost:6379 for
// an empty one ("--cluster a:7000,"). One with credentials in it is
// refused without printing them.
func checkAddrs(flag string, addrs []string) error {
	for _, addr := range addrs {
		if strings.Contains(addr, "@") {
			// Credentials (a URL pasted here): never printed, nor left
			// for a dial error to quote as the host it could not find.
			return usagef("%s %q: an address must be host:port (credentials go in the --redis URL)", flag, addrText(addr))
		}
		_, port, err := net.SplitHostPort(addr)
		if err == nil {
			_, err = strconv.ParseUint(port, 10, 16)
		}
		if err != nil {
			return usagef("%s %q: an address must be host:port", flag, addr)
		}
	}
	return nil
}

// addrText is a --sentinel or --cluster address with an '@' in it as an
// error shows it: its scheme, if any, and host, not what comes between.
func addrText(addr string) string {
	at := strings.LastIndex(addr, "@")
	if scheme, _, ok := strings.Cut(addr[:at], "://"); ok {
		return scheme + "://" + redacted + addr[at:]
	}
	return redacted + addr[at:]
}

// badURL is the usage error for a URL that does not parse. A *url.Error
// quotes the URL, so only its cause is kept. That cause may quote part of
// the password (a '/', '?' or '#' in it ends the host early: `invalid port
// ":secret" after host`), so with a password the cause is that of the URL
// with the password redacted, or else the password is what is wrong.
//
// A '/' or '?' after a password that starts like a port (digits) does not
// make url.Parse fail: it takes the rest of the password for the path or
// query, which go-redis refuses, quoting it. So a password with such a
// character is what is wrong whichever refused the URL.
func badURL(raw string, err error) error {
	ue, isURLErr := errors.AsType[*url.Error](err)
	if isURLErr {
		err = ue.Err
	}
	if userinfo, pw := splitUserinfo(raw); pw != "" && (isURLErr || strings.ContainsAny(userinfo, "/?#")) {
		err = errors.New("the user or password has characters that must be percent-encoded (such as / ? # %)")
		if _, rerr := url.Parse(redactURL(raw)); rerr != nil {
			if ue, ok := errors.AsType[*url.Error](rerr); ok {
				err = ue.Err
			}
		}
	}
	return usagef("invalid Redis URL %s: %v", redactURL(raw), err)
}

// redisClient returns a go-redis client for the configured deployment and a
// description of it without secrets. It does not connect.
func (f *connFlags) redisClient() (redis.UniversalClient, string, error) {
	raw := f.rawURL()
	if raw == "" {
		raw = defaultRedisURL
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		return nil, "", badURL(raw, err)
	}
	if o.PoolSize == 0 {
		o.PoolSize = f.poolSize
	}
	// The URL's host (localhost if it has none) is the name ParseURL
	// checks the server's certificate against. With --cluster or
	// --sentinel it names no node: each node's certificate is checked
	// against the address it is reached at.
	nodesTLS := o.TLSConfig
	if nodesTLS != nil {
		nodesTLS = nodesTLS.Clone()
		nodesTLS.ServerName = ""
	}
	// Without it go-redis keeps to a context's deadline only between
	// tries, and a read waits as long as read_timeout says (or forever).
	bounded := f.bound > 0
	u := &redis.UniversalOptions{
		Username:              o.Username,
		Password:              o.Password,
		TLSConfig:             nodesTLS,
		DialTimeout:           o.DialTimeout,
		ReadTimeout:           o.ReadTimeout,
		WriteTimeout:          o.WriteTimeout,
		PoolSize:              o.PoolSize,
		MaxRetries:            o.MaxRetries,
		Protocol:              o.Protocol,
		ContextTimeoutEnabled: bounded,
	}
	var rdb redis.UniversalClient
	var desc string
	switch {
	case len(f.cluster) > 0:
		u.Addrs = f.cluster
		cc := redis.NewClusterClient(u.Cluster())
		if bounded {
			// Each master's own client too: list's SCAN goes to each
			// directly (ForEachMaster), not through the cluster's hooks.
			cc.OnNewNode(func(n *redis.Client) { n.AddHook(requestBound{f.bound, f.boundMarked}) })
		}
		rdb, desc = cc, "Redis Cluster "+strings.Join(f.cluster, ",")
	case f.sentinelMaster != "":
		u.Addrs, u.MasterName, u.DB = f.sentinels, f.sentinelMaster, o.DB
		u.SentinelPassword = os.Getenv(envSentinelPassword)
		rdb = redis.NewFailoverClient(u.Failover())
		desc = fmt.Sprintf("master %q via Sentinel %s", f.sentinelMaster, strings.Join(f.sentinels, ","))
	default:
		desc = o.Addr
		if o.DB != 0 {
			desc += fmt.Sprintf(" db %d", o.DB)
		}
		o.ContextTimeoutEnabled = o.ContextTimeoutEnabled || bounded
		rdb = redis.NewClient(o)
	}
	if bounded {
		rdb.AddHook(requestBound{f.bound, f.boundMarked})
	}
	return rdb, desc, nil
}

// conn is an open connection: the go-redis client and a dlock Client on it.
type conn struct {
	rdb   redis.UniversalClient
	locks *dlock.Client
	desc  string // where, without secrets
}

// Close closes the dlock Client, then the Redis client.
func (c *conn) Close() {
	_ = c.locks.Close()
	_ = c.rdb.Close()
}

// connect opens the configured Redis, checks that it answers, and returns
// a dlock Client on it named name (shown in the holder metadata), with opts
// besides the global flags'.
func (a *app) connect(ctx context.Context, name string, opts ...dlock.Option) (*conn, error) {
	rdb, desc, err := a.conn.redisClient()
	if err != nil {
		return nil, err
	}
	// New checks the options (--prefix, --replica-timeout) without a round
	// trip: bad input is a usage error whether or not Redis can be reached.
	opts = append([]dlock.Option{dlock.WithPrefix(a.conn.prefix), dlock.WithClientName(name), dlock.WithLogger(a.log)}, opts...)
	locks, err := dlock.New(rdb, opts...)
	if err != nil {
		_ = rdb.Close()
		return nil, usagef("%v", err)
	}
	c := &conn{rdb: rdb, locks: locks, desc: desc}
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	plainText := a.conn.watchPlainText(pctx, cancel)
	if err := rdb.Ping(pctx).Err(); err != nil {
		c.Close()
		addr, looked := plainText()
		if a.conn.loneUserinfo() && strings.Contains(err.Error(), "NOAUTH") {
			return nil, exitf(exitUnavailable, "cannot reach Redis at %s: %v (the URL gives a user name but no password: for a password alone, write redis://:PASSWORD@host)", desc, err)
		}
		if !looked {
			addr = a.conn.plainTextServer()
		}
		// Not when a signal ended the wait (run, demo, bench): that is
		// what the caller says.
		if addr != "" && !errors.Is(ctx.Err(), context.Canceled) {
			return nil, exitf(exitUnavailable, "cannot reach Redis at %s: no answer to the TLS handshake: %s speaks plain text, so use redis://%s; rediss:// is for a TLS port", desc, addr, addr)
		}
		return nil, exitf(exitUnavailable, "cannot reach Redis at %s: %v", desc, err)
	}
	return c, nil
}

// checkKey refuses a lock name the library would refuse, before anything
// connects: bad input is a usage error whether or not Redis can be reached.
func checkKey(key string) error {
	switch {
	case key == "":
		return usagef("%v: empty key", dlock.ErrInvalidKey)
	case len(key) > dlock.MaxKeyLen:
		return usagef("%v: key longer than %d bytes", dlock.ErrInvalidKey, dlock.MaxKeyLen)
	}
	return nil
}

// redisFailure maps an error from the library to an exit status: bad input
// is a usage error, everything else means Redis failed.
func redisFailure(err error) error {
	switch {
	case errors.Is(err, dlock.ErrInvalidKey), errors.Is(err, dlock.ErrInvalidTTL), errors.Is(err, dlock.ErrInvalidOption):
		return usagef("%v", err)
	case errors.Is(err, dlock.ErrWrongType):
		return exitf(exitFailure, "%v", err)
	default:
		return exitf(exitUnavailable, "%v", err)
	}
}
