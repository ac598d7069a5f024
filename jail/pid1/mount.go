package pid1

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// The layout of the scratch tmpfs, relative to PrepareSpec.Scratch. Everything the
// run can write lives on it, so its size bounds all of it.
const (
	scratchUpper = "upper" // the overlay's upper layer
	scratchWork  = "work"  // the overlay's work directory
	scratchRoot  = "root"  // where the overlay is mounted and then pivoted into
	scratchShm   = "shm"   // bound at /dev/shm
	// scratchLower is where the rootfs is bound before the overlay is mounted,
	// so that the overlay's options (which /proc/self/mountinfo shows the run)
	// name only these relative paths, never the host's state directory.
	scratchLower = "lower"
	// scratchEmpty is the empty second layer of each ReadOnlyView of a bind.
	scratchEmpty = "empty"
	// scratchView is where a View's overlay is mounted before its folder is
	// bound into the root.
	scratchView = "view"
)

// MaskedProcFiles are overmounted with the run's /dev/null: kernel memory, key,
// timer and scheduler internals a program has no use for (runc's and Docker's
// masked files under /proc), the kernel's symbol addresses, and the host's
// per-CPU interrupt counts, a side channel on what other tenants do. Also what
// tells a run about the host and that no program needs: the kernel's command
// line (a VM's may hold its agent's ports and flags) and its configuration,
// the count of cgroups (how many sandboxes there are), and the host's
// open-file count, which would let a run steer itself to the host-wide limit.
// (Each is a mount more per sandbox; the host-wide counters programs do read,
// loadavg, stat, meminfo, stay.)
var MaskedProcFiles = []string{"kcore", "keys", "timer_list", "timer_stats", "sched_debug", "kallsyms", "latency_stats", "interrupts",
	"cmdline", "config.gz", "cgroups", "sys/fs/file-nr"}

// MaskedProcDirs are overmounted with an empty read-only tmpfs: the sound,
// ACPI and SCSI hardware trees (runc's and Docker's masked directories).
var MaskedProcDirs = []string{"asound", "acpi", "scsi"}

// readOnlyProc are rebound read-only: the kernel's tunables, hardware state and
// the magic SysRq trigger.
var readOnlyProc = []string{"sys", "irq", "bus", "fs", "sysrq-trigger"}

// DevptsMax bounds the ptys a run may open (the reaper's too: reaper.c).
const DevptsMax = 64

// devNodes are the only devices a run has: character devices of the host's numbers.
var devNodes = []struct {
	name         string
	major, minor uint32
}{
	{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0},
}

// makePrivate stops mount events propagating between this namespace and the host's,
// in both directions, before anything is mounted.
func makePrivate() error {
	return unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
}

