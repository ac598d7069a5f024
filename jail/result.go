package jail

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/cgroup"
	"github.com/brig-sandbox/brig/jail/pid1"
	"github.com/brig-sandbox/brig/jail/reaper"
)

// End is how a run ended, as the jail saw it. The supervisor turns it, with the
// request's network mode, into API.md's status, reason and outcome
// (supervisor.ResultOf); the jail knows no API words.
type End string

// Ends of a run.
const (
	// EndCompleted: the program exited 0.
	EndCompleted End = "completed"
	// EndError: the program exited non-zero or died of a signal it raised or
	// received from inside the run.
	EndError End = "error"
	// EndTimeout: the program ran past its time limit and was killed.
	EndTimeout End = "timeout"
	// EndMemory: the kernel's OOM killer acted on one of the run's processes,
	// and the whole run was stopped.
	EndMemory End = "memory"
	// EndStopped: the caller cancelled the run.
	EndStopped End = "stopped"
	// EndInternal: the sandbox could not be built, or its init failed (Step says
	// where); the program did not run, or was killed at once.
	EndInternal End = "internal"
)

// Result is what happened in one run.
type Result struct {
	End End
	// ExitCode is the program's exit status, when it exited; Signal the name of
	// the signal that ended it ("SIGKILL" for a timeout, a stop or an OOM kill).
	ExitCode *int
	Signal   string
	// Step is the step of the sandbox's setup that failed, with EndInternal.
	Step string
	// Message is one sentence for any end but EndCompleted.
	Message string
	// ShortElsewhere, with EndMemory, says the OOM kill was for memory short
	// outside the run (the host's, or under a limit above its cgroup), which
	// the run's own limit did not cause: the same run may succeed again.
	ShortElsewhere bool
	// Stdout and Stderr are the program's output, capped at api.MaxStdoutChars
	// and api.MaxStderrChars code points; the flags say when more was dropped.
	Stdout, Stderr                   string
	StdoutTruncated, StderrTruncated bool
	Usage                            Usage
	Timing                           Timing
	// Start is how the interpreter was started: StartWarm, StartCold,
	// StartColdEnv, StartColdEmpty, StartColdLayer or StartColdFailing.
	Start string
	// Started says that the program had started (its interpreter exec'd, or a
	// zygote's child handed its run) before the run ended.
	Started bool
	// Cgroup is the path of the run's cgroup in its hierarchies, by which the
	// cgroup package's log lines (an OOM kill, a failed removal) name it: a
	// pooled sandbox's group is made before its run is known, so the run's own
	// log line carries it.
	Cgroup string
}

// Usage is what a run consumed.
type Usage struct {
	// WallMS is from the interpreter's exec to the program's end.
	WallMS          int64
	CPUMS           int64
	PeakMemoryBytes int64
}

// Timing is when a run's phases ended, in milliseconds from the call to Run.
type Timing struct {
	// StartMS is when the interpreter was exec'd (0 when it never was).
	StartMS int64
	TotalMS int64
}

// Succeeded reports whether the program ran and exited 0.
func (r *Result) Succeeded() bool { return r.End == EndCompleted }

// ending is how supervise saw the run end.
type ending struct {
	setupErr *pid1.Message      // the init failed a step
	started  bool               // the program was started
	ws       syscall.WaitStatus // the program's wait status, when exited
	exited   bool
	timedOut bool
	stopped  bool
	lost     bool // the init died without reporting (OOM-killed, or a defect)
	// zygoteLost: the zygote that forked the program died before it could
	// report the program's exit, and the kernel's record of it did not come
	// (no exit watch, or its record lost).
	zygoteLost bool
	// oomKilled: the cgroup reported an OOM kill, after which every process of
	// the run was killed (a run is one unit: see cgroup.Group.OOMKilled).
	oomKilled bool
	// sockets: the run's memory and its TCP buffers, which v1 charges apart,
	// went over its memory limit together (overMemory), which ended it.
	sockets bool
	// early: the exit came from the kernel's taskstats record (exitWatch),
	// before the program's teardown.
	early bool
	// backstop: the run ended by SIGKILL, or with its init, and was seen to
	// end only past its deadline: its sandbox's backstop (reaper.ArmBackstop)
	// ended it while this process did not run, or its end and the deadline
	// came to a late supervisor at once.
	backstop bool
}

// coldEarlyExit: a cold run heeds the kernel's record of its program's exit.
// A variable for BenchmarkColdEarlyExit alone, which alternates runs with and
// without it.
var coldEarlyExit = true

