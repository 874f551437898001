package redlock

import (
	"context"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/redis/go-redis/v9"
)

const (
	// A pub/sub connection that failed is retried after a backoff growing
	// from minBackoff to maxBackoff (go-redis reconnects and resubscribes).
	// So are the channels refused by an error reply, which leaves the
	// connection as it is: the hub subscribes them again itself, reading
	// the other channels' messages meanwhile.
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
	// closeWait bounds how long close waits for the goroutines: one held
	// by the handshake of a connection just dialed, which only the node
	// client's ReadTimeout ends, is left to end on its own.
	closeWait = time.Second
)

// pubSubHealth is the health check of the pub/sub connections of the
// Clients made from now on; tests shorten it.
var pubSubHealth = backend.DefaultPubSubHealth

// linger keeps a channel subscribed this long after its last waiter left,
// so a key waited on again and again costs no SUBSCRIBE and UNSUBSCRIBE
// round trips: that of the Clients made from now on; tests shorten it.
var linger = 5 * time.Second

// hub tells the goroutines of one Client waiting for locks when a lock was
// released on some node, so that they retry then instead of polling. Each
// node has one pub/sub connection, opened on the first wait, and two
// goroutines: one subscribing and unsubscribing as the set of waited-on
// channels changes, one reading. A channel is subscribed while it has
// waiters, and for the linger time after.
//
// A waiter must not miss a release that happened after its last attempt.
// Messages only arrive once a channel is subscribed, so each channel counts
// the nodes that confirmed its subscription, and waiters are woken (to
// check again) when that count reaches a majority; any majority of nodes
// shares one with the majority a holder releases on. A connection that
// breaks wakes the waiters too, since messages may have been lost. An error
// reply (a SUBSCRIBE refused) leaves the connection and its subscriptions
// as they are: the channels that node has not confirmed are subscribed
// again after a backoff, one a command, since Redis refuses a SUBSCRIBE
// whole if it denies one of its channels; the node's other channels are
// read on meanwhile.
type hub struct {
	b      *redlock
	health backend.PubSubHealth // of each node's connection
	linger time.Duration
	ctx    context.Context // cancelled by close: ends calls to a hung node
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	seq    uint64 // the last generation given to a channel
	chans  map[string]*channel
	subs   []*nodeSub // one per node; nil until the first wait
	wg     sync.WaitGroup
}

// channel is one lock's wake channel and its waiters. Guarded by hub.mu.
type channel struct {
	name       string
	waiters    map[*waiter]struct{}
	confirmed  []bool // per node: the subscription is in effect
	nconfirmed int
	gen        uint64 // changes whenever the waiters are woken
	// quorumAt is the generation at which the subscription last reached
	// a majority (0: never).
	quorumAt uint64
	idle     *time.Timer
}

// waiter is one goroutine waiting for a lock.
type waiter struct {
	h    *hub
	c    *channel
	wake chan struct{} // gets a value when the lock may have been released
	// Guarded by hub.mu. A release wakes w only if its token is one of the
	// owners that refused w's last attempt (blockers): another waiter's
	// release of its own failed attempt frees nothing that blocks w, and
	// waking for it would make the waiters wake each other in a loop. So
	// does w's own release of an attempt, unless it is the late release of
	// an earlier attempt whose holds refused the last one.
	// Releases that come while an attempt is under way (trying) are kept
	// in released until that attempt's refusals are known.
	trying   bool
	blockers map[string]int
	released []string
}

// attempt records that w begins an attempt. A wake-up pending
// from before is dropped: the attempt checks the lock after it (a release
// publishes on every node it frees, and the messages after the first must
// not wake w again once this attempt found the lock taken).
func (w *waiter) attempt() {
	w.h.mu.Lock()
	w.trying, w.blockers, w.released = true, nil, nil
	select {
	case <-w.wake:
	default:
	}
	w.h.mu.Unlock()
}

// attempted records the owners that refused w's attempt (nil if it is not
// blocked) and wakes w if one of them released while the attempt was
// under way.
func (w *waiter) attempted(owners map[string]int) {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	w.trying, w.blockers = false, owners
	for _, t := range w.released {
		if _, ok := owners[t]; ok {
			select {
			case w.wake <- struct{}{}:
			default:
			}
			break
		}
	}
	w.released = nil
}

// nodeSub is the pub/sub connection to one node.
type nodeSub struct {
	h     *hub
	i     int
	ps    *redis.PubSub
	dirty chan struct{} // the set of channels changed
	stop  chan struct{}
	live  bool // guarded by hub.mu: delivered something since it last broke
	// resub, guarded by hub.mu, tells control to subscribe again the
	// channels not confirmed: an error reply may have refused some of them.
	resub bool
	// Guarded by hub.mu: the pending resubscribe after an error reply, and
	// its backoff (reset by a confirmation).
	retry   *time.Timer
	retryIn time.Duration
}

