package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/jail"
)

// rawAPIRequest sends one plain HTTP request to ts over its socket (through the
// client's checking transport) and returns the response and its whole body.
func rawAPIRequest(t *testing.T, ts *testService, method, path string, body []byte, header ...string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, "http://brig"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := ts.client.HTTP.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return resp, b
}

// checkAPIErrorShape checks that resp is the API's one error shape,
// {"error": {"code": ..., "field": ..., "message": ...}} and nothing else, of
// status and code; it returns the error.
func checkAPIErrorShape(t *testing.T, resp *http.Response, b []byte, status int, code string) map[string]any {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("got status %d (%s), want %d", resp.StatusCode, b, status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("got Content-Type %q, want application/json", ct)
	}
	var top map[string]any
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatalf("got body %q, want JSON: %v", b, err)
	}
	e, ok := top["error"].(map[string]any)
	if !ok || len(top) != 1 {
		t.Fatalf("got body %s, want exactly {\"error\": {...}}", b)
	}
	for k := range e {
		if k != "code" && k != "field" && k != "message" {
			t.Errorf("got error member %q in %s, want only code, field and message", k, b)
		}
	}
	if e["code"] != code {
		t.Errorf("got code %v, want %q", e["code"], code)
	}
	if m, _ := e["message"].(string); strings.TrimSpace(m) == "" {
		t.Errorf("got message %v, want a sentence", e["message"])
	}
	// Always there, "" where no one field is at fault (API.md's shape; a
	// harness that reads error.field must not fail on a body that is not JSON).
	if _, isString := e["field"].(string); !isString {
		t.Errorf("got field %v in %s, want a string", e["field"], b)
	}
	return e
}

// metricSum sums the samples of metric name whose labels hold every one of
// labels (`key="value"`); found is whether there was any.
func metricSum(text, name string, labels ...string) (sum float64, found bool) {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		metric, labelSet, _ := strings.Cut(series, "{")
		if metric != name {
			continue
		}
		match := true
		for _, l := range labels {
			if !strings.Contains(labelSet, l) {
				match = false
			}
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			continue
		}
		sum, found = sum+v, true
	}
	return sum, found
}

// scrapeMetrics reads svc's metrics without the socket (so a peer that is not
// allowed can still be checked on).
func scrapeMetrics(svc *Service) string {
	rec := httptest.NewRecorder()
	svc.Metrics().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

// dial is a connection of the test's own to ts's socket, with a deadline of
// 30 s, closed at the test's end.
func (ts *testService) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", ts.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return c
}

