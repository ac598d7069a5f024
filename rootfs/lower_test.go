package rootfs

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/brig-sandbox/brig/internal/testutil"
)

// checkRootsOnly walks a lower layer on its own (not through CheckLower, which it
// checks) and fails on any entry owned by anyone but root, any group- or
// world-writable entry but a root-owned sticky folder, any setuid or setgid file,
// and any device, fifo or socket.
func checkRootsOnly(t *testing.T, dir string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		mode := fi.Mode()
		var bad []string
		if st.Uid != 0 || st.Gid != 0 {
			bad = append(bad, "owned by a non-root id")
		}
		if mode&os.ModeSymlink == 0 {
			if mode.Perm()&0o022 != 0 && !(mode.IsDir() && mode&os.ModeSticky != 0 && st.Uid == 0) {
				bad = append(bad, "writable by group or others")
			}
			if mode&(os.ModeSetuid|os.ModeSetgid) != 0 {
				bad = append(bad, "setuid or setgid")
			}
			if !mode.IsDir() && !mode.IsRegular() {
				bad = append(bad, "not a file, folder or link")
			}
		}
		if len(bad) > 0 {
			if n++; n <= 20 {
				t.Errorf("%s: got %v owned by %d:%d, %s; want nothing a run's id could change", strings.TrimPrefix(p, dir), mode, st.Uid, st.Gid, strings.Join(bad, ", "))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n > 20 {
		t.Errorf("and %d more", n-20)
	}
}

func TestCheckLower(t *testing.T) {
	testutil.RequireRoot(t)
	tests := []struct {
		name    string
		make    func(t *testing.T, root string) // spoils a clean tree; nil leaves it
		wantBad string                          // in the error; "" wants none
	}{
		{name: "clean tree"},
		{
			name:    "folder owned by the sandbox id",
			make:    func(t *testing.T, r string) { chown(t, filepath.Join(r, "sandbox"), SandboxUID, SandboxGID) },
			wantBad: "/sandbox: owned by 1000:1000",
		},
		{
			name:    "file of a group",
			make:    func(t *testing.T, r string) { chown(t, filepath.Join(r, "etc/passwd"), 0, 42) },
			wantBad: "/etc/passwd: owned by 0:42",
		},
		{
			name:    "group-writable folder",
			make:    func(t *testing.T, r string) { chmod(t, filepath.Join(r, "etc"), 0o775) },
			wantBad: "/etc: writable by group or others (mode 775)",
		},
		{
			name:    "world-writable file",
			make:    func(t *testing.T, r string) { chmod(t, filepath.Join(r, "etc/passwd"), 0o666) },
			wantBad: "/etc/passwd: writable by group or others",
		},
		{
			name:    "world-writable folder without the sticky bit",
			make:    func(t *testing.T, r string) { chmod(t, filepath.Join(r, "tmp"), 0o777) },
			wantBad: "/tmp: writable by group or others (mode 777)",
		},
		{
			name: "sticky world-writable folder of another id",
			make: func(t *testing.T, r string) {
				chown(t, filepath.Join(r, "tmp"), SandboxUID, 0)
				chmod(t, filepath.Join(r, "tmp"), 0o1777)
			},
			wantBad: "/tmp: writable by group or others (mode 1777)",
		},
		{
			name:    "setuid file",
			make:    func(t *testing.T, r string) { chmod(t, filepath.Join(r, "etc/passwd"), 0o4755) },
			wantBad: "/etc/passwd: setuid or setgid (mode 4755)",
		},
		{
			name:    "setgid folder",
			make:    func(t *testing.T, r string) { chmod(t, filepath.Join(r, "etc"), 0o2755) },
			wantBad: "/etc: setuid or setgid",
		},
		{
			name: "fifo",
			make: func(t *testing.T, r string) {
				if err := syscall.Mkfifo(filepath.Join(r, "etc/fifo"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantBad: "/etc/fifo: a device, fifo or socket",
		},
		{
			name: "link of another id",
			make: func(t *testing.T, r string) {
				p := filepath.Join(r, "etc/link")
				if err := os.Symlink("/etc/passwd", p); err != nil {
					t.Fatal(err)
				}
				if err := os.Lchown(p, SandboxUID, SandboxGID); err != nil {
					t.Fatal(err)
				}
			},
			wantBad: "/etc/link: owned by 1000:1000",
		},
		{
			name:    "folder above it writable by others",
			make:    func(t *testing.T, r string) { chmod(t, filepath.Dir(r), 0o777) },
			wantBad: "a folder above it is writable by others (mode 777)",
		},
		{
			name:    "folder above it of another id",
			make:    func(t *testing.T, r string) { chown(t, filepath.Dir(r), SandboxUID, SandboxGID) },
			wantBad: "a folder above it is owned by uid 1000",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "lower")
			cleanLower(t, root)
			if tt.make != nil {
				tt.make(t, root)
			}
			err := CheckLower(root)
			if tt.wantBad == "" {
				if err != nil {
					t.Errorf("got %v, want no error", err)
				}
				return
			}
			if !errors.Is(err, ErrUnsafeLower) || !strings.Contains(err.Error(), tt.wantBad) {
				t.Errorf("got %v, want ErrUnsafeLower naming %q", err, tt.wantBad)
			}
		})
	}
}

func TestHardenTree(t *testing.T) {
	testutil.RequireRoot(t)
	root := filepath.Join(t.TempDir(), "lower")
	cleanLower(t, root)
	// What a fresh Debian tree has, and a device node for good measure.
	for _, d := range []string{"var/mail", "var/local", "var/tmp", "usr/bin", "usr/sbin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	chown(t, filepath.Join(root, "var/mail"), 0, 8)
	chmod(t, filepath.Join(root, "var/mail"), 0o2775)
	chmod(t, filepath.Join(root, "var/tmp"), 0o1777)
	for _, f := range []struct {
		path     string
		uid, gid int
		mode     uint32
	}{
		{"usr/bin/su", 0, 0, 0o4755},
		{"usr/bin/chage", 0, 42, 0o2755},
		{"usr/sbin/tool", 1000, 1000, 0o775},
	} {
		p := filepath.Join(root, f.path)
		if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
		chown(t, p, f.uid, f.gid)
		chmod(t, p, f.mode)
	}
	if err := os.Symlink("su", filepath.Join(root, "usr/bin/su2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(filepath.Join(root, "usr/bin/su2"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if err := CheckLower(root); !errors.Is(err, ErrUnsafeLower) {
		t.Fatalf("before: got %v, want ErrUnsafeLower", err)
	}

	if err := hardenTree(root); err != nil {
		t.Fatal(err)
	}
	if err := CheckLower(root); err != nil {
		t.Errorf("after: got %v, want no error", err)
	}
	checkRootsOnly(t, root)
	tests := []struct {
		path string
		want os.FileMode
	}{
		{"var/mail", os.ModeDir | 0o755},
		{"var/tmp", os.ModeDir | os.ModeSticky | 0o777},
		{"tmp", os.ModeDir | os.ModeSticky | 0o777},
		{"usr/bin/su", 0o755},
		{"usr/bin/chage", 0o755},
		{"usr/sbin/tool", 0o755},
	}
	for _, tt := range tests {
		fi, err := os.Lstat(filepath.Join(root, tt.path))
		if err != nil || fi.Mode() != tt.want {
			t.Errorf("%s: got %v, %v; want %v", tt.path, fi.Mode(), err, tt.want)
		}
	}
	if got, err := os.Readlink(filepath.Join(root, "usr/bin/su2")); err != nil || got != "su" {
		t.Errorf("usr/bin/su2: got %q, %v; want the link kept", got, err)
	}
}

// TestMkdirRootIgnoresUmask checks that the folders brig creates, parents included,
// are 0755 and root's whatever the umask and a setgid parent.
func TestMkdirRootIgnoresUmask(t *testing.T) {
	testutil.RequireRoot(t)
	base := t.TempDir()
	chown(t, base, 0, 8)
	chmod(t, base, 0o2755) // new folders would take group 8 and the setgid bit
	old := syscall.Umask(0o077)
	err := mkdirRoot(filepath.Join(base, "a/b/c"))
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"a", "a/b", "a/b/c"} {
		fi, err := os.Stat(filepath.Join(base, d))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode() != os.ModeDir|0o755 || st.Uid != 0 || st.Gid != 0 {
			t.Errorf("%s: got %v owned by %d:%d, want drwxr-xr-x owned by 0:0", d, fi.Mode(), st.Uid, st.Gid)
		}
	}
	// A folder that exists is the operator's and stays as it is.
	chmod(t, filepath.Join(base, "a"), 0o700)
	if err := mkdirRoot(filepath.Join(base, "a")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(base, "a")); fi.Mode().Perm() != 0o700 {
		t.Errorf("an existing folder: got %v, want it left 0700", fi.Mode())
	}
}

// cleanLower makes a small lower layer CheckLower accepts, below a folder of its own
// (0755, root's) so that the tests can spoil the folder above it.
func cleanLower(t *testing.T, root string) {
	t.Helper()
	if err := mkdirRoot(root); err != nil {
		t.Fatal(err)
	}
	chmod(t, filepath.Dir(root), 0o755)
	if err := writeLayout(root); err != nil {
		t.Fatal(err)
	}
	if err := writeEtc(filepath.Join(root, "etc"), nil, nil); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, p string, uid, gid int) {
	t.Helper()
	if err := os.Lchown(p, uid, gid); err != nil {
		t.Fatal(err)
	}
}

func chmod(t *testing.T, p string, mode uint32) {
	t.Helper()
	if err := syscall.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func TestCheckAboveDir(t *testing.T) {
	testutil.RequireRoot(t)
	base := t.TempDir()
	dir := filepath.Join(base, "open", "python")
	if err := mkdirRoot(dir); err != nil {
		t.Fatal(err)
	}
	if err := checkAboveDir(dir); err != nil {
		t.Errorf("under root's folders: got %v, want no error", err)
	}
	chmod(t, filepath.Join(base, "open"), 0o777)
	if err := checkAboveDir(dir); !errors.Is(err, ErrUnsafeLower) || !strings.Contains(err.Error(), "/open: a folder above it is writable by others") {
		t.Errorf("under a 0777 folder: got %v, want ErrUnsafeLower naming it", err)
	}
	// A build there fails before debootstrap (which would fail otherwise) runs.
	fakeDebootstrap(t, `echo "E: ran" >&2; exit 1`)
	_, err := Build(context.Background(), BuildOptions{Language: Python, Dir: dir, Suite: "bookworm", Mirror: "http://mirror.test/debian"}, nil)
	if !errors.Is(err, ErrUnsafeLower) {
		t.Errorf("Build: got %v, want ErrUnsafeLower", err)
	}
}