func newHub(b *redlock) *hub {
	ctx, cancel := context.WithCancel(context.Background())
	return &hub{b: b, health: pubSubHealth, linger: linger, ctx: ctx, cancel: cancel, chans: make(map[string]*channel)}
}

// snapshot returns the generation of a channel and whether it is
// subscribed on a majority, before an attempt: join compares them.
func (h *hub) snapshot(name string) (uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.chans[name]
	if c == nil {
		return 0, false
	}
	return c.gen, c.nconfirmed >= h.b.quorum
}

// join registers a waiter on a channel after a failed attempt; gen and
// confirmed are the snapshot taken before the attempts began. If a release
// may have been missed since, the waiter starts woken: subscribed on a
// majority then, if the waiters were woken since; else, if the
// subscription reached a majority since, even if it lost it again (a
// node's connection broke): that wake-up came before the waiter joined.
// It returns nil once the hub is closed.
func (h *hub) join(name string, gen uint64, confirmed bool) *waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	if h.subs == nil {
		for i, n := range h.b.nodes {
			s := &nodeSub{
				h: h, i: i,
				ps:    n.rdb.Subscribe(context.Background()), // connects on first use
				dirty: make(chan struct{}, 1),
				stop:  make(chan struct{}),
			}
			h.subs = append(h.subs, s)
			h.wg.Add(1)
			go s.control()
		}
	}
	c := h.chans[name]
	if c == nil {
		h.seq++
		c = &channel{name: name, waiters: make(map[*waiter]struct{}), confirmed: make([]bool, len(h.b.nodes)), gen: h.seq}
		h.chans[name] = c
		h.markDirty()
	}
	if c.idle != nil {
		c.idle.Stop()
		c.idle = nil
	}
	w := &waiter{h: h, c: c, wake: make(chan struct{}, 1), trying: true}
	c.waiters[w] = struct{}{}
	// Generations are h.seq values, so gen compares with a channel made
	// after the snapshot too.
	if (confirmed && c.gen != gen) || (!confirmed && c.quorumAt > gen) {
		w.wake <- struct{}{}
	}
	return w
}

// leave unregisters w. The channel stays subscribed for the linger time.
func (w *waiter) leave() {
	h, c := w.h, w.c
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(c.waiters, w)
	if len(c.waiters) > 0 || h.closed {
		return
	}
	c.idle = time.AfterFunc(h.linger, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.closed || h.chans[c.name] != c || len(c.waiters) > 0 {
			return
		}
		delete(h.chans, c.name)
		h.markDirty()
	})
}

// markDirty tells the subscribing goroutines to look at the channels.
// Called with mu held.
func (h *hub) markDirty() {
	for _, s := range h.subs {
		select {
		case s.dirty <- struct{}{}:
		default:
		}
	}
}

