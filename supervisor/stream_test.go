package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/client"
)

// withRunID gives a request its client id.
func withRunID(id string) func(*api.Request) {
	return func(r *api.Request) { r.ID = id }
}

// restartConfig is the Config newTestService gives, for a test that stops its
// service and starts it again on the same state directory and log.
func restartConfig(ts *testService, opts ...func(*Config)) Config {
	cfg := Config{StateDir: ts.state, Logger: slog.New(slog.NewJSONHandler(ts.logs, nil)), Grace: 5 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

// timedEvent is a stream's event and when the client read it.
type timedEvent struct {
	api.Event
	at time.Time
}

// liveStream is a POST with NDJSON (or an Events reattach) read in the
// background, so that a test can act while the run goes on.
type liveStream struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when the stream has ended

	mu sync.Mutex
	// events are those read so far. Guarded by mu.
	events []timedEvent
	// changed is closed and replaced each time events grows. Guarded by mu.
	changed chan struct{}
	// res and err are the stream's end, set before done is closed.
	res   *api.Result
	err   error
	endAt time.Time
}

// openLiveStream starts req on c as a stream. The stream is cancelled and
// waited for when tb ends (before the service is shut down).
func openLiveStream(tb testing.TB, c *client.Client, req api.Request) *liveStream {
	tb.Helper()
	return followLive(tb, func(ctx context.Context, on func(api.Event) error) (*api.Result, error) {
		return c.Stream(ctx, req, on)
	})
}

// followLive reads the stream that open makes in the background.
func followLive(tb testing.TB, open func(context.Context, func(api.Event) error) (*api.Result, error)) *liveStream {
	ctx, cancel := context.WithCancel(context.Background())
	s := &liveStream{cancel: cancel, done: make(chan struct{}), changed: make(chan struct{})}
	go func() {
		defer close(s.done)
		res, err := open(ctx, func(ev api.Event) error {
			s.mu.Lock()
			s.events = append(s.events, timedEvent{ev, time.Now()})
			close(s.changed)
			s.changed = make(chan struct{})
			s.mu.Unlock()
			return nil
		})
		s.mu.Lock()
		s.res, s.err, s.endAt = res, err, time.Now()
		s.mu.Unlock()
	}()
	tb.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

// snapshot returns the events read so far.
func (s *liveStream) snapshot() []timedEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]timedEvent(nil), s.events...)
}

// waitUntil waits up to timeout for cond to hold of the events read so far and
// returns them; it fails tb if the stream ends or the time passes first.
func (s *liveStream) waitUntil(tb testing.TB, timeout time.Duration, what string, cond func([]timedEvent) bool) []timedEvent {
	tb.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		evs := append([]timedEvent(nil), s.events...)
		changed := s.changed
		s.mu.Unlock()
		if cond(evs) {
			return evs
		}
		select {
		case <-changed:
		case <-s.done:
			if evs := s.snapshot(); cond(evs) {
				return evs
			}
			tb.Fatalf("the stream ended (%v) after events %s, want %s", s.err, eventKinds(s.snapshot()), what)
		case <-deadline.C:
			tb.Fatalf("after %s got events %s, want %s", timeout, eventKinds(s.snapshot()), what)
		}
	}
}

// waitEvent waits for the first event of kind and returns it.
func (s *liveStream) waitEvent(tb testing.TB, kind string, timeout time.Duration) timedEvent {
	tb.Helper()
	evs := s.waitUntil(tb, timeout, "a "+kind+" event", func(evs []timedEvent) bool { return eventIndex(evs, kind) >= 0 })
	return evs[eventIndex(evs, kind)]
}

// wait waits up to timeout for the stream to end and returns its result.
func (s *liveStream) wait(tb testing.TB, timeout time.Duration) (*api.Result, error) {
	tb.Helper()
	select {
	case <-s.done:
	case <-time.After(timeout):
		tb.Fatalf("the stream did not end within %s (events %s)", timeout, eventKinds(s.snapshot()))
	}
	return s.res, s.err
}

func eventIndex(evs []timedEvent, kind string) int {
	for i, ev := range evs {
		if ev.Event.Event == kind {
			return i
		}
	}
	return -1
}

// kinds is a short description of events for failure messages.
func eventKinds(evs []timedEvent) string {
	var b strings.Builder
	b.WriteString("[")
	for i, ev := range evs {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(ev.Event.Event)
		if ev.Data != "" {
			b.WriteString("(" + strings.ReplaceAll(ev.Data, "\n", `\n`) + ")")
		}
	}
	return b.String() + "]"
}

// outputLine is one line of a run's output, as its events delivered it.
type outputLine struct {
	stream, text string
}

