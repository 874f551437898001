package main

import (
	"bufio"
	"context"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// plainProbeTimeout bounds the look at whether a server that rediss://
// could not reach speaks plain text.
const plainProbeTimeout = time.Second

// plainProbeDelay is how long the first ping waits for an answer before
// dlock looks whether the server speaks plain text (watchPlainText).
const plainProbeDelay = time.Second

// watchPlainText looks for a server that speaks plain text, as
// plainTextServer does, once the first ping (ctx) has gone unanswered for
// plainProbeDelay, and ends the ping (cancel) if it finds one: it would
// only wait out its limit. A TLS server never answers the probe, however
// slow its handshake. The function it returns, called once the ping
// failed, gives that server's address ("" if none), and whether it looked
// (it waits for a look under way). After a ping that was answered it need
// not be called: the timer then finds ctx ended (connect cancels it on
// return) and does nothing, or ends a look begun as the answer came
// within plainProbeTimeout per address.
func (f *connFlags) watchPlainText(ctx context.Context, cancel context.CancelFunc) func() (addr string, looked bool) {
	var found string
	var looked bool
	done := make(chan struct{})
	t := time.AfterFunc(plainProbeDelay, func() {
		defer close(done)
		if ctx.Err() != nil {
			return // answered, or failed, meanwhile
		}
		looked = true
		if found = f.plainTextServer(); found != "" {
			cancel()
		}
	})
	return func() (string, bool) {
		if t.Stop() {
			return "", false
		}
		<-done
		return found, looked
	}
}

// plainTextServer returns the first address, of those dlock dials itself
// for a TLS URL (the URL's, or --cluster's, --sentinel's), at which a
// server answers a plain-text PING, or "" if there is none (or the URL is
// not TLS). A plain-text Redis sends nothing back to a TLS handshake, so
// rediss:// to its port would fail with only a timeout.
func (f *connFlags) plainTextServer() string {
	raw := f.rawURL()
	if raw == "" {
		return ""
	}
	o, err := redis.ParseURL(raw)
	if err != nil || o.TLSConfig == nil {
		return ""
	}
	addrs := []string{o.Addr}
	switch {
	case len(f.cluster) > 0:
		addrs = f.cluster
	case f.sentinelMaster != "":
		addrs = f.sentinels
	}
	for _, addr := range addrs {
		if answersPlainText(addr) {
			return addr
		}
	}
	return ""
}

// answersPlainText reports whether the server at addr answers PING in
// plain RESP: a status or an error reply (-NOAUTH where a password is
// needed).
func answersPlainText(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, plainProbeTimeout)
	if err != nil {
		return false
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(plainProbeTimeout)); err != nil {
		return false
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	b, err := bufio.NewReader(c).ReadByte()
	return err == nil && (b == '+' || b == '-')
}
