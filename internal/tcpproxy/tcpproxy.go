// Package tcpproxy is a loopback TCP proxy for fault-injection tests: it
// forwards connections to a target and can freeze them, so a client sees a
// Redis that stopped answering while other clients still reach it.
package tcpproxy

import (
	"net"
	"sync"
)

// Proxy forwards connections from its own loopback address to a target.
type Proxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	frozen   bool
	thaw     chan struct{} // closed by Thaw
	freezeOn func([]byte) bool
	frozeOn  chan struct{} // closed when freezeOn matched
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

// New starts a proxy to target on a free 127.0.0.1 port.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, thaw: make(chan struct{}), conns: make(map[net.Conn]struct{})}
	close(p.thaw)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients should dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Freeze stops forwarding bytes in both directions; connections stay open,
// as with a network partition or a stopped peer.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.freezeLocked()
}

func (p *Proxy) freezeLocked() {
	if !p.frozen {
		p.frozen = true
		p.thaw = make(chan struct{})
	}
}

// FreezeOn freezes the proxy when it reads a chunk, in either direction,
// for which match reports true, and holds that chunk too: a test stops a
// conversation at a given request or reply (one that carries a token, say)
// and acts before the client sees that reply. It matches once; the channel
// it returns is closed when it has. A chunk is what one read returned, so
// match should look for something short.
func (p *Proxy) FreezeOn(match func([]byte) bool) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.freezeOn, p.frozeOn = match, make(chan struct{})
	return p.frozeOn
}

// Thaw resumes forwarding.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		p.frozen = false
		close(p.thaw)
	}
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	if p.frozen {
		p.frozen = false
		close(p.thaw)
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.track(in, out)
		p.wg.Add(2)
		go p.pipe(out, in)
		go p.pipe(in, out)
	}
}

func (p *Proxy) track(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
}

// pipe copies src to dst, holding each chunk while the proxy is frozen.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			if p.freezeOn != nil && p.freezeOn(buf[:n]) {
				p.freezeOn = nil
				close(p.frozeOn)
				p.freezeLocked()
			}
			thaw := p.thaw
			p.mu.Unlock()
			<-thaw
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			// The end of src (a close or reset by its peer) is held
			// like a chunk: a frozen proxy is a partition.
			p.mu.Lock()
			thaw := p.thaw
			p.mu.Unlock()
			<-thaw
			return
		}
	}
}