// supervise waits for the program to start and end, enforcing the deadline and
// ending the run at the first OOM kill of any of its processes, and kills the
// sandbox's pid namespace when it returns (killNamespace; release kills its
// cgroup too).
//
// early, when not nil, gets the program's wait status from the kernel's record
// of its exit (exitWatch), which comes before the init's or the zygote's
// report; it is heeded once the program has started. A cold program's record
// is asked for once it has started, when its pid is known.
func (l *Launcher) supervise(ctx context.Context, spec Spec, s *slot, ready bool, res *Result, begin time.Time, early <-chan uint32) (e ending) {
	defer s.killNamespace()
	oom := s.group.OOMKilled()
	setup := time.NewTimer(setupTimeout)
	defer setup.Stop()
	var deadline <-chan time.Time
	// startedAt is the init's CLOCK_MONOTONIC reading when the interpreter was
	// exec'd; the clock is the host's (there is no time namespace), so the deadline
	// and the wall time count from the exec, however late its message arrives.
	var startedAt time.Duration
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var exited <-chan uint32 // early, once started
	// armed: the sandbox's backstop is armed, so the program ran at most
	// its limit and the margin, however late this process heard of its end
	// (it was stopped): its wall time says no more.
	armed := false
	defer func() {
		if most := api.Millis(spec.Timeout + backstopMargin); armed && res.Usage.WallMS > most {
			res.Usage.WallMS = most
		}
	}()
	start := func(mono time.Duration) {
		startedAt = mono
		e.started = true
		exited = early
		setup.Stop()
		at := time.Now().Add(-(pid1.Monotonic() - startedAt))
		res.Timing.StartMS = at.Sub(begin).Milliseconds()
		timer = time.NewTimer(spec.Timeout - (pid1.Monotonic() - startedAt))
		deadline = timer.C
		if s.reaper {
			// The limit holds even while this process is stopped: past it
			// and a margin, the sandbox's pid 1 ends the sandbox
			// (reaper.ArmBackstop). Not before its "started", or its
			// zygote child's hand-over: a fresh reaper that has not yet
			// blocked the signal would discard it, as a namespace's pid 1
			// does a signal at its default action.
			if err := reaper.ArmBackstop(s.cmd.Process.Pid, spec.Timeout-(pid1.Monotonic()-startedAt)+backstopMargin); err != nil {
				l.log.Warn("the run has no backstop of its time limit for a stopped service", "err", err)
			} else {
				armed = true
			}
		}
		if spec.OnStart != nil {
			spec.OnStart(at)
		}
	}
	// ended sets the wall time of a run that ends without its program's
	// exit, from its start, if it had started (an audit found 0 for a run
	// whose init was lost in its OOM kill).
	ended := func() {
		if e.started {
			res.Usage.WallMS = api.Millis(pid1.Monotonic() - startedAt)
		}
	}
	// overdue: the run, which ended at mono, was past its deadline.
	overdue := func(mono time.Duration) bool { return e.started && mono-startedAt >= spec.Timeout }
	exit := func(mono time.Duration, ws uint32) ending {
		// When the kernel's record has come too, it ends the run: Run can
		// then take the output without waiting for the teardown.
		select {
		case ews := <-exited:
			mono, ws, e.early = pid1.Monotonic(), ews, true
		default:
		}
		res.Usage.WallMS = api.Millis(mono - startedAt)
		e.exited, e.ws = true, syscall.WaitStatus(ws)
		e.backstop = e.ws.Signaled() && e.ws.Signal() == syscall.SIGKILL && overdue(mono)
		return e
	}
	// killedWithInit: a program seen to end by SIGKILL, from the kernel's
	// record or its zygote's, before its init said so, may have been killed
	// by its pid namespace's end: its init died (killed from outside),
	// which is the lost init's internal, not the program's error (the
	// recovery probe's killed inits were "killed by SIGKILL" four times in
	// seven). A dying process closes its descriptors before its pid
	// namespace's processes are killed, so the init's status pipe has no
	// writer left by then (hungUp). But an init also exits right after it
	// reports its program's exit, so the pipe is read to its end first: a
	// report of the exit there is the program's own end (a program that
	// SIGKILLed itself had read as the lost init on a busy machine, 5 runs
	// in 40: the review of 2026-12-05). The reading can't wait long: the
	// pipe has no writer.
	killedWithInit := func(ws uint32) bool {
		w := syscall.WaitStatus(ws)
		if !w.Signaled() || w.Signal() != syscall.SIGKILL || !hungUp(s.status) {
			return false
		}
		for m := range s.msgs {
			if m.Kind == pid1.MsgExit {
				return false
			}
		}
		return true
	}
	lost := func() ending {
		ended()
		e.lost = true
		e.backstop = overdue(pid1.Monotonic())
		return e
	}
	// A zygote's child waits for its run from the supervisor, and reports its
	// exit through the zygote, not the init.
	var zexit <-chan uint32
	// zgone, once the zygote died, is closed when its child has exited;
	// recordLate then fires if the kernel's record of that exit has not
	// come (lost) within zygoteRecordWait.
	var zgone <-chan struct{}
	var recordLate <-chan time.Time
	if s.zchild != nil {
		if err := s.zchild.handOver(); err != nil {
			e.setupErr = &pid1.Message{Kind: pid1.MsgError, Step: "hand-over", Error: err.Error()}
			return e
		}
		start(pid1.Monotonic())
		zexit = s.zchild.exit
	}
	// On v1 a run's TCP buffers are charged apart from its memory, past any
	// limit of theirs (cgroup.Group.TCPBytes): the run's limit is held
	// against their sum here, at tcpFirstCheck and then every tcpCheck.
	var tcpTicker *time.Ticker
	var tcpTick <-chan time.Time
	tcpWarned := false
	if s.group.SeparateTCP() {
		tcpTicker = time.NewTicker(tcpFirstCheck)
		defer tcpTicker.Stop()
		tcpTick = tcpTicker.C
	}
	for {
		select {
		case <-tcpTick:
			tcpTicker.Reset(tcpCheck)
			over, err := s.overMemory(spec.MemoryBytes)
			if over {
				ended()
				e.oomKilled, e.sockets = true, true
				return e
			}
			if err != nil && !tcpWarned {
				// A group deleted under the run ends it by other means.
				l.log.Warn("reading the run's memory and TCP buffers: its TCP buffers are not held to its memory limit", "err", err)
				tcpWarned = true
			}
		case m, ok := <-s.msgs:
			switch {
			case m.Kind == pid1.MsgReady && !ready:
				ready = true
			case !ok:
				return lost()
			case m.Kind == pid1.MsgError:
				ended()
				e.setupErr = &m
				return e
			case m.Kind == pid1.MsgStarted:
				start(time.Duration(m.Mono))
				if coldEarlyExit && exited == nil && s.zchild == nil && s.childPID == 0 && l.exits != nil {
					// A cold program: its pid is known from now, and it
					// may have exited already (expectChild).
					if pid, err := onlyChild(s.cmd.Process.Pid); err == nil {
						s.childPID = pid
						exited = l.exits.expectChild(pid, s.cmd.Process.Pid)
						defer l.exits.forget(pid)
					}
				}
			case m.Kind == pid1.MsgExit:
				return exit(time.Duration(m.Mono), m.WaitStatus)
			}
		case ws, ok := <-zexit:
			if !ok {
				// The zygote died. Its child, the program, lives on in its
				// sandbox (it gets nothing more from the zygote), and the
				// kernel's record tells its end: the run goes on, and only
				// a program whose end comes with no record is the lost
				// zygote's (the soak's zygote, killed as runs took its
				// children, had a program that printed and exited 0 read as
				// internal).
				zexit = nil
				if exited != nil {
					zgone = s.zchild.gone()
					continue
				}
				ended()
				e.zygoteLost = true
				e.backstop = overdue(pid1.Monotonic())
				return e
			}
			mono := pid1.Monotonic()
			if killedWithInit(ws) {
				return lost()
			}
			return exit(mono, ws)
		case <-zgone:
			zgone = nil
			recordLate = time.After(zygoteRecordWait)
		case <-recordLate:
			ended()
			e.zygoteLost = true
			e.backstop = overdue(pid1.Monotonic())
			return e
		case ws := <-exited:
			mono := pid1.Monotonic()
			if killedWithInit(ws) {
				return lost()
			}
			e.early = true
			return exit(mono, ws)
		case <-deadline:
			ended()
			e.timedOut = true
			return e
		case <-oom:
			// The cgroup has killed every process of the run already; the
			// program's exit, if it is on its way, is not waited for.
			ended()
			e.oomKilled = true
			return e
		case <-setup.C:
			e.setupErr = &pid1.Message{Kind: pid1.MsgError, Step: "start", Error: fmt.Sprintf("the program had not started after %s", setupTimeout)}
			return e
		case <-ctx.Done():
			ended()
			e.stopped = true
			return e
		}
	}
}

