package api

import (
	"testing"
	"time"
)

func TestOutcomeOf(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reason  Reason
		network string
		want    Outcome
	}{
		{"completed", ReasonNone, NetworkNone, OutcomeSucceeded},
		{"completed with network", ReasonNone, NetworkAny, OutcomeSucceeded},
		{"error", ReasonError, NetworkNone, OutcomeFailed},
		{"error with network", ReasonError, NetworkAny, OutcomeFailed},
		{"timeout offline", ReasonTimeout, NetworkNone, OutcomeFailed},
		{"timeout, mode unset", ReasonTimeout, "", OutcomeFailed},
		{"timeout online", ReasonTimeout, NetworkDomains, OutcomeUnknown},
		{"memory online", ReasonMemory, NetworkRegistries, OutcomeUnknown},
		{"memory offline", ReasonMemory, NetworkNone, OutcomeFailed},
		{"stopped online", ReasonStopped, NetworkAny, OutcomeUnknown},
		{"stopped offline", ReasonStopped, NetworkNone, OutcomeFailed},
		{"blocked", ReasonPackageBlocked, NetworkNone, OutcomeBlocked},
		{"unavailable", ReasonPackageUnavailable, NetworkRegistries, OutcomeFailed},
		{"internal online", ReasonInternal, NetworkAny, OutcomeFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := OutcomeOf(tc.reason, tc.network); got != tc.want {
				t.Errorf("OutcomeOf(%q, %q): got %q, want %q", tc.reason, tc.network, got, tc.want)
			}
		})
	}
}

// TestMillis: a Result's durations round up, so that a run that took any
// time never reads 0 ms; nothing, or a clock that went back, reads 0.
func TestMillis(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 0},
		{-time.Second, 0},
		{time.Nanosecond, 1},
		{700 * time.Microsecond, 1},
		{time.Millisecond, 1},
		{time.Millisecond + 1, 2},
		{1500 * time.Millisecond, 1500},
	} {
		if got := Millis(c.d); got != c.want {
			t.Errorf("Millis(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}
