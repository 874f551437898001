package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/backend"
)

// hold is one acquisition of a lock: what the watchdog renews and what is
// lost when the lease can no longer be trusted. Reentrant Lock values share
// the hold of the outermost one.
type hold struct {
	lease *backend.Lease // what the backend knows the lock by
	fence uint64
	kind  string // "lock", or a semaphore's kind (kindOf): for the Observer

	ctx    context.Context // cancelled with the reason when lost or released
	cancel context.CancelCauseFunc

	x *holdExtra // the optional features' state (hooks.go); nil if none

	// Changes of an inner level (a re-entry, an inner Unlock) go one at a
	// time (changeLevel), so a request go-redis sends again after a lost
	// reply meets the count it was meant for, not one that another
	// goroutine's re-entry has set since. levels is the hold count the
	// last of them returned (1 at the grant): a re-entry asks for one more.
	// Guarded by levelTurn.
	levelTurn turn
	levels    int

	// Guarded by watchdog.mu.
	ttl        time.Duration // the lease each renewal sets
	renew      bool          // renewal on; false after WithMaxHold ran out
	renewUntil time.Time     // zero: renew until unlocked
	deadline   time.Time     // the lease can be trusted before this instant
	nextRenew  time.Time
	slack      time.Duration // how early a renewal may go to share a round trip
	trusted    time.Duration // the lease last trusted (trust): a hand-over's is shorter than ttl
	txnFrom    time.Time     // zero, or when a Txn begins after the renewal: the last went early (txnDue)
	busy       bool          // a renewal or an Extend is in flight
	renewSent  time.Time     // when the renewal in flight was sent; zero if none is
	renewErr   error         // why the last renewal failed, nil if it did not: in the loss's cause
	txns       int           // Txns under way (txnBegin): the renewal waits for them (renewAt)
	idle       chan struct{} // if not nil, closed when busy ends (an Extend waits)
	releasing  bool          // Unlock of the outermost level has begun
	selfFreed  bool          // unwatched as released by its Unlock under way, which has not reported that yet (freedBySelf)
	handing    bool          // watched, its grant not reported yet (handOut)
	lostBy     error         // the cause it was lost with while handing: handOut reports it
	expiry     *time.Timer   // after Close, while its Unlock is under way: ends it at its deadline
}

// trust records that Redis granted or reset a lease of d at some instant
// after start. The deadline is measured from start, before the request was
// sent, and less the drift margin, so it passes before Redis can expire the
// key and hand the lock to someone else.
func (h *hold) trust(start time.Time, d time.Duration) {
	h.deadline = start.Add(d - backend.Drift(d))
	h.nextRenew = start.Add(d / 3)
	h.slack = d / 6
	h.trusted = d
	h.txnFrom = time.Time{}
	h.renewErr = nil // the lease was reset since: not why it may run out
}

// lostErr is ErrLockLost as h's loss says it: for permits, naming their
// semaphore (permitsLost).
func (h *hold) lostErr() error {
	if h.kind == kindOf(nil) {
		return ErrLockLost
	}
	return permitsLost{h.kind, h.lease.Key}
}

// changeLevel runs change, a re-entry or an inner release, given the hold
// count last returned, with no other level change of h under way, and
// records the count it returns. Waiting for a change under way honours
// ctx: if it ends first, change is not run and the error is ctx's, as for
// a request never sent.
func (h *hold) changeLevel(ctx context.Context, change func(levels int) (int64, error)) (int64, error) {
	if err := h.levelTurn.take(ctx); err != nil {
		return 0, notSentError{err}
	}
	defer h.levelTurn.done()
	n, err := change(h.levels)
	if err == nil && n > 0 {
		h.levels = int(n)
	}
	return n, err
}

// watchdog renews the held locks of one Client from a single goroutine and
// declares a lock lost when its deadline passes without a renewal. Renewals
// due close together go to Redis in one pipelined round trip.
type watchdog struct {
	c *Client

	mu      sync.Mutex
	holds   map[*hold]struct{}
	running bool
	wakeAt  time.Time // when the loop will look again; zero if idle
	kick    chan struct{}
	stop    chan struct{}

	inflight sync.WaitGroup // renewal round trips under way
	// ctx is the renewals' parent: close cancels it, so that it does not
	// wait for renewals retrying against a Redis that is gone.
	ctx    context.Context
	cancel context.CancelFunc
}

