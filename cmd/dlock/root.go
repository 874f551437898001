package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
)

// app holds what every command shares: where output goes and how to
// connect.
type app struct {
	stdout, stderr io.Writer
	conn           connFlags
	verbose        bool
	args           []string     // the command line, without the program name
	log            *slog.Logger // discards unless --verbose
}

// execute runs the command line args and returns the exit status. Errors
// are printed as one line on stderr, with any password redacted.
func execute(args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr, args: args, log: slog.New(slog.DiscardHandler)}
	// What cobra prints itself (help, --version, the completion scripts) it
	// prints without checking: a failed write must still fail dlock, as
	// the commands' own output does (outputFailed).
	out := &checkedOutput{w: stdout}
	root := a.rootCmd(out)
	root.SetArgs(args)
	root.SetErr(stderr)
	err := root.Execute()
	if out.err != nil && !errors.As(err, new(*exitError)) {
		// A plain error is then cobra's of that write (the completion
		// scripts return it), not a usage error.
		err = outputFailed(out.err)
	}
	if err != nil && err.Error() != "" {
		fmt.Fprintln(stderr, "dlock: "+a.errorLine(err))
	}
	return exitStatus(err)
}

// errorLine renders err as one line without secrets or a doubled prefix.
// Quoted lock names are kept as they are: a name may hold "dlock: " or a
// run of spaces, and the line must name the lock the user gave.
func (a *app) errorLine(err error) string {
	msg := a.conn.redact(err.Error())
	var b strings.Builder
	last := 0
	for _, q := range goQuoted.FindAllStringIndex(msg, -1) {
		b.WriteString(plainLine(msg[last:q[0]]))
		b.WriteString(msg[q[0]:q[1]])
		last = q[1]
	}
	b.WriteString(plainLine(msg[last:]))
	return strings.TrimSpace(b.String())
}

// goQuoted matches a string quoted by %q, which never leaves a raw control
// character (a newline) inside the quotes.
var goQuoted = regexp.MustCompile(`"(?:[^"\\\x00-\x1f\x7f]|\\.)*"`)

// whiteSpace is a run of white space, newlines included.
var whiteSpace = regexp.MustCompile(`\s+`)

// scriptPlace is the place in a script that Redis adds to an error raised
// there, which tells someone running dlock nothing: after the error since
// Redis 7.0 (" script: SHA, on @user_script:N."), before it earlier ("ERR
// Error running script (call to f_SHA): @user_script:N: ", then
// "@user_script: N: -" before a command's own error, READONLY say). Lua's
// own runtime errors (a nil where a number was expected) start with the
// place once more, "user_script:N: ", after "ERR " since Redis 7.0.
var scriptPlace = regexp.MustCompile(` ?script: [0-9a-f]{40}, on @user_script:\d+\.|ERR Error running script \(call to f_[0-9a-f]+\): @user_script:\d+: (?:@user_script: \d+: -)?|(?:ERR )?user_script:\d+: `)

// plainLine puts the unquoted text of an error on one line, without the
// prefix that library errors wrapping others repeat, nor the place in a
// script that Redis adds to an error.
func plainLine(s string) string {
	s = scriptPlace.ReplaceAllString(s, "")
	return strings.ReplaceAll(whiteSpace.ReplaceAllString(s, " "), "dlock: ", "")
}

// offline reports whether cmd runs whatever the connection settings say:
// version, help and the completion scripts never connect, so that
// `source <(dlock completion bash)` in a shell profile does not break on an
// unrelated $DLOCK_REDIS_URL; nor must the completion those scripts run
// (cobra's __complete), whose flags are parsed only later, and whose lock
// names (completeKeys) check the settings themselves.
func offline(cmd *cobra.Command) bool {
	for c := cmd; c != nil; c = c.Parent() {
		switch c.Name() {
		case "version", "help", "completion", cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd:
			return true
		}
	}
	return false
}

