// Package tcpproxy is a loopback TCP proxy for fault-injection tests: it
// forwards connections to a target and can freeze them, so a client sees a
// Redis that stopped answering while other clients still reach it.
package tcpproxy

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections from its own loopback address to a target.
type Proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	frozen    bool
	thaw      chan struct{} // closed by Thaw
	freezeOn  func([]byte) bool
	frozeOn   chan struct{} // closed when freezeOn matched
	dropOn    func([]byte) bool
	droppedOn chan struct{}         // closed when dropOn matched
	dead      map[net.Conn]struct{} // both sides of the connections DropOn cut
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup

	// gate is held shared by each write to a connection, and exclusively
	// by a freeze once it has marked the proxy frozen: a freeze returns
	// only when no write begun before it is still under way.
	gate sync.RWMutex

	written atomic.Int64 // bytes written to either side, for tests
}

// New starts a proxy to target on a free 127.0.0.1 port.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		ln: ln, target: target, thaw: make(chan struct{}),
		conns: make(map[net.Conn]struct{}), dead: make(map[net.Conn]struct{}),
	}
	close(p.thaw)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients should dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Freeze stops forwarding bytes in both directions; connections stay open,
// as with a network partition or a stopped peer. Once it returns, no byte
// is written to either side until Thaw: a write under way is cut short
// and its rest held.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	p.freezeLocked()
	p.mu.Unlock()
	p.waitWrites()
}

// freezeLocked marks the proxy frozen and cuts short the writes under way,
// which may block for as long as a peer does not read. The caller then
// waits for them with waitWrites, once it has released p.mu.
func (p *Proxy) freezeLocked() {
	if !p.frozen {
		p.frozen = true
		p.thaw = make(chan struct{})
	}
	past := time.Unix(1, 0)
	for c := range p.conns {
		_ = c.SetWriteDeadline(past)
	}
}

// waitWrites returns once no write that began before the proxy was frozen
// is under way.
func (p *Proxy) waitWrites() {
	p.gate.Lock()
	//lint:ignore SA2001 an empty critical section: a barrier for the writes
	p.gate.Unlock()
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

// DropOn cuts the connection on which it reads a chunk, in either
// direction, for which match reports true: that chunk and every byte after
// it, both ways, are discarded, and neither end hears of the other's close,
// as on a path that went dead with no reset, which only a timeout of the
// peers tells. The other connections, and those accepted later, are
// forwarded as before. It matches once; the channel it returns is closed
// when it has.
func (p *Proxy) DropOn(match func([]byte) bool) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropOn, p.droppedOn = match, make(chan struct{})
	return p.droppedOn
}

// cut reports whether the connection src and dst carry was cut by DropOn,
// b, read from src, being the chunk that cuts it.
func (p *Proxy) cut(dst, src net.Conn, b []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(b) > 0 && p.dropOn != nil && p.dropOn(b) {
		p.dead[src], p.dead[dst] = struct{}{}, struct{}{}
		p.dropOn = nil
		close(p.droppedOn)
	}
	_, dead := p.dead[src]
	return dead
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
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if p.cut(dst, src, buf[:n]) {
			if err != nil {
				// Closed by Close, or by the other direction's pipe
				// when dst's peer hung up, not through the cut path.
				return
			}
			continue
		}
		if n > 0 {
			p.mu.Lock()
			var froze chan struct{}
			if p.freezeOn != nil && p.freezeOn(buf[:n]) {
				froze = p.frozeOn
				p.freezeOn = nil
				p.freezeLocked()
			}
			p.mu.Unlock()
			if froze != nil {
				// As Freeze: the other direction's write under way ends
				// before the test hears of the freeze.
				p.waitWrites()
				close(froze)
			}
			if p.send(dst, buf[:n]) != nil {
				_ = dst.Close()
				return
			}
		}
		if err != nil {
			// The end of src (a close or reset by its peer) is held
			// like a chunk: a frozen proxy is a partition.
			_ = p.send(dst, nil)
			return
		}
	}
}

// send writes b to dst, or closes dst if b is nil, once the proxy is not
// frozen. A write that a freeze cuts short is taken up again after the
// thaw.
func (p *Proxy) send(dst net.Conn, b []byte) error {
	for {
		p.gate.RLock()
		p.mu.Lock()
		if p.frozen {
			thaw := p.thaw
			p.mu.Unlock()
			p.gate.RUnlock()
			<-thaw
			continue
		}
		// Under p.mu, so that a freeze's deadline comes after this reset.
		_ = dst.SetWriteDeadline(time.Time{})
		p.mu.Unlock()
		if b == nil {
			err := dst.Close()
			p.gate.RUnlock()
			return err
		}
		n, err := dst.Write(b)
		p.written.Add(int64(n))
		p.gate.RUnlock()
		b = b[n:]
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
	}
}
