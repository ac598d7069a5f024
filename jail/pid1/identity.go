package pid1

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/seccomp/bpf"
)

// DefaultRlimits are set on every run. There is no RLIMIT_NPROC: the pids cgroup
// bounds processes per run instead.
//
// RLIMIT_CORE is 1, not 0: for a core_pattern that pipes to a program (which the
// kernel starts as host root), 0 does not stop the dump, while 1 is the kernel's
// own "skip pipe dumps" value (it is what it gives the helper itself, against
// recursion), and 1 byte is below the smallest ELF core, so no core file is
// written either. The filter keeps a program from changing it.
func DefaultRlimits() []Rlimit {
	return []Rlimit{
		{unix.RLIMIT_CORE, 1, 1},
		{unix.RLIMIT_RTPRIO, 0, 0},
		{unix.RLIMIT_NOFILE, 4096, 4096},
		{unix.RLIMIT_STACK, 8 << 20, 8 << 20},
		{unix.RLIMIT_MEMLOCK, 64 << 10, 64 << 10},
	}
}

func setRlimits(st *initState) error {
	for _, r := range st.prep.Rlimits {
		if err := unix.Setrlimit(r.Resource, &unix.Rlimit{Cur: r.Cur, Max: r.Max}); err != nil {
			return fmt.Errorf("setting rlimit %d: %w", r.Resource, err)
		}
	}
	return nil
}

// closeExtraFDs marks every descriptor above stderr close-on-exec, so that nothing
// the init holds or inherited (the status pipe included) reaches the program.
func closeExtraFDs(*initState) error {
	return unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
}

// releaseOutput points the init's own stdout and stderr at /dev/null once the
// program has them: the output pipes then reach EOF as soon as the program's
// processes are gone, without waiting for the init's exit (whose teardown of the
// mount namespace takes milliseconds).
func releaseOutput(*initState) error {
	null, err := unix.Open("/dev/null", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(null)
	for _, fd := range []int{1, 2} {
		if err := unix.Dup3(null, fd, 0); err != nil {
			return err
		}
	}
	return nil
}

// dropBoundingSet empties this thread's capability bounding, ambient and
// inheritable sets; the interpreter is forked from this thread and inherits them.
func dropBoundingSet(*initState) error {
	last, err := LastCap()
	if err != nil {
		return err
	}
	return boundTo(last, nil)
}

// ZygoteCaps are the capabilities a zygote keeps, each for a step of its
// child's before the child makes its own user namespace, where it has every
// capability until it drops them: joining the sandbox's namespaces, which
// the host's user namespace owns, through a pidfd of the sandbox's init, an
// id of its own (setns: CAP_SYS_ADMIN, CAP_SYS_CHROOT for a mount namespace,
// and CAP_SYS_PTRACE, since a pidfd's setns asks for ptrace's read access to
// its process), setting the run's rlimits (CAP_SYS_RESOURCE to
// raise one above the service's), dropping its groups and taking the run's
// host uid as the namespace's owner (CAP_SETGID, CAP_SETUID), and the
// zygote's own pinned memory (CAP_IPC_LOCK, io_uring's registered buffers
// beyond RLIMIT_MEMLOCK). Every other capability of root's (reading or
// writing any file, signalling any process, the network's, the kernel's,
// devices', the clock's) it never holds: the escape probe of 2026-12-06 found a warm
// program's parent holding all of root's, where a cold one's holds none.
var ZygoteCaps = []int{unix.CAP_SYS_ADMIN, unix.CAP_SYS_CHROOT, unix.CAP_SYS_PTRACE, unix.CAP_SYS_RESOURCE, unix.CAP_SETGID, unix.CAP_SETUID, unix.CAP_IPC_LOCK}

// boundTo drops every capability up to last but keep from this thread's
// bounding set and empties its ambient and inheritable sets: a root process
// exec'd from the thread has the bounding set as its permitted and effective
// sets.
func boundTo(last int, keep []int) error {
	for c := 0; c <= last; c++ {
		if slices.Contains(keep, c) {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("dropping capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clearing the ambient set: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clearing the inheritable set: %w", err)
	}
	return nil
}

// LastCap is the highest capability number this kernel knows.
func LastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// setIdentity makes every thread of the init the init's own unprivileged user, a
// host id of the run's own (never the program's), so that neither the program nor
// anything else on the host can signal it or read its /proc. Leaving uid 0 for good clears the permitted, effective and
// ambient capability sets.
func setIdentity(st *initState) error {
	uid, gid := st.prep.InitUID, st.prep.InitGID
	gatherThreads()
	// The syscall package's versions change every thread of the process (through
	// libc's setxid broadcast where cgo is linked, the Go runtime's otherwise);
	// x/sys's Setgroups would change only this one.
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("clearing groups: %w", err)
	}
	if err := syscall.Setresgid(gid, gid, gid); err != nil {
		return fmt.Errorf("setting gid %d: %w", gid, err)
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		return fmt.Errorf("setting uid %d: %w", uid, err)
	}
	return nil
}

// gatherThreads puts every thread of the init on the CPU this one runs on, at
// nice 0, for good. Without libc (brig-init), a uid change of every thread is
// the Go runtime's: it signals each thread and spins in sched_yield until each
// has made the call, and a pooled init's threads, at nice 19 and spread over
// busy CPUs, took long to: 5 % of the machine's CPU at concurrency 2, against
// 0.1 % for libc's broadcast. On one CPU at nice 0, each yield hands that CPU
// to the next of them. The init only reaps once it has changed its identity,
// so where and how nice its threads run matters no more (a run sets a pooled
// init to nice 0 in any case).
func gatherThreads() {
	var here uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&here)), 0, 0); e != 0 {
		return
	}
	var set unix.CPUSet
	set.Set(int(here))
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			unix.SchedSetaffinity(tid, &set)
			unix.Setpriority(unix.PRIO_PROCESS, tid, 0)
		}
	}
}

