// Package safedir makes and checks the folders brig keeps its own files in
// (the state directory, the lock folder): folders another user may write to
// would let that user replace brig's files there, or lay a symbolic link
// where brig, as root, then writes (the operator probe of 2026-12-06 had a
// sticky 1777 state directory's link make root overwrite a file of its
// choosing).
package safedir

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Make makes dir with perm where it is missing (its parents too), and
// returns Check's verdict on it.
func Make(dir string, perm os.FileMode) error {
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	return Check(dir)
}

// Check returns an error that says why dir is not a folder of this process's
// user that no one else may write to, or nil. The sticky bit is no excuse: it
// keeps others from replacing a file of brig's, not from making one first
// under a name brig opens. Nor may anyone else change which folder the path
// names: each folder above it, as given and as its links resolve, must be
// root's or this user's, and writable by others only with the sticky bit,
// and each link on the way root's or this user's (the crash probe of
// 2026-12-06 had another user's link as the state directory, which that user
// then pointed at a folder of root's of their choosing).
func Check(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := checkAbove(abs); err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return err
	}
	if real != abs {
		if err := checkAbove(real); err != nil {
			return err
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(real, &st); err != nil {
		return err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%s is not a folder", dir)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s is owned by uid %d, not this process's %d", dir, st.Uid, os.Geteuid())
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%s is writable by its group or others (mode %o)", dir, st.Mode&0o7777)
	}
	return nil
}

// checkAbove checks each component of the absolute path p but its last folder
// (Check's), without following links: each must be root's or this user's, and
// each folder above writable by others only with the sticky bit.
func checkAbove(p string) error {
	for q := p; ; q = filepath.Dir(q) {
		var st unix.Stat_t
		if err := unix.Lstat(q, &st); err != nil {
			return err
		}
		link := st.Mode&unix.S_IFMT == unix.S_IFLNK
		switch {
		case q == p && !link:
			// The folder itself: Check's.
		case st.Uid != 0 && int(st.Uid) != os.Geteuid():
			what := "a folder above it"
			if link {
				what = "a link on its path"
			}
			return fmt.Errorf("%s, %s, is owned by uid %d: another user could change which folder the path names", what, q, st.Uid)
		case q != p && !link && st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0:
			return fmt.Errorf("a folder above it, %s, is writable by its group or others without the sticky bit (mode %o): another user could move the path's folder away and put one of theirs there", q, st.Mode&0o7777)
		}
		if q == "/" {
			return nil
		}
	}
}
