package bench

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/client"
	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/rootfs"
)

// Defaults of ServiceConfig, and the project's goals that Print evaluates.
const (
	DefaultServiceConcurrency = 2
	DefaultServiceRuns        = 200
	// serviceWarmupPerClient is how many uncounted runs each client makes before
	// each phase (servicePhase).
	serviceWarmupPerClient = 3
	// minRetryAfter bounds the pause after a 429 whose Retry-After is absent or 0.
	minRetryAfter = 10 * time.Millisecond
	// rssSampleEvery is how often the RSS phase reads /metrics.
	rssSampleEvery = 50 * time.Millisecond
	// rssMetric is the Prometheus gauge of the service's resident memory.
	rssMetric = "process_resident_memory_bytes"

	// goalThroughputPercent: brig's runs/s on the cold path is at least this
	// % of bare's.
	goalThroughputPercent = 70
	// goalP50Overhead: brig's p50 on the cold path is at most bare's p50 plus
	// this.
	goalP50Overhead = 3 * time.Millisecond
	// goalServiceCPU: the service process's own CPU per run, on the default
	// path.
	goalServiceCPU = time.Millisecond
)

// warmGoals are the warm-start goals per language, on the service's default
// path: throughput at least ThroughputPercent of bare's (set at concurrency
// 2), and p50 at most P50Percent of bare's (set at concurrency 1).
var warmGoals = map[rootfs.Language]struct{ ThroughputPercent, P50Percent int }{
	rootfs.Python:     {200, 50},
	rootfs.JavaScript: {120, 100},
}

// ColdEnv is, per language, a variable its interpreter reads at its own
// start: a run that sets it can't use a warm sandbox (jail.WarmEligible), so
// the benchmark's cold phase sets it to measure the cold path through the
// same service. Neither changes what the print programs do.
var ColdEnv = map[rootfs.Language][2]string{
	rootfs.Python:     {"PYTHONNOUSERSITE", "1"},
	rootfs.JavaScript: {"NODE_NO_WARNINGS", "1"},
}

// PrintPrograms are the programs the service benchmark runs: a print, so the
// output path is measured as well as the start.
var PrintPrograms = map[rootfs.Language]string{
	rootfs.Python:     "print(\"hello\")\n",
	rootfs.JavaScript: "console.log(\"hello\")\n",
}

// SleepPrograms hold a run in flight for about a second, for the RSS phase.
var SleepPrograms = map[rootfs.Language]string{
	rootfs.Python:     "import time; time.sleep(1)\n",
	rootfs.JavaScript: "setTimeout(()=>{},1000)\n",
}

// ServiceConfig configures Service.
type ServiceConfig struct {
	// ServicePID, when set, is the service's process, whose own CPU each brig
	// phase reports (see client.ServicePID).
	ServicePID int
	// Concurrency is how many clients run at once in every phase; zero means
	// DefaultServiceConcurrency.
	Concurrency int
	// Duration, when positive, stops starting runs in a phase after this long
	// (runs in flight finish and count).
	Duration time.Duration
	// Runs, when positive, stops a phase after this many runs. With Duration
	// too, whichever comes first; if both are zero, DefaultServiceRuns.
	Runs int
	// Languages to measure; nil means all.
	Languages []rootfs.Language
	// Network is the network mode of the brig runs ("" or "none": none; "any":
	// each run also gets its DNS server and proxies, which the print programs
	// do not use: the figure is what a networked run's start costs).
	Network string
	// Spacing, when positive, is the pause each client makes after each run,
	// in every phase: the runs meet an idle machine (for the service, a full
	// pool), which is the latency a harness sees when it does not keep the
	// service busy. The runs per second then measure the pace, not capacity.
	Spacing time.Duration
	// Rounds, when above 1, splits each phase into this many slices, run in
	// turn (bare, brig, cold, then bare again...), each with its share of
	// Runs or Duration; a phase's figures are its slices' together. The
	// machine's speed drifts within a minute here (a bare loop's rate moved
	// from 170 to 111 runs/s over four phases), and a ratio to bare then
	// compares two different machines; interleaved, both see the same drift.
	Rounds int
	// RSSConcurrency, when positive, adds a phase that holds this many sleeping
	// runs in flight at once (languages alternating) and samples the service's
	// resident memory from GET /metrics every 50 ms; zero skips it.
	RSSConcurrency int
}

