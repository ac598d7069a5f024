package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/cgroup"
	"github.com/brig-sandbox/brig/client"
	"github.com/brig-sandbox/brig/internal/apitest"
	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/jail/pid1"
	"github.com/brig-sandbox/brig/rootfs"
)

// testCgroupParent is this package's own cgroup parent: go test runs packages in
// parallel, and each checks only its own for leaks. The crash test's service
// process uses crashCgroupParent, which it owns and sweeps as brig serve does.
const (
	testCgroupParent  = "brig-test-supervisor"
	crashCgroupParent = "brig-test-supervisor-crash"
)

// serveEnv, when set in the environment, makes the test binary a service (for
// the crash test): its value is "socket state-dir".
const serveEnv = "BRIG_TEST_SERVE"

// TestMain makes the test binary able to serve as a run's init (the Launcher
// re-executes /proc/self/exe), as a whole service process (serveEnv) and as a
// peer of another uid (dialEnv).
func TestMain(m *testing.M) {
	pid1.Main()
	// As brig's main does: a descriptor the test's parent left open (a
	// shell's, make's) reaches no sandbox or zygote, and its umask does not
	// decide what a run can read.
	jail.ResetInherited()
	if v := os.Getenv(serveEnv); v != "" {
		os.Exit(serveForTest(v))
	}
	if v := os.Getenv(dialEnv); v != "" {
		os.Exit(dialForTest(v))
	}
	// Remove what an interrupted earlier run left, but never the groups of a
	// test binary running beside this one (a fuzz worker runs TestMain too).
	if os.Geteuid() == 0 {
		if cg, err := cgroup.New(cgroup.Config{Parent: testCgroupParent}); err == nil {
			cg.SweepIf(jail.LeftoverOfDeadProcess)
		}
	}
	code := m.Run()
	if os.Geteuid() == 0 {
		for _, p := range []string{testCgroupParent, crashCgroupParent} {
			if err := testutil.RemoveCgroupParent(p); err != nil {
				fmt.Fprintln(os.Stderr, err)
				code = 1
			}
		}
	}
	os.Exit(code)
}

// serveForTest runs a service as brig serve does (its own cgroup parent, swept at
// start), until SIGKILL or SIGTERM.
func serveForTest(v string) int {
	socket, state, _ := strings.Cut(v, " ")
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	cg, err := cgroup.New(cgroup.Config{Parent: crashCgroupParent, Logger: log})
	if err == nil {
		_, err = cg.Sweep()
	}
	var p *rootfs.Host
	if err == nil {
		p, err = rootfs.NewHost(state, rootfs.HostConfig{})
	}
	var l *jail.Launcher
	if err == nil {
		l, err = jail.NewLauncher(jail.Config{StateDir: state, Rootfs: p, Cgroups: cg, PoolSize: 1, Logger: log})
	}
	var svc *Service
	if err == nil {
		svc, err = New(Config{StateDir: state, Logger: log, Grace: time.Second}, HostInfo{}, l)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "test service:", err)
		return 1
	}
	ln, err := Listen(socket, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, "test service:", err)
		return 1
	}
	go svc.Serve(ln)
	waitSignal()
	svc.Shutdown(context.Background())
	l.Close()
	return 0
}

// testService is a Service on a real socket with a real jail, and a client of
// it whose every exchange is checked against api/openapi.yaml.
type testService struct {
	*Service
	socket   string
	state    string
	client   *client.Client
	launcher *jail.Launcher
	logs     *testutil.LogBuffer
}

