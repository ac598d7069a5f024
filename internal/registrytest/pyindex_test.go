package registrytest

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/brig-sandbox/brig/internal/testutil"
)

func TestNormalizePyName(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{name: "already normal", in: "pkg-a", want: "pkg-a"},
		{name: "underscore and case", in: "Pkg_A", want: "pkg-a"},
		{name: "runs of separators", in: "a._-b", want: "a-b"},
		{name: "dots", in: "zope.interface", want: "zope-interface"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NormalizePyName(tt.in); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestWheelRecord checks, without pip, that the RECORD of a built wheel lists every
// other file with the digest and size pip verifies.
func TestWheelRecord(t *testing.T) {
	name, data, err := buildWheel(PyPackage{Name: "Pkg_A", Version: "1.0", Requires: []string{"dep-b>=1"},
		Files: map[string]string{"pkg_a/__init__.py": "VALUE = 1\n"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "pkg_a-1.0-py3-none-any.whl"; name != want {
		t.Errorf("got file name %q, want %q", name, want)
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("reading the wheel: %v", err)
	}
	files := map[string]string{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		files[f.Name] = string(b)
	}
	record, ok := files["pkg_a-1.0.dist-info/RECORD"]
	if !ok {
		t.Fatalf("got files %v, want a RECORD among them", files)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(record), "\n") {
		f := strings.Split(line, ",")
		listed[f[0]] = true
		if f[0] == "pkg_a-1.0.dist-info/RECORD" {
			continue
		}
		sum := sha256.Sum256([]byte(files[f[0]]))
		want := fmt.Sprintf("%s,sha256=%s,%d", f[0], base64.RawURLEncoding.EncodeToString(sum[:]), len(files[f[0]]))
		if line != want {
			t.Errorf("got RECORD line %q, want %q", line, want)
		}
	}
	for n := range files {
		if !listed[n] {
			t.Errorf("got %s in the wheel but not in RECORD, want every file listed", n)
		}
	}
	if !strings.Contains(files["pkg_a-1.0.dist-info/METADATA"], "\nRequires-Dist: dep-b>=1\n") {
		t.Errorf("got METADATA %q, want a Requires-Dist for dep-b", files["pkg_a-1.0.dist-info/METADATA"])
	}
}

// TestPyIndexPages checks the pages pip reads, and the PEP 503 redirect to a
// project's normal name.
func TestPyIndexPages(t *testing.T) {
	x := NewPyIndex(t,
		PyPackage{Name: "Pkg_A", Version: "1.0", Files: map[string]string{"pkg_a/__init__.py": ""}},
		PyPackage{Name: "Pkg_A", Version: "2.0", RequiresPython: ">=3.8", Files: map[string]string{"pkg_a/__init__.py": ""}},
	)
	if ip := hostOf(t, x.Host()); !ip.IsLoopback() {
		t.Errorf("got the index on %s, want loopback", ip)
	}
	tests := []struct {
		name, path string
		want       []string
	}{
		{name: "root", path: "simple/", want: []string{`href="/simple/pkg-a/"`}},
		{name: "project", path: "simple/pkg-a/", want: []string{"pkg_a-1.0-py3-none-any.whl#sha256=", `pkg_a-2.0-py3-none-any.whl#sha256=`, `data-requires-python="&gt;=3.8"`}},
		{name: "other spelling redirected", path: "simple/Pkg_A/", want: []string{"pkg_a-2.0-py3-none-any.whl"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Get(strings.TrimSuffix(x.URL(), "simple/") + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("got status %d, want 200", resp.StatusCode)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(body), w) {
					t.Errorf("got page %q, want it to hold %q", body, w)
				}
			}
		})
	}
}

// requirePip skips t unless the system pip is there.
func requirePip(t *testing.T) {
	t.Helper()
	err := exec.Command("/usr/bin/python3", "-m", "pip", "--version").Run()
	testutil.Require(t, err == nil, fmt.Sprintf("needs pip (`/usr/bin/python3 -m pip --version`: %v)", err))
}

// pip runs the real pip against x alone: no configuration file, no cache, no version
// check, and every other host sent to a trap proxy. It returns pip's output.
func pip(t *testing.T, x *PyIndex, args ...string) (string, error) {
	t.Helper()
	trap := newTrapProxy(t)
	t.Cleanup(func() { trap.assertUnused(t) })
	return pipVia(t, trap, x.URL(), args...)
}

// pipVia runs pip with index as its index and trap as its proxy for every host but
// 127.0.0.1.
func pipVia(t *testing.T, trap *trapProxy, index string, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command("/usr/bin/python3", append([]string{"-m", "pip"}, args...)...)
	cmd.Env = append([]string{
		"PATH=/usr/bin:/bin", "HOME=" + home,
		"PIP_CONFIG_FILE=/dev/null", "PIP_NO_INPUT=1", "PIP_DISABLE_PIP_VERSION_CHECK=1",
		"PIP_NO_CACHE_DIR=1", "PIP_INDEX_URL=" + index,
	}, trap.env()...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// pipInstall installs reqs from x into a new target directory, wheels only, and
// returns the directory.
func pipInstall(t *testing.T, x *PyIndex, reqs ...string) (string, string, error) {
	t.Helper()
	target := t.TempDir()
	args := append([]string{"install", "--no-cache-dir", "--index-url", x.URL(), "--only-binary=:all:", "--target", target}, reqs...)
	out, err := pip(t, x, args...)
	return target, out, err
}

// python runs code with path on its module path and returns its trimmed output.
func python(t *testing.T, path, code string) string {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", "-c", code)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "PYTHONPATH=" + path}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -c %q: %v\n%s", code, err, out)
	}
	return strings.TrimSpace(string(out))
}

func fetched(reqs []string, prefix string) []string {
	var got []string
	for _, r := range reqs {
		if strings.HasPrefix(r, prefix) {
			got = append(got, r)
		}
	}
	return got
}

func TestPipInstall(t *testing.T) {
	requirePip(t)
	pkgA := func(version string, requires ...string) PyPackage {
		return PyPackage{Name: "pkg-a", Version: version, Requires: requires,
			Files: map[string]string{"pkg_a/__init__.py": "VALUE = '" + version + "'\n"}}
	}
	depB := func(version string) PyPackage {
		return PyPackage{Name: "Dep_B", Version: version,
			Files: map[string]string{"dep_b/__init__.py": "VALUE = '" + version + "'\n"}}
	}
	tests := []struct {
		name    string
		pkgs    []PyPackage
		req     string
		imports string // Python printing what was imported
		want    string
		files   []string // the /files/ paths pip fetched, in any order
	}{
		{
			name:    "pinned version among several",
			pkgs:    []PyPackage{pkgA("1.0"), pkgA("1.1"), pkgA("2.0")},
			req:     "pkg-a==1.1",
			imports: "import pkg_a; print(pkg_a.VALUE)",
			want:    "1.1",
			files:   []string{"/files/pkg_a-1.1-py3-none-any.whl"},
		},
		{
			name:    "constraint picks the highest match",
			pkgs:    []PyPackage{pkgA("1.0"), pkgA("1.1"), pkgA("2.0")},
			req:     "pkg-a<2",
			imports: "import pkg_a; print(pkg_a.VALUE)",
			want:    "1.1",
			files:   []string{"/files/pkg_a-1.1-py3-none-any.whl"},
		},
		{
			name:    "dependency resolved across two packages",
			pkgs:    []PyPackage{pkgA("1.0", "dep-b>=2,<3"), depB("1.0"), depB("2.0"), depB("2.5"), depB("3.0")},
			req:     "pkg-a==1.0",
			imports: "import pkg_a, dep_b; print(pkg_a.VALUE, dep_b.VALUE)",
			want:    "1.0 2.5",
			files:   []string{"/files/pkg_a-1.0-py3-none-any.whl", "/files/dep_b-2.5-py3-none-any.whl"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := NewPyIndex(t, tt.pkgs...)
			target, out, err := pipInstall(t, x, tt.req)
			if err != nil {
				t.Fatalf("pip install %s: %v\n%s", tt.req, err, out)
			}
			if got := python(t, target, tt.imports); got != tt.want {
				t.Errorf("got %q imported, want %q", got, tt.want)
			}
			got := fetched(x.Requests(), "/files/")
			slices.Sort(got)
			slices.Sort(tt.files)
			if !slices.Equal(got, tt.files) {
				t.Errorf("got files fetched %q, want %q", got, tt.files)
			}
		})
	}
}

func TestPipMissingVersionFails(t *testing.T) {
	requirePip(t)
	x := NewPyIndex(t, PyPackage{Name: "pkg-a", Version: "1.0", Files: map[string]string{"pkg_a/__init__.py": ""}})
	target, out, err := pipInstall(t, x, "pkg-a==9.9")
	if err == nil {
		t.Fatalf("got pip install pkg-a==9.9 succeeding, want it to fail\n%s", out)
	}
	if !strings.Contains(out, "No matching distribution found for pkg-a==9.9") {
		t.Errorf("got pip output %q, want it to find no matching distribution", out)
	}
	if !slices.Contains(x.Requests(), "/simple/pkg-a/") {
		t.Errorf("got requests %q, want pip to have read /simple/pkg-a/", x.Requests())
	}
	if got := fetched(x.Requests(), "/files/"); len(got) > 0 {
		t.Errorf("got files fetched %q, want none", got)
	}
	if ents, _ := os.ReadDir(target); len(ents) > 0 {
		t.Errorf("got %d entries in the target, want none", len(ents))
	}
}

// TestPipSdistOnly proves that a project with no wheel is refused under
// --only-binary=:all: without its setup.py running, and, as the control, that the
// same setup.py does run when pip is allowed to prepare the sdist.
func TestPipSdistOnly(t *testing.T) {
	requirePip(t)
	marker := filepath.Join(t.TempDir(), "setup-py-ran")
	x := NewPyIndex(t, PyPackage{Name: "src-only", Version: "1.0", SdistOnly: true, Files: map[string]string{
		"setup.py": fmt.Sprintf("open(%q, 'w').write('ran')\nfrom setuptools import setup\nsetup(name='src-only', version='1.0')\n", marker),
	}})

	_, out, err := pipInstall(t, x, "src-only==1.0")
	if err == nil {
		t.Fatalf("got pip install --only-binary=:all: src-only succeeding, want it to fail\n%s", out)
	}
	if !strings.Contains(out, "No matching distribution found for src-only==1.0") {
		t.Errorf("got pip output %q, want it to find no matching distribution", out)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("got the marker's stat error %v, want it absent: setup.py ran", err)
	}
	if got := fetched(x.Requests(), "/files/"); len(got) > 0 {
		t.Errorf("got files fetched %q, want none", got)
	}

	// The control: the sdist is real, and pip preparing it runs setup.py. Without
	// build isolation pip uses the system's setuptools instead of fetching one.
	if err := exec.Command("/usr/bin/python3", "-c", "import setuptools").Run(); err != nil {
		t.Skipf("the control needs setuptools (`import setuptools`: %v)", err)
	}
	out, err = pip(t, x, "download", "--no-cache-dir", "--no-deps", "--no-build-isolation", "--no-binary=:all:",
		"--index-url", x.URL(), "-d", t.TempDir(), "src-only==1.0")
	if err != nil {
		t.Fatalf("pip download --no-binary=:all: src-only: %v\n%s", err, out)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("got the marker's stat error %v after pip prepared the sdist, want it written", err)
	}
}
