package pid1

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// InitArg is the argument a sandbox's init is started with (brig-init, or brig
// re-executed); Main runs sandboxInit when it sees it.
const InitArg = "init"

// ZygoteInitArg is the argument a zygote's init is started with: it builds a
// sandbox's root in a mount namespace of its own and execs the zygote there
// (jail's zygote.go).
const ZygoteInitArg = "zygote-init"

// Main runs this process as the init it was started as, if it was, and
// exits; otherwise it returns. Every binary the jail may start as an init
// (brig, brig-init, test binaries) calls it first thing.
func Main() {
	switch {
	case len(os.Args) == 2 && os.Args[1] == InitArg && os.Getpid() == 1:
		os.Exit(sandboxInit())
	case len(os.Args) == 2 && os.Args[1] == ZygoteInitArg:
		os.Exit(zygoteInit())
	}
}

// resetSignals sets every ignored signal back to its default action, as
// execve already does for caught ones, and blocks none. An ignored signal and
// the signal mask are inherited through fork and execve: nohup hands down
// SIGHUP ignored, GNU make 32 and 33 (glibc's own, which neither glibc's
// sigaction nor the Go runtime sets), a supervisor may start brig with signals
// blocked (the Go runtime unblocks only those it handles), and brig's own
// service passes them on. A cold program's child resets every signal and its
// mask before its execve (runChild); the zygote, exec'd from zygoteInit, would
// otherwise hand them to every warm Python program
// (TestProgramSignalDispositions, with the test ignoring and blocking some
// first). The raw call reaches 32 and 33, which libc's wrapper refuses. (33 is
// never ignored here: glibc, or the Go runtime without it, installs its handler
// at start.) The mask is the calling thread's, which must be the one that
// execs (zygoteInit's, locked).
func resetSignals() {
	var dfl, old sigaction // SIG_DFL
	for sig := uintptr(1); sig <= 64; sig++ {
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, sig, 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 {
			continue // SIGKILL and SIGSTOP can't be read or set
		}
		if old.handler == 1 { // SIG_IGN
			unix.RawSyscall6(unix.SYS_RT_SIGACTION, sig, uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
		}
	}
	var none unix.Sigset_t
	unix.PthreadSigmask(unix.SIG_SETMASK, &none, nil)
}

// initState is what the init's steps share.
type initState struct {
	prep PrepareSpec
	run  RunSpec
	// scratchFD is a reconfiguration context (fspick) of the scratch tmpfs, kept
	// so that the parent can resize it once the tmpfs has no path (after
	// pivot_root) and the init is filtered.
	scratchFD int
	// warmPID is the waiting interpreter of a warm sandbox, and warmConn the
	// init's end of the socket (WarmFD in the interpreter) over which it gets
	// its run's environment; zero and nil in a cold sandbox.
	warmPID  int
	warmConn *os.File
}

// step is one named stage of building the sandbox. The order of a list of steps
// is the order they run in; a comment says where it matters.
type step struct {
	name string
	run  func(*initState) error
}

// rootSteps build a sandbox's root: its loopback, its mounts, pivot_root and
// its hostname. A pooled init runs them among prepareSteps; a sandbox whose
// pid 1 is a reaper (jail/reaper) has the same steps, under the same names,
// from the reaper's C (build_root), which TestReaperBuildsTheSameRoot
// compares with these.
var rootSteps = []step{
	{"loopback", func(*initState) error { return LinkUp("lo") }},
	// Mounts need root and the host's /dev/null, so they come before pivot_root.
	{"mount propagation", func(*initState) error { return makePrivate() }},
	{"scratch tmpfs", mountScratch},
	{"overlay root", mountOverlay},
	{"read-only binds", mountBinds},
	{"interpreter copies", mountCopies},
	// dev before proc: proc's masks are binds of the run's own /dev/null.
	{"dev", mountDev},
	{"proc", mountProc},
	{"pivot_root", pivotRoot},
	// Copy /sandbox up to the overlay's upper layer now, so that writing the
	// program later only creates a file.
	{"sandbox dir", func(st *initState) error { return os.Chown("/sandbox", st.prep.HostUID, st.prep.HostGID) }},
	{"warm bootstrap", writeWarmBoot},
	{"hostname", func(st *initState) error { return unix.Sethostname([]byte(st.prep.Hostname)) }},
}

// prepareSteps build the root and drop what can be dropped before the run is
// known; a pooled init runs them before a run takes it, so they cost a run nothing.
// The last four act on this thread only, and the interpreter, cloned from this
// thread, inherits them.
var prepareSteps = slices.Concat([]step{
	// The cgroup namespace is made now, not at clone: on cgroup v1 the init is
	// moved into the run's cgroups after it was cloned (the parent sends the
	// PrepareSpec only after the move), and the namespace's root must be the run's
	// cgroup, not the supervisor's.
	{"cgroup namespace", func(*initState) error { return unix.Unshare(unix.CLONE_NEWCGROUP) }},
}, rootSteps, []step{
	{"rlimits", setRlimits},
	// The bounding set can only be dropped while CAP_SETPCAP is held; the
	// interpreter's uid change (in the fork, see startProgram) then clears every
	// other set.
	{"capability bounding set", dropBoundingSet},
	// no_new_privs before the filter, as the kernel requires of a filter loaded
	// without CAP_SYS_ADMIN (the init is still root here: belt and braces).
	{"no_new_privs", func(*initState) error { return unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }},
	// Last but one: every later step of this thread runs under a filter. Loading
	// it on this thread alone needs no synchronisation with the others. It is
	// the program's policy but for one thing, a clone into a new user namespace,
	// which startProgram makes; the program stacks its own on top, the one
	// rule that takes that back (seccomp.SpawnedProgram, with the default
	// policy).
	{"seccomp", loadThreadFilter},
	// A warm sandbox starts its interpreter now, exactly as startProgram
	// starts a cold run's, and waits until it is ready for its program.
	{"warm interpreter", startWarm},
})

// runSteps put the run's program in place; startProgram then forks it.
var runSteps = []step{
	{"program", writeProgram},
	{"file descriptors", closeExtraFDs},
}

// hardenSteps make the init itself as unprivileged and filtered as the program,
// on every thread. They run once the program's process is ready, before it
// runs the program.
var hardenSteps = []step{
	{"init output", releaseOutput},
	{"init identity", setIdentity},
	// After the identity change, which clears the parent-death signal: without
	// it an init whose supervisor crashed would go on running its program with
	// no one to enforce the time limit.
	{"parent-death signal", rearmParentDeathSignal},
	{"init capabilities", verifyNoCapabilities},
	{"init seccomp", loadProcessFilter},
}

// sandboxInit is the child half of a run: it builds the root, waits for the run, starts
// the interpreter and reaps until it exits. It returns the exit code for Main to
// exit with; the parent learns everything from the status pipe, not from it.
func sandboxInit() int {
	// Namespaces, the capability bounding set, no_new_privs and a filter loaded
	// without TSYNC are per thread: every step and the fork of the interpreter
	// happen on this one thread.
	runtime.LockOSThread()
	status := os.NewFile(StatusFD, "status")
	report := func(m Message) {
		b, _ := json.Marshal(m)
		status.Write(append(b, '\n'))
	}
	fail := func(stepName string, err error) int {
		report(Message{Kind: MsgError, Step: stepName, Error: err.Error()})
		return 1
	}
	// Every signal that can reach the init is dropped: the run ends when the
	// program ends, never because a signal ended its init. (The init also runs
	// as another uid than the program, which may not signal it at all.)
	signal.Ignore(ignoredSignals()...)

	st := &initState{}
	specFile := os.NewFile(SpecFD, "spec")
	if err := readPrepare(specFile, &st.prep); err != nil {
		if errors.Is(err, io.EOF) {
			return 0 // the parent discarded this init before preparing it
		}
		return fail("reading the prepare spec", err)
	}
	for _, s := range prepareSteps {
		if err := s.run(st); err != nil {
			return fail(s.name, err)
		}
	}
	report(Message{Kind: MsgReady, ScratchFD: st.scratchFD})
	if st.prep.Zygote {
		for _, s := range hardenSteps {
			if err := s.run(st); err != nil {
				return fail(s.name, err)
			}
		}
		reapOrphans()
	}
	if err := readRun(specFile, &st.run); err != nil {
		if errors.Is(err, io.EOF) {
			return 0 // discarded from the pool
		}
		return fail("reading the run spec", err)
	}
	// Through the os.File, not the number: its finalizer would otherwise close
	// whatever later reuses descriptor 3.
	specFile.Close()
	for _, s := range runSteps {
		if err := s.run(st); err != nil {
			return fail(s.name, err)
		}
	}
	// The program's process (a warm interpreter waiting for its run, or a
	// cold one's waiting to exec) starts only once the init has hardened
	// itself: the program never sees its pid 1 privileged.
	pid, start := st.warmPID, func() error { return handOver(st) }
	if st.warmConn == nil {
		p, err := startProgram(st)
		if err != nil {
			return fail("exec", err)
		}
		pid, start = p.pid, p.exec
	}
	for _, s := range hardenSteps {
		if err := s.run(st); err != nil {
			// Fail closed: the program's process dies with this init.
			return fail(s.name, err)
		}
	}
	if err := start(); err != nil {
		return fail("exec", err)
	}
	report(Message{Kind: MsgStarted, Mono: Monotonic().Nanoseconds()})
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return fail("wait", err)
		}
		if got == pid {
			report(Message{Kind: MsgExit, WaitStatus: uint32(ws), Mono: Monotonic().Nanoseconds()})
			// Returning makes the init exit, and the kernel kills whatever the
			// program left in the pid namespace.
			return 0
		}
	}
}

