package client

import (
	"context"
	"errors"
	"fmt"
	"go/constant"
	"go/token"
	"go/types"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/internal/testutil"
)

// serve answers on a Unix socket of the test's with h, as the service would.
func serve(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	return testutil.ServeUnix(t, h)
}

func TestErrorsCarryTheAPIError(t *testing.T) {
	socket := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"code":"queue_full","message":"the queue is full"}}`)
	})
	_, err := New(socket).Run(context.Background(), api.Request{Language: "python", Code: "pass"})
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want an *Error", err)
	}
	if ce.Status != 429 || ce.API.Code != api.ErrorQueueFull || ce.RetryAfter != 3*time.Second || ce.API.Message != "the queue is full" {
		t.Fatalf("got %+v, want 429 queue_full with Retry-After 3s and the message", ce)
	}
}

func TestErrorWithoutTheAPIShape(t *testing.T) {
	socket := serve(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad gateway", http.StatusBadGateway)
	})
	_, err := New(socket).Get(context.Background(), "x")
	var ce *Error
	if !errors.As(err, &ce) || ce.Status != 502 || ce.API.Code != "http_502" {
		t.Fatalf("got %v, want an *Error with status 502 and code http_502", err)
	}
}

// TestStreamEndedByTheCallersDeadline: a stream the caller's own deadline
// ends is the context's error, not ErrNoResult, which says the service
// dropped it; for Stream as for Events, and as for Run.
func TestStreamEndedByTheCallersDeadline(t *testing.T) {
	socket := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintln(w, `{"event":"accepted","id":"a"}`)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the run goes on past the caller's deadline
	})
	c := New(socket)
	for name, call := range map[string]func(context.Context) error{
		"Stream": func(ctx context.Context) error { _, err := c.Stream(ctx, api.Request{ID: "a"}, nil); return err },
		"Events": func(ctx context.Context) error { _, err := c.Events(ctx, "a", nil); return err },
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := call(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrNoResult) {
			t.Errorf("%s: got %v, want the deadline's error and not ErrNoResult", name, err)
		}
	}
}

// TestCallersDeadlineNamesTheRun: a deadline or a cancel that ends Run,
// Stream or Events is still the context's error (errors.Is), not
// ErrNoResult, and says what became of the run: it goes on, named by the
// request's id or the accepted event's; Run's without an id is stopped by
// the service (supervisor/server.go). It was `Post "http://brig/v1/runs":
// context deadline exceeded` (the fixcli probe).
func TestCallersDeadlineNamesTheRun(t *testing.T) {
	socket := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") == "application/x-ndjson" {
			w.Header().Set("Content-Type", "application/x-ndjson")
			fmt.Fprintln(w, `{"event":"accepted","id":"acc"}`)
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done() // the run goes on past the caller's deadline
	})
	c := New(socket)
	for _, tc := range []struct {
		name   string
		call   func(context.Context) error
		cancel bool
		want   string
	}{
		{"Run with an id", func(ctx context.Context) error { _, err := c.Run(ctx, api.Request{ID: "t1"}); return err }, false,
			`run "t1" goes on in the service: follow it with Get or Events, stop it with Stop`},
		{"Run with an id, cancelled", func(ctx context.Context) error { _, err := c.Run(ctx, api.Request{ID: "t1"}); return err }, true,
			`run "t1" goes on in the service`},
		{"Run without an id", func(ctx context.Context) error { _, err := c.Run(ctx, api.Request{}); return err }, false,
			"the run had no id, so the service stops it as the connection closes"},
		{"Stream without an id, after accepted", func(ctx context.Context) error { _, err := c.Stream(ctx, api.Request{}, nil); return err }, false,
			`run "acc" goes on in the service`},
		{"Stream with an id", func(ctx context.Context) error { _, err := c.Stream(ctx, api.Request{ID: "t1"}, nil); return err }, false,
			`run "acc" goes on in the service`},
		{"Events", func(ctx context.Context) error { _, err := c.Events(ctx, "t2", nil); return err }, false,
			`run "t2" goes on in the service`},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		want := context.DeadlineExceeded
		if tc.cancel {
			time.AfterFunc(100*time.Millisecond, cancel)
			want = context.Canceled
		}
		err := tc.call(ctx)
		cancel()
		if !errors.Is(err, want) || errors.Is(err, ErrNoResult) || !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("%s: got %v, want %v saying %q, not ErrNoResult", tc.name, err, want, tc.want)
		}
	}
}

