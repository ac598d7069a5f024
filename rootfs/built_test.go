package rootfs

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/internal/testutil"
)

// fakeBuilt makes a tree that looks like a built lang rootfs: an executable
// interpreter reached through a relative link, as Debian's python3 is, and a manifest.
func fakeBuilt(t *testing.T, lang Language) string {
	t.Helper()
	dir := t.TempDir()
	interp := buildInterpreters[lang]
	real := interp + ".real"
	if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(interp)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, real), []byte("#!/bin/false\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(real), filepath.Join(dir, interp)); err != nil {
		t.Fatal(err)
	}
	if err := writeManifest(dir, fakeManifest(lang)); err != nil {
		t.Fatal(err)
	}
	return dir
}

func fakeManifest(lang Language) *Manifest {
	return &Manifest{
		FormatVersion: ManifestFormat,
		Language:      lang,
		Interpreter:   buildInterpreters[lang],
		Version:       "1.2.3",
		Suite:         "bookworm",
		Mirror:        "http://mirror.test/debian",
		Variant:       buildVariant,
		Packages:      buildPackages[lang],
		Created:       time.Date(2025, 5, 20, 0, 0, 0, 0, time.UTC),
	}
}

func TestManifestRoundTrip(t *testing.T) {
	dir := fakeBuilt(t, Python)
	got, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := fakeManifest(Python); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestOpenBuilt(t *testing.T) {
	// A valid build is root's alone (CheckLower), which only root can make.
	testutil.RequireRoot(t)
	py, js := fakeBuilt(t, Python), fakeBuilt(t, JavaScript)
	b, err := OpenBuilt(map[Language]string{Python: py, JavaScript: js})
	if err != nil {
		t.Fatal(err)
	}
	if b.Name() != "built" {
		t.Errorf("got name %q, want built", b.Name())
	}
	tests := []struct {
		lang Language
		want Root
	}{
		{Python, Root{Language: Python, Lower: py, Interpreter: "/usr/bin/python3", Args: []string{"-u"}, Version: "1.2.3"}},
		{JavaScript, Root{Language: JavaScript, Lower: js, Interpreter: "/usr/bin/node", Version: "1.2.3"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.lang), func(t *testing.T) {
			got, err := b.Root(tt.lang)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("got %+v, want %+v", *got, tt.want)
			}
			// The caller owns the copy.
			got.Args = append(got.Args, "changed")
			again, _ := b.Root(tt.lang)
			if !reflect.DeepEqual(*again, tt.want) {
				t.Errorf("after changing a returned Root: got %+v, want %+v", *again, tt.want)
			}
		})
	}
}

func TestBuiltRootNotConfigured(t *testing.T) {
	testutil.RequireRoot(t)
	b, err := OpenBuilt(map[Language]string{Python: fakeBuilt(t, Python), JavaScript: ""})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Root(JavaScript)
	if !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "brig rootfs build javascript --dir") {
		t.Errorf("got %v, want ErrNotBuilt saying how to build one", err)
	}
	if _, err := b.Root("ruby"); !errors.Is(err, ErrUnknownLanguage) {
		t.Errorf("got %v, want ErrUnknownLanguage", err)
	}
}

