package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/egress"
	"github.com/brig-sandbox/brig/internal/registrytest"
	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/packages"
	"github.com/miekg/dns"
)

// registryStandIns are the test's package registries on loopback, reached by
// the installer's sandboxes through the names the config pins to them.
type registryStandIns struct {
	py  *registrytest.PyIndex
	npm *registrytest.NpmRegistry
}

const (
	pyRegistryHost  = "pypi.test"
	npmRegistryHost = "npm.test"
)

func newRegistryStandIns(t *testing.T) *registryStandIns {
	return &registryStandIns{
		py: registrytest.NewPyIndex(t,
			registrytest.PyPackage{Name: "pkg-a", Version: "1.0", Requires: []string{"dep-b>=2"},
				Files: map[string]string{"pkg_a/__init__.py": "from dep_b import BASE\nVALUE = BASE + 1\n"}},
			registrytest.PyPackage{Name: "dep-b", Version: "2.0", Files: map[string]string{"dep_b/__init__.py": "BASE = 41\n"}},
			registrytest.PyPackage{Name: "nowheel", Version: "1.0", SdistOnly: true},
		),
		npm: registrytest.NewNpmRegistry(t,
			registrytest.NpmPackage{Name: "left", Version: "1.2.0", Dependencies: map[string]string{"right": "^2.0.0"},
				Files: map[string]string{"index.js": "module.exports = 'left+' + require('right')"}},
			registrytest.NpmPackage{Name: "right", Version: "2.1.0", Files: map[string]string{"index.js": "module.exports = 'right'"}},
			registrytest.NpmPackage{Name: "esm-only", Version: "1.0.0", Type: "module", Files: map[string]string{"index.js": "export default 'esm'"}},
			registrytest.NpmPackage{Name: "cmd", Version: "1.0.0", Bin: map[string]string{"hello-cmd": "cli.js"},
				Files: map[string]string{"cli.js": "#!/usr/bin/env node\nconsole.log('hello from a package command')\n"}},
			registrytest.NpmPackage{Name: "scripted", Version: "1.0.0", Files: map[string]string{"index.js": "module.exports = 1"},
				Scripts: map[string]string{"postinstall": "node -e \"require('fs').writeFileSync('ran', 'x')\""}},
		),
	}
}

// withPackages gives the service a package cache whose installer uses the
// stand-ins, and policy.
func (r *registryStandIns) withPackages(t testing.TB, ts **testService, policy packages.PolicyConfig) func(*Config) {
	return withPackagesAt(t, ts, policy, r.py.Host(), r.npm.Host())
}

// withPackagesAt is withPackages with the registries' names pinned to the
// addresses given.
func withPackagesAt(t testing.TB, ts **testService, policy packages.PolicyConfig, pyAddr, npmAddr string) func(*Config) {
	return withPackagesEgress(t, ts, policy, egress.Config{Pins: map[string]string{pyRegistryHost + ":80": pyAddr, npmRegistryHost + ":80": npmAddr}})
}