// rootCmd builds the command tree; cobra prints its own output to out.
func (a *app) rootCmd(out io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "dlock",
		Short: "Distributed locks on Redis: run commands under a lock, inspect and release locks",
		Long: `dlock takes distributed locks on Redis with the dlock Go library: fair
(FIFO) waiting, a watchdog that renews the lease while the lock is held, and a
fencing token with every grant.

Connect with --redis URL (or $DLOCK_REDIS_URL; default redis://localhost:6379),
with --sentinel-master NAME --sentinel ADDR,... for Sentinel, or with
--cluster ADDR,... for Redis Cluster. With Sentinel or Cluster, the URL (if
given) supplies only the credentials, database (Sentinel only), TLS (each
node's certificate is checked against the address it is reached at), the
dial, read and write timeouts, pool_size and max_retries; the sentinels' own
password comes from $DLOCK_SENTINEL_PASSWORD. Passwords are never printed.

Exit status: 0 on success; run exits with its command's status (128+N if
signal N killed it, 126 if it cannot be run, 127 if not found); 64 usage
error; 69 Redis unreachable or failing; 75 lock not obtained (run --no-wait
or --wait); 79 lock lost while the command ran; 128+N when signal N
interrupted a wait for the lock, demo or bench; 141 (SIGPIPE, as for ls) when
the reader of the output has gone, but for demo and bench, which clean up and
exit 1; 1 anything else.`,
		Version:           version(),
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: false},
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			a.setLogging()
			if offline(cmd) {
				return nil
			}
			return a.conn.validate(cmd)
		},
	}
	// Before InitDefaultCompletionCmd, whose commands keep the output they
	// find then.
	root.SetOut(out)
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usagef("%s (see '%s --help')", flagText(err), cmd.CommandPath())
	})
	a.conn.register(root.PersistentFlags())
	root.PersistentFlags().BoolVarP(&a.verbose, "verbose", "v", false, "log what the library and go-redis do, on stderr")
	root.AddCommand(
		a.runCmd(),
		a.inspectCmd(),
		a.listCmd(),
		a.releaseCmd(),
		a.demoCmd(),
		a.demoWorkerCmd(),
		a.benchCmd(),
		a.versionCmd(),
	)
	// cobra's completion command prints its help and exits 0 when the shell
	// is missing or unknown (`dlock completion fsh > dlock.fish`).
	root.InitDefaultCompletionCmd()
	if c, _, err := root.Find([]string{"completion"}); err == nil && c != root {
		c.RunE = func(cmd *cobra.Command, _ []string) error {
			return usagef("completion takes one SHELL: bash, zsh, fish or powershell (see '%s --help')", cmd.CommandPath())
		}
	}
	a.strictHelp(root)
	return root
}

// strictHelp makes `dlock help TOPIC` fail on an unknown TOPIC as an
// unknown command does (exit status 64): cobra's help command prints the
// usage and exits 0, which a script would take for help found.
func (a *app) strictHelp(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	help, _, err := root.Find([]string{"help"})
	if err != nil || help == root {
		return
	}
	show := help.Run
	help.Run = nil
	help.RunE = func(cmd *cobra.Command, args []string) error {
		if c, rest, err := root.Find(args); c == nil || err != nil || len(rest) > 0 {
			return usagef("unknown help topic %q for %q (see '%s --help')", strings.Join(args, " "), root.Name(), root.CommandPath())
		}
		show(cmd, args)
		return nil
	}
}

// setLogging sends the library's and go-redis's logs to stderr with
// --verbose, and silences go-redis otherwise (it would print reconnection
// noise into a command's output).
func (a *app) setLogging() {
	if !a.verbose {
		redis.SetLogger(quietRedisLogger{})
		return
	}
	a.log = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	redis.SetLogger(slogRedisLogger{a.log})
}

type quietRedisLogger struct{}

func (quietRedisLogger) Printf(context.Context, string, ...any) {}

type slogRedisLogger struct{ log *slog.Logger }

func (l slogRedisLogger) Printf(ctx context.Context, format string, args ...any) {
	l.log.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, args...))
}

// exactArgs is cobra.ExactArgs with a usage error (exit status 64).
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %s (see '%s --help')", cmd.Name(), what, cmd.CommandPath())
		}
		return nil
	}
}
