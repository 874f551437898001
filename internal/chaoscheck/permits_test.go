package chaoscheck

import (
	"testing"
	"time"
)

// TestCheckPermits: holds of a semaphore of 3 permits are within its
// capacity until a third hold comes in while two others hold 3 between
// them; a restart that may have wiped one of those two excuses it. A
// writer of an RWMutex (all of its permits) overlaps no reader. A grant
// called after another was granted has the larger fence.
func TestCheckPermits(t *testing.T) {
	t0 := time.Now()
	ms := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }
	hold := func(key, token string, permits int64, fence uint64, call, start, end float64) *Hold {
		return &Hold{Key: key, Token: token, Permits: permits, Fence: fence, Via: "acquire",
			Call: ms(call), Start: ms(start), End: ms(end), TrustedEnd: ms(end), TrustedAny: true}
	}
	const max = 1 << 40
	capacity := map[string]int64{"s": 3, "rw": max}
	for _, tc := range []struct {
		name     string
		holds    []*Hold
		restarts []Restart
		problems int
		excused  int
	}{
		{"within capacity", []*Hold{hold("s", "a", 2, 1, 0, 5, 50), hold("s", "b", 1, 2, 10, 15, 60), hold("s", "c", 3, 3, 20, 60, 90)}, nil, 0, 0},
		{"over capacity", []*Hold{hold("s", "a", 2, 1, 0, 5, 50), hold("s", "b", 1, 2, 10, 15, 60), hold("s", "c", 1, 3, 20, 40, 90)}, nil, 1, 0},
		{"over capacity across a restart", []*Hold{hold("s", "a", 2, 1, 0, 5, 50), hold("s", "b", 1, 2, 10, 15, 60), hold("s", "c", 1, 1, 35, 40, 90)}, []Restart{{ms(20), ms(30)}}, 0, 1},
		{"a restart wiping too little", []*Hold{hold("s", "a", 2, 1, 0, 5, 50), hold("s", "b", 1, 2, 25, 28, 60), hold("s", "c", 3, 3, 35, 40, 90)}, []Restart{{ms(20), ms(22)}}, 1, 0},
		{"readers", []*Hold{hold("rw", "a", 1, 1, 0, 5, 50), hold("rw", "b", 1, 2, 10, 15, 60)}, nil, 0, 0},
		{"writer after a reader", []*Hold{hold("rw", "a", 1, 1, 0, 5, 50), hold("rw", "b", max, 2, 10, 15, 60)}, nil, 1, 0},
		{"reader after a writer", []*Hold{hold("rw", "a", max, 1, 0, 5, 50), hold("rw", "b", 1, 2, 10, 15, 60)}, nil, 1, 0},
		{"same start", []*Hold{hold("rw", "a", max, 1, 0, 5, 50), hold("rw", "b", 1, 2, 0, 5, 60)}, nil, 1, 0},
		{"smaller fence called after a grant", []*Hold{hold("s", "a", 1, 2, 0, 5, 50), hold("s", "b", 1, 1, 10, 15, 60)}, nil, 1, 0},
		{"smaller fence called before the grant", []*Hold{hold("s", "a", 1, 2, 0, 5, 50), hold("s", "b", 1, 1, 4, 15, 60)}, nil, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := CheckPermits(tc.holds, capacity, Options{Restarts: tc.restarts, Logf: t.Logf})
			if len(res.Problems) != tc.problems || res.Excused != tc.excused {
				t.Errorf("problems %q, excused %d; want %d, %d", res.Problems, res.Excused, tc.problems, tc.excused)
			}
		})
	}
}