// renewTimeout bounds one renewal round trip; the lease's deadline is
// watched separately, and close cancels the renewals under way.
const renewTimeout = 5 * time.Second

func newWatchdog(c *Client) *watchdog {
	ctx, cancel := context.WithCancel(context.Background())
	return &watchdog{
		c:      c,
		holds:  make(map[*hold]struct{}),
		kick:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		ctx:    ctx,
		cancel: cancel,
	}
}

// add starts watching h. It returns ErrClosed after close.
func (w *watchdog) add(h *hold) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.stop:
		return ErrClosed
	default:
	}
	w.holds[h] = struct{}{}
	h.handing = true
	if !w.running {
		w.running = true
		go w.run()
	}
	if w.wakeAt.IsZero() || w.nextEvent(h).Before(w.wakeAt) {
		w.poke()
	}
	return nil
}

// poke makes the loop look at the holds again.
func (w *watchdog) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// remove stops watching h (it was released). It reports whether h was
// still watched: false if it was already released or declared lost.
func (w *watchdog) remove(h *hold) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.holds[h]
	w.drop(h)
	return ok
}

// drop stops watching h. Called with mu held.
func (w *watchdog) drop(h *hold) {
	delete(w.holds, h)
	if h.expiry != nil {
		h.expiry.Stop()
		h.expiry = nil
	}
}

// claim waits until no renewal of h is under way and marks h busy, so that
// no renewal starts until extended: an Extend and a renewal must not race,
// since whichever ran last in Redis sets the lease, but the reply read last
// would set the deadline. It fails as awaitIdle does: an Extend of a lock
// nobody holds any more must not reset its lease in Redis.
func (w *watchdog) claim(ctx context.Context, h *hold) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.awaitIdle(ctx, h, false); err != nil {
		return err
	}
	h.busy = true
	return nil
}

// awaitIdle waits until no renewal or Extend of h is under way, nor, with
// due, a renewal due now (it pokes the loop to send it; after close, none
// is sent). It fails with ctx's error, or with h's cause once h has ended
// (lost, closed or released), while it waits too. Called with mu held,
// which it lets go of while it waits.
func (w *watchdog) awaitIdle(ctx context.Context, h *hold, due bool) error {
	for h.ctx.Err() == nil {
		if now := time.Now(); !h.busy && !(due && (h.txnDue(now) || h.txnBehind(now)) && !w.closed()) {
			return nil
		}
		if !h.busy {
			w.poke()
		}
		if h.idle == nil {
			h.idle = make(chan struct{})
		}
		idle := h.idle
		w.mu.Unlock()
		var err error
		select {
		case <-idle:
		case <-h.ctx.Done():
		case <-ctx.Done():
			err = ctx.Err()
		}
		w.mu.Lock()
		if err != nil {
			return err
		}
	}
	return context.Cause(h.ctx)
}

// closed reports whether close has stopped the loop: a renewal due is
// never sent (a hold left to its Unlock under way is renewed no more).
func (w *watchdog) closed() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// txnBegin records that a Txn of h is under way, once a renewal or an
// Extend on its way, or a renewal due now, has been answered: either moves
// the key the Txn WATCHes. From then on h's renewal waits for txnEnd
// (renewAt). It fails as awaitIdle does, and then records nothing.
func (w *watchdog) txnBegin(ctx context.Context, h *hold) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.awaitIdle(ctx, h, true); err != nil {
		return err
	}
	h.txns++
	return nil
}

// txnEnd records that a Txn of h has ended: a renewal it held back goes
// now. The last one pokes the loop whenever a Txn waits for that renewal
// (txnBehind): the loop's next look may be for another lock, due before
// h's renewal but long after the renewal may go.
func (w *watchdog) txnEnd(h *hold) {
	w.mu.Lock()
	h.txns--
	poke := h.txns == 0 && (h.idle != nil || w.wakeAt.IsZero() || w.nextEvent(h).Before(w.wakeAt))
	w.mu.Unlock()
	if poke {
		w.poke()
	}
}