// outputLines puts a stream's output events back into lines in the order each
// line was completed. An interpreter may write a line in more than one write
// (python's print writes the text, then the newline), and the API's events carry
// what each read of the pipe gave, so a line may come in several events.
func outputLines(evs []timedEvent) []outputLine {
	var out []outputLine
	pending := map[string]string{}
	for _, ev := range evs {
		if ev.Event.Event != api.EventStdout && ev.Event.Event != api.EventStderr {
			continue
		}
		text := pending[ev.Event.Event] + ev.Data
		for {
			i := strings.IndexByte(text, '\n')
			if i < 0 {
				break
			}
			out = append(out, outputLine{ev.Event.Event, text[:i+1]})
			text = text[i+1:]
		}
		pending[ev.Event.Event] = text
	}
	for _, k := range []string{api.EventStdout, api.EventStderr} {
		if pending[k] != "" {
			out = append(out, outputLine{k, pending[k]})
		}
	}
	return out
}

// firstLineAt is when the event that completed the first line of stream with
// text arrived.
func firstLineAt(evs []timedEvent, stream, text string) (time.Time, bool) {
	acc := ""
	for _, ev := range evs {
		if ev.Event.Event != stream {
			continue
		}
		acc += ev.Data
		if strings.Contains(acc, text) {
			return ev.at, true
		}
	}
	return time.Time{}, false
}

// collectEvents runs Events(id) to its end and returns the events.
func collectEvents(tb testing.TB, c *client.Client, id string) ([]api.Event, *api.Result) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var evs []api.Event
	res, err := c.Events(ctx, id, func(ev api.Event) error {
		evs = append(evs, ev)
		return nil
	})
	if err != nil {
		tb.Fatalf("Events(%s): got %v after %d events, want the run's events to its result", id, err, len(evs))
	}
	return evs, res
}

func timedEvents(evs []api.Event) []timedEvent {
	out := make([]timedEvent, len(evs))
	for i, ev := range evs {
		out[i] = timedEvent{Event: ev}
	}
	return out
}

// checkEnvelope checks that evs begin with accepted (with id), then started,
// and end with the result (res), with only output events between.
func checkEnvelope(tb testing.TB, evs []timedEvent, id string, res *api.Result) {
	tb.Helper()
	if len(evs) < 3 {
		tb.Fatalf("got events %s, want accepted, started, ..., result", eventKinds(evs))
	}
	if evs[0].Event.Event != api.EventAccepted || evs[0].ID != id {
		tb.Errorf("got first event %+v, want accepted with id %q", evs[0].Event, id)
	}
	if evs[1].Event.Event != api.EventStarted {
		tb.Errorf("got second event %q, want started (events %s)", evs[1].Event.Event, eventKinds(evs))
	}
	last := evs[len(evs)-1]
	if last.Event.Event != api.EventResult || !reflect.DeepEqual(last.Result, res) {
		tb.Errorf("got last event %q with %+v, want the result %+v", last.Event.Event, last.Result, res)
	}
	for _, ev := range evs[2 : len(evs)-1] {
		if ev.Event.Event != api.EventStdout && ev.Event.Event != api.EventStderr {
			tb.Errorf("got a %q event between started and result, want only output (events %s)", ev.Event.Event, eventKinds(evs))
		}
	}
}

func checkSucceeded(tb testing.TB, res *api.Result, stdout string) {
	tb.Helper()
	if res.State != api.StateFinished || res.Status != api.StatusCompleted || res.Outcome != api.OutcomeSucceeded ||
		res.ExitCode == nil || *res.ExitCode != 0 || res.Reason != "" {
		tb.Errorf("got %s/%s/%s reason %q exit %s (%s), want finished/completed/succeeded exit 0",
			res.State, res.Status, res.Outcome, res.Reason, exitCodeString(res.ExitCode), res.Message)
	}
	if res.Stdout != stdout {
		tb.Errorf("got stdout %q, want %q", res.Stdout, stdout)
	}
}

// checkStopped checks a run ended by DELETE or a shutdown (network none),
// whose message says who stopped it (by; "" for a run the journal finished).
func checkStopped(tb testing.TB, res *api.Result, by string) {
	tb.Helper()
	if res.State != api.StateFinished || res.Status != api.StatusFailed || res.Reason != api.ReasonStopped ||
		res.Outcome != api.OutcomeFailed || res.Message == "" || !strings.Contains(res.Message, by) {
		tb.Errorf("got %s/%s reason %q outcome %q message %q, want finished/failed reason stopped outcome failed with a message that says %q",
			res.State, res.Status, res.Reason, res.Outcome, res.Message, by)
	}
}

func exitCodeString(p *int) string {
	if p == nil {
		return "null"
	}
	return itoa(*p)
}

