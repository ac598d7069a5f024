package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"golang.org/x/sync/semaphore"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/egress"
	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/packages"
	"github.com/brig-sandbox/brig/rootfs"
)

// Launcher runs one sandbox; *jail.Launcher is the one brig uses.
type Launcher interface {
	Run(ctx context.Context, spec jail.Spec) (*jail.Result, error)
}

// HostInfo is what GET /v1/health reports of the host besides the service's own
// state.
type HostInfo struct {
	// Languages maps each language to its interpreter's version.
	Languages map[string]string
	// CgroupMode is the cgroup layout runs are limited through.
	CgroupMode string
	// Rootfs names the root filesystems runs get (host, built or host+built).
	Rootfs string
}

// Log field names of the canonical lines.
const (
	logID       = "id"
	logLanguage = "language"
	logOutcome  = "outcome"
	logReason   = "reason"
	logExitCode = "exit_code"
	logPeerUID  = "peer_uid"
	logNetwork  = "network"
	logQueued   = "queued_ms"
	logStart    = "start_ms"
	logTotal    = "total_ms"
	logWall     = "wall_ms"
	logCPU      = "cpu_ms"
	logPeak     = "peak_memory_bytes"
	logMethod   = "method"
	logPath     = "path"
	logStatus   = "status"
	logDuration = "duration_ms"
	logErrCode  = "error_code"
)

// pruneEvery is how often expired results leave the journal.
const pruneEvery = time.Minute

// Service is brig's run API. Make one with New, serve it with Serve and stop it
// with Shutdown.
type Service struct {
	cfg      Config
	host     HostInfo
	launcher Launcher
	journal  *journal
	adm      *admission
	metrics  *metrics
	log      *slog.Logger
	server   *http.Server
	// bodies is the room of the request bodies being read (readBody).
	bodies *semaphore.Weighted
	// replies is the room of the large answers being written (respond).
	replies replyBudget
	// runsWG counts run goroutines; Shutdown waits for them.
	runsWG sync.WaitGroup
	// stopPrune ends the pruning goroutine; pruned is closed when it has.
	stopPrune chan struct{}
	pruned    chan struct{}

	mu sync.Mutex
	// runs holds the runs not finished, and finished ones until their result is
	// in the journal, by id and owner. Guarded by mu.
	runs map[runKey]*run
	// draining is set by Shutdown: no new run is accepted. Guarded by mu.
	draining bool
}

// New opens the journal in cfg.StateDir, finishes the runs that were in flight
// when the service last stopped, and returns a Service ready to Serve.
func New(cfg Config, host HostInfo, l Launcher) (_ *Service, retErr error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	j, err := openJournal(cfg.StateDir, cfg.StateLock)
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			j.close()
		}
	}()
	if host.Languages == nil {
		host.Languages = map[string]string{}
	}
	s := &Service{
		cfg:       cfg,
		host:      host,
		launcher:  l,
		journal:   j,
		adm:       newAdmission(cfg.MaxConcurrent, cfg.MemoryBudgetMiB, cfg.QueueSize, cfg.QueueTotal),
		log:       cfg.Logger,
		bodies:    semaphore.NewWeighted(bodyMemory),
		runs:      map[runKey]*run{},
		stopPrune: make(chan struct{}),
		pruned:    make(chan struct{}),
	}
	if j.wasEmpty {
		s.log.Warn("the journal's file was empty: a new journal was made in it; if it held results (a file truncated by hand, a restore gone wrong), they are lost, and a retry of their ids runs their programs again", "journal", filepath.Join(cfg.StateDir, journalFile))
	}
	if j.skipped > 0 {
		s.log.Warn("lines of the journal's pending file could not be read and were skipped: a torn last line is what a crash of the service leaves; more mean the file was damaged, and the results they held are lost", "lines", j.skipped, "file", filepath.Join(cfg.StateDir, pendingFile))
	}
	// What a zero resolved to, which the operator otherwise can't see.
	s.log.Info("admission", "max_concurrent", cfg.MaxConcurrent, "memory_budget_mib", cfg.MemoryBudgetMiB, "queue_size", cfg.QueueSize, "queue_total", cfg.QueueTotal)
	WarnMemoryBudget(s.log, cfg.MemoryBudgetMiB)
	if !s.allowed(peer{ok: true, uid: 0, gid: 0}) {
		// Deliberate where only harnesses may run code; a surprise where the
		// operator meant to add a harness and still use brig run as root.
		s.log.Warn("root may not use the API", "why", "uid 0 and gid 0 are not in allow_uids or allow_gids",
			"hint", "brig run, curl, the Kubernetes probes and metrics bridge as root get 403; add 0 to allow_uids to let root in")
	}
	s.metrics = newMetrics(s.adm, cfg.Version)
	if cfg.Packages.Cache != nil {
		s.metrics.registerPackageCache(cfg.Packages.Cache)
	}
	if c, ok := l.(interface{ CopiesStats() jail.CopiesStats }); ok {
		s.metrics.registerCopies(c.CopiesStats)
	}
	if d, ok := l.(interface{ DeathStats() jail.DeathStats }); ok {
		s.metrics.registerDeaths(d.DeathStats)
	}
	keys, err := j.recover(interruptedResult, time.Now())
	if err != nil {
		return nil, fmt.Errorf("finishing the runs interrupted by the last stop: %w", err)
	}
	for _, k := range keys {
		s.log.Warn("run interrupted by the service's last stop, finished as stopped", logID, k.id, logPeerUID, k.uid)
		// Counted as the runs this service finishes are (it finished this
		// one), but not in the histograms of times: its total_ms holds the
		// service's downtime (the lifecycle probe's 43 s run).
		if rec, err := j.get(k); err == nil && rec.Result != nil {
			s.metrics.countRun(rec.Result)
		}
	}
	if _, err := j.prune(time.Now().Add(-cfg.Retention)); err != nil {
		return nil, fmt.Errorf("pruning the journal: %w", err)
	}
	if before, after, err := j.compactIfSparse(filepath.Join(cfg.StateDir, journalFile)); err != nil {
		s.log.Warn("compacting the journal; it is used as it is", "err", err)
	} else if after < before {
		s.log.Info("journal compacted", "bytes_before", before, "bytes_after", after)
	}
	if err := j.watch(filepath.Join(cfg.StateDir, journalFile)); err != nil {
		return nil, fmt.Errorf("the journal: %w", err)
	}
	s.server = &http.Server{
		Handler:           s.routes(),
		ConnContext:       s.withPeer,
		ReadHeaderTimeout: 10 * time.Second,
		// A request body is at most 4 MiB. (net/http clears the read deadline
		// once the handler runs, so a long run's stream is not cut.) Streams are
		// written for as long as a run lasts, so there is no write timeout:
		// each write has its own.
		ReadTimeout: bodyReadTimeout,
		IdleTimeout: 2 * time.Minute,
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	go s.pruneLoop()
	return s, nil
}