// extending records that an Extend to ttl is sent at start (after
// claim). Redis applies it when it runs it, which may be long before its
// reply comes: a shorter lease is then all Redis keeps, so until extended
// the lock is trusted no longer than the shorter of the two.
func (w *watchdog) extending(h *hold, start time.Time, ttl time.Duration) {
	w.mu.Lock()
	d := start.Add(ttl - backend.Drift(ttl))
	sooner := d.Before(h.deadline)
	if sooner {
		h.deadline = d
		w.expireAtDeadline(h)
	}
	w.mu.Unlock()
	if sooner {
		w.poke() // the loop watches the new deadline
	}
}

// expireAtDeadline moves the timer that ends h after close, while its
// Unlock is under way, to h's deadline, which an Extend has just moved.
// Called with mu held.
func (w *watchdog) expireAtDeadline(h *hold) {
	if h.expiry != nil {
		h.expiry.Reset(time.Until(h.deadline))
	}
}

// finish ends a renewal or an Extend of h. Called with mu held.
func (w *watchdog) finish(h *hold) {
	h.busy = false
	if h.idle != nil {
		close(h.idle)
		h.idle = nil
	}
}

// extended ends an Extend to ttl begun at start (after claim). A lease
// Redis granted is trusted from start and becomes the lease the watchdog
// keeps renewing. If the outcome is not known (err), the lease may or may
// not have been reset to ttl: only what holds either way is trusted.
func (w *watchdog) extended(h *hold, start time.Time, ttl time.Duration, o backend.Outcome, err error) {
	w.mu.Lock()
	switch {
	case err != nil:
		// For good (until an Extend succeeds): the request may still
		// reach Redis after a renewal, and shorten the lease it set.
		h.ttl = min(h.ttl, ttl)
		if d := start.Add(ttl - backend.Drift(ttl)); d.Before(h.deadline) {
			h.deadline = d
		}
		if r := start.Add(ttl / 3); r.Before(h.nextRenew) {
			h.nextRenew = r
		}
		// A renewal may go early only by a sixth of the lease it now
		// renews: the longer lease's sixth would leave it a third.
		h.slack = min(h.slack, ttl/6)
		h.trusted = min(h.trusted, ttl)
	case o == backend.Held:
		h.ttl = ttl
		h.trust(start, ttl)
	}
	w.expireAtDeadline(h)
	w.finish(h)
	w.mu.Unlock()
	w.poke()
}

// releasing records that Unlock is releasing h's outermost hold. From then
// on a renewal that finds the lock gone may have met that release: Unlock,
// not the watchdog, says whether it was lost (and gives h up if the
// release fails).
func (w *watchdog) releasing(h *hold) {
	w.mu.Lock()
	h.releasing = true
	w.mu.Unlock()
}

// releasedBySelf stops watching h if Unlock is releasing it, and reports
// whether it was: a call that finds the lock gone then met that release.
func (w *watchdog) releasedBySelf(h *hold) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !h.releasing {
		return false
	}
	w.dropReleased(h)
	return true
}

// dropReleased stops watching h, found gone while its Unlock is under way:
// that Unlock's release removed it, and reports the hold's end
// (freedBySelf). Called with mu held.
func (w *watchdog) dropReleased(h *hold) {
	if _, ok := w.holds[h]; ok {
		h.selfFreed = true
	}
	w.drop(h)
}

// freedBySelf reports whether a renewal (or an Extend, a TTL, an inner
// Unlock) found h gone while its outermost Unlock was under way, and
// stopped watching it as released, without reporting a loss: true once at
// most, to the Unlock that then reports the hold's end.
func (w *watchdog) freedBySelf(h *hold) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	freed := h.selfFreed
	h.selfFreed = false
	return freed
}

// handedOut records that h's grant has been reported. It returns the
// cause h was lost with meanwhile, for the caller to report, or nil.
func (w *watchdog) handedOut(h *hold) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	h.handing = false
	return h.lostBy
}

// deadline returns until when h's lease can be trusted.
func (w *watchdog) deadline(h *hold) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return h.deadline
}

