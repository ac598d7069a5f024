// Package apitest checks the HTTP exchanges of brig's tests against the OpenAPI
// description of the run API (api/openapi.yaml), so that the document, the server and
// the Go types in package api cannot drift apart unnoticed.
//
// Typical use, in a test that talks to a server on a Unix socket:
//
//	client := &http.Client{Transport: apitest.Transport(t, &http.Transport{
//		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
//			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
//		},
//	})}
//	resp, err := client.Post("http://brig/v1/runs", "application/json", body)
//
// Every response the server gives (and every request it accepted) is then validated;
// a mismatch fails the test with tb.Errorf.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/brig-sandbox/brig/api"
)

// Media types of the API.
const (
	mediaJSON   = "application/json"
	mediaNDJSON = "application/x-ndjson"
)

// specHost is the host of the document's server URL (http://brig). Requests are routed
// as if sent there, whatever host the client wrote: the service ignores it.
const specHost = "brig"

// Transport wraps base so that every exchange is checked against api/openapi.yaml
// with kin-openapi: every response (status, headers that the spec requires, body
// against the media type's schema; for application/x-ndjson each line separately
// against Event) must validate, and every request the server accepted (any status
// other than 400 and 413) must validate too, so that the schema is never looser or
// stricter than the server. A failure is reported with tb.Errorf naming method, path,
// status and the validation error.
//
// Details: the URL's host is ignored (routing is as if sent to http://brig). A
// request for a path or method that the document does not have is reported only when
// the server did not answer it with 404 or 405. A request body without a Content-Type
// is validated as JSON. A 200 to POST /v1/runs must be a stream exactly when the
// request's Accept names application/x-ndjson. An NDJSON body is checked line by line
// as the caller reads it, so events still arrive while the run goes on (lines the
// caller never reads are not checked); when the stream ends cleanly (io.EOF) its last
// line must be a "result" event, ending in a newline, with nothing after it. A nil
// base means http.DefaultTransport.
func Transport(tb testing.TB, base http.RoundTripper) http.RoundTripper {
	tb.Helper()
	s, err := loadSpec(context.Background())
	if err != nil {
		tb.Fatalf("loading api/openapi.yaml: %v", err)
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{tb: tb, base: base, spec: s}
}

// spec is the loaded document with what validation needs of it.
type spec struct {
	doc    *openapi3.T
	router routers.Router
	event  *openapi3.Schema
}

// loadSpec loads api.OpenAPI, validates it and builds its router.
func loadSpec(ctx context.Context) (*spec, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	if err != nil {
		return nil, fmt.Errorf("parsing: %w", err)
	}
	if err := doc.Validate(ctx); err != nil {
		return nil, fmt.Errorf("validating the document: %w", err)
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("building the router: %w", err)
	}
	event := doc.Components.Schemas["Event"]
	if event == nil || event.Value == nil {
		return nil, errors.New("the document has no Event schema")
	}
	return &spec{doc: doc, router: router, event: event.Value}, nil
}

// route finds the operation of req, routed as if sent to the document's server.
func (s *spec) route(req *http.Request) (*routers.Route, map[string]string, error) {
	route, params, err := s.router.FindRoute(normalize(req))
	if err != nil {
		return nil, nil, err
	}
	// The legacy router matches /v1/runs/{id} with an empty id for /v1/runs: no
	// path of the document has an empty segment.
	for name, v := range params {
		if v == "" {
			return nil, nil, fmt.Errorf("%s %s: empty path parameter %q: %w", req.Method, req.URL.Path, name, routers.ErrPathNotFound)
		}
	}
	// It also forgives a trailing slash (/v1/health/ routes as /v1/health). A
	// path of the document is exactly its template with the parameters put in;
	// the service answers anything else with 404.
	exact := route.Path
	for name, v := range params {
		exact = strings.ReplaceAll(exact, "{"+name+"}", v)
	}
	if exact != req.URL.Path && exact != req.URL.EscapedPath() {
		return nil, nil, fmt.Errorf("%s %s: the document's path is %s: %w", req.Method, req.URL.Path, route.Path, routers.ErrPathNotFound)
	}
	return route, params, nil
}

// normalize returns a copy of req whose URL has the document's scheme and
// host, so that the server URL matches whatever host the client used on the socket.
func normalize(req *http.Request) *http.Request {
	out := req.Clone(req.Context())
	u := *req.URL
	u.Scheme, u.Host, u.User = "http", specHost, nil
	out.URL = &u
	out.Host = specHost
	return out
}

// validateRequest validates req, whose body is body, against its operation. A body
// without a Content-Type is validated as JSON, the only kind the API takes.
func (s *spec) validateRequest(ctx context.Context, req *http.Request, body []byte, route *routers.Route, params map[string]string) error {
	r := normalize(req)
	r.Body, r.GetBody, r.ContentLength = http.NoBody, nil, 0
	if len(body) > 0 {
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		if r.Header.Get("Content-Type") == "" {
			r.Header.Set("Content-Type", mediaJSON)
		}
	}
	return openapi3filter.ValidateRequest(ctx, requestInput(r, route, params))
}

// requestInput is the validation input of r on route. Defaults are not written back
// into the body: the caller's request must stay as it was sent.
func requestInput(r *http.Request, route *routers.Route, params map[string]string) *openapi3filter.RequestValidationInput {
	return &openapi3filter.RequestValidationInput{
		Request:    r,
		PathParams: params,
		Route:      route,
		Options:    options(openapi3filter.Options{SkipSettingDefaults: true}),
	}
}

// options completes o with what every validation here uses: no authentication (the
// API has none; the socket's peer credentials are its access control) and short
// schema errors.
func options(o openapi3filter.Options) *openapi3filter.Options {
	o.AuthenticationFunc = openapi3filter.NoopAuthenticationFunc
	o.WithCustomSchemaErrorFunc(schemaError)
	return &o
}

// schemaError says where a value broke which rule, and shows the value, without the
// schema dump that kin-openapi adds by default (a whole Result schema a failure).
func schemaError(err *openapi3.SchemaError) string {
	reason := err.Reason
	if reason == "" {
		reason = fmt.Sprintf("doesn't match %q", err.SchemaField)
	}
	if err.Origin != nil {
		reason += ": " + err.Origin.Error()
	}
	value, _ := json.Marshal(err.Value)
	return fmt.Sprintf("at %q: %s (value %s)", "/"+strings.Join(err.JSONPointer(), "/"), reason, truncate(value))
}

// validateResponse validates a response's status and headers and, unless it is an
// NDJSON stream or not JSON, its body; it returns the media type that the response's
// Content-Type selected ("" for a response that the document gives no content).
// Lines of an NDJSON body are the caller's to check with validateEvent.
func (s *spec) validateResponse(ctx context.Context, req *http.Request, route *routers.Route, params map[string]string, status int, header http.Header, body []byte) (string, error) {
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: requestInput(normalize(req), route, params),
		Status:                 status,
		Header:                 header,
		Options:                options(openapi3filter.Options{IncludeResponseStatus: true, ExcludeResponseBody: true}),
	}
	if err := openapi3filter.ValidateResponse(ctx, in); err != nil {
		return "", err
	}
	ref := route.Operation.Responses.Status(status)
	if ref == nil || ref.Value == nil || len(ref.Value.Content) == 0 {
		return "", nil
	}
	ct := header.Get("Content-Type")
	if ref.Value.Content.Get(ct) == nil {
		return "", fmt.Errorf("Content-Type %q is not one of the document's %q for status %d", ct, slices.Sorted(maps.Keys(ref.Value.Content)), status)
	}
	media, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return "", fmt.Errorf("parsing Content-Type %q: %w", ct, err)
	}
	if media != mediaJSON {
		return media, nil
	}
	in.Options = options(openapi3filter.Options{IncludeResponseStatus: true})
	in.SetBodyBytes(body)
	return media, openapi3filter.ValidateResponse(ctx, in)
}

