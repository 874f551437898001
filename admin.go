package dlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
)

// LockInfo is what Inspect reads about a lock.
type LockInfo struct {
	Key        string        `json:"key"`         // the lock's name, as given to Inspect
	Held       bool          `json:"held"`        // a token holds it now
	TTL        time.Duration `json:"ttl_ns"`      // remaining lease; 0 if free or without expiry
	Fence      uint64        `json:"fence"`       // the holder's fence, or the last one issued if free
	Owner      string        `json:"owner"`       // the holder's token
	HoldCount  int           `json:"hold_count"`  // reentrant holds
	Holder     Holder        `json:"holder"`      // who took it
	AcquiredAt time.Time     `json:"acquired_at"` // server time of the grant
	Waiters    int64         `json:"waiters"`     // queued waiters whose entries have not expired
}

// Inspect reads a lock's state for operators, in one script. It does
// not take or change anything. Like the other operator calls, it needs a
// single deployment: on a Client made by redlock.New it returns an error
// wrapping errors.ErrUnsupported.
//
// Other data than a lock's at key's name is an error wrapping
// ErrWrongType, with a nil LockInfo. Other data at the names the lock
// keeps its fence counter or its waiters under is one too, but the lock
// is still read and returned with it: an operator sees (and
// ForceRelease may remove) the holder, whose lock is sound. Waiters (and
// a free lock's Fence) then read as 0.
func (c *Client) Inspect(ctx context.Context, key string) (*LockInfo, error) {
	n, err := c.admin(key)
	if err != nil {
		return nil, err
	}
	k := n.keys(key)
	v, err := followFailover(ctx, n.rdb, k.lock, func() *redis.Cmd {
		return inspectScript.Run(ctx, n.rdb, k.all())
	}).Slice()
	if err == nil && len(v) != 5 {
		err = fmt.Errorf("inspect script replied %v", v)
	}
	if err != nil {
		return nil, redisError("inspect", key, err)
	}
	hash, _ := v[0].([]any)
	pttl, _ := v[1].(int64)
	fence, _ := v[2].(string)
	waiters, _ := v[3].(int64)
	info := &LockInfo{Key: key, Waiters: waiters}
	info.Fence, _ = strconv.ParseUint(fence, 10, 64)
	for i := 0; i+1 < len(hash); i += 2 {
		field, _ := hash[i].(string)
		v, _ := hash[i+1].(string)
		switch field {
		case ":fence":
			info.Fence, _ = strconv.ParseUint(v, 10, 64)
		case ":meta":
			_ = json.Unmarshal([]byte(v), &info.Holder)
		case ":ext": // the last Extend's number (lua/extend.lua)
		case ":at":
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
				info.AcquiredAt = time.UnixMilli(ms)
			}
		default:
			info.Owner = field
			info.HoldCount, _ = strconv.Atoi(v)
			info.Held = true
		}
	}
	if info.Held && pttl > 0 {
		info.TTL = time.Duration(pttl) * time.Millisecond
	}
	if other, _ := v[4].(string); other != "" {
		return info, fmt.Errorf("dlock: inspect %q: %w: other data at the lock's %s name", key, ErrWrongType, strings.ReplaceAll(other, " ", " and "))
	}
	return info, nil
}

// ForceReleaseOption configures ForceRelease.
type ForceReleaseOption func(*forceReleaseConfig)

type forceReleaseConfig struct {
	owner    string
	ownerSet bool
}

// WithExpectedOwner makes ForceRelease remove the lock only if token (the
// LockInfo.Owner that Inspect read) holds it, checked by the script that
// removes it: an operator removes the holder they inspected, never one that
// took the lock since. If the lock is free, or another token holds it,
// nothing is removed and ForceRelease returns an error wrapping ErrNotHeld.
// A token that cannot be an owner token (empty, or starting with ':') is
// an error wrapping ErrInvalidOption.
func WithExpectedOwner(token string) ForceReleaseOption {
	return func(c *forceReleaseConfig) { c.owner, c.ownerSet = token, true }
}

