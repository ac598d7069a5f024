package supervisor

// The service's logic, tested without root: a fake Launcher stands in for the
// jail, and the socket is a plain Unix listener (Listen's chown to root is the
// one privileged step brig serve adds). Admission, validation before any run,
// the mapping of the jail's ends to API.md's words and the journal are all
// checked here; the jail's own tests stay privileged.

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/client"
	"github.com/brig-sandbox/brig/internal/apitest"
	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/jail"
)

// fakeLauncher records every spec it is given and answers with run, or with a
// completed run that printed "ok" when run is nil.
type fakeLauncher struct {
	run func(ctx context.Context, spec jail.Spec) (*jail.Result, error)
	// startLag is how long after the program's start OnStart is called.
	startLag time.Duration
	// copies is what CopiesStats says, deaths DeathStats.
	copies jail.CopiesStats
	deaths jail.DeathStats

	mu sync.Mutex
	// specs are the specs of every call, in order. Guarded by mu.
	specs []jail.Spec
}

func (f *fakeLauncher) Run(ctx context.Context, spec jail.Spec) (*jail.Result, error) {
	f.mu.Lock()
	f.specs = append(f.specs, spec)
	f.mu.Unlock()
	start := time.Now()
	if spec.OnStart != nil {
		time.Sleep(f.startLag)
		spec.OnStart(start)
	}
	if f.run != nil {
		return f.run(ctx, spec)
	}
	zero := 0
	if spec.OnStdout != nil {
		spec.OnStdout("ok\n")
	}
	return &jail.Result{End: jail.EndCompleted, ExitCode: &zero, Stdout: "ok\n", Timing: jail.Timing{StartMS: 1, TotalMS: 2},
		Usage: jail.Usage{WallMS: api.Millis(time.Since(start))}}, nil
}

func (f *fakeLauncher) CopiesStats() jail.CopiesStats { return f.copies }

func (f *fakeLauncher) DeathStats() jail.DeathStats { return f.deaths }

func (f *fakeLauncher) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.specs)
}

// fakeService is a Service of a fakeLauncher on a socket in a temp dir, and a
// client whose every exchange is checked against api/openapi.yaml.
type fakeService struct {
	*Service
	launcher *fakeLauncher
	socket   string
	state    string
	client   *client.Client
	served   chan error
}

// newFakeService starts a service of l for tb, shut down when tb ends; the
// test's own uid is its one allowed peer. opts adjust its Config.
func newFakeService(tb testing.TB, l *fakeLauncher, opts ...func(*Config)) *fakeService {
	tb.Helper()
	// A socket's path must fit in 108 bytes: t.TempDir's can be too long.
	dir, err := os.MkdirTemp("", "brig-fk")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	fs := &fakeService{launcher: l, socket: filepath.Join(dir, "brig.sock"), state: filepath.Join(dir, "state")}
	fs.start(tb, opts...)
	return fs
}

