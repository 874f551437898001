package dlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/backend"
)

// wakeups delivers hand-over messages to the goroutines waiting for locks.
// A Client has one pub/sub connection (on Redis Cluster, one per waited
// channel, since a sharded subscription is bound to its slot's node);
// channels are reference counted by waiters and kept subscribed for a
// short linger after the last one leaves, so a key that is waited on again
// and again costs no SUBSCRIBE/UNSUBSCRIBE round trips.
type wakeups struct {
	rdb    redis.UniversalClient
	linger time.Duration
	health backend.PubSubHealth // of each shard's connection
	// ctx ends with close: the dials under way, which go-redis makes
	// holding its PubSub's lock, and the waits for them, end with it.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	closed   bool
	sharded  *bool // do hand-overs come by SPUBLISH; nil until asked
	shards   map[string]*shard
	channels map[string]*channelSubs
}

// shard is one pub/sub connection and the goroutine reading it.
type shard struct {
	name    string
	ps      *redis.PubSub
	ctx     context.Context // of its calls, ended by stop: the shard is dropped or closed
	stop    context.CancelFunc
	done    chan struct{}
	reading bool // the read goroutine runs
	count   int  // channels subscribed through it

	// op orders the resubscriptions and unsubscriptions sent on ps, which
	// are sent without mu held: an unsubscription decided after a
	// resubscription took its channels goes after it on the connection.
	op sync.Mutex

	// A subscription refused with an error reply is tried again after
	// retryIn (growing while refusals go on); retry is the pending try.
	retry   *time.Timer
	retryIn time.Duration
}

type channelSubs struct {
	shard   *shard
	waiters map[string]*waiter // by token
	isReady bool               // the server confirmed the subscription
	idle    *time.Timer        // pending unsubscribe after the last waiter left
	// pending is closed when the first subscription of the channel, or its
	// unsubscription, both sent without mu held, has its outcome; nil once
	// it has.
	pending chan struct{}
	// err is the outcome of the first subscription, for the waiter that
	// sent it; panicked, the panic it ended with (a go-redis hook's, on the
	// dial), which that waiter raises in its own goroutine.
	err      error
	panicked *backend.Panic

	// early holds hand-overs to tokens that had no waiter yet: a waiter
	// registers after its check joined the queue, and on a channel that is
	// still subscribed the hand-over can arrive in between.
	early      map[string]uint64
	earlyOrder []string // oldest first, to bound early

	// lost is when messages on the channel were last possibly missed (the
	// subscription took effect, the connection dropped, the subscription
	// came back, or a hand-over was dropped from early). The nudges sent
	// then reach only the waiters registered at the time; a waiter whose
	// check is older than lost registers too late for them.
	lost time.Time
}

// maxEarly bounds the hand-overs a channel remembers for waiters yet to
// register. Only the few made since a waiter joined the queue matter; the
// waiters of those dropped past it are told to check again.
const maxEarly = 64

// waiter is one goroutine waiting for the lock on one channel.
type waiter struct {
	w       *wakeups
	channel string
	token   string
	granted chan uint64   // the fence of a lock handed over to token
	nudge   chan struct{} // messages may have been missed: check again
}

func newWakeups(rdb redis.UniversalClient) *wakeups {
	ctx, cancel := context.WithCancel(context.Background())
	return &wakeups{
		rdb:      rdb,
		linger:   5 * time.Second,
		health:   backend.DefaultPubSubHealth,
		ctx:      ctx,
		cancel:   cancel,
		shards:   make(map[string]*shard),
		channels: make(map[string]*channelSubs),
	}
}

