package jail

import (
	"fmt"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/jail/pid1"
	"github.com/brig-sandbox/brig/jail/reaper"
	"github.com/brig-sandbox/brig/seccomp"
)

// A zygote's sandbox runs no program of its init's: the init only builds the
// root, hardens itself and reaps (pid1's Zygote). Where the kernel allows it,
// the supervisor gives such a sandbox a reaper as its pid 1 (package
// jail/reaper: a few system calls in C, started from this binary before its
// Go runtime) and builds the root itself, from a thread that joins the
// sandbox's namespaces and runs the init's own steps (pid1.BuildRoot). The
// sandbox is the same: the same namespaces, mounts, hostname and cgroup, and
// a pid 1 with the init's unprivileged identity, no capability, no_new_privs
// and a filter (a far narrower one: seccomp.Reaper). What a run saves is a Go
// init's start, its threads and its exit.
//
// The thread is host root, as an init is until it hardens itself, so the root
// is made and owned exactly as an init makes it. The one step that differs is
// proc: a thread in the host's pid namespace names the sandbox's through the
// filesystem context, which needs Linux 6.15; on an older kernel zygotes'
// sandboxes keep their Go init.

// reaperOff makes NewLauncher give zygotes' sandboxes a Go init, as on a
// kernel without proc's pidns parameter; for the tests of that path alone.
var reaperOff = false

// programReaperOff gives cold and warm JavaScript sandboxes a Go init where a
// reaper would start their program; for the tests of the Go init's own start.
var programReaperOff = false

// newReaperConfig is the run-independent part of a reaper's config, or nil
// and why zygotes' sandboxes keep their Go init.
func newReaperConfig() (*reaper.Config, string, error) {
	if reaperOff {
		return nil, "turned off", nil
	}
	if err := pid1.ProcPidnsSupported(); err != nil {
		return nil, fmt.Sprintf("this kernel can't mount the proc of another pid namespace: %v", err), nil
	}
	prog, err := seccomp.Compile(seccomp.Reaper())
	if err != nil {
		return nil, "", fmt.Errorf("compiling the reaper's seccomp filter: %w", err)
	}
	last, err := pid1.LastCap()
	if err != nil {
		return nil, "", fmt.Errorf("reading the last capability: %w", err)
	}
	return &reaper.Config{LastCap: last, Filter: prog}, "", nil
}

// spawnRequest asks the spawner's thread for a slot: an init, or a reaper
// (which starts the program when program is set).
type spawnRequest struct {
	reply           chan spawned
	reaper, program bool
}

// startReaper sends a freshly cloned reaper (in its cgroups by now) its
// config, and builds its sandbox's root meanwhile. The reaper's "ready"
// follows on the status pipe, as an init's does (waitReady). With program, it
// is a cold sandbox's, which then waits on its spec pipe for the run
// (reaper.MarshalRun) and starts the program as the Go init does, from the
// same PrepareSpec's ids, filters and rlimits.
func (l *Launcher) startReaper(s *slot, prep *pid1.PrepareSpec, program bool) error {
	cfg := *l.reaper
	cfg.UID, cfg.GID = s.ids.InitUID, s.ids.InitGID
	if program {
		cfg.Program = &reaper.ProgramConfig{
			UID: prep.UID, GID: prep.GID, HostUID: prep.HostUID, HostGID: prep.HostGID,
			SpawnFilter: prep.SpawnSeccomp, Filter: prep.Seccomp, Rlimits: prep.Rlimits,
			WarmArgv: prep.Warm, WarmEnv: prep.WarmEnviron,
		}
	}
	b, err := cfg.Marshal()
	if err != nil {
		return err
	}
	if _, err := s.spec.Write(b); err != nil {
		return fmt.Errorf("sending the reaper its config: %w", err)
	}
	if !program {
		// The reaper reads nothing more; EOF on its spec pipe changes nothing.
		s.spec.Close()
		s.spec = nil
	}
	fd, err := buildRoot(s.cmd.Process.Pid, prep)
	if err != nil {
		// A reaper that failed first fails the build too (its namespaces
		// gone: ESRCH); its own report says why.
		if rerr := s.waitReady(); rerr != nil {
			return rerr
		}
		return err
	}
	s.scratchCtx = os.NewFile(uintptr(fd), "scratch-context")
	if program && len(prep.Warm) > 0 {
		// Its interpreter runs in the built root.
		w, err := cfg.Program.MarshalWarm()
		if err == nil {
			_, err = s.spec.Write(w)
		}
		if err != nil {
			return fmt.Errorf("sending the reaper its interpreter: %w", err)
		}
	}
	return nil
}

// buildRoot builds, from a thread of its own that joins them and is then
// thrown away, the root of the sandbox whose pid 1 is pid, and returns the
// scratch tmpfs's reconfiguration context.
func buildRoot(pid int, prep *pid1.PrepareSpec) (int, error) {
	type built struct {
		fd  int
		err error
	}
	done := make(chan built, 1)
	go func() {
		// Never unlocked: the goroutine's end ends the thread, whose
		// namespaces and filesystem attributes are the sandbox's.
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// But the process's main thread never ends (the runtime
			// parks it), and /proc/self is its view: it must not join a
			// sandbox. Held here, it can't be the one another goroutine
			// takes.
			defer runtime.UnlockOSThread()
			fd, err := buildRoot(pid, prep)
			done <- built{fd, err}
			return
		}
		fd, err := buildRootOnThread(pid, prep)
		done <- built{fd, err}
	}()
	b := <-done
	return b.fd, b.err
}

func buildRootOnThread(pid int, prep *pid1.PrepareSpec) (int, error) {
	// Off a run's path, as the spawner's clones are.
	unix.Setpriority(unix.PRIO_PROCESS, 0, prepareNice)
	pidns, err := os.Open(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return -1, fmt.Errorf("opening the sandbox's pid namespace: %w", err)
	}
	defer pidns.Close()
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, fmt.Errorf("opening the reaper's pidfd: %w", err)
	}
	defer unix.Close(pidfd)
	// setns of a mount namespace refuses a thread that shares its root and
	// working directory with others.
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return -1, fmt.Errorf("unsharing the building thread's filesystem attributes: %w", err)
	}
	if err := unix.Setns(pidfd, unix.CLONE_NEWNS|unix.CLONE_NEWNET|unix.CLONE_NEWUTS); err != nil {
		return -1, fmt.Errorf("joining the sandbox's namespaces: %w", err)
	}
	// Belt and braces before pivot_root, which in the service's own mount
	// namespace would move the root of every process in it: the reaper is
	// this process's unreaped child, so its pid can't have been reused, but
	// the thread must be somewhere else than the main thread all the same.
	here, err1 := os.Readlink("/proc/thread-self/ns/mnt")
	service, err2 := os.Readlink("/proc/self/ns/mnt")
	if err1 != nil || err2 != nil || here == service {
		return -1, fmt.Errorf("the building thread is not in a mount namespace of the sandbox's (%s, the service's %s: %v, %v)", here, service, err1, err2)
	}
	fd, err := pid1.BuildRoot(prep, pidns)
	if err != nil {
		return -1, fmt.Errorf("building the root failed at %w", err)
	}
	return fd, nil
}

// withErrnoText adds the text of the reaper's bare "errno N" (it has no
// strerror), so that its errors read as an init's do.
func withErrnoText(msg string) string {
	var n int
	if _, err := fmt.Sscanf(msg, "errno %d", &n); err != nil || fmt.Sprintf("errno %d", n) != msg {
		return msg
	}
	return fmt.Sprintf("%s (%v)", msg, syscall.Errno(n))
}
