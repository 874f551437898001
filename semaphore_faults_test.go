package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/chaoscheck"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/tcpproxy"
	"github.com/dlock-go/dlock/internal/testutil"
)

// TestSemaphoreFaults is a randomized fault-injection test of a Semaphore's
// claim: at no instant do the holders whose Context is live hold more
// permits than the capacity, through dropped connections (the command
// ones and the pub/sub ones that hand-overs arrive on), frozen connections
// (often past a lease) and a paused server.
//
// Six workers, each on a Client of its own (three through a tcpproxy that
// the faults freeze), take 1 or 2 permits of a capacity-3 semaphore with
// Acquire or TryAcquire and leases of 300..600 ms, work for 50..400 ms
// or, one time in three, 400..1200 ms (past the lease: the watchdog renews
// it) while checking their Lock's Context every few ms, and give the
// permits back. Meanwhile a fault goroutine, on a schedule drawn from the
// seed, freezes a proxy (preferably one whose worker holds permits) for
// 150..1000 ms, kills one worker's connections, every normal or every
// pub/sub connection, or pauses redis-server for 30..400 ms.
//
// The permits held are tallied in-process: a worker adds its Lock after
// the grant and takes it out as soon as it sees its Context done, and
// before it calls Unlock. A Lock whose Context is done counts no more from
// the moment it is, whoever sees it first: each addition first drops, from
// what the others hold, the Locks whose Context is done, so the check does
// not depend on when their worker is next scheduled. As in the chaos
// tests, a Lock also stops counting at its watchdog's deadline (what
// backend.TrustedUntil gives), which the Context is cancelled at, or a
// little after on a loaded machine: that lateness is the scheduler's, not
// a lease overrun. Every addition then checks the sum against the
// capacity.
//
// The test also checks that a Context that ended while held has a cause
// wrapping dlock.ErrLockLost, that no Unlock reports the permits lost before the
// deadline trusted when it was called, that every error is of a known
// kind, that no call hangs, and that progress is made: every worker not
// proxied got permits (a proxied one may be frozen for much of a run), and
// all of them together at least 10 times. TestMain's goleak finds no goroutine
// left running.
//
// CHAOS_SEED replays a failure's fault schedule and choices with its
// logged seed (the timing is the machine's); CHAOS_DURATION (5 s by
// default) sets how long workers start new rounds.
func TestSemaphoreFaults(t *testing.T) {
	// A server of its own, and checks of counts and of what Redis held,
	// with bounds far past any delay: it runs beside the chaos runs.
	t.Parallel()
	seed, dur := chaoscheck.Settings(t, 5*time.Second)
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { admin.Close() })

	const capacity, nWorkers, nProxied = 3, 6, 3
	f := &semFaults{capacity: capacity, held: map[*semHold]struct{}{}}
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := range nWorkers {
		w := &semWorker{id: i, name: fmt.Sprintf("semfault-%d", i)}
		addr := srv.Addr()
		if i < nProxied {
			p, err := tcpproxy.New(addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			w.proxy, addr = p, p.Addr()
		}
		// Short timeouts, no retries: a frozen connection fails calls
		// within a fraction of a lease. ClientName lets the faults find
		// this worker's connections, the pub/sub one included.
		rdb := redis.NewClient(&redis.Options{
			Addr: addr, ClientName: w.name, MaxRetries: -1, ContextTimeoutEnabled: true,
			ReadTimeout: 400 * time.Millisecond, WriteTimeout: 400 * time.Millisecond,
		})
		t.Cleanup(func() { rdb.Close() })
		c, err := dlock.New(rdb, dlock.WithQueueTTL(time.Duration(300+rng.IntN(700))*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		w.c = c
		f.workers = append(f.workers, w)
	}

	end := time.Now().Add(dur)
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		f.injectFaults(testutil.InGoroutine(t), srv, admin, rand.New(rand.NewPCG(seed, 2)), end)
	}()
	var wg sync.WaitGroup
	for _, w := range f.workers {
		wg.Add(1)
		r := rand.New(rand.NewPCG(seed, uint64(100+w.id)))
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					f.Problem("worker %d panicked: %v", w.id, p)
				}
			}()
			f.work(w, r, end)
		}()
	}
	workersDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(workersDone)
	}()
	// Every call is bounded (contexts of at most 1.5 s, 400 ms socket
	// timeouts): a worker still running long after the end hangs.
	select {
	case <-workersDone:
	case <-time.After(time.Until(end) + 20*time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("workers still running 20 s after the end (a hang):\n%s", buf[:runtime.Stack(buf, true)])
	}
	<-faultsDone
	for _, w := range f.workers {
		if w.proxy != nil {
			w.proxy.Thaw()
		}
	}
	srv.Resume(t)

	total := 0
	grants := make([]int, len(f.workers))
	for i, w := range f.workers {
		grants[i] = w.grants
		total += w.grants
		// A proxied worker may be frozen for much of a run: only the
		// direct ones must have got permits.
		if w.grants == 0 && w.proxy == nil {
			f.Problem("worker %d, not proxied, never got permits", w.id)
		}
	}
	if total < 10 {
		f.Problem("only %d grants in all", total)
	}
	t.Logf("grants by worker %v (the first %d proxied), most permits held at once %d, lost while held %d, "+
		"Contexts seen live past their deadline %d (by up to %v), faults %v, errors %v",
		grants, nProxied, f.most, f.lost, f.late, f.maxLate, f.faults, f.errKinds)
	for _, p := range f.Problems() {
		t.Error(p)
	}
}