// interruptedResult is the result of a run that was in flight when the service
// stopped without finishing it (a crash, a kill): stopped, with the outcome its
// network mode implies. Its processes died with the service (each sandbox's
// init has a parent-death signal) and its cgroup is swept when the jail starts.
// Its total_ms runs to this start, the service's downtime included (the
// journal keeps no later time of the run's), and its connections are not
// known: the message says so of a networked run, whose list reads empty.
func interruptedResult(id string, rec *record) *api.Result {
	msg := "the service stopped (it was restarted or crashed) before the run finished: whatever of it had started was killed, and its output was lost"
	if rec.Network != api.NetworkNone {
		msg += ", and so was the list of its connections (network.connections is empty, but it may have made some)"
	}
	res := failedResult(id, api.Request{Language: rec.Language, Network: &api.Network{Mode: rec.Network}, Packages: rec.Packages}, api.ReasonStopped, msg)
	res.Timing.TotalMS = api.Millis(time.Since(rec.AcceptedAt))
	return res
}

// failedResult is the result of a run that ended for reason before its
// program ran (in the queue, while its packages were prepared, or because its
// sandbox could not start), with the outcome API.md gives the reason and the
// run's network mode: a networked run that was stopped is unknown, whether
// or not its program had started, as Retries says of a run the service's end
// cut short ("the outcome its network mode implies"). Until 2026-12-06 one
// stopped before its start read failed, since nothing of it ran; the contract
// audit read API.md's letter, which a crash's recovery already followed (the
// journal does not record a start), and the two now agree.
func failedResult(id string, req api.Request, reason api.Reason, message string) *api.Result {
	res := pendingResult(id, req)
	res.State = api.StateFinished
	res.Status = api.StatusFailed
	res.Reason = reason
	res.Outcome = api.OutcomeOf(reason, res.Network.Mode)
	res.Message = message
	return res
}

// Serve answers the API on ln until Shutdown; it returns http.ErrServerClosed
// then.
// runsWord is n runs, in words: "1 run", "3 runs".
func runsWord(n int) string {
	if n == 1 {
		return "1 run"
	}
	return fmt.Sprintf("%d runs", n)
}

func (s *Service) Serve(ln net.Listener) error {
	return s.server.Serve(newConnLimiter(ln, s.log))
}

// Metrics gives the service's metrics registry's handler (also at /metrics).
func (s *Service) Metrics() http.Handler { return s.metrics.handler() }

// Shutdown stops accepting runs, lets those accepted finish within the
// configured grace (or until ctx ends), stops the rest (reason stopped), waits
// until every result is in the journal, and closes the server and the journal.
// Failing reports whether the service's journal is lost, which only a
// restart mends (its health says "failing"), for a watchdog of its own
// process: one that asks over the socket gets 403 where root is not allowed
// (the review of 2026-12-06).
func (s *Service) Failing() bool { return s.journal.lostErr() != nil }