// TestStreamEventOrder: a stream is accepted (with the id), started, the output
// lines in the program's order, and the result last.
func TestStreamEventOrder(t *testing.T) {
	ts := newTestService(t)
	// The pause between b and e makes the program's order observable: stdout and
	// stderr are two pipes, read independently.
	code := "import sys, time\nprint(\"a\")\ntime.sleep(0.5)\nprint(\"b\")\ntime.sleep(0.2)\nprint(\"e\", file=sys.stderr)\n"
	s := openLiveStream(t, ts.client, request("python", code))
	res, err := s.wait(t, 20*time.Second)
	if err != nil {
		t.Fatalf("Stream: got %v, want the result", err)
	}
	evs := s.snapshot()
	checkEnvelope(t, evs, res.ID, res)
	if len(res.ID) != 26 {
		t.Errorf("got generated id %q, want a 26-character ULID", res.ID)
	}
	want := []outputLine{{api.EventStdout, "a\n"}, {api.EventStdout, "b\n"}, {api.EventStderr, "e\n"}}
	if got := outputLines(evs); !reflect.DeepEqual(got, want) {
		t.Errorf("got output lines %q (events %s), want %q", got, eventKinds(evs), want)
	}
	checkSucceeded(t, res, "a\nb\n")
	if res.Stderr != "e\n" {
		t.Errorf("got stderr %q, want %q", res.Stderr, "e\n")
	}
}

// TestStreamOutputBeforeEnd: output reaches the client while the program still
// runs, not with the result.
func TestStreamOutputBeforeEnd(t *testing.T) {
	ts := newTestService(t)
	for _, tc := range []struct {
		name, lang, code string
	}{
		{"python", "python", "import time\nprint(\"first\")\ntime.sleep(2)\n"},
		{"javascript", "javascript", "console.log(\"first\"); setTimeout(() => {}, 2000);"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openLiveStream(t, ts.client, request(tc.lang, tc.code))
			res, err := s.wait(t, 20*time.Second)
			if err != nil {
				t.Fatalf("Stream: got %v, want the result", err)
			}
			evs := s.snapshot()
			checkSucceeded(t, res, "first\n")
			firstAt, ok := firstLineAt(evs, api.EventStdout, "first\n")
			if !ok {
				t.Fatalf("got events %s, want stdout first", eventKinds(evs))
			}
			resultAt := evs[len(evs)-1].at
			if lead := resultAt.Sub(firstAt); lead < time.Second {
				t.Errorf("got the output %s before the result (the run's wall time %d ms), want at least 1s: output is held back until the end",
					lead, res.Usage.WallMS)
			}
		})
	}
}

// TestStreamReattachAfterDrop: a client whose stream drops does not stop the
// run; GET shows it running, and Events replays from the start to the result,
// also once the service has restarted (from the journal).
func TestStreamReattachAfterDrop(t *testing.T) {
	ts := newTestService(t)
	const id = "reattach-1"
	code := "import time\nfor i in range(5):\n    print(i)\n    time.sleep(0.3)\n"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errDrop := errors.New("dropping the connection")
	_, err := ts.client.Stream(ctx, request("python", code, withRunID(id)), func(ev api.Event) error {
		if ev.Event == api.EventStdout {
			cancel()
			return errDrop
		}
		return nil
	})
	if !errors.Is(err, errDrop) {
		t.Fatalf("Stream: got %v, want the stream dropped at the first output", err)
	}
	got, err := ts.client.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.State != api.StateRunning {
		t.Errorf("got state %q right after the drop, want running", got.State)
	}
	// A running run's usage: its wall clock so far, the rest once it ends.
	if got.Usage.WallMS <= 0 || got.Usage.WallMS > got.Timing.TotalMS || got.Usage.CPUMS != 0 || got.Usage.PeakMemoryBytes != 0 {
		t.Errorf("got usage %+v (total_ms %d) while it runs, want its wall clock so far and no CPU or memory yet", got.Usage, got.Timing.TotalMS)
	}

	evs, res := collectEvents(t, ts.client, id)
	checkEnvelope(t, timedEvents(evs), id, res)
	want := "0\n1\n2\n3\n4\n"
	var lines []string
	for _, l := range outputLines(timedEvents(evs)) {
		lines = append(lines, l.stream+":"+l.text)
	}
	if g, w := strings.Join(lines, ""), "stdout:0\nstdout:1\nstdout:2\nstdout:3\nstdout:4\n"; g != w {
		t.Errorf("got replayed output %q, want %q", g, w)
	}
	checkSucceeded(t, res, want)

	// Finished and in the journal only: the replay has the output in one event.
	ts.stop(t)
	ts.start(t, restartConfig(ts))
	evs, again := collectEvents(t, ts.client, id)
	wantEvs := []api.Event{
		{Event: api.EventAccepted, ID: id},
		{Event: api.EventStarted},
		{Event: api.EventStdout, Data: want},
		{Event: api.EventResult, Result: res},
	}
	if !reflect.DeepEqual(evs, wantEvs) {
		t.Errorf("after a restart got events %s, want %s", eventKinds(timedEvents(evs)), eventKinds(timedEvents(wantEvs)))
	}
	if !reflect.DeepEqual(again, res) {
		t.Errorf("after a restart got result %+v, want %+v", again, res)
	}
}