// close stops the loop and ends every held lock as lost: nothing renews
// them any more. It returns the locks with their cause, for Close to
// report to the Observer once it is done (Lost may call Close). The loop
// is not waited for: it starts no renewal once the holds are gone (scan),
// and it may be the caller, closing from an Observer callback.
func (w *watchdog) close() map[*hold]error {
	w.mu.Lock()
	select {
	case <-w.stop:
		w.mu.Unlock()
		return nil
	default:
	}
	close(w.stop)
	holds := w.holds
	w.holds = map[*hold]struct{}{}
	lost := make(map[*hold]error, len(holds))
	for h := range holds {
		cause := fmt.Errorf("%w: %w", h.lostErr(), ErrClosed)
		switch {
		case h.releasing:
			// Its Unlock, under way, settles it: released, or given up
			// (Lost) if the release fails; not both. Renewed no more, it
			// is lost at its deadline if that Unlock has not settled it by
			// then (as the loop would have declared it), lest its Context
			// outlive its lease.
			w.holds[h] = struct{}{}
			if !h.busy {
				// A Txn waiting for a renewal due (awaitIdle) goes on
				// without it: the loop sends none any more.
				w.finish(h)
			}
			h.expiry = time.AfterFunc(time.Until(h.deadline), func() {
				if w.remove(h) {
					w.c.noPanic("watchdog", func() {
						w.lose(h, fmt.Errorf("%w: %w: the lease ran out before its Unlock was answered", h.lostErr(), ErrClosed))
					})
				}
			})
		case h.handing:
			// Lost after its grant is reported (handOut), not before.
			h.lostBy = cause
			w.end(h, cause)
		default:
			lost[h] = cause
		}
	}
	w.mu.Unlock()
	w.cancel() // every hold is lost below: their renewals are moot
	// Lost at once, before any wait: nothing watches their deadlines any
	// more, and a Context must not outlive its lease.
	w.endAll(lost)
	return lost
}

// wait waits, after close, for the renewals under way until deadline.
// go-redis may not cut a read short at the cancellation (only with
// ContextTimeoutEnabled): a renewal stuck on a hung Redis is not waited for
// past deadline. Once it ends it finds the holds gone and reports nothing.
func (w *watchdog) wait(deadline time.Time) {
	backend.WaitBy(&w.inflight, deadline)
}

func (w *watchdog) lose(h *hold, cause error) {
	w.end(h, cause)
	w.report(h, cause)
}

// loseAll is lose for every hold in lost (with its cause), each step for
// them all before the next: reporting a loss (the log, the Observer) takes
// time, which must not delay another's Context.
func (w *watchdog) loseAll(lost map[*hold]error) {
	w.endAll(lost)
	for h, cause := range lost {
		// Each on its own: a panic in the Observer's Lost for one must
		// not keep the others' from it.
		w.c.noPanic("watchdog", func() { w.report(h, cause) })
	}
}

