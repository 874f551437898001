package labels

import (
	"errors"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The values are part of both metrics packages' documented output.
func TestValues(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Mode(true), "lock"},
		{Mode(false), "trylock"},
		{ReenterOutcome(nil), "reentered"},
		{ReenterOutcome(errors.New("boom")), "error"},
		{Kind("lock"), "lock"},
		{Kind("semaphore"), "semaphore"},
		{Kind("rwmutex"), "rwmutex"},
		{Kind(""), "other"},
		{Kind("order:42"), "other"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
