package pid1

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Steps of the child, reported with errno when one fails (spawnStepNames).
const (
	spawnStepSync = 1 + iota
	spawnStepSetsid
	spawnStepBounding
	spawnStepSetgroups
	spawnStepSetgid
	spawnStepSetuid
	spawnStepCaps
	spawnStepStdin
	spawnStepChdir
	spawnStepSeccomp
	spawnStepExec
	// Not a failure: every step but the exec is done, and the child waits
	// for spawned.exec.
	spawnStepReady
)

// spawnStepNames name the child's steps for errors (index: the step; 0 is the
// parent's own).
var spawnStepNames = [...]string{
	0: "cloning into a user namespace and writing its id maps", spawnStepSync: "waiting for the id maps",
	spawnStepSetsid: "setsid", spawnStepBounding: "emptying the bounding set", spawnStepSetgroups: "setgroups",
	spawnStepSetgid: "setresgid", spawnStepSetuid: "setresuid", spawnStepCaps: "dropping capabilities",
	spawnStepStdin: "stdin", spawnStepChdir: "chdir", spawnStepSeccomp: "loading the seccomp filter",
	spawnStepExec: "execve", spawnStepReady: "getting ready to exec",
}

// spawnArgs is a program to start in a user namespace of its own.
type spawnArgs struct {
	Path, Dir string
	Argv, Env []string
	StdinFD   int
	// ExtraFD, when positive, becomes the program's descriptor WarmFD.
	ExtraFD  int
	UID, GID int // inside the namespace
	HostUID  int // what UID maps to on the host
	HostGID  int
	// RootUID and RootGID are what the namespace's 0 maps to: the init's host ids,
	// so that the init appears as root inside, and a chown to root fails as on
	// any host (EPERM) rather than as an unmapped id (EINVAL). The program can
	// never become 0: it has no capability, no_new_privs and nosuid mounts.
	RootUID, RootGID int
	LastCap          int
	FilterBPF        []byte // the program's filter, struct sock_filter[] (seccomp.Program.Marshal)
}

// spawnChild is everything the child of spawnInUserNS uses, made before the
// clone: the child allocates nothing.
type spawnChild struct {
	path, dir  *byte
	argv, envp []*byte
	stdinFD    int
	extraFD    int // -1: none
	uid, gid   int
	lastCap    int
	// syncFD and reportFD are the child's ends of its two pipes; parentFDs the
	// parent's, which the child closes first (or it would never read EOF).
	syncFD, reportFD int
	parentFDs        [2]int
	prog             unix.SockFprog
	capHdr           unix.CapUserHeader
	capData          [2]unix.CapUserData
	dfl              sigaction
	emptyMask        uint64
	report           [2]int32 // step, errno
	syncByte         [1]byte
}

// sigaction is the kernel's struct sigaction (rt_sigaction's), SIG_DFL when zero.
type sigaction struct{ handler, flags, restorer, mask uint64 }

// spawned is a program's process that has done every step but its exec,
// which waits for exec: its parent, whose privileges wrote the id maps,
// drops them first, so that the program never sees it privileged.
type spawned struct {
	pid     int
	path    string
	syncW   *os.File // the go's write end
	reportR *os.File // the report's read end: EOF once exec'd
}

// exec lets the process exec its program and returns once it has; the
// process is then the program, its pid s.pid.
func (s *spawned) exec() error {
	defer s.reportR.Close()
	_, err := s.syncW.Write([]byte{'g'})
	s.syncW.Close()
	if err != nil {
		return s.fail(spawnStepExec, err)
	}
	return s.report(0)
}

// report reads the child's report: want (spawnStepReady), or at want 0 the
// EOF of its exec; anything else is the failure it returns, the child reaped.
func (s *spawned) report(want int) error {
	var rep [8]byte
	n, err := io.ReadFull(s.reportR, rep[:])
	switch {
	case n == 0 && err == io.EOF:
		if want == 0 {
			return nil
		}
		return s.fail(spawnStepReady, syscall.EPIPE) // it died before it was ready
	case n == len(rep):
		step := int(binary.NativeEndian.Uint32(rep[:4]))
		if want != 0 && step == want {
			return nil
		}
		errno := syscall.Errno(binary.NativeEndian.Uint32(rep[4:]))
		if step <= 0 || step > spawnStepExec {
			step = spawnStepExec
		}
		return s.fail(step, errno)
	case err == nil || err == io.ErrUnexpectedEOF:
		return s.fail(spawnStepExec, syscall.EIO)
	default:
		return s.fail(spawnStepExec, err)
	}
}