// report tells the Observer that h was lost with cause, or, while its
// grant is not reported yet, leaves that to handOut: a lock's Lost comes
// after its AcquireEnd, not before.
func (w *watchdog) report(h *hold, cause error) {
	w.mu.Lock()
	if h.handing {
		h.lostBy = cause
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	w.c.observeLost(h, cause)
}

// endAll is end for every hold in lost, every Context before the first log
// record.
func (w *watchdog) endAll(lost map[*hold]error) {
	for h, cause := range lost {
		h.cancel(cause)
	}
	for h, cause := range lost {
		w.end(h, cause)
	}
}

// end ends h as lost with cause, without telling the Observer. A panic of
// the log's handler is logged, not raised, wherever the loss is found: it
// must keep no loss from the Observer (loseAll, Close, Unlock), nor leave
// mu held (close).
func (w *watchdog) end(h *hold, cause error) {
	h.cancel(cause)
	w.c.noPanic("logger", func() {
		w.c.log.Warn("dlock: lock lost", "key", h.lease.Key, "kind", h.kind, "fence", h.fence, "error", cause)
	})
}

// nextEvent is when h next needs the loop: its renewal, or its deadline.
func (w *watchdog) nextEvent(h *hold) time.Time {
	if at, _ := h.renewAt(); h.renew && !h.busy && at.Before(h.deadline) {
		return at
	}
	return h.deadline
}

// renewDue reports whether the loop renews h at now, if it sends a round
// trip then (renewOverdue). Called with mu held.
func (h *hold) renewDue(now time.Time) bool {
	at, slack := h.renewAt()
	return h.renew && !h.busy && !now.Before(at.Add(-slack))
}

// txnDue reports whether a Txn beginning at now waits for h's renewal,
// and the loop sends it then: one renewDue, or, after a renewal that went
// early (its next is due a third of the lease after it was due, not after
// it went), one past a sixth of the lease after that renewal went, as
// renewDue would have been. A Txn begun later would have less than half
// the lease before the renewal it holds back goes all the same (renewAt),
// and would start over. Called with mu held.
func (h *hold) txnDue(now time.Time) bool {
	if h.renewDue(now) {
		return true
	}
	return h.renew && !h.busy && h.txns == 0 && !h.txnFrom.IsZero() && !now.Before(h.txnFrom)
}

// txnBehind reports whether a Txn beginning at now, while others of h are
// under way, waits for h's renewal, which the loop sends once they end (or
// at renewAt): the renewal they hold back would go all the same within
// half the lease, and this Txn, in flight then, would start over. Not
// after a renewal failed: its retries are not waited for (nor are they by
// a lone Txn beyond renewDue), the Txn goes on. Called with mu held.
func (h *hold) txnBehind(now time.Time) bool {
	if !h.renew || h.busy || h.txns == 0 || h.renewErr != nil {
		return false
	}
	at, _ := h.renewAt()
	return !now.Before(at.Add(-h.trusted / 2))
}

// renewOverdue reports whether h's renewal is due at now, not only close
// enough to go with another's. Called with mu held.
func (h *hold) renewOverdue(now time.Time) bool {
	at, _ := h.renewAt()
	return h.renew && !h.busy && !now.Before(at)
}

// renewAt returns when h's renewal is due, and how much earlier it may go
// to share a round trip with others. Called with mu held.
//
// A renewal moves the key a Txn of h WATCHes, and the Txn then starts
// over, so while one is under way the renewal waits for it (txnEnd pokes
// the loop), and is not pulled forward into it. Invariant: a Txn never
// puts h's renewal off past the instant a third of its trusted lease is
// left, nor past nextRenew if that is later (a renewal that failed keeps
// its retries): a Txn that hangs leaves the renewal that much time to be
// answered, or retried, before the deadline.
func (h *hold) renewAt() (at time.Time, slack time.Duration) {
	if h.txns == 0 {
		return h.nextRenew, h.slack
	}
	if last := h.deadline.Add(-h.trusted / 3); last.After(h.nextRenew) {
		return last, 0
	}
	return h.nextRenew, 0
}

func (w *watchdog) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, lost, next := w.scan(time.Now())
		if len(due) > 0 {
			// Counted in inflight by scan: started before the losses are
			// reported, since Lost may call Close, which waits for it.
			go w.renewAll(due)
		}
		if len(lost) > 0 {
			w.c.noPanic("watchdog", func() { w.loseAll(lost) })
		}
		// From now, not from the scan: reporting the losses (the log, the
		// Observer) took time, which must not delay the next deadline.
		timer.Reset(max(time.Until(next), 0))
		select {
		case <-timer.C:
		case <-w.kick:
		case <-w.stop:
			return
		}
	}
}

// renewAll renews due in one round trip per server (group), each answered
// on its own. Called counted once in inflight (scan).
func (w *watchdog) renewAll(due []*hold) {
	groups := w.group(due)
	w.inflight.Add(len(groups) - 1) // while scan's count holds close's Wait
	for _, g := range groups[1:] {
		go w.renew(g)
	}
	w.renew(groups[0])
}

// renewGrouper is a backend whose renewals go to several servers (the
// masters of a Redis Cluster): it names the server of a lease.
type renewGrouper interface {
	RenewGroup(l *backend.Lease) string
}

// group splits due renewals by server, so that each server's are renewed
// in a round trip of their own and one that does not answer holds back
// the answers of only its own locks: the others' are trusted as soon as
// they come, not when that round trip times out (a lease shorter than
// that would be declared lost while its renewals succeed).
func (w *watchdog) group(due []*hold) [][]*hold {
	g, ok := w.c.be.(renewGrouper)
	if !ok {
		return [][]*hold{due}
	}
	at := make(map[string]int)
	var groups [][]*hold
	for _, h := range due {
		name := g.RenewGroup(h.lease)
		i, seen := at[name]
		if !seen {
			i = len(groups)
			at[name] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], h)
	}
	return groups
}