// subscribe registers token as waiting on channel. checked is when the
// waiter's last check started: a hand-over made since that the
// subscription may have missed (it was not confirmed yet, or down) is
// found by checking again, when the waiter's nudge channel says so: at
// once if messages may have been missed already, else when the
// subscription takes effect.
func (w *wakeups) subscribe(ctx context.Context, channel, token string, checked time.Time) (*waiter, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var cs, mine *channelSubs
	for {
		if w.closed {
			return nil, ErrClosed
		}
		if mine != nil && mine.err != nil {
			mine.panicked.Raise()
			return nil, mine.err
		}
		cs = w.channels[channel]
		if cs == nil {
			sh, err := w.shardFor(ctx, channel)
			if err != nil {
				return nil, err
			}
			cs = &channelSubs{shard: sh, waiters: make(map[string]*waiter), pending: make(chan struct{})}
			sh.count++
			w.channels[channel] = cs
			mine = cs
			// Subscribing may open a connection (on a cluster, always: one
			// per channel) and wait for the server's answer: not under mu,
			// or a master that does not answer would hold back every other
			// channel's hand-overs, and every waiter's leave. Nor in this
			// goroutine: go-redis waits for its PubSub's lock, held while
			// it dials the connection again, whatever ctx says; this
			// waiter waits for the outcome as any other, until ctx ends.
			// Nor with ctx's deadline: it may pass while go-redis holds its
			// lock, and a write past it fails, which go-redis takes for a
			// broken connection: it would close every other channel's
			// subscriptions. Ending ctx, or the shard, still ends a dial.
			// The first subscription of the Client asks first whether
			// hand-overs come by sharded pub/sub (hasSharded): a request
			// that go-redis does not cut short at ctx's cancellation.
			sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			stop := context.AfterFunc(ctx, cancel)
			stopShard := context.AfterFunc(sh.ctx, cancel)
			go func() {
				w.subscribeConn(sctx, channel, cs, sh.ps)
				stop()
				stopShard()
				cancel()
			}()
		}
		if cs.pending == nil {
			break
		}
		// A subscription or an unsubscription of the channel is under way:
		// wait for its outcome.
		pending := cs.pending
		w.mu.Unlock()
		select {
		case <-pending:
		case <-w.ctx.Done(): // closed
		case <-ctx.Done():
			w.mu.Lock()
			return nil, ctx.Err()
		}
		w.mu.Lock()
	}
	if cs.idle != nil {
		cs.idle.Stop()
		cs.idle = nil
	}
	wt := &waiter{
		w: w, channel: channel, token: token,
		granted: make(chan uint64, 1),
		nudge:   make(chan struct{}, 1),
	}
	cs.waiters[token] = wt
	if !cs.lost.IsZero() && !cs.lost.Before(checked) {
		wt.nudge <- struct{}{}
	}
	if fence, ok := cs.early[token]; ok {
		// Out of earlyOrder too: dropping it later, taken already, would
		// tell the waiters still to register that a hand-over was lost.
		delete(cs.early, token)
		cs.earlyOrder = slices.DeleteFunc(cs.earlyOrder, func(t string) bool { return t == token })
		wt.granted <- fence
	}
	return wt, nil
}

// subscribeConn sends the first subscription of channel, new in w.channels
// with cs.pending open, on ps, its shard's connection, and settles its
// outcome. Called without mu held.
func (w *wakeups) subscribeConn(ctx context.Context, channel string, cs *channelSubs, ps *redis.PubSub) {
	var err error
	var sharded, sent bool
	p := backend.Run(func() {
		if sharded, err = w.hasSharded(ctx, channel); err == nil {
			sent = true
			err = subscribeOn(ctx, ps, channel, sharded)
		}
	})
	if p != nil {
		// Here it would end the process: settled as a failure instead.
		err = fmt.Errorf("dlock: subscribing panicked: %v", p.Value)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	pending := cs.pending
	defer close(pending)
	cs.pending, cs.err, cs.panicked = nil, err, p
	if w.closed {
		return
	}
	sh := cs.shard
	if err != nil {
		sh.count--
		if sent && w.shards[sh.name] == sh && sh.count > 0 {
			// go-redis keeps a channel whose subscription failed in the
			// PubSub's set, and subscribes it again on the next
			// reconnection: take it out, or it stays subscribed with no
			// waiter.
			w.unsubscribeConn(channel, cs, sharded)
			return
		}
		delete(w.channels, channel)
		if w.shards[sh.name] == sh {
			w.dropShardIfEmpty(sh)
		}
		return
	}
	if !sh.reading && w.shards[sh.name] == sh {
		// Read only once connected: on a cluster the first subscription
		// picks the node.
		sh.reading = true
		go w.read(sh)
	}
	// No waiter has registered yet; should the one that sent it have
	// given up, the channel lingers as after its last waiter left. The
	// first to register stops the timer.
	cs.idle = time.AfterFunc(w.linger, func() { w.unsubscribe(channel, cs) })
}

// subscribeOn subscribes channel on ps, sharded or not.
func subscribeOn(ctx context.Context, ps *redis.PubSub, channel string, sharded bool) error {
	if sharded {
		return ps.SSubscribe(ctx, channel)
	}
	return ps.Subscribe(ctx, channel)
}

// hasSharded asks the server once whether hand-overs come by sharded
// pub/sub. The scripts use SPUBLISH if it works and PUBLISH if it fails
// (a server before 7.0 or a renamed command: unknown; an ACL: NOPERM), so
// the question is put to SPUBLISH itself, on the channel about to be
// subscribed (an empty message, which dispatch ignores). Any other failure
// (the server unreachable or loading, an ACL that denies the channel, not
// the command) is an error, never a guess: the wrong kind of subscription
// would miss every hand-over.
func (w *wakeups) hasSharded(ctx context.Context, channel string) (bool, error) {
	w.mu.Lock()
	known := w.sharded
	w.mu.Unlock()
	if known != nil {
		return *known, nil
	}
	err := w.rdb.SPublish(ctx, channel, "").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "ERR unknown command") && !commandDenied(err) {
		return false, err
	}
	yes := err == nil
	w.mu.Lock()
	w.sharded = &yes
	w.mu.Unlock()
	return yes, nil
}

