package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
	// a brig phase, so the service's pools are full when the clock starts.
	serviceWarmupPerClient = 3
	// minRetryAfter bounds the pause after a 429 whose Retry-After is absent or 0.
	minRetryAfter = 10 * time.Millisecond
	// rssSampleEvery is how often the RSS phase reads /metrics.
	rssSampleEvery = 50 * time.Millisecond
	// rssMetric is the Prometheus gauge of the service's resident memory.
	rssMetric = "process_resident_memory_bytes"

	// goalThroughputPercent: brig's runs/s is at least this % of bare's.
	goalThroughputPercent = 70
	// goalP50Overhead: brig's p50 is at most bare's p50 plus this.
	goalP50Overhead = 3 * time.Millisecond
)

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
	case cfg.RSSConcurrency < 0:
		return fmt.Errorf("RSS concurrency %d: must be positive (zero skips the RSS phase)", cfg.RSSConcurrency)
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

// ServiceRow is one language's pair of phases: the same program at the same
// concurrency, bare on the host and through the service.
type ServiceRow struct {
	Language   rootfs.Language
	Bare, Brig Phase
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
// The two phases of a language run back to back, not all bare phases first,
// so that each pair sees the same machine state (page cache, CPU frequency,
// other load); a drift over the whole benchmark then shows between languages,
// not inside a comparison.
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

	lim := phaseLimit{runs: cfg.Runs, duration: cfg.Duration}
	rep := &ServiceReport{Config: cfg, Concurrency: cfg.Concurrency}
	var failures []error
	for _, lang := range cfg.Languages {
		code := PrintPrograms[lang]
		script := filepath.Join(dir, lang.ScriptName())
		if err := os.WriteFile(script, []byte(code), 0o644); err != nil {
			return nil, fmt.Errorf("writing %s: %w", script, err)
		}
		var bare Phase
		var first string
		bare.CPU, _, err = measureCPU(0, func() error {
			bare, first, err = runPhase(ctx, cfg.Concurrency, lim, bareRun(rootfs.HostArgv(lang, script), dir))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("bare %s phase: %w", lang, err)
		}
		if bare.Failed > 0 {
			failures = append(failures, fmt.Errorf("bare %s: %d of %d runs failed; first: %s", lang, bare.Failed, bare.Runs, first))
		}

		req := api.Request{Language: lang.String(), Code: code}
		if cfg.Network != "" {
			req.Network = &api.Network{Mode: cfg.Network}
		}
		warm := phaseLimit{runs: cfg.Concurrency * serviceWarmupPerClient}
		if _, _, err := runPhase(ctx, cfg.Concurrency, warm, brigRun(c, req, nil)); err != nil {
			return nil, fmt.Errorf("warming up brig %s: %w", lang, err)
		}
		var brig Phase
		var runCPU atomic.Int64
		sys, svc, err := measureCPU(cfg.ServicePID, func() error {
			brig, first, err = runPhase(ctx, cfg.Concurrency, lim, brigRun(c, req, &runCPU))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("brig %s phase: %w", lang, err)
		}
		brig.CPU, brig.ServiceCPU, brig.RunCPU = sys, svc, time.Duration(runCPU.Load())*time.Millisecond
		if brig.Failed > 0 {
			failures = append(failures, fmt.Errorf("brig %s: %d of %d runs failed; first: %s", lang, brig.Failed, brig.Runs, first))
		}
		rep.Rows = append(rep.Rows, ServiceRow{Language: lang, Bare: bare, Brig: brig})
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

// phaseLimit ends a phase: after runs runs if positive, and no new run starts
// after duration if positive.
type phaseLimit struct {
	runs     int
	duration time.Duration
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
func brigRun(c *client.Client, req api.Request, runCPU *atomic.Int64) runFunc {
	return func(ctx context.Context) (time.Duration, error, error) {
		for {
			t0 := time.Now()
			res, err := c.Run(ctx, req)
			d := time.Since(t0)
			if ctx.Err() != nil {
				return 0, nil, ctx.Err()
			}
			if wait, ok := retryAfter(err); ok {
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
		run := brigRun(c, api.Request{Language: lang.String(), Code: SleepPrograms[lang]}, nil)
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://brig/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, fmt.Errorf("reading /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("reading /metrics: %s", resp.Status)
	}
	return parseRSS(resp.Body)
}

// errNoRSS is returned by parseRSS for a metrics text without the gauge.
var errNoRSS = errors.New("no " + rssMetric + " in /metrics")

// parseRSS returns the value of the process_resident_memory_bytes gauge in a
// Prometheus text exposition. The value may be written as a float with an
// exponent (2.5e+07) and followed by a timestamp.
func parseRSS(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), rssMetric+" ")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return 0, fmt.Errorf("parsing %s: no value", rssMetric)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, fmt.Errorf("parsing %s: %w", rssMetric, err)
		}
		return int64(v), nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading /metrics: %w", err)
	}
	return 0, errNoRSS
}

// Print writes the report: per language and kind the runs, throughput and
// latency quantiles, brig's throughput as a share of bare's and its p50 over
// bare's; the RSS if measured; then the project's goals checked on the numbers.
func (r *ServiceReport) Print(w io.Writer) {
	fmt.Fprintf(w, "service: concurrency=%d, each phase %s\n", r.Concurrency, r.Config.limitString())
	fmt.Fprintf(w, "%-18s %7s %7s %9s %9s %9s %9s %9s %12s\n", "", "runs", "failed", "runs/s", "p50", "p90", "p99", "% bare", "p50 - bare")
	for _, row := range r.Rows {
		b, j := row.Bare, row.Brig
		fmt.Fprintf(w, "%-18s %7d %7d %9.1f %9s %9s %9s\n", row.Language.String()+" bare",
			b.Runs, b.Failed, b.RunsPerSecond(), ms(b.Quantile(0.5)), ms(b.Quantile(0.9)), ms(b.Quantile(0.99)))
		fmt.Fprintf(w, "%-18s %7d %7d %9.1f %9s %9s %9s %9s %12s\n", row.Language.String()+" brig",
			j.Runs, j.Failed, j.RunsPerSecond(), ms(j.Quantile(0.5)), ms(j.Quantile(0.9)), ms(j.Quantile(0.99)),
			percentOf(j.RunsPerSecond(), b.RunsPerSecond()), signedMS(j.Quantile(0.5)-b.Quantile(0.5)))
	}
	fmt.Fprintf(w, "CPU per run (whole machine; for brig also the service process, the run's cgroup, and the rest: the sandbox's making and unmaking):\n")
	for _, row := range r.Rows {
		b, j := row.Bare, row.Brig
		fmt.Fprintf(w, "  %-11s bare %s, brig %s (%s): service %s, run %s, rest %s\n", row.Language,
			ms(b.CPUPerRun(b.CPU)), ms(j.CPUPerRun(j.CPU)), signedMS(j.CPUPerRun(j.CPU)-b.CPUPerRun(b.CPU)),
			ms(j.CPUPerRun(j.ServiceCPU)), ms(j.CPUPerRun(j.RunCPU)), ms(j.CPUPerRun(j.CPU-j.ServiceCPU-j.RunCPU)))
	}
	if r.RSSConcurrency > 0 {
		fmt.Fprintf(w, "supervisor RSS: %.1f MiB before, %.1f MiB peak with %d runs in flight\n",
			mib(r.RSSBefore), mib(r.RSSPeak), r.RSSConcurrency)
	}
	fmt.Fprintf(w, "goals (they hold at any concurrency; checked here at concurrency %d):\n", r.Concurrency)
	for _, row := range r.Rows {
		tput, p50 := goals(row)
		fmt.Fprintf(w, "  %s throughput ≥ %d%% of bare: %s (%s)\n", row.Language, goalThroughputPercent,
			passMiss(tput), percentOf(row.Brig.RunsPerSecond(), row.Bare.RunsPerSecond()))
		fmt.Fprintf(w, "  %s p50 ≤ bare + %d ms: %s (%s)\n", row.Language, goalP50Overhead/time.Millisecond,
			passMiss(p50), signedMS(row.Brig.Quantile(0.5)-row.Bare.Quantile(0.5)))
	}
}

// goals says whether a row meets the project's throughput and p50 goals.
func goals(row ServiceRow) (throughput, p50 bool) {
	bare, brig := row.Bare.RunsPerSecond(), row.Brig.RunsPerSecond()
	// Multiplied out, so that exactly 70% is not lost to float rounding.
	throughput = bare > 0 && brig*100 >= bare*goalThroughputPercent
	p50 = len(row.Brig.Latencies) > 0 && len(row.Bare.Latencies) > 0 &&
		row.Brig.Quantile(0.5) <= row.Bare.Quantile(0.5)+goalP50Overhead
	return throughput, p50
}

func (cfg ServiceConfig) limitString() string {
	switch {
	case cfg.Runs > 0 && cfg.Duration > 0:
		return fmt.Sprintf("%d runs or %s, whichever first", cfg.Runs, cfg.Duration)
	case cfg.Duration > 0:
		return cfg.Duration.String()
	default:
		return fmt.Sprintf("%d runs", cfg.Runs)
	}
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
		if i == 3 || i == 4 { // idle, iowait
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