// fail ends a start that failed at step: the child, told by its sync pipe's
// EOF, exits and is reaped.
func (s *spawned) fail(step int, err error) error {
	s.syncW.Close() // EOF for a child still waiting: it exits
	s.reportR.Close()
	var ws unix.WaitStatus
	for {
		if _, werr := unix.Wait4(s.pid, &ws, unix.WALL, nil); werr != unix.EINTR {
			break
		}
	}
	return fmt.Errorf("starting %s: %s: %w", s.path, spawnStepNames[step], err)
}

// spawnInUserNS starts a.Path as the program: in a new user namespace whose
// mappings are a.UID to a.HostUID and 0 to a.RootUID (the same for gids), with
// no supplementary groups, no capabilities and a.FilterBPF loaded, from the
// calling thread (which must be locked, and whose no_new_privs, empty bounding
// set and descriptors the program inherits). It returns once the process has
// done every step but the exec, which waits for spawned.exec.
//
// Go's syscall.ForkExec can neither make the user namespace as brig needs it
// (its child would wait for its maps after the filter had to be loaded) nor
// load a filter, so the fork is made here: a fork-style clone of this thread
// alone, whose child only makes raw system calls on memory prepared before the
// clone (runChild), as the syscall package's own child does. Written in Go, not
// C, so that brig-init links no C library: a Go process's start costs about
// 1 ms of CPU less without cgo (bench/measure/go_start.sh), paid by every
// sandbox.
func spawnInUserNS(a spawnArgs) (*spawned, error) {
	if len(a.FilterBPF) == 0 || len(a.FilterBPF)%8 != 0 {
		return nil, fmt.Errorf("the program's filter is %d bytes, not whole instructions", len(a.FilterBPF))
	}
	c := &spawnChild{stdinFD: a.StdinFD, extraFD: -1, uid: a.UID, gid: a.GID, lastCap: a.LastCap}
	if a.ExtraFD > 0 {
		c.extraFD = a.ExtraFD
	}
	var err error
	if c.path, err = syscall.BytePtrFromString(a.Path); err != nil {
		return nil, err
	}
	if c.dir, err = syscall.BytePtrFromString(a.Dir); err != nil {
		return nil, err
	}
	if c.argv, err = syscall.SlicePtrFromStrings(a.Argv); err != nil {
		return nil, err
	}
	if c.envp, err = syscall.SlicePtrFromStrings(a.Env); err != nil {
		return nil, err
	}
	filter := append([]byte(nil), a.FilterBPF...)
	c.prog = unix.SockFprog{Len: uint16(len(filter) / 8), Filter: (*unix.SockFilter)(unsafe.Pointer(&filter[0]))}
	c.capHdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}

	var syncPipe, reportPipe [2]int
	if err := unix.Pipe2(syncPipe[:], unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("starting %s: %s: %w", a.Path, spawnStepNames[0], err)
	}
	if err := unix.Pipe2(reportPipe[:], unix.O_CLOEXEC); err != nil {
		unix.Close(syncPipe[0])
		unix.Close(syncPipe[1])
		return nil, fmt.Errorf("starting %s: %s: %w", a.Path, spawnStepNames[0], err)
	}
	// The parent's ends as files, whose Close may come twice.
	s := &spawned{path: a.Path, syncW: os.NewFile(uintptr(syncPipe[1]), "spawn-sync"), reportR: os.NewFile(uintptr(reportPipe[0]), "spawn-report")}
	c.syncFD, c.reportFD = syncPipe[0], reportPipe[1]
	c.parentFDs = [2]int{syncPipe[1], reportPipe[0]}

	pid, err := cloneUserNS(c, a.HostUID)
	unix.Close(syncPipe[0])
	unix.Close(reportPipe[1])
	s.pid = pid
	if err != nil {
		if pid > 0 {
			return nil, s.fail(0, err)
		}
		s.syncW.Close()
		s.reportR.Close()
		return nil, fmt.Errorf("starting %s: %s: %w", a.Path, spawnStepNames[0], err)
	}
	uidMap := fmt.Sprintf("0 %d 1\n%d %d 1\n", a.RootUID, a.UID, a.HostUID)
	gidMap := fmt.Sprintf("0 %d 1\n%d %d 1\n", a.RootGID, a.GID, a.HostGID)
	for _, m := range [][2]string{{"uid_map", uidMap}, {"gid_map", gidMap}} {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", pid, m[0]), []byte(m[1]), 0); err != nil {
			return nil, s.fail(0, err)
		}
	}
	if _, err := s.syncW.Write([]byte{'x'}); err != nil {
		return nil, s.fail(0, err)
	}
	if err := s.report(spawnStepReady); err != nil {
		return nil, err
	}
	return s, nil
}