type semWorker struct {
	id     int
	name   string // its go-redis connections' CLIENT SETNAME
	c      *dlock.Client
	proxy  *tcpproxy.Proxy // nil: direct
	grants int             // written by its own goroutine only, read after it ended
}

// semHold is a grant of n permits to a worker, counted while in semFaults.held.
type semHold struct {
	worker int
	n      int64
	l      *dlock.Lock
	began  time.Time
}

type semFaults struct {
	capacity int64
	workers  []*semWorker

	chaoscheck.Tally // problems; the counts below that it keeps
	faults, errKinds map[string]int

	mu      sync.Mutex // guards what follows
	held    map[*semHold]struct{}
	sum     int64 // permits of held
	most    int64
	lost    int // Contexts found done while held
	late    int // Contexts found live past their watchdog's deadline
	maxLate time.Duration
}

var semFaultSentinels = []error{
	dlock.ErrNotObtained, dlock.ErrLockLost, dlock.ErrNotHeld, dlock.ErrReleased, dlock.ErrClosed,
	context.Canceled, context.DeadlineExceeded,
}

// dropDeadLocked takes out of held the holds that no longer count: their
// Context is done, or their watchdog's deadline has passed (a watchdog
// scheduled late). The Contexts are read before now, so that every hold
// left was live at some instant after its grant and is trusted at now.
func (f *semFaults) dropDeadLocked() {
	var done []*semHold
	for h := range f.held {
		if h.l.Context().Err() != nil {
			done = append(done, h)
		}
	}
	now := time.Now()
	for h := range f.held {
		if d := backend.TrustedUntil(h.l); !now.Before(d) && h.l.Context().Err() == nil {
			f.late++
			f.maxLate = max(f.maxLate, now.Sub(d))
			done = append(done, h)
		}
	}
	for _, h := range done {
		f.removeLocked(h)
	}
}

// add counts h, granted just now, and checks the permits held against the
// capacity. It reports false if h itself does not count (its Context was
// done or its deadline past already).
func (f *semFaults) add(h *semHold) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held[h] = struct{}{}
	f.sum += h.n
	f.dropDeadLocked()
	if _, ok := f.held[h]; !ok {
		return false
	}
	f.most = max(f.most, f.sum)
	if f.sum > f.capacity {
		var who []string
		for o := range f.held {
			who = append(who, fmt.Sprintf("worker %d: %d permits, fence %d, held for %v, trusted for %v more",
				o.worker, o.n, o.l.Fence(), time.Since(o.began), time.Until(backend.TrustedUntil(o.l))))
		}
		f.Problem("%d permits held at once with live Contexts, capacity %d, as worker %d got %d (fence %d): %s",
			f.sum, f.capacity, h.worker, h.n, h.l.Fence(), strings.Join(who, "; "))
	}
	return true
}

// remove stops counting h, if it still counts.
func (f *semFaults) remove(h *semHold) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removeLocked(h)
}

func (f *semFaults) removeLocked(h *semHold) {
	if _, ok := f.held[h]; ok {
		delete(f.held, h)
		f.sum -= h.n
	}
}

// live reports whether h still counts, taking it out if it does not.
func (f *semFaults) live(h *semHold) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropDeadLocked()
	_, ok := f.held[h]
	return ok
}