func (cfg *ServiceConfig) validate() error {
	switch {
	case cfg.Concurrency < 0:
		return fmt.Errorf("concurrency %d: must be positive (zero means %d)", cfg.Concurrency, DefaultServiceConcurrency)
	case cfg.Runs < 0:
		return fmt.Errorf("runs %d: must be positive (zero means no run limit)", cfg.Runs)
	case cfg.Duration < 0:
		return fmt.Errorf("duration %s: must be positive (zero means no time limit)", cfg.Duration)
	case cfg.Spacing < 0:
		return fmt.Errorf("spacing %s: must be positive (zero runs back to back)", cfg.Spacing)
	case cfg.RSSConcurrency < 0:
		return fmt.Errorf("RSS concurrency %d: must be positive (zero skips the RSS phase)", cfg.RSSConcurrency)
	case cfg.Rounds < 0:
		return fmt.Errorf("rounds %d: must be positive (zero means 1)", cfg.Rounds)
	case cfg.Rounds > 1 && cfg.Runs > 0 && cfg.Runs < cfg.Rounds:
		return fmt.Errorf("runs %d in %d rounds: each round needs a run at least", cfg.Runs, cfg.Rounds)
	}
	for _, l := range cfg.Languages {
		if _, ok := PrintPrograms[l]; !ok {
			return fmt.Errorf("language %q: %w", l, rootfs.ErrUnknownLanguage)
		}
	}
	return nil
}

func (cfg *ServiceConfig) setDefaults() {
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultServiceConcurrency
	}
	if cfg.Runs == 0 && cfg.Duration == 0 {
		cfg.Runs = DefaultServiceRuns
	}
	if cfg.Languages == nil {
		cfg.Languages = rootfs.Languages
	}
	if cfg.Rounds == 0 {
		cfg.Rounds = 1
	}
}

// roundLimit is round's share (0 to cfg.Rounds-1) of a phase's runs and
// duration: the runs split as evenly as they go, the first rounds taking
// the remainder.
func (cfg *ServiceConfig) roundLimit(round int) phaseLimit {
	lim := phaseLimit{spacing: cfg.Spacing}
	if cfg.Runs > 0 {
		lim.runs = cfg.Runs / cfg.Rounds
		if round < cfg.Runs%cfg.Rounds {
			lim.runs++
		}
	}
	if cfg.Duration > 0 {
		lim.duration = cfg.Duration / time.Duration(cfg.Rounds)
	}
	return lim
}

// ServiceReport is the result of Service: per language, the bare and the brig
// phase at the same concurrency, and the service's RSS if it was measured.
type ServiceReport struct {
	// Config is the configuration the phases ran with, defaults applied.
	Config      ServiceConfig
	Concurrency int
	Rows        []ServiceRow
	// RSSBefore and RSSPeak are the service's resident memory in bytes before
	// the RSS phase and its highest sample during it; zero if not measured.
	RSSBefore, RSSPeak int64
	// RSSConcurrency is how many runs were in flight during the RSS phase.
	RSSConcurrency int
}

// ServiceRow is one language's phases: the same program at the same
// concurrency, bare on the host, through the service as it chooses (warm
// where it can), and through the service on its cold path (ColdEnv).
type ServiceRow struct {
	Language         rootfs.Language
	Bare, Brig, Cold Phase
}