// commandDenied reports whether err is an ACL's refusal of SPUBLISH itself
// ("... no permissions to run the 'spublish' command"), not of its channel
// ("... to access one of the channels"), which the ACL may allow later.
func commandDenied(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "NOPERM") && strings.Contains(strings.ToLower(msg), "'spublish' command")
}

// shardFor returns the connection to subscribe channel on. Called with mu held.
func (w *wakeups) shardFor(ctx context.Context, channel string) (*shard, error) {
	name := ""
	if _, ok := w.rdb.(*redis.ClusterClient); ok {
		name = channel
	}
	if sh := w.shards[name]; sh != nil {
		return sh, nil
	}
	sh := &shard{name: name, done: make(chan struct{})}
	sh.ctx, sh.stop = context.WithCancel(w.ctx)
	// A PubSub without channels connects on its first subscription.
	sh.ps = w.rdb.Subscribe(ctx)
	w.shards[name] = sh
	return sh, nil
}

// dropShardIfEmpty closes a shard no channel uses. Called with mu held.
func (w *wakeups) dropShardIfEmpty(sh *shard) {
	if sh.count > 0 {
		return
	}
	delete(w.shards, sh.name)
	stopRetry(sh)
	sh.stop()
	// Not under mu: go-redis may be dialing the connection again, holding
	// the PubSub's lock, to a master that does not answer; Close waits
	// for that, and every other channel's hand-overs would wait with it.
	go sh.ps.Close()
}

// stopRetry cancels sh's pending resubscription. Called with mu held.
func stopRetry(sh *shard) {
	if sh.retry != nil {
		sh.retry.Stop()
		sh.retry = nil
	}
}

// leave unregisters wt. The channel stays subscribed for the linger time.
func (wt *waiter) leave() {
	w := wt.w
	w.mu.Lock()
	defer w.mu.Unlock()
	cs := w.channels[wt.channel]
	if cs == nil || cs.waiters[wt.token] != wt {
		return
	}
	delete(cs.waiters, wt.token)
	if len(cs.waiters) > 0 || w.closed {
		return
	}
	cs.idle = time.AfterFunc(w.linger, func() { w.unsubscribe(wt.channel, cs) })
}

// unsubscribe drops a channel that stayed unused for the linger time.
func (w *wakeups) unsubscribe(channel string, cs *channelSubs) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.channels[channel] != cs || len(cs.waiters) > 0 || cs.pending != nil {
		return
	}
	sh := cs.shard
	sh.count--
	if sh.count == 0 && sh.name != "" {
		delete(w.channels, channel)
		w.dropShardIfEmpty(sh)
		return
	}
	w.unsubscribeConn(channel, cs, w.sharded != nil && *w.sharded)
}