func (s *Service) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()

	finished := make(chan struct{})
	go func() { s.runsWG.Wait(); close(finished) }()
	grace := time.NewTimer(s.cfg.Grace)
	defer grace.Stop()
	why := "the grace period ended"
	select {
	case <-finished:
	case <-grace.C:
	case <-ctx.Done():
		why = "shutdown was hurried (a second signal)"
	}
	s.mu.Lock()
	left := 0
	for _, r := range s.runs {
		if r.unwritten == nil { // not finished (a finished one is only unwritten)
			left++
			r.stop(errShutdown)
		}
	}
	s.mu.Unlock()
	if left > 0 {
		s.log.Warn("stopping the runs that have not finished: "+why, "runs", left, "grace", max(s.cfg.Grace, 0).String())
	}
	<-finished
	// A result answered but not yet in the journal is tried once more: one
	// that the pending file does not hold either is lost here and reads as
	// stopped after the restart, against what its client was told, so the
	// stop says so and fails.
	var unwritten error
	if ids := s.commitUnwritten(); len(ids) > 0 {
		s.log.Error("results answered but not in the journal: after a restart these runs read as stopped, or, where the pending file kept their status, lose their output; free the state directory's disk before the next stop", "runs", len(ids), "ids", ids)
		unwritten = fmt.Errorf("%d answered results could not be written to the journal (%s)", len(ids), strings.Join(ids, ", "))
	}

	// Every stream has its result event by now; give the handlers a moment to
	// write it (no more once the stop is hurried), then close whatever is
	// left. A client still sending its request, or reading an answer slowly,
	// loses its connection, as it would to any server's stop: that is no
	// failure of the stop's own work, and the exit status does not count it
	// (the lifecycle probe of 2026-12-06 saw a routine stop exit 1 for one
	// half-sent POST).
	closeCtx, cancel := context.WithTimeout(ctx, connsCloseWait)
	defer cancel()
	waitFrom := time.Now()
	if err := s.server.Shutdown(closeCtx); err != nil {
		s.server.Close()
		// What it waited, not connsCloseWait: a hurried stop waits less
		// (the race probe of 2026-12-06 read "5s" of a 0.66 s stop).
		s.log.Warn("closed the API connections still open at the stop: clients sending a request or reading an answer", "waited", time.Since(waitFrom).Round(time.Millisecond).String(), "err", err)
	}
	close(s.stopPrune)
	<-s.pruned
	// A journal lost under the service kept none of its results since: the
	// stop says so and fails.
	return errors.Join(unwritten, s.journal.lostErr(), s.journal.close())
}

// connsCloseWait is how long a stop waits for the API's connections to end
// once every run has its result (a variable for the test).
var connsCloseWait = 5 * time.Second

// finishRecord commits a run's result (journal.finish); a failure of the
// pending file's compaction alone, after the commit, is logged, not
// returned: the record is safe, and the next commit or prune compacts again.
func (s *Service) finishRecord(id string, k runKey, rec *record) error {
	err := s.journal.finish(k, rec)
	var ce *compactError
	if errors.As(err, &ce) {
		s.log.Error("recording a result in the journal: the record is committed, the pending file could not be compacted; the next commit or prune tries again", logID, id, "err", ce.err)
		return nil
	}
	return err
}

// uncommitted counts the answered results the journal has not taken yet.
// Called with s.mu held.
func (s *Service) uncommitted() int {
	n := 0
	for _, r := range s.runs {
		if r.unwritten != nil {
			n++
		}
	}
	return n
}

// unwrittenRetry is how often the results the journal could not commit are
// tried again.
const unwrittenRetry = time.Second

// commitUnwritten tries again to commit the answered results the journal could
// not (a full or read-only state directory, which an operator may have fixed
// since), and returns the ids of those it still could not and that the
// pending file does not hold either (a restart recovers what it holds),
// sorted.
func (s *Service) commitUnwritten() []string {
	type entry struct {
		r       *run
		rec     *record
		pending bool
	}
	var todo []entry
	s.mu.Lock()
	for _, r := range s.runs {
		if r.unwritten != nil {
			todo = append(todo, entry{r, r.unwritten, r.inPending})
		}
	}
	s.mu.Unlock()
	var lost []string
	for _, e := range todo {
		if err := s.finishRecord(e.r.id, e.r.runKey(), e.rec); err != nil {
			if !e.pending {
				lost = append(lost, e.r.id)
			}
			continue
		}
		s.mu.Lock()
		delete(s.runs, e.r.runKey())
		s.mu.Unlock()
		s.log.Info("recorded a result the journal could not take before", logID, e.r.id)
	}
	slices.Sort(lost)
	return lost
}

