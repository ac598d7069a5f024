package supervisor

import (
	"context"
	"net"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/api"
)

// TestShutdown: Shutdown refuses new runs while it drains, lets a run in
// flight finish within the grace period, and stops one that outlasts it (reason
// stopped); either way the result is in the journal for the next start.
func TestShutdown(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace time.Duration
		code  string
		// check checks the in-flight run's result.
		check func(t *testing.T, res *api.Result)
		// minTook and maxTook bound how long Shutdown takes once the run started.
		minTook, maxTook time.Duration
		// refuse is whether to send a POST while draining (the window must be
		// long enough to see it).
		refuse bool
	}{
		{
			name:    "drains",
			grace:   10 * time.Second,
			code:    "import time\ntime.sleep(1)\nprint(\"done\")\n",
			check:   func(t *testing.T, res *api.Result) { checkSucceeded(t, res, "done\n") },
			minTook: 500 * time.Millisecond,
			maxTook: 8 * time.Second,
			refuse:  true,
		},
		{
			name:  "grace expires",
			grace: 500 * time.Millisecond,
			code:  "while True:\n    pass\n",
			check: func(t *testing.T, res *api.Result) {
				checkStopped(t, res, "stopped by the service's shutdown before the program ended; send it again once the service is back, under a new id or none (this id keeps this result)")
			},
			minTook: 500 * time.Millisecond,
			maxTook: 5 * time.Second,
		},
		{
			// brig serve's grace = "0s".
			name:  "no grace",
			grace: -1,
			code:  "while True:\n    pass\n",
			check: func(t *testing.T, res *api.Result) {
				checkStopped(t, res, "stopped by the service's shutdown before the program ended; send it again once the service is back, under a new id or none (this id keeps this result)")
			},
			maxTook: 3 * time.Second,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestService(t, func(c *Config) { c.Grace = tc.grace })
			ctx := context.Background()
			const id = "shutdown-1"
			s := openLiveStream(t, ts.client, request("python", tc.code, withRunID(id)))
			s.waitEvent(t, api.EventStarted, 10*time.Second)

			svc := ts.Service
			begin := time.Now()
			shut := make(chan error, 1)
			go func() { shut <- svc.Shutdown(ctx) }()
			ts.Service = nil // being shut down: the harness's cleanup must not do it again

			if tc.refuse {
				waitDraining(t, ts)
				for _, stream := range []bool{false, true} {
					req := request("python", "print(\"late\")\n")
					var err error
					if stream {
						_, err = ts.client.Stream(ctx, req, nil)
					} else {
						_, err = ts.client.Run(ctx, req)
					}
					ce := apiErr(t, err, http.StatusServiceUnavailable, "")
					if ce.API.Code != api.ErrorUnavailable {
						t.Errorf("stream %v: got code %q, want %q", stream, ce.API.Code, api.ErrorUnavailable)
					}
					// None: the clients raise it at once.
					if ce.RetryAfter != 0 {
						t.Errorf("stream %v: got Retry-After %v, want none", stream, ce.RetryAfter)
					}
				}
				// The run in flight is still answered while the service drains,
				// and a retry of it (the same id and body) gets it.
				if got, err := ts.client.Get(ctx, id); err != nil || got.State != api.StateRunning {
					t.Errorf("GET while draining: got %+v, %v, want state running", got, err)
				}
				retry := openLiveStream(t, ts.client, request("python", tc.code, withRunID(id)))
				retry.waitEvent(t, api.EventStarted, 5*time.Second)
			}

			var err error
			select {
			case err = <-shut:
			case <-time.After(30 * time.Second):
				t.Fatalf("Shutdown did not return within 30s")
			}
			took := time.Since(begin)
			if err != nil {
				t.Errorf("Shutdown: got %v, want nil", err)
			}
			if took < tc.minTook || took > tc.maxTook {
				t.Errorf("got Shutdown done in %s, want %s to %s", took, tc.minTook, tc.maxTook)
			}
			// Shutdown returns once the run's canonical line is written.
			lines := ts.logs.Lines("run finished")
			if len(lines) != 1 || lines[0][logID] != id {
				t.Errorf("got %d %q lines (%v) when Shutdown returned, want the one of %s", len(lines), "run finished", lines, id)
			}

			res, err := s.wait(t, 5*time.Second)
			if err != nil {
				t.Fatalf("the stream of the run in flight: got %v, want its result", err)
			}
			tc.check(t, res)

			// The result is in the journal.
			ts.start(t, restartConfig(ts, func(c *Config) { c.Grace = tc.grace }))
			got, err := ts.client.Get(ctx, id)
			if err != nil {
				t.Fatalf("GET after a restart: %v", err)
			}
			if !reflect.DeepEqual(got, res) {
				t.Errorf("GET after a restart: got %+v, want the result the stream had %+v", got, res)
			}
		})
	}
}