// Phase is one kind of run at a fixed concurrency.
type Phase struct {
	// Runs is how many runs finished, failed ones included.
	Runs int
	// Failed is how many of them failed.
	Failed int
	// Elapsed is from the phase's start to its last run's end.
	Elapsed time.Duration
	// Latencies are of the successful runs, request to result, sorted.
	Latencies []time.Duration
	// CPU is the whole machine's CPU time (not idle, not waiting for I/O) from
	// the phase's start until its work has settled (a brig run's pool
	// replacement is prepared after its result); it includes this process.
	CPU time.Duration
	// ServiceCPU is the service process's own CPU over the same span (zero for
	// bare phases, or when its pid is not known), and RunCPU the sum of the
	// runs' usage.cpu_ms: what their cgroups counted.
	ServiceCPU, RunCPU time.Duration
	// Refused counts the requests the service refused with 429 (its queue
	// full), each retried after its Retry-After: a latency counts from the
	// accepted request, so a phase with refusals ran at a concurrency the
	// service did not take.
	Refused int
	// Starts counts the phase's runs by start path, from
	// the service's brig_run_starts_total; nil for bare phases or when
	// /metrics could not be read.
	Starts map[string]int
}

// add counts q, another slice of the same phase (ServiceConfig.Rounds), in
// p: its runs, time, CPU and start paths, and its latencies among p's, sorted.
// The start paths are unknown (nil) if any slice's were.
func (p *Phase) add(q Phase, first bool) {
	p.Runs += q.Runs
	p.Failed += q.Failed
	p.Elapsed += q.Elapsed
	p.CPU += q.CPU
	p.ServiceCPU += q.ServiceCPU
	p.RunCPU += q.RunCPU
	p.Refused += q.Refused
	p.Latencies = append(p.Latencies, q.Latencies...)
	slices.Sort(p.Latencies)
	switch {
	case first:
		p.Starts = maps.Clone(q.Starts)
	case p.Starts == nil || q.Starts == nil:
		p.Starts = nil
	default:
		for path, n := range q.Starts {
			p.Starts[path] += n
		}
	}
}

// CPUPerRun divides a total by the phase's runs.
func (p Phase) CPUPerRun(total time.Duration) time.Duration {
	if p.Runs == 0 {
		return 0
	}
	return total / time.Duration(p.Runs)
}

// RunsPerSecond is the phase's throughput: successful runs per second.
func (p Phase) RunsPerSecond() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Runs-p.Failed) / p.Elapsed.Seconds()
}

// Quantile returns the q-quantile (0..1) of the latencies.
func (p Phase) Quantile(q float64) time.Duration { return quantile(p.Latencies, q) }

// Service drives the service behind c from cfg.Concurrency clients, for each
// language first bare (the interpreter forked and exec'd from this process)
// and then through the service, with the same program and concurrency.
//
// A language's phases run back to back, not all bare phases first, so that
// they see the same machine state (page cache, CPU frequency, other load); a
// drift over the whole benchmark then shows between languages, not inside a
// comparison. With cfg.Rounds, they take turns in slices, so that a drift
// within a language's phases is shared by them too.
//
// Failed runs do not stop a phase: the report is returned with an error that
// says how many failed in which phase and the first failure's message.
func Service(ctx context.Context, c *client.Client, cfg ServiceConfig) (*ServiceReport, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	dir, err := os.MkdirTemp("", "brig-bench-service-")
	if err != nil {
		return nil, fmt.Errorf("creating the bare runs' directory: %w", err)
	}
	defer os.RemoveAll(dir)

	rep := &ServiceReport{Config: cfg, Concurrency: cfg.Concurrency}
	var failures []error
	for _, lang := range cfg.Languages {
		code := PrintPrograms[lang]
		script := filepath.Join(dir, lang.ScriptName())
		if err := os.WriteFile(script, []byte(code), 0o644); err != nil {
			return nil, fmt.Errorf("writing %s: %w", script, err)
		}
		req := api.Request{Language: lang.String(), Code: code}
		if cfg.Network != "" {
			req.Network = &api.Network{Mode: cfg.Network}
		}
		row := ServiceRow{Language: lang}
		cold := req
		kv := ColdEnv[lang]
		cold.Env = map[string]string{kv[0]: kv[1]}
		phases := []struct {
			name  string
			req   *api.Request // nil: bare
			dst   *Phase
			first string // the first failure's message
		}{{"bare", nil, &row.Bare, ""}, {"brig", &req, &row.Brig, ""}, {"brig cold", &cold, &row.Cold, ""}}
		for round := range cfg.Rounds {
			lim := cfg.roundLimit(round)
			for i := range phases {
				ph := &phases[i]
				p, first, err := servicePhase(ctx, c, &cfg, lang, script, dir, ph.req, lim)
				if err != nil {
					return nil, fmt.Errorf("%s %s phase: %w", ph.name, lang, err)
				}
				if ph.first == "" {
					ph.first = first
				}
				ph.dst.add(p, round == 0)
			}
		}
		for _, ph := range phases {
			if p := ph.dst; p.Failed > 0 {
				failures = append(failures, fmt.Errorf("%s %s: %d of %d runs failed; first: %s", ph.name, lang, p.Failed, p.Runs, ph.first))
			}
		}
		rep.Rows = append(rep.Rows, row)
	}
	if cfg.RSSConcurrency > 0 {
		before, peak, err := rssPhase(ctx, c, cfg.RSSConcurrency, cfg.Languages)
		if err != nil {
			failures = append(failures, fmt.Errorf("RSS phase: %w", err))
		} else {
			rep.RSSBefore, rep.RSSPeak, rep.RSSConcurrency = before, peak, cfg.RSSConcurrency
		}
	}
	return rep, errors.Join(failures...)
}