func (s *Service) pruneLoop() {
	defer close(s.pruned)
	t := time.NewTicker(pruneEvery)
	defer t.Stop()
	retry := time.NewTicker(unwrittenRetry)
	defer retry.Stop()
	for {
		select {
		case <-s.stopPrune:
			return
		case <-retry.C:
			s.commitUnwritten()
			if err := s.journal.checkFiles(); err != nil {
				s.log.Error("the journal is lost: refusing new runs (503)", "state_dir", s.cfg.StateDir, "err", err)
			}
		case <-t.C:
			if n, err := s.journal.prune(time.Now().Add(-s.cfg.Retention)); err != nil {
				s.log.Error("pruning the journal", "err", err)
			} else if n > 0 {
				s.log.Debug("pruned expired results", "count", n)
			}
			if err := s.journal.compactPending(); err != nil {
				s.log.Error("compacting the journal's pending file", "err", err)
			}
		}
	}
}

// submit accepts a validated request from a peer of uid peerUID: the existing
// run for a retry of an id, 409 for an id reused with another request, 429 when
// the queue is full, 503 when shutting down; otherwise a new run, journaled and
// started. An id is scoped to the peer's uid (API.md, Retries): the same id
// from another uid is another run, never a conflict.
func (s *Service) submit(req api.Request, peerUID int) (*run, *record, error) {
	key := requestKey(req)
	id := req.ID
	s.mu.Lock()
	// A retry of an existing run gets it, shutting down or not; only a new run
	// is refused then.
	if id != "" {
		rk := runKey{uid: peerUID, id: id}
		if r, ok := s.runs[rk]; ok {
			s.mu.Unlock()
			if err := r.refused(); err != nil {
				return nil, nil, err // a retry of it now may be taken
			}
			if r.key != key {
				return nil, nil, conflict(id)
			}
			return r, nil, nil
		}
		// The key first, so that a reused id is a 409 without the room
		// of an answer it will not get.
		recKey, err := s.journal.requestKey(rk)
		if err != nil && !errors.Is(err, errNoRecord) {
			err = fmt.Errorf("reading the journal: %w", err)
		}
		var rec *record
		// (The legacy key is a record journaled by an earlier brig's.)
		if err == nil && (recKey == key || recKey == legacyRequestKey(req)) {
			rec, err = s.readRecord(rk, peerUID)
			if err == nil && rec.Key != recKey { // a record the key's read misjudged
				rec.release()
				rec = nil
			}
		}
		switch {
		case err == nil && rec == nil:
			s.mu.Unlock()
			return nil, nil, conflict(id)
		case err == nil:
			s.mu.Unlock()
			return nil, rec, nil
		case !errors.Is(err, errNoRecord):
			s.mu.Unlock()
			return nil, nil, err
		}
	} else {
		id = NewID()
	}
	// After the retry's lookup: a run accepted before a restart that took its
	// network mode or its packages away is still the same run, answered as
	// such, not refused as a request to rewrite (which would run it twice).
	if err := s.available(req); err != nil {
		s.mu.Unlock()
		return nil, nil, err
	}
	if s.draining {
		// No Retry-After: whether and when the service is back is its
		// operator's, and the clients raise a 503 without one at once
		// (with one, they waited and then found no socket: the harness
		// probe of 2026-12-05).
		s.mu.Unlock()
		return nil, nil, newError(api.ErrorUnavailable, "the service is shutting down and accepts no new runs; retry once it is back (GET /v1/health answers \"ok\")")
	}
	if n := s.uncommitted(); n > 0 {
		// The journal could not commit a result (a full or read-only state
		// directory): no more runs are taken until it does (commitUnwritten,
		// each second). A networked run's accept is refused then anyway; an
		// offline run's small line could still fit in the pending file where
		// its result would not, and its answer, from memory alone, would be
		// lost to a crash (the lifecycle probe of 2026-12-06).
		s.mu.Unlock()
		e := newError(api.ErrorUnavailable, "the service could not record every answered result in its journal (%d held in memory until it can), and takes no new runs until then: retry after the Retry-After seconds, and if this goes on tell the operator: the service's state directory may be full or read-only", n)
		e.retryAfter = journalRetryAfter
		return nil, nil, e
	}
	// How long it may hold a slot: its program's limit, and for a run with
	// packages their install too, which may keep the slot (suspend refused).
	limit := time.Duration(*req.TimeoutSeconds) * time.Second
	if len(req.Packages) > 0 {
		limit += s.cfg.Packages.InstallTimeout
	}
	t, full := s.adm.enter(peerUID, s.cfg.Packages.admittedMiB(req), limit)
	if t == nil {
		s.mu.Unlock()
		running, queued := s.adm.counts()
		var msg string
		switch {
		case s.cfg.QueueSize == 0 || s.cfg.QueueTotal == 0:
			msg = "it keeps no queue" // each run needs a free slot
		case full == queueFullForUID:
			msg = fmt.Sprintf("%d runs of your uid wait in its queue, the most one uid may have waiting (queue_size)", s.cfg.QueueSize)
		default:
			msg = fmt.Sprintf("its queue of %s is full", runsWord(queued))
		}
		e := newError(api.ErrorQueueFull, "the service is running %s and %s; retry after the Retry-After seconds", runsWord(running), msg)
		who := -1
		if full == queueFullForUID {
			who = peerUID
		}
		e.retryAfter = spread(s.adm.retryAfter(who))
		return nil, nil, e
	}
	req.ID = id
	r := newRun(id, key, req, peerUID, time.Now())
	s.runs[r.runKey()] = r
	// Counted under mu, with draining unset: a Shutdown that starts now waits
	// for this run and gives it its grace.
	s.runsWG.Add(1)
	s.mu.Unlock()

	// A run that can reach outside starts once its record is on disk; one that
	// can't starts at once (journal's doc).
	rec := &record{Key: key, Language: req.Language, Network: req.Network.Mode, Packages: req.Packages, PeerUID: peerUID, AcceptedAt: r.accepted}
	var err error
	if req.Network.Mode == api.NetworkNone {
		r.acceptCommit, err = s.journal.acceptSoon(r.runKey(), rec)
	} else {
		err = s.journal.accept(r.runKey(), rec)
	}
	if err != nil {
		// Not a defect of the request's nor of brig's: the state directory
		// is full or unwritable, which may pass. The run is not started
		// unrecorded, which would lose it to a restart.
		e := newError(api.ErrorUnavailable, "the service could not record the run in its journal (%v), so the program did not run; retry after the Retry-After seconds, and if this goes on tell the operator: the service's state directory may be full or read-only", err)
		e.retryAfter = journalRetryAfter
		if s.journal.lostErr() != nil {
			// No retry helps until the service is restarted: no
			// Retry-After, as for a stop (the crash probe of 2026-12-06);
			// and not the journal's host path, which is the log's.
			e = newError(api.ErrorUnavailable, "%s; the program did not run. Send it to another brig, or send it again once this one has been restarted", lostAnswer)
		}
		e.runID = id
		r.recordedAs(e)
		s.mu.Lock()
		delete(s.runs, r.runKey())
		s.mu.Unlock()
		s.adm.cancel(t)
		s.runsWG.Done()
		s.metrics.journalFailures.WithLabelValues(journalWriteAccept).Inc()
		s.log.Error("recording an accepted run in the journal: the run is refused", logID, id, "err", err)
		return nil, nil, e
	}
	r.recordedAs(nil)
	// Its wait in the queue counts from here: the journal's write, an fsync
	// for a networked run, is not waiting for a slot.
	r.enqueued = time.Now()
	go s.execute(r, t)
	return r, nil, nil
}