// mountScratch mounts the run's tmpfs with the new mount API and keeps a
// reconfiguration context of it (st.scratchFD, reported to the parent in the ready
// message), through which the parent can resize it later, once the root is
// pivoted and the init filtered. Close-on-exec: the program never has it.
func mountScratch(st *initState) error {
	s := &st.prep
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen tmpfs: %w", err)
	}
	defer unix.Close(fsfd)
	for _, kv := range [][2]string{{"size", fmt.Sprint(s.ScratchBytes)}, {"nr_inodes", fmt.Sprint(s.ScratchBytes / ScratchBytesPerInode)}, {"mode", "0755"}} {
		if err := unix.FsconfigSetString(fsfd, kv[0], kv[1]); err != nil {
			return fmt.Errorf("setting tmpfs %s=%s: %w", kv[0], kv[1], err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return fmt.Errorf("creating tmpfs: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return fmt.Errorf("fsmount tmpfs: %w", err)
	}
	defer unix.Close(mfd)
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, s.Scratch, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mounting tmpfs at %q: %w", s.Scratch, err)
	}
	if st.scratchFD, err = unix.Fspick(unix.AT_FDCWD, s.Scratch, unix.FSPICK_CLOEXEC); err != nil {
		return fmt.Errorf("fspick the scratch tmpfs: %w", err)
	}
	for _, d := range []string{scratchUpper, scratchWork, scratchRoot, scratchLower, scratchEmpty, scratchView} {
		if err := os.Mkdir(filepath.Join(s.Scratch, d), 0o755); err != nil {
			return err
		}
	}
	shm := filepath.Join(s.Scratch, scratchShm)
	if err := os.Mkdir(shm, 0o777); err != nil {
		return err
	}
	return unix.Chmod(shm, 0o1777) // os.Chmod would drop the sticky bit
}

// mountOverlay mounts the root: the rootfs, bound into the scratch tmpfs, under
// the tmpfs's upper layer. The options name the layers relative to the scratch
// directory (the init's working directory for the call), so that the mount
// table a run reads says nothing about where the host keeps them.
func mountOverlay(st *initState) error {
	s := &st.prep
	if err := unix.Mount(s.Lower, filepath.Join(s.Scratch, scratchLower), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding the rootfs %q into the scratch tmpfs: %w", s.Lower, err)
	}
	if err := unix.Chdir(s.Scratch); err != nil {
		return err
	}
	// xino=on: the layers are on different filesystems (the rootfs's and the
	// tmpfs), and without it a directory's st_ino from stat differs from the
	// d_ino readdir gives (CPython's test_os.TestScandir.test_attributes fails).
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,xino=on", scratchLower, scratchUpper, scratchWork)
	if err := unix.Mount("overlay", scratchRoot, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mounting overlay at %q (%s, from %q): %w", filepath.Join(s.Scratch, scratchRoot), opts, s.Lower, err)
	}
	return nil
}

// bindReadOnly binds src, with every mount below it, at dst and makes the whole
// tree read-only, nosuid and nodev (plus extra, MOUNT_ATTR_* flags): a bind takes
// its source's flags, and mount_setattr with AT_RECURSIVE is what applies them to
// the submounts too in one call.
func bindReadOnly(src, dst string, extra uint64) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("binding %q at %q: %w", src, dst, err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | extra}
	if err := unix.MountSetattr(unix.AT_FDCWD, dst, unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("making %q read-only: %w", dst, err)
	}
	return nil
}

// mountBinds mounts the rootfs's View of a host folder's parts (MountView),
// then each of its other host folders (Binds) as a ReadOnlyView of its own.
// Their empty layer is Empty, bound on the scratch tmpfs and named relative
// to the scratch directory, the working directory here, so that the mount
// table names no host path but the folders' own; and it is on the host's
// filesystem, usually the folders' too, on which the views need no xino (see
// ReadOnlyView).
func mountBinds(st *initState) error {
	s := &st.prep
	if len(s.Binds) == 0 && s.View == nil {
		return nil
	}
	if err := unix.Chdir(s.Scratch); err != nil {
		return err
	}
	root := filepath.Join(s.Scratch, scratchRoot)
	if v := s.View; v != nil {
		if err := MountView(v, scratchLower, scratchView, filepath.Join(root, v.Target)); err != nil {
			return err
		}
	}
	if len(s.Binds) == 0 {
		return nil
	}
	if err := unix.Mount(s.Empty, scratchEmpty, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding the empty layer %q: %w", s.Empty, err)
	}
	for _, b := range s.Binds {
		fd, err := ReadOnlyView(b.Source, scratchEmpty)
		if err != nil {
			return err
		}
		dst := filepath.Join(root, b.Target)
		err = unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("mounting a view of %q at %q: %w", b.Source, dst, err)
		}
	}
	return nil
}

// mountCopies binds each interpreter's copy (PrepareSpec.Copies) over the
// interpreter's own file in the root, read-only, nosuid and nodev, from an
// overlay of this sandbox's own over the copies' folder (its second layer
// the tmpfs's empty folder, both given as descriptors: the mount table
// names no path of the host's), as ReadOnlyView shows a host folder: an
// inotify watch or an flock on the file is then this sandbox's alone. Then
// it closes CopiesFD.
func mountCopies(st *initState) error {
	if len(st.prep.Copies) == 0 {
		return nil
	}
	defer unix.Close(CopiesFD)
	ov, err := copiesOverlay()
	if err != nil {
		return err
	}
	defer unix.Close(ov)
	for _, c := range st.prep.Copies {
		fd, err := unix.OpenTree(ov, c.Name, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return fmt.Errorf("cloning the copy %q: %w", c.Name, err)
		}
		dst := filepath.Join(st.prep.Scratch, scratchRoot, c.Target)
		err = unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("binding the copy %q at %q: %w", c.Name, dst, err)
		}
	}
	return nil
}

