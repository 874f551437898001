package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ready reports whether the server at addr is the process pid and answers
// PING with PONG (not -LOADING). Checking the pid guards against a different
// server that grabbed the port between freePort and our bind. It speaks raw
// RESP so that polling creates no go-redis clients or goroutines. A
// non-empty password (the server's requirepass) is sent with AUTH first.
func ready(addr string, pid int, password string) bool {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	req := "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n*1\r\n$4\r\nPING\r\n"
	if password != "" {
		req = fmt.Sprintf("*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(password), password) + req
	}
	if _, err := conn.Write([]byte(req)); err != nil {
		return false
	}
	r := bufio.NewReader(conn)
	if password != "" {
		if ok, err := readReply(r); err != nil || ok != "OK" {
			return false
		}
	}
	info, err := readReply(r)
	if err != nil {
		return false
	}
	if infoField(info, "process_id") != strconv.Itoa(pid) {
		return false
	}
	pong, err := readReply(r)
	return err == nil && pong == "PONG"
}

// readReply reads one simple-string, error or bulk-string RESP2 reply.
func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis error: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("bad bulk length %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("unexpected reply %q", line)
	}
}

// infoField returns the value of "key:value" in an INFO reply, or "".
func infoField(info, key string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimRight(l, "\r"), key+":"); ok {
			return v
		}
	}
	return ""
}

// rawInfo returns INFO section from addr using a short-lived raw connection.
func rawInfo(addr, section string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	req := fmt.Sprintf("*2\r\n$4\r\nINFO\r\n$%d\r\n%s\r\n", len(section), section)
	if _, err := conn.Write([]byte(req)); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(conn))
}

// waitFor polls cond every interval until it returns true or timeout
// passes, then fails the test with what and cond's last status.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, status := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: timed out after %v waiting for %s: %s", timeout, what, status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