// spread is a Retry-After of n seconds, spread over n to 2n: the clients
// refused at one moment were all told the same, and came back together, when
// one place was free (the soak's bursts: 39 of 138 clients that honoured it
// were still refused at their fifth attempt).
func spread(n int) int {
	return n + rand.IntN(n+1)
}

// journalRetryAfter is the Retry-After, in seconds, of a run refused because
// the journal could not record it.
const journalRetryAfter = 5

// NewID is a run id for a request that gives none: a ULID, so that ids sort
// by the time they were made.
func NewID() string { return ulid.Make().String() }

// conflict names the field at fault, id, as an invalid request's error does.
func conflict(id string) error {
	// Read after its field, as invalid's messages are: "id \"x\" belongs to...".
	e := newError(api.ErrorConflict, "%q belongs to a run with a different request; send the same request to get that run, or use a new id", id)
	e.body.Field = "id"
	return e
}

// available refuses what this host can't give, rather than run with less than
// was asked.
func (s *Service) available(req api.Request) error {
	if !slices.Contains(s.cfg.NetworkModes, req.Network.Mode) {
		return invalid("network.mode", "%q is not available on this host; the modes it offers are %v (GET /v1/health lists them): use one of those", req.Network.Mode, s.cfg.NetworkModes)
	}
	if len(req.Packages) > 0 && !slices.Contains(s.cfg.Packages.languages(), req.Language) {
		return invalid("packages", "this host installs no %s packages (GET /v1/health lists package_languages): leave packages out and use only the language's standard library", req.Language)
	}
	return nil
}

// prepareHoldsSlot is how long a run prepares its packages in its slot before
// it gives the slot back for the rest of the preparation: a layer the cache
// holds is ready in milliseconds, and its run keeps its slot; an install
// (seconds, or a registry that hangs until install_timeout) does not keep
// runs without packages waiting.
const prepareHoldsSlot = 200 * time.Millisecond