// copiesOverlay makes the detached, read-only, nosuid and nodev overlay of
// the copies' folder of the tmpfs at CopiesFD: its fd, close-on-exec.
func copiesOverlay() (int, error) {
	var layers [2]int
	for i, d := range []string{CopiesFiles, CopiesEmpty} {
		fd, err := unix.Openat(CopiesFD, d, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("opening the copies' folder %s: %w", d, err)
		}
		defer unix.Close(fd)
		layers[i] = fd
	}
	fd, err := overlayOfFds(layers[:])
	if err != nil {
		return -1, fmt.Errorf("the copies' overlay: %w", err)
	}
	return fd, nil
}

// overlayOfFds is readOnlyOverlay of the directories open at layers, top
// first, given by descriptor (lowerdir+). The mount table names each layer by
// its path from its own mount's root, which for a detached mount (a clone of
// open_tree, an fsmount) says nothing of where the host keeps it.
func overlayOfFds(layers []int) (int, error) {
	return readOnlyOverlay(func(fsfd int) error {
		for _, l := range layers {
			if err := unix.FsconfigSetFd(fsfd, "lowerdir+", l); err != nil {
				return fmt.Errorf("setting an overlay layer by descriptor: %w", err)
			}
		}
		return nil
	})
}

// overlayOfPaths is readOnlyOverlay of the layers lowerdir, a list of paths
// (with the extra options).
func overlayOfPaths(lowerdir string, extra ...[2]string) (int, error) {
	return readOnlyOverlay(func(fsfd int) error {
		for _, kv := range append([][2]string{{"lowerdir", lowerdir}}, extra...) {
			if err := unix.FsconfigSetString(fsfd, kv[0], kv[1]); err != nil {
				return fmt.Errorf("setting overlay %s=%s: %w", kv[0], kv[1], err)
			}
		}
		return nil
	})
}

// MountView mounts v at dst: its overlay, whose top layer is the folder at
// v.Target of lower (mountBinds: the rootfs bound on the scratch tmpfs, named
// relative to it, the working directory, so that the mount table names no
// host path), on stage, an empty folder; then the overlay's folder v.Dir
// bound at dst, and the overlay's own mount detached. The bind keeps the
// overlay's mount flags (read-only, nosuid, nodev). redirect_dir=follow: the
// top layer's folders lead to the host's by their redirect attribute
// (rootfs.View).
func MountView(v *View, lower, stage, dst string) error {
	mask := lower + v.Target
	for _, p := range []string{mask, v.Source} {
		if err := CheckLayerPath(p); err != nil {
			return fmt.Errorf("the view of %q: %w", v.Source, err)
		}
	}
	fd, err := overlayOfPaths(mask+":"+v.Source, [2]string{"redirect_dir", "follow"})
	if err != nil {
		return fmt.Errorf("the view of %q: %w", v.Source, err)
	}
	err = unix.MoveMount(fd, "", unix.AT_FDCWD, stage, unix.MOVE_MOUNT_F_EMPTY_PATH)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("mounting the view of %q: %w", v.Source, err)
	}
	if err := unix.Mount(filepath.Join(stage, v.Dir), dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding the view of %q at %q: %w", v.Source, dst, err)
	}
	if err := unix.Unmount(stage, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the view of %q: %w", v.Source, err)
	}
	return nil
}

