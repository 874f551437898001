package main

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// lookCommand finds run's COMMAND, or fails with the status a shell (or
// env, timeout) gives: 127 if it is nowhere, 126 if it cannot be run.
func lookCommand(name string) (string, error) {
	path, err := exec.LookPath(name)
	switch {
	case err == nil:
		return path, nil
	case errors.Is(err, exec.ErrDot):
		// Found through a relative $PATH entry ("bin", "."): Go refuses it
		// by default, where a shell (or env, timeout) runs it, as the
		// user's $PATH asks.
		return path, nil
	case !errors.Is(err, exec.ErrNotFound) && !errors.Is(err, fs.ErrNotExist):
		return "", exitf(126, "%s: cannot run: %v", name, err)
	}
	// LookPath skips a file in $PATH that is not executable, where a shell
	// stops at it: the command is there, but cannot be run.
	if found := inPath(name); found != "" {
		return "", exitf(126, "%s: cannot run: %s: permission denied", name, found)
	}
	return "", exitf(127, "%s: command not found", name)
}

// cannotStart is the error of a COMMAND found that could not be started:
// 127 for a file that is missing at exec (a script's interpreter, a
// program's loader), as a shell says, else 126.
func cannotStart(name string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return exitf(127, "%s: cannot run: %v (a file it needs is missing: its #! interpreter, say)", name, err)
	}
	return exitf(126, "%s: cannot run: %v", name, err)
}

// inPath returns the first file (not a directory) named name in $PATH, or
// "" if there is none or name is a path of its own.
func inPath(name string) string {
	if name == "" || strings.ContainsRune(name, filepath.Separator) {
		return ""
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			dir = "." // an empty entry is the current directory
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return ""
}
