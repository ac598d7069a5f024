package supervisor

import (
	"strings"
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

// TestResultOfSaysWhatToChange: a run that hit its own time or memory limit
// is told which field may ask for more, and up to what, or that it is at the
// most; one killed for memory short outside it is not (the limits probe).
func TestResultOfSaysWhatToChange(t *testing.T) {
	over := "the run went over its memory limit of 128 MiB: the kernel's OOM killer acted on its processes, and the whole run was stopped"
	for _, tc := range []struct {
		name             string
		end              jail.End
		message          string
		timeout, memory  int
		want, wantAbsent string
		elsewhere        bool
	}{
		{"time, below the most", jail.EndTimeout, "the program ran longer than its time limit of 61 s and was killed", 61, 512, "; timeout_seconds may be raised up to 300 if the program needs longer", "", false},
		{"time, at the most", jail.EndTimeout, "ran longer", 300, 512, "; 300 s is the most timeout_seconds may be", "raised", false},
		{"time, short and cold", jail.EndTimeout, "ran longer", 1, 512, "; this run started cold, and its limit counted the interpreter's own start, which takes longer on a busy host; timeout_seconds may be raised", "", false},
		{"memory, below the most", jail.EndMemory, over, 30, 128, "its files under /tmp, /sandbox and /dev/shm; memory_mib may be raised up to 2048", "", false},
		{"memory, at the most", jail.EndMemory, over, 30, 2048, "; 2048 MiB is the most memory_mib may be", "raised", false},
		{"memory short outside the run", jail.EndMemory, "the kernel's OOM killer killed a process of the run while the run was under its memory limit", 30, 128, "", "memory_mib may", true},
		{"an error", jail.EndError, "the program exited with code 1", 30, 128, "", "may be", false},
		{"a SIGBUS", jail.EndError, "the program was killed by SIGBUS", 30, 256, "/tmp, /sandbox and /dev/shm share 128 MiB, half of memory_mib", "", false},
	} {
		req := api.Request{Language: "python", TimeoutSeconds: &tc.timeout, MemoryMiB: &tc.memory, Network: &api.Network{Mode: api.NetworkNone}}
		jr := &jail.Result{End: tc.end, Message: tc.message, ShortElsewhere: tc.elsewhere, Start: jail.StartWarm}
		if strings.Contains(tc.name, "cold") {
			jr.Start = jail.StartColdEmpty
		}
		if strings.Contains(tc.message, "SIGBUS") {
			jr.Signal = "SIGBUS"
		}
		res := ResultOf("r", req, jr)
		if !strings.HasPrefix(res.Message, tc.message) || !strings.Contains(res.Message, tc.want) || tc.wantAbsent != "" && strings.Contains(res.Message, tc.wantAbsent) {
			t.Errorf("%s: got %q, want the jail's message and %q", tc.name, res.Message, tc.want)
		}
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