// servicePhase runs one phase (or a round's slice of it) of lang: bare, the
// interpreter forked and exec'd from this process on script in dir, when req
// is nil; otherwise req through the service. Either way after a few runs
// that are not counted: the service's pools are then full when the clock
// starts, and the bare loop's first runs, after the pause that ends every
// phase (settle), do not count against bare alone.
func servicePhase(ctx context.Context, c *client.Client, cfg *ServiceConfig, lang rootfs.Language, script, dir string, req *api.Request, lim phaseLimit) (p Phase, first string, err error) {
	warm := phaseLimit{runs: cfg.Concurrency * serviceWarmupPerClient}
	if req == nil {
		bare := bareRun(rootfs.HostArgv(lang, script), dir)
		if _, _, err := runPhase(ctx, cfg.Concurrency, warm, bare); err != nil {
			return p, "", fmt.Errorf("warming up: %w", err)
		}
		p.CPU, _, err = measureCPU(0, func() error {
			p, first, err = runPhase(ctx, cfg.Concurrency, lim, bare)
			return err
		})
		return p, first, err
	}
	if _, _, err := runPhase(ctx, cfg.Concurrency, warm, brigRun(c, *req, nil, nil)); err != nil {
		return p, "", fmt.Errorf("warming up: %w", err)
	}
	before, _ := readStarts(ctx, c, lang)
	var runCPU, refused atomic.Int64
	sys, svc, err := measureCPU(cfg.ServicePID, func() error {
		p, first, err = runPhase(ctx, cfg.Concurrency, lim, brigRun(c, *req, &runCPU, &refused))
		return err
	})
	if err != nil {
		return p, first, err
	}
	p.CPU, p.ServiceCPU, p.RunCPU = sys, svc, time.Duration(runCPU.Load())*time.Millisecond
	p.Refused = int(refused.Load())
	if after, err := readStarts(ctx, c, lang); err == nil && before != nil {
		p.Starts = map[string]int{}
		for path, n := range after {
			if d := n - before[path]; d > 0 {
				p.Starts[path] = d
			}
		}
	}
	return p, first, nil
}

// phaseLimit ends a phase: after runs runs if positive, and no new run starts
// after duration if positive. Each client pauses spacing after each run.
type phaseLimit struct {
	runs     int
	duration time.Duration
	spacing  time.Duration
}

// runFunc makes one run and returns its latency, or the reason it failed
// (failure) or, if the benchmark itself cannot go on, err.
type runFunc func(ctx context.Context) (latency time.Duration, failure, err error)