// classify turns how the run ended into exit code, signal, reason and message.
//
// The first of these that holds decides the reason:
//   - the init failed a step: internal;
//   - the deadline or a stop came first (supervise returns at the first end it
//     sees): timeout or stopped, even if an OOM kill followed as the run was
//     being killed; so too a run seen to end by SIGKILL, or with its init or
//     zygote, only past its deadline (its sandbox's backstop ended it while
//     this process was stopped), unless an OOM kill did;
//   - any OOM kill in the run (the cgroup's signal, or its count above zero):
//     memory, whatever the program's own exit. A parent that caught its child's
//     OOM kill and exited 0 did not complete: the run went over memory_mib, and
//     the whole of it was stopped;
//   - the init ended without reporting: internal;
//   - the program's exit: none for 0, else error.
//
// exit_code and signal are the program's own, as observed: a program that exited
// before the run was stopped keeps its code; one the stop killed has SIGKILL;
// one stopped before its init had the run (Run) has neither.
func (l *Launcher) classify(res *Result, e ending, usage cgroup.Usage, spec Spec) {
	res.Started = e.started
	oom := e.oomKilled || usage.OOMKills > 0
	switch {
	case e.setupErr != nil && e.started:
		res.Step = e.setupErr.Step
		res.Message = fmt.Sprintf("the sandbox's init failed (step %q: %s) after the program started; the run was killed", e.setupErr.Step, withErrnoText(e.setupErr.Error))
		res.End = EndInternal
	case e.setupErr != nil:
		res.Step = e.setupErr.Step
		res.Message = fmt.Sprintf("the sandbox could not be built (step %q: %s); the program did not run", e.setupErr.Step, withErrnoText(e.setupErr.Error))
		res.End = EndInternal
	case e.timedOut, e.backstop && !oom:
		res.Signal = "SIGKILL"
		res.Message = fmt.Sprintf("the program ran longer than its time limit of %s and was killed", seconds(spec.Timeout))
		res.End = EndTimeout
	case e.stopped && !e.started:
		// The init had the run, but had not said it started the program,
		// which it says after the exec or hand-over: it may have, for as
		// long as that took. (A stop before the init had the run is Run's:
		// the program did not run.)
		res.Signal = "SIGKILL"
		res.Message = "the run was stopped as its program was being started"
		res.End = EndStopped
	case e.stopped:
		res.Signal = "SIGKILL"
		res.Message = "the run was stopped before the program ended"
		res.End = EndStopped
	case oom:
		switch {
		case e.exited && e.ws.Exited():
			code := e.ws.ExitStatus()
			res.ExitCode = &code
		case e.exited:
			res.Signal = SignalName(e.ws.Signal())
		default: // the OOM kill, or the stop it caused, came before the program's exit
			res.Signal = "SIGKILL"
		}
		res.Message = memoryMessage(spec, usage)
		res.ShortElsewhere = shortElsewhere(usage)
		if e.sockets {
			// v1's kmem.tcp counts UDP's buffers too (the limits probe).
			res.Message = fmt.Sprintf("the run went over its memory limit of %d MiB with its socket buffers counted: the whole run was stopped", spec.MemoryBytes>>20)
			res.ShortElsewhere = false
		}
		res.End = EndMemory
	case e.lost:
		res.Message = "the sandbox init ended without reporting the program's status"
		res.End = EndInternal
	case e.zygoteLost:
		res.Message = "the Python zygote that started the program ended before it could report the program's status; the run was killed"
		res.End = EndInternal
	case e.ws.Exited() && e.ws.ExitStatus() == 0:
		code := 0
		res.ExitCode = &code
		res.End = EndCompleted
	case e.ws.Exited():
		code := e.ws.ExitStatus()
		res.ExitCode = &code
		res.Message = fmt.Sprintf("the program exited with code %d", code)
		res.End = EndError
	default:
		res.Signal = SignalName(e.ws.Signal())
		res.Message = fmt.Sprintf("the program was killed by %s", res.Signal)
		res.End = EndError
	}
	if usage.PidsMaxHits > 0 && (res.End == EndTimeout || res.End == EndError) {
		// A fork bomb's end said only "ran longer than its time limit", and a
		// thread refused said nothing of why (the limits probe of 2026-12-06).
		res.Message += fmt.Sprintf("; it had reached its limit of %d processes and threads (%d forks or new threads were refused)", l.cfg.Pids, usage.PidsMaxHits)
	}
}

