//go:build unix

package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// section is one critical section of a counter worker.
type section struct {
	worker             int
	acquired, released int64 // wall clock, Unix nanoseconds: comparable across processes
	wait               time.Duration
}

// counterScene runs the counter workers without the lock, then with it, and
// reports scenes 1 (mutual exclusion) and 2 (waiters woken on release).
func (d *demo) counterScene(ctx context.Context) error {
	n, per := d.f.workers, d.f.increments
	want := n * per
	unlocked, _, err := d.runCounters(ctx, "count-unlocked", true)
	if err != nil {
		return err
	}
	total, secs, err := d.runCounters(ctx, "count", false)
	if err != nil {
		return err
	}
	slices.SortFunc(secs, func(a, b section) int { return cmp.Compare(a.acquired, b.acquired) })
	overlaps, handovers := 0, 0
	var gaps, waits durations
	for i, s := range secs {
		waits = append(waits, s.wait)
		if i == 0 {
			continue
		}
		prev := secs[i-1]
		if s.acquired < prev.released {
			overlaps++
		}
		if s.worker != prev.worker {
			handovers++
			gaps = append(gaps, time.Duration(s.acquired-prev.released))
		}
	}
	elapsed := time.Duration(secs[len(secs)-1].released - secs[0].acquired)

	w := d.stdout
	fmt.Fprintf(w, "\n1. Mutual exclusion: %d worker processes each add 1 to a shared counter %d times,\n", n, per)
	fmt.Fprintf(w, "   with a plain GET then SET (not INCR), under the lock %q.\n", d.lockName("counter"))
	verdict := "exact"
	if total != want {
		verdict = fmt.Sprintf("WRONG: %d updates lost", want-total)
	}
	fmt.Fprintf(w, "   counter     %d, expected %d: %s\n", total, want, verdict)
	if overlaps == 0 {
		fmt.Fprintf(w, "   overlaps    none: no two of the %d critical sections overlapped in time\n", len(secs))
	} else {
		fmt.Fprintf(w, "   overlaps    %d critical sections started before the previous one ended\n", overlaps)
	}
	fmt.Fprintf(w, "   timing      %d acquisitions in %s (%.0f/s); waits for the lock %s\n",
		len(secs), human(elapsed), float64(len(secs))/elapsed.Seconds(), waits.summary())
	lostUpdates := "no update lost this time, by luck: the race is real but narrow"
	if unlocked < want {
		lostUpdates = fmt.Sprintf("%d updates lost", want-unlocked)
	}
	fmt.Fprintf(w, "   no lock     the same run without the lock ends at %d: %s\n", unlocked, lostUpdates)
	d.check(total == want, fmt.Sprintf("counter is %d, expected %d", total, want))
	d.check(overlaps == 0, fmt.Sprintf("%d critical sections overlapped", overlaps))

	fmt.Fprintf(w, "\n2. Waiters woken on release: a release hands the lock to the next waiter in line\n")
	fmt.Fprintf(w, "   and wakes that waiter alone (pub/sub); nobody polls.\n")
	fmt.Fprintf(w, "   hand-overs  %d of %d successive holders were different processes\n", handovers, max(len(secs)-1, 0))
	if len(gaps) > 0 {
		fmt.Fprintf(w, "   latency     from a release to the next holder running: %s\n", gaps.summary())
	}
	d.check(handovers > 0, "no hand-over between processes")
	return nil
}

// runCounters starts the counter workers, lets them go at once, and returns
// the counter's final value and every critical section.
func (d *demo) runCounters(ctx context.Context, data string, noLock bool) (int, []section, error) {
	var ws []*workerProc
	args := []string{"--key", d.lockName("counter"), "--data", d.dataKey(data), "--n", strconv.Itoa(d.f.increments)}
	if noLock {
		args = append(args, "--no-lock")
	}
	for i := range d.f.workers {
		w, err := d.spawnWorker(fmt.Sprintf("counter %d", i+1), "counter", args...)
		if err != nil {
			return 0, nil, err
		}
		ws = append(ws, w)
	}
	for _, w := range ws { // all connected: start them together
		if _, err := w.next(ctx, "ready"); err != nil {
			return 0, nil, err
		}
	}
	for _, w := range ws {
		if err := w.tell("go"); err != nil {
			return 0, nil, err
		}
	}
	var secs []section
	for i, w := range ws {
		e, err := w.next(ctx, "done")
		if err != nil {
			return 0, nil, err
		}
		if err := w.wait(ctx); err != nil {
			return 0, nil, err
		}
		for j := range e.Acquired {
			secs = append(secs, section{worker: i, acquired: e.Acquired[j], released: e.Released[j], wait: time.Duration(e.Waits[j])})
		}
	}
	total, err := d.c.rdb.Get(ctx, d.dataKey(data)).Int()
	if err != nil {
		return 0, nil, exitf(exitUnavailable, "demo: reading the counter: %v", err)
	}
	return total, secs, nil
}

