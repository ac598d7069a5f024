package packages

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/jail"
)

// Tests of the installer's policy and parsing, with no jail: the drivers'
// arguments, their result line, and how a tool's failure becomes an error.

func mustRequests(t testing.TB, lang string, list ...string) []Request {
	t.Helper()
	reqs, err := ParseRequests(lang, list)
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

func noRun(context.Context, jail.Spec) (*jail.Result, error) {
	return nil, errors.New("not in this test")
}

func TestNewInstallerValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  InstallerConfig
		want string // in the error; "" for none
	}{
		{"defaults", InstallerConfig{Run: noRun, Registries: map[string][]string{"python": {"http://pypi.test/simple/"}, "javascript": {"https://npm.test/"}}}, ""},
		{"no registries", InstallerConfig{Run: noRun}, ""},
		{"no run", InstallerConfig{}, "run: required"},
		{"timeout past the jail's", InstallerConfig{Run: noRun, Timeout: 301 * time.Second}, "timeout"},
		{"too little memory", InstallerConfig{Run: noRun, MemoryMiB: 64}, "memory"},
		{"unknown language", InstallerConfig{Run: noRun, Registries: map[string][]string{"ruby": {"http://x.test/"}}}, `unknown language "ruby"`},
		{"two npm registries", InstallerConfig{Run: noRun, Registries: map[string][]string{"javascript": {"http://a.test/", "http://b.test/"}}}, "npm takes one registry"},
		{"not http", InstallerConfig{Run: noRun, Registries: map[string][]string{"python": {"file:///srv/index"}}}, "want an http or https URL"},
		{"no host", InstallerConfig{Run: noRun, Registries: map[string][]string{"python": {"http:///simple"}}}, "has no host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewInstaller(tc.cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// pip gets the requests as their layer's key has them, in its order and
// spelling: whichever run installs a layer, it installs the same thing.
func TestPipArgs(t *testing.T) {
	reqs := mustRequests(t, "python", "Pkg_A[Extra, foo_bar]>=1,<2", "dep-b==1.0")
	again := mustRequests(t, "python", "DEP.B == 1.0", "pkg-a [ FOO_BAR,extra ] >=1, <2")
	if k, kk := (Set{Language: "python", Requests: reqs}).Key(), (Set{Language: "python", Requests: again}).Key(); k != kk {
		t.Fatalf("the two spellings have keys %s and %s, want one", k, kk)
	}
	if a, b := pipArgs(reqs, nil, false), pipArgs(again, nil, false); !reflect.DeepEqual(a, b) {
		t.Fatalf("one key, two installs: %q and %q", a, b)
	}
	for _, tc := range []struct {
		name        string
		urls        []string
		allowSource bool
		want        []string // in order, after the fixed options
	}{
		{"wheels only, one index", []string{"http://pypi.test/simple/"}, false,
			[]string{"--only-binary=:all:", "--index-url", "http://pypi.test/simple/", "--trusted-host", "pypi.test", "--", "dep-b==1.0", "pkg-a[extra,foo_bar]>=1,<2"}},
		{"source builds, two indexes", []string{"https://a.test/simple/", "http://b.test:8080/simple/"}, true,
			[]string{"--index-url", "https://a.test/simple/", "--extra-index-url", "http://b.test:8080/simple/", "--trusted-host", "b.test:8080", "--", "dep-b==1.0", "pkg-a[extra,foo_bar]>=1,<2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := pipArgs(reqs, tc.urls, tc.allowSource)
			i := slices.Index(args, "--report")
			if i < 0 || args[0] != "install" || !slices.Contains(args, "--isolated") || !slices.Contains(args, "--target") {
				t.Fatalf("got %q, want install --isolated --target ... --report ...", args)
			}
			if got := args[i+2:]; !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %q after the report, want %q", got, tc.want)
			}
		})
	}
}

func TestNpmConfig(t *testing.T) {
	reqs := mustRequests(t, "javascript", "lodash@^4.17.0", "@types/node@>=20 <21")
	cfg := npmConfigOf(reqs, []string{"http://npm.test/"})
	want := map[string]string{"lodash": "^4.17.0", "@types/node": ">=20 <21"}
	if !reflect.DeepEqual(cfg.Dependencies, want) {
		t.Errorf("got dependencies %v, want %v", cfg.Dependencies, want)
	}
	for _, a := range []string{"--ignore-scripts", "--registry", "http://npm.test/"} {
		if !slices.Contains(cfg.Args, a) {
			t.Errorf("got args %q, want %q among them", cfg.Args, a)
		}
	}
	if cfg.Prefix+"/node_modules" != npmStaging {
		t.Errorf("got prefix %q, want the parent of the staging mount %q", cfg.Prefix, npmStaging)
	}
}

// TestDriversParse checks that both drivers are valid programs of their
// language, whatever the requests hold, with the host's interpreters only
// parsing them (nothing is installed).
func TestDriversParse(t *testing.T) {
	odd := []Request{{Raw: `a'b"c\n${x}%s`, Name: "a'b", Constraint: "*"}}
	py, err := pythonDriver(pipArgs(odd, []string{"http://pypi.test/simple/"}, false))
	if err != nil {
		t.Fatal(err)
	}
	js, err := npmDriver(npmConfigOf(odd, []string{"http://npm.test/"}))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name, file, code string
		check            []string
	}{
		{"python", "main.py", py, []string{"python3", "-m", "py_compile"}},
		{"javascript", "main.js", js, []string{"node", "--check"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := exec.LookPath(tc.check[0]); err != nil {
				t.Skipf("no %s on this host to parse the driver with", tc.check[0])
			}
			if strings.Contains(tc.code, "%!") {
				t.Fatalf("the driver has a formatting error: %s", tc.code)
			}
			path := filepath.Join(dir, tc.file)
			if err := os.WriteFile(path, []byte(tc.code), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(tc.check[0], append(tc.check[1:], path)...).CombinedOutput(); err != nil {
				t.Fatalf("got %v: %s, want the driver to parse", err, out)
			}
		})
	}
}

func TestParseDriverResult(t *testing.T) {
	for _, tc := range []struct {
		name, stdout string
		want         *driverResult
		wantErr      string
	}{
		{"result", "noise\n" + resultMarker + `{"exit":0,"packages":[{"name":"a","version":"1"}]}` + "\n",
			&driverResult{Packages: []driverPackage{{Name: "a", Version: "1"}}}, ""},
		{"no result", "Traceback (most recent call last):\n", nil, "without its result"},
		{"cut result", resultMarker + `{"exit":0,"pack`, nil, "reading its result"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseDriverResult(tc.stdout)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, %v, want %+v", got, err, tc.want)
			}
		})
	}
}

