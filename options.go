package dlock

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dlock-go/dlock/internal/backend"
)

// Defaults and limits.
const (
	// DefaultTTL is the lease of a lock: renewed by the watchdog every
	// DefaultTTL/3 while held, so a crashed holder frees the lock within it.
	DefaultTTL = 30 * time.Second
	// MinTTL and MaxTTL bound a lease. Below MinTTL the drift margin and a
	// round trip eat the lease; above MaxTTL a crashed holder blocks others
	// for longer than any sane job should rely on without renewal.
	MinTTL = 10 * time.Millisecond
	MaxTTL = 24 * time.Hour
	// DefaultPrefix starts every Redis key and channel dlock uses.
	DefaultPrefix = "dlock:"
	// DefaultQueueTTL is how long a waiter keeps its place in a lock's queue
	// without refreshing it. A waiter that dies leaves the queue within it.
	DefaultQueueTTL = 3 * time.Second
	// MaxKeyLen is the longest lock name, in bytes, and the longest
	// metadata (WithMetadata). Redis allows more, but a name this long is a
	// bug (or a payload) rather than a resource name.
	MaxKeyLen = 1024
)

// Option configures a Client.
type Option func(*clientConfig)

type clientConfig struct {
	prefix   string
	logger   *slog.Logger
	name     string
	queueTTL time.Duration
	replica  replicaConfig // WithReplicaAck, WithReplicaReport (replication.go)

	ext clientExtConfig // observer, local queue, degraded mode (hooks.go)
}

// WithPrefix sets the prefix of all keys and channels (default "dlock:").
// Clients that must exclude each other need the same prefix. It may not
// be empty, nor contain '{': the lock's name wraps the key in braces, the
// Redis Cluster hash tag. New refuses such a prefix with an error wrapping
// ErrInvalidOption.
func WithPrefix(prefix string) Option {
	return func(c *clientConfig) { c.prefix = prefix }
}

// WithLogger sends the Client's log records (lost locks and failed renewals
// are warnings) to l; a record naming a key has its kind too ("lock",
// "semaphore" or "rwmutex"). By default the Client logs nothing. Its
// handler must be quick, as an Observer must: the watchdog logs a loss
// before it looks at the other leases' deadlines again. A panic on the
// watchdog's goroutine, which has no caller to go to (the handler's, an
// Observer's, or a go-redis hook's at a renewal, which then counts as
// unanswered), is logged at level Error with its stack, and the watchdog
// goes on; one the handler raises while logging it is dropped. A panic of
// the handler at a lost lock's warning is logged so too, not raised, on
// any goroutine (Close's, Unlock's): the Observer still hears of the loss.
// The renewals of one round that got no answer are one record per error
// (the lock a Redlock error names aside), with the number of locks and the
// first one's key: an outage does not log a warning per lock held. The
// README lists the records, their levels and attributes.
func WithLogger(l *slog.Logger) Option {
	return func(c *clientConfig) { c.logger = l }
}

// WithClientName names this Client in the holder metadata stored with each
// lock it takes, for operators reading `dlock inspect`. It must be valid
// UTF-8.
func WithClientName(name string) Option {
	return func(c *clientConfig) { c.name = name }
}

// WithQueueTTL sets how long a waiter keeps its place in a lock's queue
// without refreshing it (default 3 s). Waiters refresh every third of it (of
// their lease, if that is shorter), so a waiter whose process dies stops
// blocking the queue within this time. With WithReplicaAck, a waiter's
// place, and a lock handed over to it (within its lease), last the replica
// ack timeout + 100 ms longer: its checks answer only after their WAIT. It
// must be between 30 ms and 1 h, or New returns an error wrapping
// ErrInvalidTTL.
func WithQueueTTL(d time.Duration) Option {
	return func(c *clientConfig) { c.queueTTL = d }
}

func (c *clientConfig) validate() error {
	if c.prefix == "" {
		return fmt.Errorf("%w: empty prefix", ErrInvalidOption)
	}
	// A '{' in the prefix would make the hash tag start in the prefix: the
	// names of two prefixes could coincide ("p" + "{a}x{b}" is "p{a}x" +
	// "{b}"), and "{}" gives an empty tag, which scatters a lock's names
	// over cluster slots.
	if strings.Contains(c.prefix, "{") {
		return fmt.Errorf("%w: prefix contains '{'", ErrInvalidOption)
	}
	// The name is stored as JSON, which cannot carry invalid UTF-8.
	if !utf8.ValidString(c.name) {
		return fmt.Errorf("%w: client name is not valid UTF-8", ErrInvalidOption)
	}
	if c.queueTTL < 3*MinTTL || c.queueTTL > time.Hour {
		return fmt.Errorf("%w: queue ttl %v outside [%v, 1h]", ErrInvalidTTL, c.queueTTL, 3*MinTTL)
	}
	return nil
}