// sendWhole posts to path, on a connection of its own, a body whose code is n
// characters, all of it before it reads the answer, as Python's http.client
// and Node's http do, and returns the answer: a refusal must not reach such a
// client as a broken pipe.
func sendWhole(t *testing.T, ts *testService, path string, n int) (*http.Response, []byte) {
	t.Helper()
	c := ts.dial(t)
	body := append([]byte(`{"language": "python", "code": "`), bytes.Repeat([]byte("x"), n)...)
	body = append(body, `"}`...)
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: brig\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, len(body))
	if _, err := c.Write(append([]byte(head), body...)); err != nil {
		t.Fatalf("sending the body: %v, want it read and an answer after it", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestAPIStatusCodes(t *testing.T) {
	ts := newTestService(t)
	ctx := context.Background()

	t.Run("200 for a run that fails", func(t *testing.T) {
		res := ts.mustRun(t, request("python", "raise SystemExit(3)"))
		if res.State != api.StateFinished || res.Status != api.StatusFailed || res.Reason != api.ReasonError || res.Outcome != api.OutcomeFailed {
			t.Fatalf("got %s/%s/%s/%s (%s), want finished/failed/error/failed", res.State, res.Status, res.Reason, res.Outcome, res.Message)
		}
		if res.ExitCode == nil || *res.ExitCode != 3 {
			t.Fatalf("got exit code %s, want 3", intPtrString(res.ExitCode))
		}
	})

	t.Run("200 for a run that succeeds", func(t *testing.T) {
		res := ts.mustRun(t, request("python", "print(6*7)"))
		if res.Outcome != api.OutcomeSucceeded || res.Status != api.StatusCompleted || res.Stdout != "42\n" {
			t.Fatalf("got %s/%s stdout %q (%s), want completed/succeeded \"42\\n\"", res.Status, res.Outcome, res.Stdout, res.Message)
		}
		if res.ExitCode == nil || *res.ExitCode != 0 {
			t.Fatalf("got exit code %s, want 0", intPtrString(res.ExitCode))
		}
	})

	t.Run("400 through the client", func(t *testing.T) {
		_, err := ts.client.Run(ctx, request("ruby", "puts 1"))
		ce := apiErr(t, err, http.StatusBadRequest, "language")
		if ce.API.Code != api.ErrorInvalidRequest {
			t.Fatalf("got code %q, want %q", ce.API.Code, api.ErrorInvalidRequest)
		}
	})

	t.Run("400 raw shape", func(t *testing.T) {
		resp, b := rawAPIRequest(t, ts, http.MethodPost, "/v1/runs", []byte(`{"language": "ruby", "code": "puts 1"}`), "Content-Type", "application/json")
		e := checkAPIErrorShape(t, resp, b, http.StatusBadRequest, api.ErrorInvalidRequest)
		if e["field"] != "language" {
			t.Fatalf("got field %v, want \"language\"", e["field"])
		}
	})

	t.Run("400 for a body that is not an object", func(t *testing.T) {
		resp, b := rawAPIRequest(t, ts, http.MethodPost, "/v1/runs", []byte(`[]`), "Content-Type", "application/json")
		e := checkAPIErrorShape(t, resp, b, http.StatusBadRequest, api.ErrorInvalidRequest)
		if f, _ := e["field"].(string); f != "" {
			t.Fatalf("got field %q, want none", f)
		}
	})

	t.Run("400 for network other than none", func(t *testing.T) {
		_, err := ts.client.Run(ctx, request("python", "print(1)", func(r *api.Request) { r.Network = &api.Network{Mode: api.NetworkAny} }))
		apiErr(t, err, http.StatusBadRequest, "network.mode")
	})

	t.Run("400 for packages", func(t *testing.T) {
		_, err := ts.client.Run(ctx, request("python", "print(1)", func(r *api.Request) { r.Packages = []string{"requests==2.32.3"} }))
		apiErr(t, err, http.StatusBadRequest, "packages")
	})

	t.Run("404 for an unknown id", func(t *testing.T) {
		_, err := ts.client.Get(ctx, "no-such-run")
		if ce := apiErr(t, err, http.StatusNotFound, ""); ce.API.Code != api.ErrorNotFound {
			t.Errorf("GET: got code %q, want %q", ce.API.Code, api.ErrorNotFound)
		}
		_, err = ts.client.Stop(ctx, "no-such-run")
		if ce := apiErr(t, err, http.StatusNotFound, ""); ce.API.Code != api.ErrorNotFound {
			t.Errorf("DELETE: got code %q, want %q", ce.API.Code, api.ErrorNotFound)
		}
		_, err = ts.client.Events(ctx, "no-such-run", nil)
		if ce := apiErr(t, err, http.StatusNotFound, ""); ce.API.Code != api.ErrorNotFound {
			t.Errorf("events: got code %q, want %q", ce.API.Code, api.ErrorNotFound)
		}
	})

	t.Run("404 for an unknown path", func(t *testing.T) {
		for _, p := range []string{"/v2/runs", "/v1/nothing", "/v1/runs/x/y/z"} {
			resp, b := rawAPIRequest(t, ts, http.MethodGet, p, nil)
			checkAPIErrorShape(t, resp, b, http.StatusNotFound, api.ErrorNotFound)
		}
	})

	t.Run("400 for a query a path does not take", func(t *testing.T) {
		// Refused, not ignored: ?uid=65534;x=1 (which Go's parser drops whole)
		// acted on the caller's own run, and ?id= on a POST ran under a
		// generated id, which a retry would run again.
		ts.mustRun(t, request("python", "print(1)", withRunID("query-1")))
		for _, tc := range []struct{ method, path, field, says string }{
			{http.MethodPost, "/v1/runs?id=x", "id", "in the body"},
			{http.MethodPost, "/v1/runs?wait=1", "wait", "takes none"},
			{http.MethodGet, "/v1/runs/query-1?uid=0;x=1", "", "can't be read"},
			{http.MethodDelete, "/v1/runs/query-1?uid=0;x=1", "", "can't be read"},
			{http.MethodGet, "/v1/runs/query-1?uid=0&uid=1", "uid", "give it once"},
			{http.MethodGet, "/v1/runs/query-1/events?UID=0", "UID", "takes only uid"},
			// The API audit found these answered 200, the query ignored.
			{http.MethodGet, "/v1/health?x", "x", "takes none"},
			{http.MethodGet, "/v1/limits?a=1", "a", "takes none"},
		} {
			resp, b := rawAPIRequest(t, ts, tc.method, tc.path, []byte(`{"language": "python", "code": "print(1)"}`), "Content-Type", "application/json")
			e := checkAPIErrorShape(t, resp, b, http.StatusBadRequest, api.ErrorInvalidRequest)
			if msg, _ := e["message"].(string); e["field"] != tc.field || !strings.Contains(msg, tc.says) {
				t.Errorf("%s %s: got field %v, message %q, want field %q and %q", tc.method, tc.path, e["field"], msg, tc.field, tc.says)
			}
		}
		if res, err := ts.client.Get(ctx, "query-1"); err != nil || res.State != api.StateFinished || res.Reason == api.ReasonStopped {
			t.Errorf("the run the refused DELETE named: got %+v, %v, want it finished, not stopped", res, err)
		}
	})

	t.Run("400 for a query, to a client that sends its whole body first", func(t *testing.T) {
		// Refused before the body is read: the body is still read and
		// dropped, so that the client reads the 400, not a broken pipe.
		resp, b := sendWhole(t, ts, "/v1/runs?id=x", 1<<20)
		checkAPIErrorShape(t, resp, b, http.StatusBadRequest, api.ErrorInvalidRequest)
	})

	t.Run("400 for a compressed body", func(t *testing.T) {
		resp, b := rawAPIRequest(t, ts, http.MethodPost, "/v1/runs", []byte("\x1f\x8b\x08\x00"), "Content-Type", "application/json", "Content-Encoding", "gzip")
		e := checkAPIErrorShape(t, resp, b, http.StatusBadRequest, api.ErrorInvalidRequest)
		if msg, _ := e["message"].(string); !strings.Contains(msg, "Content-Encoding") {
			t.Errorf("got message %q, want it to name the Content-Encoding", msg)
		}
	})

	t.Run("405 for a wrong method", func(t *testing.T) {
		for _, tc := range []struct{ method, path string }{
			{http.MethodPut, "/v1/runs"},
			{http.MethodPost, "/v1/limits"},
			{http.MethodDelete, "/v1/health"},
			{http.MethodPost, "/v1/runs/some-id"},
		} {
			resp, b := rawAPIRequest(t, ts, tc.method, tc.path, []byte(`{}`), "Content-Type", "application/json")
			checkAPIErrorShape(t, resp, b, http.StatusMethodNotAllowed, api.ErrorMethodNotAllowed)
		}
	})

	t.Run("409 for an id reused with another request", func(t *testing.T) {
		ts.mustRun(t, request("python", "print(1)", func(r *api.Request) { r.ID = "reused-1" }))
		_, err := ts.client.Run(ctx, request("python", "print(2)", func(r *api.Request) { r.ID = "reused-1" }))
		if ce := apiErr(t, err, http.StatusConflict, "id"); ce.API.Code != api.ErrorConflict {
			t.Fatalf("got code %q, want %q", ce.API.Code, api.ErrorConflict)
		}
		body, _ := json.Marshal(request("python", "print(1)", func(r *api.Request) { r.ID = "reused-1"; r.Env = map[string]string{"A": "1"} }))
		resp, b := rawAPIRequest(t, ts, http.MethodPost, "/v1/runs", body, "Content-Type", "application/json")
		checkAPIErrorShape(t, resp, b, http.StatusConflict, api.ErrorConflict)
	})

	t.Run("413 only past 4 MiB", func(t *testing.T) {
		// A body of exactly 4 MiB is read and validated (its code is too long);
		// one byte more is too large.
		for _, tc := range []struct {
			name   string
			size   int
			status int
			code   string
		}{
			{"exactly 4 MiB", api.MaxBodyBytes, http.StatusBadRequest, api.ErrorInvalidRequest},
			{"4 MiB and a byte", api.MaxBodyBytes + 1, http.StatusRequestEntityTooLarge, api.ErrorTooLarge},
		} {
			head, tail := `{"language": "python", "code": "`, `"}`
			b := []byte(head + strings.Repeat("x", tc.size-len(head)-len(tail)) + tail)
			resp, rb := rawAPIRequest(t, ts, http.MethodPost, "/v1/runs", b, "Content-Type", "application/json")
			e := checkAPIErrorShape(t, resp, rb, tc.status, tc.code)
			if tc.status == http.StatusBadRequest && e["field"] != "code" {
				t.Errorf("%s: got field %v, want \"code\"", tc.name, e["field"])
			}
		}
	})

	t.Run("405 says which methods are allowed", func(t *testing.T) {
		// RFC 9110 15.5.6: a 405 response MUST have an Allow header.
		// HEAD too: net/http's mux would answer it on a GET route.
		for _, tc := range []struct{ method, path, allow string }{
			{http.MethodPut, "/v1/runs", "POST"},
			{http.MethodPost, "/v1/limits", "GET"},
			{http.MethodPut, "/v1/runs/x", "GET, DELETE"},
			{http.MethodHead, "/v1/runs/x", "GET, DELETE"},
			{http.MethodHead, "/v1/runs/x/events", "GET"},
			{http.MethodHead, "/v1/health", "GET"},
			{http.MethodHead, "/v1/limits", "GET"},
			{http.MethodHead, "/metrics", "GET"},
			{http.MethodHead, "/openapi.yaml", "GET"},
		} {
			resp, _ := rawAPIRequest(t, ts, tc.method, tc.path, nil)
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != tc.allow {
				t.Errorf("%s %s: got %d with Allow %q, want 405 with %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), tc.allow)
			}
		}
	})

	t.Run("413 for a declared length over 4 MiB, before the body", func(t *testing.T) {
		// The client sends a few bytes of a body it says is 5 MiB, then waits:
		// the answer must come from the length alone, and it is counted as a
		// refusal as every other is.
		refused := counter(t, ts.metrics, "brig_runs_refused_total", "code=too_large")
		pr, pw := io.Pipe()
		defer pw.Close()
		go pw.Write([]byte(`{"language": "python", "code": "`))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// The transport's writer blocks reading the body: ended with the wait.
		context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://brig/v1/runs", pr)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = 5 << 20
		req.Header.Set("Content-Type", "application/json")
		// Not ts.client: its transport reads a request's whole body first, to
		// check it against openapi.yaml.
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", ts.socket)
		}}}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("got %v, want a 413 while the body is still unsent", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		checkAPIErrorShape(t, resp, b, http.StatusRequestEntityTooLarge, api.ErrorTooLarge)
		pw.CloseWithError(io.ErrUnexpectedEOF) // the handler's wait for the rest ends
		for deadline := time.Now().Add(5 * time.Second); counter(t, ts.metrics, "brig_runs_refused_total", "code=too_large") != refused+1; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("brig_runs_refused_total{code=too_large}: got %v, want %v", counter(t, ts.metrics, "brig_runs_refused_total", "code=too_large"), refused+1)
			}
		}
	})

	t.Run("413 for a body over 4 MiB", func(t *testing.T) {
		big := make([]byte, 0, 5<<20+64)
		big = append(big, `{"language": "python", "code": "`...)
		big = append(big, bytes.Repeat([]byte("x"), 5<<20)...)
		big = append(big, `"}`...)
		resp, b := rawAPIRequest(t, ts, http.MethodPost, "/v1/runs", big, "Content-Type", "application/json")
		checkAPIErrorShape(t, resp, b, http.StatusRequestEntityTooLarge, api.ErrorTooLarge)
	})

	t.Run("413 for a declared length over 4 MiB, to a client that sends it all first", func(t *testing.T) {
		// As Python's http.client and Node's http do: the whole body, then
		// the response. The answer must not be a broken pipe.
		resp, b := sendWhole(t, ts, "/v1/runs", 5<<20)
		e := checkAPIErrorShape(t, resp, b, http.StatusRequestEntityTooLarge, api.ErrorTooLarge)
		if msg, _ := e["message"].(string); !strings.Contains(msg, "env") {
			t.Errorf("message %q: want it to name what may make a body large, env too", msg)
		}
	})

	t.Run("no run for any refusal", func(t *testing.T) {
		// Only the four runs above that were accepted ran (two 200s, the
		// first of reused-1 and query-1). Shutdown waits for every run to be
		// counted.
		svc := ts.Service
		ts.stop(t)
		if got, _ := metricSum(scrapeMetrics(svc), "brig_runs_total"); got != 4 {
			t.Errorf("got brig_runs_total %v, want 4", got)
		}
		if n := len(ts.logs.Lines("run finished")); n != 4 {
			t.Errorf("got %d runs finished, want 4", n)
		}
	})
}

