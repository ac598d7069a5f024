package supervisor

import (
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/egress"
)

// A fresh service's /metrics already has, at 0, the runs of every outcome and
// reason a run can end with and the networked modes' usual egress decisions,
// so that rate() and alerts see 0 instead of no series; and no series of an
// outcome no run can have.
func TestMetricsBeforeAnyRun(t *testing.T) {
	m := newMetrics(newAdmission(1, 2048, 0, 0), "test")
	for _, w := range []string{"write=accept", "write=pending", "write=commit"} {
		if v, ok := series(t, m, "brig_journal_write_failures_total")[w]; !ok || v != 0 {
			t.Errorf("brig_journal_write_failures_total{%s}: got %v (present %v), want 0", w, v, ok)
		}
	}
	if v, ok := series(t, m, "brig_build_info")["version=test"]; !ok || v != 1 {
		t.Errorf("brig_build_info{version=test}: got %v (present %v), want 1", v, ok)
	}
	runs := series(t, m, "brig_runs_total")
	for _, want := range []string{
		"language=python,outcome=succeeded,reason=",
		"language=javascript,outcome=failed,reason=error",
		"language=python,outcome=failed,reason=memory",
		"language=python,outcome=unknown,reason=memory",
		"language=javascript,outcome=unknown,reason=stopped",
		"language=python,outcome=blocked,reason=package_blocked",
		"language=javascript,outcome=failed,reason=package_unavailable",
		"language=python,outcome=failed,reason=internal",
		"language=javascript,outcome=unknown,reason=internal",
	} {
		if v, ok := runs[want]; !ok || v != 0 {
			t.Errorf("brig_runs_total{%s}: got %v (present %v), want 0", want, v, ok)
		}
	}
	for labels := range runs {
		if strings.Contains(labels, "outcome=unknown,reason=error") || strings.Contains(labels, "outcome=blocked,reason=error") ||
			strings.Contains(labels, "outcome=succeeded,reason=e") {
			t.Errorf("got a series of an outcome no run has: brig_runs_total{%s}", labels)
		}
	}
	if want := len(api.Languages) * 12; len(runs) != want {
		t.Errorf("got %d brig_runs_total series, want %d (each language: succeeded, 7 failed reasons, 4 unknown)", len(runs), want)
	}
	for _, want := range []string{
		"allowed=true,mode=domains,rule_class=domain",
		"allowed=false,mode=registries,rule_class=not_a_registry",
		"allowed=false,mode=any,rule_class=address_class",
	} {
		if _, ok := series(t, m, "brig_egress_decisions_total")[want]; !ok {
			t.Errorf("got no brig_egress_decisions_total{%s}, want it at 0", want)
		}
	}
	// The histograms, empty, with their HELP and TYPE.
	for _, h := range []string{"brig_run_queue_seconds", "brig_run_start_seconds", "brig_run_total_seconds", "brig_run_peak_memory_bytes"} {
		got := series(t, m, h)
		for _, lang := range api.Languages {
			if _, ok := got["language="+lang.String()]; !ok {
				t.Errorf("got %s %v, want a series of %s before any run", h, got, lang)
			}
		}
	}
	if b := series(t, m, "brig_egress_bytes_total"); len(b) != 2 {
		t.Errorf("got brig_egress_bytes_total %v, want sent and received at 0", b)
	}
	refused := series(t, m, "brig_runs_refused_total")
	for _, code := range []string{"invalid_request", "forbidden", "conflict", "too_large", "queue_full", "unavailable", "internal"} {
		if v, ok := refused["code="+code]; !ok || v != 0 {
			t.Errorf("brig_runs_refused_total{code=%q}: got %v (present %v), want 0", code, v, ok)
		}
	}
	if len(refused) != 7 {
		t.Errorf("got brig_runs_refused_total %v, want the 7 codes a run request can be refused with", refused)
	}
	// The host's memory cgroups: at least the root, and the number
	// /proc/cgroups gives (read after, so at least as many as the gauge
	// read, give or take other programs' groups between the two reads).
	got := series(t, m, "brig_host_memory_cgroups")[""]
	b, err := os.ReadFile("/proc/cgroups")
	if err != nil {
		t.Skipf("this host has no /proc/cgroups: %v", err)
	}
	var want float64
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "memory" {
			want, _ = strconv.ParseFloat(f[2], 64)
		}
	}
	if got < 1 || want < 1 || got < want-50 || got > want+50 {
		t.Errorf("brig_host_memory_cgroups: got %v, want about /proc/cgroups' %v", got, want)
	}
}