// zygoteRootSteps build a zygote's root: a sandbox's, so that the zygote
// imports exactly what a run's interpreter would find (site's paths and .pth
// files, the made-up /etc), never the host's; then read-only.
var zygoteRootSteps = []step{
	{"mount propagation", func(*initState) error { return makePrivate() }},
	{"scratch tmpfs", mountScratch},
	{"overlay root", mountOverlay},
	{"read-only binds", mountBinds},
	{"interpreter copies", mountCopies},
	{"dev", mountDev},
	{"pivot_root", pivotRoot},
	// The zygote's script (jail's zygoteLoader).
	{"zygote loader", writeWarmBoot},
	// A preload may read it (platform.uname(), which zygote.py clears).
	{"hostname", func(st *initState) error { return unix.Sethostname([]byte(st.prep.Hostname)) }},
	{"read-only root", func(*initState) error {
		return unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
	}},
	{"no_new_privs", func(*initState) error { return unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }},
}

// zygoteInit builds a zygote's root (zygoteRootSteps) and execs the zygote,
// which keeps descriptors ZygoteCtlFD, ZygotePidnsFD and ZygoteSourceFD. It runs in the host's
// pid namespace (the zygote enters the sandboxes' from there) and in a mount
// namespace of its own, which it checks before it mounts anything.
func zygoteInit() int {
	runtime.LockOSThread()
	status := os.NewFile(StatusFD, "status")
	fail := func(stepName string, err error) int {
		b, _ := json.Marshal(Message{Kind: MsgError, Step: stepName, Error: err.Error()})
		status.Write(append(b, '\n'))
		return 1
	}
	own, err1 := os.Readlink("/proc/self/ns/mnt")
	parent, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()))
	if err := errors.Join(err1, err2); err != nil || own == parent {
		return fail("mount namespace", fmt.Errorf("not in a mount namespace of its own (%s, the parent's %s): %v", own, parent, err))
	}
	// Read while /proc is the host's, before the root is built.
	lastCap, err := LastCap()
	if err != nil {
		return fail("capabilities", err)
	}
	st := &initState{}
	if err := readPrepare(os.NewFile(SpecFD, "spec"), &st.prep); err != nil {
		return fail("reading the prepare spec", err)
	}
	if len(st.prep.ZygoteArgv) == 0 {
		return fail("reading the prepare spec", errors.New("no zygote command line"))
	}
	for _, s := range zygoteRootSteps {
		if err := s.run(st); err != nil {
			return fail(s.name, err)
		}
	}
	// The zygote is root with the capabilities its children need alone.
	if err := boundTo(lastCap, ZygoteCaps); err != nil {
		return fail("capabilities", err)
	}
	// The spec and status pipes close on exec: EOF on status says it worked.
	unix.CloseOnExec(SpecFD)
	unix.CloseOnExec(StatusFD)
	resetSignals()
	err = unix.Exec(st.prep.ZygoteArgv[0], st.prep.ZygoteArgv, st.prep.ZygoteEnv)
	return fail("exec", err)
}

