package supervisor

import (
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/egress"
	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/packages"
)

// metrics are the service's Prometheus metrics, on a registry of its own (no
// global state: tests make many services in one process).
type metrics struct {
	reg      *prometheus.Registry
	runs     *prometheus.CounterVec
	requests *prometheus.CounterVec
	refused  *prometheus.CounterVec
	queue    *prometheus.HistogramVec
	start    *prometheus.HistogramVec
	total    *prometheus.HistogramVec
	peak     *prometheus.HistogramVec
	// egressDecisions and egressBytes count networked runs' connections, by
	// labels of a few values each: never a host name (cardinality).
	egressDecisions *prometheus.CounterVec
	egressBytes     *prometheus.CounterVec
	// egressFailures counts allowed connections that did not get through
	// or were cut, by the failure's class (failureClasses).
	egressFailures *prometheus.CounterVec
	// starts counts runs by how their interpreter started (jail.Result.Start).
	starts *prometheus.CounterVec
	// journalFailures counts the journal's failed writes, by what was being
	// written: what a full or read-only state directory looks like.
	journalFailures *prometheus.CounterVec
}

// The journal's writes, as brig_journal_write_failures_total labels them.
const (
	journalWriteAccept  = "accept"  // a run's acceptance: the run is refused (503)
	journalWritePending = "pending" // a result's pending line: answered once committed
	journalWriteCommit  = "commit"  // a result's commit: kept in memory, tried again
)

// latencyBuckets run from 1 ms to 5 min: a run's start takes milliseconds and
// its whole life up to its time limit.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

func newMetrics(adm *admission, version string) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "brig_runs_total", Help: "Finished runs by language, outcome and reason (empty for runs that succeeded).",
		}, []string{"language", "outcome", "reason"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "brig_http_requests_total", Help: "API requests by route and status code.",
		}, []string{"route", "code"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "brig_runs_refused_total", Help: "Run requests refused before they ran, by error code (invalid_request, queue_full, conflict, forbidden...).",
		}, []string{"code"}),
		queue: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "brig_run_queue_seconds", Help: "Time from a run's acceptance to its admission to a slot.", Buckets: latencyBuckets,
		}, []string{"language"}),
		start: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "brig_run_start_seconds", Help: "Time from a run's request to its interpreter's start (timing.start_ms).", Buckets: latencyBuckets,
		}, []string{"language"}),
		total: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "brig_run_total_seconds", Help: "Time from a run's request to its result (timing.total_ms).", Buckets: latencyBuckets,
		}, []string{"language"}),
		peak: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "brig_run_peak_memory_bytes", Help: "Peak memory of finished runs.", Buckets: prometheus.ExponentialBuckets(8<<20, 2, 9),
		}, []string{"language"}),
		egressDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "brig_egress_decisions_total", Help: "Connections of networked runs the egress policy decided, by network mode, allowed (true or false) and class of the rule that decided; a tunnel cut for another name than its host (host_mismatch, no_name, malformed) counts as refused.",
		}, []string{"mode", "allowed", "rule_class"}),
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "brig_run_starts_total", Help: "Runs by how their interpreter was started: warm (a pooled interpreter), cold, cold-env (the run's environment or network needs a cold start), cold-empty (no warm sandbox was waiting), cold-layer (the run's package layer holds a module the Python zygote had imported) or cold-failing (warm sandboxes failed to prepare).",
		}, []string{"language", "path"}),
		egressBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "brig_egress_bytes_total", Help: "Bytes networked runs sent (direction sent) and received (direction received) through the egress proxy.",
		}, []string{"direction"}),
		egressFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "brig_egress_failures_total", Help: "Allowed connections of networked runs that did not get through or were cut, by network mode and class of failure: resolve (the name did not resolve on the host's side), connect (no address of it answered), run_ended (the run ended while the name was looked up), limit (the run's byte limit), dropped (the connection ended with bytes the upstream had not taken), write (the first bytes could not be sent), request_cut (a request's body was cut), no_answer (the upstream reset or closed the connection before it sent a byte back) or other. A tunnel cut for another name than its host counts in brig_egress_decisions_total as refused, not here.",
		}, []string{"mode", "failure_class"}),
		journalFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "brig_journal_write_failures_total", Help: "Writes of the journal that failed (a full or read-only state directory), by what was written: accept (the run was refused, 503), pending (a result's line; answered once committed) or commit (a result kept in memory and tried again each second: a restart meanwhile loses it).",
		}, []string{"write"}),
	}
	m.zero()
	m.reg.MustRegister(m.runs, m.requests, m.refused, m.queue, m.start, m.total, m.peak, m.egressDecisions, m.egressBytes, m.egressFailures, m.starts, m.journalFailures,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "brig_build_info", Help: "1, labelled with the build's version (brig --version), so that a fleet's dashboards can tell which build each host runs.",
			ConstLabels: prometheus.Labels{"version": version},
		}, func() float64 { return 1 }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "brig_queue_depth", Help: "Runs accepted and waiting for a slot.",
		}, func() float64 { _, q := adm.counts(); return float64(q) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "brig_runs_in_flight", Help: "Runs executing now.",
		}, func() float64 { r, _ := adm.counts(); return float64(r) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "brig_host_memory_cgroups", Help: "The cgroups of the host's memory hierarchy (/proc/cgroups; on cgroup v2 every cgroup of the unified hierarchy), those removed that the kernel still keeps for the cached file pages charged to them included; -1 when it can't be read.",
		}, hostMemoryCgroups),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// hostMemoryCgroups is the memory controller's num_cgroups in /proc/cgroups:
// every memory cgroup the kernel holds, a removed one too until the file
// pages charged to it leave the page cache. A run's group is removed at its
// end, but a page the run read first (a file no one had read since the cache
// dropped it) stays charged to it and keeps the group's kernel memory (about
// 14 kB, an audit's figure) until memory pressure or a cache drop takes the
// page; README (Security model) says more.
func hostMemoryCgroups() float64 {
	b, err := os.ReadFile("/proc/cgroups")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "memory" {
			if n, err := strconv.Atoi(f[2]); err == nil {
				return float64(n)
			}
		}
	}
	return -1
}

// zero makes the series a dashboard or an alert reads first, at 0, so that
// they are there before the first run and the first connection (a labelled
// counter appears only at its first increment, and rate() over an absent
// series is empty, not 0): every language's runs by each outcome and reason
// a run can end with, each networked mode's usual decisions and bytes, and
// the refusals of a run request by code, and each language's latency and
// memory histograms.
func (m *metrics) zero() {
	for _, lang := range api.Languages {
		// Each language's histograms too, empty: their HELP and TYPE lines
		// were absent until the first run (the contract probe of
		// 2026-12-06).
		for _, h := range []*prometheus.HistogramVec{m.queue, m.start, m.total, m.peak} {
			h.WithLabelValues(lang.String())
		}
		for _, reason := range append([]api.Reason{api.ReasonNone}, api.Reasons...) {
			for _, mode := range []string{api.NetworkNone, api.NetworkAny} {
				for _, started := range []bool{false, true} {
					_, _, outcome := conclude(reason, mode, started)
					m.runs.WithLabelValues(lang.String(), string(outcome), string(reason))
				}
			}
		}
	}
	for _, d := range []struct{ mode, allowed, denied string }{
		{api.NetworkRegistries, "registry", "not_a_registry"},
		{api.NetworkDomains, "domain", "not_a_domain"},
		{api.NetworkAny, "mode_any", "address_class"},
	} {
		m.egressDecisions.WithLabelValues(d.mode, "true", d.allowed)
		m.egressDecisions.WithLabelValues(d.mode, "false", d.denied)
		for _, class := range []string{"resolve", "connect"} {
			m.egressFailures.WithLabelValues(d.mode, class)
		}
	}
	for _, w := range []string{journalWriteAccept, journalWritePending, journalWriteCommit} {
		m.journalFailures.WithLabelValues(w)
	}
	m.egressBytes.WithLabelValues("sent")
	m.egressBytes.WithLabelValues("received")
	// A run request is refused with any code but these two, which only a
	// wrong path or method gets.
	for _, code := range api.ErrorCodes {
		if code != api.ErrorNotFound && code != api.ErrorMethodNotAllowed {
			m.refused.WithLabelValues(string(code))
		}
	}
}

// route makes the series of a route's success (code 200) at 0, as zero does
// the runs': an error ratio over an absent series is empty, not 0.
func (m *metrics) route(pattern string) {
	m.requests.WithLabelValues(pattern, "200")
}