// validateEvent validates one line of an NDJSON stream against Event and returns the
// event's kind.
func (s *spec) validateEvent(line []byte) (string, error) {
	var v any
	if err := json.Unmarshal(line, &v); err != nil {
		return "", fmt.Errorf("decoding event line %q: %w", truncate(line), err)
	}
	if err := s.event.VisitJSON(v, openapi3.VisitAsResponse(), openapi3.SetSchemaErrorMessageCustomizer(schemaError)); err != nil {
		return "", fmt.Errorf("event line %q doesn't match schema Event: %w", truncate(line), err)
	}
	kind, _ := v.(map[string]any)["event"].(string)
	return kind, nil
}

// truncate shortens a line for an error message.
func truncate(line []byte) string {
	const max = 200
	if len(line) > max {
		return string(line[:max]) + "..."
	}
	return string(line)
}

// transport is the RoundTripper of Transport.
type transport struct {
	tb   testing.TB
	base http.RoundTripper
	spec *spec
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	// The request body is read here so that it can be validated once the server has
	// said whether it accepted it; the base transport gets a copy.
	var body []byte
	out := req
	if req.Body != nil && req.Body != http.NoBody {
		var err error
		body, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("reading request body: %w", err)
		}
		out = req.Clone(req.Context())
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		out.ContentLength = int64(len(body))
	}
	resp, err := t.base.RoundTrip(out)
	if err != nil {
		return resp, err
	}
	t.check(req, body, resp)
	return resp, nil
}

