// Package client is a Go client of brig's run API (API.md) over its Unix socket.
// The CLI, the benchmarks and the tests use it.
//
// Typical use:
//
//	c := client.New("/run/brig/brig.sock")
//	res, err := c.Stream(ctx, api.Request{ID: "task-42-try-1", Language: "python", Code: "print(1)"},
//		func(ev api.Event) error { fmt.Print(ev.Data); return nil })
//
// Give each request an id of your own (any string API.md allows): when the
// connection drops before the result (ErrNoResult), the id fetches the run's
// result (Get, Events), and sending the same request with it again never runs
// the code twice. The client does not retry: a 429's or a 503's Error says
// when to (RetryAfter).
//
// Nothing but ctx bounds a call once the socket is dialled (5 s): a service
// that stopped answering (SIGSTOP, a wedged host) keeps Get, Stop, Health and
// Limits waiting as long as ctx allows, so give them a deadline. A run's own
// time limit bounds Run, Stream and Events while the service works. (The
// Python and JavaScript clients have a default timeout for the short calls.)
package client

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/brig-sandbox/brig/api"
	"golang.org/x/sys/unix"
)

// base is the URL every request goes to; the socket, not the host, decides
// where.
const base = "http://brig"

// maxEventLine bounds one NDJSON line: a result at its bound (both outputs
// full, each character escaped at worst as \uXXXX, the connections listed).
const maxEventLine = api.MaxResultBytes

// Client talks to one brig service. It is safe for concurrent use.
type Client struct {
	// HTTP is the client used for every request; its transport dials the socket.
	// Tests wrap its Transport to check every exchange.
	HTTP *http.Client
}

// New returns a client of the service listening on socket.
func New(socket string) *Client {
	d := net.Dialer{Timeout: 5 * time.Second}
	return &Client{HTTP: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConnsPerHost: 64,
		DisableCompression:  true,
	}}}
}

// Error is an error response of the API.
type Error struct {
	// Status is the HTTP status.
	Status int
	// RetryAfter is the Retry-After of a 429, or of a 503 whose refusal may
	// pass (the service's journal could not record the run).
	RetryAfter time.Duration
	// API is the error body: its code, field and message.
	API api.Error
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.API.Code, e.API.Error())
}

// Run starts a run and waits for its result. A connection that drops once
// the request is sent (the service restarted) is ErrNoResult: a run sent with
// an id may still be going, or have finished; fetch it with Get or Events. One
// sent without an id is stopped by the service when its client goes away.
// Cancelling ctx does the same to the run as a dropped connection.
func (c *Client) Run(ctx context.Context, req api.Request) (*api.Result, error) {
	resp, err := c.post(ctx, req, "application/json")
	if err == nil {
		var res *api.Result
		if res, err = decodeResult(resp); err == nil {
			return res, nil
		}
	}
	return nil, noResult(ctx, req.ID, err)
}

// noResult is the error of a request to start run id (which may be "": the
// service makes one) that got no result: err as it is when the request was
// never sent, or answered, or ctx ended; otherwise ErrNoResult, saying what
// may have become of the run.
func noResult(ctx context.Context, id string, err error) error {
	var apiErr *Error
	var opErr *net.OpError
	if ctx.Err() != nil || errors.As(err, &apiErr) || errors.As(err, &opErr) && opErr.Op == "dial" {
		return err // never sent, or answered: the error says what happened
	}
	if !errors.Is(err, ErrNoResult) {
		err = fmt.Errorf("%w: %w", ErrNoResult, err)
	}
	if id == "" {
		return fmt.Errorf("%w (the run had no id: the service stops such a run when its client goes away, but one that had finished would run twice if sent again; give requests an id)", err)
	}
	return fmt.Errorf("%w (fetch run %q with Get or Events: it may still be going, or have finished)", err, id)
}

// Stream starts a run and calls onEvent with each of its events as it happens
// (an error from onEvent ends the stream; the run goes on). It returns the
// result. A connection that drops once the request is sent, before the
// result event, is ErrNoResult, as for Run; a line cut short by the drop is
// not passed on.
func (c *Client) Stream(ctx context.Context, req api.Request, onEvent func(api.Event) error) (*api.Result, error) {
	resp, err := c.post(ctx, req, "application/x-ndjson")
	if err != nil {
		return nil, noResult(ctx, req.ID, err)
	}
	var cbErr error
	res, id, err := readEvents(resp, func(ev api.Event) error {
		if onEvent != nil {
			cbErr = onEvent(ev)
		}
		return cbErr
	})
	if err != nil && err != cbErr {
		return nil, noResult(ctx, cmp.Or(id, req.ID), err)
	}
	return res, err
}

// RunOption is an option of Get, Events and Stop.
type RunOption func(url.Values)

// OwnedBy names the uid whose run an id means (?uid=), for root and the
// admin group when several uids used the id (the service answers 409 and
// lists them); another peer may name only its own.
func OwnedBy(uid int) RunOption {
	return func(q url.Values) { q.Set("uid", strconv.Itoa(uid)) }
}

// runPath is the path of run id, with opts' query.
func runPath(id, suffix string, opts []RunOption) string {
	p := "/v1/runs/" + url.PathEscape(id) + suffix
	if len(opts) > 0 {
		q := url.Values{}
		for _, o := range opts {
			o(q)
		}
		p += "?" + q.Encode()
	}
	return p
}