// reapOrphans is the init of a sandbox whose program is not its child (a
// zygote's): it reaps whatever the program leaves to it, woken by SIGCHLD,
// until the run's end kills it.
func reapOrphans() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGCHLD)
	for {
		var ws syscall.WaitStatus
		if got, err := syscall.Wait4(-1, &ws, syscall.WNOHANG|unix.WALL, nil); got > 0 || err == syscall.EINTR {
			continue
		}
		<-signals
	}
}

// ignoredSignals are the signals the init ignores: all but SIGCHLD, which
// the kernel would otherwise reap children on (the init waits for the
// program's status, and reapOrphans is woken by it), and SIGURG, the Go
// runtime's own preemption signal. The runtime leaves the signals it needs
// itself (the faults, SIGPROF, glibc's two) as they are. The program does not
// inherit the ignored dispositions: spawnInUserNS's child sets every signal
// back to its default before execve.
//
// Ignoring costs the init nothing per signal, where signal.Notify of every
// signal (which dropped them as well, through a handler) took a handshake with
// the runtime's signal thread for each: about 130 wakeups of two threads
// locked to their goroutines, and 2 ms of CPU in every sandbox.
func ignoredSignals() []os.Signal {
	var sigs []os.Signal
	for sig := syscall.Signal(1); sig <= 64; sig++ {
		if sig != syscall.SIGCHLD && sig != syscall.SIGURG {
			sigs = append(sigs, sig)
		}
	}
	return sigs
}

