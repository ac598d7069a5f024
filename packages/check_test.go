package packages

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/brig-sandbox/brig/internal/testutil"
)

// layerTree builds a tree with what a package leaves (modules, a nested
// directory, links that stay inside) in dir.
func layerTree(t testing.TB, dir string) {
	t.Helper()
	for _, d := range []string{"pkg/sub", "bin", "node_modules/.bin"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"pkg/__init__.py", "pkg/sub/mod.py", "bin/tool"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x = 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"node_modules/.bin/tool": "../../bin/tool",
		"pkg/sub/up":             "../__init__.py",
		"pkg/self":               ".",
		"dangling":               "pkg/missing/file",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCheckLayer(t *testing.T) {
	tests := []struct {
		name string
		root bool // needs root (chown, mknod)
		// make adds the entry to refuse to a clean tree; nil leaves it clean.
		make func(t *testing.T, dir string)
		want string // part of the refusal, "" when admitted
	}{
		{name: "clean"},
		{name: "setuid file", make: func(t *testing.T, dir string) {
			chmod(t, filepath.Join(dir, "bin/tool"), 0o755|os.ModeSetuid)
		}, want: "bin/tool is setuid"},
		{name: "setgid file", make: func(t *testing.T, dir string) {
			chmod(t, filepath.Join(dir, "bin/tool"), 0o755|os.ModeSetgid)
		}, want: "bin/tool is setgid"},
		{name: "setgid directory", make: func(t *testing.T, dir string) {
			chmod(t, filepath.Join(dir, "pkg"), 0o755|os.ModeDir|os.ModeSetgid)
		}, want: "pkg is setgid"},
		{name: "fifo", make: func(t *testing.T, dir string) {
			if err := syscall.Mkfifo(filepath.Join(dir, "pkg/fifo"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, want: "pkg/fifo is a fifo"},
		{name: "socket", make: func(t *testing.T, dir string) {
			l, err := net.Listen("unix", filepath.Join(dir, "sock"))
			if err != nil {
				t.Fatal(err)
			}
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			l.Close()
		}, want: "sock is a socket"},
		{name: "character device", root: true, make: func(t *testing.T, dir string) {
			// 1,3 is /dev/null: harmless if the test went wrong.
			if err := syscall.Mknod(filepath.Join(dir, "pkg/null"), syscall.S_IFCHR|0o666, int(1<<8|3)); err != nil {
				t.Fatal(err)
			}
		}, want: "pkg/null is a device"},
		{name: "block device", root: true, make: func(t *testing.T, dir string) {
			// 7,0 is loop0, never opened here.
			if err := syscall.Mknod(filepath.Join(dir, "pkg/loop"), syscall.S_IFBLK|0o600, int(7<<8|0)); err != nil {
				t.Fatal(err)
			}
		}, want: "pkg/loop is a device"},
		{name: "hard link", make: func(t *testing.T, dir string) {
			if err := os.Link(filepath.Join(dir, "bin/tool"), filepath.Join(dir, "pkg/tool")); err != nil {
				t.Fatal(err)
			}
		}, want: "has 2 hard links"},
		{name: "absolute symlink", make: func(t *testing.T, dir string) {
			symlink(t, "/etc/passwd", filepath.Join(dir, "pkg/passwd"))
		}, want: `pkg/passwd points to the absolute path "/etc/passwd"`},
		{name: "absolute symlink into the layer", make: func(t *testing.T, dir string) {
			// Inside today, but the layer moves when it is published and mounted.
			symlink(t, filepath.Join(dir, "bin/tool"), filepath.Join(dir, "pkg/abs"))
		}, want: "points to the absolute path"},
		{name: "escaping symlink", make: func(t *testing.T, dir string) {
			symlink(t, "../../etc/passwd", filepath.Join(dir, "pkg/passwd"))
		}, want: `pkg/passwd points to "../../etc/passwd", outside the layer`},
		{name: "escaping from the top", make: func(t *testing.T, dir string) {
			symlink(t, "..", filepath.Join(dir, "up"))
		}, want: "outside the layer"},
		{name: "escaping through another link", make: func(t *testing.T, dir string) {
			// Lexically pkg/sub/b/../a/../.. is pkg, inside; but a is the top
			// directory, whose parent is outside.
			symlink(t, "../..", filepath.Join(dir, "pkg/sub/a"))
			symlink(t, "a/../..", filepath.Join(dir, "pkg/sub/b"))
		}, want: "pkg/sub/b points to \"a/../..\", outside the layer"},
		{name: "escaping through an absolute link", make: func(t *testing.T, dir string) {
			symlink(t, "/etc", filepath.Join(dir, "etc"))
			symlink(t, "../etc/passwd", filepath.Join(dir, "pkg/passwd"))
		}, want: "absolute path"},
		{name: "link loop", make: func(t *testing.T, dir string) {
			symlink(t, "b", filepath.Join(dir, "pkg/a"))
			symlink(t, "a", filepath.Join(dir, "pkg/b"))
		}, want: "more than 40 links"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root {
				testutil.RequireRoot(t)
			}
			dir := t.TempDir()
			layerTree(t, dir)
			if tt.make != nil {
				tt.make(t, dir)
			}
			err := CheckLayer(dir)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("got %v, want the layer admitted", err)
				}
				return
			}
			if !errors.Is(err, ErrBadLayer) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want a refusal (ErrBadLayer) holding %q", err, tt.want)
			}
		})
	}
}

func chmod(t *testing.T, p string, m os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, m); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}
