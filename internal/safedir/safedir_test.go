package safedir

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestCheck: a folder of this user's that only it may write passes, through
// a link too; a sticky world-writable one, a group-writable one, another
// user's and a file do not.
func TestCheck(t *testing.T) {
	base := t.TempDir()
	mk := func(name string, mode uint32) string {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Chmod(p, mode); err != nil { // os.Chmod's mode has no 0o1000
			t.Fatal(err)
		}
		return p
	}
	good := mk("good", 0o755)
	link := filepath.Join(base, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{good, link, mk("private", 0o700)} {
		if err := Check(p); err != nil {
			t.Errorf("%s: %v, want it to pass", p, err)
		}
	}
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o600)
	cases := map[string]string{
		mk("sticky", 0o1777): "writable by its group or others (mode 1777)",
		mk("group", 0o775):   "writable by its group or others (mode 775)",
		file:                 "is not a folder",
	}
	// Below a folder others may write without the sticky bit: they could
	// move it away and put theirs there.
	open := mk("open", 0o777)
	under := filepath.Join(open, "state")
	os.Mkdir(under, 0o755)
	cases[under] = "writable by its group or others without the sticky bit (mode 777): another user could move the path's folder away and put one of theirs there (chmod go-w " + open
	if os.Geteuid() == 0 {
		other := mk("other", 0o755)
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		cases[other] = "owned by uid 65534"
		// Another user's link to a good folder: they could point it
		// elsewhere (the crash probe of 2026-12-06).
		theirs := filepath.Join(base, "theirs")
		os.Symlink(good, theirs)
		if err := os.Lchown(theirs, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		cases[theirs] = "a link on its path, " + theirs + ", is owned by uid 65534: another user could change which folder the path names (chown -h root:root " + theirs
		// Their link met halfway through a chain of root's links (the
		// review of 2026-12-06: the path as given and as resolved both
		// passed).
		sticky := mk("sticky-tmp", 0o1777)
		mid := filepath.Join(sticky, "brig-state")
		os.Symlink(good, mid)
		os.Lchown(mid, 65534, 65534)
		chain := filepath.Join(base, "chain")
		os.Symlink(mid, chain)
		cases[chain] = "a link on its path, " + mid + ", is owned by uid 65534"
		// A folder of theirs above a good one.
		above := mk("above", 0o755)
		inside := filepath.Join(above, "state")
		os.Mkdir(inside, 0o755)
		os.Chown(above, 65534, 65534)
		cases[inside] = "a folder above it, " + above + ", is owned by uid 65534"
	}
	for p, want := range cases {
		if err := Check(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error with %q", p, err, want)
		}
	}
	// Root's link in a sticky folder, as /var/run to /run, and a "." on the
	// way, pass.
	rootLink := filepath.Join(mk("sticky-ok", 0o1777), "state")
	os.Symlink(good, rootLink)
	for _, p := range []string{rootLink, good + "/./"} {
		if err := Check(p); err != nil {
			t.Errorf("%s: %v, want it to pass", p, err)
		}
	}
	// A ".." is refused: cleaned as text it may name another folder than the
	// kernel's resolution of a link before it.
	if err := Check(good + "/../good"); err == nil || !strings.Contains(err.Error(), `has a ".."`) {
		t.Errorf("a path with ..: got %v, want it refused", err)
	}
	// Make makes a missing folder, with its parents, that passes; none
	// below a folder others may write.
	made := filepath.Join(base, "a", "b")
	if err := Make(made, 0o755); err != nil {
		t.Errorf("Make: %v", err)
	}
	if err := Make(filepath.Join(open, "new", "state"), 0o755); err == nil || !strings.Contains(err.Error(), "without the sticky bit") {
		t.Errorf("Make below a 777 folder: got %v, want it refused", err)
	}
	if _, err := os.Lstat(filepath.Join(open, "new")); err == nil {
		t.Errorf("Make below a 777 folder made a folder there")
	}
}
