package supervisor

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/egress"
)

// run is one accepted run while it is queued or executing: its request, its
// events so far (which a stream replays and follows) and, once it ends, its
// result. Appending an event never waits for a reader, so a slow or vanished
// client never holds a run back.
type run struct {
	id       string
	key      string // requestKey of the request
	req      api.Request
	peerUID  int
	accepted time.Time
	// enqueued is when it joined the queue for a slot, once its journal
	// record was written: its queued_ms counts from here.
	enqueued time.Time
	// stop cancels the run's context with why (errDeleted, errShutdown,
	// errClientGone): DELETE, Shutdown after its grace, a client gone before
	// it learnt a generated id.
	ctx  context.Context
	stop context.CancelCauseFunc
	// done is closed once result is set.
	done chan struct{}
	// recorded is closed once the run's journal record is written, or its
	// write failed, which refusal then says. A request that found the run
	// before then waits for it: a run the journal refused never was, and
	// its done would never close (the race probe of 2026-12-06: a retry, a
	// DELETE and a stream of such a run hung, the stream after "accepted").
	recorded chan struct{}
	refusal  error

	mu sync.Mutex
	// state is the run's API state. Guarded by mu.
	state api.State
	// events is every event so far, accepted first and result last. Guarded by mu.
	events []api.Event
	// changed is closed and replaced each time events grows. Guarded by mu.
	changed chan struct{}
	// started is set when the program has started, at startedAt. Guarded by mu.
	started   bool
	startedAt time.Time
	// result is set when the run has finished. Guarded by mu.
	result *api.Result
	// What snapshot shows of a run that goes on besides its output: which
	// streams passed their cap, the run's egress (its connections so far),
	// and its packages once resolved. Guarded by mu.
	stdoutCut, stderrCut bool
	egress               *egress.Run
	packages             []api.PackageResult
	// prepared is how long the run's packages took to prepare (set before the
	// run starts, by the run's own goroutine).
	prepared time.Duration
	// timing is what is known so far of the Result's timing, for snapshot:
	// queued_ms once admitted, prepare_ms once the packages are ready,
	// start_ms once the program has started (counted here to the callback,
	// which comes a little after the interpreter's exec that the final
	// result's start_ms counts to). Guarded by mu.
	timing api.Timing
	// unwritten is the record of the run's answered result while the journal
	// could not commit it (a full or read-only state directory): the run stays
	// in Service.runs, answered from memory, and Service.commitUnwritten
	// tries again; inPending says that the journal's pending file holds it,
	// which a restart recovers. Guarded by Service.mu.
	unwritten *record
	inPending bool
	// acceptCommit is the journal's commit of the accepted run, when it was
	// not committed before the run started (journal.acceptSoon).
	acceptCommit *commit
	// startPath is how the run's interpreter started (jail.Result.Start), for
	// the run's log line; set by the run's own goroutine before finish.
	startPath string
	// cgroup is the path of the run's cgroup (jail.Result.Cgroup), by which
	// the cgroup package's own log lines name it; set as startPath is.
	cgroup string
	// packageEvents counts the package events appended, up to maxPackageEvents.
	// Guarded by mu.
	packageEvents int
	// refusalEvents counts the egress events of refusals appended, up to
	// maxRefusalEvents. Guarded by mu.
	refusalEvents int
	// pending is output of stream pendingKind not yet in an event (onOutput);
	// lastOutput is when the last output event was appended; flushTimer, when
	// set, appends pending once outputWindow has passed since. Guarded by mu.
	pending     strings.Builder
	pendingKind string
	lastOutput  time.Time
	flushTimer  *time.Timer
}

// outputWindow is how often a run's output becomes an event while it keeps
// printing. Output that comes after a quiet window is an event at once (a
// program's first line waits for nothing); what follows within the window is
// one event at its end. Each event costs the service about 130 bytes besides
// its text, and a program that wrote its million characters one at a time made
// a million (the service's memory grew by 65 MB for that one run).
const outputWindow = 10 * time.Millisecond

// maxRefusalEvents bounds a run's egress events of refusals, as the proxies
// bound the refusals they list (and announce): a program that tries names in
// a loop must not grow the supervisor's memory without end. Every allowed
// connection the proxies list is an event (they bound the list by the run's
// connection rate), so that a flood of refusals can't hide a later
// connection that got through.
const maxRefusalEvents = egress.MaxRefusals

func newRun(id, key string, req api.Request, peerUID int, now time.Time) *run {
	ctx, stop := context.WithCancelCause(context.Background())
	return &run{
		id:       id,
		key:      key,
		req:      req,
		peerUID:  peerUID,
		accepted: now,
		enqueued: now,
		ctx:      ctx,
		stop:     stop,
		done:     make(chan struct{}),
		recorded: make(chan struct{}),
		state:    api.StateQueued,
		events:   []api.Event{{Event: api.EventAccepted, ID: id}},
		changed:  make(chan struct{}),
	}
}

