package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// Environment the command gets.
const (
	envKey   = "DLOCK_KEY"
	envToken = "DLOCK_TOKEN"
	envFence = "DLOCK_FENCE"
)

// releaseTimeout bounds the release after the command exits.
const releaseTimeout = 5 * time.Second

// maxReplicaWait is the longest a renewal's WAIT may take with
// --replica-ack (--replica-timeout, and 100ms more: Redis checks WAIT
// timeouts ten times a second): 3/4 of the 5s the library gives each
// renewal, which go-redis keeps to in the middle of a read since run
// bounds its requests (lockRequestTimeout).
const maxReplicaWait = 5 * time.Second * 3 / 4

// runFlags are the flags of `dlock run`.
type runFlags struct {
	noWait  bool
	wait    time.Duration
	grace   time.Duration
	maxHold time.Duration
	meta    string
	// capacity > 0 makes KEY a semaphore of that many permits, of which
	// run holds permits.
	capacity, permits int64
	// replicaAck > 0 waits for that many replicas after each write of the
	// lock (dlock.WithReplicaAck, FailClosed).
	replicaAck     int
	replicaTimeout time.Duration
}

func (a *app) runCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [flags] KEY -- COMMAND [ARGS...]",
		Short: "Run a command while holding a lock",
		Long: `Run waits for the lock KEY (in arrival order, woken the moment it is handed
over), runs COMMAND while the lease is renewed every --ttl/3, releases the lock
when COMMAND exits, and exits with COMMAND's status (128+N if signal N killed it).

COMMAND gets DLOCK_KEY, DLOCK_TOKEN and DLOCK_FENCE in its environment. Pass
DLOCK_FENCE with every write to the resource the lock protects, and have the
resource reject a fence smaller than the largest it has seen: that stops a
holder that paused past its lease.

If the lock is lost while COMMAND runs (a renewal finds another owner, Redis
cannot be reached for a whole lease), or --max-hold passes, COMMAND's process
group gets SIGTERM (and SIGCONT, so that a stopped COMMAND can act on it),
then SIGKILL after --grace, and dlock exits with status 79.
After --max-hold the lock is renewed during the grace period and released once
COMMAND is gone.

SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to dlock are
forwarded to COMMAND's process group; dlock releases the lock once COMMAND has
exited. A SIGHUP or SIGINT dlock was started ignoring (under nohup, say) stays
ignored, by COMMAND too. At an interactive terminal COMMAND stays in dlock's process group, so
it can use the terminal; Ctrl-C then reaches it directly and is not forwarded
twice. There dlock forwards no SIGINT or SIGQUIT at all (it cannot tell a kill
from a keypress: signal COMMAND itself), and sends the other signals, and
those of a lost lock, to COMMAND and the processes it started (on Linux;
elsewhere to COMMAND alone). A signal that comes once the lock is granted
but before COMMAND starts ends dlock as one during the wait does: COMMAND is
not started and the lock is released.

Ctrl-Z (SIGTSTP) stops COMMAND and dlock together, as one job, and fg or bg
(SIGCONT) resumes both. A stopped dlock renews nothing: stopped longer than
--ttl, the lock may go to another holder, and once resumed dlock stops
COMMAND and exits 79, as for a lost lock. (SIGSTOP, which dlock cannot catch,
stops dlock alone.)

With --capacity M, KEY names a semaphore of M permits instead of a lock: dlock
holds --permits of them (1 by default) while COMMAND runs, so at most M
permits' worth of commands run at once across every machine, waiting in
arrival order. Leases, signals, --max-hold and loss work for the permits as
for a lock, but not fencing: several holders are live at once, so a resource
must not reject a DLOCK_FENCE smaller than the largest it has seen (that
would refuse holders whose permits are still good). inspect and release
--force take --capacity M too, and list --kind semaphore; a refusal
(status 75) does not name the holders.

With --replica-ack N (Sentinel, or any Redis with replicas), each write of
the lock or permits (the grant, renewals and release) is followed by WAIT
N: a grant that fewer than N replicas acknowledge within --replica-timeout
is given back and dlock exits 69 without running COMMAND, and an unacknowledged
renewal counts as failed, so COMMAND is stopped (status 79) if the lease the
replicas have runs out. A failover then promotes a replica that has the
lock, unless it picks one that did not acknowledge: the window narrows, it
does not close. --ttl must be at least 3 x (--replica-timeout + 100ms), and
--replica-timeout + 100ms at most 3.75s (3/4 of the 5s each renewal is
given), and at most 3/4 of the URL's read_timeout if that is shorter.

When COMMAND exits, the lock is released: processes it left running in the
background go on without it. Have COMMAND wait for them (a shell's wait).

Exit status: COMMAND's; 75 if the lock was not obtained (--no-wait, --wait);
79 if the lock was lost; 126 or 127 if COMMAND cannot be run; 128+N if signal
N interrupted the wait for the lock (or came before COMMAND started); 64
usage; 69 Redis unreachable, or not answering a request within 10s before
the lock is held, whatever the URL's read_timeout (or, with --replica-ack,
the grant not acknowledged).`,
		Example: `  dlock run nightly-report -- ./report.sh --date today
  dlock run --no-wait --ttl 10s deploy -- make deploy
  dlock run --wait 30s --meta "job 42" import:orders -- python import.py
  dlock run --capacity 3 encoders -- ffmpeg -i in.mov out.mp4
  dlock run --sentinel-master main --sentinel s1:26379,s2:26379 --replica-ack 1 billing -- ./bill.sh`,
		Args: runArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.validate(cmd, a.conn.ttl); err != nil {
				return err
			}
			if err := checkKey(args[0]); err != nil {
				return err
			}
			// Bad input is a usage error whether or not Redis can be
			// reached (the default --meta, from COMMAND, is always good).
			if err := dlock.CheckMetadata(f.meta); err != nil {
				return usagef("--meta: %v", err)
			}
			return a.run(f, args[0], args[1:])
		},
	}
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		if !slices.Contains(a.args, "--") {
			// `dlock run KEY sh -c x`: -c was taken for a flag of dlock's.
			return usagef("missing -- before the command: dlock run [flags] KEY -- COMMAND [ARGS...] (%s)", flagText(err))
		}
		return usagef("%s (see '%s --help')", flagText(err), cmd.CommandPath())
	})
	fs := cmd.Flags()
	fs.BoolVar(&f.noWait, "no-wait", false, "fail at once (status 75) if the lock is held")
	fs.DurationVar(&f.wait, "wait", 0, "give up waiting after this long (status 75); 0 waits as long as it takes")
	fs.DurationVar(&f.grace, "grace", 10*time.Second, "after a lost lock or --max-hold, how long COMMAND has between SIGTERM and SIGKILL")
	fs.DurationVar(&f.maxHold, "max-hold", 0, "stop COMMAND (as for a lost lock, status 79) and release the lock after this long, so a hung COMMAND cannot keep it forever; 0 for no limit")
	fs.StringVar(&f.meta, "meta", "", "free text stored with the lock's holder, shown by inspect (default: COMMAND's name)")
	fs.Int64Var(&f.capacity, "capacity", 0, "make KEY a semaphore of this many permits instead of a lock (every user of KEY must give the same)")
	fs.Int64Var(&f.permits, "permits", 1, "with --capacity: how many of the semaphore's permits to hold")
	fs.IntVar(&f.replicaAck, "replica-ack", 0, "after each write of the lock (or permits), wait until this many replicas have it; a grant they do not acknowledge in time fails (status 69); 0 does not wait")
	fs.DurationVar(&f.replicaTimeout, "replica-timeout", time.Second, "with --replica-ack: how long a write waits for the replicas")
	return cmd
}