// seconds is d as a Result's message gives a limit, in the API's unit: "61 s",
// where Go's "1m1s" had to be parsed back (the limits probe of 2026-12-06).
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
}

// SignalName is the name a Result gives signal sig: the C library's (SIGKILL),
// and for the real-time signals, which it does not name, kill -l's, which
// kill -s takes: SIGRTMIN (34, the C library's first), SIGRTMIN+1 to +15,
// SIGRTMAX-14 to -1, SIGRTMAX (64). The two below SIGRTMIN that the C library
// keeps for its threads are SIG32 and SIG33.
func SignalName(sig unix.Signal) string {
	const rtmin, rtmax = 34, 64
	n := int(sig)
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	switch {
	case n == rtmin:
		return "SIGRTMIN"
	case n == rtmax:
		return "SIGRTMAX"
	case n > rtmin && n <= (rtmin+rtmax)/2:
		return fmt.Sprintf("SIGRTMIN+%d", n-rtmin)
	case n > rtmin && n < rtmax:
		return fmt.Sprintf("SIGRTMAX-%d", rtmax-n)
	}
	return fmt.Sprintf("SIG%d", n)
}

// SignalNumber is the signal SignalName names name, or 0.
func SignalNumber(name string) unix.Signal {
	for sig := unix.Signal(1); sig <= 64; sig++ {
		if SignalName(sig) == name {
			return sig
		}
	}
	return 0
}