// runPhase calls run from conc goroutines until lim is reached and returns the
// phase and the first failure's message.
func runPhase(ctx context.Context, conc int, lim phaseLimit, run runFunc) (Phase, string, error) {
	var (
		claimed  atomic.Int64
		wg       sync.WaitGroup
		start    = time.Now()
		deadline = start.Add(lim.duration)
	)
	// mu guards the fields below it, which every worker appends to.
	var (
		mu       sync.Mutex
		p        Phase
		first    string
		fatalErr error
	)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if lim.runs > 0 && claimed.Add(1) > int64(lim.runs) {
					return
				}
				if lim.duration > 0 && time.Now().After(deadline) {
					return
				}
				d, failure, err := run(ctx)
				mu.Lock()
				switch {
				case err != nil:
					if fatalErr == nil {
						fatalErr = err
					}
				case failure != nil:
					p.Runs++
					p.Failed++
					if first == "" {
						first = failure.Error()
					}
				default:
					p.Runs++
					p.Latencies = append(p.Latencies, d)
				}
				stop := fatalErr != nil
				mu.Unlock()
				if stop {
					return
				}
				pause(ctx, lim.spacing)
			}
		}()
	}
	wg.Wait()
	p.Elapsed = time.Since(start)
	slices.Sort(p.Latencies)
	if fatalErr != nil {
		return p, first, fatalErr
	}
	if err := ctx.Err(); err != nil {
		return p, first, err
	}
	return p, first, nil
}

// bareRun runs argv on the host with the sandbox's environment and its output
// captured, as the service captures a sandbox's.
func bareRun(argv []string, dir string) runFunc {
	return func(ctx context.Context) (time.Duration, error, error) {
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = dir
		// The sandbox's environment, not this process's (see Local).
		cmd.Env = jail.Environ(nil)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		t0 := time.Now()
		err := cmd.Run()
		d := time.Since(t0)
		if ctx.Err() != nil {
			return 0, nil, ctx.Err()
		}
		var exitErr *exec.ExitError
		switch {
		case errors.As(err, &exitErr):
			return 0, fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String())), nil
		case err != nil:
			// The interpreter could not start: no run will.
			return 0, nil, fmt.Errorf("running %s: %w", argv[0], err)
		}
		return d, nil, nil
	}
}

// brigRun makes one run through the service. A 429 is not a run: it waits
// Retry-After and asks again, and the latency is of the accepted request.
func brigRun(c *client.Client, req api.Request, runCPU, refused *atomic.Int64) runFunc {
	return func(ctx context.Context) (time.Duration, error, error) {
		for {
			t0 := time.Now()
			res, err := c.Run(ctx, req)
			d := time.Since(t0)
			if ctx.Err() != nil {
				return 0, nil, ctx.Err()
			}
			if wait, ok := retryAfter(err); ok {
				if refused != nil {
					refused.Add(1)
				}
				if err := sleep(ctx, wait); err != nil {
					return 0, nil, err
				}
				continue
			}
			if err != nil {
				return 0, err, nil
			}
			if runCPU != nil {
				runCPU.Add(res.Usage.CPUMS)
			}
			if res.Outcome != api.OutcomeSucceeded {
				return 0, resultFailure(res), nil
			}
			return d, nil, nil
		}
	}
}

// retryAfter says whether err is a 429 and how long to wait before retrying.
func retryAfter(err error) (time.Duration, bool) {
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusTooManyRequests {
		return 0, false
	}
	return max(ce.RetryAfter, minRetryAfter), true
}