// unsubscribeConn unsubscribes channel, in w.channels as cs and no longer
// counted in its shard, on the shard's connection, then forgets it. Called
// with mu held; the round trip is made without it (a connection that hangs
// would hold back every other channel), and until it is done the channel
// stays pending: a waiter that subscribes it again waits, or its SUBSCRIBE
// could go before this UNSUBSCRIBE.
func (w *wakeups) unsubscribeConn(channel string, cs *channelSubs, sharded bool) {
	done := make(chan struct{})
	cs.pending = done
	sh, ps := cs.shard, cs.shard.ps
	go func() {
		sh.op.Lock()
		// No deadline: go-redis may hold its lock past it (a redial), and
		// a write past it fails and closes the connection of every other
		// channel (see subscribe); its own timeouts bound the call, and
		// the shard's end.
		if sharded {
			_ = ps.SUnsubscribe(sh.ctx, channel)
		} else {
			_ = ps.Unsubscribe(sh.ctx, channel)
		}
		sh.op.Unlock()
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.channels[channel] == cs {
			delete(w.channels, channel)
		}
		cs.pending = nil
		close(done)
	}()
}

// read dispatches the messages of one connection until it is closed.
func (w *wakeups) read(sh *shard) {
	defer close(sh.done)
	backoff := time.NewTimer(0)
	defer backoff.Stop()
	// live: the connection delivered something since it last broke.
	live := false
	w.mu.Lock()
	health := w.health
	w.mu.Unlock()
	for {
		// sh.ctx ends a redial that hangs, which holds back Close. A
		// connection that stays silent is pinged, and dropped (an error
		// here) if it does not answer.
		msg, err := health.Receive(sh.ctx, w.conn(sh))
		// A cluster subscription lands on a node that no longer owns the
		// channel's slot: move it (wakeups_cluster.go).
		moved := err != nil && isRedirect(err)
		if m, ok := msg.(*redis.Subscription); ok && m.Kind == "sunsubscribe" {
			moved = w.droppedByServer(sh, m.Channel)
		}
		if _, reply := err.(redis.Error); reply && !moved {
			// An error reply (a SUBSCRIBE refused by an ACL, say) leaves
			// the connection sound: go-redis neither reconnects nor
			// resubscribes, and nothing was lost, but the refused channel
			// would stay unsubscribed for good: retryLater subscribes it
			// again, and reading goes on at once. Not so for a reply
			// wrapped by go-redis, or one that came before the connection
			// delivered anything: a new connection that could not be set
			// up (a login refused, the Redis client's OnConnect failing),
			// which the next Receive would try again at once, in a tight
			// loop. Those wait for the backoff below.
			w.retryLater(sh)
			if live {
				continue
			}
		}
		if err != nil || moved {
			live = false
			select {
			case <-sh.ctx.Done():
				return
			default:
			}
			// go-redis reconnects and resubscribes on the next Receive, but
			// messages sent meanwhile are gone: every waiter checks again.
			w.nudgeAll(sh)
			if !moved && sh.name != "" {
				// The node is gone: go-redis resubscribes where its slot
				// map says, which must learn of a failover.
				reloadSlots(context.Background(), w.rdb, err)
			}
			backoff.Reset(100 * time.Millisecond)
			select {
			case <-sh.ctx.Done():
				return
			case <-backoff.C:
			}
			if moved {
				w.rebind(sh)
			}
			continue
		}
		live = true
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				w.markReady(m.Channel)
			}
		case *redis.Message:
			w.dispatch(m.Channel, m.Payload)
		}
	}
}

func (w *wakeups) markReady(channel string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cs := w.channels[channel]
	if cs == nil {
		return
	}
	cs.isReady = true
	cs.shard.retryIn = 0
	// Subscribed, for the first time or again (after a reconnection or a
	// slot move): hand-overs sent before may be missed. Every waiter whose
	// check is older checks again: those registered now by a nudge, those
	// still to register when they do (subscribe).
	cs.lost = time.Now()
	for _, wt := range cs.waiters {
		select {
		case wt.nudge <- struct{}{}:
		default:
		}
	}
}