// Why a run was stopped (run.stop's causes), for its result's message, so
// that a harness can tell its own DELETE from an operator's restart.
var (
	errDeleted    = errors.New("a DELETE request")
	errShutdown   = errors.New("the service's shutdown")
	errClientGone = errors.New("its client's going away (it had not learnt the run's generated id)")
)

// refused waits for the run's journal record and says whether its write
// failed, with the error the run's request was answered.
func (r *run) refused() error {
	<-r.recorded
	return r.refusal
}

// recordedAs ends the wait of refused: the run's record is written (err nil),
// or its write failed and the run is refused with err.
func (r *run) recordedAs(err error) {
	r.refusal = err
	close(r.recorded)
}

// stopCause is why the run was stopped: one of the errors above, or nil.
func (r *run) stopCause() error {
	switch cause := context.Cause(r.ctx); cause {
	case errDeleted, errShutdown, errClientGone:
		return cause
	}
	return nil
}

// stoppedMessage is a stopped run's message ("the run was stopped ...") with
// who stopped it, and for a shutdown what to do.
func stoppedMessage(msg string, cause error) string {
	msg = strings.Replace(msg, "the run was stopped", "the run was stopped by "+cause.Error(), 1)
	if cause == errShutdown {
		// A retry of this id gets this result (API.md, Retries): what runs
		// the program again is the request under a new id, or none.
		msg += "; send it again once the service is back, " + retryUnderANewID
	}
	return msg
}

// runKey is the run's key: its id within its owner's uid.
func (r *run) runKey() runKey { return runKey{uid: r.peerUID, id: r.id} }

// appendLocked adds ev, after any output pending before it, and wakes every
// follower.
func (r *run) appendLocked(ev api.Event) {
	r.flushLocked()
	r.events = append(r.events, ev)
	close(r.changed)
	r.changed = make(chan struct{})
}

// flushLocked makes the pending output an event.
func (r *run) flushLocked() {
	if r.pending.Len() == 0 {
		return
	}
	r.events = append(r.events, api.Event{Event: r.pendingKind, Data: r.pending.String()})
	r.pending.Reset()
	r.lastOutput = time.Now()
	close(r.changed)
	r.changed = make(chan struct{})
}

// flushLater is flushTimer's: the window has passed, unless output that
// came after it was due (the timer fired late) was an event meanwhile, which
// starts another window.
func (r *run) flushLater() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.result != nil {
		return
	}
	if quiet := time.Since(r.lastOutput); quiet < outputWindow && r.pending.Len() > 0 {
		r.flushTimer = time.AfterFunc(outputWindow-quiet, r.flushLater)
		return
	}
	r.flushTimer = nil
	r.flushLocked()
}

func (r *run) setState(state api.State) {
	r.mu.Lock()
	r.state = state
	r.mu.Unlock()
}

// setTiming changes the timing snapshot reports.
func (r *run) setTiming(f func(*api.Timing)) {
	r.mu.Lock()
	f(&r.timing)
	r.mu.Unlock()
}

// onStart and onOutput are the jail's callbacks. The start is the exec's
// moment, not this call's: under load the service hears of it tens of
// milliseconds later, and start_ms and wall_ms would then add up to more than
// total_ms (the contract probe of 2026-12-06: +108 ms).
func (r *run) onStart(at time.Time) {
	r.mu.Lock()
	r.started = true
	r.startedAt = at
	r.timing.StartMS = r.startedAt.Sub(r.accepted).Milliseconds()
	r.appendLocked(api.Event{Event: api.EventStarted})
	r.mu.Unlock()
}

func (r *run) onOutput(kind string) func(string) {
	return func(s string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.pendingKind != kind {
			r.flushLocked() // the other stream's first: events keep their order
			r.pendingKind = kind
		}
		r.pending.WriteString(s)
		if quiet := time.Since(r.lastOutput); quiet >= outputWindow {
			r.flushLocked()
		} else if r.flushTimer == nil {
			r.flushTimer = time.AfterFunc(outputWindow-quiet, r.flushLater)
		}
	}
}

// onCut is the jail's callback for a stream whose output passed its cap.
func (r *run) onCut(kind string) func() {
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if kind == api.EventStdout {
			r.stdoutCut = true
		} else {
			r.stderrCut = true
		}
	}
}

// setEgress and setPackages give snapshot the run's egress once it has
// started and its packages once they are resolved.
func (r *run) setEgress(er *egress.Run) {
	r.mu.Lock()
	r.egress = er
	r.mu.Unlock()
}

func (r *run) setPackages(p []api.PackageResult) {
	r.mu.Lock()
	r.packages = p
	r.mu.Unlock()
}

// maxPackageEvents bounds a run's package events (an install's progress lines).
const maxPackageEvents = 1000

