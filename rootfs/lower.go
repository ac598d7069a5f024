package rootfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrUnsafeLower is returned by CheckLower for a lower layer, or a folder above it,
// that a run's id could change or use to gain a privilege.
var ErrUnsafeLower = errors.New("unsafe lower layer")

// dirMode is the mode of every folder brig creates: readable by a run (the overlay is
// mounted with the run's credentials in mind), writable by root alone.
const dirMode = 0o755

// mkdirRoot creates dir and each missing parent 0755 and owned by root, whatever the
// umask and a parent's setgid bit would have made them. Folders that exist are left
// as they are: they may be the operator's.
func mkdirRoot(dir string) error {
	dir = filepath.Clean(dir)
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("creating folder %q: it exists and is not a folder", dir)
		}
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirRoot(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, dirMode); err != nil && !os.IsExist(err) {
		return fmt.Errorf("creating folder %q: %w", dir, err)
	}
	return setOwnerMode(dir, dirMode)
}

// setOwnerMode makes path owned by root:root with exactly mode (os.FileMode bits,
// sticky included). The owner goes first: chown clears the setuid and setgid bits.
func setOwnerMode(path string, mode os.FileMode) error {
	if err := os.Lchown(path, 0, 0); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

// writeFileRoot writes a root-owned file with exactly mode, umask or not, and
// modified at mtime.
func writeFileRoot(path string, body []byte, mode os.FileMode, mtime time.Time) error {
	if err := os.WriteFile(path, body, mode); err != nil {
		return err
	}
	if err := setOwnerMode(path, mode); err != nil {
		return err
	}
	return os.Chtimes(path, time.Time{}, mtime)
}

// hardenTree makes the tree at root what CheckLower accepts: every entry owned by
// root:root, no setuid or setgid bit, nothing group- or world-writable but
// root-owned sticky folders (/tmp, /var/tmp). A Debian tree has a few of each
// (/var/mail and /var/local group-writable, su and passwd setuid, chage setgid
// shadow): none is of use in a sandbox, where the program is never root and every
// mount is nosuid. Symlinks are changed themselves, never followed.
func hardenTree(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if st.Uid != 0 || st.Gid != 0 {
			if err := os.Lchown(p, 0, 0); err != nil {
				return fmt.Errorf("hardening %q: %w", p, err)
			}
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		mode := st.Mode & 0o7777
		want := mode &^ (unix.S_ISUID | unix.S_ISGID)
		if !(d.IsDir() && mode&unix.S_ISVTX != 0) {
			want &^= 0o022
		}
		// Lchown may have cleared setuid bits already, so the mode is set
		// whenever it was not the wanted one before.
		if want != mode || st.Uid != 0 || st.Gid != 0 {
			if err := unix.Chmod(p, want); err != nil {
				return fmt.Errorf("hardening %q: %w", p, err)
			}
		}
		return nil
	})
}

// CheckLower walks the lower layer at dir and reports, as ErrUnsafeLower, each entry
// that is not owned by root:root, that is group- or world-writable (but for
// root-owned sticky folders such as /tmp), that is setuid or setgid, or that is a
// device, fifo or socket; and each folder above dir that is not owned by root or is
// writable by others without the sticky bit. Such an entry would let a run's id (or
// any host account) plant a file that later runs load, or change the rootfs under
// them. It reads every entry, so it takes a moment on a built tree (about 10k
// entries); Build and EnsureBuilt run it, and tests run it on both providers.
func CheckLower(dir string) error {
	var bad []string
	add := func(p, why string) {
		if len(bad) < 20 {
			bad = append(bad, p+": "+why)
		} else if len(bad) == 20 {
			bad = append(bad, "...")
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("checking lower layer %q: %w", dir, err)
	}
	if err := checkAbove(abs, add); err != nil {
		return fmt.Errorf("checking lower layer %q: %w", dir, err)
	}
	err = filepath.WalkDir(abs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		rel := "/" + strings.TrimPrefix(strings.TrimPrefix(p, abs), "/")
		if st.Uid != 0 || st.Gid != 0 {
			add(rel, fmt.Sprintf("owned by %d:%d, not root", st.Uid, st.Gid))
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			return nil // a link's own mode is always 0777 and never used
		case unix.S_IFREG, unix.S_IFDIR:
		default:
			add(rel, fmt.Sprintf("a device, fifo or socket (mode %o)", st.Mode))
		}
		if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			add(rel, fmt.Sprintf("setuid or setgid (mode %o)", st.Mode&0o7777))
		}
		if st.Mode&0o022 != 0 && !(d.IsDir() && st.Mode&unix.S_ISVTX != 0 && st.Uid == 0) {
			add(rel, fmt.Sprintf("writable by group or others (mode %o)", st.Mode&0o7777))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("checking lower layer %q: %w", dir, err)
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w %q: %s", ErrUnsafeLower, dir, strings.Join(bad, "; "))
	}
	return nil
}

// checkAbove calls add for each folder above the absolute path abs that is not
// root's, or that others may write without the sticky bit (which would let them
// rename abs away and put a tree of theirs in its place).
func checkAbove(abs string, add func(p, why string)) error {
	for a := filepath.Dir(abs); ; a = filepath.Dir(a) {
		var st unix.Stat_t
		if err := unix.Stat(a, &st); err != nil {
			return err
		}
		switch {
		case st.Uid != 0:
			add(a, fmt.Sprintf("a folder above it is owned by uid %d", st.Uid))
		case st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0:
			add(a, fmt.Sprintf("a folder above it is writable by others (mode %o)", st.Mode&0o7777))
		}
		if a == "/" {
			break
		}
	}
	return nil
}

// checkAboveDir reports, as ErrUnsafeLower,, the folders above dir that CheckLower would:
// Build runs it before debootstrap, so that a build that could not be published
// fails at once.
func checkAboveDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	var bad []string
	if err := checkAbove(abs, func(p, why string) { bad = append(bad, p+": "+why) }); err != nil {
		return fmt.Errorf("checking the folders above %q: %w", dir, err)
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w %q: %s", ErrUnsafeLower, dir, strings.Join(bad, "; "))
	}
	return nil
}