// work runs w's rounds until end: acquire, work while checking, release.
func (f *semFaults) work(w *semWorker, r *rand.Rand, end time.Time) {
	s := w.c.Semaphore("pool", f.capacity)
	for time.Now().Before(end) {
		n := int64(1 + r.IntN(2))
		ttl := time.Duration(300+r.IntN(301)) * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(400+r.IntN(1100))*time.Millisecond)
		op := "acquire"
		var l *dlock.Lock
		var err error
		if r.IntN(4) == 0 {
			op = "tryacquire"
			l, err = s.TryAcquire(ctx, n, dlock.WithTTL(ttl))
		} else {
			l, err = s.Acquire(ctx, n, dlock.WithTTL(ttl))
		}
		cancel()
		f.CheckErr(&f.errKinds, op, err, semFaultSentinels)
		if err != nil {
			time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond) // pacing, not synchronization
			continue
		}
		w.grants++
		h := &semHold{worker: w.id, n: n, l: l, began: time.Now()}
		if f.add(h) {
			work := time.Duration(50+r.IntN(350)) * time.Millisecond
			if r.IntN(3) == 0 {
				work = time.Duration(400+r.IntN(800)) * time.Millisecond // past the lease: renewed
			}
			until := time.Now().Add(work)
			for time.Now().Before(until) && f.live(h) {
				time.Sleep(time.Duration(1+r.IntN(4)) * time.Millisecond) // the work
			}
		}
		f.remove(h)
		if err := l.Context().Err(); err != nil {
			f.mu.Lock()
			f.lost++
			f.mu.Unlock()
			if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrLockLost) {
				f.Problem("worker %d: Context done while held with cause %v", w.id, cause)
			}
		}
		// An Unlock that finds the permits gone before the deadline
		// trusted when it was called means Redis dropped them early.
		trusted := backend.TrustedUntil(l)
		uctx, ucancel := context.WithTimeout(context.Background(), time.Second)
		err = l.Unlock(uctx)
		ucancel()
		if errors.Is(err, dlock.ErrLockLost) && time.Now().Before(trusted) {
			f.Problem("worker %d: Unlock found the permits (fence %d) gone %v before their trusted deadline: %v",
				w.id, l.Fence(), time.Until(trusted), err)
		}
		f.CheckErr(&f.errKinds, "unlock", err, semFaultSentinels)
		if err == nil && l.Context().Err() == nil {
			f.Problem("worker %d: Context live after Unlock returned nil", w.id)
		}
	}
}

// injectFaults injects a fault every 30..250 ms until end. It runs on a
// goroutine of its own: t is from testutil.InGoroutine.
func (f *semFaults) injectFaults(t testing.TB, srv *redistest.Server, admin *redis.Client, r *rand.Rand, end time.Time) {
	for time.Now().Before(end) {
		time.Sleep(time.Duration(30+r.IntN(220)) * time.Millisecond) // the schedule
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		switch k := r.IntN(100); {
		case k < 50: // freeze a proxied worker's connections, often past its lease
			// Preferably a worker holding permits: a holder cut off while
			// the others take its permits is the case to check. Which
			// workers hold permits now is the run's timing, not the seed's.
			var proxied, holding []*semWorker
			f.mu.Lock()
			for _, w := range f.workers {
				if w.proxy == nil {
					continue
				}
				proxied = append(proxied, w)
				for h := range f.held {
					if h.worker == w.id {
						holding = append(holding, w)
						break
					}
				}
			}
			f.mu.Unlock()
			pick, what := proxied, "freeze"
			if len(holding) > 0 {
				pick, what = holding, "freeze holder"
			}
			w := pick[r.IntN(len(pick))]
			f.Count(&f.faults, what)
			w.proxy.Freeze()
			time.Sleep(time.Duration(150+r.IntN(850)) * time.Millisecond)
			w.proxy.Thaw()
		case k < 70: // drop one worker's connections, its pub/sub one included
			w := f.workers[r.IntN(len(f.workers))]
			f.Count(&f.faults, "drop worker")
			list, _ := admin.ClientList(ctx).Result()
			for _, line := range strings.Split(list, "\n") {
				var id int64
				if strings.Contains(line, " name="+w.name+" ") {
					if _, err := fmt.Sscanf(line, "id=%d ", &id); err == nil {
						_ = admin.Do(ctx, "CLIENT", "KILL", "ID", id).Err()
					}
				}
			}
		case k < 80:
			f.Count(&f.faults, "drop normal")
			_ = admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err()
		case k < 90:
			f.Count(&f.faults, "drop pubsub")
			_ = admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err()
		default:
			f.Count(&f.faults, "pause server")
			srv.Pause(t)
			time.Sleep(time.Duration(30+r.IntN(370)) * time.Millisecond)
			srv.Resume(t)
		}
		cancel()
	}
}