func resultFailure(res *api.Result) error {
	msg := fmt.Sprintf("run %s: outcome %s", res.ID, res.Outcome)
	if res.Reason != api.ReasonNone {
		msg += " (" + string(res.Reason) + ")"
	}
	if res.Message != "" {
		msg += ": " + res.Message
	}
	if s := strings.TrimSpace(res.Stderr); s != "" {
		msg += ": " + s
	}
	return errors.New(msg)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// rssPhase reads the service's RSS, then starts n sleeping runs at once and
// samples the RSS every rssSampleEvery until they have all finished. It
// returns the RSS before and the highest sample.
func rssPhase(ctx context.Context, c *client.Client, n int, langs []rootfs.Language) (before, peak int64, err error) {
	before, err = readRSS(ctx, c)
	if err != nil {
		return 0, 0, err
	}
	peak = before
	var (
		wg       sync.WaitGroup
		failed   atomic.Int64
		firstErr atomic.Value // string
	)
	for i := range n {
		lang := langs[i%len(langs)]
		run := brigRun(c, api.Request{Language: lang.String(), Code: SleepPrograms[lang]}, nil, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, failure, err := run(ctx)
			if err == nil {
				err = failure
			}
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(rssSampleEvery)
	defer tick.Stop()
	var sampleErr error
	for {
		select {
		case <-done:
			if sampleErr != nil {
				return before, peak, sampleErr
			}
			if f := failed.Load(); f > 0 {
				return before, peak, fmt.Errorf("%d of %d sleeping runs failed; first: %s", f, n, firstErr.Load())
			}
			return before, peak, nil
		case <-tick.C:
			rss, err := readRSS(ctx, c)
			if err != nil {
				if sampleErr == nil {
					sampleErr = err
				}
				continue
			}
			peak = max(peak, rss)
		}
	}
}

// readRSS reads the service's resident memory from GET /metrics.
func readRSS(ctx context.Context, c *client.Client) (int64, error) {
	body, err := getMetrics(ctx, c)
	if err != nil {
		return 0, err
	}
	defer body.Close()
	return parseRSS(body)
}

// getMetrics returns the body of the service's GET /metrics.
func getMetrics(ctx context.Context, c *client.Client) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://brig/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading /metrics: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("reading /metrics: %s", resp.Status)
	}
	return resp.Body, nil
}

// startsMetric counts runs by language and start path.
const startsMetric = "brig_run_starts_total"

// readStarts reads, from GET /metrics, lang's runs by start path.
func readStarts(ctx context.Context, c *client.Client, lang rootfs.Language) (map[string]int, error) {
	body, err := getMetrics(ctx, c)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return parseStarts(body, lang)
}

// metricFamilies parses a Prometheus text exposition.
func metricFamilies(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing /metrics: %w", err)
	}
	return mfs, nil
}

// parseStarts returns the brig_run_starts_total samples of lang, by path, in
// a Prometheus text exposition.
func parseStarts(r io.Reader, lang rootfs.Language) (map[string]int, error) {
	mfs, err := metricFamilies(r)
	if err != nil {
		return nil, err
	}
	starts := map[string]int{}
	for _, m := range mfs[startsMetric].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["language"] == lang.String() {
			starts[labels["path"]] = int(sampleValue(m))
		}
	}
	return starts, nil
}

// errNoRSS is returned by parseRSS for a metrics text without the gauge.
var errNoRSS = errors.New("no " + rssMetric + " in /metrics")

// parseRSS returns the value of the process_resident_memory_bytes gauge in a
// Prometheus text exposition.
func parseRSS(r io.Reader) (int64, error) {
	mfs, err := metricFamilies(r)
	if err != nil {
		return 0, err
	}
	ms := mfs[rssMetric].GetMetric()
	if len(ms) == 0 {
		return 0, errNoRSS
	}
	return int64(sampleValue(ms[0])), nil
}

// sampleValue is a gauge's, a counter's or an untyped sample's value.
func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	}
	return m.GetUntyped().GetValue()
}