// LockOption configures one acquisition (Lock, TryLock, Do).
type LockOption func(*lockConfig)

type lockConfig struct {
	ttl     time.Duration
	renew   bool
	maxHold time.Duration
	retry   RetryStrategy
	meta    string
	ext     lockExtConfig // adaptive lease (adaptive.go)
}

// WithTTL sets the lease (default 30 s): how long Redis keeps the lock if
// the holder stops renewing it. With renewal on, it is also how long a
// crashed holder blocks others. Must be within [MinTTL, MaxTTL].
func WithTTL(d time.Duration) LockOption {
	return func(c *lockConfig) { c.ttl = d }
}

// WithoutRenewal turns the watchdog off for this lock: the lease is fixed
// and the lock is lost when it runs out (the lock's Context says so). A
// waiter told by message that the lock was handed over to it makes one
// more round trip, which reads the lease left, so that its Context ends
// with Redis's lease, not up to a third of it early: with nothing to
// renew the lease, the waiter has no other way to learn when it began.
func WithoutRenewal() LockOption {
	return func(c *lockConfig) { c.renew = false }
}

// WithMaxHold stops renewal once the lock has been held for d (counted
// from the grant; for a waiter, from the hand-over), so a holder stuck in
// its critical section cannot keep the lock forever. The lock is
// then lost when the last lease runs out. A degraded lock
// (WithDegradedMode), which has no lease, is lost once held for d. It
// needs renewal: with WithoutRenewal, Lock returns an error wrapping
// ErrInvalidOption. A d of 0 sets no limit, as without the option; a
// negative d is an error wrapping ErrInvalidTTL.
func WithMaxHold(d time.Duration) LockOption {
	return func(c *lockConfig) { c.maxHold = d }
}

// WithRetry bounds how Lock waits: it re-checks the lock at the delays the
// strategy gives (or earlier, when the lock is handed over) and gives up
// with ErrNotObtained when the strategy says stop; if the last check
// failed (Redis out of reach while queued), with that check's error
// instead. Without it (or with nil) Lock waits until its context ends.
// TryLock ignores it. A nil pointer as s (a nil *MyStrategy) is refused:
// Lock and TryLock return an error wrapping ErrInvalidOption.
func WithRetry(s RetryStrategy) LockOption {
	return func(c *lockConfig) { c.retry = s }
}

// WithMetadata stores a short free-form string with the lock's holder
// metadata (for example a job id), shown by `dlock inspect`. It must be
// valid UTF-8 and at most MaxKeyLen bytes (see CheckMetadata).
func WithMetadata(s string) LockOption {
	return func(c *lockConfig) { c.meta = s }
}

func newLockConfig(opts []LockOption) (lockConfig, error) {
	cfg := lockConfig{ttl: DefaultTTL, renew: true}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.ttl < MinTTL || cfg.ttl > MaxTTL {
		return cfg, fmt.Errorf("%w: lease %v outside [%v, %v]", ErrInvalidTTL, cfg.ttl, MinTTL, MaxTTL)
	}
	if cfg.maxHold < 0 {
		return cfg, fmt.Errorf("%w: negative max hold %v", ErrInvalidTTL, cfg.maxHold)
	}
	if cfg.maxHold > 0 && !cfg.renew {
		return cfg, fmt.Errorf("%w: WithMaxHold needs renewal, but WithoutRenewal was given", ErrInvalidOption)
	}
	if cfg.retry != nil && backend.IsNil(cfg.retry) {
		return cfg, fmt.Errorf("%w: WithRetry with a nil %T", ErrInvalidOption, cfg.retry)
	}
	if v, ok := cfg.retry.(interface{ validate() error }); ok {
		if err := v.validate(); err != nil {
			return cfg, err
		}
	}
	if err := CheckMetadata(cfg.meta); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// CheckMetadata returns the error (wrapping ErrInvalidOption) that a Lock
// with WithMetadata(s) fails with, or nil: s must be valid UTF-8 and at
// most MaxKeyLen bytes. It lets a caller refuse bad input before it
// connects to Redis.
func CheckMetadata(s string) error {
	if len(s) > MaxKeyLen {
		return fmt.Errorf("%w: metadata longer than %d bytes", ErrInvalidOption, MaxKeyLen)
	}
	// The metadata is stored as JSON, which cannot carry invalid UTF-8.
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: metadata is not valid UTF-8", ErrInvalidOption)
	}
	return nil
}