// startWarm starts a warm sandbox's interpreter (PrepareSpec.Warm) with the
// run-independent part of the environment, and waits for its bootstrap to say
// it is ready. Nothing the init holds but the socket reaches it: every other
// descriptor is close-on-exec first.
func startWarm(st *initState) error {
	if len(st.prep.Warm) == 0 {
		return nil
	}
	if err := closeExtraFDs(st); err != nil {
		return err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("making the interpreter's socket: %w", err)
	}
	child := os.NewFile(uintptr(fds[1]), "warm-child")
	defer child.Close()
	st.warmConn = os.NewFile(uintptr(fds[0]), "warm")
	// Its bootstrap file is its stdin, which node preloads (jail/warm.go).
	p, err := spawn(st, st.prep.Warm, st.prep.WarmEnviron, WarmBootPath, int(child.Fd()))
	if err == nil {
		err = p.exec() // its bootstrap, not yet a run's program
	}
	if err != nil {
		return err
	}
	st.warmPID = p.pid
	child.Close()
	// The bootstrap writes one byte once it is about to read its run's
	// environment: the interpreter has started, and a run takes it as it is.
	b := make([]byte, 1)
	if n, err := st.warmConn.Read(b); n != 1 || b[0] != 'r' {
		return fmt.Errorf("the interpreter did not start (it said %q: %v)", b[:n], err)
	}
	return nil
}

// handOver gives a warm sandbox's interpreter (st.warmPID) its run: the run's
// environment, once the program file is in place, and the end of the socket.
// The interpreter is the run's program from then on.
func handOver(st *initState) error {
	env, err := WarmEnv(st.run.Env)
	if err != nil {
		return err
	}
	_, err = st.warmConn.Write(env)
	if cerr := st.warmConn.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("handing the run to the waiting interpreter: %w", err)
	}
	return nil
}

// startProgram starts the interpreter's process from this thread (inheriting
// its empty bounding set, no_new_privs and descriptors) in a user namespace of
// its own, as uid and gid rootfs.SandboxUID mapped to the run's host ids, with
// no capabilities and the program's filter loaded, waiting to exec: see
// spawnInUserNS.
func startProgram(st *initState) (*spawned, error) {
	return spawn(st, st.run.Argv, st.run.Env, "/dev/null", 0)
}

// spawn starts argv as the run's program (see startProgram), with the file at
// stdinPath as its descriptor 0 and extraFD, when positive, as its descriptor
// WarmFD.
func spawn(st *initState, argv, env []string, stdinPath string, extraFD int) (*spawned, error) {
	stdin, err := os.Open(stdinPath)
	if err != nil {
		return nil, err
	}
	defer stdin.Close()
	last, err := LastCap()
	if err != nil {
		return nil, err
	}
	return spawnInUserNS(spawnArgs{
		LastCap:   last,
		Path:      argv[0],
		Argv:      argv,
		Env:       env,
		Dir:       "/sandbox",
		StdinFD:   int(stdin.Fd()),
		ExtraFD:   extraFD,
		UID:       st.prep.UID,
		GID:       st.prep.GID,
		HostUID:   st.prep.HostUID,
		RootUID:   st.prep.InitUID,
		RootGID:   st.prep.InitGID,
		HostGID:   st.prep.HostGID,
		FilterBPF: st.prep.Seccomp,
	})
}
