package tcpproxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// TestFreezeHoldsServerClose: a frozen proxy is a partition, so a
// connection the server closes meanwhile must not look closed to the
// client (no EOF) until the proxy thaws.
func TestFreezeHoldsServerClose(t *testing.T) {
	srv := redistest.Start(t)
	p, err := New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("CLIENT SETNAME frozen\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("SETNAME: %q, %v", line, err)
	}
	p.Freeze()
	admin := srv.Client(t)
	if n, err := admin.ClientKillByFilter(context.Background(), "SKIPME", "yes", "TYPE", "normal").Result(); err != nil || n != 1 {
		t.Fatalf("CLIENT KILL: %d, %v", n, err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, err = r.ReadByte()
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read on a frozen proxy after the server closed the connection: %v, want a timeout (no EOF through a partition)", err)
	}
	p.Thaw()
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := r.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after Thaw: %v, want the connection closed", err)
	}
}