// scan sorts the holds at now: those past their deadline are lost, those
// whose renewal is due (or close enough to batch with it) are marked busy
// and returned. next is when the next event is.
func (w *watchdog) scan(now time.Time) (due []*hold, lost map[*hold]error, next time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.stop:
		// Closed: the holds left are being unlocked; no renewal starts
		// that close would not wait for.
		return nil, nil, now.Add(time.Hour)
	default:
	}
	next = now.Add(time.Hour)
	var ready []*hold // renewals due, or close enough to go with one
	send := false     // one of them is to go now
	for h := range w.holds {
		if !now.Before(h.deadline) {
			if lost == nil {
				lost = make(map[*hold]error)
			}
			const ranOut = "the lease ran out before it could be renewed"
			why := ranOut
			switch {
			case h.x != nil && h.x.degraded:
				why = "held for its max hold" // no lease: WithMaxHold's deadline
			case !h.renewUntil.IsZero() && !now.Before(h.renewUntil):
				why = "held for its max hold: renewed no more, its lease ran out"
			case !h.renew:
				// No renewal was due: none failed.
				why = "its fixed lease (WithoutRenewal) ran out"
			}
			switch {
			case h.renewErr != nil && why == ranOut:
				// Say why: a failover under way (READONLY), too few
				// replicas (ErrNotReplicated), Redis unreachable.
				lost[h] = fmt.Errorf("%w: %s, the last renewal failed: %w", h.lostErr(), why, h.renewErr)
			case !h.renewSent.IsZero() && why == ranOut:
				// None failed since the last answered: one is still on
				// its way. Its error comes too late, but its wait tells:
				// a Redis that does not answer, or go-redis still
				// dialling or retrying one that is down (DialerRetries,
				// MaxRetries).
				lost[h] = fmt.Errorf("%w: %s, its renewal unanswered after %v", h.lostErr(), why, now.Sub(h.renewSent).Round(time.Millisecond))
			default:
				lost[h] = fmt.Errorf("%w: %s", h.lostErr(), why)
			}
			delete(w.holds, h)
			continue
		}
		if h.renew && !h.renewUntil.IsZero() && !now.Before(h.renewUntil) {
			h.renew = false // WithMaxHold: let the lease run out.
		}
		// Renew up to a sixth of the trusted lease early so that locks
		// taken at about the same time share one round trip: only with
		// one that goes anyway, due now or awaited by a Txn (awaitIdle).
		// Were every look of the loop (one after each answer) to send
		// those within a sixth, renewals would go in back-to-back round
		// trips of a few each.
		if h.renewDue(now) || (h.idle != nil && h.txnDue(now)) {
			send = send || h.renewOverdue(now) || h.idle != nil
			ready = append(ready, h)
			continue
		}
		if !h.busy && h.idle != nil && !h.txnBehind(now) {
			// Not renewed after all (WithMaxHold, or not due by this
			// scan's clock): a Txn waiting for the renewal looks again.
			// One behind others waits on: the renewal goes once they end.
			w.finish(h)
		}
		if e := w.nextEvent(h); e.Before(next) {
			next = e
		}
	}
	for _, h := range ready {
		if send {
			h.busy = true
			h.renewSent = now
			due = append(due, h)
		}
		if e := w.nextEvent(h); e.Before(next) {
			next = e
		}
	}
	w.wakeAt = next
	if len(due) > 0 {
		// Under mu: once close has taken the holds, no renewal is added
		// to those it waits for.
		w.inflight.Add(1)
	}
	return due, lost, next
}