// TestAPIRetrySameIDRunsOnce shows that a retry (one id, one body) gets the
// first run's result without running the code again.
func TestAPIRetrySameIDRunsOnce(t *testing.T) {
	ts := newTestService(t)
	req := request("python", "import random; print(random.random())", func(r *api.Request) { r.ID = "retry-random" })
	first := ts.mustRun(t, req)
	if first.Outcome != api.OutcomeSucceeded || first.Stdout == "" {
		t.Fatalf("got %s stdout %q (%s), want a succeeded run that printed", first.Outcome, first.Stdout, first.Message)
	}
	second := ts.mustRun(t, req)
	if second.ID != first.ID || second.ID != "retry-random" {
		t.Errorf("got ids %q and %q, want both %q", first.ID, second.ID, "retry-random")
	}
	if second.Stdout != first.Stdout {
		t.Errorf("got stdout %q then %q, want the same (the code ran once)", first.Stdout, second.Stdout)
	}
	// The same request with its defaults written out is the same request.
	explicit := req
	timeout, memory := *req.TimeoutSeconds, api.DefaultMemoryMiB
	explicit.TimeoutSeconds, explicit.MemoryMiB = &timeout, &memory
	explicit.Network = &api.Network{Mode: api.NetworkNone}
	third := ts.mustRun(t, explicit)
	if third.Stdout != first.Stdout {
		t.Errorf("got stdout %q for the request with explicit defaults, want %q", third.Stdout, first.Stdout)
	}
	ts.stop(t)
	if n := len(ts.logs.Lines("run finished")); n != 1 {
		t.Fatalf("got %d runs finished, want 1", n)
	}
}

