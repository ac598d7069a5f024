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
// under a name brig opens. dir itself may be a symbolic link (to a folder
// that passes).
func Check(dir string) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
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
