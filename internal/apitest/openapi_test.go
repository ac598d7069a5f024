package apitest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/brig-sandbox/brig/api"
)

// Languages of API.md; package api has no constants for them.
const (
	python     = "python"
	javascript = "javascript"
)

func intp(n int) *int    { return &n }
func boolp(b bool) *bool { return &b }

// mustSpec loads the document or fails the test.
func mustSpec(tb testing.TB) *spec {
	tb.Helper()
	s, err := loadSpec(context.Background())
	if err != nil {
		tb.Fatalf("loading api/openapi.yaml: %v", err)
	}
	return s
}

// mustJSON marshals v or fails the test.
func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatalf("marshalling %T: %v", v, err)
	}
	return b
}

// TestDocument checks that the document loads and validates, and that its request
// bounds are the constants of package api.
func TestDocument(t *testing.T) {
	s := mustSpec(t)
	for _, name := range []string{"Request", "Network", "Result", "PackageResult", "NetworkReport",
		"Connection", "Usage", "Timing", "Event", "ErrorBody", "Error", "Limits", "Bound", "Health"} {
		if s.doc.Components.Schemas[name] == nil {
			t.Errorf("schema %s: got none, want one per type of api/api.go", name)
		}
	}

	props := s.doc.Components.Schemas["Request"].Value.Properties
	num := func(p *float64) float64 {
		if p == nil {
			return -1
		}
		return *p
	}
	length := func(p *uint64) float64 {
		if p == nil {
			return -1
		}
		return float64(*p)
	}
	for _, tc := range []struct {
		name string
		got  float64
		want float64
	}{
		{"timeout_seconds minimum", num(props["timeout_seconds"].Value.Min), api.MinTimeoutSeconds},
		{"timeout_seconds maximum", num(props["timeout_seconds"].Value.Max), api.MaxTimeoutSeconds},
		{"timeout_seconds default", props["timeout_seconds"].Value.Default.(float64), api.DefaultTimeoutSeconds},
		{"memory_mib minimum", num(props["memory_mib"].Value.Min), api.MinMemoryMiB},
		{"memory_mib maximum", num(props["memory_mib"].Value.Max), api.MaxMemoryMiB},
		{"memory_mib default", props["memory_mib"].Value.Default.(float64), api.DefaultMemoryMiB},
		{"code maxLength", length(props["code"].Value.MaxLength), api.MaxCodeChars},
		{"packages maxItems", length(props["packages"].Value.MaxItems), api.MaxPackages},
		{"packages items minLength", float64(props["packages"].Value.Items.Value.MinLength), api.MinPackageChars},
		{"packages items maxLength", length(props["packages"].Value.Items.Value.MaxLength), api.MaxPackageChars},
		{"env maxProperties", length(props["env"].Value.MaxProps), api.MaxEnvEntries},
		{"network domains maxItems", length(props["network"].Value.Properties["domains"].Value.MaxItems), api.MaxDomains},
		{"stdout maxLength", length(s.doc.Components.Schemas["Result"].Value.Properties["stdout"].Value.MaxLength), api.MaxStdoutChars},
		{"stderr maxLength", length(s.doc.Components.Schemas["Result"].Value.Properties["stderr"].Value.MaxLength), api.MaxStderrChars},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %v, want %v", tc.got, tc.want)
			}
		})
	}
}

