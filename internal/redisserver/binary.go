package redisserver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// SystemDirs returns the directories where package managers put the Redis
// binaries. Pass them to FindBinary to find redis-server even when the
// program runs with a minimal $PATH, as test runners sometimes do.
func SystemDirs() []string {
	return []string{"/usr/bin", "/usr/sbin", "/usr/local/bin"}
}

// FindBinary returns the path of the executable name (redis-server,
// redis-cli, redis-benchmark), looked up in $PATH and then in dirs, in
// order. If it is nowhere, the error says where it looked, e.g.
// "redis-server not found in $PATH"; callers append their own install hint.
func FindBinary(name string, dirs ...string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if len(dirs) == 0 {
		return "", fmt.Errorf("%s not found in $PATH", name)
	}
	return "", fmt.Errorf("%s not found in $PATH or %s", name, strings.Join(dirs, ", "))
}
