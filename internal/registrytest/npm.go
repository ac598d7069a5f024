package registrytest

import (
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// NpmPackage is one version of an npm package as the registry serves it.
type NpmPackage struct {
	// Name is the package name, scoped ("@scope/name") or not. Several NpmPackages
	// may share a name with different versions, so that a range picks among them.
	Name string
	// Version is a semver version such as "1.2.3".
	Version string
	// Dependencies are package.json's dependencies: name to range.
	Dependencies map[string]string
	// OptionalDependencies are package.json's optionalDependencies, and OS
	// its os: the platforms it installs on, as a per-platform build's
	// package says ("linux"), which npm skips elsewhere.
	OptionalDependencies map[string]string
	OS                   []string
	// Bin is package.json's bin: a command's name to its file in Files.
	Bin map[string]string
	// Files are the package's files by path inside the package, such as
	// "index.js": "module.exports = 1\n". package.json is generated from the other
	// fields, with "main": "index.js" when there is one, and may not be given.
	Files map[string]string
	// Scripts are package.json's scripts, such as {"postinstall": "..."}.
	Scripts map[string]string
	// Type is package.json's type: "" (CommonJS) or "module" (ESM).
	Type string
}

// NpmRegistry is an npm registry on loopback serving packuments at /<name> (a scoped
// name as /@scope%2fname or /@scope/name) and tarballs at
// /<name>/-/<basename>-<version>.tgz.
type NpmRegistry struct {
	server
	packuments map[string]map[string]npmVersion // by name, then version
	tarballs   map[string][]byte                // by URL path
}

// npmVersion is one version of a packument, the fields npm reads to resolve and fetch
// it. Tarball is a path here; the served packument makes it absolute.
type npmVersion struct {
	Name             string            `json:"name"`
	Version          string            `json:"version"`
	Type             string            `json:"type,omitempty"`
	Dependencies     map[string]string `json:"dependencies,omitempty"`
	Optional         map[string]string `json:"optionalDependencies,omitempty"`
	OS               []string          `json:"os,omitempty"`
	Bin              map[string]string `json:"bin,omitempty"`
	Scripts          map[string]string `json:"scripts,omitempty"`
	HasInstallScript bool              `json:"hasInstallScript,omitempty"`
	Dist             npmDist           `json:"dist"`
}

type npmDist struct {
	Tarball   string `json:"tarball"`
	Integrity string `json:"integrity"` // "sha512-" and the standard base64 digest
	Shasum    string `json:"shasum"`    // sha1, hex
}

// packageJSON is the generated package.json of a tarball.
type packageJSON struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Type    string `json:"type,omitempty"`
	// Main is set because Node deprecates finding an ES module's entry point
	// without it (DEP0151).
	Main         string            `json:"main,omitempty"`
	Dependencies map[string]string `json:"dependencies,omitempty"`
	Optional     map[string]string `json:"optionalDependencies,omitempty"`
	OS           []string          `json:"os,omitempty"`
	Bin          map[string]string `json:"bin,omitempty"`
	Scripts      map[string]string `json:"scripts,omitempty"`
}