// Print writes the report: per language and kind the runs, throughput and
// latency quantiles, brig's throughput as a share of bare's and its p50 over
// bare's; each brig phase's CPU per run and start paths; the RSS if measured;
// then the project's goals checked on the numbers.
func (r *ServiceReport) Print(w io.Writer) {
	fmt.Fprintf(w, "service: concurrency=%d, each phase %s\n", r.Concurrency, r.Config.limitString())
	fmt.Fprintf(w, "%-22s %7s %7s %9s %9s %9s %9s %9s %12s\n", "", "runs", "failed", "runs/s", "p50", "p90", "p99", "% bare", "p50 - bare")
	for _, row := range r.Rows {
		b := row.Bare
		fmt.Fprintf(w, "%-22s %7d %7d %9.1f %9s %9s %9s\n", row.Language.String()+" bare",
			b.Runs, b.Failed, b.RunsPerSecond(), ms(b.Quantile(0.5)), ms(b.Quantile(0.9)), ms(b.Quantile(0.99)))
		for _, p := range row.brigPhases() {
			fmt.Fprintf(w, "%-22s %7d %7d %9.1f %9s %9s %9s %9s %12s\n", row.Language.String()+" "+p.name,
				p.Runs, p.Failed, p.RunsPerSecond(), ms(p.Quantile(0.5)), ms(p.Quantile(0.9)), ms(p.Quantile(0.99)),
				percentOf(p.RunsPerSecond(), b.RunsPerSecond()), signedMS(p.Quantile(0.5)-b.Quantile(0.5)))
		}
	}
	for _, row := range r.Rows {
		for _, p := range row.brigPhases() {
			if p.Refused > 0 {
				fmt.Fprintf(w, "  %s %s: %d requests refused with 429 and retried; its latencies count from the accepted request: give -c below the service's max_concurrent plus queue_size\n",
					row.Language, p.name, p.Refused)
			}
		}
	}
	fmt.Fprintf(w, "CPU per run (whole machine; for brig also the service process, the run's cgroup, and the rest: the sandbox's making and unmaking, and whatever else the machine ran):\n")
	for _, row := range r.Rows {
		b := row.Bare
		fmt.Fprintf(w, "  %-11s bare %s\n", row.Language, ms(b.CPUPerRun(b.CPU)))
		for _, p := range row.brigPhases() {
			fmt.Fprintf(w, "  %-11s %s %s (%s): service %s, run %s, rest %s; starts: %s\n", row.Language, p.name,
				ms(p.CPUPerRun(p.CPU)), signedMS(p.CPUPerRun(p.CPU)-b.CPUPerRun(b.CPU)),
				ms(p.CPUPerRun(p.ServiceCPU)), ms(p.CPUPerRun(p.RunCPU)), ms(p.CPUPerRun(p.CPU-p.ServiceCPU-p.RunCPU)),
				startsString(p.Starts))
		}
	}
	if r.RSSConcurrency > 0 {
		fmt.Fprintf(w, "supervisor RSS: %.1f MiB before, %.1f MiB peak with %d runs asked for at once (those past max_concurrent queued)\n",
			mib(r.RSSBefore), mib(r.RSSPeak), r.RSSConcurrency)
	}
	fmt.Fprintf(w, "goals (throughput goals are set at concurrency 2, warm p50 goals at 1; checked here at concurrency %d):\n", r.Concurrency)
	for _, row := range r.Rows {
		g := checkGoals(row)
		bare, brig, cold := row.Bare, row.Brig, row.Cold
		fmt.Fprintf(w, "  %s warm throughput ≥ %d%% of bare: %s (%s)\n", row.Language, warmGoals[row.Language].ThroughputPercent,
			r.throughput(g.warmThroughput), percentOf(brig.RunsPerSecond(), bare.RunsPerSecond()))
		fmt.Fprintf(w, "  %s warm p50 ≤ %d%% of bare: %s (%s)\n", row.Language, warmGoals[row.Language].P50Percent,
			passMiss(g.warmP50), percentOf(float64(brig.Quantile(0.5)), float64(bare.Quantile(0.5))))
		fmt.Fprintf(w, "  %s service CPU per run ≤ %s: %s (%s)\n", row.Language, ms(goalServiceCPU),
			passMiss(g.serviceCPU), ms(brig.CPUPerRun(brig.ServiceCPU)))
		fmt.Fprintf(w, "  %s cold throughput ≥ %d%% of bare: %s (%s)\n", row.Language, goalThroughputPercent,
			r.throughput(g.coldThroughput), percentOf(cold.RunsPerSecond(), bare.RunsPerSecond()))
		fmt.Fprintf(w, "  %s cold p50 ≤ bare + %d ms: %s (%s)\n", row.Language, goalP50Overhead/time.Millisecond,
			passMiss(g.coldP50), signedMS(cold.Quantile(0.5)-bare.Quantile(0.5)))
	}
}

// throughput is a throughput goal's verdict: none for spaced runs, whose
// rate is the pace the clients keep.
func (r *ServiceReport) throughput(ok bool) string {
	if r.Config.Spacing > 0 {
		return "not measured (spaced runs)"
	}
	return passMiss(ok)
}

// namedPhase is a brig phase with the name Print gives it.
type namedPhase struct {
	name string
	Phase
}