// TestEventsOfFinishedRunWithBothStreams: the journal's replay of a finished
// run has both outputs, stdout first, and its result.
func TestEventsOfFinishedRunWithBothStreams(t *testing.T) {
	ts := newTestService(t)
	const id = "replay-both"
	res := ts.mustRun(t, request("python", "import sys\nprint(\"out\")\nprint(\"err\", file=sys.stderr)\n", withRunID(id)))
	checkSucceeded(t, res, "out\n")
	// A restart leaves the run in the journal only (until then it may still be in
	// memory, whose events keep the order the two pipes were read in).
	ts.stop(t)
	ts.start(t, restartConfig(ts))
	evs, got := collectEvents(t, ts.client, id)
	want := []api.Event{
		{Event: api.EventAccepted, ID: id},
		{Event: api.EventStarted},
		{Event: api.EventStdout, Data: "out\n"},
		{Event: api.EventStderr, Data: "err\n"},
		{Event: api.EventResult, Result: res},
	}
	if !reflect.DeepEqual(evs, want) || !reflect.DeepEqual(got, res) {
		t.Errorf("got events %s, want %s", eventKinds(timedEvents(evs)), eventKinds(timedEvents(want)))
	}
}

// TestBlockingPostClientGoneRunContinues: a blocking POST whose client goes
// away leaves the run going; GET later has its result.
func TestBlockingPostClientGoneRunContinues(t *testing.T) {
	ts := newTestService(t)
	const id = "gone-1"
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := ts.client.Run(ctx, request("python", "import time\ntime.sleep(1)\nprint(\"done\")\n", withRunID(id)))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: got %v, want the client's deadline to cut it", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		res, err := ts.client.Get(context.Background(), id)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if res.State == api.StateFinished {
			checkSucceeded(t, res, "done\n")
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("got state %q after 15s, want finished", res.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestResultPostClientGone: a POST that asked for the JSON result and whose
// client goes away before it: a run the client named goes on (GET has its
// result later); one whose id the service made, which no one could ever
// fetch or stop, is stopped, running or queued (then it never starts).
func TestResultPostClientGone(t *testing.T) {
	ts := newTestService(t, func(c *Config) { c.MaxConcurrent = 1 })
	// post sends req for the JSON result and drops the connection once a run
	// of code is in the state want; it returns that run's id.
	post := func(t *testing.T, req api.Request, want api.State) string {
		t.Helper()
		body, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		hr, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://brig/v1/runs", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		hr.Header.Set("Content-Type", "application/json")
		hr.Header.Set("Accept", "application/json")
		done := make(chan error, 1)
		go func() {
			resp, err := ts.client.HTTP.Do(hr)
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
		var id string
		deadline := time.Now().Add(15 * time.Second)
		for id == "" {
			ts.mu.Lock()
			for _, r := range ts.runs {
				r.mu.Lock()
				if r.req.Code == req.Code && r.state == want {
					id = r.id
				}
				r.mu.Unlock()
			}
			ts.mu.Unlock()
			if time.Now().After(deadline) {
				cancel()
				t.Fatalf("no run of %q was %s after 15s", req.Code, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("the POST ended with %v, want the client's cancellation", err)
		}
		return id
	}
	finished := func(t *testing.T, id string, within time.Duration) *api.Result {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			res, err := ts.client.Get(context.Background(), id)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if res.State == api.StateFinished {
				return res
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %s: got state %q after %v, want finished", id, res.State, within)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	t.Run("named", func(t *testing.T) {
		id := post(t, request("python", "import time\ntime.sleep(1)\nprint(\"named\")\n", withRunID("gone-named")), api.StateRunning)
		checkSucceeded(t, finished(t, id, 15*time.Second), "named\n")
	})
	t.Run("unnamed running", func(t *testing.T) {
		id := post(t, request("python", "import time\ntime.sleep(30)\nprint(\"unnamed\")\n"), api.StateRunning)
		res := finished(t, id, 10*time.Second)
		checkStopped(t, res, "stopped by its client")
		if res.Stdout != "" {
			t.Errorf("got stdout %q, want none", res.Stdout)
		}
	})
	t.Run("unnamed queued", func(t *testing.T) {
		hold := openLiveStream(t, ts.client, request("python", "import time\ntime.sleep(30)\n", withRunID("gone-holder")))
		hold.waitEvent(t, api.EventStarted, 10*time.Second)
		id := post(t, request("python", "print(\"never\")\n"), api.StateQueued)
		res := finished(t, id, 10*time.Second)
		if _, err := ts.client.Stop(context.Background(), "gone-holder"); err != nil {
			t.Errorf("stopping the run that holds the slot: %v", err)
		}
		checkStopped(t, res, "stopped by its client")
		if res.Stdout != "" || res.Timing.StartMS != 0 || !strings.Contains(res.Message, "did not run") {
			t.Errorf("got stdout %q, start_ms %d, message %q, want a run that never started", res.Stdout, res.Timing.StartMS, res.Message)
		}
	})
}

// TestHalfClosedClientGetsItsAnswer: a client that shuts down its writing
// once its request is sent (as socat does) still reads: it gets its result,
// its stream to the result event and its DELETE's result, and its run of a
// generated id goes on (an audit found an empty 200 for each, and that run
// stopped, since Go's server ends a request's context at the read's end).
func TestHalfClosedClientGetsItsAnswer(t *testing.T) {
	ts := newTestService(t)
	// send writes the request on a connection of its own, shuts down its
	// writing and reads the answer.
	send := func(t *testing.T, method, path string, body []byte, header ...string) (*http.Response, string) {
		t.Helper()
		c := ts.dial(t)
		hr, err := http.NewRequest(method, "http://brig"+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		hr.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			hr.Header.Set(header[i], header[i+1])
		}
		if err := hr.Write(c); err != nil {
			t.Fatal(err)
		}
		if err := c.(*net.UnixConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), hr)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s: reading the answer: %v", method, path, err)
		}
		return resp, string(b)
	}
	code := "import time\ntime.sleep(0.5)\nprint('done')\n"
	body := func(id string) []byte {
		b, err := json.Marshal(request("python", code, withRunID(id)))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Run("result", func(t *testing.T) {
		resp, b := send(t, http.MethodPost, "/v1/runs", body(""))
		var res api.Result
		if err := json.Unmarshal([]byte(b), &res); resp.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("got %d %q (%v), want 200 and a Result", resp.StatusCode, b, err)
		}
		checkSucceeded(t, &res, "done\n")
	})
	t.Run("stream", func(t *testing.T) {
		resp, b := send(t, http.MethodPost, "/v1/runs", body(""), "Accept", "application/x-ndjson")
		lines := strings.Split(strings.TrimSpace(b), "\n")
		var last api.Event
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); resp.StatusCode != http.StatusOK || err != nil || last.Event != api.EventResult || last.Result == nil {
			t.Fatalf("got %d %q (%v), want 200 and a stream that ends with its result", resp.StatusCode, b, err)
		}
		checkSucceeded(t, last.Result, "done\n")
	})
	t.Run("delete", func(t *testing.T) {
		s := openLiveStream(t, ts.client, request("python", "import time\ntime.sleep(30)\n", withRunID("half-delete")))
		s.waitEvent(t, api.EventStarted, 10*time.Second)
		resp, b := send(t, http.MethodDelete, "/v1/runs/half-delete", nil)
		var res api.Result
		if err := json.Unmarshal([]byte(b), &res); resp.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("got %d %q (%v), want 200 and a Result", resp.StatusCode, b, err)
		}
		checkStopped(t, &res, "stopped by a DELETE request")
	})
}

// TestDeleteRun: DELETE stops a running run and a queued one (which never
// starts), and leaves a finished one's result as it was.
func TestDeleteRun(t *testing.T) {
	ts := newTestService(t, func(c *Config) {
		c.MaxConcurrent = 1
		c.NetworkModes = []string{api.NetworkNone, api.NetworkAny}
	})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// setup starts the run and returns its id and, for a finished run, its
		// result.
		setup func(t *testing.T) (string, *api.Result)
		// check checks DELETE's answer.
		check       func(t *testing.T, res, before *api.Result)
		wantStarted bool
	}{
		{
			name: "running",
			setup: func(t *testing.T) (string, *api.Result) {
				s := openLiveStream(t, ts.client, request("python", "while True:\n    pass\n", withRunID("del-running")))
				s.waitEvent(t, api.EventStarted, 10*time.Second)
				return "del-running", nil
			},
			check:       func(t *testing.T, res, _ *api.Result) { checkStopped(t, res, "stopped by a DELETE request") },
			wantStarted: true,
		},
		{
			name: "queued",
			setup: func(t *testing.T) (string, *api.Result) {
				hold := openLiveStream(t, ts.client, request("python", "import time\ntime.sleep(30)\n", withRunID("del-holder")))
				hold.waitEvent(t, api.EventStarted, 10*time.Second)
				t.Cleanup(func() {
					if _, err := ts.client.Stop(ctx, "del-holder"); err != nil {
						t.Errorf("stopping the run that holds the slot: %v", err)
					}
				})
				q := openLiveStream(t, ts.client, request("python", "print(\"never\")\n", withRunID("del-queued")))
				q.waitEvent(t, api.EventAccepted, 10*time.Second)
				got, err := ts.client.Get(ctx, "del-queued")
				if err != nil || got.State != api.StateQueued {
					t.Fatalf("GET: got %+v, %v, want state queued", got, err)
				}
				// And a networked one behind it: stopped, so unknown, as
				// API.md says of every networked run stopped, though its
				// program never ran (it read failed until the contract
				// audit).
				nq := openLiveStream(t, ts.client, request("python", "print(\"never\")\n", withRunID("del-queued-net"),
					func(r *api.Request) { r.Network = &api.Network{Mode: api.NetworkAny} }))
				nq.waitEvent(t, api.EventAccepted, 10*time.Second)
				res, err := ts.client.Stop(ctx, "del-queued-net")
				if err != nil || res.Reason != api.ReasonStopped || res.Outcome != api.OutcomeUnknown || res.ExitCode != nil {
					t.Errorf("DELETE of a queued networked run: got %+v, %v, want stopped, unknown and no exit code", res, err)
				}
				return "del-queued", nil
			},
			check: func(t *testing.T, res, _ *api.Result) {
				checkStopped(t, res, "stopped by a DELETE request")
				if res.ExitCode != nil || res.Stdout != "" {
					t.Errorf("got exit %s stdout %q, want no exit code and no output: the program never ran", exitCodeString(res.ExitCode), res.Stdout)
				}
			},
		},
		{
			name: "finished",
			setup: func(t *testing.T) (string, *api.Result) {
				res := ts.mustRun(t, request("python", "print(\"ok\")\n", withRunID("del-finished")))
				checkSucceeded(t, res, "ok\n")
				return "del-finished", res
			},
			check: func(t *testing.T, res, before *api.Result) {
				if !reflect.DeepEqual(res, before) {
					t.Errorf("got %+v, want the original result %+v", res, before)
				}
			},
			wantStarted: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, before := tc.setup(t)
			begin := time.Now()
			res, err := ts.client.Stop(ctx, id)
			if err != nil {
				t.Fatalf("DELETE: %v", err)
			}
			if took := time.Since(begin); took > 5*time.Second {
				t.Errorf("got DELETE answered in %s, want within 5s", took)
			}
			if res.ID != id {
				t.Errorf("got id %q, want %q", res.ID, id)
			}
			tc.check(t, res, before)
			evs, last := collectEvents(t, ts.client, id)
			if !reflect.DeepEqual(last, res) {
				t.Errorf("got Events' result %+v, want DELETE's %+v", last, res)
			}
			if got := eventIndex(timedEvents(evs), api.EventStarted) >= 0; got != tc.wantStarted {
				t.Errorf("got a started event %v (events %s), want %v", got, eventKinds(timedEvents(evs)), tc.wantStarted)
			}
		})
	}
}