// newTestService starts a service for tb, shut down (and checked for leaks) when
// tb ends. opts adjust its Config.
func newTestService(tb testing.TB, opts ...func(*Config)) *testService {
	tb.Helper()
	testutil.RequireRoot(tb)
	testutil.CheckLeaks(tb, testCgroupParent)
	// A socket's path must fit in 108 bytes: t.TempDir's can be too long.
	dir, err := os.MkdirTemp("", "brig-sv")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	ts := &testService{socket: filepath.Join(dir, "brig.sock"), state: filepath.Join(dir, "state"), logs: &testutil.LogBuffer{}}
	log := slog.New(slog.NewJSONHandler(ts.logs, nil))
	ts.launcher = newTestLauncher(tb, ts.state, log)
	cfg := Config{StateDir: ts.state, Logger: log, Grace: 5 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	ts.start(tb, cfg)
	return ts
}

// newTestLauncher makes the service's launcher, whose cgroups log to log, as
// brig serve's do to the service's log.
func newTestLauncher(tb testing.TB, state string, log *slog.Logger) *jail.Launcher {
	tb.Helper()
	p, err := rootfs.NewHost(state, rootfs.HostConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	cg, err := cgroup.New(cgroup.Config{Parent: testCgroupParent, Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	// As brig serve's defaults: both languages warm, so that the service's
	// tests (network, packages, streams, limits) cover the warm paths too.
	l, err := jail.NewLauncher(jail.Config{StateDir: state, Rootfs: p, Cgroups: cg, PoolSize: 2,
		Warm: map[rootfs.Language]bool{rootfs.Python: true, rootfs.JavaScript: true}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}

// hostLanguages are the interpreters' versions of the host rootfs, as brig
// serve reports them (the package installer checks a layer's against them).
func hostLanguages(tb testing.TB, state string) map[string]string {
	tb.Helper()
	p, err := rootfs.NewHost(state, rootfs.HostConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	langs := map[string]string{}
	for _, lang := range rootfs.Languages {
		root, err := p.Root(lang)
		if err != nil {
			tb.Fatal(err)
		}
		langs[string(lang)] = root.Version
	}
	return langs
}

// start makes the Service of cfg and serves it; a test may stop it (stop) and
// start it again on the same state directory.
func (ts *testService) start(tb testing.TB, cfg Config) {
	tb.Helper()
	svc, err := New(cfg, HostInfo{Languages: hostLanguages(tb, ts.state), CgroupMode: "test", Rootfs: "host"}, ts.launcher)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := Listen(ts.socket, "")
	if err != nil {
		svc.Shutdown(context.Background())
		tb.Fatal(err)
	}
	ts.Service = svc
	served := make(chan error, 1)
	go func() { served <- svc.Serve(ln) }()
	ts.client = client.New(ts.socket)
	ts.client.HTTP.Transport = apitest.Transport(tb, ts.client.HTTP.Transport)
	tb.Cleanup(func() {
		ts.stop(tb)
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			tb.Errorf("Serve: %v", err)
		}
	})
}

// stop shuts the service down; a second stop does nothing.
func (ts *testService) stop(tb testing.TB) {
	tb.Helper()
	if ts.Service == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ts.Service.Shutdown(ctx); err != nil {
		tb.Errorf("Shutdown: %v", err)
	}
	ts.Service = nil
}

// request is a Request with the defaults a test wants unless it says otherwise.
func request(lang, code string, opts ...func(*api.Request)) api.Request {
	timeout := 20
	req := api.Request{Language: lang, Code: code, TimeoutSeconds: &timeout}
	for _, o := range opts {
		o(&req)
	}
	return req
}

// mustRun runs req and fails tb on an error response.
func (ts *testService) mustRun(tb testing.TB, req api.Request) *api.Result {
	tb.Helper()
	res, err := ts.client.Run(context.Background(), req)
	if err != nil {
		tb.Fatalf("Run: %v", err)
	}
	return res
}

// apiErr asserts that err is an API error of status and field.
func apiErr(tb testing.TB, err error, status int, field string) *client.Error {
	tb.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) {
		tb.Fatalf("got error %v, want an API error %d", err, status)
	}
	if ce.Status != status || ce.API.Field != field {
		tb.Fatalf("got %d field %q (%s), want %d field %q", ce.Status, ce.API.Field, ce.API.Message, status, field)
	}
	if ce.API.Message == "" || ce.API.Code == "" {
		tb.Fatalf("got error body %+v, want a code and a message", ce.API)
	}
	return ce
}

func itoa(n int) string { return strconv.Itoa(n) }
