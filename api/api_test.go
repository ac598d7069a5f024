package api

import "testing"

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