// runArgs checks the shape KEY -- COMMAND [ARGS...].
func runArgs(cmd *cobra.Command, args []string) error {
	dash := cmd.ArgsLenAtDash()
	switch {
	case dash < 0 && len(args) > 1:
		return usagef("missing -- before the command: dlock run [flags] KEY -- COMMAND [ARGS...]")
	case dash < 0 && len(args) == 1:
		return usagef("missing -- COMMAND after KEY: dlock run [flags] KEY -- COMMAND [ARGS...]")
	case dash < 0 || dash == 0:
		return usagef("missing KEY: dlock run [flags] KEY -- COMMAND [ARGS...]")
	case dash > 1:
		return usagef("run takes one KEY before --, got %d arguments: dlock run [flags] KEY -- COMMAND [ARGS...]", dash)
	case len(args) == 1:
		return usagef("missing COMMAND after --: dlock run [flags] KEY -- COMMAND [ARGS...]")
	}
	return nil
}

func (f *runFlags) validate(cmd *cobra.Command, ttl time.Duration) error {
	switch {
	case f.replicaAck < 0:
		return usagef("--replica-ack %d: must not be negative", f.replicaAck)
	case cmd.Flags().Changed("replica-timeout") && f.replicaAck == 0:
		return usagef("--replica-timeout needs --replica-ack")
	case f.replicaAck > 0 && ttl < 3*(f.replicaTimeout+100*time.Millisecond):
		// A renewal may wait the whole timeout (and Redis checks WAIT
		// timeouts every 100 ms): a shorter lease runs out before its
		// renewal answers whenever replicas are missing.
		return usagef("--ttl %v: must be at least 3 x (--replica-timeout %v + 100ms)", ttl, f.replicaTimeout)
	case f.replicaAck > 0 && f.replicaTimeout+100*time.Millisecond > maxReplicaWait:
		// The library refuses it too, in terms of go-redis's options.
		return usagef("--replica-timeout %v: at most %v (with the 100ms Redis may add, 3/4 of the 5s each renewal is given)", f.replicaTimeout, maxReplicaWait-100*time.Millisecond)
	case f.noWait && cmd.Flags().Changed("wait"):
		return usagef("use either --no-wait or --wait, not both")
	case f.wait < 0:
		return usagef("--wait %v: must not be negative", f.wait)
	case f.grace < 0:
		return usagef("--grace %v: must not be negative", f.grace)
	case f.maxHold < 0:
		return usagef("--max-hold %v: must not be negative", f.maxHold)
	}
	if err := checkCapacity(cmd, f.capacity); err != nil {
		return err
	}
	switch {
	case cmd.Flags().Changed("permits") && f.capacity == 0:
		return usagef("--permits needs --capacity: KEY is a lock otherwise")
	case f.capacity > 0 && (f.permits < 1 || f.permits > f.capacity):
		return usagef("--permits %d: must be between 1 and --capacity %d", f.permits, f.capacity)
	case f.maxHold > 0 && f.grace > math.MaxInt64-f.maxHold:
		// The lock's max hold is their sum (acquire.go).
		return usagef("--max-hold %v with --grace %v: too long", f.maxHold, f.grace)
	}
	return nil
}