// start makes a Service on fs's state directory and serves it on fs's socket.
func (fs *fakeService) start(tb testing.TB, opts ...func(*Config)) {
	tb.Helper()
	cfg := Config{
		StateDir:  fs.state,
		AllowUIDs: []int{os.Getuid()},
		Logger:    slog.New(slog.DiscardHandler),
		Grace:     5 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := New(cfg, HostInfo{Languages: map[string]string{"python": "3.11.2", "javascript": "20.19.2"}, CgroupMode: "test", Rootfs: "host"}, fs.launcher)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("unix", fs.socket)
	if err != nil {
		svc.Shutdown(context.Background())
		tb.Fatal(err)
	}
	fs.Service = svc
	fs.served = make(chan error, 1)
	go func() { fs.served <- svc.Serve(ln) }()
	fs.client = client.New(fs.socket)
	fs.client.HTTP.Transport = apitest.Transport(tb, fs.client.HTTP.Transport)
	tb.Cleanup(func() { fs.stop(tb) })
}

// stop shuts the service down; a second stop does nothing.
func (fs *fakeService) stop(tb testing.TB) {
	tb.Helper()
	if fs.Service == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := fs.Service.Shutdown(ctx); err != nil {
		tb.Errorf("Shutdown: %v", err)
	}
	if err := <-fs.served; !errors.Is(err, http.ErrServerClosed) {
		tb.Errorf("Serve: %v", err)
	}
	fs.Service = nil
}

func intp(n int) *int { return &n }

// TestFakeValidationBeforeRun: a request API.md refuses is a 400 naming its
// field, and the launcher is never called for it.
func TestFakeValidationBeforeRun(t *testing.T) {
	l := &fakeLauncher{}
	fs := newFakeService(t, l, func(c *Config) { c.NetworkModes = api.Strings(api.NetworkModes) })
	many := map[string]string{}
	for i := range api.MaxEnvEntries + 1 {
		many["V"+itoa(i)] = "x"
	}
	for _, tc := range []struct {
		name  string
		req   api.Request
		field string
	}{
		{"unknown language", api.Request{Language: "ruby", Code: "puts 1"}, "language"},
		{"no code", api.Request{Language: "python"}, "code"},
		{"long code", api.Request{Language: "python", Code: strings.Repeat("é", api.MaxCodeChars+1)}, "code"},
		{"timeout low", api.Request{Language: "python", Code: "1", TimeoutSeconds: intp(api.MinTimeoutSeconds - 1)}, "timeout_seconds"},
		{"timeout high", api.Request{Language: "python", Code: "1", TimeoutSeconds: intp(api.MaxTimeoutSeconds + 1)}, "timeout_seconds"},
		{"memory low", api.Request{Language: "python", Code: "1", MemoryMiB: intp(api.MinMemoryMiB - 1)}, "memory_mib"},
		{"memory high", api.Request{Language: "python", Code: "1", MemoryMiB: intp(api.MaxMemoryMiB + 1)}, "memory_mib"},
		{"id too long", api.Request{ID: strings.Repeat("a", api.MaxIDChars+1), Language: "python", Code: "1"}, "id"},
		{"too many packages", api.Request{Language: "python", Code: "1", Packages: make([]string, api.MaxPackages+1)}, "packages"},
		{"unpinned package", api.Request{Language: "python", Code: "1", Packages: []string{"numpy"}}, "packages[0]"},
		{"too many env", api.Request{Language: "python", Code: "1", Env: many}, "env"},
		{"unknown network mode", api.Request{Language: "python", Code: "1", Network: &api.Network{Mode: "lan"}}, "network.mode"},
		{"domains without mode", api.Request{Language: "python", Code: "1", Network: &api.Network{Mode: api.NetworkAny, Domains: []string{"example.com"}}}, "network.domains"},
		{"too many domains", api.Request{Language: "python", Code: "1", Network: &api.Network{Mode: api.NetworkDomains, Domains: make([]string, api.MaxDomains+1)}}, "network.domains"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fs.client.Run(context.Background(), tc.req)
			ce := apiErr(t, err, http.StatusBadRequest, tc.field)
			if ce.API.Code != api.ErrorInvalidRequest {
				t.Errorf("got code %q, want %q", ce.API.Code, api.ErrorInvalidRequest)
			}
		})
	}
	if n := l.calls(); n != 0 {
		t.Fatalf("got %d launches for refused requests, want none", n)
	}
	// A valid request does reach the launcher, with the request's bounds.
	res, err := fs.client.Run(context.Background(), api.Request{Language: "python", Code: "print('ok')", TimeoutSeconds: intp(7), MemoryMiB: intp(256)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != api.OutcomeSucceeded || res.Stdout != "ok\n" {
		t.Fatalf("got %s with stdout %q, want succeeded with ok", res.Outcome, res.Stdout)
	}
	spec := l.specs[0]
	if spec.Language != "python" || spec.Timeout != 7*time.Second || spec.MemoryBytes != 256<<20 {
		t.Fatalf("got spec %s, %s, %d bytes; want python, 7s, %d bytes", spec.Language, spec.Timeout, spec.MemoryBytes, 256<<20)
	}
}

// TestFakeOutcomes: every way the jail can end a run reaches the API as
// API.md's status, reason and outcome, offline and online; a launcher that
// fails is an internal failure, never a success.
func TestFakeOutcomes(t *testing.T) {
	l := &fakeLauncher{run: func(_ context.Context, spec jail.Spec) (*jail.Result, error) {
		end := jail.End(strings.TrimSpace(spec.Code))
		if end == "launcher error" {
			return nil, errors.New("no sandbox today")
		}
		code := 1
		return &jail.Result{End: end, ExitCode: &code, Message: "ended " + string(end)}, nil
	}}
	logs := &testutil.LogBuffer{}
	fs := newFakeService(t, l, func(c *Config) {
		c.NetworkModes = api.Strings(api.NetworkModes)
		c.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	defer func() {
		// brig's own failures' lines are warnings with their messages (the
		// operator probe of 2026-12-06 found them at info without one); the
		// program's keep their messages out of the log.
		for _, l := range logs.Lines("run finished") {
			internal := l["reason"] == string(api.ReasonInternal)
			msg, _ := l["message"].(string)
			if internal != (l["level"] == "WARN") || internal != (msg != "") || internal && !strings.Contains(msg, "ended internal") && !strings.Contains(msg, "no sandbox today") {
				t.Errorf("a run finished line: got %v, want a warning with the message for an internal failure alone", l)
			}
		}
	}()
	for _, tc := range []struct {
		end     jail.End
		mode    string
		status  api.Status
		reason  api.Reason
		outcome api.Outcome
	}{
		{jail.EndCompleted, api.NetworkNone, api.StatusCompleted, api.ReasonNone, api.OutcomeSucceeded},
		{jail.EndError, api.NetworkNone, api.StatusFailed, api.ReasonError, api.OutcomeFailed},
		{jail.EndTimeout, api.NetworkNone, api.StatusFailed, api.ReasonTimeout, api.OutcomeFailed},
		{jail.EndTimeout, api.NetworkDomains, api.StatusFailed, api.ReasonTimeout, api.OutcomeUnknown},
		{jail.EndMemory, api.NetworkAny, api.StatusFailed, api.ReasonMemory, api.OutcomeUnknown},
		{jail.EndStopped, api.NetworkNone, api.StatusFailed, api.ReasonStopped, api.OutcomeFailed},
		{jail.EndInternal, api.NetworkAny, api.StatusFailed, api.ReasonInternal, api.OutcomeFailed},
		{"launcher error", api.NetworkNone, api.StatusFailed, api.ReasonInternal, api.OutcomeFailed},
	} {
		t.Run(string(tc.end)+" "+tc.mode, func(t *testing.T) {
			net := &api.Network{Mode: tc.mode}
			if tc.mode == api.NetworkDomains {
				net.Domains = []string{"example.com"}
			}
			res, err := fs.client.Run(context.Background(), api.Request{Language: "python", Code: string(tc.end), Network: net})
			if err != nil {
				t.Fatal(err)
			}
			if res.State != api.StateFinished || res.Status != tc.status || res.Reason != tc.reason || res.Outcome != tc.outcome {
				t.Fatalf("got %s/%s/%q/%s, want %s/%s/%q/%s", res.State, res.Status, res.Reason, res.Outcome,
					api.StateFinished, tc.status, tc.reason, tc.outcome)
			}
			if res.Network.Mode != tc.mode {
				t.Errorf("got network mode %q, want %q", res.Network.Mode, tc.mode)
			}
		})
	}
}

// TestFakeAdmission: with one slot and a queue of one, a second run waits and
// a third is refused with 429 queue_full and a Retry-After; the waiting run
// starts when the slot is free, in order.
func TestFakeAdmission(t *testing.T) {
	entered := make(chan string, 3)
	release := make(chan struct{})
	l := &fakeLauncher{run: func(ctx context.Context, spec jail.Spec) (*jail.Result, error) {
		entered <- spec.Code
		select {
		case <-release:
		case <-ctx.Done():
		}
		zero := 0
		return &jail.Result{End: jail.EndCompleted, ExitCode: &zero}, nil
	}}
	fs := newFakeService(t, l, func(c *Config) { c.MaxConcurrent, c.QueueSize = 1, 1 })
	type answer struct {
		res *api.Result
		err error
	}
	answers := make(chan answer, 2)
	post := func(code string) {
		res, err := fs.client.Run(context.Background(), api.Request{Language: "python", Code: code})
		answers <- answer{res, err}
	}
	go post("first")
	if got := waitFor(t, entered); got != "first" {
		t.Fatalf("got %q launched, want first", got)
	}
	go post("second")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if running, queued := fs.adm.counts(); running == 1 && queued == 1 {
			break
		}
		if time.Now().After(deadline) {
			running, queued := fs.adm.counts()
			t.Fatalf("got %d running and %d queued after 10 s, want 1 and 1", running, queued)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, err := fs.client.Run(context.Background(), api.Request{Language: "python", Code: "third"})
	ce := apiErr(t, err, http.StatusTooManyRequests, "")
	if ce.API.Code != api.ErrorQueueFull || ce.RetryAfter <= 0 {
		t.Fatalf("got code %q with Retry-After %s, want %q with a positive Retry-After", ce.API.Code, ce.RetryAfter, api.ErrorQueueFull)
	}
	select {
	case code := <-entered:
		t.Fatalf("got %q launched while the slot was held, want it queued", code)
	default:
	}
	close(release)
	if got := waitFor(t, entered); got != "second" {
		t.Fatalf("got %q launched next, want second", got)
	}
	for range 2 {
		select {
		case a := <-answers:
			if a.err != nil || a.res.Outcome != api.OutcomeSucceeded {
				t.Fatalf("got %v, %v; want a succeeded run", a.res, a.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a run did not finish within 10 s of its release")
		}
	}
	if n := l.calls(); n != 2 {
		t.Fatalf("got %d launches, want 2 (the third was refused)", n)
	}
}

// TestFakeAdmissionMemoryBudget: a run waits until its memory fits the budget
// even while a slot is free, and a smaller run behind it does not overtake it.
func TestFakeAdmissionMemoryBudget(t *testing.T) {
	entered := make(chan string, 3)
	release := map[string]chan struct{}{"big": make(chan struct{}), "bigger": make(chan struct{}), "small": make(chan struct{})}
	l := &fakeLauncher{run: func(ctx context.Context, spec jail.Spec) (*jail.Result, error) {
		entered <- spec.Code
		<-release[spec.Code]
		zero := 0
		return &jail.Result{End: jail.EndCompleted, ExitCode: &zero}, nil
	}}
	fs := newFakeService(t, l, func(c *Config) { c.MaxConcurrent, c.MemoryBudgetMiB, c.QueueSize = 3, api.MaxMemoryMiB, 4 })
	done := make(chan error, 3)
	post := func(code string, mib int) {
		_, err := fs.client.Run(context.Background(), api.Request{Language: "python", Code: code, MemoryMiB: intp(mib)})
		done <- err
	}
	go post("big", api.MaxMemoryMiB-api.MinMemoryMiB)
	waitFor(t, entered)
	go post("bigger", api.MaxMemoryMiB)
	waitQueued(t, fs, 1)
	go post("small", api.MinMemoryMiB) // fits, but must not overtake "bigger"
	waitQueued(t, fs, 2)
	select {
	case code := <-entered:
		t.Fatalf("got %q launched past the budget or out of order, want it queued", code)
	case <-time.After(100 * time.Millisecond):
	}
	close(release["big"])
	if got := waitFor(t, entered); got != "bigger" {
		t.Fatalf("got %q launched next, want bigger (first in the queue)", got)
	}
	close(release["bigger"])
	if got := waitFor(t, entered); got != "small" {
		t.Fatalf("got %q launched next, want small", got)
	}
	close(release["small"])
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func waitQueued(t *testing.T, fs *fakeService, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, queued := fs.adm.counts(); queued == n {
			return
		}
		if time.Now().After(deadline) {
			_, queued := fs.adm.counts()
			t.Fatalf("got %d queued after 10 s, want %d", queued, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitFor(t *testing.T, c <-chan string) string {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing launched within 10 s")
		return ""
	}
}

// TestFakeJournal: a result outlives the service that made it; a retry of the
// same id and request gets that run without launching again, and the same id
// with another request is a conflict.
func TestFakeJournal(t *testing.T) {
	l := &fakeLauncher{}
	fs := newFakeService(t, l)
	req := api.Request{ID: "kept-1", Language: "python", Code: "print('ok')"}
	first, err := fs.client.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	fs.stop(t)
	fs.start(t)
	got, err := fs.client.Get(context.Background(), "kept-1")
	if err != nil {
		t.Fatalf("Get after a restart: %v", err)
	}
	if got.ID != first.ID || got.Outcome != api.OutcomeSucceeded || got.Stdout != "ok\n" || got.Language != api.Python {
		t.Fatalf("got %+v after a restart, want the first run's result %+v", got, first)
	}
	again, err := fs.client.Run(context.Background(), req)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if again.Timing != first.Timing || again.Stdout != first.Stdout {
		t.Fatalf("got a retry result %+v, want the first run's %+v", again, first)
	}
	if n := l.calls(); n != 1 {
		t.Fatalf("got %d launches, want 1: a retry runs nothing", n)
	}
	other := req
	other.Code = "print('other')"
	_, err = fs.client.Run(context.Background(), other)
	if ce := apiErr(t, err, http.StatusConflict, "id"); ce.API.Code != api.ErrorConflict {
		t.Fatalf("got code %q, want %q", ce.API.Code, api.ErrorConflict)
	}
	_, err = fs.client.Get(context.Background(), "never-ran")
	if ce := apiErr(t, err, http.StatusNotFound, ""); ce.API.Code != api.ErrorNotFound {
		t.Fatalf("got code %q, want %q", ce.API.Code, api.ErrorNotFound)
	}
}

// TestStartPathCounted: each run's start path (jail.Result.Start) is counted by
// language and path in brig_run_starts_total.
func TestStartPathCounted(t *testing.T) {
	paths := []string{jail.StartWarm, jail.StartColdEmpty, jail.StartWarm}
	var n int
	var mu sync.Mutex
	l := &fakeLauncher{run: func(_ context.Context, spec jail.Spec) (*jail.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		zero := 0
		res := &jail.Result{End: jail.EndCompleted, ExitCode: &zero, Start: paths[n]}
		n++
		return res, nil
	}}
	fs := newFakeService(t, l)
	for range paths {
		if _, err := fs.client.Run(context.Background(), api.Request{Language: "javascript", Code: "0"}); err != nil {
			t.Fatal(err)
		}
	}
	text := scrapeMetrics(fs.Service)
	for path, want := range map[string]float64{jail.StartWarm: 2, jail.StartColdEmpty: 1} {
		if got, _ := metricSum(text, "brig_run_starts_total", `language="javascript"`, `path="`+path+`"`); got != want {
			t.Errorf("brig_run_starts_total{path=%q}: got %v, want %v", path, got, want)
		}
	}
}

// TestCopiesGauges: what the launcher's interpreter copies hold, and what
// died in its pools, is exported at each scrape.
func TestCopiesGauges(t *testing.T) {
	l := &fakeLauncher{copies: jail.CopiesStats{Copies: 3, Bytes: 106_102_272}, deaths: jail.DeathStats{PooledSandboxes: 4, Zygotes: 1}}
	fs := newFakeService(t, l)
	text := scrapeMetrics(fs.Service)
	for name, want := range map[string]float64{"brig_interpreter_copies": 3, "brig_interpreter_copies_bytes": 106_102_272} {
		if got, found := metricSum(text, name); !found || got != want {
			t.Errorf("%s: got %v (found %v), want %v", name, got, found, want)
		}
	}
	// And what died in the pools.
	for what, want := range map[string]float64{"pooled_sandbox": 4, "zygote": 1} {
		if got, found := metricSum(text, "brig_sandbox_deaths_total", `what="`+what+`"`); !found || got != want {
			t.Errorf("brig_sandbox_deaths_total{what=%q}: got %v (found %v), want %v", what, got, found, want)
		}
	}
}

// TestFakeStartIsTheExecs: a run's start_ms is when its program started, as
// the jail says, not when the service heard of it, so that start_ms and
// wall_ms never add up to more than total_ms (the contract probe of
// 2026-12-06: +108 ms under load). The fake launcher hears of its start 80 ms
// late, as a service short of CPU does.
func TestFakeStartIsTheExecs(t *testing.T) {
	l := &fakeLauncher{startLag: 80 * time.Millisecond}
	fs := newFakeService(t, l)
	res, err := fs.client.Run(context.Background(), api.Request{Language: "python", Code: "pass"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Usage.WallMS < 80 || res.Timing.StartMS+res.Usage.WallMS > res.Timing.TotalMS+1 {
		t.Errorf("start_ms %d + wall_ms %d against total_ms %d: want wall_ms at least the 80 ms lag, and the sum within total_ms",
			res.Timing.StartMS, res.Usage.WallMS, res.Timing.TotalMS)
	}
}
