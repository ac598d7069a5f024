package supervisor

import (
	"fmt"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/jail"
)

// reasonOf is API.md's reason for how the jail saw a run end.
var reasonOf = map[jail.End]api.Reason{
	jail.EndCompleted: api.ReasonNone,
	jail.EndError:     api.ReasonError,
	jail.EndTimeout:   api.ReasonTimeout,
	jail.EndMemory:    api.ReasonMemory,
	jail.EndStopped:   api.ReasonStopped,
	jail.EndInternal:  api.ReasonInternal,
}

// Conclude is API.md's status, reason and outcome of a run the jail ended with
// end, under the request's network mode, its program started or not: the one
// place they are decided for a run that reached the jail (api.OutcomeOf is the
// outcome rule itself). An end the table does not know is internal: a defect,
// never a success. A networked run whose sandbox failed after its program had
// started was cut short as a stopped one is, and may have changed something
// outside as well: unknown, so that a harness does not take it for a run that
// did nothing and send it again.
func Conclude(end jail.End, networkMode string, started bool) (status api.Status, reason api.Reason, outcome api.Outcome) {
	reason, ok := reasonOf[end]
	if !ok {
		reason = api.ReasonInternal
	}
	return conclude(reason, networkMode, started)
}

// conclude is Conclude for a reason: the metrics make a series at 0 for
// every outcome it gives.
func conclude(reason api.Reason, networkMode string, started bool) (status api.Status, _ api.Reason, outcome api.Outcome) {
	status = api.StatusFailed
	if reason == api.ReasonNone {
		status = api.StatusCompleted
	}
	outcome = api.OutcomeOf(reason, networkMode)
	if reason == api.ReasonInternal && started && api.NetworkMode(networkMode).Online() {
		outcome = api.OutcomeUnknown
	}
	return status, reason, outcome
}

// ResultOf is the API's Result of the run req whose jail result is jr: what
// happened, in API.md's words. The caller adds what the jail does not know (the
// id, the network connections, the queue's share of the timing).
func ResultOf(id string, req api.Request, jr *jail.Result) *api.Result {
	res := pendingResult(id, req)
	res.State = api.StateFinished
	res.Status, res.Reason, res.Outcome = Conclude(jr.End, req.Network.Mode, jr.Started)
	res.ExitCode = jr.ExitCode
	res.Signal = jr.Signal
	res.Message = jr.Message + limitHint(jr, req)
	res.Stdout, res.StdoutTruncated = jr.Stdout, jr.StdoutTruncated
	res.Stderr, res.StderrTruncated = jr.Stderr, jr.StderrTruncated
	res.Usage = api.Usage{WallMS: jr.Usage.WallMS, CPUMS: jr.Usage.CPUMS, PeakMemoryBytes: jr.Usage.PeakMemoryBytes}
	res.Timing = api.Timing{StartMS: jr.Timing.StartMS, TotalMS: jr.Timing.TotalMS}
	return res
}

// limitHint is what a run that hit its own time or memory limit can change,
// in the request's fields: the jail's message says which limit ended it, not
// that the request may ask for more, nor what counts (the limits probe of
// 2026-12-06). A kill for memory short outside the run gets none: a larger
// memory_mib would not help, which its message says.
func limitHint(jr *jail.Result, req api.Request) string {
	const coldStartNoteSeconds = 5 // a limit a cold start's share is worth a word in
	switch {
	case jr.End == jail.EndTimeout && req.TimeoutSeconds != nil:
		// A short limit of a cold run also held the interpreter's own
		// start, which a busy host stretches: an overloaded Node, a second
		// of it (the load probe of 2026-12-06: a 1 s run timed out
		// before its first line, with 45 ms of CPU).
		cold := ""
		if jr.Start != jail.StartWarm && jr.Start != "" && *req.TimeoutSeconds <= coldStartNoteSeconds {
			cold = "; this run started cold, and its limit counted the interpreter's own start, which takes longer on a busy host"
		}
		if *req.TimeoutSeconds >= api.MaxTimeoutSeconds {
			return fmt.Sprintf("%s; %d s is the most timeout_seconds may be", cold, api.MaxTimeoutSeconds)
		}
		return fmt.Sprintf("%s; timeout_seconds may be raised up to %d if the program needs longer", cold, api.MaxTimeoutSeconds)
	case jr.End == jail.EndMemory && req.MemoryMiB != nil && !jr.ShortElsewhere:
		counts := "; what its processes hold counts, and so do its files under /tmp, /sandbox and /dev/shm"
		if *req.MemoryMiB >= api.MaxMemoryMiB {
			return fmt.Sprintf("%s; %d MiB is the most memory_mib may be", counts, api.MaxMemoryMiB)
		}
		return fmt.Sprintf("%s; memory_mib may be raised up to %d if the program needs more", counts, api.MaxMemoryMiB)
	case jr.End == jail.EndError && jr.Signal == "SIGBUS" && req.MemoryMiB != nil:
		// What a mapped file's page that the full tmpfs can't back gets
		// (shared memory, an mmap'ed file): no message had said why.
		return fmt.Sprintf("; a SIGBUS is what a program gets that touches a mapped file's page its writable area can't hold: /tmp, /sandbox and /dev/shm share %d MiB, half of memory_mib", jail.ScratchBytes(int64(*req.MemoryMiB)<<20)>>20)
	}
	return ""
}