// run is `dlock run`: lock, run, release.
func (a *app) run(f runFlags, key string, argv []string) error {
	if err := canSupervise(); err != nil {
		return exitf(exitFailure, "run %v", err) // before taking any lock
	}
	path, err := lookCommand(argv[0])
	if err != nil {
		return err
	}
	// Catch signals before taking the lock: from now on they end the wait
	// or go to the command, and never kill dlock while it holds the lock.
	// A signal dlock was started ignoring (nohup, a shell's background
	// job) stays ignored, by dlock and by COMMAND, which inherits that.
	// Go tells only of SIGHUP and SIGINT: it catches the others at start.
	sigs := make(chan os.Signal, 8)
	if caught := notIgnored(forwardedSignals); len(caught) > 0 {
		signal.Notify(sigs, caught...) // with none, Notify would catch all
	}
	defer signal.Stop(sigs)
	// A stderr nobody reads any more must not kill dlock while COMMAND
	// works on: dlock must live to stop it if the lock is lost.
	catchSIGPIPE()

	ctx, stopWatching := watchSignals(sigs)
	// Until the lock is held, each request ends within lockRequestTimeout
	// whatever the URL's read_timeout: a hung Redis fails run (status 69)
	// rather than hang it. Renewals and releases keep the deadlines the
	// library gives them, which go-redis then honours in the middle of a
	// read too: the release after COMMAND is bounded as well.
	a.conn.bound, a.conn.boundMarked = lockRequestTimeout, true
	ctx = boundRequests(ctx)
	var opts []dlock.Option
	if f.replicaAck > 0 {
		opts = append(opts, dlock.WithReplicaAck(f.replicaAck, f.replicaTimeout, dlock.FailClosed))
	}
	c, err := a.connect(ctx, "dlock run", opts...)
	if err != nil {
		if serr := stopWatching(); serr != nil {
			return interrupted(serr, "connecting to Redis")
		}
		return err
	}
	defer c.Close()
	a.warnEviction(ctx, c)
	if f.meta == "" {
		f.meta = commandMeta(argv[0])
	}
	l, err := a.acquire(ctx, c, f, key)
	if serr := stopWatching(); serr != nil {
		// The lock may have come just as the signal did.
		if l != nil {
			a.unlock(l)
		}
		return interrupted(serr, "waiting for lock %q", key)
	}
	if err != nil {
		return err
	}

	env := append(os.Environ(),
		envKey+"="+key,
		envToken+"="+l.Token(),
		envFence+"="+strconv.FormatUint(l.Fence(), 10),
	)
	ch, err := startChild(path, argv, env, a.stdout, a.stderr)
	if err != nil {
		a.unlock(l)
		return cannotStart(argv[0], err)
	}
	held := f.held(key)
	lost := a.supervise(ch, l, held, sigs, f.grace, f.maxHold)
	status := ch.status()
	if lost != nil {
		// supervise killed whatever was left of its process group.
		if errors.Is(lost, errMaxHold) {
			a.unlock(l) // still ours: renewed through --grace (see acquire)
			return exitf(exitLockLost, "%s: --max-hold %v passed while the command ran; the command was stopped (its status: %d)", held, f.maxHold, status)
		}
		// Stopped (supervise said so on stderr), or lost as it exited.
		return exitf(exitLockLost, "%s", f.lostText(key, "while the command ran", a.causeLine(lost, key), status))
	}
	uctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := l.Unlock(uctx); err != nil {
		if errors.Is(err, dlock.ErrNotHeld) {
			return exitf(exitLockLost, "%s", f.lostText(key, "before the command finished", a.causeLine(err, key), status))
		}
		fmt.Fprintf(a.stderr, "dlock: warning: could not release %s (%s); it expires within --ttl %v\n", held, a.causeLine(err, key), a.conn.ttl)
	}
	if status != 0 {
		return &exitError{code: status}
	}
	return nil
}

