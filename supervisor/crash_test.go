package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/client"
	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/jail"
)

// serveProcess is the test binary running as a whole service (serveForTest), so
// that a test can kill it as a crash would.
type serveProcess struct {
	cmd    *exec.Cmd
	log    string // its stderr
	exited chan struct{}
	err    error // cmd.Wait's, set before exited is closed
}

// startServeProcess starts the service process on socket and state, logging to
// logPath, and waits until it answers GET /v1/health. It is killed when tb ends
// if it is still running.
func startServeProcess(tb testing.TB, socket, state, logPath string) *serveProcess {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	logf, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), serveEnv+"="+socket+" "+state)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting the service process: %v", err)
	}
	p := &serveProcess{cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	tb.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			cmd.Process.Kill()
			<-p.exited
		}
		if tb.Failed() {
			b, _ := os.ReadFile(logPath)
			tb.Logf("service process %d log:\n%s", cmd.Process.Pid, b)
		}
	})

	c := client.New(socket)
	defer c.HTTP.Transport.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Health(ctx)
		cancel()
		if err == nil {
			return p
		}
		select {
		case <-p.exited:
			tb.Fatalf("the service process exited (%v) before it answered: %v", p.err, err)
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the service process did not answer GET /v1/health within 20s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill kills the process as a crash would, and reaps it.
func (p *serveProcess) kill(tb testing.TB) {
	tb.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		tb.Fatalf("killing the service process: %v", err)
	}
	<-p.exited
}

// terminate stops the process as an operator would (SIGTERM) and returns how
// it exited.
func (p *serveProcess) terminate(tb testing.TB, timeout time.Duration) error {
	tb.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		tb.Fatalf("signalling the service process: %v", err)
	}
	select {
	case <-p.exited:
		return p.err
	case <-time.After(timeout):
		tb.Fatalf("the service process did not exit within %s of SIGTERM", timeout)
		return nil
	}
}

// processesInCgroup lists the live processes (pid, command, state, uid and
// parent) whose cgroups name parent. A zombie is dead: whether it is reaped is
// up to whoever it was reparented to (this host's pid 1), so it is not listed.
func processesInCgroup(parent string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil || !bytes.Contains(b, []byte("/"+parent+"/")) {
			continue
		}
		status, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		fields := map[string]string{}
		for _, l := range strings.Split(string(status), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok {
				fields[k] = strings.Join(strings.Fields(v), " ")
			}
		}
		if strings.HasPrefix(fields["State"], "Z") || fields["State"] == "" {
			continue
		}
		out = append(out, fmt.Sprintf("pid %s %s (state %s, uid %s, ppid %s)", e.Name(), fields["Name"],
			fields["State"], strings.Fields(fields["Uid"] + " ?")[0], fields["PPid"]))
	}
	return out
}

// cgroupsUnder lists the groups below parent in every mounted hierarchy.
func cgroupsUnder(parent string) []string {
	roots := []string{filepath.Join("/sys/fs/cgroup", parent)}
	ents, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range ents {
		if e.IsDir() {
			roots = append(roots, filepath.Join("/sys/fs/cgroup", e.Name(), parent))
		}
	}
	var out []string
	for _, root := range roots {
		subs, _ := os.ReadDir(root)
		for _, s := range subs {
			if s.IsDir() {
				out = append(out, filepath.Join(root, s.Name()))
			}
		}
	}
	return out
}