// CheckLayerPath refuses a path that overlayfs would not take whole as a
// layer of a lowerdir list, which it splits at ':' and unescapes at '\'.
func CheckLayerPath(p string) error {
	if strings.ContainsAny(p, `:\`) {
		return fmt.Errorf("a layer's path may hold no ':' nor '\\' (%q)", p)
	}
	return nil
}

// ReadOnlyView makes a detached mount (its fd, close-on-exec, for
// move_mount) of a read-only, nosuid and nodev overlay whose one layer is the
// host directory src; empty, an empty directory, is the second lower layer
// overlayfs wants of a mount without an upper one. The run then reads src's
// files through inodes of its sandbox's own, where a bind would give it the
// host's: an inotify watch (the filter allows them, for Node's fs.watch and
// watchdog) on a bound file saw every open and read of it by the host and by
// every other sandbox, which is how one run could watch what the others
// import and run. A watch on a view's file sees this sandbox's accesses
// alone, and an flock on it is this sandbox's alone
// (TestRunsCannotWatchSharedFiles). xino=auto: with the layers on different
// filesystems, overlayfs then gives a directory's entries the inode numbers
// stat gives them (as xino=on for the root's overlay, mountOverlay), and logs
// a line saying so at each mount; on one filesystem it needs nothing and logs
// nothing.
func ReadOnlyView(src, empty string) (int, error) {
	for _, p := range []string{src, empty} {
		if err := CheckLayerPath(p); err != nil {
			return -1, fmt.Errorf("a read-only view of %q: %w", src, err)
		}
	}
	fd, err := overlayOfPaths(src + ":" + empty)
	if err != nil {
		return -1, fmt.Errorf("a read-only view of %q: %w", src, err)
	}
	return fd, nil
}

// DetachedView is ReadOnlyView for a caller whose paths are the host's (the
// service's package layers, which live in its state directory): src and
// empty are each cloned as a detached mount (open_tree) and given to the
// overlay by descriptor, so that the run's mount table shows them as "/"
// where it would name the state directory and the layer's key.
func DetachedView(src, empty string) (int, error) {
	var layers []int
	defer func() {
		for _, fd := range layers {
			unix.Close(fd)
		}
	}()
	for _, p := range []string{src, empty} {
		fd, err := unix.OpenTree(unix.AT_FDCWD, p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return -1, fmt.Errorf("a read-only view of %q: cloning %q: %w", src, p, err)
		}
		layers = append(layers, fd)
	}
	fd, err := overlayOfFds(layers)
	if err != nil {
		return -1, fmt.Errorf("a read-only view of %q: %w", src, err)
	}
	return fd, nil
}

// readOnlyOverlay makes a detached, read-only, nosuid and nodev overlay,
// with xino=auto, whose layers (and other options) layers sets on its
// filesystem context: its fd, close-on-exec.
func readOnlyOverlay(layers func(fsfd int) error) (int, error) {
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen overlay: %w", err)
	}
	defer unix.Close(fsfd)
	for _, kv := range [][2]string{{"source", "overlay"}, {"xino", "auto"}} {
		if err := unix.FsconfigSetString(fsfd, kv[0], kv[1]); err != nil {
			return -1, fmt.Errorf("setting overlay %s=%s: %w", kv[0], kv[1], err)
		}
	}
	if err := layers(fsfd); err != nil {
		return -1, err
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("creating the overlay: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, fmt.Errorf("fsmount: %w", err)
	}
	return mfd, nil
}

// mountProc mounts the proc of the run's own pid namespace (the init is its PID 1)
// and masks or freezes what a program must not read or change.
func mountProc(st *initState) error {
	s := &st.prep
	proc := filepath.Join(s.Scratch, scratchRoot, "proc")
	if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting proc at %q: %w", proc, err)
	}
	// The run's own /dev/null (mountDev comes first), not the host's, whose
	// devtmpfs options would tell the run the host's memory size.
	null := filepath.Join(s.Scratch, scratchRoot, "dev", "null")
	have := ProcPaths()
	for _, f := range have.Files {
		p := filepath.Join(proc, f)
		if err := unix.Mount(null, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("masking %q: %w", p, err)
		}
	}
	for _, d := range have.Dirs {
		p := filepath.Join(proc, d)
		if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0"); err != nil {
			return fmt.Errorf("masking %q: %w", p, err)
		}
	}
	for _, d := range have.ReadOnly {
		p := filepath.Join(proc, d)
		if err := bindReadOnly(p, p, unix.MOUNT_ATTR_NOEXEC); err != nil {
			return err
		}
	}
	return nil
}

// ProcPathList is which of MaskedProcFiles, MaskedProcDirs and readOnlyProc
// a proc has.
type ProcPathList struct{ Files, Dirs, ReadOnly []string }

// ProcPaths are the paths of MaskedProcFiles, MaskedProcDirs and
// readOnlyProc that this kernel's proc has, looked up once per process in
// the proc it has mounted (the host's, for the supervisor, which sends them
// to a reaper, and for an init before its pivot_root): which of them a proc
// has is the kernel's build, the same for every sandbox. (Looked up in each
// sandbox's new proc, the 20 lookups were a tenth of a root's build: `perf
// record -a -g` during `brig bench -c 2`.) A path missing there is missing in
// the sandbox's proc too; one that is there and missing in the sandbox's
// fails the mount, and the build.
var ProcPaths = sync.OnceValue(func() (have ProcPathList) {
	has := func(names []string) []string {
		var out []string
		for _, n := range names {
			if _, err := os.Lstat(filepath.Join("/proc", n)); err == nil {
				out = append(out, n)
			}
		}
		return out
	}
	return ProcPathList{has(MaskedProcFiles), has(MaskedProcDirs), has(readOnlyProc)}
})

// mountDev makes a minimal /dev: a small tmpfs with the device nodes of devNodes,
// the usual symlinks, and /dev/shm bound from the scratch tmpfs so that shared memory
// counts against the run's writable space.
func mountDev(st *initState) error {
	s := &st.prep
	dev := filepath.Join(s.Scratch, scratchRoot, "dev")
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "size=64k,mode=0755"); err != nil {
		return fmt.Errorf("mounting tmpfs at %q: %w", dev, err)
	}
	old := unix.Umask(0)
	defer unix.Umask(old)
	for _, n := range devNodes {
		p := filepath.Join(dev, n.name)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(n.major, n.minor))); err != nil {
			return fmt.Errorf("making %q: %w", p, err)
		}
	}
	for name, target := range map[string]string{
		"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
		"stderr": "/proc/self/fd/2", "core": "/proc/kcore", "ptmx": "pts/ptmx",
	} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	shm := filepath.Join(dev, "shm")
	if err := os.Mkdir(shm, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(filepath.Join(s.Scratch, scratchShm), shm, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding /dev/shm: %w", err)
	}
	// A devpts instance of the run's own, so that pty and os.openpty work: its
	// ptys are numbered and counted apart from the host's, at most DevptsMax of
	// them (the host-wide kernel.pty.max is shared by everyone). The filter
	// still refuses TIOCSTI and TIOCLINUX.
	pts := filepath.Join(dev, "pts")
	if err := os.Mkdir(pts, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("devpts", pts, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC,
		fmt.Sprintf("newinstance,ptmxmode=0666,mode=0620,max=%d", DevptsMax)); err != nil {
		return fmt.Errorf("mounting devpts at %q: %w", pts, err)
	}
	// The device nodes are made; nothing else on /dev may be one.
	return unix.Mount("", dev, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NOEXEC, "size=64k,mode=0755")
}

// writeProgram writes the code where the interpreter will find it, owned by the
// sandbox user, on the overlay's upper layer (so it counts against the run). The
// root is already pivoted into.
func writeProgram(st *initState) error {
	if err := os.WriteFile(st.run.ScriptPath, st.run.Code, 0o644); err != nil {
		return err
	}
	return os.Chown(st.run.ScriptPath, st.prep.HostUID, st.prep.HostGID)
}

// writeWarmBoot writes a warm interpreter's bootstrap file, if it has one,
// readable by the program alone, who removes it (WarmBootPath).
func writeWarmBoot(st *initState) error {
	if st.prep.WarmBoot == "" {
		return nil
	}
	f, err := os.OpenFile(WarmBootPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o400)
	if err != nil {
		return err
	}
	if _, err = f.WriteString(st.prep.WarmBoot); err == nil {
		err = f.Chown(st.prep.HostUID, st.prep.HostGID)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// pivotRoot makes the overlay the root and detaches the host's tree. pivot_root(".",
// ".") stacks the old root on top of the new one, so one lazy unmount removes every
// host mount from this namespace without needing a directory to put it in.
func pivotRoot(st *initState) error {
	s := &st.prep
	root := filepath.Join(s.Scratch, scratchRoot)
	if err := unix.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root into %q: %w", root, err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the host's root: %w", err)
	}
	return unix.Chdir("/")
}
