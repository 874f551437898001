package backend

import "strings"

// Every Redis name of a lock puts the user's key between braces, so that
// all of them share one Redis Cluster hash tag and a script can touch them
// together. If the key itself contains '}', the tag ends early, but at the
// same place in every name, so they still share a slot. A key that starts
// with '}' would make the tag empty, and Redis hashes a name with an empty
// tag whole, scattering the lock's names over slots: such a key gets
// KeyEscape in front.

// KeyEscape goes in front of a key that starts with '}' (or with KeyEscape
// itself, so that the mapping stays one-to-one). Keys rarely start with
// either byte, and no other key's names change.
const KeyEscape = "\xff"

// Tag returns what goes between the braces of key's names.
func Tag(key string) string {
	if strings.HasPrefix(key, "}") || strings.HasPrefix(key, KeyEscape) {
		return KeyEscape + key
	}
	return key
}

// KeyOfTag undoes Tag.
func KeyOfTag(tag string) string {
	if strings.HasPrefix(tag, KeyEscape+"}") || strings.HasPrefix(tag, KeyEscape+KeyEscape) {
		return tag[len(KeyEscape):]
	}
	return tag
}

// SlotKey is the name suffix gets beside key's lock: key's tag between
// braces, then ':' and suffix, so that it shares the lock's hash slot.
func SlotKey(key, suffix string) string { return "{" + Tag(key) + "}:" + suffix }
