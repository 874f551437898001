package testutil

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// DelayedWrites holds back, until Held is closed, the first write to Redis
// that carries Match once it is set: a request slow on its way. Reached is
// closed when that write is held. Its Dial is a go-redis Options.Dialer.
type DelayedWrites struct {
	Match   atomic.Pointer[string]
	Reached chan struct{}
	Held    <-chan struct{}
	once    sync.Once
}

// NewDelayedWrites returns a DelayedWrites whose writes wait for held.
func NewDelayedWrites(held <-chan struct{}) *DelayedWrites {
	return &DelayedWrites{Reached: make(chan struct{}), Held: held}
}

// Dial dials addr with a connection whose writes d may hold back.
func (d *DelayedWrites) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &delayedConn{Conn: conn, d: d}, nil
}

// delayedConn is a connection whose writes DelayedWrites may hold back.
type delayedConn struct {
	net.Conn
	d *DelayedWrites
}

func (c *delayedConn) Write(b []byte) (int, error) {
	if m := c.d.Match.Load(); m != nil && bytes.Contains(b, []byte(*m)) {
		first := false
		c.d.once.Do(func() { first = true })
		if first {
			close(c.d.Reached)
			<-c.d.Held
			// Maybe past go-redis's WriteTimeout now: the bytes were slow
			// on the network, not refused by the kernel.
			_ = c.Conn.SetWriteDeadline(time.Time{})
		}
	}
	return c.Conn.Write(b)
}
