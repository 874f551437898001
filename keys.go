package dlock

import (
	"fmt"
	"strings"
)

// lockKeys are the Redis names one lock uses. The user's key is wrapped in
// braces so that all of them share one Redis Cluster hash tag and a script
// can touch them together. If the key itself contains '}', the tag ends
// early, but at the same place in every name, so they still share a slot;
// the names stay distinct because only the lock name ends with '}'. A key
// that starts with '}' would make the tag empty, and Redis hashes a name
// with an empty tag whole, scattering the lock's names over slots: such a
// key gets an escape byte in front (see tagOf).
type lockKeys struct {
	lock    string // hash: owner token -> hold count, plus metadata fields
	fence   string // string: the last fencing token issued
	queue   string // sorted set: waiting tokens by arrival
	waiters string // hash: waiting token -> "deadline lease meta"
	channel string // pub/sub channel for hand-over messages
}

func (n *node) keys(key string) lockKeys {
	base := n.prefix + "{" + tagOf(key) + "}"
	return lockKeys{
		lock:    base,
		fence:   base + ":fence",
		queue:   base + ":queue",
		waiters: base + ":waiters",
		channel: base + ":wake",
	}
}

// all returns the names in the order the scripts expect as KEYS.
func (k lockKeys) all() []string {
	return []string{k.lock, k.fence, k.queue, k.waiters, k.channel}
}

func validateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(key) > maxKeyLen {
		return fmt.Errorf("%w: key longer than %d bytes", ErrInvalidKey, maxKeyLen)
	}
	return nil
}

// keyEscape goes in front of a key that starts with '}' (or with keyEscape
// itself, so that the mapping stays one-to-one), so that the hash tag of
// its names is never empty. Keys rarely start with either byte, and no
// other key's names change.
const keyEscape = "\xff"

// tagOf returns what goes between the braces of key's names.
func tagOf(key string) string {
	if strings.HasPrefix(key, "}") || strings.HasPrefix(key, keyEscape) {
		return keyEscape + key
	}
	return key
}

// keyOfTag undoes tagOf.
func keyOfTag(tag string) string {
	if strings.HasPrefix(tag, keyEscape+"}") || strings.HasPrefix(tag, keyEscape+keyEscape) {
		return tag[len(keyEscape):]
	}
	return tag
}