// TestGetRunningRunShowsOutputSoFar: GET of a running run has its state and the
// output printed so far.
func TestGetRunningRunShowsOutputSoFar(t *testing.T) {
	ts := newTestService(t)
	const id = "get-running"
	s := openLiveStream(t, ts.client, request("python", "import sys, time\nprint(\"partial\")\nprint(\"warn\", file=sys.stderr)\ntime.sleep(10)\n", withRunID(id)))
	s.waitUntil(t, 10*time.Second, "stdout partial and stderr warn", func(evs []timedEvent) bool {
		_, out := firstLineAt(evs, api.EventStdout, "partial\n")
		_, errs := firstLineAt(evs, api.EventStderr, "warn\n")
		return out && errs
	})
	got, err := ts.client.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.State != api.StateRunning || got.Status != "" || got.Reason != "" || got.ExitCode != nil {
		t.Errorf("got state %q status %q reason %q exit %s, want running with no status, reason or exit code",
			got.State, got.Status, got.Reason, exitCodeString(got.ExitCode))
	}
	if got.ID != id || got.Stdout != "partial\n" || got.Stderr != "warn\n" {
		t.Errorf("got id %q stdout %q stderr %q, want %q, %q, %q", got.ID, got.Stdout, got.Stderr, id, "partial\n", "warn\n")
	}
	res, err := ts.client.Stop(context.Background(), id)
	if err != nil {
		t.Fatalf("DELETE: %v", err)
	}
	checkStopped(t, res, "stopped by a DELETE request")
	if res.Stdout != "partial\n" {
		t.Errorf("got the stopped run's stdout %q, want %q (output is kept for failed runs)", res.Stdout, "partial\n")
	}
}