// tcpFirstCheck and tcpCheck are when a run's memory and TCP buffers are
// first summed where they are charged apart (supervise), and how often after.
// The first comes late enough that most runs end before it: the checks cost a
// 60 to 90 ms JavaScript run 0.15 to 0.2 ms of the service's CPU in all (brig bench,
// the builds with and without it in turn).
const (
	tcpFirstCheck = 100 * time.Millisecond
	tcpCheck      = 20 * time.Millisecond
)

// overMemory reports whether the sandbox's memory and its TCP buffers,
// charged apart (cgroup.Group.TCPBytes), are together over limit. It reads
// the memory only once the buffers hold a sixteenth of the limit: most runs
// hold none.
func (s *slot) overMemory(limit int64) (bool, error) {
	tcp, err := s.group.TCPBytes()
	if err != nil || tcp < limit/16 {
		return false, err
	}
	mem, err := s.group.MemoryCurrent()
	return err == nil && mem+tcp > limit, err
}

// shortElsewhere says the run's OOM kills came where its own memory limit was
// never reached.
func shortElsewhere(usage cgroup.Usage) bool { return usage.OOMKills > 0 && !usage.OwnLimitReached }

// memoryMessage says which limit was hit and what it cost the run. The
// cgroup's oom_kill count is not given: under cgroup v2's memory.oom.group it
// counts every process of the group's kill, not what went over. A kill counted
// where the run never reached its own limit was for memory short outside it,
// the host's or brig's cgroup parent's (runs are the OOM killer's first
// victims): the reason is memory all the same (API.md: an OOM kill anywhere in
// the run), but the message must not send the harness to raise memory_mib
// (the cgroup v2 probe of 2026-12-06).
func memoryMessage(spec Spec, usage cgroup.Usage) string {
	if shortElsewhere(usage) {
		return fmt.Sprintf("the kernel's OOM killer killed a process of the run while the run was under its memory limit of %d MiB (its peak %d MiB): memory was short outside the run, on the host or under a limit on brig's cgroup parent, and the whole run was stopped; a larger memory_mib would not help, and the run may succeed when tried again",
			spec.MemoryBytes>>20, usage.PeakMemoryBytes>>20)
	}
	return fmt.Sprintf("the run went over its memory limit of %d MiB: the kernel's OOM killer acted on its processes, and the whole run was stopped",
		spec.MemoryBytes>>20)
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// hungUp reports whether the pipe whose read end is f has no writer left.
func hungUp(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	hup := false
	rc.Control(func(fd uintptr) {
		p := []unix.PollFd{{Fd: int32(fd)}}
		if n, err := unix.Poll(p, 0); err == nil && n == 1 {
			hup = p[0].Revents&unix.POLLHUP != 0
		}
	})
	return hup
}