// TestRequests checks hand-written request bodies against the Request schema.
func TestRequests(t *testing.T) {
	s := mustSpec(t)
	packages := func(n int) []string {
		p := make([]string, n)
		for i := range p {
			p[i] = fmt.Sprintf("pkg%d==1.0", i)
		}
		return p
	}
	env := func(n int) map[string]string {
		e := make(map[string]string, n)
		for i := range n {
			e[fmt.Sprintf("VAR_%d", i)] = "x"
		}
		return e
	}
	domains := func(n int) []string {
		d := make([]string, n)
		for i := range d {
			d[i] = fmt.Sprintf("host%d.example.com", i)
		}
		return d
	}
	minimal := func() api.Request { return api.Request{Language: python, Code: "print(1)"} }
	with := func(f func(r *api.Request)) api.Request {
		r := minimal()
		f(&r)
		return r
	}
	for _, tc := range []struct {
		name string
		body any // marshalled to JSON
		want bool
	}{
		{"valid minimal", minimal(), true},
		{"valid with every field", api.Request{
			ID:             "run-1.a:b_C",
			Language:       javascript,
			Code:           "console.log(1)",
			TimeoutSeconds: intp(300),
			MemoryMiB:      intp(2048),
			Packages:       []string{"lodash@4.17.21", "@types/node@20"},
			Env:            map[string]string{"FOO": "bar", "_x1": ""},
			Network:        &api.Network{Mode: api.NetworkDomains, Domains: []string{"example.com"}},
		}, true},
		{"valid lower bounds", with(func(r *api.Request) { r.TimeoutSeconds, r.MemoryMiB = intp(1), intp(128) }), true},
		{"valid network none", with(func(r *api.Request) { r.Network = &api.Network{Mode: api.NetworkNone} }), true},
		{"valid 50 packages", with(func(r *api.Request) { r.Packages = packages(50) }), true},
		{"valid 50 env entries", with(func(r *api.Request) { r.Env = env(50) }), true},
		{"valid 100 domains", with(func(r *api.Request) { r.Network = &api.Network{Mode: api.NetworkDomains, Domains: domains(100)} }), true},
		{"valid id 128 chars", with(func(r *api.Request) { r.ID = strings.Repeat("a", 128) }), true},
		{"valid code 100000 code points, more bytes", with(func(r *api.Request) { r.Code = strings.Repeat("é", 100_000) }), true},
		{"unknown field", map[string]any{"language": "python", "code": "x", "timeout": 5}, false},
		{"unknown network field", map[string]any{"language": "python", "code": "x", "network": map[string]any{"mode": "any", "ports": []int{80}}}, false},
		{"missing language", map[string]any{"code": "x"}, false},
		{"missing code", map[string]any{"language": "python"}, false},
		{"timeout 0", with(func(r *api.Request) { r.TimeoutSeconds = intp(0) }), false},
		{"timeout 301", with(func(r *api.Request) { r.TimeoutSeconds = intp(301) }), false},
		{"timeout not an integer", map[string]any{"language": "python", "code": "x", "timeout_seconds": 1.5}, false},
		{"memory 127", with(func(r *api.Request) { r.MemoryMiB = intp(127) }), false},
		{"memory 2049", with(func(r *api.Request) { r.MemoryMiB = intp(2049) }), false},
		{"code empty", with(func(r *api.Request) { r.Code = "" }), false},
		{"code 100001 code points", with(func(r *api.Request) { r.Code = strings.Repeat("x", 100_001) }), false},
		{"bad language", with(func(r *api.Request) { r.Language = "ruby" }), false},
		{"packages 51 items", with(func(r *api.Request) { r.Packages = packages(51) }), false},
		{"package 2 chars", with(func(r *api.Request) { r.Packages = []string{"ab"} }), false},
		{"package 215 chars", with(func(r *api.Request) { r.Packages = []string{strings.Repeat("a", 212) + "==1"} }), false},
		{"env 51 entries", with(func(r *api.Request) { r.Env = env(51) }), false},
		{"env value with NUL", with(func(r *api.Request) { r.Env = map[string]string{"A": "x\x00y"} }), false},
		{"env value not a string", map[string]any{"language": "python", "code": "x", "env": map[string]any{"A": 1}}, false},
		{"network mode bad", with(func(r *api.Request) { r.Network = &api.Network{Mode: "all"} }), false},
		{"network without mode (none)", map[string]any{"language": "python", "code": "x", "network": map[string]any{}}, true},
		{"network domains empty", map[string]any{"language": "python", "code": "x", "network": map[string]any{"mode": "domains", "domains": []string{}}}, false},
		{"network 101 domains", with(func(r *api.Request) { r.Network = &api.Network{Mode: api.NetworkDomains, Domains: domains(101)} }), false},
		{"id with space", with(func(r *api.Request) { r.ID = "run 1" }), false},
		{"id 129 chars", with(func(r *api.Request) { r.ID = strings.Repeat("a", 129) }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := mustJSON(t, tc.body)
			req, err := http.NewRequest(http.MethodPost, "http://brig/v1/runs", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			route, params, err := s.route(req)
			if err != nil {
				t.Fatalf("routing POST /v1/runs: %v", err)
			}
			err = openapi3filter.ValidateRequest(context.Background(), requestInput(req, route, params))
			if got := err == nil; got != tc.want {
				t.Errorf("valid: got %v, want %v (error: %v)", got, tc.want, err)
			}
		})
	}
}

// finishedResult is a failed run with every field set, as the server sends it.
func finishedResult() api.Result {
	return api.Result{
		ID:              "01J9Z3K4M5N6P7Q8R9S0T1V2W3",
		Language:        python,
		State:           api.StateFinished,
		Status:          api.StatusFailed,
		Reason:          api.ReasonError,
		Outcome:         api.OutcomeFailed,
		ExitCode:        intp(1),
		Stdout:          "hello\n",
		Stderr:          "Traceback (most recent call last):\n",
		StdoutTruncated: false,
		StderrTruncated: true,
		Packages:        []api.PackageResult{{Request: "requests>=0", Name: "requests", Version: "2.32.3", Cached: true}},
		Network: api.NetworkReport{Mode: api.NetworkDomains, Connections: []api.Connection{
			{Host: "example.com", Port: 443, Allowed: true, Rule: "domain example.com", BytesSent: 517, BytesReceived: 4096},
			{Host: "evil.test", Port: 80, Allowed: false, Rule: "not in the run's domains"},
		}},
		Usage:   api.Usage{WallMS: 1200, CPUMS: 800, PeakMemoryBytes: 64 << 20},
		Timing:  api.Timing{QueuedMS: 3, PrepareMS: 900, StartMS: 950, TotalMS: 2150},
		Message: "The program exited with status 1.",
	}
}

// queuedResult is a run that has not started: no status, no exit code.
func queuedResult() api.Result {
	return api.Result{
		ID:       "run-2",
		Language: javascript,
		State:    api.StateQueued,
		Packages: []api.PackageResult{},
		Network:  api.NetworkReport{Mode: api.NetworkNone, Connections: []api.Connection{}},
	}
}

// limits is a Limits body built from the constants of package api.
func limits() api.Limits {
	bound := func(lo, hi int, def *int) api.Bound { return api.Bound{Min: lo, Max: hi, Default: def} }
	return api.Limits{
		TimeoutSeconds:     bound(api.MinTimeoutSeconds, api.MaxTimeoutSeconds, intp(api.DefaultTimeoutSeconds)),
		MemoryMiB:          bound(api.MinMemoryMiB, api.MaxMemoryMiB, intp(api.DefaultMemoryMiB)),
		CodeChars:          bound(1, api.MaxCodeChars, nil),
		Packages:           bound(0, api.MaxPackages, intp(0)),
		PackageChars:       bound(api.MinPackageChars, api.MaxPackageChars, nil),
		EnvEntries:         bound(0, api.MaxEnvEntries, intp(0)),
		Domains:            bound(1, api.MaxDomains, nil),
		IDChars:            bound(1, api.MaxIDChars, nil),
		StdoutChars:        api.MaxStdoutChars,
		StderrChars:        api.MaxStderrChars,
		BodyBytes:          api.MaxBodyBytes,
		WritableFilesShare: 0.5,
		Languages:          []string{python, javascript},
		NetworkModes:       []string{api.NetworkNone, api.NetworkRegistries, api.NetworkDomains, api.NetworkAny},
		DefaultNetworkMode: api.NetworkNone,
		IDPattern:          api.IDPattern,
		EnvNamePattern:     api.EnvNamePattern,
		ReservedEnv:        []string{"HTTP_PROXY", "HTTPS_PROXY", "PYTHONPATH", "NODE_PATH"},
		Egress:             &api.EgressLimits{MaxConns: 64, ConnsPerSecond: 50, MaxBytes: 1 << 30, HandshakeTimeoutSeconds: 10},
	}
}

// withoutRule is finishedResult as JSON, its first connection without "rule".
func withoutRule(tb testing.TB) map[string]any {
	tb.Helper()
	var m map[string]any
	if err := json.Unmarshal(mustJSON(tb, finishedResult()), &m); err != nil {
		tb.Fatal(err)
	}
	conns := m["network"].(map[string]any)["connections"].([]any)
	delete(conns[0].(map[string]any), "rule")
	return m
}

// withField marshals v and adds one field to the JSON object.
func withField(tb testing.TB, v any, key string, value any) map[string]any {
	tb.Helper()
	var m map[string]any
	if err := json.Unmarshal(mustJSON(tb, v), &m); err != nil {
		tb.Fatal(err)
	}
	m[key] = value
	return m
}

// TestResponses checks sample responses, marshalled from the types of package api,
// against the operations they answer.
func TestResponses(t *testing.T) {
	s := mustSpec(t)
	errBody := func(code, field, msg string) api.ErrorBody {
		return api.ErrorBody{Error: api.Error{Code: code, Field: field, Message: msg}}
	}
	nilPackages := finishedResult()
	nilPackages.Packages = nil
	nilConnections := finishedResult()
	nilConnections.Network.Connections = nil
	badState := finishedResult()
	badState.State = "done"
	noMode := queuedResult()
	noMode.Network.Mode = ""
	badLimits := limits()
	badLimits.Languages = nil
	retry := http.Header{"Retry-After": {"5"}}
	for _, tc := range []struct {
		name        string
		method      string
		path        string
		status      int
		contentType string      // application/json when empty
		header      http.Header // more headers
		body        any         // marshalled to JSON unless a string
		want        bool
	}{
		{"finished Result", "POST", "/v1/runs", 200, "", nil, finishedResult(), true},
		{"queued Result", "GET", "/v1/runs/run-2", 200, "", nil, queuedResult(), true},
		{"Result with charset", "GET", "/v1/runs/run-2", 200, "application/json; charset=utf-8", nil, queuedResult(), true},
		{"stopped Result", "DELETE", "/v1/runs/run-2", 200, "", nil, finishedResult(), true},
		{"invalid request", "POST", "/v1/runs", 400, "", nil, errBody(api.ErrorInvalidRequest, "packages[0]", "pin it as requests==2.32.3, or leave it open as requests>=0"), true},
		{"forbidden", "GET", "/v1/limits", 403, "", nil, errBody(api.ErrorForbidden, "", "uid 1000 is not allowed"), true},
		{"not found", "GET", "/v1/runs/nope/events", 404, "", nil, errBody(api.ErrorNotFound, "", "no run has id nope"), true},
		{"conflict", "POST", "/v1/runs", 409, "", nil, errBody(api.ErrorConflict, "id", "id run-1 was used with a different request"), true},
		{"too large", "POST", "/v1/runs", 413, "", nil, errBody(api.ErrorTooLarge, "", "the body is larger than 4 MiB"), true},
		{"queue full", "POST", "/v1/runs", 429, "", retry, errBody(api.ErrorQueueFull, "", "retry in 5 seconds"), true},
		{"shutting down", "POST", "/v1/runs", 503, "", nil, errBody(api.ErrorUnavailable, "", "brig is shutting down"), true},
		{"internal", "GET", "/v1/health", 500, "", nil, errBody(api.ErrorInternal, "", "a defect"), true},
		{"Limits", "GET", "/v1/limits", 200, "", nil, limits(), true},
		{"Health", "GET", "/v1/health", 200, "", nil, api.Health{
			Status:           "ok",
			Languages:        map[string]string{python: "3.12.3", javascript: "20.11.1"},
			CgroupMode:       "v2",
			NetworkModes:     []string{api.NetworkNone, api.NetworkAny},
			Rootfs:           "/var/lib/brig/rootfs",
			Running:          1,
			Queued:           0,
			Registries:       map[string][]string{python: {"files.test", "registry.test"}, javascript: {}},
			PackageLanguages: []string{python},
		}, true},
		{"Health with an unknown package language", "GET", "/v1/health", 200, "", nil, api.Health{
			Status: "ok", Languages: map[string]string{python: "3.12.3"}, CgroupMode: "v2", NetworkModes: []string{api.NetworkNone}, Rootfs: "host",
			Registries: map[string][]string{python: {}, javascript: {}}, PackageLanguages: []string{"ruby"},
		}, false},
		{"Health without registries", "GET", "/v1/health", 200, "", nil, api.Health{
			Status: "ok", Languages: map[string]string{python: "3.12.3"}, CgroupMode: "v2", NetworkModes: []string{api.NetworkNone}, Rootfs: "host",
		}, false},
		{"Health with registries of an unknown language", "GET", "/v1/health", 200, "", nil, api.Health{
			Status: "ok", Languages: map[string]string{python: "3.12.3"}, CgroupMode: "v2", NetworkModes: []string{api.NetworkNone}, Rootfs: "host",
			Registries: map[string][]string{python: {}, javascript: {}, "ruby": {"gems.test"}}, PackageLanguages: []string{},
		}, false},
		{"metrics", "GET", "/metrics", 200, "text/plain; version=0.0.4; charset=utf-8", nil, "brig_queue_depth 0\n", true},

		{"Result with an extra field", "GET", "/v1/runs/run-1", 200, "", nil, withField(t, finishedResult(), "extra", 1), false},
		{"Result with packages null", "GET", "/v1/runs/run-1", 200, "", nil, nilPackages, false},
		{"Result with connections null", "GET", "/v1/runs/run-1", 200, "", nil, nilConnections, false},
		{"Result with a connection without its rule", "GET", "/v1/runs/run-1", 200, "", nil, withoutRule(t), false},
		{"Result with unknown state", "GET", "/v1/runs/run-1", 200, "", nil, badState, false},
		{"Result without network mode", "GET", "/v1/runs/run-1", 200, "", nil, noMode, false},
		{"Result as text", "GET", "/v1/runs/run-1", 200, "text/plain", nil, finishedResult(), false},
		{"queue full without Retry-After", "POST", "/v1/runs", 429, "", nil, errBody(api.ErrorQueueFull, "", "retry later"), false},
		{"unknown error code", "POST", "/v1/runs", 400, "", nil, errBody("bad", "", "no"), false},
		{"error without message", "POST", "/v1/runs", 400, "", nil, errBody(api.ErrorInvalidRequest, "code", ""), false},
		{"undeclared status", "GET", "/v1/limits", 418, "", nil, errBody(api.ErrorInternal, "", "teapot"), false},
		{"Limits with languages null", "GET", "/v1/limits", 200, "", nil, badLimits, false},
		{"Health with an unknown language", "GET", "/v1/health", 200, "", nil, api.Health{
			Status: "ok", Languages: map[string]string{"ruby": "3"}, NetworkModes: []string{},
		}, false},
		{"metrics as JSON", "GET", "/metrics", 200, "application/json", nil, map[string]int{"x": 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, "http://brig"+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			route, params, err := s.route(req)
			if err != nil {
				t.Fatalf("routing %s %s: %v", tc.method, tc.path, err)
			}
			header := http.Header{}
			for k, v := range tc.header {
				header[k] = v
			}
			ct := tc.contentType
			if ct == "" {
				ct = "application/json"
			}
			header.Set("Content-Type", ct)
			body, ok := tc.body.(string)
			if !ok {
				body = string(mustJSON(t, tc.body))
			}
			_, err = s.validateResponse(context.Background(), req, route, params, tc.status, header, []byte(body))
			if got := err == nil; got != tc.want {
				t.Errorf("valid: got %v, want %v (error: %v)", got, tc.want, err)
			}
		})
	}
}

// TestEvents checks events of each kind, marshalled from api.Event, against Event.
func TestEvents(t *testing.T) {
	s := mustSpec(t)
	badResult := queuedResult()
	badResult.Language = "ruby"
	for _, tc := range []struct {
		name  string
		event any // marshalled to JSON
		want  bool
	}{
		{"accepted", api.Event{Event: api.EventAccepted, ID: "run-1"}, true},
		{"package", api.Event{Event: api.EventPackage, Message: "Collecting numpy==1.26.4"}, true},
		{"started", api.Event{Event: api.EventStarted}, true},
		{"stdout", api.Event{Event: api.EventStdout, Data: "hello\n"}, true},
		{"stderr", api.Event{Event: api.EventStderr, Data: "warning\n"}, true},
		{"egress allowed", api.Event{Event: api.EventEgress, Host: "example.com", Port: 443, Allowed: boolp(true)}, true},
		{"egress denied", api.Event{Event: api.EventEgress, Host: "evil.test", Port: 80, Allowed: boolp(false)}, true},
		{"result finished", api.Event{Event: api.EventResult, Result: func() *api.Result { r := finishedResult(); return &r }()}, true},
		{"result queued", api.Event{Event: api.EventResult, Result: func() *api.Result { r := queuedResult(); return &r }()}, true},

		{"unknown kind", api.Event{Event: "exit"}, false},
		{"without kind", map[string]any{"data": "x"}, false},
		{"extra field", withField(t, api.Event{Event: api.EventStdout, Data: "x"}, "stream", 1), false},
		{"egress port out of range", api.Event{Event: api.EventEgress, Host: "a.test", Port: 70000, Allowed: boolp(true)}, false},
		{"accepted with a bad id", api.Event{Event: api.EventAccepted, ID: "run 1"}, false},
		{"result with an invalid result", api.Event{Event: api.EventResult, Result: &badResult}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.validateEvent(mustJSON(t, tc.event))
			if got := err == nil; got != tc.want {
				t.Errorf("valid: got %v, want %v (error: %v)", got, tc.want, err)
			}
		})
	}
}

