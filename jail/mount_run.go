package jail

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/internal/osthread"
	"github.com/brig-sandbox/brig/jail/pid1"
)

// mountIntoSandbox mounts ms into the mount namespace of the sandbox whose init
// is pid, before the run's program is sent to it: the init is filtered by then
// and may mount nothing, so the supervisor does it from outside.
//
// Each read-only source is a pid1.DetachedView here, or where the kernel
// refuses those (detached), a pid1.ReadOnlyView (an overlay of
// its own: a bind would share the host's inodes, and a run's inotify watch
// on a package's files would see every other run that reads them), whose
// empty layer is empty; a writable one, a run's own, is cloned (open_tree)
// and made nosuid and nodev (mount_setattr). Each is then attached from a
// thread that has entered the sandbox's mount namespace: the kernel attaches
// a mount only into its caller's namespace. Entering one needs a thread that
// shares no filesystem state with the others (unshare CLONE_FS), and such a
// thread can't be trusted back: it ends (osthread.Run, which also keeps the
// work off the process's main thread).
//
// A writable mount's source directory is given to the run's host ids first, so
// that the program (1000 inside) can write in it; what it writes is owned by
// the run's host id until its caller takes it over (the package cache makes a
// published layer root's).
func mountIntoSandbox(pid int, ids runIDs, ms []Mount, empty string, detached bool) error {
	if len(ms) == 0 {
		return nil
	}
	ns, err := sandboxNamespace(pid, "mnt")
	if err != nil {
		return err
	}
	defer unix.Close(ns)
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, m := range ms {
		if !filepath.IsAbs(m.Target) || filepath.Clean(m.Target) != m.Target || m.Target == "/" {
			return fmt.Errorf("mount target %q: give a clean absolute path below /", m.Target)
		}
		if !m.Writable {
			view := pid1.DetachedView
			if !detached {
				view = pid1.ReadOnlyView
			}
			fd, err := view(m.Source, empty)
			if err != nil {
				return err
			}
			fds = append(fds, fd)
			continue
		}
		if err := os.Chown(m.Source, ids.UID, ids.GID); err != nil {
			return fmt.Errorf("giving %q to the run: %w", m.Source, err)
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, m.Source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return fmt.Errorf("cloning %q: %w", m.Source, err)
		}
		fds = append(fds, fd)
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
			return fmt.Errorf("setting the flags of %q: %w", m.Source, err)
		}
	}
	// The thread is tainted whatever happens once it has left the shared
	// filesystem state: it always ends.
	return osthread.Run(func() (bool, error) { return true, attachMounts(ns, ms, fds) })
}

// probeDetachedViews makes a pid1.DetachedView of a folder of its own over
// empty (overlayfs refuses one folder as two layers: ELOOP), and undoes it.
func probeDetachedViews(empty string) error {
	dir, err := os.MkdirTemp(filepath.Dir(empty), "probe-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	fd, err := pid1.DetachedView(dir, empty)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// sandboxNamespace opens the namespace of type kind ("mnt") of the sandbox
// whose init is pid, and refuses it if it is this process's own: an init
// that has not yet made its namespaces (a reaper makes all but its pid
// namespace itself, reaperCloneFlags) is still in the host's, where what is
// meant for the sandbox must never go.
func sandboxNamespace(pid int, kind string) (int, error) {
	ns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/%s", pid, kind), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening the sandbox's %s namespace: %w", kind, err)
	}
	var theirs, ours unix.Stat_t
	if err := unix.Fstat(ns, &theirs); err != nil {
		unix.Close(ns)
		return -1, fmt.Errorf("reading the sandbox's %s namespace: %w", kind, err)
	}
	if err := unix.Stat("/proc/self/ns/"+kind, &ours); err != nil {
		unix.Close(ns)
		return -1, fmt.Errorf("reading this process's %s namespace: %w", kind, err)
	}
	if theirs.Dev == ours.Dev && theirs.Ino == ours.Ino {
		unix.Close(ns)
		return -1, fmt.Errorf("the sandbox of init %d is in this process's %s namespace: it has not made its own", pid, kind)
	}
	return ns, nil
}

// attachMounts runs on a locked thread of its own: it enters the sandbox's mount
// namespace (whose root is the sandbox's, after its pivot_root) and moves each
// detached mount fds[i] onto ms[i].Target, making the mount point on the run's
// tmpfs when the rootfs has none.
func attachMounts(ns int, ms []Mount, fds []int) error {
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unsharing the thread's filesystem state: %w", err)
	}
	if err := unix.Setns(ns, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("entering the sandbox's mount namespace: %w", err)
	}
	for i, m := range ms {
		if err := os.MkdirAll(m.Target, 0o755); err != nil {
			return fmt.Errorf("making the mount point %q: %w", m.Target, err)
		}
		if err := unix.MoveMount(fds[i], "", unix.AT_FDCWD, m.Target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("mounting %q at %q: %w", m.Source, m.Target, err)
		}
	}
	return nil
}

// resizeScratch sets the slot's scratch tmpfs to bytes, through a copy of
// its pid 1's fspick context (scratchFD, which an init and a reaper keep
// open). It bounds all the run's writable space, so that filling it ends in
// ENOSPC rather than an OOM kill.
func (s *slot) resizeScratch(bytes int64) error {
	pid := s.cmd.Process.Pid
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	fd, err := unix.PidfdGetfd(pidfd, s.scratchFD, 0)
	if err != nil {
		return fmt.Errorf("taking the scratch context of init %d: %w", pid, err)
	}
	defer unix.Close(fd)
	return resizeContext(fd, bytes)
}

func resizeContext(fd int, bytes int64) error {
	if err := unix.FsconfigSetString(fd, "size", fmt.Sprint(bytes)); err != nil {
		return fmt.Errorf("setting the scratch size to %d: %w", bytes, err)
	}
	if err := unix.FsconfigSetString(fd, "nr_inodes", fmt.Sprint(bytes/pid1.ScratchBytesPerInode)); err != nil {
		return fmt.Errorf("setting the scratch inodes to %d: %w", bytes/pid1.ScratchBytesPerInode, err)
	}
	if err := unix.FsconfigReconfigure(fd); err != nil {
		return fmt.Errorf("resizing the scratch tmpfs to %d bytes: %w", bytes, err)
	}
	return nil
}