// NewNpmRegistry builds the tarballs of pkgs and serves them on 127.0.0.1 until t
// ends. It fails t on a package without a name or version, one given twice, or one
// whose Files hold a package.json.
func NewNpmRegistry(t testing.TB, pkgs ...NpmPackage) *NpmRegistry {
	t.Helper()
	r := &NpmRegistry{packuments: map[string]map[string]npmVersion{}, tarballs: map[string][]byte{}}
	for _, p := range pkgs {
		if p.Name == "" || p.Version == "" {
			t.Fatalf("registrytest: an NpmPackage needs a name and a version, got %q %q", p.Name, p.Version)
		}
		if _, ok := p.Files["package.json"]; ok {
			t.Fatalf("registrytest: %s %s: package.json is generated, not given in Files", p.Name, p.Version)
		}
		if _, dup := r.packuments[p.Name][p.Version]; dup {
			t.Fatalf("registrytest: %s %s given twice", p.Name, p.Version)
		}
		main := ""
		if _, ok := p.Files["index.js"]; ok {
			main = "index.js"
		}
		pj, err := json.MarshalIndent(packageJSON{Name: p.Name, Version: p.Version, Type: p.Type, Main: main, Dependencies: p.Dependencies, Optional: p.OptionalDependencies, OS: p.OS, Bin: p.Bin, Scripts: p.Scripts}, "", "  ")
		if err != nil {
			t.Fatalf("registrytest: encoding the package.json of %s %s: %v", p.Name, p.Version, err)
		}
		entries := map[string]string{"package.json": string(pj)}
		for path, content := range p.Files {
			entries[path] = content
		}
		// npm packs every file under "package/" whatever the package's name.
		data, err := targz("package/", entries)
		if err != nil {
			t.Fatalf("registrytest: building the tarball of %s %s: %v", p.Name, p.Version, err)
		}
		basename := p.Name[strings.LastIndex(p.Name, "/")+1:]
		tarPath := "/" + p.Name + "/-/" + basename + "-" + p.Version + ".tgz"
		r.tarballs[tarPath] = data
		s512 := sha512.Sum512(data)
		s1 := sha1.Sum(data)
		if r.packuments[p.Name] == nil {
			r.packuments[p.Name] = map[string]npmVersion{}
		}
		r.packuments[p.Name][p.Version] = npmVersion{
			Name: p.Name, Version: p.Version, Type: p.Type,
			Dependencies: p.Dependencies, Optional: p.OptionalDependencies, OS: p.OS, Bin: p.Bin, Scripts: p.Scripts,
			// The registry sets this so that npm knows, from the abbreviated
			// packument alone, that installing would run a script.
			HasInstallScript: p.Scripts["preinstall"] != "" || p.Scripts["install"] != "" || p.Scripts["postinstall"] != "",
			Dist: npmDist{
				Tarball:   tarPath,
				Integrity: "sha512-" + base64.StdEncoding.EncodeToString(s512[:]),
				Shasum:    hex.EncodeToString(s1[:]),
			},
		}
	}
	r.start(t, http.HandlerFunc(r.serve))
	return r
}

// URL is the registry URL for npm's --registry: "http://127.0.0.1:PORT/".
func (r *NpmRegistry) URL() string { return r.srv.URL + "/" }

// serve answers packuments and tarballs. The server decodes "%2f" in the path, so a
// scoped name arrives as "/@scope/name" whichever way npm spelled it.
func (r *NpmRegistry) serve(w http.ResponseWriter, req *http.Request) {
	p := req.URL.Path
	if strings.Contains(p, "/-/") {
		data, ok := r.tarballs[p]
		if !ok {
			http.NotFound(w, req)
			return
		}
		writeBody(w, req, "application/octet-stream", data)
		return
	}
	name := strings.TrimPrefix(p, "/")
	versions, ok := r.packuments[name]
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintln(w, `{"error":"Not found"}`)
		return
	}
	body, err := json.Marshal(packument(name, versions, baseURL(req)))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeBody(w, req, "application/json", body)
}

// packument is the document npm fetches for name: every version, with tarball URLs
// under base, and dist-tags.latest the highest version that is not a prerelease (or
// the highest of all if every one is), as the real registry's publish would leave it.
func packument(name string, versions map[string]npmVersion, base string) map[string]any {
	vs := map[string]npmVersion{}
	order := make([]string, 0, len(versions))
	for v, nv := range versions {
		nv.Dist.Tarball = base + nv.Dist.Tarball
		vs[v] = nv
		order = append(order, v)
	}
	sort.Slice(order, func(i, j int) bool { return semverLess(order[i], order[j]) })
	latest := order[len(order)-1]
	for i := len(order) - 1; i >= 0; i-- {
		if !strings.Contains(order[i], "-") {
			latest = order[i]
			break
		}
	}
	return map[string]any{
		"_id":       name,
		"name":      name,
		"dist-tags": map[string]string{"latest": latest},
		"versions":  vs,
	}
}

// semverLess orders versions by their numeric major, minor and patch, then a
// prerelease before its release, then the prerelease text. It is hand-written because
// picking dist-tags.latest is its only use; npm itself does the range matching.
func semverLess(a, b string) bool {
	an, apre := semverParts(a)
	bn, bpre := semverParts(b)
	for i := range an {
		if an[i] != bn[i] {
			return an[i] < bn[i]
		}
	}
	if (apre == "") != (bpre == "") {
		return apre != ""
	}
	return apre < bpre
}

func semverParts(v string) ([3]int, string) {
	v, _, _ = strings.Cut(v, "+")
	core, pre, _ := strings.Cut(v, "-")
	var n [3]int
	for i, f := range strings.SplitN(core, ".", 3) {
		n[i], _ = strconv.Atoi(f)
	}
	return n, pre
}