// prepareOffSlot prepares r's packages, past prepareHoldsSlot without the slot
// of t (admission.suspend), which it takes back before the program runs. On a
// failure, or a stop while it waits for its slot again, t holds nothing and
// the run's result is returned.
func (s *Service) prepareOffSlot(r *run, t *ticket) (*packages.Lease, *api.Result) {
	var mu sync.Mutex
	done, suspended := false, false
	timer := time.AfterFunc(prepareHoldsSlot, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			suspended = s.adm.suspend(t)
		}
	})
	lease, res := s.preparePackages(r)
	timer.Stop()
	mu.Lock()
	done = true
	mu.Unlock()
	if res != nil {
		s.adm.cancel(t) // whether it holds its slot or not
		return nil, res
	}
	r.setPackages(packageResults(r.req, lease))
	if suspended {
		// Its packages prepared, it waits for a slot, its state still
		// preparing: a state never goes back (queued, preparing, running).
		if err := s.adm.resume(r.ctx, t); err != nil {
			res := failedResult(r.id, r.req, api.ReasonStopped, "the run was stopped while it waited for a slot, its packages prepared; the program did not run")
			// They were: how long they took, and what they resolved to.
			res.Timing.PrepareMS = r.prepared.Milliseconds()
			res.Packages = packageResults(r.req, lease)
			lease.Release()
			return nil, res
		}
	}
	return lease, nil
}

// execute is a run's life after it was accepted: wait for a slot, run the
// sandbox, record the result.
func (s *Service) execute(r *run, t *ticket) {
	defer s.runsWG.Done()
	if err := s.adm.wait(r.ctx, t); err != nil {
		res := failedResult(r.id, r.req, api.ReasonStopped, "the run was stopped while it waited in the queue; the program did not run")
		res.Timing.QueuedMS, res.Timing.TotalMS = time.Since(r.enqueued).Milliseconds(), api.Millis(time.Since(r.accepted))
		s.finish(r, res)
		return
	}
	queued := time.Since(r.enqueued)
	r.setTiming(func(t *api.Timing) { t.QueuedMS = queued.Milliseconds() })
	var lease *packages.Lease
	if len(r.req.Packages) > 0 {
		var res *api.Result
		lease, res = s.prepareOffSlot(r, t)
		if res != nil {
			res.Timing.QueuedMS = queued.Milliseconds()
			res.Timing.TotalMS = api.Millis(time.Since(r.accepted))
			s.finish(r, res)
			return
		}
		defer lease.Release()
	}
	r.setState(api.StateRunning)
	spec := jail.Spec{
		Language:    rootfs.Language(r.req.Language),
		Code:        r.req.Code,
		Timeout:     time.Duration(*r.req.TimeoutSeconds) * time.Second,
		MemoryBytes: int64(*r.req.MemoryMiB) << 20,
		Env:         r.req.Env,
		OnStart:     r.onStart,
		OnStdout:    r.onOutput(api.EventStdout),
		OnStderr:    r.onOutput(api.EventStderr),
		OnStdoutCut: r.onCut(api.EventStdout),
		OnStderrCut: r.onCut(api.EventStderr),
	}
	if lease != nil {
		layerSpec(&spec, r.req.Language, lease)
	}
	// A networked run's DNS server and proxies are bound in its sandbox's
	// network namespace once the sandbox exists (a pooled one too), and closed
	// once the jail has killed every process of the run.
	var er *egress.Run
	if r.req.Network.Mode != api.NetworkNone {
		pol := s.cfg.egressPolicy(r.req)
		// The run's own copy, so that each decision's log line names the run.
		ecfg := s.cfg.Egress
		ecfg.Logger = s.log.With(logID, r.id)
		spec.Attach = func(pid int) (map[string]string, error) {
			var err error
			if er, err = egress.Start(&ecfg, pol, pid, r.onEgress); err != nil {
				return nil, err
			}
			r.setEgress(er)
			env := egress.Env()
			if r.req.Network.Mode == api.NetworkRegistries {
				maps.Copy(env, registryEnv(r.req.Language, s.cfg.RegistryIndexes[r.req.Language]))
			}
			return env, nil
		}
	}
	launched := time.Now()
	jr, err := s.launcher.Run(r.ctx, spec)
	var conns []egress.Connection
	var omitted egress.Omitted
	if er != nil {
		conns = er.Close()
		omitted = er.Omitted()
	}
	s.adm.leave(t)
	var res *api.Result
	if err != nil {
		res = failedResult(r.id, r.req, api.ReasonInternal, fmt.Sprintf("the sandbox could not be started: %v", err))
	} else {
		res = ResultOf(r.id, r.req, jr)
		s.metrics.starts.WithLabelValues(r.req.Language, jr.Start).Inc()
		r.startPath, r.cgroup = jr.Start, jr.Cgroup
	}
	res.Network.Connections, res.Network.Omitted = s.recordEgress(r.req.Network.Mode, conns, omitted)
	res.Packages = packageResults(r.req, lease)
	// The jail counts from its own call; the API counts from the request.
	res.Timing.QueuedMS = queued.Milliseconds()
	res.Timing.PrepareMS = r.prepared.Milliseconds()
	// From the request, as the snapshot's since onStart: the queue, the
	// packages and a wait for the slot after them (which a sum of the
	// first two left out, the outcomes audit's 4.5 s), the journal's write.
	r.mu.Lock()
	started, startedAt := r.started, r.startedAt
	r.mu.Unlock()
	if started {
		res.Timing.StartMS = startedAt.Sub(r.accepted).Milliseconds()
	} else if res.Timing.StartMS > 0 {
		res.Timing.StartMS += launched.Sub(r.accepted).Milliseconds()
	}
	res.Timing.TotalMS = api.Millis(time.Since(r.accepted))
	s.finish(r, res)
}

