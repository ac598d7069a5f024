package supervisor

import (
	"testing"
	"time"
)

// Retry-After, when the queue is full, is when the first running run is
// expected to end: what is left of the recent average, or as long again as a
// run has gone on once it is past it.
func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		avg   time.Duration
		ran   []time.Duration // of the runs holding the slots
		wantS int
	}{
		{"fresh runs of the average", 3 * time.Second, []time.Duration{0, 0}, 3},
		{"runs past a short average", 100 * time.Millisecond, []time.Duration{4 * time.Second, 6 * time.Second}, 4},
		{"the soonest of two", 10 * time.Second, []time.Duration{9 * time.Second, 2 * time.Second}, 1},
		{"at least one second", 10 * time.Millisecond, []time.Duration{0}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAdmission(len(tc.ran), 1<<20, 1)
			a.avgRun = tc.avg
			for _, ran := range tc.ran {
				tk := a.enter(1)
				tk.since = time.Now().Add(-ran)
			}
			if a.enter(1) == nil || a.enter(1) != nil {
				t.Fatal("want the queue's one place taken, then a refusal")
			}
			if got := a.retryAfter(); got != tc.wantS {
				t.Errorf("got %d s, want %d s", got, tc.wantS)
			}
		})
	}
}
