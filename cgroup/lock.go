package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/internal/safedir"
)

// DefaultLockDir holds the lock files of cgroup parents, made by the first
// lock. It is root's alone, as /run/brig/ids is: in /run/lock, which anyone
// may write, as until 2026-12-06, another user could hold a parent's lock and
// so keep brig from starting, or put a symbolic link where root then made a
// file (the review of 2026-12-06).
const DefaultLockDir = "/run/brig/locks"

// ErrParentLocked is wrapped by LockParent's error when another process owns
// the parent.
var ErrParentLocked = errors.New("the cgroup parent is locked by another process")

// ParentLock is the lock that makes one process the only owner of a cgroup
// parent, and of every group under it. It lasts until Close, or until the
// process exits.
type ParentLock struct {
	// files are the parent's lock, held exclusively, then its ancestors',
	// held shared.
	files []*os.File
}

// Close releases the lock. The lock files stay: removing one could let two
// services lock two inodes of one path.
func (l *ParentLock) Close() error {
	var errs []error
	for _, f := range l.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// Path is the lock file's path.
func (l *ParentLock) Path() string { return l.files[0].Name() }

// ParentLockPath is the lock file of parent in dir (empty: DefaultLockDir).
// The parent is escaped as a URL's path segment is, a "/" as %2F, so that no
// two parents share a file: with a "/" as "_", as before 2026-12-06, a service
// on "a_b" was refused while one ran on "a/b".
func ParentLockPath(dir, parent string) string {
	if dir == "" {
		dir = DefaultLockDir
	}
	return filepath.Join(dir, "brig-cgroup-"+url.PathEscape(parent)+".lock")
}

// lockDir makes dir (0755) where it is missing and refuses one that another
// user than this process's owns or may write to, whose files that user
// could hold or replace.
func lockDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("making the lock folder: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("checking the lock folder: %w", err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Uid == 0 && os.Geteuid() != 0 && st.Mode&0o022 == 0 {
		return fmt.Errorf("the lock folder %s is root's: run brig as root: %w", dir, fs.ErrPermission)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return fmt.Errorf("the lock folder %s is a symbolic link: remove it once no brig process runs, and brig makes it again", dir)
	}
	if err := safedir.Check(dir); err != nil {
		return fmt.Errorf("the lock folder: %w: remove it once no brig process runs, and brig makes it again", err)
	}
	return nil
}

// LockParent takes, for the life of the returned lock, the lock that makes this
// process the only owner of the cgroup parent: a second service on the same
// parent would sweep the first's runs at its start, and remove the parent under
// it at its stop. So would a service on an ancestor of the parent ("brig" for
// "brig/a"), which sweeps and removes the groups under it, and the parent with
// them: a parent's lock is taken exclusively and each ancestor's shared, so
// that services on siblings ("brig/a", "brig/b") run side by side, but never
// one on a parent and another on a group within it. dir holds the lock files;
// empty means DefaultLockDir, made where it is missing. The
// caller keeps the lock until it exits (a lock the GC finalises is released).
func LockParent(dir, parent string) (*ParentLock, error) {
	return lockParent(dir, parent, unix.LOCK_EX)
}

// ShareParent takes the parent's lock and its ancestors' shared, for a process
// that makes run groups beside others of its kind but must not share them
// with an owner (brig run --local): an owner's sweep at its start, or its
// removal of the parent at its stop, would kill its runs. Either is refused
// while the other holds the lock.
func ShareParent(dir, parent string) (*ParentLock, error) {
	return lockParent(dir, parent, unix.LOCK_SH)
}