func TestAPIForbidden(t *testing.T) {
	ts := newTestService(t, func(c *Config) { c.AllowUIDs = []int{12345} })
	svc := ts.Service
	ctx := context.Background()

	t.Run("POST gets 403", func(t *testing.T) {
		_, err := ts.client.Run(ctx, request("python", "open('/tmp/ran','w')"))
		if ce := apiErr(t, err, http.StatusForbidden, ""); ce.API.Code != api.ErrorForbidden {
			t.Fatalf("got code %q, want %q", ce.API.Code, api.ErrorForbidden)
		}
	})
	t.Run("every endpoint gets 403", func(t *testing.T) {
		for _, p := range []string{"/v1/limits", "/v1/health", "/metrics", "/v1/runs/x"} {
			resp, b := rawAPIRequest(t, ts, http.MethodGet, p, nil)
			checkAPIErrorShape(t, resp, b, http.StatusForbidden, api.ErrorForbidden)
			// Nor does the peer keep the connection for more (the API
			// audit pipelined 5,000 refused requests on one).
			if !resp.Close {
				t.Errorf("GET %s: the 403 keeps the connection; want Connection: close", p)
			}
		}
	})
	t.Run("the start said root is left out", func(t *testing.T) {
		if n := len(ts.logs.Lines("root may not use the API")); n != 1 {
			t.Errorf("got %d log lines saying root may not use the API, want 1", n)
		}
	})
	t.Run("the refusal is counted once", func(t *testing.T) {
		got, _ := metricSum(scrapeMetrics(svc), "brig_runs_refused_total", `code="forbidden"`)
		if got != 1 {
			t.Fatalf("got brig_runs_refused_total{code=\"forbidden\"} %v after one refused POST, want 1", got)
		}
	})
	t.Run("nothing ran", func(t *testing.T) {
		ts.stop(t)
		if n := len(ts.logs.Lines("run finished")); n != 0 {
			t.Errorf("got %d runs finished, want none", n)
		}
		if got, _ := metricSum(scrapeMetrics(svc), "brig_runs_total"); got != 0 {
			t.Errorf("got brig_runs_total %v, want 0", got)
		}
	})
}

func TestAPIAllowedByGID(t *testing.T) {
	ts := newTestService(t, func(c *Config) { c.AllowUIDs = []int{12345}; c.AllowGIDs = []int{0} })
	if n := len(ts.logs.Lines("root may not use the API")); n != 0 {
		t.Errorf("got %d log lines saying root may not use the API, want none: gid 0 is allowed", n)
	}
	if lines := ts.logs.Lines("admission"); len(lines) != 1 || lines[0]["max_concurrent"] == nil || lines[0]["memory_budget_mib"] == nil {
		t.Errorf("got admission lines %v, want one with the effective max_concurrent and memory_budget_mib", lines)
	}
	res := ts.mustRun(t, request("python", "print('by gid')"))
	if res.Outcome != api.OutcomeSucceeded || res.Stdout != "by gid\n" {
		t.Fatalf("got %s stdout %q (%s), want succeeded \"by gid\\n\"", res.Outcome, res.Stdout, res.Message)
	}
}