// renew sends one batch of renewals (one pipelined round trip on a single
// Redis). It runs beside the loop, which keeps watching deadlines: go-redis
// does not cut a read short at the context's deadline unless configured
// to, so a hung Redis could otherwise hold the loss signal back.
func (w *watchdog) renew(due []*hold) {
	ctx, cancel := context.WithTimeout(w.ctx, renewTimeout)
	defer cancel()
	rs := make([]backend.Renewal, len(due))
	w.mu.Lock()
	for i, h := range due {
		rs[i] = backend.Renewal{Lease: h.lease, TTL: h.ttl}
	}
	w.mu.Unlock()
	start := time.Now()
	var outcomes []backend.Renewed
	if p := backend.Run(func() { outcomes = w.c.be.Renew(ctx, rs) }); p != nil {
		// A go-redis hook's, with no caller to go to: the renewals count
		// as unanswered (Unknown), retried until the deadlines pass.
		p.Log(w.c.log, "dlock: panic in a renewal")
		outcomes = make([]backend.Renewed, len(rs))
		for i := range outcomes {
			outcomes[i].Err = errRenewPanicked
		}
	}

	w.mu.Lock()
	// Once close has taken the holds (and cancelled this round trip), it
	// reports them Lost: their outcomes here say nothing.
	closing := false
	select {
	case <-w.stop:
		closing = true
	default:
	}
	lost := make(map[*hold]error)
	var released []*hold
	var failed []renewFailure // for the log, with the error (renewErr may change once mu is let go)
	watched := 0              // due[:watched] were still watched: the Observer hears of those
	for i, h := range due {
		w.finish(h)
		h.renewSent = time.Time{}
		if _, ok := w.holds[h]; !ok {
			continue // released or lost meanwhile: the answer says nothing
		}
		due[watched], outcomes[watched] = h, outcomes[i]
		watched++
		switch outcomes[i].Outcome {
		case backend.Held:
			was, slack := h.nextRenew, h.slack
			h.trust(start, rs[i].TTL)
			if was.After(start) && !was.After(start.Add(slack)) {
				// Sent early, to share a round trip: the next is due a
				// third of the lease after this one was, not after it
				// went, or a lock renewed in rounds that follow one
				// another would go early every time. A Txn beginning a
				// sixth of the lease after it went waits for it (txnDue).
				h.txnFrom = start.Add(rs[i].TTL / 6)
				h.nextRenew = was.Add(rs[i].TTL / 3)
			}
		case backend.NotHeld:
			if h.releasing {
				// Our own release removed it (its reply is on the way, or
				// lost): the lock may be someone else's already, so the
				// hold ends now, as released, not lost. Unlock (or its
				// retry) then finds it gone and says nil.
				w.dropReleased(h)
				released = append(released, h)
				continue
			}
			lost[h] = fmt.Errorf("%w: another owner holds the key, or it expired", h.lostErr())
			delete(w.holds, h)
		default:
			// Try again soon, within the lease trusted now (a hand-over's
			// is shorter than ttl); the deadline decides when it is lost.
			h.nextRenew = time.Now().Add(max(min(h.ttl, h.trusted)/10, MinTTL))
			h.slack = 0 // not pulled forward: trust sets it again
			h.txnFrom = time.Time{}
			failed = append(failed, renewFailure{h, outcomes[i].Err, h.renewErr == nil})
			h.renewErr = outcomes[i].Err
		}
	}
	w.mu.Unlock()
	for _, h := range released {
		h.cancel(ErrReleased)
	}
	// close waits for the round trip, not for the Observer: Renew and
	// Lost may call Close.
	w.inflight.Done()
	// The log and the Observer are the application's code: logged out of
	// mu, and a panic there skips no loss.
	w.c.noPanic("watchdog", func() {
		defer w.loseAll(lost)
		w.logFailed(failed)
		if !closing {
			w.c.renewed(due[:watched], outcomes[:watched])
		}
	})
	w.poke()
}

// renewFailure is a renewal of one round that got no answer, and why.
type renewFailure struct {
	h     *hold
	err   error
	first bool // the lock's first since a renewal (or Extend) was answered
}

// logFailed logs the renewals of one round that got no answer: one record
// per error, with the number of locks and the first one's key, not one
// per lock, so that an outage with many locks held does not flood the log.
// A lock's first failure is a warning; its retries, every tenth of a lease
// until it is answered or lost, are at Debug: an outage would otherwise
// warn some seven times per lock before its loss, which is logged on its
// own with the last error. Renewals fail alike whatever lock their error
// names (a Redlock error names its lock): they are grouped without it.
func (w *watchdog) logFailed(failed []renewFailure) {
	same := func(f renewFailure) string {
		return fmt.Sprint(f.first, "\x00", strings.ReplaceAll(fmt.Sprint(f.err), strconv.Quote(f.h.lease.Key), ""))
	}
	for _, g := range tally(failed, same) {
		level := slog.LevelDebug
		if g.first.first {
			level = slog.LevelWarn
		}
		w.c.log.Log(context.Background(), level, "dlock: renewal failed", "key", g.first.h.lease.Key, "kind", g.first.h.kind, "locks", g.n, "error", g.first.err)
	}
}

// errRenewPanicked is the error of the renewals of a batch whose round
// trip panicked.
var errRenewPanicked = errors.New("renewal panicked")