func lockParent(dir, parent string, mode int) (*ParentLock, error) {
	if parent == "" {
		return nil, errors.New("locking the cgroup parent: no parent named")
	}
	if dir == "" {
		dir = DefaultLockDir
	}
	if err := lockDir(dir); err != nil {
		return nil, fmt.Errorf("locking the cgroup parent: %w", err)
	}
	l := &ParentLock{}
	for p := parent; p != "." && p != "/"; p = filepath.Dir(p) {
		path := ParentLockPath(dir, p)
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("opening the lock %s: %w", path, err)
		}
		l.files = append(l.files, f)
		if err := unix.Flock(int(f.Fd()), mode|unix.LOCK_NB); err != nil {
			l.Close()
			switch {
			case !errors.Is(err, unix.EWOULDBLOCK):
				return nil, fmt.Errorf("locking %s: %w", path, err)
			case p == parent && mode == unix.LOCK_SH:
				return nil, fmt.Errorf("%w: a brig serve owns the cgroup parent %q (lock %s): give this one another --cgroup-parent, or run through the service", ErrParentLocked, parent, path)
			case p == parent:
				return nil, fmt.Errorf("%w: another brig serve owns the cgroup parent %q or a group within it, or a brig run or bench --local uses it (lock %s): stop it first, or give this one another --cgroup-parent", ErrParentLocked, parent, path)
			default:
				return nil, fmt.Errorf("%w: a brig serve owns the cgroup parent %q, which holds %q (lock %s): stop it first, or give this one a --cgroup-parent outside it", ErrParentLocked, p, parent, path)
			}
		}
		mode = unix.LOCK_SH
	}
	return l, nil
}

// ParentHeld reports whether a process other than this one holds the lock of
// parent in dir (empty: DefaultLockDir), shared or not, as /proc/locks lists
// it: a brig process of this build that owns or shares that parent. A holder
// that this process's /proc does not show (in a pid namespace it can't see,
// as a container's own /proc can't see the host's) does not count.
func ParentHeld(dir, parent string) bool {
	write, read := lockHolders(ParentLockPath(dir, parent))
	return write || read
}

// legacyLockDir is where brig kept the parents' locks before 2026-12-06, a
// "/" of the parent's as "_".
const legacyLockDir = "/run/lock"

// OlderOwner is the refusal, wrapping ErrParentLocked, of parent where an
// older brig service (before 2026-12-06, whose locks were in /run/lock, which
// this build's do not see) owns it or a group above it, or also, for a service
// (owner), holds parent's lock at all (a service on a group within it, whose
// parent this one's start would sweep): each would kill the other's runs (the
// upgrade probe of 2026-12-06). Only a file of root's counts, since anyone may
// make one in /run/lock and hold it; and only a holder this process's /proc
// shows.
func OlderOwner(parent string, owner bool) error {
	for p := parent; p != "." && p != "/"; p = filepath.Dir(p) {
		path := filepath.Join(legacyLockDir, "brig-cgroup-"+strings.ReplaceAll(p, "/", "_")+".lock")
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != 0 {
			continue
		}
		if write, read := lockHolders(path); write || owner && read && p == parent {
			return fmt.Errorf("%w: an older brig serve (before 2026-12-06) uses the cgroup parent %q (its lock %s, which this brig's in %s do not see): stop it first", ErrParentLocked, p, path, DefaultLockDir)
		}
	}
	return nil
}

// lockHolders says whether a process other than this one holds path's flock
// exclusively (write) or shared (read), from /proc/locks.
func lockHolders(path string) (write, read bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return false, false
	}
	key := fmt.Sprintf("%02x:%02x:%d", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)), st.Ino)
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return false, false
	}
	self := strconv.Itoa(os.Getpid())
	for _, line := range strings.Split(string(b), "\n") {
		// "1: FLOCK  ADVISORY  WRITE 9149 fe:00:761862 0 EOF"; a waiter's
		// line has "->" after its number.
		f := strings.Fields(line)
		if len(f) > 1 && f[1] == "->" {
			f = append(f[:1], f[2:]...)
		}
		if len(f) >= 6 && f[1] == "FLOCK" && f[5] == key && f[4] != self {
			write = write || f[3] == "WRITE"
			read = read || f[3] == "READ"
		}
	}
	return write, read
}
