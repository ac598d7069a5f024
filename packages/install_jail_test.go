package packages

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/cgroup"
	"github.com/brig-sandbox/brig/egress"
	"github.com/brig-sandbox/brig/internal/registrytest"
	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/rootfs"
)

// The installer in real jails, in mode registries, against the registry
// stand-ins on loopback. The registries are named by made-up hosts that the
// run's egress pins to the stand-ins, as an operator pins a mirror.
const (
	pyHost  = "pypi.test"
	npmHost = "npm.test"
)

// newTestLauncher returns a Launcher on the host rootfs, closed (and checked
// for leaks) when the test ends.
func newTestLauncher(t testing.TB) *jail.Launcher {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.CheckLeaks(t, testCgroupParent)
	state := t.TempDir()
	p, err := rootfs.NewHost(state, rootfs.HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cg, err := cgroup.New(cgroup.Config{Parent: testCgroupParent})
	if err != nil {
		t.Fatal(err)
	}
	l, err := jail.NewLauncher(jail.Config{StateDir: state, Rootfs: p, Cgroups: cg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// registriesRun is the service's wrapper of the launcher's Run: each run gets
// a network of mode registries admitting the hosts of pins ("host:80"), which
// its egress reaches at the pinned addresses (the stand-ins' 127.0.0.1:port).
func registriesRun(l *jail.Launcher, pins map[string]string) func(context.Context, jail.Spec) (*jail.Result, error) {
	var hosts []string
	for k := range pins {
		h, _, _ := net.SplitHostPort(k)
		hosts = append(hosts, h)
	}
	return func(ctx context.Context, spec jail.Spec) (*jail.Result, error) {
		cfg := egress.Config{Pins: pins}
		var er *egress.Run
		spec.Attach = func(pid int) (map[string]string, error) {
			var err error
			if er, err = egress.Start(&cfg, egress.Policy{Mode: api.NetworkRegistries, Domains: hosts}, pid, nil); err != nil {
				return nil, err
			}
			return egress.Env(), nil
		}
		res, err := l.Run(ctx, spec)
		if er != nil {
			er.Close()
		}
		return res, err
	}
}

// runtimeOf is the version of lang's interpreter in the host rootfs, the
// runtime of its layers.
func runtimeOf(t testing.TB, lang string) string {
	t.Helper()
	p, err := rootfs.NewHost(t.TempDir(), rootfs.HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	root, err := p.Root(rootfs.Language(lang))
	if err != nil {
		t.Fatal(err)
	}
	return root.Version
}

// newStaging is an empty staging folder as the cache makes it: root's, 0755.
func newStaging(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "staging")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func requirePip(t testing.TB) {
	t.Helper()
	testutil.Require(t, exec.Command(rootfs.DefaultPythonPath, "-c", "import pip").Run() == nil,
		"the host's Python has no pip (install python3-pip: `make deps`)")
}

func requireNpm(t testing.TB) {
	t.Helper()
	_, err := os.Stat(DefaultNpm)
	testutil.Require(t, err == nil, "the host has no npm (install npm: `make deps`)")
}

// newPyInstaller serves pkgs and returns an installer that reaches them.
func newPyInstaller(t testing.TB, l *jail.Launcher, pkgs ...registrytest.PyPackage) Installer {
	t.Helper()
	x := registrytest.NewPyIndex(t, pkgs...)
	in, err := NewInstaller(InstallerConfig{
		Run:        registriesRun(l, map[string]string{pyHost + ":80": x.Host()}),
		Registries: map[string][]string{languagePython: {"http://" + pyHost + "/simple/"}},
		Timeout:    120 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func newNpmInstaller(t testing.TB, l *jail.Launcher, pkgs ...registrytest.NpmPackage) Installer {
	t.Helper()
	r := registrytest.NewNpmRegistry(t, pkgs...)
	in, err := NewInstaller(InstallerConfig{
		Run:        registriesRun(l, map[string]string{npmHost + ":80": r.Host()}),
		Registries: map[string][]string{languageJavaScript: {"http://" + npmHost + "/"}},
		Timeout:    120 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// markerSetup is a setup.py that leaves a file in the layer if it ever runs.
const markerSetup = "open('/tmp/layer/SETUP_RAN', 'w').write('ran')\nfrom setuptools import setup\nsetup(name='src-only', version='1.0')\n"

// An in-tree build backend that needs nothing from the index and leaves a
// file in the layer as pip imports it (an audit's way to run code at install
// time through a dependency given by URL).
const (
	inTreeProject = "[build-system]\nrequires = []\nbuild-backend = \"backend\"\nbackend-path = [\".\"]\n"
	markerBackend = "open('/tmp/layer/BACKEND_RAN', 'w').write('ran')\n" +
		"def get_requires_for_build_wheel(config_settings=None):\n    return []\n"
)

func pyPackages() []registrytest.PyPackage {
	return []registrytest.PyPackage{
		{Name: "Pkg_A", Version: "1.0", Files: map[string]string{"pkg_a/__init__.py": "VALUE = 1\n"}},
		{Name: "Pkg_A", Version: "2.0", Requires: []string{"dep-b>=1"}, Files: map[string]string{"pkg_a/__init__.py": "from dep_b import B\nVALUE = 2\n"}},
		{Name: "dep-b", Version: "1.0", Files: map[string]string{"dep_b/__init__.py": "B = 'b'\n"}},
		{Name: "needs-new", Version: "1.0", Requires: []string{"dep-b>=2"}, Files: map[string]string{"needs_new/__init__.py": ""}},
		{Name: "src-only", Version: "1.0", SdistOnly: true, Files: map[string]string{"setup.py": markerSetup, "src_only/__init__.py": ""}},
		{Name: "in-tree", Version: "1.0", SdistOnly: true, Files: map[string]string{"pyproject.toml": inTreeProject, "backend.py": markerBackend}},
		// A wheel with a file that would go outside the install's folder.
		{Name: "escapes", Version: "1.0", Files: map[string]string{"escapes/__init__.py": "", "../escaped.py": "X = 1\n"}},
		// Folders 1,200 deep: pip makes them recursively.
		{Name: "deep", Version: "1.0", Files: map[string]string{"deep/__init__.py": "", "deep/" + strings.Repeat("a/", 1200) + "f.py": "X = 1\n"}},
		// A wheel whose metadata pip can't parse.
		{Name: "bad-req", Version: "1.0", Requires: []string{"dep-b[fast"}, Files: map[string]string{"bad_req/__init__.py": ""}},
		// A wheel whose dependency is given by URL, to a source archive.
		{Name: "url-dep", Version: "1.0", Requires: []string{"in-tree @ http://" + pyHost + "/files/in_tree-1.0.tar.gz"},
			Files: map[string]string{"url_dep/__init__.py": ""}},
	}
}

var sha256Hash = regexp.MustCompile(`^sha256=[0-9a-f]{64}$`)

func TestInstallPythonWheels(t *testing.T) {
	requirePip(t)
	l := newTestLauncher(t)
	in := newPyInstaller(t, l, pyPackages()...)
	staging := newStaging(t)
	var progress []string
	set := Set{Language: languagePython, Runtime: runtimeOf(t, languagePython), Requests: mustRequests(t, languagePython, "pkg.a>=2")}
	got, err := in.Install(context.Background(), set, staging, func(l string) { progress = append(progress, l) })
	if err != nil {
		t.Fatalf("Install: %v (progress %q)", err, progress)
	}
	want := []Resolved{{Name: "dep-b", Version: "1.0", RequiredBy: []string{"pkg-a"}}, {Name: "pkg-a", Version: "2.0", Request: "pkg.a>=2"}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Name != want[i].Name || got[i].Version != want[i].Version || got[i].Request != want[i].Request ||
			!slices.Equal(got[i].RequiredBy, want[i].RequiredBy) || !sha256Hash.MatchString(got[i].Hash) {
			t.Errorf("got %+v, want %+v with a sha256= hash", got[i], want[i])
		}
	}
	if len(progress) == 0 || !strings.Contains(strings.Join(progress, "\n"), "Successfully installed") {
		t.Errorf("got progress %q, want pip's lines", progress)
	}
	for _, f := range []string{"pkg_a/__init__.py", "dep_b/__init__.py"} {
		fi, err := os.Stat(filepath.Join(staging, f))
		if err != nil {
			t.Errorf("got %v, want %s in the layer", err, f)
			continue
		}
		if !fi.Mode().IsRegular() {
			t.Errorf("got %s of mode %s, want a regular file", f, fi.Mode())
		}
	}
	if _, err := os.Stat(filepath.Join(staging, "pkg_a-2.0.dist-info")); err != nil {
		t.Errorf("got %v, want the dist-info in the layer", err)
	}

	t.Run("import", func(t *testing.T) {
		code := "import sys\nsys.path.insert(0, '/layer')\nimport pkg_a\nprint(pkg_a.VALUE, pkg_a.B)\n"
		res := runWithLayer(t, l, rootfs.Python, code, staging, "/layer")
		if !res.Succeeded() || res.Stdout != "2 b\n" {
			t.Fatalf("got %s %q %q %s, want 2 b", res.End, res.Stdout, res.Stderr, res.Message)
		}
	})
}

// TestInstallPythonLargerThanItsScratch: a set that unpacks to more than the
// installer's own writable /tmp (half its memory) installs, since pip's
// temporary folders are in the layer's mount, on the cache's disk; and none
// of them is left in the layer. (The packages probe of 2026-12-06: a wheel of
// 600 MiB never installed under the default 1024 MiB, ending internal.)
func TestInstallPythonLargerThanItsScratch(t *testing.T) {
	requirePip(t)
	l := newTestLauncher(t)
	// The proxy's copy of the 96 MiB goes through the Go runtime's splice,
	// whose pipes wait in a pool for the collector to close them: not a leak.
	t.Cleanup(func() { runtime.GC(); runtime.GC() })
	const memMiB, sizeMiB = 128, 96 // a scratch of 64 MiB
	x := registrytest.NewPyIndex(t, registrytest.PyPackage{Name: "big", Version: "1.0",
		Files: map[string]string{"big/__init__.py": "", "big/data.bin": strings.Repeat("\x00", sizeMiB<<20)}})
	in, err := NewInstaller(InstallerConfig{
		Run:        registriesRun(l, map[string]string{pyHost + ":80": x.Host()}),
		Registries: map[string][]string{languagePython: {"http://" + pyHost + "/simple/"}},
		Timeout:    120 * time.Second,
		MemoryMiB:  memMiB,
	})
	if err != nil {
		t.Fatal(err)
	}
	staging := newStaging(t)
	set := Set{Language: languagePython, Runtime: runtimeOf(t, languagePython), Requests: mustRequests(t, languagePython, "big==1.0")}
	var progress []string
	if _, err := in.Install(context.Background(), set, staging, func(l string) { progress = append(progress, l) }); err != nil {
		t.Fatalf("Install of %d MiB with %d MiB of scratch: %v (progress %q)", sizeMiB, memMiB/2, err, progress)
	}
	if fi, err := os.Stat(filepath.Join(staging, "big", "data.bin")); err != nil || fi.Size() != sizeMiB<<20 {
		t.Errorf("the layer's big/data.bin: %v, want %d bytes", err, sizeMiB<<20)
	}
	if _, err := os.Stat(filepath.Join(staging, pipTmpName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("pip's temporary folder in the layer: got %v, want it removed", err)
	}
}

func TestInstallPythonUnavailable(t *testing.T) {
	requirePip(t)
	l := newTestLauncher(t)
	in := newPyInstaller(t, l, pyPackages()...)
	for _, tc := range []struct {
		name    string
		request string
		want    []string
	}{
		{"unknown package", "no-such-pkg==1.0", []string{"no-such-pkg==1.0", "check the package's name"}},
		{"unsatisfiable version", "pkg-a>=3", []string{"pkg-a>=3", "versions available: 1.0, 2.0"}},
		{"unsatisfiable dependency", "needs-new==1.0", []string{"dep-b>=2", "versions available: 1.0"}},
		// Its setup.py would write a file into the layer.
		{"sdist only, wheels only", "src-only==1.0", []string{"src-only==1.0", "wheels only"}},
		// --only-binary does not hold a dependency given by URL: its backend
		// would write a file into the layer.
		{"a dependency by URL to a source archive", "url-dep==1.0", []string{"in-tree", "is not a wheel: brig installs wheels only"}},
		{"a wheel with a file outside its folder", "escapes==1.0", []string{"escapes==1.0", "outside", "Ask for another version"}},
		{"a wheel nested too deep", "deep==1.0", []string{"RecursionError", "Ask for another version"}},
		{"a wheel whose metadata does not parse", "bad-req==1.0", []string{"metadata can't be read", "Parse error", "Ask for another version"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			staging := newStaging(t)
			set := Set{Language: languagePython, Requests: mustRequests(t, languagePython, tc.request)}
			_, err := in.Install(context.Background(), set, staging, nil)
			for _, marker := range []string{"SETUP_RAN", "BACKEND_RAN"} {
				if _, err := os.Stat(filepath.Join(staging, marker)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("got %v, want no %s: no package code runs at install time", err, marker)
				}
			}
			checkInstallError(t, err, true, tc.want)
			t.Logf("message: %v", err)
		})
	}
}

// TestInstallPythonSetupControl proves the SETUP_RAN marker real: the same
// request with source builds allowed (and the jail's own setuptools, the stand-in
// serving none) runs the sdist's setup.py, which leaves it.
func TestInstallPythonSetupControl(t *testing.T) {
	requirePip(t)
	testutil.Require(t, exec.Command(rootfs.DefaultPythonPath, "-c", "import setuptools").Run() == nil,
		"the host's Python has no setuptools to build the sdist with")
	l := newTestLauncher(t)
	x := registrytest.NewPyIndex(t, pyPackages()...)
	args := pipArgs(mustRequests(t, languagePython, "src-only==1.0"), []string{"http://" + pyHost + "/simple/"}, true)
	args = slices.Insert(args, slices.Index(args, "--"), "--no-build-isolation")
	code, err := pythonDriver(args)
	if err != nil {
		t.Fatal(err)
	}
	staging := newStaging(t)
	res, err := registriesRun(l, map[string]string{pyHost + ":80": x.Host()})(context.Background(), jail.Spec{
		Language: rootfs.Python, Code: code, Timeout: 60 * time.Second, MemoryBytes: 1 << 30,
		Mounts: []jail.Mount{{Source: staging, Target: pyStaging, Writable: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(staging, "SETUP_RAN")); err != nil {
		t.Fatalf("got %v (%s %q), want the setup.py's marker when sdists are built", err, res.End, res.Stderr)
	}
}

// hookScript leaves a file in the layer (npm's prefix's node_modules) and in
// the cwd if it ever runs.
const hookScript = "node -e \"require('fs').writeFileSync('/tmp/node_modules/HOOK_RAN', 'ran')\""

func npmPackages() []registrytest.NpmPackage {
	return []registrytest.NpmPackage{
		{Name: "app", Version: "1.0.0", Dependencies: map[string]string{"@brig/dep": "^1"},
			Files: map[string]string{"index.js": "module.exports = require('@brig/dep')\n"}},
		{Name: "app", Version: "1.1.0", Dependencies: map[string]string{"@brig/dep": "^1"},
			Files: map[string]string{"index.js": "module.exports = require('@brig/dep')\n"}},
		{Name: "@brig/dep", Version: "1.2.0", Files: map[string]string{"index.js": "module.exports = 42\n"}},
		{Name: "@brig/esm", Version: "2.0.0", Type: "module", Files: map[string]string{"index.js": "export default 'esm'\n"}},
		{Name: "hooked", Version: "1.0.0", Files: map[string]string{"index.js": "module.exports = 'hooked'\n"},
			Scripts: map[string]string{"preinstall": hookScript, "install": hookScript, "postinstall": hookScript}},
		// A package with a build per platform, as esbuild's: npm installs
		// this platform's alone and lists the others in its lockfile.
		{Name: "plat", Version: "1.0.0", OptionalDependencies: map[string]string{"@plat/aix": "1.0.0", "@plat/linux": "1.0.0"},
			Files: map[string]string{"index.js": "module.exports = require('@plat/linux')\n"}},
		{Name: "@plat/aix", Version: "1.0.0", OS: []string{"aix"}, Files: map[string]string{"index.js": "module.exports = 'aix'\n"}},
		{Name: "@plat/linux", Version: "1.0.0", OS: []string{"linux"}, Files: map[string]string{"index.js": "module.exports = 'linux'\n"}},
	}
}

var integrity = regexp.MustCompile(`^sha512-[A-Za-z0-9+/]+=*$`)

func TestInstallNpm(t *testing.T) {
	requireNpm(t)
	l := newTestLauncher(t)
	in := newNpmInstaller(t, l, npmPackages()...)
	staging := newStaging(t)
	var progress []string
	set := Set{Language: languageJavaScript, Runtime: runtimeOf(t, languageJavaScript), Requests: mustRequests(t, languageJavaScript, "app@~1.0.0", "@brig/esm@*", "hooked@^1", "plat@1")}
	got, err := in.Install(context.Background(), set, staging, func(l string) { progress = append(progress, l) })
	if err != nil {
		t.Fatalf("Install: %v (progress %q)", err, progress)
	}
	want := []Resolved{
		{Name: "@brig/dep", Version: "1.2.0", RequiredBy: []string{"app"}},
		{Name: "@brig/esm", Version: "2.0.0", Request: "@brig/esm@*"},
		{Name: "@plat/linux", Version: "1.0.0", RequiredBy: []string{"plat"}},
		{Name: "app", Version: "1.0.0", Request: "app@~1.0.0"},
		{Name: "hooked", Version: "1.0.0", Request: "hooked@^1"},
		// Not @plat/aix, which npm skipped here: the layer's list, which
		// the policy checks, is what is on the disk (the npm probe of
		// 2026-12-06: esbuild was blocked for its AIX build).
		{Name: "plat", Version: "1.0.0", Request: "plat@1"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Name != want[i].Name || got[i].Version != want[i].Version || got[i].Request != want[i].Request ||
			!slices.Equal(got[i].RequiredBy, want[i].RequiredBy) || !integrity.MatchString(got[i].Hash) {
			t.Errorf("got %+v, want %+v with a sha512 integrity", got[i], want[i])
		}
	}
	if len(progress) == 0 {
		t.Errorf("got no progress, want npm's lines")
	}
	if !slices.ContainsFunc(progress, func(l string) bool {
		return strings.HasPrefix(l, "brig: hooked@1.0.0 has an install script, which brig never runs")
	}) {
		t.Errorf("progress %q: want a line saying hooked's install script did not run", progress)
	}
	// The layer is node_modules' contents: mounted at /node_modules, require()
	// and import resolve from any script.
	for _, f := range []string{"app/index.js", "@brig/dep/index.js", "@brig/esm/index.js", "@brig/esm/package.json", "hooked/package.json"} {
		fi, err := os.Stat(filepath.Join(staging, f))
		if err != nil {
			t.Errorf("got %v, want %s in the layer", err, f)
			continue
		}
		if !fi.Mode().IsRegular() {
			t.Errorf("got %s of mode %s, want a regular file", f, fi.Mode())
		}
	}
	if b, err := os.ReadFile(filepath.Join(staging, "@brig/esm/package.json")); err != nil || !strings.Contains(string(b), `"module"`) {
		t.Errorf("got %q, %v, want the ESM package's package.json with its type", b, err)
	}
	if _, err := os.Stat(filepath.Join(staging, "HOOK_RAN")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %v, want no HOOK_RAN: install scripts never run", err)
	}
	if _, err := os.Stat(filepath.Join(staging, "package.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %v, want no package.json in the layer: it is node_modules' contents", err)
	}

	t.Run("import", func(t *testing.T) {
		code := "console.log(require('app'));\nimport('@brig/esm').then(m => console.log(m.default))\n"
		res := runWithLayer(t, l, rootfs.JavaScript, code, staging, "/node_modules")
		if !res.Succeeded() || res.Stdout != "42\nesm\n" {
			t.Fatalf("got %s %q %q %s, want 42 and esm", res.End, res.Stdout, res.Stderr, res.Message)
		}
	})
}

// TestInstallNpmHookControl proves TestInstallNpm's marker real: the same
// install with npm's scripts left on (not something Install can do) leaves it.
func TestInstallNpmHookControl(t *testing.T) {
	requireNpm(t)
	l := newTestLauncher(t)
	r := registrytest.NewNpmRegistry(t, npmPackages()...)
	cfg := npmConfigOf(mustRequests(t, languageJavaScript, "hooked@^1"), []string{"http://" + npmHost + "/"})
	cfg.Args = slices.DeleteFunc(cfg.Args, func(a string) bool { return a == "--ignore-scripts" })
	code, err := npmDriver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	staging := newStaging(t)
	res, err := registriesRun(l, map[string]string{npmHost + ":80": r.Host()})(context.Background(), jail.Spec{
		Language: rootfs.JavaScript, Code: code, Timeout: 60 * time.Second, MemoryBytes: 1 << 30,
		Mounts: []jail.Mount{{Source: staging, Target: npmStaging, Writable: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(staging, "HOOK_RAN")); err != nil {
		t.Fatalf("got %v (%s %q), want the hook's marker when scripts run", err, res.End, res.Stderr)
	}
}

func TestInstallNpmUnavailable(t *testing.T) {
	requireNpm(t)
	l := newTestLauncher(t)
	// Dependencies from outside the registries: the installer reaches only
	// them (the names are under .test, which the egress refuses).
	outside := []registrytest.NpmPackage{
		{Name: "gitdep", Version: "1.0.0", Dependencies: map[string]string{"x": "git+https://example.test/x.git"}, Files: map[string]string{"index.js": "1\n"}},
		{Name: "urldep", Version: "1.0.0", Dependencies: map[string]string{"x": "https://example.test/x.tgz"}, Files: map[string]string{"index.js": "1\n"}},
	}
	in := newNpmInstaller(t, l, append(npmPackages(), outside...)...)
	for _, tc := range []struct {
		name    string
		request string
		want    []string
	}{
		{"unknown package", "no-such-pkg@^1.0.0", []string{"'no-such-pkg@^1.0.0' could not be found", "Check the package's name"}},
		{"unsatisfiable version", "app@^9.0.0", []string{"app@^9.0.0", "Check the version constraint"}},
		{"git dependency", "gitdep@1", []string{"a dependency comes from git (https://example.test/x.git)", "registries only"}},
		{"tarball elsewhere", "urldep@1", []string{"403 Forbidden - GET https://example.test/x.tgz", "outside the configured registries"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := Set{Language: languageJavaScript, Requests: mustRequests(t, languageJavaScript, tc.request)}
			_, err := in.Install(context.Background(), set, newStaging(t), nil)
			checkInstallError(t, err, true, tc.want)
			t.Logf("message: %v", err)
		})
	}
}

// TestInstallRegistryUnreachable checks that an index the run can't reach is
// an installer failure, not an unavailable package: the registry is pinned to
// a port nothing listens on.
func TestInstallRegistryUnreachable(t *testing.T) {
	requirePip(t)
	l := newTestLauncher(t)
	in, err := NewInstaller(InstallerConfig{
		Run:        registriesRun(l, map[string]string{pyHost + ":80": closedPort(t)}),
		Registries: map[string][]string{languagePython: {"http://" + pyHost + "/simple/"}},
		Timeout:    120 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	set := Set{Language: languagePython, Requests: mustRequests(t, languagePython, "pkg-a>=1")}
	_, err = in.Install(context.Background(), set, newStaging(t), nil)
	checkInstallError(t, err, false, []string{"could not read the package index"})
	t.Logf("message: %v", err)
}

// TestInstallNpmRegistryFailing: a registry that answers 502 to everything
// is an installer failure, not an unavailable package, and npm gives up after
// its two retries a second or few apart (its own backoff, 10 to 60 s, kept a
// run waiting 70 s).
func TestInstallNpmRegistryFailing(t *testing.T) {
	requireNpm(t)
	l := newTestLauncher(t)
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		http.Error(w, "bad gateway", http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	in, err := NewInstaller(InstallerConfig{
		Run:        registriesRun(l, map[string]string{npmHost + ":80": srv.Listener.Addr().String()}),
		Registries: map[string][]string{languageJavaScript: {"http://" + npmHost + "/"}},
		Timeout:    120 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	set := Set{Language: languageJavaScript, Requests: mustRequests(t, languageJavaScript, "app@^1")}
	begin := time.Now()
	_, err = in.Install(context.Background(), set, newStaging(t), nil)
	took := time.Since(begin)
	var uerr *UnavailableError
	if err == nil || errors.As(err, &uerr) {
		t.Fatalf("got %v, want an installer failure", err)
	}
	if n := requests.Load(); n > 3 {
		t.Errorf("the registry was asked %d times, want the first try and two retries at most", n)
	}
	// About 7 s here with the short backoff, 70 s with npm's; the bound is
	// far from both.
	if took > 40*time.Second {
		t.Errorf("the install took %s to fail, want npm's retries a few seconds apart", took.Round(time.Second))
	}
	t.Logf("after %d requests in %s: %v", requests.Load(), took.Round(time.Millisecond), err)
}

// closedPort is a loopback address nothing listens on any more.
func closedPort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// BenchmarkInstall is the time to install a small layer (a package and its
// dependency) from the local stand-ins, in a fresh jail each time: the
// installer's share of a cache miss.
func BenchmarkInstall(b *testing.B) {
	for _, tc := range []struct {
		name, lang, request string
	}{
		{"python", languagePython, "pkg-a>=2"},
		{"javascript", languageJavaScript, "app@^1"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l := newTestLauncher(b)
			var in Installer
			if tc.lang == languagePython {
				requirePip(b)
				in = newPyInstaller(b, l, pyPackages()...)
			} else {
				requireNpm(b)
				in = newNpmInstaller(b, l, npmPackages()...)
			}
			set := Set{Language: tc.lang, Requests: mustRequests(b, tc.lang, tc.request)}
			b.ResetTimer()
			for b.Loop() {
				staging, err := os.MkdirTemp(b.TempDir(), "staging")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := in.Install(context.Background(), set, staging, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestInstallThroughCache publishes layers the real installers made: the
// cache's check passes them (npm's .bin links and lockfile, pip's bytecode),
// and the published files are root's though a jail's id wrote them.
func TestInstallThroughCache(t *testing.T) {
	requirePip(t)
	requireNpm(t)
	l := newTestLauncher(t)
	x := registrytest.NewPyIndex(t, pyPackages()...)
	r := registrytest.NewNpmRegistry(t, npmPackages()...)
	in, err := NewInstaller(InstallerConfig{
		Run: registriesRun(l, map[string]string{pyHost + ":80": x.Host(), npmHost + ":80": r.Host()}),
		Registries: map[string][]string{
			languagePython:     {"http://" + pyHost + "/simple/"},
			languageJavaScript: {"http://" + npmHost + "/"},
		},
		Timeout: 120 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	cache, err := OpenCache(CacheConfig{Dir: filepath.Join(t.TempDir(), "packages"), Installer: in})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	for _, tc := range []struct {
		lang  string
		reqs  []string
		files []string
	}{
		{languagePython, []string{"pkg-a>=2"}, []string{"pkg_a/__init__.py", "dep_b/__init__.py"}},
		{languageJavaScript, []string{"app@^1", "@brig/esm@2"}, []string{"app/index.js", "@brig/dep/index.js", "@brig/esm/index.js"}},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			set := Set{Language: tc.lang, Runtime: runtimeOf(t, tc.lang), Requests: mustRequests(t, tc.lang, tc.reqs...)}
			lease, err := cache.Acquire(context.Background(), set, nil)
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			defer lease.Release()
			if lease.Cached || len(lease.Manifest.Packages) < len(tc.reqs) {
				t.Errorf("got cached %v packages %+v, want a fresh install of %q", lease.Cached, lease.Manifest.Packages, tc.reqs)
			}
			for _, f := range tc.files {
				fi, err := os.Lstat(filepath.Join(lease.Dir, f))
				if err != nil {
					t.Errorf("got %v, want %s in the layer", err, f)
					continue
				}
				if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 {
					t.Errorf("got %s owned by %d:%d, want root's", f, st.Uid, st.Gid)
				}
			}
		})
	}
}

// runWithLayer runs code with an installed layer, staging, mounted read-only at
// target, as a run that asked for its packages would have it.
func runWithLayer(t *testing.T, l *jail.Launcher, lang rootfs.Language, code, staging, target string) *jail.Result {
	t.Helper()
	res, err := l.Run(context.Background(), jail.Spec{Language: lang, Code: code, Timeout: 10 * time.Second, MemoryBytes: 256 << 20,
		Mounts: []jail.Mount{{Source: staging, Target: target}}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}