// Get returns a run's result, or its state so far.
func (c *Client) Get(ctx context.Context, id string, opts ...RunOption) (*api.Result, error) {
	resp, err := c.do(ctx, http.MethodGet, runPath(id, "", opts), nil, "")
	if err != nil {
		return nil, err
	}
	return decodeResult(resp)
}

// Events replays a run's events from the start and follows them to its result.
func (c *Client) Events(ctx context.Context, id string, onEvent func(api.Event) error, opts ...RunOption) (*api.Result, error) {
	resp, err := c.do(ctx, http.MethodGet, runPath(id, "/events", opts), nil, "application/x-ndjson")
	if err != nil {
		return nil, err
	}
	res, _, err := readEvents(resp, onEvent)
	return res, err
}

// Stop stops a run (reason stopped) and returns its result.
func (c *Client) Stop(ctx context.Context, id string, opts ...RunOption) (*api.Result, error) {
	resp, err := c.do(ctx, http.MethodDelete, runPath(id, "", opts), nil, "")
	if err != nil {
		return nil, err
	}
	return decodeResult(resp)
}

// Limits returns the bounds and defaults of a request.
func (c *Client) Limits(ctx context.Context) (*api.Limits, error) {
	var l api.Limits
	if err := c.getJSON(ctx, "/v1/limits", &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Health returns the service's health and what its host supports.
func (c *Client) Health(ctx context.Context) (*api.Health, error) {
	var h api.Health
	if err := c.getJSON(ctx, "/v1/health", &h); err != nil {
		return nil, err
	}
	return &h, nil
}

func (c *Client) getJSON(ctx context.Context, path string, v any) error {
	resp, err := c.do(ctx, http.MethodGet, path, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

func (c *Client) post(ctx context.Context, req api.Request, accept string) (*http.Response, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return c.do(ctx, http.MethodPost, "/v1/runs", body, accept)
}

// do sends a request and returns a 200 response; any other status becomes an
// *Error.
func (c *Client) do(ctx context.Context, method, path string, body []byte, accept string) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	hr, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if accept != "" {
		hr.Header.Set("Accept", accept)
	}
	resp, err := c.HTTP.Do(hr)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	e := &Error{Status: resp.StatusCode}
	var eb api.ErrorBody
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&eb); err != nil {
		eb.Error = api.Error{Code: "http_" + strconv.Itoa(resp.StatusCode), Message: resp.Status}
	}
	e.API = eb.Error
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return nil, e
}

func decodeResult(resp *http.Response) (*api.Result, error) {
	defer resp.Body.Close()
	var res api.Result
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return nil, fmt.Errorf("decoding the result: %w", err)
	}
	return &res, nil
}

// ErrNoResult is returned by Run, Stream and Events when the connection ended
// before the run's result (the service restarted): the run may still be going;
// fetch it with Get or Events.
var ErrNoResult = errors.New("the connection ended before the run's result")

// readEvents reads a run's NDJSON events from resp to its result event,
// calling onEvent with each, and returns the result and the run's id (from
// its accepted event, "" before it). A stream that ends before the result,
// however it ends (EOF, a reset, a line cut short, which is dropped), is
// ErrNoResult, unless the request's context ended it; an error of onEvent is
// returned as it is.
func readEvents(resp *http.Response, onEvent func(api.Event) error) (*api.Result, string, error) {
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxEventLine)
	sc.Split(wholeLines)
	var id string
	for sc.Scan() {
		var ev api.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, id, fmt.Errorf("decoding an event: %w", err)
		}
		if ev.Event == api.EventAccepted {
			id = ev.ID
		}
		if onEvent != nil {
			if err := onEvent(ev); err != nil {
				return nil, id, err
			}
		}
		if ev.Event == api.EventResult {
			if ev.Result == nil {
				return nil, id, errors.New("the result event has no result")
			}
			return ev.Result, id, nil
		}
	}
	if err := resp.Request.Context().Err(); err != nil {
		// The caller's own deadline or cancel ended the read, not a drop of
		// the service's: its error alone, as Run gives it (the clients
		// probe of 2026-12-06 found both, which sent a harness that checks
		// ErrNoResult first to reattach after its own timeout).
		return nil, id, fmt.Errorf("reading the run's events: %w", err)
	}
	if err := sc.Err(); err != nil {
		return nil, id, fmt.Errorf("%w: %w", ErrNoResult, err)
	}
	return nil, id, ErrNoResult
}

// errCutLine ends a stream whose last line has no end: the connection
// dropped in the middle of an event.
var errCutLine = errors.New("the stream ended in the middle of an event")

// wholeLines is bufio.ScanLines but for a last line without its end, which is
// errCutLine rather than a token.
func wholeLines(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return 0, nil, errCutLine
	}
	return 0, nil, nil
}

// ServicePID returns the process id of the service listening on socket, from
// the credentials the kernel gives a Unix socket's peer (SO_PEERCRED): for
// benchmarks that account for the service's own CPU.
func ServicePID(socket string) (int, error) {
	c, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return int(cred.Pid), nil
}