// dispatch hands a "token fence" message to the waiter it names, if it is
// one of ours; every other waiter sleeps on.
func (w *wakeups) dispatch(channel, payload string) {
	token, fenceStr, ok := strings.Cut(payload, " ")
	if !ok {
		return
	}
	fence, err := strconv.ParseUint(fenceStr, 10, 64)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	cs := w.channels[channel]
	if cs == nil {
		return
	}
	if wt := cs.waiters[token]; wt != nil {
		select {
		case wt.granted <- fence:
		default:
		}
		return
	}
	if cs.early == nil {
		cs.early = make(map[string]uint64)
	}
	if len(cs.earlyOrder) == maxEarly {
		delete(cs.early, cs.earlyOrder[0])
		cs.earlyOrder = cs.earlyOrder[1:]
		// A hand-over dropped, maybe one whose waiter is still to register
		// (one release of permits can hand them to many waiters at once):
		// such a waiter, whose check is older, checks again (subscribe).
		cs.lost = time.Now()
	}
	cs.early[token] = fence
	cs.earlyOrder = append(cs.earlyOrder, token)
}

// nudgeAll tells the waiters of sh's channels to check again: the
// connection broke or moved, and its subscriptions are void until the
// server confirms them again.
func (w *wakeups) nudgeAll(sh *shard) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, cs := range w.channels {
		if cs.shard != sh {
			continue
		}
		cs.isReady = false
		cs.lost = time.Now()
		for _, wt := range cs.waiters {
			select {
			case wt.nudge <- struct{}{}:
			default:
			}
		}
	}
}

// retryLater subscribes sh's unconfirmed channels again after a backoff,
// from 100 ms to 1 s while the refusals go on (a confirmation resets it).
// The read goroutine keeps reading meanwhile, and a refusal that comes
// while a try is pending schedules no other.
func (w *wakeups) retryLater(sh *shard) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if sh.retry != nil {
		return
	}
	sh.retryIn = min(max(2*sh.retryIn, 100*time.Millisecond), time.Second)
	sh.retry = time.AfterFunc(sh.retryIn, func() { w.resubscribe(sh) })
}

// resubscribe subscribes sh's unconfirmed channels again, one by one: a
// channel still refused must not keep another from its subscription. The
// confirmed ones are left alone: each confirmation nudges the channel's
// waiters to check again, for nothing.
func (w *wakeups) resubscribe(sh *shard) {
	// The subscriptions are sent without mu held: a connection that hangs
	// would hold back every other channel. Under sh.op from the choice of
	// the channels on: one unsubscribed meanwhile is so after.
	sh.op.Lock()
	defer sh.op.Unlock()
	w.mu.Lock()
	sh.retry = nil
	if w.closed || w.shards[sh.name] != sh {
		w.mu.Unlock()
		return
	}
	var channels []string
	for channel, cs := range w.channels {
		if cs.shard == sh && !cs.isReady && cs.pending == nil {
			channels = append(channels, channel)
		}
	}
	ps, sharded := sh.ps, w.sharded != nil && *w.sharded
	w.mu.Unlock()
	// No deadline, as in unsubscribeConn.
	for _, channel := range channels {
		// A refusal comes back through Receive; a failed write has
		// go-redis reconnect and resubscribe every channel.
		_ = subscribeOn(sh.ctx, ps, channel, sharded)
	}
}

// close stops all connections and their goroutines.
func (w *wakeups) close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.cancel()
	for _, cs := range w.channels {
		if cs.idle != nil {
			cs.idle.Stop()
		}
	}
	shards := w.shards
	w.shards = map[string]*shard{}
	for _, sh := range shards {
		stopRetry(sh)
		sh.stop()
		// Not under mu, and not waited for without bound: go-redis may
		// be dialing the connection again, holding the PubSub's lock, to
		// a master that does not answer (see dropShardIfEmpty).
		go sh.ps.Close()
	}
	w.mu.Unlock()
	// w.ctx ended the dials; a reader held by the handshake of a
	// connection just dialed, which only go-redis's ReadTimeout ends, is
	// waited for no longer than closeReadersWait.
	timer := time.NewTimer(closeReadersWait)
	defer timer.Stop()
	for _, sh := range shards {
		if sh.reading {
			select {
			case <-sh.done:
			case <-timer.C:
				return
			}
		}
	}
}

// closeReadersWait bounds how long close waits for the read goroutines.
const closeReadersWait = time.Second
