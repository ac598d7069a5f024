// Package safedir makes and checks the folders brig keeps its own files in
// (the state directory, the package cache, the lock folder): folders another
// user may write to would let that user replace brig's files there, or lay a
// symbolic link where brig, as root, then writes (the operator probe of
// 2026-12-06 had a sticky 1777 state directory's link make root overwrite a
// file of its choosing).
package safedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/internal/pathwalk"
)

// Make makes dir with perm where it is missing (its parents too), and
// returns Check's verdict on it.
func Make(dir string, perm os.FileMode) error {
	abs, err := absPath(dir)
	if err != nil {
		return err
	}
	// The deepest folder of the path that exists is checked as a folder
	// above before any is made below it (the review of 2026-12-06: a refused
	// path got its folders all the same).
	for q := abs; q != "/"; q = filepath.Dir(q) {
		if _, err := os.Lstat(q); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if q != abs {
			real, err := walk(q)
			if err != nil {
				return err
			}
			if err := owned(real, true); err != nil {
				return err
			}
		}
		break
	}
	if err := os.MkdirAll(abs, perm); err != nil {
		return err
	}
	return Check(abs)
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
	abs, err := absPath(dir)
	if err != nil {
		return err
	}
	real, err := walk(abs)
	if err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Stat(real, &st); err != nil {
		return err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%s is not a folder", dir)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s is owned by uid %d, not this process's %d: chown %d:%d %s", dir, st.Uid, os.Geteuid(), os.Geteuid(), os.Getegid(), real)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%s is writable by its group or others (mode %o): chmod 0755 %s", dir, st.Mode&0o7777, real)
	}
	return nil
}

// walk resolves the absolute path p as the kernel does, one component at a
// time (pathwalk), and checks each folder it passes through and each link it
// follows, however deep in a chain of links: each must be root's or this
// user's, and each folder above the last writable by others only with the
// sticky bit. It returns the resolved path, whose last folder is Check's.
// (Checking the path as given and as resolved missed a link met halfway
// through a chain: the review of 2026-12-06.)
func walk(p string) (string, error) {
	if err := owned("/", true); err != nil {
		return "", err
	}
	return pathwalk.Resolve("/", p, func(name string, st *unix.Stat_t, more bool) error {
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return ownedBy(name, st, "a link on its path")
		}
		if !more {
			return nil // the last folder: Check's
		}
		return ownedAbove(name, st)
	})
}

// owned checks the folder dir, one above the last of a walk when above: it
// must be root's or this user's, and writable by others only with the sticky
// bit. The last folder is Check's.
func owned(dir string, above bool) error {
	if !above {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	return ownedAbove(dir, &st)
}

// ownedAbove is owned's check of the folder dir, whose Lstat is st.
func ownedAbove(dir string, st *unix.Stat_t) error {
	if err := ownedBy(dir, st, "a folder above it"); err != nil {
		return err
	}
	if st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
		return fmt.Errorf("a folder above it, %s, is writable by its group or others without the sticky bit (mode %o): another user could move the path's folder away and put one of theirs there (chmod go-w %s, or choose a path whose folders only root may write)", dir, st.Mode&0o7777, dir)
	}
	return nil
}

// ownedBy refuses what, at p, whose owner is neither root nor this user.
func ownedBy(p string, st *unix.Stat_t, what string) error {
	if st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		fix := "chown root " + p
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			fix = "chown -h root:root " + p
		}
		return fmt.Errorf("%s, %s, is owned by uid %d: another user could change which folder the path names (%s, or choose a path of root's)", what, p, st.Uid, fix)
	}
	return nil
}

// absPath is dir made absolute. One with a ".." is refused: made absolute it
// is cleaned as text, where the kernel resolves a link before the ".." that
// follows it, so the folder checked would not be the one opened.
func absPath(dir string) (string, error) {
	if slices.Contains(strings.Split(dir, "/"), "..") {
		return "", fmt.Errorf("%s has a \"..\": give the folder's path without one", dir)
	}
	return filepath.Abs(dir)
}