// waitDraining waits until the service says it is draining.
func waitDraining(tb testing.TB, ts *testService) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		h, err := ts.client.Health(context.Background())
		if err != nil {
			tb.Fatalf("Health while draining: %v", err)
		}
		if h.Status == "draining" {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("got health status %q 5s after Shutdown began, want draining", h.Status)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestShutdownGivesGraceToRunAcceptedJustBefore: a run accepted just before
// Shutdown began (it passed the draining check and is in the service's runs,
// its journal record being written) is an accepted run like any other: it gets
// the grace period and finishes normally, and Shutdown waits for it.
//
// The journal write is held up with a bbolt write transaction of the test's, so
// that Shutdown begins exactly while submit is between its draining check and
// counting the run in runsWG. The run is networked: an offline one's submit
// does not wait for the journal's commit (TestOfflineRunStartsBeforeItsCommit).
func TestShutdownGivesGraceToRunAcceptedJustBefore(t *testing.T) {
	ts := newTestService(t, func(c *Config) {
		c.Grace = 10 * time.Second
		c.NetworkModes = []string{api.NetworkNone, api.NetworkAny}
	})
	ctx := context.Background()
	svc := ts.Service
	const id = "just-before"

	release := holdCommits(t, svc.journal) // journal.accept waits for it
	defer release()
	type answer struct {
		res *api.Result
		err error
	}
	posted := make(chan answer, 1)
	go func() {
		res, err := ts.client.Run(ctx, request("python", "print(\"ran\")\n", withRunID(id), networked(api.NetworkAny)))
		posted <- answer{res, err}
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		svc.mu.Lock()
		_, accepted := svc.runs[runKey{uid: os.Getuid(), id: id}] // the test is the peer
		svc.mu.Unlock()
		if accepted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run was not accepted within 5s")
		}
	}

	shut := make(chan error, 1)
	go func() { shut <- svc.Shutdown(ctx) }()
	ts.Service = nil // being shut down: the harness's cleanup must not do it again
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		svc.mu.Lock()
		draining := svc.draining
		svc.mu.Unlock()
		if draining {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Shutdown did not begin draining within 5s")
		}
	}
	time.Sleep(50 * time.Millisecond) // Shutdown is past its wait for the runs by now, if it did not wait
	release()

	var a answer
	select {
	case a = <-posted:
	case <-time.After(20 * time.Second):
		t.Fatalf("the POST got no answer within 20s")
	}
	var err error
	select {
	case err = <-shut:
	case <-time.After(30 * time.Second):
		t.Fatalf("Shutdown did not return within 30s")
	}
	if err != nil {
		t.Errorf("Shutdown: got %v, want nil", err)
	}
	if a.err != nil {
		t.Fatalf("POST: got %v, want the run's result", a.err)
	}
	if a.res.Reason != "" {
		t.Errorf("got reason %q (%s), want the run to finish within the 10s grace like every run accepted before Shutdown", a.res.Reason, a.res.Message)
	}
	checkSucceeded(t, a.res, "ran\n")
	time.Sleep(100 * time.Millisecond) // let a run that Shutdown did not wait for write its errors
	if errs := ts.logs.Lines("recording a result in the journal"); len(errs) > 0 {
		t.Errorf("got %q errors %v, want none: the result was written after the journal closed", "recording a result in the journal", errs)
	}
}

// TestShutdownClosesSlowClients: a client still sending its request when the
// service stops (or reading an answer slowly) loses its connection once
// connsCloseWait has passed, with a warning, and the stop is still clean: a
// routine stop exited 1 for one half-sent POST (the lifecycle probe).
func TestShutdownClosesSlowClients(t *testing.T) {
	was := connsCloseWait
	connsCloseWait = 300 * time.Millisecond
	defer func() { connsCloseWait = was }()
	ts := newTestService(t)
	c, err := net.Dial("unix", ts.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("POST /v1/runs HTTP/1.1\r\nHost: brig\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"lan")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the server has read the head: the connection is active
	svc := ts.Service
	ts.Service = nil // the harness's cleanup must not stop it again
	start := time.Now()
	if err := svc.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown: got %v, want nil: a slow client is no failure of the stop", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Shutdown took %v, want about connsCloseWait (%v)", took, connsCloseWait)
	}
	if !strings.Contains(ts.logs.String(), "closed the API connections still open at the stop") {
		t.Errorf("no warning of the connections closed in the log:\n%s", ts.logs.String())
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 512)); err == nil {
		t.Errorf("the slow client's connection is still open after the stop")
	}
}