// withPackagesEgress gives the service a package cache whose installer
// reaches the registries' names (pyRegistryHost, npmRegistryHost) through a
// proxy of ecfg, and policy; each of opts changes the cache's config.
func withPackagesEgress(t testing.TB, ts **testService, policy packages.PolicyConfig, ecfg egress.Config, opts ...func(*packages.CacheConfig)) func(*Config) {
	return func(cfg *Config) {
		hosts := map[string][]string{"python": {pyRegistryHost}, "javascript": {npmRegistryHost}}
		inst, err := packages.NewInstaller(packages.InstallerConfig{
			Run: func(ctx context.Context, spec jail.Spec) (*jail.Result, error) {
				return InstallerRun((*ts).launcher, ecfg, hosts)(ctx, spec)
			},
			Registries: map[string][]string{"python": {"http://" + pyRegistryHost + "/simple/"}, "javascript": {"http://" + npmRegistryHost + "/"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		ccfg := packages.CacheConfig{Dir: t.TempDir(), Installer: inst}
		for _, o := range opts {
			o(&ccfg)
		}
		cache, err := packages.OpenCache(ccfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cache.Close() })
		cfg.Packages = PackagesConfig{Cache: cache, Policy: policy}
	}
}

// TestPackagesCacheDiskFull: a cache whose disk has less free than it keeps
// (min_free_bytes) and no layer to evict installs nothing: the run ends
// internal, its message saying why and what the operator can do.
func TestPackagesCacheDiskFull(t *testing.T) {
	small := testutil.Tmpfs(t, "8m")
	var ts *testService // its installer never starts: nothing is dialed
	ts = newTestService(t, withPackagesEgress(t, &ts, packages.PolicyConfig{}, egress.Config{},
		func(c *packages.CacheConfig) { c.Dir, c.MinFreeBytes = small, 64<<20 }))
	res := ts.mustRun(t, request("python", "print('ran')", withPackageRequests("pkg-a==1.0")))
	t.Logf("message: %s", res.Message)
	if res.Reason != api.ReasonInternal || res.Stdout != "" {
		t.Fatalf("got %s/%s stdout %q, want internal and no output", res.Outcome, res.Reason, res.Stdout)
	}
	for _, want := range []string{"the packages could not be installed", "less than the 64 MiB brig keeps free there (packages.min_free_bytes)",
		"the host's operator must free space there", "the program did not run"} {
		if !strings.Contains(res.Message, want) {
			t.Errorf("message %q, want it to say %q", res.Message, want)
		}
	}
}

func withPackageRequests(pkgs ...string) func(*api.Request) {
	return func(r *api.Request) { r.Packages = pkgs }
}

// TestPackagesPython: a run with packages installs them once (the second run
// hits the cache), imports them with no change to the program, lists the exact
// versions, and says so in its events and timing.
func TestPackagesPython(t *testing.T) {
	reg := newRegistryStandIns(t)
	var ts *testService
	ts = newTestService(t, func(cfg *Config) { reg.withPackages(t, &ts, packages.PolicyConfig{})(cfg) })
	code := "import pkg_a, dep_b\nprint(pkg_a.VALUE)\n"
	s := openLiveStream(t, ts.client, request("python", code, withPackageRequests("pkg-a==1.0")))
	res, err := s.wait(t, 120*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != api.OutcomeSucceeded || res.Stdout != "42\n" {
		t.Fatalf("got %s %s %q (stdout %q, stderr %q)", res.Outcome, res.Reason, res.Message, res.Stdout, res.Stderr)
	}
	want := []api.PackageResult{{Request: "pkg-a==1.0", Name: "pkg-a", Version: "1.0", Cached: false}}
	if !samePackages(res.Packages, want) {
		t.Errorf("packages: got %+v, want %+v", res.Packages, want)
	}
	if res.Timing.PrepareMS <= 0 || res.Timing.StartMS < res.Timing.PrepareMS {
		t.Errorf("timing %+v: want prepare_ms > 0 and start_ms after it", res.Timing)
	}
	var packageEvents []string
	for _, ev := range s.snapshot() {
		if ev.Event.Event == api.EventPackage {
			packageEvents = append(packageEvents, ev.Event.Message)
		}
	}
	// The first says what is installed, at its start (the packages probe:
	// npm's own line came only at the end).
	if len(packageEvents) == 0 || packageEvents[0] != "brig: installing pkg-a==1.0 (python; not in the package cache)" {
		t.Errorf("package events %q: want them, the first saying what is installed", packageEvents)
	}
	again := ts.mustRun(t, request("python", code, withPackageRequests("pkg-a==1.0")))
	want[0].Cached = true
	if again.Stdout != "42\n" || !samePackages(again.Packages, want) {
		t.Errorf("second run: got %q %+v, want 42 from the cached layer", again.Stdout, again.Packages)
	}
	text := scrapeMetrics(ts.Service)
	if n, _ := metricSum(text, "brig_package_installs_total"); n != 1 {
		t.Errorf("brig_package_installs_total: got %v, want 1", n)
	}
	if n, _ := metricSum(text, "brig_package_cache_hits_total"); n != 1 {
		t.Errorf("brig_package_cache_hits_total: got %v, want 1", n)
	}
	// A GET while a run goes on lists its packages as resolved, as its result
	// will (the harness probe of 2026-12-05: no version until the end).
	live := openLiveStream(t, ts.client, request("python", "import time\nprint('up', flush=True)\ntime.sleep(10)\n", withPackageRequests("pkg-a==1.0"), withRunID("packages-live")))
	live.waitUntil(t, 60*time.Second, "stdout up", func(evs []timedEvent) bool {
		_, ok := firstLineAt(evs, api.EventStdout, "up\n")
		return ok
	})
	if got, err := ts.client.Get(context.Background(), "packages-live"); err != nil || got.State != api.StateRunning || !samePackages(got.Packages, want) {
		t.Errorf("a running run's packages: got %+v (%v), want running with %+v", got, err, want)
	}
	if _, err := ts.client.Stop(context.Background(), "packages-live"); err != nil {
		t.Fatal(err)
	}
	// The layer can't be changed from inside a run.
	tamper := ts.mustRun(t, request("python", `
import os, pkg_a
def trial(f):
    try:
        f(); return 'ok'
    except OSError as e:
        return e.__class__.__name__
print(trial(lambda: open(pkg_a.__file__, 'a').write('x')), trial(lambda: open(os.path.join(os.path.dirname(pkg_a.__file__), 'new.py'), 'w')))
`, withPackageRequests("pkg-a==1.0")))
	if f := strings.Fields(tamper.Stdout); len(f) != 2 || f[0] == "ok" || f[1] == "ok" {
		t.Errorf("writing into the layer: got %q (stderr %q), want both refused", tamper.Stdout, tamper.Stderr)
	}
}

// TestPackagesRefusals: unavailable packages and versions, a package without a
// wheel, and each policy's refusal end the run before the program runs.
func TestPackagesRefusals(t *testing.T) {
	reg := newRegistryStandIns(t)
	var ts *testService
	ts = newTestService(t, func(cfg *Config) {
		reg.withPackages(t, &ts, packages.PolicyConfig{Mode: packages.PolicyDeny, Deny: []string{"forbidden-*"}})(cfg)
	})
	for _, tc := range []struct {
		name    string
		pkgs    []string
		reason  api.Reason
		outcome api.Outcome
		names   []string // each request's entry in the result: its normalised name, no version
	}{
		{"unknown package", []string{"no-such-pkg==1.0"}, api.ReasonPackageUnavailable, api.OutcomeFailed, []string{"no-such-pkg"}},
		{"unknown version", []string{"pkg-a==9.9"}, api.ReasonPackageUnavailable, api.OutcomeFailed, []string{"pkg-a"}},
		{"no wheel", []string{"nowheel==1.0"}, api.ReasonPackageUnavailable, api.OutcomeFailed, []string{"nowheel"}},
		{"denied", []string{"Pkg_A==1.0", "Forbidden.Thing>=0"}, api.ReasonPackageBlocked, api.OutcomeBlocked, []string{"pkg-a", "forbidden-thing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := ts.mustRun(t, request("python", "print('ran')", withPackageRequests(tc.pkgs...)))
			if res.Reason != tc.reason || res.Outcome != tc.outcome || res.Stdout != "" || res.Message == "" {
				t.Errorf("got %s/%s stdout %q message %q, want %s/%s, no output, a message", res.Reason, res.Outcome, res.Stdout, res.Message, tc.reason, tc.outcome)
			}
			var want []api.PackageResult
			for i, raw := range tc.pkgs {
				want = append(want, api.PackageResult{Request: raw, Name: tc.names[i]})
			}
			if !slices.Equal(res.Packages, want) {
				t.Errorf("packages: got %+v, want %+v (each request, unresolved)", res.Packages, want)
			}
		})
	}
}

// TestPackagesDependencyRefusalNamesItsRequest: a dependency the policy
// refuses blocks the run with a message that names the request that pulled it
// in, as the run spelled it, in both languages.
func TestPackagesDependencyRefusalNamesItsRequest(t *testing.T) {
	reg := newRegistryStandIns(t)
	var ts *testService
	ts = newTestService(t, func(cfg *Config) {
		reg.withPackages(t, &ts, packages.PolicyConfig{Mode: packages.PolicyDeny, Deny: []string{"dep-b", "right"}})(cfg)
	})
	for _, tc := range []struct {
		language, code, request, want string
	}{
		{"python", "print('ran')", "Pkg_A==1.0", "dep-b==2.0, a dependency of Pkg_A==1.0, is refused by this host's deny list (entry dep-b): request versions of Pkg_A==1.0 that do not depend on it, or other packages; the program did not run"},
		{"javascript", "console.log('ran')", "left@^1.0.0", "right@2.1.0, a dependency of left@^1.0.0, is refused by this host's deny list (entry right)"},
	} {
		t.Run(tc.language, func(t *testing.T) {
			res := ts.mustRun(t, request(tc.language, tc.code, withPackageRequests(tc.request)))
			if res.Outcome != api.OutcomeBlocked || res.Reason != api.ReasonPackageBlocked || res.Stdout != "" || !strings.Contains(res.Message, tc.want) {
				t.Errorf("got %s/%s stdout %q message %q, want blocked with %q", res.Outcome, res.Reason, res.Stdout, res.Message, tc.want)
			}
		})
	}
}

// TestPackagesJavaScript: require() and import both resolve the layer; an
// install script never ran; concurrent identical requests install once.
func TestPackagesJavaScript(t *testing.T) {
	reg := newRegistryStandIns(t)
	var ts *testService
	ts = newTestService(t, func(cfg *Config) { reg.withPackages(t, &ts, packages.PolicyConfig{})(cfg) })
	code := `
const left = require('left');
import('esm-only').then((m) => {
	const fs = require('fs');
	console.log(JSON.stringify({left, esm: m.default, scriptRan: fs.existsSync('/node_modules/scripted/ran')}));
});
`
	pkgs := []string{"left@^1.0.0", "esm-only@1.0.0", "scripted@*"}
	var wg sync.WaitGroup
	results := make([]*api.Result, 3)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = ts.mustRun(t, request("javascript", code, withPackageRequests(pkgs...)))
		}()
	}
	wg.Wait()
	for i, res := range results {
		var got struct {
			Left, Esm string
			ScriptRan bool
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(res.Stdout)), &got); err != nil {
			t.Fatalf("run %d: output %q (stderr %q, message %q): %v", i, res.Stdout, res.Stderr, res.Message, err)
		}
		if got.Left != "left+right" || got.Esm != "esm" || got.ScriptRan {
			t.Errorf("run %d: got %+v, want left+right, esm and no install script run", i, got)
		}
		if len(res.Packages) != 3 || res.Packages[0].Name != "left" || res.Packages[0].Version != "1.2.0" {
			t.Errorf("run %d: packages %+v, want left 1.2.0 first of three", i, res.Packages)
		}
	}
	var tarballs int
	for _, p := range reg.npm.Requests() {
		if strings.HasSuffix(p, "left-1.2.0.tgz") {
			tarballs++
		}
	}
	if tarballs != 1 {
		t.Errorf("the left tarball was fetched %d times for three identical concurrent runs, want once", tarballs)
	}
}

// TestPackagesCommandsOnPath: a package's commands run by their name, as
// after npm install (the npm probe of 2026-12-06: "tsc: not found"); a Python
// layer's folder of scripts is on PATH too, and PATH is given once.
func TestPackagesCommandsOnPath(t *testing.T) {
	reg := newRegistryStandIns(t)
	var ts *testService
	ts = newTestService(t, func(cfg *Config) { reg.withPackages(t, &ts, packages.PolicyConfig{})(cfg) })
	res := ts.mustRun(t, request("javascript", `
const { execSync } = require('child_process');
process.stdout.write(execSync('hello-cmd').toString());
console.log(process.env.PATH);
`, withPackageRequests("cmd@1")))
	if res.Stdout != "hello from a package command\n/node_modules/.bin:"+jail.DefaultPath+"\n" {
		t.Errorf("a package's command by its name: got %q (stderr %q, %s)", res.Stdout, res.Stderr, res.Message)
	}
	res = ts.mustRun(t, request("python", "import os\nprint(os.environ['PATH'])\nprint(sum(1 for e in open('/proc/self/environ').read().split('\\0') if e.startswith('PATH=')))\n", withPackageRequests("pkg-a==1.0")))
	if res.Stdout != "/opt/brig/python/bin:"+jail.DefaultPath+"\n1\n" {
		t.Errorf("a Python layer's PATH: got %q (stderr %q, %s), want its bin folder first, once", res.Stdout, res.Stderr, res.Message)
	}
}

// TestPackageResultsSpelling: a layer is shared by requests spelled
// differently (its key is normalised), and each run's Result gives its own
// request with the name and exact version, whichever spelling installed the
// layer. A nested npm package of a requested name is not taken for it.
func TestPackageResultsSpelling(t *testing.T) {
	tests := []struct {
		name      string
		language  string
		installed []packages.Resolved // as the installing run's manifest holds them
		requests  []string            // this run's
		want      []api.PackageResult
	}{
		{
			name: "python names and constraints spelled otherwise", language: "python",
			installed: []packages.Resolved{
				{Name: "alpha", Version: "1.0", Request: "alpha==1.0"},
				{Name: "beta", Version: "2.0", Request: "beta>=2,<3"},
				{Name: "delta", Version: "1.0"},
			},
			requests: []string{"beta<3, >=2", "Alpha[] (== 1.0)"},
			want: []api.PackageResult{
				{Request: "beta<3, >=2", Name: "beta", Version: "2.0", Cached: true},
				{Request: "Alpha[] (== 1.0)", Name: "alpha", Version: "1.0", Cached: true},
			},
		},
		{
			name: "python same spelling", language: "python",
			installed: []packages.Resolved{{Name: "foo-bar", Version: "1.2.0", Request: "foo_bar==1.2"}},
			requests:  []string{"foo_bar==1.2"},
			want:      []api.PackageResult{{Request: "foo_bar==1.2", Name: "foo-bar", Version: "1.2.0", Cached: true}},
		},
		{
			name: "npm range spaces and a nested copy of the name", language: "javascript",
			installed: []packages.Resolved{
				{Name: "left-pad", Version: "1.1.0"}, // under another package's node_modules
				{Name: "left-pad", Version: "1.3.0", Request: "left-pad@>=1.3.0 <2"},
				{Name: "JSONStream", Version: "1.3.5", Request: "JSONStream@1.3.5"},
			},
			requests: []string{"JSONStream@1.3.5", "left-pad@>= 1.3.0  <2"},
			want: []api.PackageResult{
				{Request: "JSONStream@1.3.5", Name: "JSONStream", Version: "1.3.5", Cached: true},
				{Request: "left-pad@>= 1.3.0  <2", Name: "left-pad", Version: "1.3.0", Cached: true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lease := &packages.Lease{Manifest: packages.Manifest{Language: tt.language, Packages: tt.installed}, Cached: true}
			got := packageResults(api.Request{Language: tt.language, Packages: tt.requests}, lease)
			if !samePackages(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestPackagesSpellingsShareALayer: concurrent runs that spell one request
// differently share one install, and each Result names its own request with
// the resolved name and version, the run that waited for the install too.
func TestPackagesSpellingsShareALayer(t *testing.T) {
	reg := newRegistryStandIns(t)
	var ts *testService
	ts = newTestService(t, func(cfg *Config) { reg.withPackages(t, &ts, packages.PolicyConfig{})(cfg) })
	spellings := []string{"pkg-a==1.0", "PKG_A (==1.0)", "pkg.a == 1.0.0"}
	results := make([]*api.Result, len(spellings))
	var wg sync.WaitGroup
	for i, spelling := range spellings[:2] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = ts.mustRun(t, request("python", "import pkg_a\nprint(pkg_a.VALUE)\n", withPackageRequests(spelling)))
		}()
	}
	wg.Wait()
	// Another spelling of the version ("==1.0.0", PEP 440's same release)
	// takes the same layer.
	results[2] = ts.mustRun(t, request("python", "import pkg_a\nprint(pkg_a.VALUE)\n", withPackageRequests(spellings[2])))
	for i, res := range results {
		if res.Outcome != api.OutcomeSucceeded || res.Stdout != "42\n" {
			t.Fatalf("run %d: got %s %s %q (stdout %q, stderr %q)", i, res.Outcome, res.Reason, res.Message, res.Stdout, res.Stderr)
		}
		if len(res.Packages) != 1 || res.Packages[0].Request != spellings[i] || res.Packages[0].Name != "pkg-a" || res.Packages[0].Version != "1.0" {
			t.Errorf("run %d: packages %+v, want %q resolved to pkg-a 1.0", i, res.Packages, spellings[i])
		}
	}
	again := ts.mustRun(t, request("python", "print(1)", withPackageRequests("Pkg-A==1.0")))
	want := []api.PackageResult{{Request: "Pkg-A==1.0", Name: "pkg-a", Version: "1.0", Cached: true}}
	if !samePackages(again.Packages, want) {
		t.Errorf("cached run: packages %+v, want %+v", again.Packages, want)
	}
	if len(results[2].Packages) == 1 && !results[2].Packages[0].Cached {
		t.Errorf("==1.0.0 after ==1.0: packages %+v, want the cached layer", results[2].Packages)
	}
	if n, _ := metricSum(scrapeMetrics(ts.Service), "brig_package_installs_total"); n != 1 {
		t.Errorf("brig_package_installs_total: got %v, want 1 (==1.0 and ==1.0.0 are one layer)", n)
	}
}

// TestPackagesReviewedPEP440: the reviewed mode compares versions as PEP 440
// does, before the install ("==1" pins the reviewed 1.0.0) and after it (pkg-a
// 1.0 and dep-b 2.0 installed are the reviewed 1.0.0 and 2).
func TestPackagesReviewedPEP440(t *testing.T) {
	reg := newRegistryStandIns(t)
	var ts *testService
	ts = newTestService(t, func(cfg *Config) {
		reg.withPackages(t, &ts, packages.PolicyConfig{Mode: packages.PolicyReviewed, Reviewed: []string{"Pkg_A==1.0.0", "dep.b==2"}})(cfg)
	})
	res := ts.mustRun(t, request("python", "import pkg_a\nprint(pkg_a.VALUE)\n", withPackageRequests("pkg-a==1")))
	if res.Outcome != api.OutcomeSucceeded || res.Stdout != "42\n" {
		t.Fatalf("got %s %s %q (stdout %q, stderr %q), want the reviewed pair installed", res.Outcome, res.Reason, res.Message, res.Stdout, res.Stderr)
	}
	want := []api.PackageResult{{Request: "pkg-a==1", Name: "pkg-a", Version: "1.0"}}
	if !samePackages(res.Packages, want) {
		t.Errorf("packages: got %+v, want %+v", res.Packages, want)
	}
}

func samePackages(a, b []api.PackageResult) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// BenchmarkPackagesCachedLayer measures a Python run through the service with a
// cached layer of five packages against the same run with none, interleaved,
// and reports each one's p50: go test -run XXX -bench PackagesCachedLayer ./supervisor/
func BenchmarkPackagesCachedLayer(b *testing.B) {
	var pkgs []registrytest.PyPackage
	var reqs []string
	for _, n := range []string{"p1", "p2", "p3", "p4", "p5"} {
		pkgs = append(pkgs, registrytest.PyPackage{Name: n, Version: "1.0", Files: map[string]string{n + "/__init__.py": "X = 1\n"}})
		reqs = append(reqs, n+"==1.0")
	}
	reg := &registryStandIns{py: registrytest.NewPyIndex(b, pkgs...), npm: registrytest.NewNpmRegistry(b)}
	var ts *testService
	ts = newTestService(b, func(cfg *Config) { reg.withPackages(b, &ts, packages.PolicyConfig{})(cfg) })
	plain := request("python", "print(1)")
	layered := request("python", "print(1)", withPackageRequests(reqs...))
	ts.mustRun(b, layered) // installs the layer
	var without, with []time.Duration
	b.ResetTimer()
	for range b.N {
		for _, tc := range []struct {
			req api.Request
			out *[]time.Duration
		}{{plain, &without}, {layered, &with}} {
			begin := time.Now()
			res := ts.mustRun(b, tc.req)
			*tc.out = append(*tc.out, time.Since(begin))
			if res.Outcome != api.OutcomeSucceeded {
				b.Fatalf("got %s %q", res.Outcome, res.Message)
			}
		}
	}
	b.ReportMetric(float64(p50(without).Microseconds())/1e3, "none-p50-ms")
	b.ReportMetric(float64(p50(with).Microseconds())/1e3, "layer-p50-ms")
}

func p50(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestPackagesRealNpmRegistry: a JavaScript run installs a small package from
// the npm registry that `npm config get registry` names, and uses it. Skipped,
// with the reason, when npm is missing or the registry does not answer.
func TestPackagesRealNpmRegistry(t *testing.T) {
	testutil.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	reg, err := packages.Managers{}.Registry(ctx, "javascript", nil)
	testutil.Require(t, err == nil && len(reg.Indexes) == 1, fmt.Sprintf("npm's registry: %v", err))
	probe, err := http.NewRequestWithContext(ctx, http.MethodHead, reg.Indexes[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(probe)
	testutil.Require(t, err == nil, fmt.Sprintf("the npm registry does not answer from this host: %v", err))
	resp.Body.Close()
	// A registry's host may resolve to an address that is not public here (a
	// mirror, or a gateway of the host's network): the default
	// (egress.Config.RegistriesPublicOnly false) reaches it as a registry's.
	ecfg := egress.Config{}
	for _, h := range reg.Hosts {
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", h)
		testutil.Require(t, err == nil, fmt.Sprintf("resolving the npm registry's host: %v", err))
		for _, a := range addrs {
			if class := egress.ClassifyAddr(a.Unmap()); class != egress.ClassPublic {
				t.Logf("the npm registry's host resolves to %s (%s) here: reached by default, as a registry's", a, class)
			}
		}
	}
	var ts *testService
	ts = newTestService(t, func(cfg *Config) {
		inst, err := packages.NewInstaller(packages.InstallerConfig{
			Run: func(ctx context.Context, spec jail.Spec) (*jail.Result, error) {
				return InstallerRun(ts.launcher, ecfg, map[string][]string{"javascript": reg.Hosts})(ctx, spec)
			},
			Registries: map[string][]string{"javascript": reg.Indexes},
		})
		if err != nil {
			t.Fatal(err)
		}
		cache, err := packages.OpenCache(packages.CacheConfig{Dir: t.TempDir(), Installer: inst})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cache.Close() })
		cfg.Packages = PackagesConfig{Cache: cache, Languages: []string{"javascript"}}
	})
	res := ts.mustRun(t, request("javascript", "console.log(require('is-number')(5), require('is-number')('x'))", withPackageRequests("is-number@7.0.0")))
	if res.Outcome != api.OutcomeSucceeded || res.Stdout != "true false\n" {
		t.Fatalf("got %s %q (stdout %q, stderr %q)", res.Outcome, res.Message, res.Stdout, res.Stderr)
	}
	if len(res.Packages) != 1 || res.Packages[0].Version != "7.0.0" || res.Packages[0].Cached {
		t.Errorf("packages: got %+v, want is-number 7.0.0 installed now", res.Packages)
	}
}

// TestPackagesIndexDown: a package index that does not answer (a loopback port
// nothing listens on) ends the run internal, with one message that says the
// request was not at fault and may work later, not the layer's error chain.
func TestPackagesIndexDown(t *testing.T) {
	testutil.RequireRoot(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := closed.Addr().String()
	closed.Close() // nothing listens there now
	var ts *testService
	ts = newTestService(t, func(cfg *Config) {
		withPackagesAt(t, &ts, packages.PolicyConfig{Mode: packages.PolicyOpen}, down, down)(cfg)
	})
	res := ts.mustRun(t, request("python", "print('ran')", withPackageRequests("pkg-a==1.0")))
	if res.Reason != api.ReasonInternal || res.Stdout != "" {
		t.Fatalf("got %s/%s stdout %q (%s), want internal and no output", res.Outcome, res.Reason, res.Stdout, res.Message)
	}
	for _, want := range []string{"could not read the package index", "the program did not run", "may work later", retryUnderANewID} {
		if !strings.Contains(res.Message, want) {
			t.Errorf("message %q, want it to say %q", res.Message, want)
		}
	}
	t.Logf("message: %s", res.Message)
	if strings.Contains(res.Message, "installing layer") {
		t.Errorf("message %q carries the layer's error chain", res.Message)
	}
}

// TestPackagesRegistryNotReached: where the host's resolver answers for a
// registry with an address egress does not dial (a documentation one with
// private_registries off, a link-local one always), or has no address for
// it, the installer fails and the run says which name, why, and what the
// operator can change, not npm's or pip's words for the proxy's 403 or 502
// (pip's retries took 8 s of a run's prepare_ms here). Nothing is dialed: the
// proxy refuses, or finds no address, before it connects.
func TestPackagesRegistryNotReached(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tt := range []struct {
		name, lang, pkg, addr string
		publicOnly            bool
		want                  []string
	}{
		{"javascript, documentation, public only", "javascript", "left@1.2.0", "192.0.2.10", true,
			[]string{"an address of class documentation", "allow_private_hosts"}},
		{"python, link-local", "python", "pkg-a==1.0", "169.254.7.7", false,
			[]string{"an address of class link-local", "allow_private_hosts"}},
		{"javascript, no such name", "javascript", "left@1.2.0", "", false,
			[]string{"resolving " + npmRegistryHost + ": ", "answered NXDOMAIN", "[egress.registries] javascript"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			answers := map[string]string{}
			if tt.addr != "" {
				answers = map[string]string{pyRegistryHost + ".": tt.addr, npmRegistryHost + ".": tt.addr}
			}
			ecfg := egress.Config{Resolver: fakeResolver(t, answers), RegistriesPublicOnly: tt.publicOnly}
			var ts *testService
			ts = newTestService(t, withPackagesEgress(t, &ts, packages.PolicyConfig{}, ecfg))
			res := ts.mustRun(t, request(tt.lang, "print('ran')", withPackageRequests(tt.pkg)))
			t.Logf("message: %s", res.Message)
			if res.Reason != api.ReasonInternal || res.Stdout != "" {
				t.Fatalf("got %s/%s stdout %q (%s), want internal and no output", res.Outcome, res.Reason, res.Stdout, res.Message)
			}
			host := map[string]string{"python": pyRegistryHost, "javascript": npmRegistryHost}[tt.lang]
			for _, want := range append([]string{"registry " + host + " was not reached", "the program did not run", retryUnderANewID}, tt.want...) {
				if !strings.Contains(res.Message, want) {
					t.Errorf("message %q, want it to say %q", res.Message, want)
				}
			}
			// Whole numbers only: the resolver's loopback port (":50293")
			// may hold the digits of a status.
			if strings.Contains(res.Message, "may work later") || proxyStatus.MatchString(res.Message) {
				t.Errorf("message %q: want why the registry was not reached, not the package manager's words", res.Message)
			}
		})
	}
}

// proxyStatus finds the proxy's refusals as a package manager words them.
var proxyStatus = regexp.MustCompile(`\b(403|502)\b`)

// fakeResolver is a DNS server on loopback that answers A queries for the
// names of answers (fully qualified) with their addresses, AAAA with none and
// anything else with NXDOMAIN: egress.Config.Resolver.
func fakeResolver(t *testing.T, answers map[string]string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	srv := &dns.Server{PacketConn: pc, NotifyStartedFunc: func() { close(started) }, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		ip, ok := answers[q.Question[0].Name]
		switch {
		case !ok:
			m.Rcode = dns.RcodeNameError
		case q.Question[0].Qtype == dns.TypeA:
			rr, err := dns.NewRR(q.Question[0].Name + " 60 IN A " + ip)
			if err == nil {
				m.Answer = append(m.Answer, rr)
			}
		}
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String()
}

// hangingRegistry is the address of a registry that takes connections and
// never answers them, closed when t ends.
func hangingRegistry(t *testing.T) string {
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held sync.WaitGroup
	t.Cleanup(func() {
		hang.Close()
		held.Wait()
	})
	held.Add(1)
	go func() {
		defer held.Done()
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	return hang.Addr().String()
}

// TestPackagesStoppedRunStopsItsInstall: a run stopped while its packages
// are installed, which no other run waits for, stops the install too: its
// installer's sandbox does not go on talking to the registry, unseen and
// outside every run's admission, until its install timeout.
func TestPackagesStoppedRunStopsItsInstall(t *testing.T) {
	testutil.RequireRoot(t)
	hang := hangingRegistry(t)
	var ts *testService
	ts = newTestService(t, func(cfg *Config) {
		withPackagesAt(t, &ts, packages.PolicyConfig{Mode: packages.PolicyOpen}, hang, hang)(cfg)
	})
	cache := ts.cfg.Packages.Cache
	ctx := context.Background()
	s := openLiveStream(t, ts.client, request("python", "print('never')", withRunID("pkg-stopped"), withPackageRequests("pkg-a==1.0")))
	s.waitEvent(t, api.EventAccepted, 10*time.Second)
	deadline := time.Now().Add(15 * time.Second)
	for {
		res, err := ts.client.Get(ctx, "pkg-stopped")
		if err != nil {
			t.Fatal(err)
		}
		if res.State == api.StatePreparing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("got state %q after 15s, want preparing", res.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Admitted for its install's memory, which it waits for in its slot,
	// not for its own 256 MiB alone.
	ts.adm.mu.Lock()
	used := ts.adm.usedMiB
	ts.adm.mu.Unlock()
	if used != packages.DefaultInstallMemoryMiB {
		t.Errorf("got %d MiB admitted for a run preparing its packages, want the install's %d", used, packages.DefaultInstallMemoryMiB)
	}
	res, err := ts.client.Stop(ctx, "pkg-stopped")
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != api.ReasonStopped || !strings.Contains(res.Message, "did not run") {
		t.Fatalf("got reason %q (%s), want stopped before the program ran", res.Reason, res.Message)
	}
	deadline = time.Now().Add(15 * time.Second)
	for cache.Stats().InstallFailures == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the install still runs 15s after its one run was stopped (stats %+v)", cache.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestUnreached: an installer's connections tell of a registry the host
// could not reach only when none of them received anything; a refused
// address comes before an unresolved name.
func TestUnreached(t *testing.T) {
	refused := egress.Connection{Host: "r.test", Port: 443, Rule: "address class private (10.0.0.0/8)"}
	unresolved := egress.Connection{Host: "u.test", Port: 443, Allowed: true, Rule: "registry u.test", Failure: "resolving u.test: the resolver answered NXDOMAIN"}
	down := egress.Connection{Host: "d.test", Port: 443, Allowed: true, Rule: "registry d.test", Failure: "dialing d.test: connection refused"}
	got := egress.Connection{Host: "g.test", Port: 443, Allowed: true, Rule: "registry g.test", BytesReceived: 10}
	for _, tt := range []struct {
		name  string
		conns []egress.Connection
		want  string // the host, "" for nil
	}{
		{"none", nil, ""},
		{"refused", []egress.Connection{refused}, "r.test"},
		{"unresolved", []egress.Connection{down, unresolved}, "u.test"},
		{"refused first", []egress.Connection{unresolved, refused}, "r.test"},
		{"a registry that did not answer", []egress.Connection{down}, ""},
		{"something received", []egress.Connection{refused, got}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := unreached(tt.conns)
			if (c == nil) != (tt.want == "") || c != nil && c.Host != tt.want {
				t.Errorf("got %+v, want %q", c, tt.want)
			}
		})
	}
}

// TestPackagesInstallGivesItsSlotBack: a run whose install takes long (here a
// registry that never answers) gives its slot back while it prepares, so that
// a run without packages is not queued behind it; stopped, it gives back its
// memory too.
func TestPackagesInstallGivesItsSlotBack(t *testing.T) {
	testutil.RequireRoot(t)
	hang := hangingRegistry(t)
	var ts *testService
	ts = newTestService(t, func(cfg *Config) {
		cfg.MaxConcurrent = 1
		withPackagesAt(t, &ts, packages.PolicyConfig{Mode: packages.PolicyOpen}, hang, hang)(cfg)
	})
	ctx := context.Background()
	s := openLiveStream(t, ts.client, request("python", "print('never')", withRunID("pkg-hangs"), withPackageRequests("pkg-a==1.0")))
	s.waitEvent(t, api.EventAccepted, 10*time.Second)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if res, err := ts.client.Get(ctx, "pkg-hangs"); err == nil && res.State == api.StatePreparing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run with packages never began preparing")
		}
	}
	plainCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := ts.client.Run(plainCtx, request("python", "print('plain')"))
	if err != nil || res.Stdout != "plain\n" {
		t.Fatalf("a run without packages while another one's install hangs on the one slot: got %+v, %v; want it run", res, err)
	}
	if _, err := ts.client.Stop(ctx, "pkg-hangs"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ts.adm.mu.Lock()
		running, used, preparing := ts.adm.running, ts.adm.usedMiB, ts.adm.preparing
		ts.adm.mu.Unlock()
		if running == 0 && used == 0 && preparing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the stop: running %d, %d MiB, preparing %d; want nothing held", running, used, preparing)
		}
	}
}

// TestPackagesWaitingForTheirSlot: a run whose packages were prepared off its
// slot, waiting for the slot again, shows its packages' versions; stopped
// then, it says how long they took (prepare_ms), as a run that got the slot
// would; run once the slot is free, its start_ms counts the wait, as the
// snapshot's did (the outcomes audit: 954 ms, where the program started
// 5,516 ms after the request).
func TestPackagesWaitingForTheirSlot(t *testing.T) {
	for _, stop := range []bool{true, false} {
		t.Run(map[bool]string{true: "stopped", false: "run"}[stop], func(t *testing.T) {
			reg := newRegistryStandIns(t)
			var ts *testService
			ts = newTestService(t, func(cfg *Config) {
				cfg.MaxConcurrent = 1
				reg.withPackages(t, &ts, packages.PolicyConfig{Mode: packages.PolicyOpen})(cfg)
			})
			ctx := context.Background()
			pkg := openLiveStream(t, ts.client, request("python", "print('ran')", withRunID("pkg-waits"), withPackageRequests("pkg-a==1.0")))
			pkg.waitEvent(t, api.EventAccepted, 10*time.Second)
			// Once it has given its slot back (its install takes longer than
			// prepareHoldsSlot), a long run takes the slot.
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				ts.adm.mu.Lock()
				preparing := ts.adm.preparing
				ts.adm.mu.Unlock()
				if preparing == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Skip("the install never gave its slot back: it was faster than prepareHoldsSlot on this machine")
				}
			}
			long := request("python", "import time; print('up', flush=True); time.sleep(120)", withRunID("holds-the-slot"))
			timeout := 300
			long.TimeoutSeconds = &timeout
			openLiveStream(t, ts.client, long).waitEvent(t, api.EventStdout, time.Minute)
			// The packages are ready while the slot is held: the run waits to resume.
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
				ts.adm.mu.Lock()
				resumers := len(ts.adm.resumers)
				ts.adm.mu.Unlock()
				if resumers == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the run's packages were not ready within a minute")
				}
			}
			if res, err := ts.client.Get(ctx, "pkg-waits"); err != nil || len(res.Packages) != 1 || res.Packages[0].Version != "1.0" {
				t.Errorf("waiting for its slot: got %+v, %v; want its package's version", res, err)
			}
			if stop {
				res, err := ts.client.Stop(ctx, "pkg-waits")
				if err != nil || res.Reason != api.ReasonStopped || res.Timing.PrepareMS <= 0 || len(res.Packages) != 1 || res.Packages[0].Version != "1.0" {
					t.Fatalf("got %+v, %v; want stopped with its prepare_ms and its package's version", res, err)
				}
			}
			time.Sleep(time.Second) // a wait for the slot that start_ms counts
			if _, err := ts.client.Stop(ctx, "holds-the-slot"); err != nil {
				t.Fatal(err)
			}
			if stop {
				return
			}
			res, err := pkg.wait(t, time.Minute)
			if err != nil || res.Stdout != "ran\n" {
				t.Fatalf("got %+v, %v; want the run run once the slot was free", res, err)
			}
			if tm := res.Timing; tm.StartMS < tm.QueuedMS+tm.PrepareMS+1000 || tm.StartMS > tm.TotalMS {
				t.Errorf("timing %+v: want start_ms to count the wait for the slot (over queued_ms + prepare_ms + 1000), within total_ms", tm)
			}
		})
	}
}