// TestCrashRecovery kills the service process (SIGKILL) with runs in flight:
// nothing of theirs is left running, and the restarted service answers every
// id: the finished run with its result, the interrupted ones as stopped.
func TestCrashRecovery(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CheckLeaks(t, crashCgroupParent)
	// A socket's path must fit in 108 bytes: t.TempDir's can be too long.
	dir, err := os.MkdirTemp("", "brig-cr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket, state := filepath.Join(dir, "s.sock"), filepath.Join(dir, "state")
	ctx := context.Background()

	first := startServeProcess(t, socket, state, filepath.Join(dir, "serve1.log"))
	c := newCheckedClient(t, socket)
	quick, err := c.Run(ctx, request("python", "print(\"quick\")\n", withRunID("crash-quick")))
	if err != nil {
		t.Fatalf("the quick run: %v", err)
	}
	checkSucceeded(t, quick, "quick\n")

	const inFlight = 4
	var ids []string
	var streams []*liveStream
	for i := range inFlight {
		id := fmt.Sprintf("crash-run-%d", i)
		ids = append(ids, id)
		streams = append(streams, openLiveStream(t, c, request("python", "import time\nprint(\"x\", flush=True)\ntime.sleep(30)\n", withRunID(id))))
	}
	for _, s := range streams {
		s.waitEvent(t, api.EventStarted, 20*time.Second)
		s.waitUntil(t, 10*time.Second, "stdout x", func(evs []timedEvent) bool {
			_, ok := firstLineAt(evs, api.EventStdout, "x\n")
			return ok
		})
	}

	// The init finishes setting itself up (its identity, its filter) just after
	// the program started; a run in flight for real is past that.
	time.Sleep(300 * time.Millisecond)
	first.kill(t)
	for i, s := range streams {
		res, err := s.wait(t, 10*time.Second)
		if res != nil || err == nil {
			t.Errorf("stream %s: got result %+v, %v, want the stream cut without a result", ids[i], res, err)
		}
	}

	// Each sandbox's init dies by its parent-death signal, and its programs
	// with its pid namespace.
	var left []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if left = processesInCgroup(crashCgroupParent); len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("5s after the kill got processes still in %s: %q, want none", crashCgroupParent, left)
	}
	if kids := testutil.ChildPIDs(); len(kids) > 0 {
		t.Errorf("got child processes %q after the kill, want none", kids)
	}

	// The restart replaces the stale socket and sweeps the dead runs' groups.
	second := startServeProcess(t, socket, state, filepath.Join(dir, "serve2.log"))
	c = newCheckedClient(t, socket)
	got, err := c.Get(ctx, "crash-quick")
	if err != nil || !reflect.DeepEqual(got, quick) {
		t.Errorf("GET crash-quick after the restart: got %+v, %v, want the original result %+v", got, err, quick)
	}
	for _, id := range ids {
		t.Run(id, func(t *testing.T) {
			res, err := c.Get(ctx, id)
			if err != nil {
				t.Fatalf("GET after the restart: %v", err)
			}
			checkStopped(t, res, "")
			if res.ID != id || res.Language != "python" || res.ExitCode != nil {
				t.Errorf("got id %q language %q exit %s, want %q python and no exit code", res.ID, res.Language, exitCodeString(res.ExitCode), id)
			}
			evs, last := collectEvents(t, c, id)
			if len(evs) < 2 || evs[0].Event != api.EventAccepted || evs[0].ID != id {
				t.Errorf("got events %s, want accepted %s first", eventKinds(timedEvents(evs)), id)
			}
			if !reflect.DeepEqual(last, res) {
				t.Errorf("got the replay's result %+v, want GET's %+v", last, res)
			}
		})
	}
	// Not through the checked client: serveForTest's HostInfo has no languages,
	// which GET /v1/health gives as null (TestHealthWithoutLanguagesMatchesSchema).
	plain := client.New(socket)
	if h, err := plain.Health(ctx); err != nil || h.Running != 0 || h.Queued != 0 {
		t.Errorf("got health %+v, %v, want nothing running or queued", h, err)
	}
	plain.HTTP.Transport.(interface{ CloseIdleConnections() }).CloseIdleConnections()

	if err := second.terminate(t, 30*time.Second); err != nil {
		t.Errorf("the restarted service process exited with %v after SIGTERM, want 0", err)
	}
	if groups := cgroupsUnder(crashCgroupParent); len(groups) > 0 {
		t.Errorf("got cgroups %q left under %s, want none", groups, crashCgroupParent)
	}
	if left := processesInCgroup(crashCgroupParent); len(left) > 0 {
		t.Errorf("got processes %q in %s after the service stopped, want none", left, crashCgroupParent)
	}
	if kids := testutil.ChildPIDs(); len(kids) > 0 {
		t.Errorf("got child processes %q after the service stopped, want none", kids)
	}
}

