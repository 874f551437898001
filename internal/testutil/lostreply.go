package testutil

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// LostReply is a go-redis hook that loses the reply to a request containing
// Marker (a script's SHA1, say), Left times: the server runs the request,
// but the client sees its connection break before the reply, as after a
// network blip, and go-redis (with its default MaxRetries) sends the
// request again: the server gets it twice.
type LostReply struct {
	PassHook
	Marker []byte
	// OnLost, if set, runs once the server has answered a request whose
	// reply is lost, before the client sees the connection break (so before
	// go-redis sends it again).
	OnLost   func()
	Left     atomic.Int32 // replies still to lose
	Lost     atomic.Int32 // replies lost
	Finished atomic.Int32 // calls containing Marker that have ended, retries and all
}

func (h *LostReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && s == string(h.Marker) {
				h.Finished.Add(1)
				break
			}
		}
		return err
	}
}

func (h *LostReply) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &lossyConn{Conn: cn, h: h}, nil
	}
}

type lossyConn struct {
	net.Conn
	h    *LostReply
	drop atomic.Bool
}

func (c *lossyConn) Write(p []byte) (int, error) {
	if bytes.Contains(p, c.h.Marker) && c.h.Left.Add(-1) >= 0 {
		c.drop.Store(true)
	}
	return c.Conn.Write(p)
}

func (c *lossyConn) Read(p []byte) (int, error) {
	if c.drop.CompareAndSwap(true, false) {
		// Read the reply, so that the request has run, and lose it.
		_, _ = c.Conn.Read(p)
		if c.h.OnLost != nil {
			c.h.OnLost()
		}
		c.Conn.Close()
		c.h.Lost.Add(1)
		return 0, io.EOF
	}
	return c.Conn.Read(p)
}