// cloneUserNS clones the calling thread into a new user namespace (and nothing
// else: the init's namespaces are the run's), the child running runChild.
//
// The namespace is created with this thread's effective uid as its owner, and
// the kernel charges what is counted per user inside it (pending signals,
// inotify instances, processes, further namespaces) to its owner too, up the
// chain: so the owner is the run's own host id, not root, which every run would
// otherwise share. Only this thread's euid changes (a raw call); its real and
// saved uids stay 0, so it regains its capabilities with the euid just after.
//
// Every signal is blocked across the clone, so that no Go signal handler ever
// runs in the child (it sets each to its default, then unblocks them just
// before execve). A fork-style clone: the child gets a copy of this small
// process's memory, never the supervisor's. CLONE_VFORK can't be used, since
// the child must wait for its maps, which this thread writes.
func cloneUserNS(c *spawnChild, hostUID int) (int, error) {
	all, old := ^uint64(0), uint64(0)
	if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&all)), uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 {
		return 0, e
	}
	defer syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&old)), 0, 8, 0, 0)
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, ^uintptr(0), uintptr(hostUID), ^uintptr(0)); e != 0 {
		return 0, e
	}
	pid, _, cloneErr := syscall.RawSyscall6(syscall.SYS_CLONE, unix.CLONE_NEWUSER|uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if pid == 0 && cloneErr == 0 {
		runChild(c) // never returns
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, ^uintptr(0), 0, ^uintptr(0)); e != 0 {
		// Not root again: this thread can't write the maps. The caller closes
		// the child's pipe, whose EOF it waits for, and reaps it.
		if cloneErr != 0 {
			return 0, e
		}
		return int(pid), e
	}
	if cloneErr != 0 {
		return 0, cloneErr
	}
	return int(pid), nil
}