func TestAPIQueueFull(t *testing.T) {
	ts := newTestService(t, func(c *Config) { c.MaxConcurrent = 1; c.QueueSize = 1 })
	ctx := context.Background()
	long := []string{"long-running", "long-queued"}
	var wg sync.WaitGroup
	results := make([]*api.Result, len(long))
	errs := make([]error, len(long))
	for i, id := range long {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = ts.client.Run(ctx, request("python", "import time; time.sleep(3)", func(r *api.Request) { r.ID = id }))
		}()
		// The second must arrive after the first has its slot.
		waitUntilAPI(t, func() bool { h, err := ts.client.Health(ctx); return err == nil && h.Running+h.Queued == i+1 })
	}
	if h, err := ts.client.Health(ctx); err != nil || h.Running != 1 || h.Queued != 1 {
		t.Fatalf("got health %+v, %v, want 1 running and 1 queued", h, err)
	}
	_, err := ts.client.Run(ctx, request("python", "print(3)"))
	ce := apiErr(t, err, http.StatusTooManyRequests, "")
	if ce.API.Code != api.ErrorQueueFull {
		t.Errorf("got code %q, want %q", ce.API.Code, api.ErrorQueueFull)
	}
	if ce.RetryAfter < time.Second {
		t.Errorf("got Retry-After %s, want at least 1s", ce.RetryAfter)
	}
	if got, _ := ts.client.Get(ctx, "long-queued"); got == nil || got.State != api.StateQueued {
		t.Errorf("got the queued run's result %+v, want state queued", got)
	}
	for _, id := range []string{"long-queued", "long-running"} {
		res, err := ts.client.Stop(ctx, id)
		if err != nil {
			t.Fatalf("DELETE %s: %v", id, err)
		}
		if res.Reason != api.ReasonStopped {
			t.Errorf("%s: got reason %q, want stopped", id, res.Reason)
		}
	}
	wg.Wait()
	for i, id := range long {
		if errs[i] != nil || results[i].Reason != api.ReasonStopped {
			t.Errorf("%s: got %+v, %v, want a result with reason stopped", id, results[i], errs[i])
		}
	}
}

