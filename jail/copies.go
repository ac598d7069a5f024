package jail

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/jail/pid1"
	"github.com/brig-sandbox/brig/rootfs"
)

// An interpreter's start is, on the machines brig was measured on, largely
// the first touches of its binary's pages: a process's first touch of each
// page costs it a trap to the hypervisor, about 1.3 to 4.5 us, where a page
// of a 2 MiB mapping costs 0.06 (bench/measure/page_cost.py). node touches
// some 30 MiB of its 99 MB binary at each start, python3 some 3 MiB. The
// page cache of an ext4 file is in 4 KiB pages; that of a tmpfs mounted
// huge=always is in 2 MiB ones, and an executable whose segments lie at
// addresses congruent to their file offsets modulo 2 MiB (node and python3
// are linked so) is then mapped 2 MiB at a time. So the process keeps a copy
// of each interpreter on a tmpfs of its own, never attached to any mount
// namespace (fsmount: no mount table shows it, and it goes with the last
// descriptor of it), and each sandbox's init binds the copies of its root's
// interpreters read-only, nosuid and nodev over their own files
// (pid1.PrepareSpec.Copies; the inits' step "interpreter copies"), from an
// overlay of its own over the tmpfs's folder of copies, as the host's
// folders are shown (pid1.ReadOnlyView): a run's inotify watch or flock on
// its interpreter is then on an inode of its sandbox's alone, where a bind
// of the tmpfs's file would have let it watch every other sandbox's starts
// and lock them (TestRunsCannotWatchSharedFiles). An overlay's file is
// mapped from its layer's pages, the huge ones. The file a run sees has the
// same bytes, mode, owner and times; it differs in its device and inode
// numbers and in its line of /proc/self/mountinfo. `python3
// bench/measure/huge_copy.py` gives the figures.
//
// A copy is checked against its source's identity (device, inode, size,
// times, mode, owner) for a sandbox's preparation, at most copiesRecheck
// before it, and made again once the source changes (a package upgrade
// renames a new file over it), so that no sandbox prepared after that runs
// the old interpreter. A pooled sandbox prepared before it, which bound the
// old copy (or holds the old interpreter started), is given to no run: took
// compares its copies with its root's when a run takes it, and discards it
// if they differ; a Python zygote started before it is replaced
// (zygoteFor). So a run started more than copiesRecheck after an upgrade
// runs the new interpreter.

// copyMinSize is the smallest interpreter worth a copy: one that holds no
// whole 2 MiB page gains nothing.
const copyMinSize = 4 << 20

// copyStaleAfter is how long a replaced copy stays for the inits that were
// given its name before it was replaced.
const copyStaleAfter = time.Minute

// copies is the process's tmpfs of interpreter copies, which its Launchers
// share (processCopies): a copy depends on its interpreter's file alone.
type copies struct {
	// mnt is the detached tmpfs's root (fsmount), passed as pid1.CopiesFD:
	// the copies in its folder pid1.CopiesFiles, and pid1.CopiesEmpty, the
	// empty second layer of the inits' overlays of that folder.
	mnt *os.File

	mu    sync.Mutex
	files map[string]*interpCopy // by the interpreter's resolved host path
	stale []staleCopy
	seq   int
	off   map[string]string // host paths not copied, and why (logged once)
	// failed are the files whose copy failed, as they were then: not tried
	// again (a node's copy is 99 MB written) until they change.
	failed map[string]fileID
	// broken, once set, is why no copy is made any more (the tmpfs gave
	// one no huge pages).
	broken error
}

var (
	errNoHugePages = errors.New("the tmpfs gave the copy no huge pages (see " + shmemEnabled + ")")
	errChanged     = errors.New("the file changed while it was copied")
)

type interpCopy struct {
	name   string // in the tmpfs
	target string // the interpreter's resolved path inside the root
	id     fileID
}

type staleCopy struct {
	name  string
	size  int64
	since time.Time
}

// CopiesStats is what the interpreters' copies hold in memory (the service's,
// charged to its cgroup): how many there are and their bytes, the replaced
// ones kept for the sandboxes given them (copyStaleAfter) included.
type CopiesStats struct {
	Copies int
	Bytes  int64
}

// CopiesStats says what the interpreters' copies of the Launcher's process
// hold; zero without copies.
func (l *Launcher) CopiesStats() CopiesStats {
	if l.copies == nil {
		return CopiesStats{}
	}
	c := l.copies
	c.mu.Lock()
	defer c.mu.Unlock()
	var st CopiesStats
	for _, f := range c.files {
		st.Copies++
		st.Bytes += f.id.size
	}
	for _, s := range c.stale {
		st.Copies++
		st.Bytes += s.size
	}
	return st
}