// observe counts a finished run; started says whether its program started,
// whose start time (under a millisecond for a warm run) is then observed.
func (m *metrics) observe(res *api.Result, started bool) {
	lang := res.Language.String()
	m.countRun(res)
	m.queue.WithLabelValues(lang).Observe(float64(res.Timing.QueuedMS) / 1e3)
	if started {
		m.start.WithLabelValues(lang).Observe(float64(res.Timing.StartMS) / 1e3)
	}
	m.total.WithLabelValues(lang).Observe(float64(res.Timing.TotalMS) / 1e3)
	if res.Usage.PeakMemoryBytes > 0 {
		m.peak.WithLabelValues(lang).Observe(float64(res.Usage.PeakMemoryBytes))
	}
}

// countRun counts a finished run in brig_runs_total alone: what observe
// counts of every run, and all that is counted of one the service's last
// stop interrupted and this start finished, whose times hold the downtime.
func (m *metrics) countRun(res *api.Result) {
	m.runs.WithLabelValues(res.Language.String(), string(res.Outcome), string(res.Reason)).Inc()
}

// observeEgress counts one connection of a run of network mode, as
// (*egress.Run).Close lists it: its decision and its bytes each way.
func (m *metrics) observeEgress(mode string, c egress.Connection) {
	allowed, rule := c.Allowed, c.Rule
	if allowed && cutClasses[ruleClass(c.Failure)] {
		// A tunnel to an allowed host cut for the name it carried (another
		// SNI or Host: fronting) is listed allowed, with the cut in its
		// failure; it counts as the refusal it is.
		allowed, rule = false, c.Failure
	} else if allowed && c.Failure != "" {
		m.egressFailures.WithLabelValues(mode, failureClass(c.Failure)).Inc()
	}
	m.observeEgressDecisions(mode, allowed, rule, 1)
	m.observeEgressBytes(c.BytesSent, c.BytesReceived)
}

// failureClasses map the start of an allowed connection's failure (as
// egress lists it) to the class brig_egress_failures_total counts it under,
// first match first; like a rule, a failure names hosts, never a label.
var failureClasses = []struct{ prefix, class string }{
	{"resolving ", "resolve"},
	{"reading the host's /etc/resolv.conf", "resolve"},
	{"the run ended first", "run_ended"},
	{"connecting", "connect"},
	{"the run's byte limit", "limit"},
	{"the connection ended with ", "dropped"},
	{"writing the first bytes", "write"},
	{"the request was cut", "request_cut"},
	{"the upstream ended the connection before it answered", "no_answer"},
}

// failureClass is the class of an allowed connection's failure.
func failureClass(failure string) string {
	for _, fc := range failureClasses {
		if strings.HasPrefix(failure, fc.prefix) {
			return fc.class
		}
	}
	return "other"
}

// cutClasses are the classes of a failure that cut a tunnel for the name it
// carried, which observeEgress counts as a refusal.
var cutClasses = map[string]bool{"host_mismatch": true, "no_name": true, "malformed": true}

// observeEgressDecisions counts n decisions of one kind.
func (m *metrics) observeEgressDecisions(mode string, allowed bool, rule string, n int) {
	m.egressDecisions.WithLabelValues(mode, strconv.FormatBool(allowed), ruleClass(rule)).Add(float64(n))
}

// observeEgressBytes counts the runs' own traffic.
func (m *metrics) observeEgressBytes(sent, received int64) {
	if sent > 0 {
		m.egressBytes.WithLabelValues("sent").Add(float64(sent))
	}
	if received > 0 {
		m.egressBytes.WithLabelValues("received").Add(float64(received))
	}
}