// finish ends a run: the journal's pending file keeps its result, then its
// stream gets it, and it leaves memory once the journal has committed it.
func (s *Service) finish(r *run, res *api.Result) {
	if cause := r.stopCause(); res.Reason == api.ReasonStopped && cause != nil {
		res.Message = stoppedMessage(res.Message, cause)
	}
	r.mu.Lock()
	started := r.started
	r.mu.Unlock()
	// Counted before anyone sees the result, so that a scrape after a response
	// always includes its run.
	s.metrics.observe(res, started)
	rec := &record{
		Key: r.key, Language: r.req.Language, Network: r.req.Network.Mode, PeerUID: r.peerUID,
		AcceptedAt: r.accepted, Started: started, FinishedAt: time.Now(), Result: res,
	}
	// Kept before anyone sees the result, so that an answered result survives
	// a crash of the service; then committed. When the pending file can't
	// take it (a full disk), the answer waits for the commit, which may still
	// succeed (bbolt's free pages), so as not to answer what a crash would
	// turn into another result; failing both, it is answered from memory.
	pendingErr := s.journal.answered(r.runKey(), rec)
	if pendingErr != nil {
		s.metrics.journalFailures.WithLabelValues(journalWritePending).Inc()
		s.log.Error("recording a result in the journal's pending file: answering it once committed", logID, r.id, "err", pendingErr)
	} else {
		r.finish(res)
	}
	if c := r.acceptCommit; c != nil {
		<-c.done // the record it accepted is overwritten, not the other way round
		if c.err != nil {
			s.log.Error("recording an accepted run in the journal", logID, r.id, "err", c.err)
		}
	}
	err := s.finishRecord(r.id, r.runKey(), rec)
	if pendingErr != nil {
		if err != nil {
			s.keepStatus(r, rec)
		}
		r.finish(res)
	}
	s.mu.Lock()
	if err != nil {
		// The run stays in memory, answered from there, and its record is
		// tried again (commitUnwritten) until the journal takes it.
		r.unwritten, r.inPending = rec, pendingErr == nil
	} else {
		delete(s.runs, r.runKey())
	}
	s.mu.Unlock()
	if err != nil {
		s.metrics.journalFailures.WithLabelValues(journalWriteCommit).Inc()
		s.log.Error("recording a result in the journal: it is kept in memory and tried again every second; until then a restart would lose it", logID, r.id, "err", err)
	}
	var exit any // null in the log, as in the Result, when the program has none
	if res.ExitCode != nil {
		exit = *res.ExitCode
	}
	attrs := []any{logID, r.id, logLanguage, res.Language, logOutcome, res.Outcome, logReason, res.Reason,
		logExitCode, exit, "signal", res.Signal, logNetwork, res.Network.Mode, logPeerUID, r.peerUID, "start_path", r.startPath, "cgroup", r.cgroup,
		logQueued, res.Timing.QueuedMS, logStart, res.Timing.StartMS, logTotal, res.Timing.TotalMS,
		logWall, res.Usage.WallMS, logCPU, res.Usage.CPUMS, logPeak, res.Usage.PeakMemoryBytes}
	level := slog.LevelInfo
	if res.Reason == api.ReasonInternal {
		// brig's own failure, not the program's: the operator's to mend, so
		// the line says it (the operator probe of 2026-12-06 found only
		// the pool's errors, without the run). Other reasons' messages are
		// about the program, and stay out of the log with its output.
		level = slog.LevelWarn
		attrs = append(attrs, "message", redactUserinfo(res.Message))
	}
	s.log.Log(context.Background(), level, "run finished", attrs...)
}

