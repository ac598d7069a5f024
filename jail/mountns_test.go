package jail

import (
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/internal/testutil"
)

// TestMountTemplate: the template keeps the mounts its paths resolve through,
// the same file at each path as in the service's namespace, and detaches the
// rest (/proc, the cgroup hierarchies); the process's own mount table, which
// /proc/self shows from the main thread, is untouched.
func TestMountTemplate(t *testing.T) {
	testutil.RequireRoot(t)
	before, err := readMountInfo("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	paths := []string{dir, "/usr/bin", "/usr/lib/python3"}
	f, kept, err := newMountTemplate(paths)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	after, err := readMountInfo("/proc/self/mountinfo")
	if err != nil || len(after) != len(before) {
		t.Fatalf("the process's mounts: %d before, %d after (%v), want the same", len(before), len(after), err)
	}
	type ident struct{ dev, ino uint64 }
	host := map[string]ident{}
	for _, p := range paths {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		host[p] = ident{st.Dev, st.Ino}
	}
	// On a thread that enters the template and ends with its goroutine; the
	// template has no /proc, so its table is read through the service's.
	proc, err := os.Open("/proc")
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Close()
	idents := map[string]ident{}
	var inside []mountEntry
	onSpareThread(func() {
		if err = unix.Unshare(unix.CLONE_FS); err == nil {
			err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNS)
		}
		for _, p := range paths {
			var st unix.Stat_t
			if err == nil {
				err = unix.Stat(p, &st)
				idents[p] = ident{st.Dev, st.Ino}
			}
		}
		if err == nil {
			var fd int
			if fd, err = unix.Openat(int(proc.Fd()), "thread-self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
				mi := os.NewFile(uintptr(fd), "mountinfo")
				inside, err = parseMountInfo(mi, "the template's mountinfo")
				mi.Close()
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if idents[p] != host[p] {
			t.Errorf("%s: the template shows %v, the service %v", p, idents[p], host[p])
		}
	}
	if len(inside) != kept || kept < 1 || kept >= len(before) {
		t.Errorf("the template holds %d mounts (%d kept) of the service's %d, want at least one and fewer", len(inside), kept, len(before))
	}
	for _, gone := range []string{"/proc", "/sys/fs/cgroup"} {
		isGone := func(m mountEntry) bool { return m.point == gone }
		if !slices.ContainsFunc(before, isGone) || slices.ContainsFunc(inside, isGone) {
			t.Errorf("%s: in the service's mounts %v, in the template's %v; want it in the service's alone", gone, slices.ContainsFunc(before, isGone), slices.ContainsFunc(inside, isGone))
		}
	}
}

func TestUnescapeMountPoint(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\134y\011`: "/x\\y\t", `/short\04`: `/short\04`} {
		if got := unescapeMountPoint(in); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}