// getOnceSeen waits until s, the stream of run id, has the line on stream,
// then gets the run as GET /v1/runs/{id} shows it: a running run's result so
// far.
func getOnceSeen(t *testing.T, ts *testService, s *liveStream, id string, timeout time.Duration, stream, line string) *api.Result {
	t.Helper()
	s.waitUntil(t, timeout, stream+" "+strings.TrimSpace(line), func(evs []timedEvent) bool {
		_, ok := firstLineAt(evs, stream, line)
		return ok
	})
	got, err := ts.client.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return got
}

// TestGetRunningRunShowsCapsSoFar: GET of a running run whose stdout passed
// its cap says so, as its result will (the harness probe of 2026-12-05: the
// flags were false until the end, where a harness that polls would take the
// output for whole).
func TestGetRunningRunShowsCapsSoFar(t *testing.T) {
	ts := newTestService(t)
	const id = "get-running-caps"
	s := openLiveStream(t, ts.client, request("python", fmt.Sprintf("import sys, time\nsys.stdout.write('a' * %d)\nsys.stdout.flush()\nprint('past', file=sys.stderr)\ntime.sleep(10)\n", api.MaxStdoutChars+10), withRunID(id)))
	// Once the stream has carried the whole cap: the stderr line may come
	// first, stdout's pipe holding all the program wrote (outputPipe).
	s.waitUntil(t, 20*time.Second, "the stdout cap and the stderr line", func(evs []timedEvent) bool {
		n := 0
		for _, ev := range evs {
			if ev.Event.Event == api.EventStdout {
				n += len(ev.Data)
			}
		}
		_, past := firstLineAt(evs, api.EventStderr, "past\n")
		return past && n >= api.MaxStdoutChars
	})
	got, err := ts.client.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.State != api.StateRunning || len(got.Stdout) != api.MaxStdoutChars || !got.StdoutTruncated || got.StderrTruncated {
		t.Errorf("got state %s, %d characters of stdout, stdout_truncated %v, stderr_truncated %v; want running, %d, true, false",
			got.State, len(got.Stdout), got.StdoutTruncated, got.StderrTruncated, api.MaxStdoutChars)
	}
	if _, err := ts.client.Stop(context.Background(), id); err != nil {
		t.Fatalf("DELETE: %v", err)
	}
}