// recorder is a testing.TB that keeps what Errorf reports instead of failing.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.errs...)
}

// roundTripFunc is a base transport that answers in process.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// respond is a base transport that answers every request with status, Content-Type
// ct and body, after checking that it got the request body the client sent.
func respond(tb testing.TB, status int, ct, body string, sent string) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		var got []byte
		if r.Body != nil {
			got, _ = io.ReadAll(r.Body)
		}
		if string(got) != sent {
			tb.Errorf("server got body %q, want %q", got, sent)
		}
		h := http.Header{"Content-Type": {ct}}
		if status == http.StatusTooManyRequests {
			h.Set("Retry-After", "1")
		}
		return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
	})
}

func ndjson(tb testing.TB, events ...api.Event) string {
	var b strings.Builder
	for _, e := range events {
		b.Write(mustJSON(tb, e))
		b.WriteByte('\n')
	}
	return b.String()
}

// TestTransport checks that Transport reports exactly the exchanges that do not
// match the document, and hands the caller the bodies unchanged.
func TestTransport(t *testing.T) {
	result := finishedResult()
	resultJSON := string(mustJSON(t, result))
	valid := `{"language":"python","code":"print(1)"}`
	unknown := `{"language":"python","code":"print(1)","extra":true}`
	stream := ndjson(t,
		api.Event{Event: api.EventAccepted, ID: "run-1"},
		api.Event{Event: api.EventStarted},
		api.Event{Event: api.EventStdout, Data: "hi\n"},
		api.Event{Event: api.EventResult, Result: &result},
	)
	for _, tc := range []struct {
		name       string
		method     string
		path       string
		accept     string
		reqBody    string
		status     int
		ct         string
		respBody   string
		wantErrors int
	}{
		{"valid run", "POST", "/v1/runs", "", valid, 200, "application/json", resultJSON, 0},
		{"valid stream", "POST", "/v1/runs", "application/x-ndjson", valid, 200, "application/x-ndjson", stream, 0},
		{"valid replay", "GET", "/v1/runs/run-1/events", "", "", 200, "application/x-ndjson", stream, 0},
		{"refused unknown field", "POST", "/v1/runs", "", unknown, 400, "application/json", `{"error":{"code":"invalid_request","field":"extra","message":"unknown field"}}`, 0},
		{"queue full", "POST", "/v1/runs", "", valid, 429, "application/json", `{"error":{"code":"queue_full","field":"","message":"retry in 1 second"}}`, 0},
		{"unknown path answered 404", "GET", "/v1/nothing", "", "", 404, "text/plain", "404 page not found\n", 0},
		{"wrong method answered 405", "PUT", "/v1/limits", "", "", 405, "text/plain", "", 0},
		{"trailing slash answered 404", "GET", "/v1/health/", "", "", 404, "application/json", `{"error":{"code":"not_found","field":"","message":"no such endpoint"}}`, 0},
		{"run with a trailing slash answered 404", "GET", "/v1/runs/run-1/", "", "", 404, "application/json", `{"error":{"code":"not_found","field":"","message":"no such endpoint"}}`, 0},
		{"encoded id answered 404", "GET", "/v1/runs/%2e%2e", "", "", 404, "application/json", `{"error":{"code":"not_found","field":"","message":"no such run"}}`, 0},

		{"accepted unknown field", "POST", "/v1/runs", "", unknown, 200, "application/json", resultJSON, 1},
		{"Result with an extra field", "GET", "/v1/runs/run-1", "", "", 200, "application/json", `{"extra":1,` + resultJSON[1:], 1},
		{"unknown path answered 200", "GET", "/v1/nothing", "", "", 200, "text/plain", "", 1},
		{"trailing slash answered 200", "GET", "/v1/limits/", "", "", 200, "text/plain", "", 1},
		{"JSON for a stream request", "POST", "/v1/runs", "application/x-ndjson", valid, 200, "application/json", resultJSON, 1},
		{"stream for a JSON request", "POST", "/v1/runs", "", valid, 200, "application/x-ndjson", stream, 1},
		{"stream with a bad line", "GET", "/v1/runs/run-1/events", "", "", 200, "application/x-ndjson", `{"event":"exit"}` + "\n" + stream, 1},
		{"stream without result", "GET", "/v1/runs/run-1/events", "", "", 200, "application/x-ndjson", ndjson(t, api.Event{Event: api.EventAccepted, ID: "run-1"}), 1},
		{"stream with an event after result", "GET", "/v1/runs/run-1/events", "", "", 200, "application/x-ndjson", stream + ndjson(t, api.Event{Event: api.EventStarted}), 2},
		{"stream without the last newline", "GET", "/v1/runs/run-1/events", "", "", 200, "application/x-ndjson", strings.TrimSuffix(stream, "\n"), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{TB: t}
			client := &http.Client{Transport: Transport(rec, respond(t, tc.status, tc.ct, tc.respBody, tc.reqBody))}
			var body io.Reader
			if tc.reqBody != "" {
				body = strings.NewReader(tc.reqBody)
			}
			req, err := http.NewRequest(tc.method, "http://brig"+tc.path, body)
			if err != nil {
				t.Fatal(err)
			}
			if body != nil {
				req.Header.Set("Content-Type", "application/json")
			}
			if tc.accept != "" {
				req.Header.Set("Accept", tc.accept)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", tc.method, tc.path, err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("reading the body: %v", err)
			}
			if string(got) != tc.respBody {
				t.Errorf("body: got %q, want %q", got, tc.respBody)
			}
			if errs := rec.errors(); len(errs) != tc.wantErrors {
				t.Errorf("errors: got %d %q, want %d", len(errs), errs, tc.wantErrors)
			}
		})
	}
}

