package registrytest

import (
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
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

func TestSemverLess(t *testing.T) {
	tests := []struct {
		name, a, b string
		want       bool
	}{
		{name: "patch", a: "1.0.1", b: "1.0.2", want: true},
		{name: "numeric not lexical", a: "1.2.0", b: "1.10.0", want: true},
		{name: "major beats minor", a: "2.0.0", b: "1.9.9", want: false},
		{name: "prerelease before release", a: "1.0.0-beta", b: "1.0.0", want: true},
		{name: "release after prerelease", a: "1.0.0", b: "1.0.0-beta", want: false},
		{name: "equal", a: "1.0.0", b: "1.0.0+build", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := semverLess(tt.a, tt.b); got != tt.want {
				t.Errorf("got semverLess(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
			}
		})
	}
}

// TestNpmPackument checks, without npm, the packument of a scoped package under both
// spellings npm uses, and that its tarball is where it says with the digest it says.
func TestNpmPackument(t *testing.T) {
	r := NewNpmRegistry(t,
		NpmPackage{Name: "@brig/thing", Version: "1.0.0", Files: map[string]string{"index.js": "module.exports = 1\n"}},
		NpmPackage{Name: "@brig/thing", Version: "1.10.0", Files: map[string]string{"index.js": "module.exports = 2\n"}},
		NpmPackage{Name: "@brig/thing", Version: "2.0.0-rc.1", Files: map[string]string{"index.js": "module.exports = 3\n"}},
	)
	if ip := hostOf(t, r.Host()); !ip.IsLoopback() {
		t.Errorf("got the registry on %s, want loopback", ip)
	}
	for _, path := range []string{"@brig%2fthing", "@brig%2Fthing", "@brig/thing"} {
		t.Run(path, func(t *testing.T) {
			var doc struct {
				Name     string            `json:"name"`
				DistTags map[string]string `json:"dist-tags"`
				Versions map[string]npmVersion
			}
			getJSON(t, r.URL()+path, &doc)
			if doc.Name != "@brig/thing" || doc.DistTags["latest"] != "1.10.0" || len(doc.Versions) != 3 {
				t.Fatalf("got name %q, latest %q and %d versions, want @brig/thing, 1.10.0 and 3", doc.Name, doc.DistTags["latest"], len(doc.Versions))
			}
			dist := doc.Versions["1.10.0"].Dist
			if want := r.URL() + "@brig/thing/-/thing-1.10.0.tgz"; dist.Tarball != want {
				t.Errorf("got tarball %q, want %q", dist.Tarball, want)
			}
			resp, err := http.Get(dist.Tarball)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			data, _ := io.ReadAll(resp.Body)
			sum := sha512.Sum512(data)
			if got := "sha512-" + base64.StdEncoding.EncodeToString(sum[:]); got != dist.Integrity {
				t.Errorf("got the tarball's integrity %q, want %q as the packument says", got, dist.Integrity)
			}
		})
	}
	var missing map[string]any
	if code := getJSON(t, r.URL()+"absent", &missing); code != http.StatusNotFound {
		t.Errorf("got status %d for an absent package, want 404", code)
	}
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("decoding %s: %v", url, err)
	}
	return resp.StatusCode
}

// requireNpm skips t unless the system npm and node are there.
func requireNpm(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"/usr/bin/npm", "/usr/bin/node"} {
		_, err := os.Stat(bin)
		testutil.Require(t, err == nil, fmt.Sprintf("needs %s: %v", bin, err))
	}
}