func TestOpenBuiltFailures(t *testing.T) {
	tests := []struct {
		name    string
		lang    Language
		setup   func(t *testing.T, dir string)
		wantErr error
		wantIn  string
	}{
		{
			name:    "missing manifest",
			lang:    Python,
			setup:   func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, ManifestName)) },
			wantErr: ErrNotBuilt,
			wantIn:  "brig rootfs build python --dir",
		},
		{
			name:    "missing directory",
			lang:    Python,
			setup:   func(t *testing.T, dir string) { os.RemoveAll(dir) },
			wantErr: ErrNotBuilt,
		},
		{
			name:    "wrong language",
			lang:    JavaScript,
			wantErr: ErrInvalidManifest,
			wantIn:  `is a "python" rootfs, not "javascript"`,
		},
		{
			name: "interpreter missing",
			lang: Python,
			setup: func(t *testing.T, dir string) {
				os.Remove(filepath.Join(dir, "usr/bin/python3.real"))
			},
			wantErr: ErrInvalidManifest,
			wantIn:  "interpreter /usr/bin/python3",
		},
		{
			name: "interpreter not executable",
			lang: Python,
			setup: func(t *testing.T, dir string) {
				os.Chmod(filepath.Join(dir, "usr/bin/python3.real"), 0o644)
			},
			wantErr: ErrInvalidManifest,
			wantIn:  "not an executable file",
		},
		{
			name: "interpreter a link out of the tree",
			lang: Python,
			setup: func(t *testing.T, dir string) {
				p := filepath.Join(dir, "usr/bin/python3")
				os.Remove(p)
				os.Symlink("../../../../../../../../bin/sh", p)
			},
			wantErr: ErrInvalidManifest,
		},
		{
			name:    "other format version",
			lang:    Python,
			setup:   func(t *testing.T, dir string) { editManifest(t, dir, `"format_version": 1`, `"format_version": 99`) },
			wantErr: ErrInvalidManifest,
			wantIn:  "format version 99",
		},
		{
			name:    "unknown field",
			lang:    Python,
			setup:   func(t *testing.T, dir string) { editManifest(t, dir, `"version"`, `"surprise": 1, "version"`) },
			wantErr: ErrInvalidManifest,
			wantIn:  "surprise",
		},
		{
			name: "not JSON",
			lang: Python,
			setup: func(t *testing.T, dir string) {
				os.WriteFile(filepath.Join(dir, ManifestName), []byte("python 3"), 0o644)
			},
			wantErr: ErrInvalidManifest,
		},
		{
			name:    "no version",
			lang:    Python,
			setup:   func(t *testing.T, dir string) { editManifest(t, dir, `"version": "1.2.3"`, `"version": ""`) },
			wantErr: ErrInvalidManifest,
		},
		{
			name:    "relative interpreter",
			lang:    Python,
			setup:   func(t *testing.T, dir string) { editManifest(t, dir, `"/usr/bin/python3"`, `"usr/bin/python3"`) },
			wantErr: ErrInvalidManifest,
		},
		{
			name: "sandbox of the sandbox id",
			lang: Python,
			setup: func(t *testing.T, dir string) {
				testutil.RequireRoot(t)
				if err := os.Mkdir(filepath.Join(dir, "sandbox"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Chown(filepath.Join(dir, "sandbox"), SandboxUID, SandboxGID); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: ErrUnsafeLower,
			wantIn:  "/sandbox: owned by 1000:1000",
		},
		{
			name: "group-writable folder",
			lang: Python,
			setup: func(t *testing.T, dir string) {
				testutil.RequireRoot(t)
				if err := os.Chmod(filepath.Join(dir, "usr/bin"), 0o775); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: ErrUnsafeLower,
			wantIn:  "brig rootfs build python --dir",
		},
		{
			name: "oversized manifest",
			lang: Python,
			setup: func(t *testing.T, dir string) {
				os.WriteFile(filepath.Join(dir, ManifestName), make([]byte, maxManifestSize+1), 0o644)
			},
			wantErr: ErrInvalidManifest,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := fakeBuilt(t, Python)
			if tt.setup != nil {
				tt.setup(t, dir)
			}
			_, err := OpenBuilt(map[Language]string{tt.lang: dir})
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("got %v, want %v saying %q", err, tt.wantErr, tt.wantIn)
			}
		})
	}
}

func TestOpenBuiltUnknownLanguage(t *testing.T) {
	if _, err := OpenBuilt(map[Language]string{"ruby": t.TempDir()}); !errors.Is(err, ErrUnknownLanguage) {
		t.Errorf("got %v, want ErrUnknownLanguage", err)
	}
}

func editManifest(t *testing.T, dir, old, new string) {
	t.Helper()
	p := filepath.Join(dir, ManifestName)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("manifest has no %q: %s", old, b)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestResolveIn(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"usr/bin", "usr/lib", "etc"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.WriteFile(filepath.Join(root, "usr/bin/python3.11"), nil, 0o755)
	links := map[string]string{
		"bin":              "usr/bin",          // merged /usr
		"usr/bin/python3":  "python3.11",       // relative, as Debian's
		"usr/bin/abs":      "/usr/bin/python3", // absolute: starts again at the root
		"usr/bin/up":       "../../../../../usr/bin/python3.11",
		"usr/bin/loop":     "loop",
		"usr/bin/dangling": "nothing",
		"etc/escape":       "/etc/../../..",
	}
	for l, target := range links {
		if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name, path, want string
		wantErr          bool
	}{
		{"plain", "/usr/bin/python3.11", "/usr/bin/python3.11", false},
		{"relative link", "/usr/bin/python3", "/usr/bin/python3.11", false},
		{"through merged /bin", "/bin/python3", "/usr/bin/python3.11", false},
		{"absolute link stays in the root", "/usr/bin/abs", "/usr/bin/python3.11", false},
		{"dot-dot can't climb out", "/usr/bin/up", "/usr/bin/python3.11", false},
		{"dot-dot in the path", "/../../usr/bin/python3", "/usr/bin/python3.11", false},
		{"escaping link is the root", "/etc/escape", "/", false},
		{"loop", "/usr/bin/loop", "", true},
		{"dangling", "/usr/bin/dangling", "", true},
		{"missing", "/usr/bin/node", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resolveIn(root, tt.path)
			if tt.wantErr {
				if err == nil {
					t.Errorf("got %q, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(root, tt.want); got != want {
				t.Errorf("got %q, want %q", got, want)
			}
		})
	}
}
