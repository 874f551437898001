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
}

// keys returns the names for key. They are built once per acquisition and
// shared by every command of that lock: one allocation for the five strings
// (each is a substring of one), one for the struct, none per command.
func (n *node) keys(key string) *lockKeys {
	p, t := n.prefix, backend.Tag(key)
	all := p + "{" + t + "}:fence" + p + "{" + t + "}:queue" + p + "{" + t + "}:waiters" + p + "{" + t + "}:wake"
	b := len(p) + len(t) + 2 // the lock's own name: prefix{tag}
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
