package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultLockDir holds the lock files of cgroup parents; where it does not
// exist, os.TempDir() does.
const DefaultLockDir = "/run/lock"

// ErrParentLocked is wrapped by LockParent's error when another process owns
// the parent.
var ErrParentLocked = errors.New("the cgroup parent is locked by another process")

// ParentLock is the lock that makes one process the only owner of a cgroup
// parent. It lasts until Close, or until the process exits.
type ParentLock struct {
	f *os.File
}

// Close releases the lock. The lock file stays: removing it could let two
// services lock two inodes of one path.
func (l *ParentLock) Close() error { return l.f.Close() }

// Path is the lock file's path.
func (l *ParentLock) Path() string { return l.f.Name() }

// ParentLockPath is the lock file of parent in dir (empty: DefaultLockDir, or
// os.TempDir() where that does not exist).
func ParentLockPath(dir, parent string) string {
	if dir == "" {
		dir = DefaultLockDir
		if _, err := os.Stat(dir); err != nil {
			dir = os.TempDir()
		}
	}
	return filepath.Join(dir, "brig-cgroup-"+strings.ReplaceAll(parent, "/", "_")+".lock")
}

// LockParent takes, for the life of the returned lock, the lock that makes this
// process the only owner of the cgroup parent: a second service on the same
// parent would sweep the first's runs at its start, and remove the parent under
// it at its stop. dir holds the lock files; empty means DefaultLockDir, or
// os.TempDir() where that does not exist. The caller keeps the lock until it
// exits (a lock the GC finalises is released).
func LockParent(dir, parent string) (*ParentLock, error) {
	path := ParentLockPath(dir, parent)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: another brig serve owns the cgroup parent %q (lock %s): stop it first, or give this one another --cgroup-parent", ErrParentLocked, parent, path)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return &ParentLock{f: f}, nil
}