func TestInstallFailed(t *testing.T) {
	ok := resultMarker + `{"exit":0,"packages":[]}` + "\n"
	for _, tc := range []struct {
		name string
		res  jail.Result
		want bool
	}{
		{"the tool succeeded", jail.Result{End: jail.EndCompleted, Stdout: ok}, false},
		{"the tool failed, the driver exited 0", jail.Result{End: jail.EndCompleted, Stdout: resultMarker + `{"exit":1}` + "\n"}, true},
		{"the driver exited with the tool's failure", jail.Result{End: jail.EndError, Stdout: resultMarker + `{"exit":1}` + "\n"}, true},
		{"no result", jail.Result{End: jail.EndError, Stdout: "Traceback\n"}, true},
		{"timed out after its result", jail.Result{End: jail.EndTimeout, Stdout: ok}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := InstallFailed(&tc.res); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPythonResolved(t *testing.T) {
	set := Set{Language: "python", Requests: mustRequests(t, "python", "Pkg_A>=1")}
	r := &driverResult{Packages: []driverPackage{
		{Name: "Dep.B", Version: "1.0", Hash: "sha256=bb"},
		{Name: "pkg-a", Version: "1.2", Hash: "sha256=aa"},
	}}
	got, err := pythonResolved(set, r, false)
	want := []Resolved{
		{Name: "dep-b", Version: "1.0", Hash: "sha256=bb"},
		{Name: "pkg-a", Version: "1.2", Hash: "sha256=aa", Request: "Pkg_A>=1"},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v, want %+v", got, err, want)
	}
}

func TestNpmResolved(t *testing.T) {
	set := Set{Language: "javascript", Requests: mustRequests(t, "javascript", "app@^1", "@brig/dep@*")}
	r := &driverResult{Packages: []driverPackage{
		{Name: "app", Version: "1.0.0", Hash: "sha512-a", Path: "node_modules/app"},
		{Name: "@brig/dep", Version: "2.0.0", Hash: "sha512-d2", Path: "node_modules/@brig/dep"},
		// A second copy of a requested name, nested: a dependency's.
		{Name: "@brig/dep", Version: "1.0.0", Hash: "sha512-d1", Path: "node_modules/app/node_modules/@brig/dep"},
		// A package is named as the registry serves it, from the URL it
		// was fetched from; its folder's and its package.json's names,
		// where they differ, are its aliases: a requested package or a
		// dependency whose tarball names another package, an alias's
		// folder. One fetched from elsewhere says where.
		{Name: "okjs", Version: "3.0.0", Hash: "sha512-l", Path: "node_modules/liar", Resolved: "http://reg.test/npm/liar/-/liar-3.0.0.tgz"},
		{Name: "okjs", Version: "1.0.0", Hash: "sha512-e", Path: "node_modules/app/node_modules/evil", Resolved: "http://reg.test/evil/-/evil-1.0.0.tgz"},
		{Name: "string-width", Version: "4.2.3", Hash: "sha512-s", Path: "node_modules/string-width-cjs", Resolved: "https://reg.test/string-width/-/string-width-4.2.3.tgz"},
		{Name: "@brig/scoped", Version: "1.0.0", Hash: "sha512-c", Path: "node_modules/app/node_modules/@brig/scoped", Resolved: "http://reg.test/@brig/scoped/-/scoped-1.0.0.tgz"},
		{Name: "gitdep", Version: "1.0.0", Hash: "sha512-g", Path: "node_modules/gitdep", Resolved: "git+https://git.test/gitdep.git#0123abc"},
		// A URL of another layout (a mirror's): still fetched from a
		// registry's host, the only ones the installer reaches.
		{Name: "mirrored", Version: "1.0.0", Hash: "sha512-m", Path: "node_modules/app/node_modules/mirrored", Resolved: "https://mirror.test/download/mirrored/1.0.0/abc"},
	}}
	set.Requests = append(set.Requests, mustRequests(t, "javascript", "liar@3.0.0")...)
	got, err := npmResolved(set, r, []string{"https://reg.test/"})
	want := []Resolved{
		{Name: "@brig/dep", Version: "1.0.0", Hash: "sha512-d1"},
		{Name: "@brig/dep", Version: "2.0.0", Hash: "sha512-d2", Request: "@brig/dep@*"},
		{Name: "@brig/scoped", Version: "1.0.0", Hash: "sha512-c"},
		{Name: "app", Version: "1.0.0", Hash: "sha512-a", Request: "app@^1"},
		{Name: "evil", Version: "1.0.0", Hash: "sha512-e", Aliases: []string{"okjs"}},
		{Name: "gitdep", Version: "1.0.0", Hash: "sha512-g", Source: "git+https://git.test/gitdep.git#0123abc"},
		{Name: "liar", Version: "3.0.0", Hash: "sha512-l", Request: "liar@3.0.0", Aliases: []string{"okjs"}},
		{Name: "mirrored", Version: "1.0.0", Hash: "sha512-m"},
		{Name: "string-width", Version: "4.2.3", Hash: "sha512-s", Aliases: []string{"string-width-cjs"}},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v, want %+v", got, err, want)
	}
}

// discardedBadver is pip 23.0.1's line for a wheel whose METADATA says
// version 2.0 and its file name 1.0, as it printed it (its index's host made
// up).
const discardedBadver = "Discarding http://pypi.test/files/badver-1.0-py3-none-any.whl#sha256=d1e0bdec74655883d2751613382e550325a3f4a0de7917cbe5ff03e4a9210df6 (from http://pypi.test/simple/badver/): Requested badver==1.0 from http://pypi.test/files/badver-1.0-py3-none-any.whl#sha256=d1e0bdec74655883d2751613382e550325a3f4a0de7917cbe5ff03e4a9210df6 has inconsistent version: expected '1.0', but metadata has '2.0'"

// TestPipError holds pip 23's own wording of each failure.
func TestPipError(t *testing.T) {
	for _, tc := range []struct {
		name        string
		r           driverResult
		allowSource bool
		unavailable bool
		want        []string // in the message
	}{
		{"unknown package", driverResult{Exit: 1,
			Errors:        []string{"ERROR: Could not find a version that satisfies the requirement nosuch==1.0 (from versions: none)", "ERROR: No matching distribution found for nosuch==1.0"},
			FetchFailures: []string{"Could not fetch URL http://pypi.test/simple/nosuch/: 404 Client Error: Not Found for url: http://pypi.test/simple/nosuch/ - skipping"}},
			false, true, []string{"nosuch==1.0", "check the package's name", "wheels only"}},
		{"no such version", driverResult{Exit: 1,
			Errors: []string{"ERROR: Could not find a version that satisfies the requirement pkg-a==9 (from versions: 1.0, 2.0)", "ERROR: No matching distribution found for pkg-a==9"}},
			true, true, []string{"satisfies the requirement pkg-a==9", "versions available: 1.0, 2.0"}},
		{"no such version but pre-releases", driverResult{Exit: 1,
			Errors: []string{"ERROR: Could not find a version that satisfies the requirement alpha>=2.5 (from versions: 1.0, 2.0, 2.1rc1, 3.0.dev1)", "ERROR: No matching distribution found for alpha>=2.5"}},
			true, true, []string{"versions available: 1.0, 2.0, 2.1rc1, 3.0.dev1", "chosen only when the constraint names one"}},
		{"invalid wheel", driverResult{Exit: 1,
			Errors: []string{"ERROR: sneaky has an invalid wheel, .dist-info directory 'evil_dep-1.0.dist-info' does not start with 'sneaky'"}},
			false, true, []string{"invalid wheel", "ask for another version"}},
		// pip 23.0's (Debian 12's) words for a wheel that is not a zip
		// archive, with its temporary path, which the message leaves out.
		{"a wheel that is no zip archive", driverResult{Exit: 1,
			Errors: []string{"ERROR: Wheel 'garbage' located at /tmp/layer/.brig-pip-tmp/pip-unpack-3gg_0r7a/garbage-1.0-py3-none-any.whl is invalid."}},
			false, true, []string{"garbage has an invalid wheel", "not a valid zip archive", "malformed wheel", "ask for another version"}},
		// pip 23.0's words for a wheel whose METADATA's version is not its
		// file name's: an INFO line before its errors, which the driver
		// keeps (Discarded) and the tail may hold too. Its reason is said,
		// its URLs by their file names.
		{"a wheel discarded for its metadata", driverResult{Exit: 1,
			Errors:    []string{"ERROR: Could not find a version that satisfies the requirement badver==1.0 (from versions: 1.0)", "ERROR: No matching distribution found for badver==1.0"},
			Discarded: []string{discardedBadver}},
			false, true, []string{"requirement badver==1.0", "pip discarded badver-1.0-py3-none-any.whl: it has inconsistent version: expected '1.0', but metadata has '2.0'", "malformed", "ask for another version", "versions available: 1.0"}},
		{"a discard in the tail", driverResult{Exit: 1,
			Errors: []string{"ERROR: Could not find a version that satisfies the requirement badver==1.0 (from versions: 1.0)", "ERROR: No matching distribution found for badver==1.0"},
			Tail:   []string{"Collecting badver==1.0", "  Downloading http://pypi.test/files/badver-1.0-py3-none-any.whl (916 bytes)", discardedBadver, "ERROR: Could not find a version that satisfies the requirement badver==1.0 (from versions: 1.0)"}},
			false, true, []string{"pip discarded badver-1.0-py3-none-any.whl: it has inconsistent version: expected '1.0', but metadata has '2.0'", "malformed"}},
		// The same of a dependency's name (pip's MetadataInconsistent for
		// "name"), its link with a Requires-Python, its file name
		// URL-quoted.
		{"a discarded dependency", driverResult{Exit: 1,
			Errors:    []string{"ERROR: Could not find a version that satisfies the requirement dep-b>=1 (from needs-new) (from versions: 1.0+cpu)", "ERROR: No matching distribution found for dep-b>=1"},
			Discarded: []string{"Discarding http://pypi.test/files/dep_b-1.0%2Bcpu-py3-none-any.whl#sha256=ab12 (from http://pypi.test/simple/dep-b/) (requires-python:>=3.8): Requested dep-b>=1 from http://pypi.test/files/dep_b-1.0%2Bcpu-py3-none-any.whl#sha256=ab12 (from needs-new==1.0) has inconsistent name: expected 'dep-b', but metadata has 'dep-c'"}},
			false, true, []string{"pip discarded dep_b-1.0+cpu-py3-none-any.whl: it has inconsistent name: expected 'dep-b', but metadata has 'dep-c'", "malformed"}},
		// The package audit's wheel with "datatrav-1.0.data/scripts/../../x".
		{"unknown scheme key", driverResult{Exit: 1,
			Errors: []string{"ERROR: Unknown scheme key used in /tmp/pip-unpack-x1/datatrav-1.0.data: .. (for file 'datatrav-1.0.data/scripts/../../x')"}},
			false, true, []string{"malformed wheel", "Ask for another version"}},
		// The package audit's wheel whose folders nest 1,200 deep.
		{"a wheel nested too deep", driverResult{Exit: 2, Errors: []string{"ERROR: Exception:"},
			Tail: []string{"Traceback (most recent call last):", "  File \"<frozen os>\", line 215, in makedirs", "  [Previous line repeated 979 more times]", "RecursionError: maximum recursion depth exceeded"}},
			false, true, []string{"(RecursionError: maximum recursion depth exceeded)", "nest about a thousand deep", "Ask for another version"}},
		// The packages probe's wheel whose Requires-Dist names "sux" at a
		// URL of six's wheel.
		{"a wheel by URL of another project", driverResult{Exit: 2, Errors: []string{"ERROR: Exception:"},
			Tail: []string{"Traceback (most recent call last):", "  File \"wheel.py\", line 1, in install", "AssertionError: 'sux' != 'six' for wheel"}},
			false, true, []string{"'sux' != 'six' for wheel", "metadata is malformed", "Ask for another version"}},
		// The packages probe's sdist of a C extension, with source builds
		// on: the installer has no compiler.
		{"a source build that failed", driverResult{Exit: 1, Errors: []string{"ERROR: Failed building wheel for cext", "ERROR: Could not build wheels for cext, which is required to install pyproject.toml-based projects"},
			Tail: []string{"x86_64-linux-gnu-gcc: fatal error: cannot execute 'cc1'", "error: subprocess-exited-with-error"}},
			true, true, []string{"source build failed", "Failed building wheel for cext", "no C compiler"}},
		// The review's sdist whose build dependency the index did not
		// serve: not the build's failure.
		{"a build's dependencies not installed", driverResult{Exit: 1,
			Tail: []string{"  ERROR: No matching distribution found for setuptools>=40.8.0", "error: subprocess-exited-with-error", "× pip subprocess to install build dependencies did not run successfully."}},
			true, false, []string{"install build dependencies did not run successfully"}},
		{"a metadata build that failed", driverResult{Exit: 1,
			Tail: []string{"Exception: no", "error: metadata-generation-failed"}},
			true, true, []string{"source build failed (pip: error: metadata-generation-failed)"}},
		// The packages probe's wheel with "Requires-Dist: depb[fast".
		{"metadata that does not parse", driverResult{Exit: 2, Errors: []string{"ERROR: Exception:"},
			Tail: []string{"Traceback (most recent call last):", "pip._vendor.packaging.requirements.InvalidRequirement: Parse error at \"'[fast'\": Expected string_end"}},
			false, true, []string{"metadata can't be read (Parse error at", "Ask for another version"}},
		// An assertion of pip's of another kind: a defect, not the package's.
		{"another AssertionError", driverResult{Exit: 2, Errors: []string{"ERROR: Exception:"},
			Tail: []string{"Traceback (most recent call last):", "AssertionError: unexpected state"}},
			false, false, []string{"status 2", "AssertionError"}},
		// Not pip's makedirs: not said to be the package's doing.
		{"a RecursionError elsewhere", driverResult{Exit: 2, Errors: []string{"ERROR: Exception:"},
			Tail: []string{"Traceback (most recent call last):", "  File \"resolvers.py\", line 1, in resolve", "RecursionError: maximum recursion depth exceeded"}},
			false, false, []string{"status 2", "RecursionError"}},
		{"conflict", driverResult{Exit: 1,
			Errors: []string{"ERROR: Cannot install a==1 and b==1 because these package versions have conflicting dependencies.", "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/#dealing-with-dependency-conflicts"}},
			false, true, []string{"Cannot install a==1 and b==1", "Loosen the version constraints"}},
		{"index down", driverResult{Exit: 1,
			Errors:        []string{"ERROR: Could not find a version that satisfies the requirement pkg-a>=0 (from versions: none)"},
			FetchFailures: []string{"Could not fetch URL http://pypi.test/simple/pkg-a/: connection error: HTTPConnectionPool(host='pypi.test', port=80): Max retries exceeded - skipping"}},
			false, false, []string{"could not read the package index", "connection error"}},
		{"download timed out", driverResult{Exit: 2, Errors: []string{"ERROR: Exception:"},
			Tail: []string{"Traceback (most recent call last):", "pip._vendor.urllib3.exceptions.ReadTimeoutError: HTTPConnectionPool(host='pypi.test', port=80): Read timed out."}},
			false, false, []string{"could not read the package index", "Read timed out"}},
		{"disk full", driverResult{Exit: 1,
			Errors: []string{"ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device"}},
			false, false, []string{"status 1", "No space left on device", "ran out of disk space"}},
		{"disk full in a traceback", driverResult{Exit: 2, Errors: []string{"ERROR: Exception:"},
			Tail: []string{"Traceback (most recent call last):", "  File \"shutil.py\", line 1, in copy", "OSError: [Errno 28] No space left on device"}},
			false, false, []string{"status 2", "OSError: [Errno 28] No space left on device", "ran out of disk space"}},
		{"a download cut short", driverResult{Exit: 1,
			Errors: []string{"ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have updated the package versions, please update the hashes. Otherwise, examine the package contents carefully; someone may have tampered with them."}},
			false, false, []string{"could not read the package index", "did not match the hash its index gave"}},
		{"no error line", driverResult{Exit: 2, Tail: []string{"Traceback (most recent call last):", "KeyError: 'x'"}},
			false, false, []string{"status 2", "KeyError"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := pipError(&tc.r, tc.allowSource)
			checkInstallError(t, err, tc.unavailable, tc.want)
			if strings.HasPrefix(tc.name, "a disc") && strings.Contains(err.Error(), "pypi.test") {
				t.Errorf("got %q, want the discarded wheel named by its file, not its URL", err)
			}
			// The installer's temporary folders mean nothing to a run.
			for _, tmp := range []string{"pip-unpack", pipTmpName} {
				if strings.Contains(err.Error(), tmp) {
					t.Errorf("got %q, want no temporary path (%s)", err, tmp)
				}
			}
			var ie *IndexError
			if got, want := errors.As(err, &ie), tc.name == "index down" || tc.name == "download timed out" || tc.name == "a download cut short"; got != want {
				t.Errorf("got IndexError %v (%v), want %v", got, err, want)
			}
		})
	}
}

// TestNpmError holds npm 11's own wording of each failure.
func TestNpmError(t *testing.T) {
	for _, tc := range []struct {
		name        string
		r           driverResult
		unavailable bool
		want        []string
	}{
		{"unknown package", driverResult{Exit: 1, Errors: []string{
			"npm error code E404",
			"npm error 404 Not Found - GET http://npm.test/nosuch - Not found",
			"npm error 404",
			"npm error 404  'nosuch@^1.0.0' is not in this registry.",
			"npm error 404",
			"npm error 404 Note that you can also install from a",
			"npm error 404 tarball, folder, http url, or git url.",
			"npm error A complete log of this run can be found in: /sandbox/.npm/_logs/x-debug-0.log",
		}}, true, []string{"'nosuch@^1.0.0' is not in this registry.", "Check the package's name"}},
		{"unknown package, npm 11", driverResult{Exit: 1, Errors: []string{
			"npm error code E404",
			"npm error 404 Not Found - GET http://npm.test/nosuch - Not found",
			"npm error 404",
			"npm error 404  The requested resource 'nosuch@^1.0.0' could not be found or you do not have permission to access it.",
			"npm error 404",
		}}, true, []string{"The requested resource 'nosuch@^1.0.0' could not be found", "Check the package's name"}},
		{"no such version", driverResult{Exit: 1, Errors: []string{
			"npm error code ETARGET",
			"npm error notarget No matching version found for app@^9.0.0.",
			"npm error notarget In most cases you or one of your dependencies are requesting",
			"npm error notarget a package version that doesn't exist.",
		}}, true, []string{"No matching version found for app@^9.0.0.", "Check the version constraint, or leave it open with app@*."}},
		{"conflict", driverResult{Exit: 1, Errors: []string{
			"npm error code ERESOLVE",
			"npm error ERESOLVE unable to resolve dependency tree",
			"npm error Found: react@17.0.2",
			"npm error Could not resolve dependency:",
			"npm error peer react@\"^18\" from ui@1.0.0",
		}}, true, []string{"unable to resolve dependency tree", "Found: react@17.0.2", "Loosen"}},
		{"registry down", driverResult{Exit: 1, Errors: []string{
			"npm error code ECONNREFUSED",
			"npm error syscall connect",
			"npm error errno ECONNREFUSED",
			"npm error FetchError: request to http://npm.test/app failed, reason: connect ECONNREFUSED 127.0.0.1:80",
			"npm error A complete log of this run can be found in: /sandbox/.npm/_logs/x-debug-0.log",
		}}, false, []string{"could not read the registry", "code ECONNREFUSED", "request to http://npm.test/app failed"}},
		{"registry answers 503", driverResult{Exit: 1, Errors: []string{
			"npm error code E503",
			"npm error 503 Service Unavailable - GET http://npm.test/app",
		}}, false, []string{"could not read the registry", "code E503"}},
		// A dependency from outside the registries (the installer reaches
		// them only) is the request's fault: a git repository, whose
		// failure npm reports with git's status as its code, or a tarball
		// URL elsewhere, which the egress proxy refuses with a 403.
		{"git dependency", driverResult{Exit: 128, Errors: []string{
			"npm error code 128",
			"npm error An unknown git error occurred",
			"npm error command git --no-replace-objects ls-remote https://example.test/x.git",
			"npm error git: 'remote-https' is not a git command. See 'git --help'.",
		}}, true, []string{"a dependency comes from git (https://example.test/x.git)", "registries only"}},
		{"git dependency over ssh", driverResult{Exit: 128, Errors: []string{
			"npm error code 128",
			"npm error An unknown git error occurred",
			"npm error command git --no-replace-objects ls-remote ssh://git@example.test/someone/x.git",
			"npm error ssh: Could not resolve hostname example.test: Name or service not known",
		}}, true, []string{"(ssh://git@example.test/someone/x.git)"}},
		{"tarball outside the registries", driverResult{Exit: 1, Errors: []string{
			"npm error code E403",
			"npm error 403 403 Forbidden - GET https://example.test/x.tgz",
			"npm error 403 In most cases, you or one of your dependencies are requesting",
		}}, true, []string{"403 Forbidden - GET https://example.test/x.tgz: a dependency's tarball is outside the configured registries"}},
		// A registry's own 403 (a token, an allow-list, a firewall) is not
		// the request's fault (the review of the change above).
		{"registry refuses", driverResult{Exit: 1, Errors: []string{
			"npm error code E403",
			"npm error 403 403 Forbidden - GET http://NPM.test./app",
		}}, false, []string{"refused by the registry (npm's code E403)", "403 Forbidden - GET http://NPM.test./app"}},
		{"disk full", driverResult{Exit: 1, Errors: []string{
			"npm error code ENOSPC",
			"npm error nospc ENOSPC: no space left on device, write",
		}}, false, []string{`code "ENOSPC"`, "no space left"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A registry URL the hosts' parse refuses drops no other.
			err := npmError(&tc.r, []string{"ftp://bad.test/", "http://npm.test/"})
			checkInstallError(t, err, tc.unavailable, tc.want)
			// The registry's own failures, and only they, are IndexErrors.
			var ie *IndexError
			if got, want := errors.As(err, &ie), strings.HasPrefix(tc.name, "registry"); got != want {
				t.Errorf("got IndexError %v (%v), want %v", got, err, want)
			}
		})
	}
}

func checkInstallError(t *testing.T, err error, unavailable bool, want []string) {
	t.Helper()
	if err == nil {
		t.Fatal("got no error, want one")
	}
	var uerr *UnavailableError
	if got := errors.As(err, &uerr); got != unavailable {
		t.Fatalf("got unavailable %v (%v), want %v", got, err, unavailable)
	}
	if unavailable && !errors.Is(err, ErrUnavailable) {
		t.Errorf("got errors.Is(ErrUnavailable) false for %v", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("got %q, want it to hold %q", err, w)
		}
	}
	if len(err.Error()) > maxMessage+200 {
		t.Errorf("got a message of %d bytes, want it short", len(err.Error()))
	}
}

func TestLineSplitter(t *testing.T) {
	var got []string
	s := newLineSplitter(func(l string) { got = append(got, l) }, 3)
	// A registry's text with a terminal's sequences (the package audit's
	// deprecation notice) is sent without them.
	for _, chunk := range []string{"Coll", "ecting a\nCollecting \x1b[2J\x1b[31mb\x1b]0;title\x07\x00\n\nDown", "loading\tb\r\nInstall", "ing\nmore\nand more"} {
		s.write(chunk)
	}
	s.flush()
	want := []string{"Collecting a", "Collecting b", "Downloading b", "(more installer output not shown)"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestInstallOptions(t *testing.T) {
	for _, tc := range []struct {
		name        string
		allowSource bool
		lang        string
		options     []string
		wantErr     bool
	}{
		{"wheels only", false, "python", nil, false},
		{"source builds", true, "python", []string{OptionSourceBuilds}, false},
		{"source builds not said", true, "python", nil, true},
		{"source builds not allowed", false, "python", []string{OptionSourceBuilds}, true},
		{"npm has none", true, "javascript", nil, false},
		{"unknown option", false, "javascript", []string{"fast"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran := false
			in, err := NewInstaller(InstallerConfig{
				Run: func(context.Context, jail.Spec) (*jail.Result, error) {
					ran = true
					return &jail.Result{End: jail.EndCompleted, Stdout: resultMarker + `{"exit":0}` + "\n"}, nil
				},
				Registries:        map[string][]string{"python": {"https://pypi.test/simple/"}, "javascript": {"https://npm.test/"}},
				AllowSourceBuilds: tc.allowSource,
			})
			if err != nil {
				t.Fatal(err)
			}
			req := "pkg-a>=1"
			if tc.lang == "javascript" {
				req = "app@^1"
			}
			set := Set{Language: tc.lang, Requests: mustRequests(t, tc.lang, req), Options: tc.options}
			_, err = in.Install(context.Background(), set, t.TempDir(), nil)
			if gotErr := err != nil; gotErr != tc.wantErr || ran == tc.wantErr {
				t.Fatalf("got error %v and ran %v, want error %v", err, ran, tc.wantErr)
			}
		})
	}
}

// TestInstallSpec checks the jail spec Install asks for and how it reads the
// jail's ends, with a Run of the test's.
func TestInstallSpec(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lang     string
		reqs     []string
		res      jail.Result
		wantMnt  string
		wantErr  string // "" for success
		progress []string
	}{
		{"python ok", "python", []string{"pkg-a>=1"}, jail.Result{End: jail.EndCompleted,
			Stdout: resultMarker + `{"runtime":"3.11.2","exit":0,"packages":[{"name":"pkg_a","version":"1.0","hash":"sha256=ab"}]}` + "\n",
			Stderr: "Collecting pkg-a>=1\nSuccessfully installed pkg-a-1.0\n"},
			pyStaging, "", []string{"Collecting pkg-a>=1", "Successfully installed pkg-a-1.0"}},
		{"npm ok", "javascript", []string{"app@^1"}, jail.Result{End: jail.EndCompleted,
			Stdout: resultMarker + `{"exit":0,"packages":[{"name":"app","version":"1.0.0","path":"node_modules/app"}]}` + "\n"},
			npmStaging, "", nil},
		{"timeout", "python", []string{"pkg-a>=1"}, jail.Result{End: jail.EndTimeout, Stderr: "Collecting pkg-a>=1\n"},
			pyStaging, "ran past its time limit of 2m0s", nil},
		{"oom", "javascript", []string{"app@^1"}, jail.Result{End: jail.EndMemory},
			npmStaging, "ran out of its 512 MiB", nil},
		// The host's shortage, not the set's: not remembered as unavailable.
		{"oom for the host", "javascript", []string{"app@^1"}, jail.Result{End: jail.EndMemory, ShortElsewhere: true},
			npmStaging, "killed for memory short on the host (it was under its 512 MiB): try again", nil},
		{"stopped", "javascript", []string{"app@^1"}, jail.Result{End: jail.EndStopped, Message: "the run was stopped"},
			npmStaging, "was stopped", nil},
		{"another runtime", "python", []string{"pkg-a>=1"}, jail.Result{End: jail.EndCompleted,
			Stdout: resultMarker + `{"runtime":"3.12.1","exit":0,"packages":[{"name":"pkg_a","version":"1.0"}]}` + "\n"},
			pyStaging, "ran on python 3.12.1, but the set is for 3.11.2", nil},
		{"crash", "python", []string{"pkg-a>=1"}, jail.Result{End: jail.EndCompleted, Stderr: "Traceback (most recent call last):\nMemoryError\n"},
			pyStaging, "ended without its result: Traceback (most recent call last): | MemoryError", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var spec jail.Spec
			in, err := NewInstaller(InstallerConfig{
				Run: func(_ context.Context, s jail.Spec) (*jail.Result, error) {
					spec = s
					for _, l := range strings.SplitAfter(tc.res.Stderr, "\n") {
						s.OnStderr(l)
					}
					return &tc.res, nil
				},
				Registries: map[string][]string{"python": {"http://pypi.test/simple/"}, "javascript": {"http://npm.test/"}},
				Timeout:    2 * time.Minute,
				MemoryMiB:  512,
			})
			if err != nil {
				t.Fatal(err)
			}
			var progress []string
			set := Set{Language: tc.lang, Requests: mustRequests(t, tc.lang, tc.reqs...)}
			if tc.lang == "python" {
				set.Runtime = "3.11.2"
			}
			got, err := in.Install(context.Background(), set, "/var/lib/brig/staging/x", func(l string) { progress = append(progress, l) })
			wantMounts := []jail.Mount{{Source: "/var/lib/brig/staging/x", Target: tc.wantMnt, Writable: true}}
			if !reflect.DeepEqual(spec.Mounts, wantMounts) || spec.Timeout != 2*time.Minute || spec.MemoryBytes != 512<<20 || string(spec.Language) != tc.lang {
				t.Errorf("got spec mounts %+v timeout %s memory %d language %s, want %+v 2m 512 MiB %s", spec.Mounts, spec.Timeout, spec.MemoryBytes, spec.Language, wantMounts, tc.lang)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tc.wantErr)
				}
				// An installer out of memory is the set's own size: the
				// request's to change, not a failure to try again.
				if want := tc.name == "oom"; errors.Is(err, ErrUnavailable) != want {
					t.Errorf("got errors.Is(err, ErrUnavailable) %v, want %v", !want, want)
				}
				return
			}
			if err != nil || len(got) != 1 || got[0].Request != tc.reqs[0] {
				t.Fatalf("got %+v, %v, want one package for %q", got, err, tc.reqs[0])
			}
			if !reflect.DeepEqual(progress, tc.progress) {
				t.Errorf("got progress %q, want %q", progress, tc.progress)
			}
		})
	}
}

// TestNpmRegistryName: a registry's tarball URL names the package as the
// registry serves it, behind any path of the registry's own; anything else
// names none.
func TestNpmRegistryName(t *testing.T) {
	for _, tc := range []struct {
		resolved, want string
		ok             bool
	}{
		{"http://reg.test/lodash/-/lodash-4.17.21.tgz", "lodash", true},
		{"https://reg.test/npm/registry/lodash/-/lodash-4.17.21.tgz", "lodash", true},
		{"http://reg.test/@brig/scoped/-/scoped-1.0.0.tgz", "@brig/scoped", true},
		{"http://reg.test/@brig%2fscoped/-/scoped-1.0.0.tgz", "@brig/scoped", true},
		// A proxy's layout, the scope again in the file's name (the last review's).
		{"https://reg.test/api/npm/npm/@brig/scoped/-/@brig/scoped-1.0.0-beta.1.tgz", "@brig/scoped", true},
		{"https://reg.test/api/npm/npm/@brig/scoped/-/@other/scoped-1.0.0.tgz", "", false},
		{"http://reg.test/evil/-/okjs-1.0.0.tgz", "", false}, // a file of another name
		{"http://reg.test/files/x.tgz", "", false},
		{"git+https://git.test/x.git#0123abc", "", false},
		{"file:../x", "", false},
		{"", "", false},
	} {
		if got, ok := npmRegistryName(tc.resolved); got != tc.want || ok != tc.ok {
			t.Errorf("npmRegistryName(%q) = %q, %v; want %q, %v", tc.resolved, got, ok, tc.want, tc.ok)
		}
	}
}

// TestDriverResultPrintable: the tool's lines are made printable as they are
// read, as the progress lines are: a build's colours had reached a Result's
// message (the packages probe).
func TestDriverResultPrintable(t *testing.T) {
	r, err := parseDriverResult(resultMarker + `{"exit":1,"errors":["ERROR: \u001b[31mred\u001b[0m"],"tail":["end\u001b[0m\u0007"],"warnings":["WARNING: \u009bx"]}` + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if r.Errors[0] != "ERROR: red" || r.Tail[0] != "end" || r.Warnings[0] != "WARNING: x" {
		t.Errorf("got %q %q %q, want the lines without their control sequences", r.Errors, r.Tail, r.Warnings)
	}
}