// TestCrashRecoverySocketInUse: a second service on a socket that still
// answers refuses to start instead of taking the socket over.
func TestCrashRecoverySocketInUse(t *testing.T) {
	testutil.RequireRoot(t)
	dir, err := os.MkdirTemp("", "brig-cr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "s.sock")
	ln, err := Listen(socket, "")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, err = Listen(socket, "")
	if err == nil {
		t.Errorf("got %v listening on a socket in use, want an error saying another service answers there", err)
	}
	ln.Close()
	wg.Wait()
}

// TestHealthWithoutLanguagesMatchesSchema: a service whose HostInfo has no
// languages (serveForTest's, or a host where no rootfs is ready) still answers
// GET /v1/health as api/openapi.yaml says: languages is an object, never null.
func TestHealthWithoutLanguagesMatchesSchema(t *testing.T) {
	testutil.RequireRoot(t)
	dir, err := os.MkdirTemp("", "brig-cr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "s.sock")
	svc, err := New(Config{StateDir: filepath.Join(dir, "state"), Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))}, HostInfo{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(socket, "")
	if err != nil {
		svc.Shutdown(context.Background())
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- svc.Serve(ln) }()
	defer func() {
		svc.Shutdown(context.Background())
		<-served
	}()
	c := newCheckedClient(t, socket) // reports a body that does not match the schema
	h, err := c.Health(context.Background())
	if err != nil {
		t.Fatalf("Health: %v", err)
	}
	if h.Languages == nil {
		t.Errorf("got languages null, want an object (empty when the host has none)")
	}
}

// A retry of a run accepted before a restart that took away its network mode,
// or the packages of its language, gets that run (stopped, and unknown when
// networked), not a 400 that tells the harness to rewrite the request, which
// would run its program a second time.
func TestRetryAfterARestartWithLess(t *testing.T) {
	for _, tc := range []struct {
		name, body, outcome string
		legacy              bool // journaled with the key before domains and packages were sets
	}{
		{"network mode", `{"id":"net-1","language":"python","code":"print(1)","network":{"mode":"domains","domains":["example.test"]}}`, "unknown", false},
		{"packages", `{"id":"pkg-1","language":"python","code":"import six","packages":["six>=1"]}`, "failed", false},
		{"the key of an earlier brig", `{"id":"old-1","language":"python","code":"print(1)","packages":["six>=1","attrs>=0"],"network":{"mode":"domains","domains":["b.test","A.test"]}}`, "unknown", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			req, aerr := decodeRequest([]byte(tc.body))
			if aerr != nil {
				t.Fatal(aerr)
			}
			// Accepted by the service before the restart, which died with it in flight.
			j, err := openJournal(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			key := requestKey(req)
			if tc.legacy {
				if key = legacyRequestKey(req); key == requestKey(req) {
					t.Fatal("the request's key is the same both ways: it tests nothing")
				}
			}
			rec := &record{Key: key, Language: req.Language, Network: req.Network.Mode, Packages: req.Packages, AcceptedAt: time.Now()}
			if err := j.accept(runKey{uid: 0, id: req.ID}, rec); err != nil {
				t.Fatal(err)
			}
			if err := j.close(); err != nil {
				t.Fatal(err)
			}
			// The service after the restart: mode none alone, no packages.
			svc, c := availableService(t, Config{StateDir: dir})
			resp, err := c.Post("http://brig/v1/runs", "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var res api.Result
			if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || res.ID != req.ID || res.State != api.StateFinished || res.Reason != api.ReasonStopped || string(res.Outcome) != tc.outcome {
				t.Errorf("a retry after the restart: got %d %+v, want 200 and the run, stopped with outcome %s", resp.StatusCode, res, tc.outcome)
			}
			// A networked run's connections are not known after a crash: its
			// empty list says nothing, and its message says so.
			if says := strings.Contains(res.Message, "the list of its connections"); says != (req.Network.Mode != api.NetworkNone) {
				t.Errorf("got the message %q of a run of network mode %s", res.Message, req.Network.Mode)
			}
			// Counted among the runs, but not in the histograms of times:
			// its total_ms holds the service's downtime.
			if got := series(t, svc.metrics, "brig_runs_total")["language=python,outcome="+tc.outcome+",reason=stopped"]; got != 1 {
				t.Errorf("brig_runs_total of the interrupted run: got %v, want 1", got)
			}
			mfs, err := svc.metrics.reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				for _, m := range mf.GetMetric() {
					if h := m.GetHistogram(); h != nil && h.GetSampleCount() != 0 && strings.HasPrefix(mf.GetName(), "brig_run_") {
						t.Errorf("%s counts %d runs, want none: an interrupted run's times hold the downtime", mf.GetName(), h.GetSampleCount())
					}
				}
			}
		})
	}
}

// A result answered while the journal can't take it (its disk full) is kept
// and committed once the disk has room again, so that it survives the next
// restart; one still unwritten at the stop fails the stop, which names it,
// rather than exiting 0 and reading as stopped after the restart, unless the
// journal's pending file holds it, which the restart recovers (the recovery
// probe's stop had named those too).
func TestAnsweredResultsSurviveAFullDisk(t *testing.T) {
	testutil.RequireRoot(t)
	for _, room := range []string{"freed", "none", "for the pending file", "for a line without the output"} {
		t.Run(room, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "brig-full")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			state := testutil.Tmpfs(t, "8m")
			hold := make(chan struct{})
			big := strings.Repeat("x", 900_000) // more pages than the journal has free: it must grow
			l := &fakeLauncher{run: func(ctx context.Context, spec jail.Spec) (*jail.Result, error) {
				<-hold
				zero := 0
				return &jail.Result{End: jail.EndCompleted, ExitCode: &zero, Stdout: big, Timing: jail.Timing{StartMS: 1, TotalMS: 2}}, nil
			}}
			fs := &fakeService{launcher: l, socket: filepath.Join(dir, "brig.sock"), state: state}
			fs.start(t)
			answered := make(chan *api.Result, 1)
			go func() {
				res, err := fs.client.Run(context.Background(), api.Request{ID: "full-1", Language: "python", Code: "print('x' * 900000)"})
				if err != nil {
					t.Error(err)
				}
				answered <- res
			}()
			for l.calls() == 0 {
				time.Sleep(time.Millisecond)
			}
			filler := filepath.Join(state, "filler")
			f, err := os.Create(filler)
			if err != nil {
				t.Fatal(err)
			}
			chunk := make([]byte, 64<<10)
			for {
				if _, err := f.Write(chunk); err != nil {
					break // ENOSPC: full
				}
			}
			// Room for the pending file's line, not for the journal's pages
			// besides; or for a line of an accept's size alone.
			if free := map[string]int64{"for the pending file": 1_250_000, "for a line without the output": 64 << 10}[room]; free > 0 {
				fi, err := f.Stat()
				if err != nil {
					t.Fatal(err)
				}
				if err := f.Truncate(fi.Size() - free); err != nil {
					t.Fatal(err)
				}
			}
			f.Close()
			close(hold)
			if res := <-answered; res == nil || res.Stdout != big {
				t.Fatal("the run was not answered with its output")
			}
			waitUntil := func(what string, cond func() bool) {
				t.Helper()
				for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%s: got unwritten %v", what, fs.unwrittenIDs())
					}
				}
			}
			waitUntil("the result is not in the journal while the disk is full", func() bool { return slices.Equal(fs.unwrittenIDs(), []string{"full-1"}) })
			// While a result waits for the journal, no run is taken whose
			// answer a crash could lose (an offline run's accept line may
			// still fit in the pending file where its result would not: the
			// lifecycle probe's).
			_, err = fs.client.Run(context.Background(), api.Request{Language: "python", Code: "print(1)"})
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Status != http.StatusServiceUnavailable || ce.RetryAfter == 0 || !strings.Contains(ce.API.Message, "could not record every answered result in its journal (1 held") {
				t.Errorf("a run while a result waits for the journal: got %v, want a 503 with Retry-After naming the journal", err)
			}
			switch room {
			case "for a line without the output":
				// The stop names the result, whose output is lost; the
				// restart recovers its answered status, not "stopped" (the
				// crash probe of 2026-12-06).
				err := fs.Service.Shutdown(context.Background())
				<-fs.served
				fs.Service = nil
				if err == nil || !strings.Contains(err.Error(), "(full-1)") {
					t.Errorf("Shutdown with a result's status alone in the pending file: got %v, want an error naming it", err)
				}
				os.Remove(filler)
				fs.start(t)
				got, err := fs.client.Get(context.Background(), "full-1")
				if err != nil || got.Outcome != api.OutcomeSucceeded || got.ExitCode == nil || *got.ExitCode != 0 || got.Stdout != "" || !strings.Contains(got.Message, "lost its output") {
					t.Fatalf("after the restart: got %v, %+v; want the answered success, its output said lost", err, got)
				}
				fs.stop(t)
				return
			case "none":
				err := fs.Service.Shutdown(context.Background())
				<-fs.served
				fs.Service = nil
				if err == nil || !strings.Contains(err.Error(), "1 answered results could not be written to the journal (full-1)") {
					t.Errorf("Shutdown with a result unwritten: got %v, want an error naming it", err)
				}
				return
			case "for the pending file":
				if b, err := os.ReadFile(filepath.Join(state, pendingFile)); err != nil || !strings.Contains(string(b), big) {
					t.Fatalf("the pending file (%v) does not hold the result: the case needs it to", err)
				}
				err := fs.Service.Shutdown(context.Background())
				<-fs.served
				fs.Service = nil
				if err != nil {
					t.Errorf("Shutdown with a result the pending file holds: got %v, want nil", err)
				}
				os.Remove(filler)
			default:
				os.Remove(filler)
				waitUntil("the result was committed once the disk had room", func() bool { return len(fs.unwrittenIDs()) == 0 })
				if _, err := fs.client.Run(context.Background(), api.Request{Language: "python", Code: "print(1)"}); err != nil {
					t.Errorf("a run once the journal took the result: got %v, want it run", err)
				}
				fs.stop(t)
			}
			fs.start(t)
			got, err := fs.client.Get(context.Background(), "full-1")
			if err != nil || got.Outcome != api.OutcomeSucceeded || got.Stdout != big {
				t.Fatalf("after the restart: got %v (outcome %v, %d bytes of stdout), want the answered result", err, got.Outcome, len(got.Stdout))
			}
			fs.stop(t)
		})
	}
}

// unwrittenIDs lists the runs whose answered result the journal has not taken.
func (s *Service) unwrittenIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, r := range s.runs {
		if r.unwritten != nil {
			ids = append(ids, r.id)
		}
	}
	slices.Sort(ids)
	return ids
}
