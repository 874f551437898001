package backend

import (
	"strings"
	"testing"
)

// hashTag is what Redis Cluster hashes for name: the text between the first
// '{' and the next '}' if that is not empty, else the whole name.
func hashTag(name string) string {
	if i := strings.IndexByte(name, '{'); i >= 0 {
		if j := strings.IndexByte(name[i+1:], '}'); j > 0 {
			return name[i+1 : i+1+j]
		}
	}
	return name
}

func TestTag(t *testing.T) {
	for _, key := range []string{"order:1", "}", "}{", "}x", "{x}", "a}b", "\xff", "\xff}x", "\xff\xffy", ""} {
		if got := KeyOfTag(Tag(key)); got != key {
			t.Errorf("KeyOfTag(Tag(%q)) = %q", key, got)
		}
		lock := "dlock:{" + Tag(key) + "}"
		if key != "" && hashTag(lock) != hashTag(lock+":fence") {
			t.Errorf("%q: lock %q and fence names hash differently", key, lock)
		}
		if key != "" && hashTag(lock) == lock {
			t.Errorf("%q: %q has an empty hash tag", key, lock)
		}
	}
	if Tag("}a") == Tag("\xff}a") || Tag("a") != "a" {
		t.Error("Tag is not one-to-one, or changes ordinary keys")
	}
}