// wakeAll wakes the waiters of c. A release by token wakes only those
// that it blocked; "" wakes them all. Called with mu held.
func (h *hub) wakeAll(c *channel, token string) {
	h.seq++
	c.gen = h.seq
	for w := range c.waiters {
		if token != "" {
			if w.trying {
				w.released = append(w.released, token)
				continue
			}
			if _, ok := w.blockers[token]; !ok {
				continue
			}
		}
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// confirmed records that node s subscribed a channel.
func (h *hub) confirmed(s *nodeSub, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s.live = true
	c := h.chans[name]
	if c == nil || c.confirmed[s.i] {
		return
	}
	c.confirmed[s.i] = true
	s.retryIn = 0
	if c.nconfirmed++; c.nconfirmed == h.b.quorum {
		// Releases before now may have been missed: check again.
		h.wakeAll(c, "")
		c.quorumAt = c.gen
	}
}

// unsubscribed records that node s dropped a channel.
func (h *hub) unsubscribed(s *nodeSub, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.chans[name]; c != nil && c.confirmed[s.i] {
		c.confirmed[s.i] = false
		c.nconfirmed--
	}
}

// message wakes the waiters of a channel: the lock was released on a
// node by the token in the message.
func (h *hub) message(s *nodeSub, name, token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s.live = true
	if c := h.chans[name]; c != nil {
		h.wakeAll(c, token)
	}
}

// broken records that node s's connection failed: its subscriptions are
// void until go-redis reconnects, and messages may have been lost.
func (h *hub) broken(s *nodeSub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	wasLive := s.live
	s.live = false
	for _, c := range h.chans {
		if c.confirmed[s.i] {
			c.confirmed[s.i] = false
			c.nconfirmed--
		}
		if wasLive {
			h.wakeAll(c, "")
		}
	}
}

// refused schedules node s's resubscribe after an error reply, unless one
// is pending: the refusals of the channels it subscribes again one by one
// come together. It reports whether s's reader may read on at once: not
// before the connection delivered something since it last broke, as the
// bare error reply can then be a new connection's set-up failing (a
// user's OnConnect) and reading on would redial without a pause.
func (h *hub) refused(s *nodeSub) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed && s.retry == nil {
		s.retryIn = min(max(2*s.retryIn, minBackoff), maxBackoff)
		s.retry = time.AfterFunc(s.retryIn, func() { h.resubscribe(s) })
	}
	return s.live
}

// resubscribe has node s subscribe its unconfirmed channels again.
func (h *hub) resubscribe(s *nodeSub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s.retry = nil
	s.resub = true
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

// close stops every connection and goroutine of the hub.
func (h *hub) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	for _, c := range h.chans {
		if c.idle != nil {
			c.idle.Stop()
		}
	}
	for _, s := range h.subs {
		if s.retry != nil {
			s.retry.Stop()
		}
	}
	subs := h.subs
	h.mu.Unlock()
	// h.ctx ends the dials under way.
	h.cancel()
	for _, s := range subs {
		close(s.stop)
		// Not waited for: go-redis holds the PubSub's lock through the
		// handshake of a connection it dials, to a node that may not
		// answer.
		go s.ps.Close()
	}
	backend.WaitBy(&h.wg, time.Now().Add(closeWait))
}

// control keeps the node's subscriptions equal to the hub's channels.
func (s *nodeSub) control() {
	h := s.h
	defer h.wg.Done()
	subscribed := make(map[string]*channel)
	reading := false
	for {
		select {
		case <-s.stop:
			return
		case <-s.dirty:
		}
		var add, again, drop []string
		h.mu.Lock()
		resub := s.resub
		s.resub = false
		for name, c := range h.chans {
			// A channel dropped and created again is subscribed again, so
			// that the new one gets its confirmation.
			if subscribed[name] != c {
				add = append(add, name)
				subscribed[name] = c
			} else if resub && !c.confirmed[s.i] {
				again = append(again, name)
			}
		}
		for name := range subscribed {
			if h.chans[name] == nil {
				drop = append(drop, name)
				delete(subscribed, name)
			}
		}
		h.mu.Unlock()
		// No deadline: go-redis holds its PubSub's lock while it dials
		// the connection again, and a SUBSCRIBE that waited for it past a
		// deadline fails its write, which go-redis takes for a broken
		// connection: it would close the one it just made and dial again.
		// Its own timeouts bound the call, and close ends h.ctx.
		ctx := h.ctx
		failed := false
		if len(add) > 0 {
			// On failure go-redis keeps the channels and subscribes them
			// when the reader reconnects.
			if err := s.ps.Subscribe(ctx, add...); err != nil {
				h.b.log.Debug("redlock: subscribe failed", "node", h.b.nodes[s.i].addr, "error", err)
				_, reply := err.(redis.Error)
				failed = !reply
			}
		}
		// One a command: a channel still refused must not keep another
		// from its subscription.
		for _, name := range again {
			_ = s.ps.Subscribe(ctx, name)
		}
		if len(drop) > 0 {
			_ = s.ps.Unsubscribe(ctx, drop...)
		}
		if !reading && len(add) > 0 {
			reading = true
			h.wg.Add(1) // this goroutine is counted: Close's Wait cannot be at zero
			// A first SUBSCRIBE whose connection could not be made: the
			// reader's first read would dial again at once.
			go s.read(failed)
		}
	}
}

// read dispatches the node's pub/sub messages until the hub closes. It
// backs off first if wait (the connection just failed).
func (s *nodeSub) read(wait bool) {
	h := s.h
	defer h.wg.Done()
	backoff := minBackoff
	for {
		if wait {
			t := time.NewTimer(backoff)
			select {
			case <-s.stop:
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, maxBackoff)
			wait = false
		}
		// A connection that stays silent is pinged, and dropped (an
		// error here) if it does not answer.
		msg, err := h.health.Receive(h.ctx, s.ps)
		if err != nil {
			select {
			case <-s.stop:
				return
			default:
			}
			// An error reply (a SUBSCRIBE refused by an ACL, say) leaves
			// the connection sound: nothing was lost, and the other
			// channels' messages are read on at once. go-redis does not
			// resubscribe after it, and a refused channel would stay
			// unsubscribed for good: refused has it subscribed again
			// after a backoff. Only a bare reply: one wrapped by go-redis
			// comes from a new connection it could not set up (a login
			// refused).
			_, reply := err.(redis.Error)
			if reply && h.refused(s) {
				continue
			}
			if !reply {
				h.broken(s)
			}
			wait = true
			continue
		}
		backoff = minBackoff
		switch m := msg.(type) {
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe":
				h.confirmed(s, m.Channel)
			case "unsubscribe":
				h.unsubscribed(s, m.Channel)
			}
		case *redis.Message:
			h.message(s, m.Channel, m.Payload)
		}
	}
}