// GET of a run in flight gives the timing known so far: nothing while it is
// queued, queued_ms once admitted and start_ms once its program has started,
// as the result will (a run behind another in a service of one slot waits
// for it, so both are well above 0).
func TestGetRunningRunShowsTimingSoFar(t *testing.T) {
	ts := newTestService(t, func(c *Config) { c.MaxConcurrent = 1 })
	ctx := context.Background()
	first := openLiveStream(t, ts.client, request("python", "import time; time.sleep(0.6)", withRunID("timing-first")))
	first.waitUntil(t, 10*time.Second, "the first run started", func(evs []timedEvent) bool { return eventIndex(evs, api.EventStarted) >= 0 })
	second := openLiveStream(t, ts.client, request("python", "import time; print('up', flush=True); time.sleep(10)", withRunID("timing-second")))
	second.waitUntil(t, 10*time.Second, "the second run accepted", func(evs []timedEvent) bool { return eventIndex(evs, api.EventAccepted) >= 0 })
	if got, err := ts.client.Get(ctx, "timing-second"); err != nil || got.State != api.StateQueued || got.Timing.QueuedMS != 0 || got.Timing.StartMS != 0 {
		t.Errorf("queued: got %+v (%v), want state queued, queued_ms and start_ms 0 (not known yet)", got, err)
	}
	second.waitUntil(t, 10*time.Second, "the second run printed", func(evs []timedEvent) bool {
		_, ok := firstLineAt(evs, api.EventStdout, "up\n")
		return ok
	})
	got, err := ts.client.Get(ctx, "timing-second")
	if err != nil {
		t.Fatal(err)
	}
	tm := got.Timing
	if got.State != api.StateRunning || tm.QueuedMS < 300 || tm.StartMS < tm.QueuedMS || tm.TotalMS < tm.StartMS {
		t.Errorf("running: got state %s timing %+v, want running with 300 <= queued_ms <= start_ms <= total_ms", got.State, tm)
	}
	res, err := ts.client.Stop(ctx, "timing-second")
	if err != nil {
		t.Fatal(err)
	}
	if res.Timing.QueuedMS != tm.QueuedMS || res.Timing.StartMS > tm.StartMS+1 || res.Timing.StartMS < tm.StartMS-50 {
		t.Errorf("got the result's timing %+v, want the running run's queued_ms, and start_ms at most its (%+v), by less than 50 ms (the callback comes after the exec)", res.Timing, tm)
	}
}

