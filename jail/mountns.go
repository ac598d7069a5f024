package jail

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/rootfs"
)

// A reaper makes its sandbox's mount namespace with unshare, which copies the
// namespace it is in: every mount of it, each of which the reaper then makes
// private and detaches again at its pivot_root. On a host of many mounts (a
// container host's overlays, a node's secrets) that is most of a sandbox's
// making: with 500 mounts more than this host's 22, a warm Python run cost
// about 4.7 ms more CPU (README, Warm starts). So the Launcher makes, once,
// a template: a copy of its own mount namespace that keeps only the mounts
// through which the paths a root's build reads resolve (the state directory's
// scratch, empty layer and skeleton, the rootfs's lower layers and the host
// folders they show) and detaches the others; a reaper enters it before its
// unshare (reaper.MountNSFD). Those paths resolve through the same mounts as in
// the supervisor's namespace, by name, so a skeleton published later is found
// as it is.

// templatePaths are the host paths a reaper's root build reads for the
// Launcher's roots.
func (l *Launcher) templatePaths() []string {
	paths := []string{l.scratch, l.empty}
	for _, lang := range rootfs.Languages {
		root, err := l.cfg.Rootfs.Root(lang)
		if err != nil {
			continue
		}
		paths = append(paths, root.Lower)
		if root.View != nil {
			paths = append(paths, root.View.Source)
		}
		for _, b := range root.Binds {
			paths = append(paths, b.Source)
		}
	}
	return paths
}

// newMountTemplate makes the template of a reaper's mount namespace for
// paths, on a thread of its own that unshares its mount namespace and then
// exits (the namespace stays while the returned descriptor is open).
func newMountTemplate(paths []string) (f *os.File, kept int, err error) {
	onSpareThread(func() { f, kept, err = buildMountTemplate(paths) })
	return f, kept, err
}

// onSpareThread runs f on a locked thread other than the process's main one,
// and never gives the thread back (f may leave it in a namespace of its own):
// it ends with f's goroutine.
func onSpareThread(f func()) {
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread, whose namespaces /proc/self shows for the
			// whole process: held here, it can't take the goroutine
			// started now.
			onSpareThread(f)
			runtime.UnlockOSThread()
			close(done)
			return
		}
		defer close(done)
		f()
	}()
	<-done
}

// buildMountTemplate is newMountTemplate on its thread; kept is how many mounts
// the template holds.
func buildMountTemplate(paths []string) (_ *os.File, kept int, _ error) {
	if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
		return nil, 0, fmt.Errorf("unsharing a mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, 0, fmt.Errorf("making the mounts private: %w", err)
	}
	// Opened and read before any detach: /proc is one of the mounts that go.
	fd, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, err
	}
	f := os.NewFile(uintptr(fd), "brig-mount-template")
	mounts, err := readMountInfo("/proc/thread-self/mountinfo")
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	keep := map[int]bool{}
	byID := map[int]mountEntry{}
	for _, m := range mounts {
		byID[m.id] = m
	}
	for _, p := range paths {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			f.Close()
			return nil, 0, fmt.Errorf("resolving %s: %w", p, err)
		}
		owner := -1
		for _, m := range mounts { // in mount order: the last of a mount point is on top
			if within(real, m.point) && (owner < 0 || len(m.point) >= len(byID[owner].point)) {
				owner = m.id
			}
		}
		for id := owner; id >= 0 && !keep[id]; {
			keep[id] = true
			parent, ok := byID[byID[id].parent]
			if !ok {
				break
			}
			id = parent.id
		}
	}
	// Every mount not kept, the last mounted first: a mount stacked on another
	// at the same point is the one its path reaches. One whose point an
	// earlier detach took away is gone already (EINVAL: no mount there;
	// ENOENT: no path).
	for i := len(mounts) - 1; i >= 0; i-- {
		m := mounts[i]
		if keep[m.id] {
			continue
		}
		if err := unix.Unmount(m.point, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			f.Close()
			return nil, 0, fmt.Errorf("detaching %s: %w", m.point, err)
		}
	}
	return f, len(keep), nil
}

// mountEntry is a line of /proc/PID/mountinfo: the mount's id, its parent's
// and its mount point.
type mountEntry struct {
	id, parent int
	point      string
}

func readMountInfo(path string) ([]mountEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountInfo(f, path)
}

// parseMountInfo reads a mount table from f, named path in errors.
func parseMountInfo(f io.Reader, path string) ([]mountEntry, error) {
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			return nil, fmt.Errorf("%s: a line of %d fields", path, len(fields))
		}
		id, err1 := strconv.Atoi(fields[0])
		parent, err2 := strconv.Atoi(fields[1])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: ids %q %q", path, fields[0], fields[1])
		}
		out = append(out, mountEntry{id: id, parent: parent, point: unescapeMountPoint(fields[4])})
	}
	return out, sc.Err()
}

// unescapeMountPoint undoes mountinfo's octal escapes (\040 for a space,
// \011, \012, \134).
func unescapeMountPoint(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// within reports whether the clean absolute path p is dir or inside it.
func within(p, dir string) bool {
	return dir == "/" || p == dir || strings.HasPrefix(p, dir+"/")
}