// check validates one exchange, reporting each failure with tb.Errorf. It leaves
// resp.Body readable as the server sent it.
func (t *transport) check(req *http.Request, body []byte, resp *http.Response) {
	ctx := req.Context()
	errorf := func(format string, args ...any) {
		t.tb.Errorf("%s %s: %d: %s", req.Method, req.URL.Path, resp.StatusCode, fmt.Sprintf(format, args...))
	}
	route, params, err := t.spec.route(req)
	if err != nil {
		// The API has no such operation; the server must say so.
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			errorf("no operation in api/openapi.yaml for this request (%v), but the server did not answer 404 or 405", err)
		}
		return
	}
	if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusRequestEntityTooLarge {
		if err := t.spec.validateRequest(ctx, req, body, route, params); err != nil {
			errorf("the server accepted a request that api/openapi.yaml refuses: %v", err)
		}
	}

	var respBody []byte
	if media, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); media == mediaJSON && resp.Body != nil {
		var readErr error
		respBody, readErr = io.ReadAll(resp.Body)
		resp.Body.Close()
		if readErr != nil {
			// Give the caller the body and the error as they came; there is nothing
			// whole to validate.
			resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(respBody), errReader{readErr}))
			return
		}
		resp.Body = io.NopCloser(bytes.NewReader(respBody))
	}
	media, err := t.spec.validateResponse(ctx, req, route, params, resp.StatusCode, resp.Header, respBody)
	if err != nil {
		errorf("response does not match api/openapi.yaml: %v", err)
		return
	}
	if req.Method == http.MethodPost && route.Path == "/v1/runs" && resp.StatusCode == http.StatusOK {
		// API.md: a stream with Accept: application/x-ndjson, else the final Result.
		wantStream := strings.Contains(req.Header.Get("Accept"), mediaNDJSON)
		if got := media == mediaNDJSON; got != wantStream {
			errorf("got Content-Type %q for Accept %q, want a stream exactly when the request accepts %s", resp.Header.Get("Content-Type"), req.Header.Get("Accept"), mediaNDJSON)
		}
	}
	if media == mediaNDJSON && resp.Body != nil {
		resp.Body = &ndjsonBody{rc: resp.Body, spec: t.spec, errorf: errorf}
	}
}

// errReader returns its error on every read.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// ndjsonBody passes an NDJSON body through unchanged and validates each complete line
// against Event as it goes by, so that the caller sees every event as soon as the
// server sends it.
type ndjsonBody struct {
	rc     io.ReadCloser
	spec   *spec
	errorf func(format string, args ...any)

	partial  []byte // the bytes after the last newline read so far
	lines    int
	last     string // kind of the last event
	finished bool   // the stream reached io.EOF and was checked as a whole
}

func (b *ndjsonBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.partial = append(b.partial, p[:n]...)
	start := 0
	for {
		i := bytes.IndexByte(b.partial[start:], '\n')
		if i < 0 {
			break
		}
		b.line(b.partial[start : start+i])
		start += i + 1
	}
	b.partial = b.partial[:copy(b.partial, b.partial[start:])]
	if err == io.EOF && !b.finished {
		b.finished = true
		if len(b.partial) > 0 {
			b.errorf("the stream's last line %q does not end with a newline", truncate(b.partial))
			b.line(b.partial)
			b.partial = b.partial[:0]
		}
		if b.last != api.EventResult {
			b.errorf("the stream ended after %d lines with event %q, want the %q event last", b.lines, b.last, api.EventResult)
		}
	}
	return n, err
}

// line validates one line of the stream.
func (b *ndjsonBody) line(line []byte) {
	b.lines++
	if b.last == api.EventResult {
		b.errorf("line %d follows the %q event, which must be last", b.lines, api.EventResult)
	}
	kind, err := b.spec.validateEvent(line)
	if err != nil {
		b.errorf("line %d: %v", b.lines, err)
	}
	b.last = kind
}

func (b *ndjsonBody) Close() error { return b.rc.Close() }