func TestStreamEndingBeforeTheResult(t *testing.T) {
	socket := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintln(w, `{"event":"accepted","id":"a"}`)
		fmt.Fprintln(w, `{"event":"stdout","data":"hi\n"}`)
	})
	var got []string
	_, err := New(socket).Events(context.Background(), "a", func(ev api.Event) error {
		got = append(got, ev.Event)
		return nil
	})
	if !errors.Is(err, ErrNoResult) || len(got) != 2 {
		t.Fatalf("got %v after events %v, want ErrNoResult after accepted and stdout", err, got)
	}
}

func TestStreamReturnsTheResult(t *testing.T) {
	socket := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "application/x-ndjson" || r.URL.Path != "/v1/runs" {
			http.Error(w, "unexpected request", 400)
			return
		}
		fmt.Fprintln(w, `{"event":"accepted","id":"a"}`)
		fmt.Fprintln(w, `{"event":"result","result":{"id":"a","language":"python","state":"finished","stdout":"x"}}`)
	})
	res, err := New(socket).Stream(context.Background(), api.Request{Language: "python", Code: "pass"}, nil)
	if err != nil || res.ID != "a" || res.Stdout != "x" {
		t.Fatalf("got %+v, %v, want the result event's result", res, err)
	}
}

func TestServicePID(t *testing.T) {
	socket := serve(t, func(http.ResponseWriter, *http.Request) {})
	pid, err := ServicePID(socket)
	if err != nil || pid != os.Getpid() {
		t.Fatalf("got pid %d, %v, want this process's %d (it serves the socket)", pid, err, os.Getpid())
	}
}

// TestRunDroppedIsNoResult: a connection that drops after the request was
// sent (the service restarted) is ErrNoResult, which names the id to fetch,
// or says that a run without one was stopped; a service that is not there is
// its dial error.
func TestRunDroppedIsNoResult(t *testing.T) {
	socket := serve(t, func(w http.ResponseWriter, r *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close()
		}
	})
	for _, tc := range []struct{ id, want string }{
		{"run-7", `fetch run "run-7" with Get or Events`},
		{"", "the run had no id: the service stops such a run when its client goes away"},
	} {
		_, err := New(socket).Run(context.Background(), api.Request{ID: tc.id, Language: "python", Code: "pass"})
		if !errors.Is(err, ErrNoResult) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("id %q: got %v, want ErrNoResult saying %q", tc.id, err, tc.want)
		}
	}
	_, err := New(filepath.Join(t.TempDir(), "none.sock")).Run(context.Background(), api.Request{ID: "x", Language: "python", Code: "pass"})
	if err == nil || errors.Is(err, ErrNoResult) {
		t.Errorf("no service: got %v, want its dial error, not ErrNoResult", err)
	}
}