// runChild is the new process, a copy of the init's calling thread alone: it
// may only make raw system calls on what c holds (no allocation, no stack
// growth, no runtime: other threads' locks are held forever in this copy), and
// its signals are blocked until just before execve. It never returns.
//
//go:nosplit
//go:norace
func runChild(c *spawnChild) {
	var step int32
	var errno syscall.Errno
	var n uintptr
	syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(c.parentFDs[0]), 0, 0)
	syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(c.parentFDs[1]), 0, 0)
	for sig := uintptr(1); sig <= 64; sig++ {
		// Fails harmlessly for SIGKILL and SIGSTOP.
		syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, sig, uintptr(unsafe.Pointer(&c.dfl)), 0, 8, 0, 0)
	}
	// Wait for the parent to write the id maps: until then the child's ids are
	// unmapped. EOF means the parent failed to.
	n, _, errno = syscall.RawSyscall(syscall.SYS_READ, uintptr(c.syncFD), uintptr(unsafe.Pointer(&c.syncByte[0])), 1)
	if n != 1 {
		step, errno = spawnStepSync, syscall.EPIPE
		goto fail
	}
	// Its own session and process group: kill(0, sig) from the program reaches
	// its own processes only.
	if _, _, errno = syscall.RawSyscall(syscall.SYS_SETSID, 0, 0, 0); errno != 0 {
		step = spawnStepSetsid
		goto fail
	}
	// A new user namespace starts with a full bounding set: empty it again,
	// while the child still holds CAP_SETPCAP there.
	for capNum := 0; capNum <= c.lastCap; capNum++ {
		if _, _, errno = syscall.RawSyscall6(syscall.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(capNum), 0, 0, 0, 0); errno != 0 {
			step = spawnStepBounding
			goto fail
		}
	}
	if _, _, errno = syscall.RawSyscall(syscall.SYS_SETGROUPS, 0, 0, 0); errno != 0 {
		step = spawnStepSetgroups
		goto fail
	}
	if _, _, errno = syscall.RawSyscall(syscall.SYS_SETRESGID, uintptr(c.gid), uintptr(c.gid), uintptr(c.gid)); errno != 0 {
		step = spawnStepSetgid
		goto fail
	}
	if _, _, errno = syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(c.uid), uintptr(c.uid), uintptr(c.uid)); errno != 0 {
		step = spawnStepSetuid
		goto fail
	}
	// Inside its new user namespace the child holds every capability until exec
	// (its namespace's root is unmapped, so the uid change clears none); execve
	// would clear them, and so does this, before anything else runs.
	if _, _, errno = syscall.RawSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&c.capHdr)), uintptr(unsafe.Pointer(&c.capData[0])), 0); errno != 0 {
		step = spawnStepCaps
		goto fail
	}
	if c.stdinFD != 0 {
		if _, _, errno = syscall.RawSyscall(syscall.SYS_DUP2, uintptr(c.stdinFD), 0, 0); errno != 0 {
			step = spawnStepStdin
			goto fail
		}
	}
	// dup2 clears close-on-exec on the new descriptor only.
	if c.extraFD >= 0 && c.extraFD != WarmFD {
		if _, _, errno = syscall.RawSyscall(syscall.SYS_DUP2, uintptr(c.extraFD), WarmFD, 0); errno != 0 {
			step = spawnStepStdin
			goto fail
		}
	}
	if c.extraFD == WarmFD {
		if _, _, errno = syscall.RawSyscall(syscall.SYS_FCNTL, WarmFD, syscall.F_SETFD, 0); errno != 0 {
			step = spawnStepStdin
			goto fail
		}
	}
	if _, _, errno = syscall.RawSyscall(syscall.SYS_CHDIR, uintptr(unsafe.Pointer(c.dir)), 0, 0); errno != 0 {
		step = spawnStepChdir
		goto fail
	}
	// Last before exec: no_new_privs is inherited from the init's thread, whose
	// own filter (which let this clone make a user namespace) stays beneath;
	// the program's is stacked on it (jail's programFilters: alone it allows
	// almost everything), so a thread without one fails closed.
	if mode, _, _ := syscall.RawSyscall(syscall.SYS_PRCTL, unix.PR_GET_SECCOMP, 0, 0); mode != unix.SECCOMP_MODE_FILTER {
		step, errno = spawnStepSeccomp, syscall.EPERM
		goto fail
	}
	if _, _, errno = syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&c.prog))); errno != 0 {
		step = spawnStepSeccomp
		goto fail
	}
	// Ready, and nothing more until the parent has dropped its privileges
	// (spawned.exec): EOF instead of the go means it failed, and says why.
	c.report[0], c.report[1] = spawnStepReady, 0
	if n, _, _ = syscall.RawSyscall(syscall.SYS_WRITE, uintptr(c.reportFD), uintptr(unsafe.Pointer(&c.report[0])), 8); n != 8 {
		exitChild()
	}
	if n, _, _ = syscall.RawSyscall(syscall.SYS_READ, uintptr(c.syncFD), uintptr(unsafe.Pointer(&c.syncByte[0])), 1); n != 1 {
		exitChild()
	}
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&c.emptyMask)), 0, 8, 0, 0)
	_, _, errno = syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(c.path)), uintptr(unsafe.Pointer(&c.argv[0])), uintptr(unsafe.Pointer(&c.envp[0])))
	step = spawnStepExec
fail:
	c.report[0], c.report[1] = step, int32(errno)
	syscall.RawSyscall(syscall.SYS_WRITE, uintptr(c.reportFD), uintptr(unsafe.Pointer(&c.report[0])), 8)
	exitChild()
}

// exitChild ends runChild's process.
//
//go:nosplit
//go:norace
func exitChild() {
	for {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 127, 0, 0)
	}
}
