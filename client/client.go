// Package client is a Go client of brig's run API (API.md) over its Unix socket.
// The CLI, the benchmarks and the tests use it.
//
// Typical use:
//
//	c := client.New("/run/brig/brig.sock")
//	res, err := c.Stream(ctx, api.Request{Language: "python", Code: "print(1)"},
//		func(ev api.Event) error { fmt.Print(ev.Data); return nil })
package client

import (
	"bufio"
	"bytes"
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
	var apiErr *Error
	var opErr *net.OpError
	if ctx.Err() != nil || errors.As(err, &apiErr) || errors.As(err, &opErr) && opErr.Op == "dial" {
		return nil, err // never sent, or answered: the error says what happened
	}
	if req.ID == "" {
		return nil, fmt.Errorf("%w (the run had no id, so the service stopped it, if it started: send it again): %v", ErrNoResult, err)
	}
	return nil, fmt.Errorf("%w (fetch run %q with Get or Events: it may still be going, or have finished): %v", ErrNoResult, req.ID, err)
}

// Stream starts a run and calls onEvent with each of its events as it happens
// (an error from onEvent ends the stream; the run goes on). It returns the
// result.
func (c *Client) Stream(ctx context.Context, req api.Request, onEvent func(api.Event) error) (*api.Result, error) {
	resp, err := c.post(ctx, req, "application/x-ndjson")
	if err != nil {
		return nil, err
	}
	return readEvents(resp, onEvent)
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
	return readEvents(resp, onEvent)
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
	return &l, c.getJSON(ctx, "/v1/limits", &l)
}

// Health returns the service's health and what its host supports.
func (c *Client) Health(ctx context.Context) (*api.Health, error) {
	var h api.Health
	return &h, c.getJSON(ctx, "/v1/health", &h)
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

func readEvents(resp *http.Response, onEvent func(api.Event) error) (*api.Result, error) {
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxEventLine)
	for sc.Scan() {
		var ev api.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("decoding an event: %w", err)
		}
		if onEvent != nil {
			if err := onEvent(ev); err != nil {
				return nil, err
			}
		}
		if ev.Event == api.EventResult {
			if ev.Result == nil {
				return nil, errors.New("the result event has no result")
			}
			return ev.Result, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoResult, err)
	}
	return nil, ErrNoResult
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