// onPackage is the package cache's progress callback: each line of the
// install becomes a package event, until the run has started.
func (r *run) onPackage(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started || r.result != nil || r.packageEvents >= maxPackageEvents {
		return
	}
	r.packageEvents++
	r.appendLocked(api.Event{Event: api.EventPackage, Message: line})
}

// onEgress is the egress proxy's callback (egress.Start's onDecision): each
// decision becomes an egress event as it is made. A decision that comes after
// the result, or a refusal past maxRefusalEvents, is not an event: the
// result is the stream's last.
func (r *run) onEgress(c egress.Connection) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.result != nil || (!c.Allowed && r.refusalEvents >= maxRefusalEvents) {
		return
	}
	if !c.Allowed {
		r.refusalEvents++
	}
	allowed := c.Allowed
	r.appendLocked(api.Event{Event: api.EventEgress, Host: c.Host, Port: c.Port, Allowed: &allowed})
}

// finish sets the run's result and ends its stream.
func (r *run) finish(res *api.Result) {
	r.mu.Lock()
	r.result = res
	r.state = api.StateFinished
	if r.flushTimer != nil {
		r.flushTimer.Stop()
		r.flushTimer = nil
	}
	r.appendLocked(api.Event{Event: api.EventResult, Result: res})
	r.mu.Unlock()
	r.stop(nil) // releases the context's resources; the run is over
	close(r.done)
}

// snapshot is the run's Result as of now: its result once finished, otherwise
// its state, the output printed so far and whether it passed its caps, the
// connections attempted so far (with their bytes so far) and the packages
// once resolved.
func (r *run) snapshot() *api.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.result != nil {
		return r.result
	}
	var stdout, stderr strings.Builder
	out := func(kind, data string) {
		switch kind {
		case api.EventStdout:
			stdout.WriteString(data)
		case api.EventStderr:
			stderr.WriteString(data)
		}
	}
	for _, ev := range r.events {
		out(ev.Event, ev.Data)
	}
	out(r.pendingKind, r.pending.String())
	res := pendingResult(r.id, r.req)
	res.State = r.state
	res.Stdout, res.Stderr = stdout.String(), stderr.String()
	res.StdoutTruncated, res.StderrTruncated = r.stdoutCut, r.stderrCut
	if r.packages != nil {
		res.Packages = r.packages
	}
	if r.egress != nil {
		conns, omitted := r.egress.Connections()
		for _, c := range conns {
			res.Network.Connections = append(res.Network.Connections, apiConnection(c))
		}
		var left int
		res.Network.Connections, left = listWithin(res.Network.Connections, api.MaxConnectionsBytes)
		res.Network.Omitted = omitted + left
	}
	res.Timing = r.timing
	res.Timing.TotalMS = api.Millis(time.Since(r.accepted))
	// Its wall clock so far; its CPU and memory are read once it has ended.
	if r.started {
		res.Usage.WallMS = api.Millis(time.Since(r.startedAt))
	}
	return res
}

// pendingResult is the Result of a run that has not finished.
func pendingResult(id string, req api.Request) *api.Result {
	return &api.Result{
		ID:       id,
		Language: api.Language(req.Language),
		State:    api.StateQueued,
		Packages: packageResults(req, nil),
		Network:  api.NetworkReport{Mode: req.Network.Mode, Connections: []api.Connection{}},
	}
}

// follow calls emit with each of the run's events from the first, waiting for
// new ones, until it has emitted the result event (nil) or ctx ends or emit
// fails (their error).
func (r *run) follow(ctx context.Context, emit func(api.Event) error) error {
	next := 0
	for {
		r.mu.Lock()
		batch := r.events[next:]
		changed := r.changed
		r.mu.Unlock()
		for _, ev := range batch {
			if err := emit(ev); err != nil {
				return err
			}
			if ev.Event == api.EventResult {
				return nil
			}
		}
		next += len(batch)
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// replay is the event stream of a finished run known only from the journal: its
// egress decisions, one event per connection of the Result in its order (as
// the live stream carried them: the Result lists no more refusals than
// maxRefusalEvents), and its output in one event per stream
// (the interleaving of these is not kept, nor the install progress).
func replay(rec *record) []api.Event {
	res := rec.Result
	evs := []api.Event{{Event: api.EventAccepted, ID: res.ID}}
	if rec.Started {
		evs = append(evs, api.Event{Event: api.EventStarted})
	}
	conns := res.Network.Connections
	for _, c := range conns {
		allowed := c.Allowed
		evs = append(evs, api.Event{Event: api.EventEgress, Host: c.Host, Port: c.Port, Allowed: &allowed})
	}
	if res.Stdout != "" {
		evs = append(evs, api.Event{Event: api.EventStdout, Data: res.Stdout})
	}
	if res.Stderr != "" {
		evs = append(evs, api.Event{Event: api.EventStderr, Data: res.Stderr})
	}
	return append(evs, api.Event{Event: api.EventResult, Result: res})
}