// keepStatus appends to the pending file the result of rec, which neither its
// line nor the journal could take (a full disk), without its output and its
// connections: a line of about an accept's size, which the disk may still
// take where it took the run's accept. A crash before the whole record is
// committed then recovers the answered status, where it read "stopped" (the
// crash probe of 2026-12-06: an answered success came back stopped and
// failed). The whole record's commit marks that line saved.
func (s *Service) keepStatus(r *run, rec *record) {
	res := *rec.Result
	res.Stdout, res.Stderr, res.Network.Connections = "", "", []api.Connection{}
	note := "the service answered this result whole, then lost its output to a full state directory and a restart before it could record it; its status, exit code and usage are the run's own"
	res.Message = strings.TrimPrefix(res.Message+"; "+note, "; ")
	short := *rec // its encoding and line are the whole record's: made anew
	short.Result, short.Partial, short.enc, short.line, short.room = &res, true, nil, 0, nil
	if err := s.journal.answered(r.runKey(), &short); err != nil {
		s.log.Error("recording a result's status in the journal's pending file: a restart before the result is committed reads the run as stopped", logID, r.id, "err", err)
		return
	}
	rec.line = short.line
}

// ownerParam is the query parameter with which root and the admin group name
// the uid whose run they mean, when several uids used one client-chosen id.
const ownerParam = "uid"

// lookup finds the run id that peer p may see, in memory or in the journal. A
// peer sees the runs of its own uid; root and the admin group see every run.
// Another uid's run is answered exactly as an unknown id (404, never 403), so
// that a peer learns nothing of other uids' ids.
//
// Which uid's run an id names: owner (the ?uid= parameter) when given; else the
// peer's own run; else, for root and the admin group only, the one run of that
// id whatever its uid, and 409 when several uids have one (the message lists
// them, to be named with ?uid=).
func (s *Service) lookup(p peer, id string, owner *int) (*run, *record, error) {
	notFound := newError(api.ErrorNotFound, "no run has the id %q (results are kept for %s)", id, s.cfg.Retention)
	if id == "" || validateID(id) != nil {
		// No run has it; and an id with a "/" (written %2F in the path) must
		// never reach the journal, whose keys are "id/uid".
		return nil, nil, notFound
	}
	admin := s.admin(p)
	uid := p.uid
	if owner != nil {
		if *owner != p.uid && !admin {
			return nil, nil, notFound
		}
		uid = *owner
	}
	r, rec, err := s.find(runKey{uid: uid, id: id}, p.uid)
	if !errors.Is(err, errNoRecord) {
		return r, rec, err
	}
	if owner != nil || !admin {
		return nil, nil, notFound
	}
	uids, err := s.owners(id)
	if err != nil {
		return nil, nil, err
	}
	switch len(uids) {
	case 0:
		return nil, nil, notFound
	case 1:
		r, rec, err := s.find(runKey{uid: uids[0], id: id}, p.uid)
		if errors.Is(err, errNoRecord) { // pruned in between
			return nil, nil, notFound
		}
		return r, rec, err
	}
	e := newError(api.ErrorConflict, "the id %q names runs of the uids %v; add ?%s=UID to say which", id, uids, ownerParam)
	e.body.Field = "id" // as every 409's
	return nil, nil, e
}

// find returns the run of k from memory or its record from the journal
// (readRecord, for an answer to uid), or errNoRecord.
func (s *Service) find(k runKey, uid int) (*run, *record, error) {
	s.mu.Lock()
	r, ok := s.runs[k]
	s.mu.Unlock()
	if ok && r.refused() == nil {
		return r, nil, nil
	}
	if ok { // it never was
		return nil, nil, errNoRecord
	}
	rec, err := s.readRecord(k, uid)
	return nil, rec, err
}

// readRecord reads the record of k from the journal for an answer to uid, or
// returns errNoRecord. The room of its answer (replyBudget) is taken, from the
// length of its JSON, before its decoded copy is made, and rec.release gives
// it back: an answer refused for want of room had first decoded its result
// (the red team's 95 refused requests for a result of 6 MB).
func (s *Service) readRecord(k runKey, uid int) (*record, error) {
	var release func()
	rec, err := s.journal.read(k, func(size int) (err error) {
		release, err = s.replies.take(uid, replyOfJSON(int64(size)))
		return err
	})
	var ae *apiError
	switch {
	case err == nil:
		rec.room = release
		return rec, nil
	case release != nil:
		release() // taken, and the record not decoded
	}
	if errors.Is(err, errNoRecord) || errors.As(err, &ae) {
		return nil, err
	}
	return nil, fmt.Errorf("reading the journal: %w", err)
}

// owners returns the uids that have a run of id, in memory or in the journal,
// ascending.
func (s *Service) owners(id string) ([]int, error) {
	s.mu.Lock()
	var uids []int
	for k := range s.runs {
		if k.id == id {
			uids = append(uids, k.uid)
		}
	}
	s.mu.Unlock()
	inJournal, err := s.journal.owners(id)
	if err != nil {
		return nil, fmt.Errorf("reading the journal: %w", err)
	}
	uids = append(uids, inJournal...)
	slices.Sort(uids)
	return slices.Compact(uids), nil
}