// TestStreamDroppedIsNoResult: a stream that ends before its result, however
// it ends (the connection closed before the response, after a whole line, in
// the middle of one), is ErrNoResult naming the run from its accepted event,
// and a line cut short is not passed on (the CLI audit: a cut line was
// decoded, and failed as "unexpected end of JSON input"). onEvent's own
// error is returned as it is.
func TestStreamDroppedIsNoResult(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		events     int
		want       string
	}{
		{"before the response", "", 0, "fetch run \"mine\""},
		{"after a line", `{"event":"accepted","id":"a1"}` + "\n", 1, "fetch run \"a1\""},
		{"in a line", `{"event":"accepted","id":"a1"}` + "\n" + `{"event":"stdout","da`, 1, "fetch run \"a1\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			socket := serve(t, func(w http.ResponseWriter, r *http.Request) {
				c, buf, err := http.NewResponseController(w).Hijack()
				if err != nil {
					return
				}
				if tc.body != "" {
					fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\n\r\n%s", tc.body)
					buf.Flush()
				}
				c.Close()
			})
			var got int
			_, err := New(socket).Stream(context.Background(), api.Request{ID: "mine", Language: "python", Code: "pass"}, func(api.Event) error {
				got++
				return nil
			})
			if !errors.Is(err, ErrNoResult) || !strings.Contains(err.Error(), tc.want) || got != tc.events {
				t.Errorf("got %v after %d events; want ErrNoResult saying %q after %d", err, got, tc.want, tc.events)
			}
		})
	}
	socket := serve(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, `{"event":"accepted","id":"a"}`)
	})
	mine := errors.New("mine")
	if _, err := New(socket).Stream(context.Background(), api.Request{Language: "python", Code: "pass"}, func(api.Event) error { return mine }); err != mine {
		t.Errorf("onEvent's error: got %v, want it as it is", err)
	}
}

// TestStreamCutByItsContext: a stream cut by its context's deadline or
// cancel says so to errors.Is, as Run's does, so that a harness tells its own
// timeout from the service's drop (the clients probe: Stream and Events said
// ErrNoResult alone).
func TestStreamCutByItsContext(t *testing.T) {
	socket := serve(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, `{"event":"accepted","id":"a"}`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	c := New(socket)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := c.Stream(ctx, api.Request{ID: "a", Language: "python", Code: "pass"}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stream past its deadline: got %v, want context.DeadlineExceeded", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	if _, err := c.Events(ctx, "a", nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Events cancelled: got %v, want context.Canceled", err)
	}
}

// TestOwnedBy: Get, Events and Stop name the run's uid with ?uid= when asked,
// and send no query otherwise.
func TestOwnedBy(t *testing.T) {
	var got []string
	socket := serve(t, func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.RequestURI())
		if strings.HasSuffix(r.URL.Path, "/events") {
			fmt.Fprintln(w, `{"event":"result","result":{"id":"a b"}}`)
			return
		}
		fmt.Fprint(w, `{"id":"a b"}`)
	})
	c := New(socket)
	ctx := context.Background()
	c.Get(ctx, "a b")
	c.Get(ctx, "a b", OwnedBy(61001))
	c.Events(ctx, "a b", nil, OwnedBy(61001))
	c.Stop(ctx, "a b", OwnedBy(0))
	want := []string{"GET /v1/runs/a%20b", "GET /v1/runs/a%20b?uid=61001", "GET /v1/runs/a%20b/events?uid=61001", "DELETE /v1/runs/a%20b?uid=0"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// The Python and JavaScript clients read a line as long as this one does: the
// service's bound on a result, written there as an expression of numbers that
// Go reads too.
func TestClientsReadTheWholeResult(t *testing.T) {
	for file, name := range map[string]string{
		"../clients/python/src/brig/_wire.py": "MAX_EVENT_LINE = ",
		"../clients/js/index.js":              "const maxLine = ",
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		_, rest, ok := strings.Cut(string(b), "\n"+name)
		if !ok {
			t.Fatalf("%s: no line beginning %q", file, name)
		}
		expr, _, _ := strings.Cut(rest, "\n")
		tv, err := types.Eval(token.NewFileSet(), nil, token.NoPos, strings.TrimSuffix(expr, ";"))
		if err != nil {
			t.Fatalf("%s: reading %q: %v", file, expr, err)
		}
		if got, ok := constant.Int64Val(tv.Value); !ok || got != api.MaxResultBytes {
			t.Errorf("%s: %s%s is %v, want api.MaxResultBytes, %d", file, name, expr, tv.Value, api.MaxResultBytes)
		}
	}
	if maxEventLine != api.MaxResultBytes {
		t.Errorf("maxEventLine is %d, want api.MaxResultBytes, %d", maxEventLine, api.MaxResultBytes)
	}
}