// ruleClasses map the start of an egress rule to the class it is counted
// under, first match first. A rule names hosts, domains and prefixes ("domain
// example.com", "address class private (10.0.0.0/8)"), which must never become
// label values: only the class does, and a rule of no known start is "other".
var ruleClasses = []struct{ prefix, class string }{
	{"domain ", "domain"},
	{"registry ", "registry"},
	{"mode any", "mode_any"},
	{"mode none", "mode_none"},
	{"not in the run's domains", "not_a_domain"},
	{"not a registry", "not_a_registry"},
	{"ip literal", "ip_literal"},
	{"address public", "address_public"},
	{"address class ", "address_class"},
	{"address of this host", "host_address"},
	{"private address allowed", "private_allowed"},
	{"invalid ", "invalid"},
	{"unknown mode", "invalid"},
	// The proxies' own refusals (egress/proxy.go), apart from the policy's:
	// the run's limits, a request that names no host or two, and malformed
	// traffic, so that an operator can alert on each.
	{"too many connections", "limit"},
	{"the run's byte limit", "limit"},
	{"the SNI does not match", "host_mismatch"},
	{"the Host does not match", "host_mismatch"},
	{"the request target names another host", "host_mismatch"},
	{"the Host header names another port", "host_mismatch"},
	{"the proxy itself", "proxy_itself"},
	{"no SNI", "no_name"},
	{"no Host header", "no_name"},
	{"no readable", "malformed"},
	{"not a proxy request", "malformed"},
	{"the CONNECT target is not", "malformed"},
	// A program that dialed an address instead of a name (egress/direct.go):
	// a bypass attempt, told apart from the rest.
	{egress.RuleDirect, "direct"},
}

// ruleClass is the class of an egress rule for the metrics' rule_class label:
// one of a fixed set, whatever the rule holds.
func ruleClass(rule string) string {
	for _, rc := range ruleClasses {
		if strings.HasPrefix(rule, rc.prefix) {
			return rc.class
		}
	}
	if strings.Contains(rule, "limit") {
		return "limit" // the per-run bounds: connections, rate, bytes
	}
	return "other"
}

func (m *metrics) request(route string, code int) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// registerPackageCache exports the layer cache's counters, read at each scrape.
func (m *metrics) registerPackageCache(c *packages.Cache) {
	counter := func(name, help string, f func(packages.Stats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return f(c.Stats()) })
	}
	gauge := func(name, help string, f func(packages.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(c.Stats()) })
	}
	m.reg.MustRegister(
		counter("brig_package_cache_hits_total", "Runs whose package layer was in the cache.", func(s packages.Stats) float64 { return float64(s.Hits) }),
		counter("brig_package_cache_misses_total", "Runs whose package layer had to be installed (or waited for one install).", func(s packages.Stats) float64 { return float64(s.Misses) }),
		counter("brig_package_installs_total", "Package layers installed.", func(s packages.Stats) float64 { return float64(s.Installs) }),
		counter("brig_package_install_failures_total", "Package installs that failed (unavailable packages included).", func(s packages.Stats) float64 { return float64(s.InstallFailures) }),
		counter("brig_package_install_seconds_total", "Time spent installing package layers.", func(s packages.Stats) float64 { return s.InstallSeconds }),
		counter("brig_package_cache_evictions_total", "Package layers evicted from the cache.", func(s packages.Stats) float64 { return float64(s.Evictions) }),
		counter("brig_package_cache_refreshes_total", "Package layers of open constraints resolved again after packages.open_ttl.", func(s packages.Stats) float64 { return float64(s.Refreshes) }),
		gauge("brig_package_cache_layers", "Package layers in the cache.", func(s packages.Stats) float64 { return float64(s.Layers) }),
		gauge("brig_package_cache_bytes", "Bytes the package layers take on disk.", func(s packages.Stats) float64 { return float64(s.Bytes) }),
	)
}

// registerDeaths exports what died in the jail's pools (jail.DeathStats),
// read at each scrape.
func (m *metrics) registerDeaths(stats func() jail.DeathStats) {
	death := func(what string, n func(jail.DeathStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "brig_sandbox_deaths_total",
			Help:        "Waiting sandboxes found dead in the pools, and Python zygotes that ended while they served (each replaced at once).",
			ConstLabels: prometheus.Labels{"what": what}},
			func() float64 { return float64(n(stats())) })
	}
	m.reg.MustRegister(death("pooled_sandbox", func(d jail.DeathStats) uint64 { return d.PooledSandboxes }),
		death("zygote", func(d jail.DeathStats) uint64 { return d.Zygotes }))
}

// registerCopies exports what the interpreters' copies hold (jail's
// copies.go), read at each scrape: memory charged to the service's cgroup.
func (m *metrics) registerCopies(stats func() jail.CopiesStats) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "brig_interpreter_copies", Help: "Interpreter copies on huge pages the service holds, replaced ones still kept included."},
			func() float64 { return float64(stats().Copies) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "brig_interpreter_copies_bytes", Help: "Bytes of memory the interpreter copies take (a tmpfs charged to the service's cgroup)."},
			func() float64 { return float64(stats().Bytes) }),
	)
}