// fileID is what tells that a file was replaced or changed.
type fileID struct {
	dev, ino   uint64
	size       int64
	mtim, ctim unix.Timespec
	mode       uint32
	uid, gid   uint32
}

func idOf(st *unix.Stat_t) fileID {
	return fileID{st.Dev, st.Ino, st.Size, st.Mtim, st.Ctim, st.Mode, st.Uid, st.Gid}
}

var (
	copiesOnce sync.Once
	theCopies  *copies
	copiesErr  error
)

// processCopies is the process's tmpfs of copies, made at its first use and
// kept until the process exits (a detached mount: nothing to unmount), or
// why there is none.
func processCopies() (*copies, error) {
	copiesOnce.Do(func() { theCopies, copiesErr = newCopies() })
	return theCopies, copiesErr
}

// shmemEnabled is the host's setting of transparent huge pages for tmpfs.
const shmemEnabled = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"

// copiesDenied says why this host's tmpfs gives no huge pages (nil when it
// may): without them a copy would cost memory and save nothing.
func copiesDenied() error {
	if b, err := os.ReadFile(shmemEnabled); err != nil {
		return fmt.Errorf("no transparent huge pages: %w", err)
	} else if bytes.Contains(b, []byte("[deny]")) {
		return fmt.Errorf("transparent huge pages are denied to tmpfs (%s)", shmemEnabled)
	}
	return nil
}

// CheckInterpreterCopies says whether the interpreters can run from copies on
// huge pages (copies.go). It always passes: without them they run from
// their own files.
func CheckInterpreterCopies() Check {
	c := Check{Name: "interpreter copies", OK: true,
		Detail: "tmpfs takes huge pages: the interpreters run from copies on them (interpreter_copies)"}
	if err := copiesDenied(); err != nil {
		c.Warn = true
		c.Detail = err.Error() + ": the interpreters run from their own files, where a node start takes about 1.3 times the CPU"
		c.Hint = "set " + shmemEnabled + " to anything but deny (its default, never, lets a tmpfs mounted huge=always have them), " +
			"or interpreter_copies = false to say that you mean it"
	}
	return c
}

// newCopies makes the tmpfs, or says why it can't (copiesDenied).
func newCopies() (*copies, error) {
	if err := copiesDenied(); err != nil {
		return nil, err
	}
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsopen tmpfs: %w", err)
	}
	defer unix.Close(fs)
	for _, kv := range [][2]string{{"huge", "always"}, {"mode", "0755"}, {"nr_inodes", "64"}} {
		if err := unix.FsconfigSetString(fs, kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("tmpfs option %s=%s: %w", kv[0], kv[1], err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return nil, fmt.Errorf("making the tmpfs: %w", err)
	}
	// Not noexec: the inits' binds of a copy take its mount's flags, and the
	// copy is exec'd.
	m, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return nil, fmt.Errorf("fsmount: %w", err)
	}
	mnt := os.NewFile(uintptr(m), "brig-interpreter-copies")
	for _, d := range []string{pid1.CopiesFiles, pid1.CopiesEmpty} {
		if err := unix.Mkdirat(m, d, 0o755); err != nil {
			mnt.Close()
			return nil, fmt.Errorf("making the tmpfs's folder %s: %w", d, err)
		}
	}
	return &copies{mnt: mnt, files: map[string]*interpCopy{}, off: map[string]string{}, failed: map[string]fileID{}}, nil
}

// copiesRecheck is how often a root's interpreters are looked at again for
// a sandbox's preparation: resolving their links and checking their files
// took 50 us a preparation, finding what was found 1.2 us
// (BenchmarkCopiesFor), and an interpreter that changes is copied again at
// most this long after.
const copiesRecheck = time.Second