// A fresh service's /metrics has each route's success at 0.
func TestMetricsRoutesBeforeAnyRequest(t *testing.T) {
	s, _ := availableService(t, Config{})
	requests := series(t, s.metrics, "brig_http_requests_total")
	for _, route := range []string{"POST /v1/runs", "GET /v1/runs/{id}", "GET /v1/runs/{id}/events", "DELETE /v1/runs/{id}",
		"GET /v1/limits", "GET /v1/health", "GET /metrics", "GET /openapi.yaml"} {
		if v, ok := requests["code=200,route="+route]; !ok || v != 0 {
			t.Errorf("brig_http_requests_total{route=%q,code=\"200\"}: got %v (present %v), want 0", route, v, ok)
		}
	}
	if len(requests) != 8 {
		t.Errorf("got brig_http_requests_total %v, want the 8 routes' successes", requests)
	}
}

// TestCutTunnelCountsAsRefused: a tunnel to an allowed host cut for the name
// it carried (listed allowed, with the cut in its failure) counts as refused
// under the cut's class; one cut for the run's byte limit stays allowed.
func TestCutTunnelCountsAsRefused(t *testing.T) {
	m := newMetrics(newAdmission(1, 2048, 0, 0), "test")
	m.observeEgress(api.NetworkDomains, egress.Connection{Host: "ok.test", Port: 443, Allowed: true, Rule: "domain ok.test",
		Failure: `the SNI does not match the CONNECT host ("other.test", not "ok.test")`})
	m.observeEgress(api.NetworkDomains, egress.Connection{Host: "ok.test", Port: 443, Allowed: true, Rule: "domain ok.test",
		Failure: "the run's byte limit was reached"})
	got := series(t, m, "brig_egress_decisions_total")
	if v := got["allowed=false,mode=domains,rule_class=host_mismatch"]; v != 1 {
		t.Errorf("the cut tunnel: got %v refusals of class host_mismatch, want 1 (series %v)", v, got)
	}
	if v := got["allowed=true,mode=domains,rule_class=domain"]; v != 1 {
		t.Errorf("the byte limit's cut: got %v allowed of class domain, want 1 (series %v)", v, got)
	}
}

// TestEgressFailuresCounted: an allowed connection that did not get through
// or was cut counts under its failure's class, which names no host; one that
// went through, a refusal and a tunnel cut for its name do not count there.
func TestEgressFailuresCounted(t *testing.T) {
	m := newMetrics(newAdmission(1, 2048, 0, 0), "test")
	ok := egress.Connection{Host: "ok.test", Port: 443, Allowed: true, Rule: "domain ok.test"}
	for _, failure := range []string{
		"resolving ok.test: the resolver answered NXDOMAIN",
		"resolving ok.test: the resolver: i/o timeout",
		"connecting to ok.test: connect: connection refused",
		"connecting: connect: connection refused",
		"the run ended first",
		"the run's byte limit was reached",
		"the connection ended with 24 bytes the upstream had not taken, which were dropped",
		"writing the first bytes: write: broken pipe",
		"the request was cut: unexpected EOF",
		"the upstream ended the connection before it answered: read: connection reset by peer",
		"something new",
		// went through
		"",
		// a cut for the name: a refusal
		`the SNI does not match the CONNECT host ("other.test", not "ok.test")`,
	} {
		c := ok
		c.Failure = failure
		m.observeEgress(api.NetworkDomains, c)
	}
	m.observeEgress(api.NetworkAny, egress.Connection{Host: "x.test", Port: 80, Rule: "address class private (10.0.0.0/8)"})
	got := series(t, m, "brig_egress_failures_total")
	want := map[string]float64{
		"failure_class=resolve,mode=domains": 2, "failure_class=connect,mode=domains": 2, "failure_class=run_ended,mode=domains": 1,
		"failure_class=limit,mode=domains": 1, "failure_class=dropped,mode=domains": 1, "failure_class=write,mode=domains": 1,
		"failure_class=request_cut,mode=domains": 1, "failure_class=no_answer,mode=domains": 1, "failure_class=other,mode=domains": 1,
		// zero's series, there before any failure
		"failure_class=resolve,mode=registries": 0, "failure_class=connect,mode=registries": 0,
		"failure_class=resolve,mode=any": 0, "failure_class=connect,mode=any": 0,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got brig_egress_failures_total %v, want %v", got, want)
	}
	for k := range got {
		if strings.Contains(k, "ok.test") {
			t.Errorf("a label names a host: %s", k)
		}
	}
}