// held names what run holds, in what it says: lock "KEY", or with
// --capacity permits of semaphore "KEY".
func (f runFlags) held(key string) string {
	if f.capacity > 0 {
		return fmt.Sprintf("permits of semaphore %q", key)
	}
	return fmt.Sprintf("lock %q", key)
}

// lostText says that what run holds was lost (when: while or before the
// command finished), and what that may have let happen; cause is the
// loss's causeLine.
func (f runFlags) lostText(key, when, cause string, status int) string {
	if f.capacity > 0 {
		return fmt.Sprintf("permits of semaphore %q were lost %s (%s): more than its capacity of %d permits may have been in use at once (its status: %d)", key, when, cause, f.capacity, status)
	}
	return fmt.Sprintf("lock %q was lost %s (%s): its work may have overlapped another holder's (its status: %d)", key, when, cause, status)
}

// causeLine is errorLine of a library error about key, for a message that
// names key already: without the library's own naming of it (`unlock
// "KEY": `, `permits of semaphore "KEY" lost`), which would say it twice.
func (a *app) causeLine(err error, key string) string {
	line := strings.ReplaceAll(a.errorLine(err), fmt.Sprintf("unlock %q: ", key), "")
	for _, kind := range []string{"semaphore", "rwmutex"} {
		line = strings.ReplaceAll(line, fmt.Sprintf("permits of %s %q lost", kind, key), "permits lost")
	}
	return line
}

// maxCommandMeta bounds the default --meta, well within the library's
// limit on metadata (1 KiB).
const maxCommandMeta = 256

// commandMeta is the default --meta: COMMAND's name, made into metadata the
// library accepts (valid UTF-8, not too long), keeping the end of a long
// path, where the program's own name is.
func commandMeta(name string) string {
	name = strings.ToValidUTF8(name, "\uFFFD")
	if len(name) <= maxCommandMeta {
		return name
	}
	for len(name) > maxCommandMeta-len("…") {
		_, size := utf8.DecodeRuneInString(name)
		name = name[size:]
	}
	return "…" + name
}

// notIgnored returns the signals of sigs that this process was not
// started ignoring: catching one of those would undo the ignoring for
// COMMAND too.
func notIgnored(sigs []os.Signal) []os.Signal {
	var out []os.Signal
	for _, s := range sigs {
		if !signal.Ignored(s) {
			out = append(out, s)
		}
	}
	return out
}

// errMaxHold is the cause of a stop when --max-hold passes.
var errMaxHold = errors.New("--max-hold passed")

// unlock releases l on the way out of a failure, best effort.
func (a *app) unlock(l *dlock.Lock) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_ = l.Unlock(ctx)
}