// copiesFor is what an init of a sandbox of root binds: the copies of the
// interpreters of root and of every language whose root is the same (a cold
// sandbox serves each of them), as found at most copiesRecheck ago.
func (l *Launcher) copiesFor(root *rootfs.Root) []pid1.Copy {
	if l.copies == nil {
		return nil
	}
	rk := rootKey(root)
	key := rk + "\x00" + root.Interpreter
	l.copiesMu.Lock()
	defer l.copiesMu.Unlock()
	if f, ok := l.copiesFound[key]; ok && time.Since(f.at) < copiesRecheck {
		return f.copies
	}
	interps := []string{root.Interpreter}
	for _, lang := range rootfs.Languages {
		if r, err := l.cfg.Rootfs.Root(lang); err == nil && rootKey(r) == rk && !slices.Contains(interps, r.Interpreter) {
			interps = append(interps, r.Interpreter)
		}
	}
	cps := l.copies.of(l.log, root, interps)
	// In one order whichever language asks: a cold sandbox prepared for one
	// language's root serves another's (pool.go's took compares them).
	slices.SortFunc(cps, func(a, b pid1.Copy) int { return strings.Compare(a.Target, b.Target) })
	if l.copiesFound == nil {
		l.copiesFound = map[string]copiesFound{}
	}
	l.copiesFound[key] = copiesFound{time.Now(), cps}
	return cps
}

// copiesFound is what copiesFor found for a root, and when.
type copiesFound struct {
	at     time.Time
	copies []pid1.Copy
}

// of returns the copies of interps (paths inside root) to bind, making or
// remaking each when needed; an interpreter without one (logged once a
// path) is left out.
func (c *copies) of(log *slog.Logger, root *rootfs.Root, interps []string) []pid1.Copy {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropStale()
	var out []pid1.Copy
	for _, p := range interps {
		if cp := c.one(log, root, p); cp != nil && !slices.Contains(out, *cp) {
			out = append(out, *cp)
		}
	}
	return out
}

// one is of for a single interpreter, with c.mu held.
func (c *copies) one(log *slog.Logger, root *rootfs.Root, interp string) *pid1.Copy {
	if c.broken != nil {
		return nil
	}
	host, target, err := resolveInRoot(root, interp)
	if err != nil {
		c.skip(log, interp, err.Error())
		return nil
	}
	var st unix.Stat_t
	if err := unix.Stat(host, &st); err != nil {
		c.skip(log, host, err.Error())
		return nil
	}
	if cur := c.files[host]; cur != nil && cur.id == idOf(&st) && cur.target == target {
		return &pid1.Copy{Name: cur.name, Target: cur.target}
	}
	if st.Size < copyMinSize {
		c.skip(log, host, fmt.Sprintf("%d bytes: too small to gain from huge pages", st.Size))
		return nil
	}
	if f, ok := c.failed[host]; ok && f == idOf(&st) {
		return nil
	}
	c.seq++
	name := fmt.Sprintf("%s-%d", filepath.Base(host), c.seq)
	id, err := c.copyFile(host, name)
	if err != nil {
		unix.Unlinkat(int(c.mnt.Fd()), c.path(name), 0)
		switch {
		case errors.Is(err, errNoHugePages):
			c.broken = err
		case !errors.Is(err, errChanged): // tried again at the next preparation
			c.failed[host] = idOf(&st)
		}
		c.skip(log, host, err.Error())
		return nil
	}
	delete(c.failed, host)
	if old := c.files[host]; old != nil {
		c.stale = append(c.stale, staleCopy{old.name, old.id.size, time.Now()})
		log.Info("the interpreter changed: copied again", "interpreter", host, "copy", name)
	} else {
		log.Debug("the interpreter's copy on huge pages", "interpreter", host, "target", target, "bytes", id.size)
	}
	delete(c.off, host)
	c.files[host] = &interpCopy{name: name, target: target, id: id}
	return &pid1.Copy{Name: name, Target: target}
}

// path is the copy name's path in the tmpfs.
func (c *copies) path(name string) string { return pid1.CopiesFiles + "/" + name }

func (c *copies) skip(log *slog.Logger, path, why string) {
	if c.off[path] != why {
		c.off[path] = why
		log.Info("an interpreter runs from its own file, not a copy on huge pages", "interpreter", path, "why", why)
	}
}

// dropStale removes the copies replaced more than copyStaleAfter ago.
func (c *copies) dropStale() {
	keep := c.stale[:0]
	for _, s := range c.stale {
		if time.Since(s.since) < copyStaleAfter {
			keep = append(keep, s)
		} else {
			unix.Unlinkat(int(c.mnt.Fd()), c.path(s.name), 0)
		}
	}
	c.stale = keep
}

