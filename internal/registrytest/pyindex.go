package registrytest

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"html"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// PyPackage is one release of a Python project as the index serves it: a pure-Python
// wheel (py3-none-any), or only an sdist.
type PyPackage struct {
	// Name is the project name as written ("Pkg_A"); the index serves it under its
	// PEP 503 normalised name ("pkg-a"). Several PyPackages may share a name with
	// different versions, so that a constraint picks among them.
	Name    string
	Version string
	// Requires are the Requires-Dist lines of the metadata, such as "dep-b>=1".
	Requires []string
	// RequiresPython, when set, is the Requires-Python of the metadata and the
	// data-requires-python of the index link (PEP 503), such as ">=3.8".
	RequiresPython string
	// Files are the package's files by path relative to site-packages, such as
	// "pkg_a/__init__.py": "VALUE = 1\n". The dist-info files are generated.
	Files map[string]string
	// SdistOnly serves a source archive instead of a wheel. Its setup.py is
	// Files["setup.py"] if given (a test puts a marker-writing one there to prove it
	// was never run), else a minimal setuptools one.
	SdistOnly bool
}

// PyIndex is a PEP 503 simple index on loopback: the project list at /simple/, each
// project's page at /simple/<normalised name>/ with a "#sha256=" link per file, and
// the files at /files/<file name>, such as /files/pkg_a-1.0-py3-none-any.whl or
// /files/src_only-1.0.tar.gz. pip 23 asks for PEP 691 JSON first but accepts the HTML
// this serves.
type PyIndex struct {
	server
	projects map[string][]pyFile // by normalised project name, in the order given
	files    map[string][]byte   // archive bytes by file name
}

// pyFile is one distribution file as the project page links it.
type pyFile struct {
	name           string
	sha256         string // hex
	requiresPython string
}

// NewPyIndex builds the archives of pkgs and serves them on 127.0.0.1 until t ends.
// It fails t on a package without a name or version, or one given twice.
func NewPyIndex(t testing.TB, pkgs ...PyPackage) *PyIndex {
	t.Helper()
	x := &PyIndex{projects: map[string][]pyFile{}, files: map[string][]byte{}}
	for _, p := range pkgs {
		if p.Name == "" || p.Version == "" {
			t.Fatalf("registrytest: a PyPackage needs a name and a version, got %q %q", p.Name, p.Version)
		}
		var name string
		var data []byte
		var err error
		if p.SdistOnly {
			name, data, err = buildSdist(p)
		} else {
			name, data, err = buildWheel(p)
		}
		if err != nil {
			t.Fatalf("registrytest: building %s %s: %v", p.Name, p.Version, err)
		}
		if _, dup := x.files[name]; dup {
			t.Fatalf("registrytest: %s %s given twice", p.Name, p.Version)
		}
		x.files[name] = data
		sum := sha256.Sum256(data)
		norm := NormalizePyName(p.Name)
		x.projects[norm] = append(x.projects[norm], pyFile{name: name, sha256: hex.EncodeToString(sum[:]), requiresPython: p.RequiresPython})
	}
	x.start(t, http.HandlerFunc(x.serve))
	return x
}

// URL is the index URL for pip's --index-url: "http://127.0.0.1:PORT/simple/".
func (x *PyIndex) URL() string { return x.srv.URL + "/simple/" }

// pyNameSeparators are the runs PEP 503 folds into one "-".
var pyNameSeparators = regexp.MustCompile(`[-_.]+`)

// NormalizePyName is a project's PEP 503 normalised name, the one its index page is
// served under: "Pkg_A" is "pkg-a".
func NormalizePyName(name string) string {
	return strings.ToLower(pyNameSeparators.ReplaceAllString(name, "-"))
}

// serve answers the root listing, the project pages and the files they link to.
func (x *PyIndex) serve(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/simple/" || p == "/simple":
		names := make([]string, 0, len(x.projects))
		for n := range x.projects {
			names = append(names, n)
		}
		sort.Strings(names)
		var b strings.Builder
		b.WriteString("<!DOCTYPE html>\n<html><head><meta name=\"pypi:repository-version\" content=\"1.0\"><title>Simple index</title></head><body>\n")
		for _, n := range names {
			fmt.Fprintf(&b, "<a href=\"/simple/%s/\">%s</a><br/>\n", n, n)
		}
		b.WriteString("</body></html>\n")
		writeBody(w, r, "text/html; charset=utf-8", []byte(b.String()))
	case strings.HasPrefix(p, "/simple/"):
		name := strings.TrimSuffix(strings.TrimPrefix(p, "/simple/"), "/")
		norm := NormalizePyName(name)
		files, ok := x.projects[norm]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if name != norm || !strings.HasSuffix(p, "/") {
			// PEP 503: a client asking for another spelling is sent to the normal one.
			http.Redirect(w, r, "/simple/"+norm+"/", http.StatusMovedPermanently)
			return
		}
		var b strings.Builder
		fmt.Fprintf(&b, "<!DOCTYPE html>\n<html><head><meta name=\"pypi:repository-version\" content=\"1.0\"><title>Links for %s</title></head><body>\n<h1>Links for %s</h1>\n", norm, norm)
		for _, f := range files {
			rp := ""
			if f.requiresPython != "" {
				rp = fmt.Sprintf(" data-requires-python=\"%s\"", html.EscapeString(f.requiresPython))
			}
			fmt.Fprintf(&b, "<a href=\"/files/%s#sha256=%s\"%s>%s</a><br/>\n", f.name, f.sha256, rp, f.name)
		}
		b.WriteString("</body></html>\n")
		writeBody(w, r, "text/html; charset=utf-8", []byte(b.String()))
	case strings.HasPrefix(p, "/files/"):
		data, ok := x.files[strings.TrimPrefix(p, "/files/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		writeBody(w, r, "application/octet-stream", data)
	default:
		http.NotFound(w, r)
	}
}

// writeBody answers with body, or with its headers alone for HEAD.
func writeBody(w http.ResponseWriter, r *http.Request, contentType string, body []byte) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	w.Write(body)
}