// waitUntilAPI polls cond until it holds, for up to 10 s.
func waitUntilAPI(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("got no change in 10s, want the condition to hold")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAPIServiceEndpoints covers limits, health, metrics and the per-request
// log line on one service.
func TestAPIServiceEndpoints(t *testing.T) {
	// As brig serve passes its launcher's limits.
	ts := newTestService(t, func(c *Config) { c.RunProcesses, c.RunCPUs = jail.DefaultPids, jail.DefaultCPUs })
	ctx := context.Background()

	t.Run("Limits", func(t *testing.T) {
		l, err := ts.client.Limits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name          string
			got           api.Bound
			min, max, def int
			hasDef        bool
		}{
			{"timeout_seconds", l.TimeoutSeconds, 1, 300, 30, true},
			{"memory_mib", l.MemoryMiB, 128, 2048, 512, true},
			{"code_chars", l.CodeChars, 1, 100000, 0, false},
			{"packages", l.Packages, 0, 50, 0, true},
			{"package_chars", l.PackageChars, 3, 214, 0, false},
			{"env_entries", l.EnvEntries, 0, 50, 0, true},
			{"domains", l.Domains, 1, 100, 0, false},
			{"id_chars", l.IDChars, 1, 128, 0, false},
		} {
			if tc.got.Min != tc.min || tc.got.Max != tc.max {
				t.Errorf("%s: got %d..%d, want %d..%d", tc.name, tc.got.Min, tc.got.Max, tc.min, tc.max)
			}
			if tc.hasDef && (tc.got.Default == nil || *tc.got.Default != tc.def) {
				t.Errorf("%s: got default %s, want %d", tc.name, intPtrString(tc.got.Default), tc.def)
			}
		}
		if l.StdoutChars != 1_000_000 || l.StderrChars != 100_000 {
			t.Errorf("got stdout %d, stderr %d characters, want 1000000 and 100000", l.StdoutChars, l.StderrChars)
		}
		if share := float64(jail.ScratchBytes(512<<20)) / (512 << 20); l.WritableFilesShare != share || share <= 0 || share > 1 {
			t.Errorf("got writable_files_share %v, want the jail's %v", l.WritableFilesShare, share)
		}
		if l.BodyBytes != 4<<20 {
			t.Errorf("got body_bytes %d, want %d", l.BodyBytes, 4<<20)
		}
		if l.Processes != jail.DefaultPids || l.CPUs != jail.DefaultCPUs {
			t.Errorf("got processes %d, cpus %v, want the launcher's %d and %v", l.Processes, l.CPUs, jail.DefaultPids, jail.DefaultCPUs)
		}
		if !slices.Equal(l.Languages, []string{"python", "javascript"}) {
			t.Errorf("got languages %v, want [python javascript]", l.Languages)
		}
		if !slices.Equal(l.NetworkModes, []string{"none"}) {
			t.Errorf("got network modes %v, want [none]", l.NetworkModes)
		}
		for _, name := range []string{"PATH", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "PYTHONPATH", "NODE_PATH"} {
			if !slices.Contains(l.ReservedEnv, name) {
				t.Errorf("got reserved_env %v, want it to hold %s", l.ReservedEnv, name)
			}
		}
	})

	t.Run("Health", func(t *testing.T) {
		h, err := ts.client.Health(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if h.Status != "ok" {
			t.Errorf("got status %q, want ok", h.Status)
		}
		if h.Languages["python"] == "" || h.Languages["javascript"] == "" {
			t.Errorf("got languages %v, want python and javascript with versions", h.Languages)
		}
		if h.CgroupMode == "" {
			t.Errorf("got cgroup_mode %q, want one", h.CgroupMode)
		}
		if !slices.Equal(h.NetworkModes, []string{"none"}) {
			t.Errorf("got network_modes %v, want [none]", h.NetworkModes)
		}
		if h.Running != 0 || h.Queued != 0 {
			t.Errorf("got %d running, %d queued, want none", h.Running, h.Queued)
		}
	})

	t.Run("Metrics", func(t *testing.T) {
		ts.mustRun(t, request("python", "print(1)"))
		// The run is counted just after its result is sent (service.go finish):
		// give it a moment.
		waitUntilAPI(t, func() bool {
			v, _ := metricSum(scrapeMetrics(ts.Service), "brig_runs_total", `outcome="succeeded"`)
			return v >= 1
		})
		resp, b := rawAPIRequest(t, ts, http.MethodGet, "/metrics", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("got status %d, want 200", resp.StatusCode)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
			t.Errorf("got Content-Type %q, want text/plain (Prometheus text format)", ct)
		}
		text := string(b)
		if v, ok := metricSum(text, "brig_runs_total", `outcome="succeeded"`, `language="python"`); !ok || v < 1 {
			t.Errorf("got brig_runs_total{outcome=\"succeeded\"} %v (found %v), want at least 1", v, ok)
		}
		for _, name := range []string{"brig_queue_depth", "brig_runs_in_flight", "brig_run_total_seconds_bucket"} {
			if _, ok := metricSum(text, name); !ok {
				t.Errorf("got no %s sample, want one", name)
			}
		}
		if v, _ := metricSum(text, "brig_run_total_seconds_count", `language="python"`); v < 1 {
			t.Errorf("got brig_run_total_seconds_count %v, want at least 1", v)
		}
	})

	t.Run("Request log line", func(t *testing.T) {
		rawAPIRequest(t, ts, http.MethodGet, "/v1/limits", nil)
		rawAPIRequest(t, ts, http.MethodPost, "/v1/runs", []byte(`{"language": "ruby", "code": "x"}`), "Content-Type", "application/json")
		lines := ts.logs.Lines("request")
		find := func(method, path string, status int) map[string]any {
			for _, l := range lines {
				if l["method"] == method && l["path"] == path && l["status"] == float64(status) {
					return l
				}
			}
			return nil
		}
		for _, tc := range []struct {
			method, path string
			status       int
		}{
			{http.MethodGet, "/v1/limits", http.StatusOK},
			{http.MethodPost, "/v1/runs", http.StatusBadRequest},
		} {
			l := find(tc.method, tc.path, tc.status)
			if l == nil {
				t.Errorf("got request lines %v, want one for %s %s with status %d", lines, tc.method, tc.path, tc.status)
				continue
			}
			if d, ok := l["duration_ms"].(float64); !ok || d < 0 {
				t.Errorf("got duration_ms %v in %v, want a number of milliseconds", l["duration_ms"], l)
			}
		}
		if l := find(http.MethodPost, "/v1/runs", http.StatusBadRequest); l != nil && l["error_code"] != api.ErrorInvalidRequest {
			t.Errorf("got error_code %v for the 400, want %q", l["error_code"], api.ErrorInvalidRequest)
		}
		// A POST's line names its run, the one it made or the one its id
		// conflicts with (the operator probe of 2026-12-06).
		ts.mustRun(t, request("python", "print(1)", withRunID("logged-1")))
		if _, err := ts.client.Run(context.Background(), request("python", "print(2)", withRunID("logged-1"))); err == nil {
			t.Fatal("a second request under the id: got no error, want 409")
		}
		named := map[float64]bool{}
		for _, l := range ts.logs.Lines("request") {
			if l["method"] == http.MethodPost && l["id"] == "logged-1" {
				named[l["status"].(float64)] = true
			}
		}
		if !named[http.StatusOK] || !named[http.StatusConflict] {
			t.Errorf("the POSTs' request lines name the run logged-1 for statuses %v, want 200 and 409", named)
		}
	})
}

// TestAPINoRedirects: a path that is not a route is 404 in the error shape,
// never a redirect to a cleaned path (ServeMux's habit), whatever dots,
// slashes or encodings it is written with.
func TestAPINoRedirects(t *testing.T) {
	ts := newTestService(t)
	ts.mustRun(t, request("python", "print(1)", withRunID("b")))
	// Not following redirects: a 3xx must show as itself.
	hc := &http.Client{Transport: ts.client.HTTP.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct{ name, method, path string }{
		{"dot-dot to the host's files", http.MethodGet, "/v1/runs/../../etc/passwd"},
		{"dot-dot onto a route", http.MethodGet, "/v1/runs/../health"},
		{"dot-dot onto a run", http.MethodGet, "/v1/runs/a/../b"},
		{"dot-dot onto a run's events", http.MethodGet, "/v1/runs/a/../b/events"},
		{"dot-dot DELETE", http.MethodDelete, "/v1/runs/a/../b"},
		{"dot segment", http.MethodGet, "/v1/./health"},
		{"double slash in front", http.MethodGet, "//v1/health"},
		{"double slash inside", http.MethodGet, "/v1//health"},
		{"encoded dot-dot", http.MethodGet, "/v1/runs/%2e%2e/%2e%2e/etc/passwd"},
		{"encoded dot-dot as the id", http.MethodGet, "/v1/runs/%2e%2e"},
		{"encoded dot as the id", http.MethodGet, "/v1/runs/%2E"},
		{"encoded slashes", http.MethodGet, "/v1/runs/a%2f..%2fb"},
		{"encoded slash in an id", http.MethodGet, "/v1/runs/b%2f0"},
		{"encoded slash in an id's events", http.MethodGet, "/v1/runs/b%2F0/events"},
		{"trailing slash", http.MethodGet, "/v1/health/"},
		{"trailing slash on a run", http.MethodGet, "/v1/runs/b/"},
		{"trailing slash on events", http.MethodGet, "/v1/runs/b/events/"},
		{"trailing slash on runs", http.MethodGet, "/v1/runs/"},
		{"trailing slash on POST", http.MethodPost, "/v1/runs/"},
		{"trailing slash on metrics", http.MethodGet, "/metrics/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, "http://brig"+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if loc := resp.Header.Get("Location"); loc != "" {
				t.Errorf("got Location %q, want no redirect", loc)
			}
			checkAPIErrorShape(t, resp, b, http.StatusNotFound, api.ErrorNotFound)
		})
	}
	// The canonical paths still answer.
	for _, p := range []string{"/v1/runs/b", "/v1/runs/b/events", "/v1/health", "/"} {
		resp, b := rawAPIRequest(t, ts, http.MethodGet, p, nil)
		want := http.StatusOK
		if p == "/" {
			want = http.StatusNotFound
		}
		if resp.StatusCode != want {
			t.Errorf("GET %s: got %d (%s), want %d", p, resp.StatusCode, b, want)
		}
	}
}

