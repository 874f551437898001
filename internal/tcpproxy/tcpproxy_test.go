package tcpproxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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

// TestFreezeCutsWriteUnderWay freezes the proxy while it is stuck writing a
// chunk to a peer that does not read: once Freeze has returned, the peer
// must get no byte that the proxy had not written by then, even once it
// reads again.
func TestFreezeCutsWriteUnderWay(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p, err := New(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	client, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	// More than the socket buffers on the way hold: the proxy ends up in
	// a write to the server, which reads nothing yet.
	sent := make(chan error, 1)
	go func() {
		_, err := client.Write(make([]byte, 64<<20))
		sent <- err
	}()
	defer func() {
		client.Close()
		<-sent
	}()
	// Stalled: the count of bytes written stays the same over a few polls.
	last, same := int64(-1), 0
	testutil.WaitUntil(t, 10*time.Second, "the proxy to stall writing to the server", func() bool {
		n := p.written.Load()
		if n > 0 && n == last {
			same++
		} else {
			same = 0
		}
		last = n
		return same >= 5
	})
	p.Freeze()
	before := p.written.Load()
	// The server reads what reached it; the proxy may not add to it.
	var got int64
	buf := make([]byte, 64<<10)
	for {
		// An observation window, not synchronization: what the server
		// reads after it came before Freeze returned.
		_ = server.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := server.Read(buf)
		got += int64(n)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if got != before {
		t.Fatalf("the server got %d bytes, the proxy had written %d when Freeze returned", got, before)
	}
	// The rest of the cut write goes through after the thaw.
	p.Thaw()
	_ = server.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(server, buf[:1]); err != nil {
		t.Fatalf("after Thaw: %v", err)
	}
}

// TestDropOnCutsOneConnection: the connection that carried the matching
// chunk goes silent for good, both ways, with no EOF when the server
// closes it; a connection made after is forwarded.
func TestDropOnCutsOneConnection(t *testing.T) {
	srv := redistest.Start(t)
	p, err := New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dial := func() (net.Conn, *bufio.Reader) {
		conn, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn, bufio.NewReader(conn)
	}
	cut, r := dial()
	dropped := p.DropOn(func(b []byte) bool { return bytes.Contains(b, []byte("ECHO cut")) })
	if _, err := cut.Write([]byte("ECHO cut\r\n")); err != nil {
		t.Fatal(err)
	}
	testutil.Receive(t, dropped, 5*time.Second, "the match")
	admin := srv.Client(t)
	if err := admin.ClientKillByFilter(context.Background(), "SKIPME", "yes", "TYPE", "normal").Err(); err != nil {
		t.Fatal(err)
	}
	// An observation window: nothing may come, neither the reply nor an EOF.
	_ = cut.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := r.ReadByte(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read on a cut connection: %v, want a timeout", err)
	}

	next, r := dial()
	if _, err := next.Write([]byte("ECHO next\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = next.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "$4\r\n" {
		t.Fatalf("a connection made after the cut: %q, %v", line, err)
	}
}
