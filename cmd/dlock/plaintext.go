package main

import (
	"bufio"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// plainProbeTimeout bounds the look at whether a server that rediss://
// could not reach speaks plain text.
const plainProbeTimeout = time.Second

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