func (row ServiceRow) brigPhases() []namedPhase {
	return []namedPhase{{"brig", row.Brig}, {"brig cold", row.Cold}}
}

// startsString lists a phase's runs by start path, most first.
func startsString(starts map[string]int) string {
	if starts == nil {
		return "unknown"
	}
	paths := slices.Collect(maps.Keys(starts))
	slices.SortFunc(paths, func(a, b string) int { return cmp.Or(starts[b]-starts[a], strings.Compare(a, b)) })
	var parts []string
	for _, p := range paths {
		parts = append(parts, fmt.Sprintf("%s %d", p, starts[p]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// goalChecks says which of the project's goals a row meets.
type goalChecks struct {
	warmThroughput, warmP50, serviceCPU, coldThroughput, coldP50 bool
}

func checkGoals(row ServiceRow) goalChecks {
	bare, brig, cold := row.Bare, row.Brig, row.Cold
	g := warmGoals[row.Language]
	// Multiplied out, so that a figure exactly at a goal is not lost to float
	// rounding.
	measured := func(p Phase) bool { return len(p.Latencies) > 0 && len(bare.Latencies) > 0 }
	return goalChecks{
		warmThroughput: bare.RunsPerSecond() > 0 && brig.RunsPerSecond()*100 >= bare.RunsPerSecond()*float64(g.ThroughputPercent),
		warmP50:        measured(brig) && brig.Quantile(0.5)*100 <= bare.Quantile(0.5)*time.Duration(g.P50Percent),
		serviceCPU:     brig.Runs > 0 && brig.ServiceCPU > 0 && brig.CPUPerRun(brig.ServiceCPU) <= goalServiceCPU,
		coldThroughput: bare.RunsPerSecond() > 0 && cold.RunsPerSecond()*100 >= bare.RunsPerSecond()*goalThroughputPercent,
		coldP50:        measured(cold) && cold.Quantile(0.5) <= bare.Quantile(0.5)+goalP50Overhead,
	}
}

func (cfg ServiceConfig) limitString() string {
	var s string
	switch {
	case cfg.Runs > 0 && cfg.Duration > 0:
		s = fmt.Sprintf("%d runs or %s, whichever first", cfg.Runs, cfg.Duration)
	case cfg.Duration > 0:
		s = cfg.Duration.String()
	default:
		s = fmt.Sprintf("%d runs", cfg.Runs)
	}
	if cfg.Rounds > 1 {
		s += fmt.Sprintf(", in %d rounds of bare, brig and brig cold in turn", cfg.Rounds)
	}
	if cfg.Spacing > 0 {
		s += fmt.Sprintf(", each client pausing %s after each run (runs/s is the pace, not capacity)", cfg.Spacing)
	}
	return s
}

func passMiss(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

func percentOf(x, of float64) string {
	if of <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*x/of)
}

func signedMS(d time.Duration) string {
	return fmt.Sprintf("%+.2fms", float64(d)/float64(time.Millisecond))
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// settle is how long a phase's CPU keeps being counted after its last run:
// the service prepares each run's replacement sandbox after the result.
const settle = 300 * time.Millisecond

// measureCPU runs f and returns the machine's CPU time and process pid's (if
// not zero) over it and the settle after it.
func measureCPU(pid int, f func() error) (machine, process time.Duration, err error) {
	m0, p0 := machineCPU(), processCPU(pid)
	if err := f(); err != nil {
		return 0, 0, err
	}
	time.Sleep(settle)
	return machineCPU() - m0, processCPU(pid) - p0, nil
}

// machineCPU is the CPU time all CPUs spent, idle and iowait left out, from the
// first line of /proc/stat (in USER_HZ ticks).
func machineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var total int64
	for i, f := range strings.Fields(line)[1:] {
		if i == 3 || i == 4 || i >= 7 { // idle, iowait; steal, guest and guest_nice (which user and nice hold already)
			continue
		}
		n, _ := strconv.ParseInt(f, 10, 64)
		total += n
	}
	return time.Duration(total) * time.Second / clockTicks
}

// processCPU is pid's user and system time, from /proc/<pid>/stat; zero for
// pid 0.
func processCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * time.Second / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on Linux.
const clockTicks = 100
