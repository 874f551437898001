package main

import (
	"context"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/testutil"
)

// dlock run needs the library's rule (README's "Redis ACL") and INFO for
// its eviction warning; inspect, list and release the operator's additions
// too (the library's tests check the rules in depth).
func TestACLRules(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	url := func(user string, rules ...string) string {
		testutil.SetACLUser(t, admin, user, rules...)
		return "redis://" + user + ":pw@" + srv.Addr()
	}
	app, ops := url("app", testutil.ACLRule, testutil.ACLCommandLineRule), url("ops", testutil.ACLRule, testutil.ACLAdminRule, testutil.ACLCommandLineRule)

	dlockRun(t, nil, "--redis", app, "run", "job", "--", "true").want(t, 0)
	dlockRun(t, nil, "--redis", app, "run", "--capacity", "2", "pool", "--", "true").want(t, 0)
	l, err := lockClient(t, srv.Addr()).Lock(ctx, "stuck")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if r := dlockRun(t, nil, "--redis", ops, "list").want(t, 0); strings.TrimSpace(r.stdout) != "stuck" {
		t.Errorf("list printed %q, want the lock held", r.stdout)
	}
	dlockRun(t, nil, "--redis", ops, "inspect", "stuck").want(t, 0)
	dlockRun(t, nil, "--redis", ops, "release", "--force", "stuck").want(t, 0)
	if log, err := admin.Do(ctx, "ACL", "LOG").Slice(); err != nil || len(log) != 0 {
		t.Errorf("ACL LOG = %v, %v; want no refused command", log, err)
	}

	// Without the operator's additions, list says what was refused.
	if r := dlockRun(t, nil, "--redis", app, "list"); r.code != exitUnavailable || !strings.Contains(r.stderr, "NOPERM") || !strings.Contains(r.stderr, "'scan'") {
		t.Errorf("list as a user that may not SCAN: exit %d, want %d with the NOPERM refusal\nstderr:\n%s", r.code, exitUnavailable, r.stderr)
	}
}