// isToken reports whether s may be an owner token: tokens are hex, and
// the other fields of a lock's or a semaphore's hash start with ':', so an
// operator's typo must not name one of those.
func isToken(s string) bool { return s != "" && !strings.HasPrefix(s, ":") }

// ForceRelease removes a lock whoever holds it (or only its expected owner,
// WithExpectedOwner), for an operator clearing a stuck lock; the next
// waiter gets it. The holder is not told until its next renewal. It
// returns an error wrapping ErrNotHeld if nothing was removed,
// ErrWrongType if other data than a lock's is at key's name (left as it
// is), and errors.ErrUnsupported on a Client made by redlock.New. Under
// WithReplicaAck it waits for the replicas as a release does.
func (c *Client) ForceRelease(ctx context.Context, key string, opts ...ForceReleaseOption) error {
	var cfg forceReleaseConfig
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.ownerSet && !isToken(cfg.owner) {
		return fmt.Errorf("%w: expected owner %q is not a token", ErrInvalidOption, cfg.owner)
	}
	n, err := c.admin(key)
	if err != nil {
		return err
	}
	var args []any
	if cfg.ownerSet {
		args = append(args, cfg.owner)
	}
	cmd, got := n.runForce(ctx, forceReleaseScript, n.keys(key).all(), args...)
	removed, err := cmd.Int()
	if err != nil {
		return redisError("force release", key, err)
	}
	switch removed {
	case 0:
		return fmt.Errorf("dlock: force release %q: %w", key, ErrNotHeld)
	case -1:
		return fmt.Errorf("dlock: force release %q: another token holds it now: %w", key, ErrNotHeld)
	}
	n.ack.short(got, ReplicaReport{Op: "force release", Key: key, Token: cfg.owner, Kind: "lock"})
	return nil
}

// ListOption configures List.
type ListOption func(*listConfig)

type listConfig struct {
	kind string
}

// WithKind makes List list the names of another kind of thing than locks:
// "semaphore" (Client.Semaphore) or "rwmutex" (Client.RWMutex), the Kind
// of their Observer events; "lock" is the default. Any other kind is an
// error wrapping ErrInvalidOption.
func WithKind(kind string) ListOption {
	return func(c *listConfig) { c.kind = kind }
}