// TestTransportStreams checks that an NDJSON body reaches the caller line by line
// while the server is still writing it.
func TestTransportStreams(t *testing.T) {
	pr, pw := io.Pipe()
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{
			StatusCode: http.StatusOK,
			Header:     http.Header{"Content-Type": {"application/x-ndjson"}},
			Body:       pr,
			Request:    r,
		}, nil
	})
	rec := &recorder{TB: t}
	req, err := http.NewRequest(http.MethodGet, "http://brig/v1/runs/run-1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := Transport(rec, base).RoundTrip(req)
	if err != nil {
		t.Fatalf("GET /v1/runs/run-1/events: %v", err)
	}
	defer resp.Body.Close()
	lines := bufio.NewReader(resp.Body)

	result := queuedResult()
	for _, e := range []api.Event{
		{Event: api.EventAccepted, ID: "run-1"},
		{Event: api.EventStdout, Data: "first\n"},
		{Event: "bogus"},
		{Event: api.EventResult, Result: &result},
	} {
		want := string(mustJSON(t, e)) + "\n"
		go func() { _, _ = io.WriteString(pw, want) }()
		got := make(chan string, 1)
		go func() { s, _ := lines.ReadString('\n'); got <- s }()
		select {
		case s := <-got:
			if s != want {
				t.Errorf("line: got %q, want %q", s, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("line %q: got nothing after 5s, want it before the stream ends", want)
		}
	}
	// The bogus event is reported as soon as it passes, before the stream ends.
	if errs := rec.errors(); len(errs) != 1 {
		t.Errorf("errors before the end: got %d %q, want 1", len(errs), errs)
	}
	pw.Close()
	if rest, err := io.ReadAll(lines); err != nil || len(rest) != 0 {
		t.Errorf("after the result: got %q, %v, want nothing", rest, err)
	}
	if errs := rec.errors(); len(errs) != 1 {
		t.Errorf("errors at the end: got %d %q, want 1", len(errs), errs)
	}
}

// TestTransportUnixSocket runs Transport over a real HTTP server on a Unix socket, the
// way the service's tests use it: the JSON body arrives whole and the NDJSON stream's
// first line arrives while the handler is still waiting to write the rest.
func TestTransportUnixSocket(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "brig.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatalf("listening on %s: %v", socket, err)
	}
	more := make(chan struct{})
	result := finishedResult()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "application/x-ndjson" {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(result)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		_ = enc.Encode(api.Event{Event: api.EventAccepted, ID: result.ID})
		w.(http.Flusher).Flush()
		select {
		case <-more:
		case <-r.Context().Done():
			return
		}
		_ = enc.Encode(api.Event{Event: api.EventResult, Result: &result})
	}))
	srv.Listener = ln
	srv.Start()
	defer srv.Close()

	rec := &recorder{TB: t}
	client := &http.Client{Transport: Transport(rec, &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
	})}
	body := `{"language":"python","code":"print(1)"}`

	resp, err := client.Post("http://brig/v1/runs", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST /v1/runs: %v", err)
	}
	var got api.Result
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || got.ID != result.ID {
		t.Errorf("result: got %+v, %v, want id %q", got, err, result.ID)
	}

	req, err := http.NewRequest(http.MethodPost, "http://brig/v1/runs", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err = client.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/runs (stream): %v", err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	if !lines.Scan() {
		t.Fatalf("first line: got none (%v), want the accepted event", lines.Err())
	}
	if want := `"event":"accepted"`; !strings.Contains(lines.Text(), want) {
		t.Errorf("first line: got %q, want it to contain %s", lines.Text(), want)
	}
	close(more)
	for lines.Scan() {
	}
	if err := lines.Err(); err != nil {
		t.Errorf("reading the stream: %v", err)
	}
	if errs := rec.errors(); len(errs) != 0 {
		t.Errorf("errors: got %q, want none", errs)
	}
}
