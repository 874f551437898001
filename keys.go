package dlock

import (
	"fmt"

	"github.com/dlock-go/dlock/internal/backend"
)

// lockKeys are the Redis names one lock uses. The user's key, escaped by
// backend.Tag, is wrapped in braces so that all of them share one Redis
// Cluster hash tag and a script can touch them together. If the key itself
// contains '}', the tag ends early, but at the same place in every name,
// so they still share a slot; the names stay distinct because only the
// lock name ends with '}'.
type lockKeys struct {
	lock    string // hash: owner token -> hold count, plus metadata fields
	fence   string // string: the last fencing token issued
	queue   string // sorted set: waiting tokens by arrival
	waiters string // hash: waiting token -> "deadline lease client meta"
	channel string // prefix of the hand-over channels: channel:<client id>

	names [5]string // the names above, in the order the scripts expect as KEYS
	args  [5]any    // pointers to names, ready to be command arguments

	// permits is set for a semaphore's names (semaphore.go): then lock is
	// the hash of its holders.
	permits *backend.Permits
}

// keys returns the names for key. They are built once per acquisition and
// shared by every command of that lock: one allocation for the five strings
// (each is a substring of one), one for the struct, none per command.
func (n *node) keys(key string) *lockKeys { return n.keysOf(key, nil) }

// keysOf returns the names for key, or for the semaphore key if p is set:
// those are the lock's names with ":" and p.Kind after the braces, so a
// lock and a semaphore of each kind may share one name. No lock name ends
// that way: each has '}' or one of the suffixes above right after the
// tag.
func (n *node) keysOf(key string, p *backend.Permits) *lockKeys {
	pre, t, kind := n.prefix, backend.Tag(key), ""
	if p != nil {
		kind = ":" + p.Kind
	}
	all := pre + "{" + t + "}" + kind + ":fence" + pre + "{" + t + "}" + kind + ":queue" +
		pre + "{" + t + "}" + kind + ":waiters" + pre + "{" + t + "}" + kind + ":wake"
	b := len(pre) + len(t) + 2 + len(kind) // the lock's own name: prefix{tag}kind
	k := &lockKeys{}
	k.lock, k.fence = all[:b], all[:b+6]
	i := b + 6
	k.queue, i = all[i:i+b+6], i+b+6
	k.waiters, i = all[i:i+b+8], i+b+8
	k.channel = all[i:]
	k.names = [5]string{k.lock, k.fence, k.queue, k.waiters, k.channel}
	for j := range k.names {
		k.args[j] = &k.names[j]
	}
	k.permits = p
	return k
}

// all returns the names in the order the scripts expect as KEYS.
func (k *lockKeys) all() []string { return k.names[:] }

func validateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key longer than %d bytes", ErrInvalidKey, MaxKeyLen)
	}
	return nil
}
