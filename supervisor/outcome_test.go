package supervisor

import (
	"testing"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/jail"
)

// TestConclude: every way the jail ends a run, under every network mode, gets
// API.md's status, reason and outcome; a networked run cut short is unknown.
func TestConclude(t *testing.T) {
	type want struct {
		status  api.Status
		reason  api.Reason
		offline api.Outcome // network none
		online  api.Outcome // registries, domains, any
	}
	table := map[jail.End]want{
		jail.EndCompleted: {api.StatusCompleted, api.ReasonNone, api.OutcomeSucceeded, api.OutcomeSucceeded},
		jail.EndError:     {api.StatusFailed, api.ReasonError, api.OutcomeFailed, api.OutcomeFailed},
		jail.EndTimeout:   {api.StatusFailed, api.ReasonTimeout, api.OutcomeFailed, api.OutcomeUnknown},
		jail.EndMemory:    {api.StatusFailed, api.ReasonMemory, api.OutcomeFailed, api.OutcomeUnknown},
		jail.EndStopped:   {api.StatusFailed, api.ReasonStopped, api.OutcomeFailed, api.OutcomeUnknown},
		jail.EndInternal:  {api.StatusFailed, api.ReasonInternal, api.OutcomeFailed, api.OutcomeFailed},
		jail.End("what"):  {api.StatusFailed, api.ReasonInternal, api.OutcomeFailed, api.OutcomeFailed},
	}
	if len(table) != len(reasonOf)+1 {
		t.Fatalf("the table covers %d ends, the mapping %d: add the new end here", len(table)-1, len(reasonOf))
	}
	for end, w := range table {
		for _, mode := range []string{api.NetworkNone, api.NetworkRegistries, api.NetworkDomains, api.NetworkAny} {
			t.Run(string(end)+"/"+mode, func(t *testing.T) {
				for _, started := range []bool{false, true} {
					status, reason, outcome := Conclude(end, mode, started)
					wantOutcome := w.online
					if mode == api.NetworkNone {
						wantOutcome = w.offline
					}
					if reason == api.ReasonInternal && started && mode != api.NetworkNone {
						// Cut short after its start, online: as a stop.
						wantOutcome = api.OutcomeUnknown
					}
					if status != w.status || reason != w.reason || outcome != wantOutcome {
						t.Errorf("started %v: got %s/%q/%s, want %s/%q/%s", started, status, reason, outcome, w.status, w.reason, wantOutcome)
					}
				}
			})
		}
	}
}

// TestResultOf: the jail's result is carried over field by field.
func TestResultOf(t *testing.T) {
	code := 3
	jr := &jail.Result{End: jail.EndError, ExitCode: &code, Message: "the program exited with code 3",
		Stdout: "out", Stderr: "err", StdoutTruncated: true,
		Usage:  jail.Usage{WallMS: 5, CPUMS: 4, PeakMemoryBytes: 1 << 20},
		Timing: jail.Timing{StartMS: 2, TotalMS: 9}}
	req := api.Request{Language: "python", Network: &api.Network{Mode: api.NetworkAny}}
	res := ResultOf("r1", req, jr)
	if res.ID != "r1" || res.Language != "python" || res.State != api.StateFinished || res.Status != api.StatusFailed ||
		res.Reason != api.ReasonError || res.Outcome != api.OutcomeFailed || res.ExitCode == nil || *res.ExitCode != 3 ||
		res.Stdout != "out" || res.Stderr != "err" || !res.StdoutTruncated || res.StderrTruncated ||
		res.Usage != (api.Usage{WallMS: 5, CPUMS: 4, PeakMemoryBytes: 1 << 20}) || res.Timing.StartMS != 2 || res.Timing.TotalMS != 9 ||
		res.Network.Mode != api.NetworkAny || res.Network.Connections == nil || res.Packages == nil || res.Message != jr.Message {
		t.Errorf("got %+v, want the jail's result in API words", res)
	}
}

// A run that ended before its program ran has the outcome API.md gives its
// reason and network mode: stopped (in the queue, while its packages were
// prepared) and networked is unknown, as one in flight when the service died
// is; a sandbox that could not start, or a package that could not be had, is
// failed; stopped without network is failed.
func TestOutcomeBeforeTheProgramRan(t *testing.T) {
	req := api.Request{Language: "python", Network: &api.Network{Mode: api.NetworkAny}}
	for reason, want := range map[api.Reason]api.Outcome{api.ReasonStopped: api.OutcomeUnknown, api.ReasonInternal: api.OutcomeFailed, api.ReasonPackageUnavailable: api.OutcomeFailed} {
		if got := failedResult("r", req, reason, "m").Outcome; got != want {
			t.Errorf("%s before the program ran, network any: got %q, want %q", reason, got, want)
		}
	}
	off := api.Request{Language: "python", Network: &api.Network{Mode: api.NetworkNone}}
	if got := failedResult("r", off, api.ReasonStopped, "m").Outcome; got != api.OutcomeFailed {
		t.Errorf("stopped before the program ran, network none: got %q, want failed", got)
	}
	if got := interruptedResult("r", &record{Language: "python", Network: api.NetworkAny}).Outcome; got != api.OutcomeUnknown {
		t.Errorf("interrupted by the service's end, network any: got %q, want unknown", got)
	}
}