// TestLongPathIsClipped: a 404 or a 405 quotes a path of a megabyte, and the
// request's log line logs it, clipped as a refusal's field is (the API audit:
// 900 kB answers, and 1 MB of log a request from a peer not even allowed).
func TestLongPathIsClipped(t *testing.T) {
	ts := newTestService(t)
	long := "/v1/runs/" + strings.Repeat("A", 900_000)
	for _, method := range []string{http.MethodGet, http.MethodPut} {
		resp, b := rawAPIRequest(t, ts, method, long, nil)
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed || len(b) > maxMessageBytes+1024 {
			t.Errorf("%s: got %d with %d bytes; want 404 or 405 within %d bytes", method, resp.StatusCode, len(b), maxMessageBytes+1024)
		}
	}
	lines := ts.logs.Lines("request")
	if len(lines) < 2 {
		t.Fatalf("got %d request log lines, want one a request", len(lines))
	}
	for _, l := range lines {
		if p, _ := l["path"].(string); len(p) > maxFieldBytes {
			t.Errorf("a request's log line has a path of %d bytes; want at most %d", len(p), maxFieldBytes)
		}
	}
}

// TestConnectionsBoundedPerUID: a uid holds at most maxConnsPerUID
// connections; one past it is answered 503 in the API's shape and closed,
// and a place given back is taken again (the API audit: 20,000 idle
// connections from a peer not even allowed took the service's descriptors,
// and then crashed it).
func TestConnectionsBoundedPerUID(t *testing.T) {
	old := maxConnsPerUID
	maxConnsPerUID = 3
	t.Cleanup(func() { maxConnsPerUID = old })
	ts := newTestService(t)
	var held []net.Conn
	for range 3 {
		c := ts.dial(t)
		held = append(held, c)
	}
	// The accepts are the service's: wait until it has counted them.
	time.Sleep(200 * time.Millisecond)
	c := ts.dial(t)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the fourth connection: %v; want a 503", err)
	}
	b, _ := io.ReadAll(resp.Body)
	checkAPIErrorShape(t, resp, b, http.StatusServiceUnavailable, api.ErrorUnavailable)
	if resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "connections") {
		t.Errorf("got Retry-After %q and %s; want a Retry-After and the bound named", resp.Header.Get("Retry-After"), b)
	}
	// A client that sends its request before it reads, as curl and
	// http.client do, can send it and read the 503: the refused connection
	// is read until it closes, where closing it at once failed the client's
	// write with EPIPE, and curl gave up without reading (the contract
	// audit: 8 times in 10).
	for i := range 5 {
		c := ts.dial(t)
		time.Sleep(50 * time.Millisecond) // the 503 is written by now
		if _, err := fmt.Fprintf(c, "POST /v1/runs HTTP/1.1\r\nHost: brig\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"); err != nil {
			t.Fatalf("connection %d past the bound: sending its request: %v; want it read, then the 503", i, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("connection %d past the bound, its request sent first: %v, %v; want a 503", i, resp, err)
		}
		c.Close()
	}
	held[0].Close()
	time.Sleep(200 * time.Millisecond)
	if _, err := ts.client.Health(context.Background()); err != nil {
		t.Errorf("after a connection closed: %v; want its place taken again", err)
	}
}

// TestBodiesBounded: the request bodies being read share bodyMemory; a body
// that finds no room within bodyWait is refused 503 with a Retry-After (the
// API audit: 150 bodies of 4 MiB held unsent took the service 878 MB), and
// the room comes back when a body is done.
func TestBodiesBounded(t *testing.T) {
	oldMem, oldWait := bodyMemory, bodyWait
	bodyMemory, bodyWait = 1<<20, 300*time.Millisecond
	t.Cleanup(func() { bodyMemory, bodyWait = oldMem, oldWait })
	ts := newTestService(t)
	hog := ts.dial(t)
	if _, err := fmt.Fprintf(hog, "POST /v1/runs HTTP/1.1\r\nHost: brig\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"language\"", 1<<20); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // its room taken
	_, err := ts.client.Run(context.Background(), request("python", "print(1)"))
	if ce := apiErr(t, err, http.StatusServiceUnavailable, ""); ce.API.Code != api.ErrorUnavailable || ce.RetryAfter == 0 {
		t.Errorf("with the room taken: got %+v; want unavailable with a Retry-After", ce)
	}
	hog.Close()
	time.Sleep(200 * time.Millisecond)
	if res := ts.mustRun(t, request("python", "print(2)")); res.Stdout != "2\n" {
		t.Errorf("once the room is back: got %s %q (%s), want the run", res.Outcome, res.Stdout, res.Message)
	}
}

