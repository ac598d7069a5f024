package jail

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// InitArg is the argument the parent re-executes brig with to become a run's init;
// cmd/brig calls Init when it sees it.
const InitArg = "init"

// step is one named stage of building the sandbox. The order of initSteps is the
// order they run in; a comment says where it matters.
type step struct {
	name string
	run  func(*childSpec) error
}

var initSteps = []step{
	// The cgroup namespace is made now, not at clone, because on cgroup v1 the init
	// is moved into the run's cgroups after it was cloned: its namespace root must
	// be the run's cgroup, not the supervisor's.
	{"cgroup namespace", func(*childSpec) error { return unix.Unshare(unix.CLONE_NEWCGROUP) }},
	{"loopback", func(*childSpec) error { return loopbackUp() }},
	// Mounts need root and the host's /dev/null, so they come before pivot_root and
	// before the identity is dropped.
	{"mount propagation", func(*childSpec) error { return makePrivate() }},
	{"scratch tmpfs", mountScratch},
	{"overlay root", mountOverlay},
	{"read-only binds", mountBinds},
	{"proc", mountProc},
	{"dev", mountDev},
	{"program", writeProgram},
	{"pivot_root", pivotRoot},
	{"hostname", func(s *childSpec) error { return unix.Sethostname([]byte(s.Hostname)) }},
	{"rlimits", setRlimits},
	{"file descriptors", closeExtraFDs},
	// The bounding set can only be dropped while CAP_SETPCAP is held, so before the
	// uid changes; the uid change then clears every other set.
	{"capability bounding set", dropBoundingSet},
	{"identity", setIdentity},
	{"capabilities", verifyNoCapabilities},
	// no_new_privs must be set before the filter: without CAP_SYS_ADMIN the kernel
	// refuses a filter otherwise.
	{"no_new_privs", func(*childSpec) error { return unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }},
	{"seccomp", loadFilter},
}

// Init is the child half of a run: it reads the spec, runs initSteps, starts the
// interpreter and reaps until it exits. It returns the exit code for cmd/brig to
// exit with; the parent learns everything from the status pipe, not from it.
func Init() int {
	// Namespaces, the capability bounding set and no_new_privs are per thread: every
	// step and the fork of the interpreter happen on this one thread.
	runtime.LockOSThread()
	status := os.NewFile(statusFD, "status")
	report := func(m message) {
		b, _ := json.Marshal(m)
		status.Write(append(b, '\n'))
	}
	fail := func(stepName string, err error) int {
		report(message{Kind: msgError, Step: stepName, Error: err.Error()})
		return 1
	}

	var spec childSpec
	specFile := os.NewFile(specFD, "spec")
	b, err := io.ReadAll(specFile)
	specFile.Close()
	if err != nil {
		return fail("reading spec", err)
	}
	if len(b) == 0 {
		// The parent closed the pipe without a spec: the slot was discarded.
		return 0
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return fail("reading spec", err)
	}
	// Signals the program might send its init are caught (not ignored, which the
	// interpreter would inherit) and dropped: the run ends when the program ends.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP,
		syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGPIPE)

	for _, st := range initSteps {
		if err := st.run(&spec); err != nil {
			return fail(st.name, err)
		}
	}

	stdin, err := os.Open("/dev/null")
	if err != nil {
		return fail("exec", err)
	}
	pid, err := syscall.ForkExec(spec.Argv[0], spec.Argv, &syscall.ProcAttr{
		Dir:   "/sandbox",
		Env:   spec.Env,
		Files: []uintptr{stdin.Fd(), 1, 2},
		// Its own session and process group: kill(0, sig) from the program reaches
		// its own processes only.
		Sys: &syscall.SysProcAttr{Setsid: true},
	})
	stdin.Close()
	if err != nil {
		return fail("exec", fmt.Errorf("starting %s: %w", spec.Argv[0], err))
	}
	report(message{Kind: msgStarted})
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
			report(message{Kind: msgExit, WaitStatus: uint32(ws)})
			// Returning makes the init exit, and the kernel kills whatever the
			// program left in the pid namespace.
			return 0
		}
	}
}