// copyFile copies host to name with its mode (less set-id bits), owner and
// times, and returns the identity host had: the same before and after the
// copy, or the copy is refused (the file was changed meanwhile). The first
// copy also checks that the tmpfs gives it huge pages.
func (c *copies) copyFile(host, name string) (fileID, error) {
	src, err := os.Open(host)
	if err != nil {
		return fileID{}, err
	}
	defer src.Close()
	var before, after unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &before); err != nil {
		return fileID{}, err
	}
	fd, err := unix.Openat(int(c.mnt.Fd()), c.path(name), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o700)
	if err != nil {
		return fileID{}, err
	}
	dst := os.NewFile(uintptr(fd), name)
	defer dst.Close()
	if _, err := io.Copy(dst, src); err != nil {
		return fileID{}, fmt.Errorf("copying: %w", err)
	}
	if err := errors.Join(
		unix.Fchown(fd, int(before.Uid), int(before.Gid)),
		unix.Fchmod(fd, before.Mode&0o777),
		unix.UtimesNanoAt(int(c.mnt.Fd()), c.path(name), []unix.Timespec{before.Atim, before.Mtim}, 0),
	); err != nil {
		return fileID{}, fmt.Errorf("setting the copy's owner, mode and times: %w", err)
	}
	if err := unix.Stat(host, &after); err != nil {
		return fileID{}, err
	}
	if idOf(&before) != idOf(&after) {
		return fileID{}, errChanged
	}
	if len(c.files) == 0 && len(c.stale) == 0 {
		if ok, err := pmdMapped(int(c.mnt.Fd()), c.path(name), before.Size); err != nil {
			return fileID{}, fmt.Errorf("checking the copy's pages: %w", err)
		} else if !ok {
			return fileID{}, errNoHugePages
		}
	}
	return idOf(&before), nil
}

// touched keeps pmdMapped's read of the copy from being optimised away.
var touched byte

// pmdMapped reports whether the first whole 2 MiB of the file name in dir
// maps as one huge page: what the kernel counts as ShmemPmdMapped in a
// mapping of it.
func pmdMapped(dir int, name string, size int64) (bool, error) {
	const huge = 2 << 20
	n := int(min(size, 2*huge))
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	b, err := unix.Mmap(fd, 0, n, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return false, err
	}
	defer unix.Munmap(b)
	start := uintptr(unsafe.Pointer(&b[0]))
	at := (start + huge - 1) &^ (huge - 1)
	if at+huge > start+uintptr(n) {
		return false, nil
	}
	touched += b[at-start] // the first touch maps it
	smaps, err := os.Open("/proc/thread-self/smaps")
	if err != nil {
		return false, err
	}
	defer smaps.Close()
	// The mapping's header line, then its fields ("Name: value kB") until
	// the next mapping's header.
	head := strconv.FormatUint(uint64(start), 16) + "-"
	in := false
	sc := bufio.NewScanner(smaps)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 0:
		case !strings.HasSuffix(f[0], ":"):
			in = strings.HasPrefix(f[0], head)
		case in && f[0] == "ShmemPmdMapped:" && len(f) > 1:
			return f[1] != "0", nil
		}
	}
	return false, sc.Err()
}

// resolveInRoot follows p's symbolic links as the root shows them (a
// folder of root.Binds is its host folder; the rest is root.Lower) and
// returns the host file and its path inside the root.
func resolveInRoot(root *rootfs.Root, p string) (host, inRoot string, err error) {
	hostOf := func(q string) string {
		best, h := "", filepath.Join(root.Lower, q)
		for _, b := range root.Binds {
			if (q == b.Target || strings.HasPrefix(q, b.Target+"/")) && len(b.Target) > len(best) {
				best, h = b.Target, b.Source+q[len(b.Target):]
			}
		}
		return h
	}
	if !filepath.IsAbs(p) {
		return "", "", fmt.Errorf("%q is not an absolute path", p)
	}
	rest := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	cur := "/"
	for links := 0; len(rest) > 0; {
		next := filepath.Join(cur, rest[0])
		rest = rest[1:]
		h := hostOf(next)
		fi, err := os.Lstat(h)
		if err != nil {
			return "", "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > 40 {
			return "", "", fmt.Errorf("%q: too many symbolic links", p)
		}
		dest, err := os.Readlink(h)
		if err != nil {
			return "", "", err
		}
		if !filepath.IsAbs(dest) {
			dest = filepath.Join(cur, dest)
		}
		rest = append(strings.Split(strings.TrimPrefix(filepath.Clean(dest), "/"), "/"), rest...)
		cur = "/"
	}
	h := hostOf(cur)
	fi, err := os.Stat(h)
	if err != nil {
		return "", "", err
	}
	if !fi.Mode().IsRegular() {
		return "", "", fmt.Errorf("%q is not a regular file", cur)
	}
	return h, cur, nil
}