// frozenScene shows scenes 3 (a holder frozen past its lease learns it lost
// the lock) and 4 (its late write is rejected thanks to the fencing token).
func (d *demo) frozenScene(ctx context.Context) error {
	key, resource := d.lockName("fenced"), d.dataKey("resource")
	lease := d.f.lease.String()
	a, err := d.spawnWorker("A", "stale", "--key", key, "--data", resource, "--lease", lease, "--name", "A")
	if err != nil {
		return err
	}
	checked, err := a.next(ctx, "checked")
	if err != nil {
		return err
	}
	if err := a.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	stoppedAt := time.Now()

	b, err := d.spawnWorker("B", "fresh", "--key", key, "--data", resource, "--lease", lease, "--name", "B")
	if err != nil {
		return err
	}
	bLocked, err := b.next(ctx, "locked")
	if err != nil {
		return err
	}
	bWrote, err := b.next(ctx, "wrote")
	if err != nil {
		return err
	}
	if err := b.wait(ctx); err != nil {
		return err
	}

	resumedAt := time.Now()
	if err := a.signal(syscall.SIGCONT); err != nil {
		return err
	}
	if err := a.tell("write"); err != nil {
		return err
	}
	aWrote, err := a.next(ctx, "wrote")
	if err != nil {
		return err
	}
	aLost, err := a.next(ctx, "lost")
	if err != nil && aLost.Event != "held" {
		return err
	}
	if err := a.wait(ctx); err != nil {
		return err
	}
	final, err := d.c.rdb.HGetAll(ctx, resource).Result()
	if err != nil {
		return exitf(exitUnavailable, "demo: reading the resource: %v", err)
	}

	w := d.stdout
	fmt.Fprintf(w, "\n3. A holder frozen past its lease: worker A takes %q with a %v lease,\n", key, d.f.lease)
	fmt.Fprintf(w, "   checks that it holds it, and is frozen (SIGSTOP) before it writes.\n")
	fmt.Fprintf(w, "   A           fence %d; frozen for %s, so nothing renews its lease\n", checked.Fence, human(resumedAt.Sub(stoppedAt)))
	fmt.Fprintf(w, "   B           waited %s and got the lock when A's lease ran out: fence %d\n", human(time.Duration(bLocked.Wait)), bLocked.Fence)
	fmt.Fprintf(w, "   B writes    %s by the resource (fence %d)\n", acceptedText(bWrote.Accepted), bWrote.Fence)
	if aLost.Event == "lost" {
		fmt.Fprintf(w, "   A resumes   and learns %s later that it lost the lock: %s\n",
			human(time.Unix(0, aLost.At).Sub(resumedAt)), d.errorLine(fmt.Errorf("%s", aLost.Cause)))
	} else {
		fmt.Fprintf(w, "   A resumes   and still believes it holds the lock: WRONG\n")
	}
	d.check(bWrote.Accepted, "B's write was rejected")
	d.check(aLost.Event == "lost", "A was not told it lost the lock")

	fmt.Fprintf(w, "\n4. Fencing: the resource keeps the highest fence it accepted and rejects smaller ones.\n")
	if aWrote.Accepted {
		fmt.Fprintf(w, "   A writes    ACCEPTED with fence %d: WRONG, a stale holder overwrote newer data\n", aWrote.Fence)
	} else {
		fmt.Fprintf(w, "   A writes    REJECTED: its fence %d is older than %s, already accepted from B\n", aWrote.Fence, aWrote.Seen)
	}
	fmt.Fprintf(w, "   resource    %q at fence %s: ", final["value"], final["fence"])
	if final["value"] == "written by B" {
		fmt.Fprintln(w, "the stale write did not land")
	} else {
		fmt.Fprintln(w, "WRONG")
	}
	d.check(!aWrote.Accepted, "A's stale write was accepted")
	d.check(final["value"] == "written by B", "the resource does not hold B's write")
	return nil
}

func acceptedText(ok bool) string {
	if ok {
		return "accepted"
	}
	return "REJECTED"
}