// TestJSONStringSize: replySize's measure of a string is what encoding/json
// writes for it, escapes and invalid bytes included.
func TestJSONStringSize(t *testing.T) {
	cases := []string{"", "plain", "\x01\x1f\x7f", "\"\\\n\r\t\b\f", "été ✓ 🙂", "\u2028\u2029", "\xff\xfe bad", "a\x00b"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		b := make([]byte, rng.IntN(64))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.Encode(s)
		if got, want := jsonStringSize(s), int64(buf.Len()-1); got != want {
			t.Errorf("%q: got %d, want %d", s, got, want)
		}
	}
}

// TestReplyBudget: the large answers share replyMemory, each uid at most
// replyShare of it; a small answer is not counted; wait takes the room once
// it is given back.
func TestReplyBudget(t *testing.T) {
	oldMem, oldShare, oldSmall := replyMemory, replyShare, replySmall
	replyMemory, replyShare, replySmall = 100, 60, 10
	t.Cleanup(func() { replyMemory, replyShare, replySmall = oldMem, oldShare, oldSmall })
	var b replyBudget
	a1, err := b.take(1, 50)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.take(1, 20); err == nil {
		t.Error("uid 1 past its share: got the room, want a refusal")
	}
	if small, err := b.take(1, 9); err != nil {
		t.Errorf("a small answer: got %v, want it not counted", err)
	} else {
		small()
	}
	a2, err := b.take(2, 50)
	if err != nil {
		t.Fatalf("uid 2 within its share and the room: %v", err)
	}
	var e *apiError
	if _, err := b.take(3, 20); !errors.As(err, &e) || e.body.Code != api.ErrorUnavailable || e.retryAfter == 0 {
		t.Errorf("past the room: got %v, want unavailable with a Retry-After", err)
	}
	got := make(chan error, 1)
	go func() {
		release, err := b.wait(context.Background(), 3, 20)
		if err == nil {
			release()
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("wait returned %v with no room, want it to wait", err)
	default:
	}
	a1()
	if err := <-got; err != nil {
		t.Errorf("wait once room is back: %v", err)
	}
	a2()
	if b.used != 0 || len(b.byUID) != 0 {
		t.Errorf("after every release: used %d, by uid %v; want nothing", b.used, b.byUID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	hold, _ := b.take(1, 60)
	if _, err := b.wait(ctx, 1, 60); err == nil {
		t.Error("wait past the share until ctx ends: got the room")
	}
	hold()
}

// TestLargeAnswersWithinReplyMemory: a client that asks for a large result
// and does not read it holds its share of the room until it reads or its
// write times out; past its share the next large answer is 503, and once
// the answer is read, the room is back. (The red team's 100 unread answers
// of 6 MB of JSON took the service 1.5 GB.)
func TestLargeAnswersWithinReplyMemory(t *testing.T) {
	ts := newTestService(t)
	req := request("python", "import sys\nsys.stdout.write('\\x01' * 300000)")
	req.ID = "large-answer"
	res := ts.mustRun(t, req)
	if len(res.Stdout) != 300000 {
		t.Fatalf("got %d bytes of stdout (%s %s), want 300000", len(res.Stdout), res.Outcome, res.Message)
	}
	size := replySize(res)
	oldMem, oldShare, oldSmall := replyMemory, replyShare, replySmall
	replyMemory, replyShare, replySmall = 4*size, size+size/2, 1<<10
	t.Cleanup(func() { replyMemory, replyShare, replySmall = oldMem, oldShare, oldSmall })
	for _, path := range []string{"/v1/runs/large-answer", "/v1/runs/large-answer/events"} {
		t.Run(path, func(t *testing.T) {
			hog := ts.dial(t)
			if _, err := fmt.Fprintf(hog, "GET %s HTTP/1.1\r\nHost: brig\r\n\r\n", path); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond) // its answer written into the socket, unread
			ctx := context.Background()
			if _, err := ts.client.Get(ctx, "large-answer"); err == nil {
				t.Fatal("with the uid's share held: got the result, want 503")
			} else if ce := apiErr(t, err, http.StatusServiceUnavailable, ""); ce.API.Code != api.ErrorUnavailable || ce.RetryAfter == 0 {
				t.Errorf("with the uid's share held: got %+v, want unavailable with a Retry-After", ce)
			}
			// Refused, a journaled record is not decoded: 5 refusals allocate
			// less than two decoded copies of its output (10.6 MB before
			// readRecord, 84 to 131 kB with it).
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range 5 {
				if _, err := ts.client.Get(ctx, "large-answer"); err == nil {
					t.Fatal("with the uid's share held: got the result, want 503")
				}
			}
			runtime.ReadMemStats(&after)
			if n := after.TotalAlloc - before.TotalAlloc; n >= 2*uint64(len(res.Stdout)) {
				t.Errorf("5 refused answers allocated %d bytes, more than two decoded copies of the output (%d bytes each): the record was decoded before its room was taken", n, len(res.Stdout))
			}
			// A reused id is a 409 whatever the room: its key is compared
			// before any is taken (it was a 503 while the share was held,
			// the review of 2026-12-06).
			other := request("python", "print('other')")
			other.ID = "large-answer"
			_, err := ts.client.Run(ctx, other)
			apiErr(t, err, http.StatusConflict, "id")
			if _, err := io.Copy(io.Discard, io.LimitReader(hog, 1<<10)); err != nil {
				t.Fatal(err)
			}
			go io.Copy(io.Discard, hog) // read now, to its end
			deadline := time.Now().Add(10 * time.Second)
			for {
				got, err := ts.client.Get(ctx, "large-answer")
				if err == nil {
					if got.Stdout != res.Stdout {
						t.Errorf("got %d bytes of stdout, want the run's %d", len(got.Stdout), len(res.Stdout))
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the room was not back 10 s after the answer was read: %v", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}
