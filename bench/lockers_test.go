package bench

import (
	"testing"
	"time"

	"github.com/bsm/redislock"
)

// The Method says the redislock README setup is "the package's retry
// example". That example (example_test.go, ExampleClient_Obtain_retry) is
// LimitRetry(LinearBackoff(100ms), 3): Obtain gives up after 3 retries.
func TestRedislockReadmeIsPackageExample(t *testing.T) {
	s, _ := SetupNamed("redislock")
	lk, err := s.Open("127.0.0.1:1", nil) // no dial happens here
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	got := lk.(*redislockLocker).retry()
	want := redislock.LimitRetry(redislock.LinearBackoff(100*time.Millisecond), 3)
	for i := 1; i <= 4; i++ {
		g, w := got.NextBackoff(), want.NextBackoff()
		t.Logf("retry %d: suite %v, package example %v", i, g, w)
		if g != w {
			t.Errorf("retry %d: suite waits %v, the package's retry example %v", i, g, w)
		}
	}
}