// List returns the names of the locks that exist (held now) whose names
// match pattern (a Redis glob; "" or "*" for all); with WithKind, those of
// the semaphores or RWMutexes that have holders. It walks the keyspace
// with SCAN, never KEYS, on every master of a cluster. SCAN filters by
// name and type only: a name may be that of a lock released while the
// scan ran, or of a hash that other code stored at a lock's name (Inspect
// says ErrWrongType for it), since telling those apart costs a command
// per key; Inspect each name for the locks' state (Semaphore.Inspect for
// a semaphore's: it reads the holders' capacity, whatever the
// Semaphore's). A pattern that leaves a character class open, as Redis
// reads it ('[' without its ']', or whose ']' ends a range: "a[b-]") is
// an error wrapping ErrInvalidOption. On a Client made by redlock.New it
// returns an error wrapping errors.ErrUnsupported.
func (c *Client) List(ctx context.Context, pattern string, opts ...ListOption) ([]string, error) {
	cfg := listConfig{kind: "lock"}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	// A lock's name ends with the '}' that closes its tag, a semaphore's
	// holders hash with "}:" and its kind (keysOf): their other names have
	// a suffix of their own after these, so a pass of one kind matches
	// neither another kind's names nor the fence, queue and waiters.
	var end string
	switch cfg.kind {
	case "lock":
		end = "}"
	case "semaphore", "rwmutex":
		end = "}:" + cfg.kind
	default:
		return nil, fmt.Errorf("%w: list kind %q: want \"lock\", \"semaphore\" or \"rwmutex\"", ErrInvalidOption, cfg.kind)
	}
	n, err := c.admin("*")
	if err != nil {
		return nil, err
	}
	if pattern == "" {
		pattern = "*"
	}
	if err := CheckListPattern(pattern); err != nil {
		return nil, err
	}
	pattern, _ = closedGlob(pattern)
	// The prefix is literal: its glob characters are escaped. The pattern
	// is matched against the key, not its tag: a tag that starts with
	// KeyEscape is the escape followed by the key, any other is the key
	// itself. So one pass matches the unescaped tags and another the
	// escaped ones; "*" matches both at once.
	type pass struct {
		match string
		keep  func(escaped bool) bool
	}
	p := globEscape(n.prefix) + "{"
	passes := []pass{
		{p + pattern + end, func(escaped bool) bool { return !escaped }},
		{p + backend.KeyEscape + pattern + end, func(escaped bool) bool { return escaped }},
	}
	if pattern == "*" {
		passes = []pass{{p + "*" + end, func(bool) bool { return true }}}
	}
	var mu sync.Mutex // cluster masters are scanned concurrently
	seen := make(map[string]bool)
	var names []string
	scan := func(ctx context.Context, rdb redis.Cmdable) error {
		for _, ps := range passes {
			it := rdb.ScanType(ctx, 0, ps.match, 500, "hash").Iterator()
			for it.Next(ctx) {
				k := it.Val()
				tag := k[len(n.prefix)+1 : len(k)-len(end)]
				key := backend.KeyOfTag(tag)
				mu.Lock()
				// SCAN may return a key more than once.
				if ps.keep(key != tag) && !seen[k] {
					seen[k] = true
					names = append(names, key)
				}
				mu.Unlock()
			}
			if err := it.Err(); err != nil {
				return err
			}
		}
		return nil
	}
	if cc, ok := n.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return scan(ctx, node)
		})
	} else {
		err = scan(ctx, n.rdb)
	}
	if err != nil {
		return nil, fmt.Errorf("dlock: list: %w", err)
	}
	sort.Strings(names)
	return names, nil
}

// CheckListPattern returns the error (wrapping ErrInvalidOption) that List
// fails with for pattern, or nil: a pattern must not leave a character
// class open. It lets a caller refuse bad input before it connects to
// Redis.
func CheckListPattern(pattern string) error {
	if _, ok := closedGlob(pattern); !ok {
		return fmt.Errorf("%w: list pattern %q leaves a character class open", ErrInvalidOption, pattern)
	}
	return nil
}

// closedGlob returns pattern ready to be followed by the literal '}' that
// closes a tag in List, reading it as Redis does (stringmatchlen): a trailing
// backslash matches itself, so it is escaped, not left to escape the '}';
// a class left open would take the '}' in, so ok is false.
func closedGlob(p string) (string, bool) {
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			if i == len(p)-1 {
				return p + `\`, true
			}
			i++
		case '[':
			i++
			if i < len(p) && p[i] == '^' {
				i++
			}
			for ; i < len(p) && p[i] != ']'; i++ {
				switch {
				case p[i] == '\\' && i+1 < len(p):
					i++
				case i+2 < len(p) && p[i+1] == '-': // a range, whatever its end
					i += 2
				}
			}
			if i == len(p) {
				return p, false
			}
		}
	}
	return p, true
}

// globEscape escapes the characters special in a Redis glob.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// admin returns the Client's single-deployment backend for the operator
// calls, which read and change one deployment's keys directly.
func (c *Client) admin(key string) (*node, error) {
	if err := c.check(key); err != nil {
		return nil, err
	}
	n, ok := c.be.(*node)
	if !ok {
		return nil, fmt.Errorf("dlock: operator calls need a single Redis deployment: %w", errors.ErrUnsupported)
	}
	return n, nil
}