// npm runs the real npm with registry as its only registry: an empty user and global
// configuration, a cache in a temporary directory, no audit, no fund, no update
// check, and every other host sent to trap. It returns npm's output.
func npm(t *testing.T, registry string, trap *trapProxy, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	// npm refuses one file as both its user and its global configuration.
	user, global := filepath.Join(home, "user-npmrc"), filepath.Join(home, "global-npmrc")
	for _, f := range []string{user, global} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args = append(args, "--registry", registry, "--no-audit", "--no-fund", "--no-update-notifier")
	cmd := exec.Command("/usr/bin/npm", args...)
	cmd.Env = append([]string{
		"PATH=/usr/bin:/bin", "HOME=" + home,
		"npm_config_userconfig=" + user, "npm_config_globalconfig=" + global,
		"npm_config_cache=" + filepath.Join(home, "cache"),
		"npm_config_update_notifier=false",
	}, trap.env()...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// npmInstall installs specs from r into a new prefix and returns it. When
// ignoreScripts is false the packages' install scripts run.
func npmInstall(t *testing.T, r *NpmRegistry, ignoreScripts bool, specs ...string) (string, string, error) {
	t.Helper()
	trap := newTrapProxy(t)
	t.Cleanup(func() { trap.assertUnused(t) })
	prefix := t.TempDir()
	args := []string{"install", "--prefix", prefix}
	if ignoreScripts {
		args = append(args, "--ignore-scripts")
	}
	out, err := npm(t, r.URL(), trap, append(args, specs...)...)
	return prefix, out, err
}

// node runs a script with dir as its working directory, so that bare imports resolve
// from dir/node_modules, and returns its trimmed output.
func node(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("/usr/bin/node", args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %q: %v\n%s%s", args, err, out, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func installedVersion(t *testing.T, prefix, name string) string {
	t.Helper()
	var pj packageJSON
	b, err := os.ReadFile(filepath.Join(prefix, "node_modules", name, "package.json"))
	if err != nil {
		t.Fatalf("reading the installed %s: %v", name, err)
	}
	if err := json.Unmarshal(b, &pj); err != nil {
		t.Fatalf("decoding the installed %s: %v", name, err)
	}
	return pj.Version
}

func TestNpmInstall(t *testing.T) {
	requireNpm(t)
	cjs := func(name, version string, deps map[string]string) NpmPackage {
		return NpmPackage{Name: name, Version: version, Dependencies: deps,
			Files: map[string]string{"index.js": fmt.Sprintf("module.exports = %q\n", name+"@"+version)}}
	}
	r := NewNpmRegistry(t,
		cjs("multi", "1.0.0", nil), cjs("multi", "1.1.0", nil), cjs("multi", "1.1.5", nil),
		cjs("multi", "1.2.0", nil), cjs("multi", "2.0.0", nil),
		cjs("app", "1.0.0", map[string]string{"multi": "~1.1.0"}),
		cjs("@brig/scoped", "1.0.0", map[string]string{"multi": "1.0.0"}),
		NpmPackage{Name: "esm", Version: "1.0.0", Type: "module",
			Files: map[string]string{"index.js": "export default 'esm default'\n"}},
	)
	tests := []struct {
		name     string
		spec     string
		versions map[string]string // installed package to its version
		script   []string          // node arguments printing what was imported
		want     string
	}{
		{
			name:     "highest version in a caret range",
			spec:     "multi@^1.0.0",
			versions: map[string]string{"multi": "1.2.0"},
			script:   []string{"-e", "console.log(require('multi'))"},
			want:     "multi@1.2.0",
		},
		{
			name:     "exact version below latest",
			spec:     "multi@1.0.0",
			versions: map[string]string{"multi": "1.0.0"},
			script:   []string{"-e", "console.log(require('multi'))"},
			want:     "multi@1.0.0",
		},
		{
			name:     "latest",
			spec:     "multi",
			versions: map[string]string{"multi": "2.0.0"},
			script:   []string{"-e", "console.log(require('multi'))"},
			want:     "multi@2.0.0",
		},
		{
			name:     "dependency in a tilde range",
			spec:     "app",
			versions: map[string]string{"app": "1.0.0", "multi": "1.1.5"},
			script:   []string{"-e", "console.log(require('app'), require('multi'))"},
			want:     "app@1.0.0 multi@1.1.5",
		},
		{
			name:     "scoped package",
			spec:     "@brig/scoped@^1",
			versions: map[string]string{"@brig/scoped": "1.0.0", "multi": "1.0.0"},
			script:   []string{"-e", "console.log(require('@brig/scoped'))"},
			want:     "@brig/scoped@1.0.0",
		},
		{
			name:     "ESM default import",
			spec:     "esm@1.0.0",
			versions: map[string]string{"esm": "1.0.0"},
			script:   []string{"--input-type=module", "-e", "import x from 'esm'; console.log(x)"},
			want:     "esm default",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix, out, err := npmInstall(t, r, true, tt.spec)
			if err != nil {
				t.Fatalf("npm install %s: %v\n%s", tt.spec, err, out)
			}
			for name, want := range tt.versions {
				if got := installedVersion(t, prefix, name); got != want {
					t.Errorf("got %s %s installed, want %s", name, got, want)
				}
			}
			if got := node(t, prefix, tt.script...); got != tt.want {
				t.Errorf("got %q imported, want %q", got, tt.want)
			}
		})
	}
	// Every tarball came from the stand-in: the scoped one under its scope.
	if want := "/@brig/scoped/-/scoped-1.0.0.tgz"; !slices.Contains(r.Requests(), want) {
		t.Errorf("got requests %q, want %s among them", r.Requests(), want)
	}
}

func TestNpmMissingVersionFails(t *testing.T) {
	requireNpm(t)
	r := NewNpmRegistry(t, NpmPackage{Name: "only", Version: "1.0.0", Files: map[string]string{"index.js": ""}})
	_, out, err := npmInstall(t, r, true, "only@^2")
	if err == nil {
		t.Fatalf("got npm install only@^2 succeeding, want it to fail\n%s", out)
	}
	if !strings.Contains(out, "ETARGET") {
		t.Errorf("got npm output %q, want ETARGET (no matching version)", out)
	}
	if got := fetched(r.Requests(), "/only/-/"); len(got) > 0 {
		t.Errorf("got tarballs fetched %q, want none", got)
	}
}

// TestNpmInstallScript proves that --ignore-scripts keeps a postinstall script from
// running, and, as the control, that the same script runs without it.
func TestNpmInstallScript(t *testing.T) {
	requireNpm(t)
	marker := filepath.Join(t.TempDir(), "postinstall-ran")
	r := NewNpmRegistry(t, NpmPackage{Name: "scripted", Version: "1.0.0",
		Files:   map[string]string{"index.js": "module.exports = 'scripted'\n"},
		Scripts: map[string]string{"postinstall": fmt.Sprintf("node -e \"require('fs').writeFileSync('%s', 'x')\"", marker)},
	})
	tests := []struct {
		name          string
		ignoreScripts bool
		wantMarker    bool
	}{
		{name: "ignored", ignoreScripts: true, wantMarker: false},
		{name: "control: run", ignoreScripts: false, wantMarker: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix, out, err := npmInstall(t, r, tt.ignoreScripts, "scripted@1.0.0")
			if err != nil {
				t.Fatalf("npm install scripted: %v\n%s", err, out)
			}
			if got := node(t, prefix, "-e", "console.log(require('scripted'))"); got != "scripted" {
				t.Errorf("got %q imported, want %q", got, "scripted")
			}
			_, err = os.Stat(marker)
			if got := err == nil; got != tt.wantMarker {
				t.Errorf("got the marker written %v (stat: %v), want %v", got, err, tt.wantMarker)
			}
		})
	}
}