// fileNamePart is a project name as wheel and sdist file names spell it (PEP 427 and
// the binary distribution format spec): normalised, with "_" for "-".
func fileNamePart(name string) string {
	return strings.ReplaceAll(NormalizePyName(name), "-", "_")
}

// metadata is the core metadata (version 2.1) of p, as METADATA and PKG-INFO hold it.
func metadata(p PyPackage) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Metadata-Version: 2.1\nName: %s\nVersion: %s\n", p.Name, p.Version)
	if p.RequiresPython != "" {
		fmt.Fprintf(&b, "Requires-Python: %s\n", p.RequiresPython)
	}
	for _, r := range p.Requires {
		fmt.Fprintf(&b, "Requires-Dist: %s\n", r)
	}
	b.WriteString("\n")
	return b.String()
}

// buildWheel returns the file name and bytes of a pure-Python wheel of p: its Files
// plus a dist-info with METADATA, WHEEL and a RECORD of every other file's sha256
// (urlsafe base64 without padding, as pip checks it) and size.
func buildWheel(p PyPackage) (string, []byte, error) {
	base := fileNamePart(p.Name) + "-" + p.Version
	distInfo := base + ".dist-info/"
	entries := map[string]string{}
	for path, content := range p.Files {
		if strings.HasPrefix(path, distInfo) {
			return "", nil, fmt.Errorf("file %q is in the generated dist-info", path)
		}
		entries[path] = content
	}
	entries[distInfo+"METADATA"] = metadata(p)
	entries[distInfo+"WHEEL"] = "Wheel-Version: 1.0\nGenerator: brig-registrytest\nRoot-Is-Purelib: true\nTag: py3-none-any\n\n"

	paths := make([]string, 0, len(entries)+1)
	for path := range entries {
		paths = append(paths, path)
	}
	sort.Strings(paths)
	var record strings.Builder
	for _, path := range paths {
		sum := sha256.Sum256([]byte(entries[path]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", path, base64.RawURLEncoding.EncodeToString(sum[:]), len(entries[path]))
	}
	fmt.Fprintf(&record, "%sRECORD,,\n", distInfo)
	entries[distInfo+"RECORD"] = record.String()
	paths = append(paths, distInfo+"RECORD")

	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, path := range paths {
		hdr := &zip.FileHeader{Name: path, Method: zip.Deflate, Modified: fixedTime}
		hdr.SetMode(0o644)
		f, err := zw.CreateHeader(hdr)
		if err != nil {
			return "", nil, fmt.Errorf("adding %s to the wheel: %w", path, err)
		}
		if _, err := f.Write([]byte(entries[path])); err != nil {
			return "", nil, fmt.Errorf("writing %s to the wheel: %w", path, err)
		}
	}
	if err := zw.Close(); err != nil {
		return "", nil, fmt.Errorf("closing the wheel: %w", err)
	}
	return base + "-py3-none-any.whl", buf.Bytes(), nil
}

// buildSdist returns the file name and bytes of a source archive of p: its Files, a
// PKG-INFO and a setup.py, under "<name>-<version>/".
func buildSdist(p PyPackage) (string, []byte, error) {
	base := fileNamePart(p.Name) + "-" + p.Version
	entries := map[string]string{"PKG-INFO": metadata(p)}
	for path, content := range p.Files {
		entries[path] = content
	}
	if _, ok := entries["setup.py"]; !ok {
		entries["setup.py"] = fmt.Sprintf("from setuptools import setup\nsetup(name=%q, version=%q)\n", p.Name, p.Version)
	}
	data, err := targz(base+"/", entries)
	if err != nil {
		return "", nil, fmt.Errorf("building the sdist: %w", err)
	}
	return base + ".tar.gz", data, nil
}

// targz is a gzipped tar of entries (path to content), each under prefix, in path
// order, owned by root with mode 0644 and fixedTime.
func targz(prefix string, entries map[string]string) ([]byte, error) {
	paths := make([]string, 0, len(entries))
	for path := range entries {
		paths = append(paths, path)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, path := range paths {
		content := entries[path]
		hdr := &tar.Header{Name: prefix + path, Mode: 0o644, Size: int64(len(content)), ModTime: fixedTime, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("adding %s: %w", path, err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			return nil, fmt.Errorf("writing %s: %w", path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("closing the tar: %w", err)
	}
	if err := gz.Close(); err != nil {
		return nil, fmt.Errorf("closing the gzip: %w", err)
	}
	return buf.Bytes(), nil
}