// TestUnreadAnswersDoNotHoldTheConnection: a client that pipelines requests
// and never reads the answers loses its connection once an answer could not
// be written for the write timeout (the API audit held one open past 150 s
// with 2,000 unread answers, a goroutine and a descriptor each such client);
// a blocking POST whose run outlasts the timeout still gets its result, the
// timeout counting from the answer's first byte.
func TestUnreadAnswersDoNotHoldTheConnection(t *testing.T) {
	old := streamWriteTimeout
	streamWriteTimeout = 500 * time.Millisecond
	t.Cleanup(func() { streamWriteTimeout = old })
	ts := newTestService(t)
	c := ts.dial(t)
	if uc, ok := c.(*net.UnixConn); ok {
		uc.SetReadBuffer(4096)
	}
	req := strings.Repeat("GET /openapi.yaml HTTP/1.1\r\nHost: brig\r\n\r\n", 2000)
	go io.WriteString(c, req)
	time.Sleep(2 * time.Second) // unread: the service's writes block
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := io.Copy(io.Discard, c)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) { // closed with requests unread: a reset
		t.Fatalf("reading the answers: %v after %d bytes; want the service to have closed the connection", err, n)
	}
	if whole := int64(2000 * len(api.OpenAPI)); n >= whole {
		t.Errorf("read %d bytes, every answer: want the connection cut before", n)
	}
	res := ts.mustRun(t, request("python", "import time\ntime.sleep(1.2)\nprint('late')"))
	if res.Stdout != "late\n" {
		t.Errorf("a run longer than the write timeout: got %s %q (%s), want its result", res.Outcome, res.Stdout, res.Message)
	}
}

// A run that lasts longer than the server's read timeout keeps its blocking POST
// and its stream: the timeout bounds reading the request, not the run.
func TestLongRunOutlivesBodyReadTimeout(t *testing.T) {
	old := bodyReadTimeout
	bodyReadTimeout = 500 * time.Millisecond
	t.Cleanup(func() { bodyReadTimeout = old })
	ts := newTestService(t)
	code := "import time\ntime.sleep(1.5)\nprint('late')"
	t.Run("blocking", func(t *testing.T) {
		res := ts.mustRun(t, request("python", code))
		if res.Stdout != "late\n" || res.Outcome != api.OutcomeSucceeded {
			t.Fatalf("got %s stdout %q (%s), want succeeded with late", res.Outcome, res.Stdout, res.Message)
		}
	})
	t.Run("stream", func(t *testing.T) {
		res, err := ts.client.Stream(context.Background(), request("python", code), nil)
		if err != nil || res.Stdout != "late\n" {
			t.Fatalf("got %+v, %v, want the result with late", res, err)
		}
	})
	t.Run("a body slower than the timeout", func(t *testing.T) {
		// Its answer says what to do, and not the socket's path (an audit
		// got "read unix /tmp/...sock->@: i/o timeout").
		c := ts.dial(t)
		if _, err := io.WriteString(c, "POST /v1/runs HTTP/1.1\r\nHost: brig\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"language\""); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "did not arrive within 500ms") || strings.Contains(string(b), ts.socket) {
			t.Fatalf("got %d %s, want 400 saying the body did not arrive within 500ms, without the socket's path", resp.StatusCode, b)
		}
	})
}

// TestOutputFloodFewEvents: a program that writes its output a byte at a time
// gets it whole, in events at most one an outputWindow while it keeps
// printing (each event costs the service memory: a million of them had grown
// it by 65 MB), and its first byte still comes at once.
func TestOutputFloodFewEvents(t *testing.T) {
	ts := newTestService(t)
	const n = 200_000
	code := fmt.Sprintf("import os\nfor _ in range(%d):\n    os.write(1, b'x')\n", n)
	var events int
	var data strings.Builder
	res, err := ts.client.Stream(context.Background(), request("python", code), func(ev api.Event) error {
		if ev.Event == api.EventStdout {
			events++
			data.WriteString(ev.Data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if data.String() != strings.Repeat("x", n) || res.Stdout != data.String() {
		t.Fatalf("got %d characters in events and %d in the result, want %d each", data.Len(), len(res.Stdout), n)
	}
	if most := int(res.Timing.TotalMS/outputWindow.Milliseconds()) + 2; events > most {
		t.Errorf("got %d stdout events in %d ms, want at most %d (one an outputWindow)", events, res.Timing.TotalMS, most)
	}
}