// rearmParentDeathSignal sets the parent-death signal again (prctl(2): a change
// of uid or gid clears it) and then checks that the parent is still there, since
// it may have died before the signal was set: the status pipe's write end reports
// POLLERR once its read end, which only the parent holds, is closed. (getppid
// can't tell: in a new pid namespace it is always 0.)
func rearmParentDeathSignal(*initState) error {
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("setting the parent-death signal: %w", err)
	}
	fds := []unix.PollFd{{Fd: StatusFD, Events: unix.POLLOUT}}
	if _, err := unix.Poll(fds, 0); err != nil {
		return fmt.Errorf("polling the status pipe: %w", err)
	}
	if fds[0].Revents&unix.POLLERR != 0 {
		return errors.New("the supervisor is gone")
	}
	return nil
}

// verifyNoCapabilities fails closed if any capability set of this thread is not
// empty after setIdentity.
func verifyNoCapabilities(*initState) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	for _, d := range data {
		if d.Effective != 0 || d.Permitted != 0 || d.Inheritable != 0 {
			return fmt.Errorf("capabilities left after dropping identity: %+v", data)
		}
	}
	return nil
}

// loadThreadFilter installs the spawner's filter on this thread only: no other
// thread has to be synchronised, which keeps it off the cost of a run's start.
// The interpreter, cloned from this thread, inherits it beneath its own.
// The init of a zygote's sandbox starts no interpreter (the zygote forks it)
// and goes straight on to hardenSteps, whose filter is stricter: it skips
// this one, which no verdict of the stack would come from.
func loadThreadFilter(st *initState) error {
	if st.prep.Zygote {
		return nil
	}
	prog, err := bpf.Unmarshal(st.prep.SpawnSeccomp)
	if err != nil {
		return err
	}
	return bpf.LoadThread(prog)
}

// loadProcessFilter installs the init's own filter (PrepareSpec.InitSeccomp)
// on every thread of the init (this one already has the spawner's; the two
// stack, and the stricter wins).
func loadProcessFilter(st *initState) error {
	prog, err := bpf.Unmarshal(st.prep.InitSeccomp)
	if err != nil {
		return err
	}
	return bpf.Load(prog)
}

// LinkUp sets the IFF_UP flag of an interface of the calling thread's network
// namespace: the init brings up lo in the run's new namespace, which starts
// down (and the egress tests their test namespaces' links).
func LinkUp(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
