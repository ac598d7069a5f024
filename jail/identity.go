package jail

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/seccomp"
)

// defaultRlimits are set on every run. There is no RLIMIT_NPROC: it counts per host
// uid, which all runs share; the pids cgroup bounds processes per run instead.
func defaultRlimits() []rlimit {
	return []rlimit{
		{unix.RLIMIT_CORE, 0, 0},
		{unix.RLIMIT_NOFILE, 4096, 4096},
		{unix.RLIMIT_STACK, 8 << 20, 8 << 20},
		{unix.RLIMIT_MEMLOCK, 64 << 10, 64 << 10},
	}
}

func setRlimits(s *childSpec) error {
	for _, r := range s.Rlimits {
		if err := unix.Setrlimit(r.Resource, &unix.Rlimit{Cur: r.Cur, Max: r.Max}); err != nil {
			return fmt.Errorf("setting rlimit %d: %w", r.Resource, err)
		}
	}
	return nil
}

// closeExtraFDs marks every descriptor above stderr close-on-exec, so that nothing
// the init holds or inherited (the status pipe included) reaches the program.
func closeExtraFDs(*childSpec) error {
	return unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
}

// dropBoundingSet empties this thread's capability bounding set; the interpreter is
// forked from this thread and inherits it.
func dropBoundingSet(*childSpec) error {
	last, err := lastCap()
	if err != nil {
		return err
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("dropping capability %d: %w", c, err)
		}
	}
	return unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
}

func lastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// setIdentity makes every thread of the init the sandbox user. Leaving uid 0 for
// good clears the permitted, effective and ambient capability sets.
func setIdentity(s *childSpec) error {
	// The syscall package's versions change every thread of the process (through
	// libc's setxid broadcast, since brig links cgo); x/sys's Setgroups would change
	// only this one.
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("clearing groups: %w", err)
	}
	if err := syscall.Setresgid(s.GID, s.GID, s.GID); err != nil {
		return fmt.Errorf("setting gid %d: %w", s.GID, err)
	}
	if err := syscall.Setresuid(s.UID, s.UID, s.UID); err != nil {
		return fmt.Errorf("setting uid %d: %w", s.UID, err)
	}
	return nil
}

// verifyNoCapabilities fails closed if any capability set of this thread is not
// empty after setIdentity.
func verifyNoCapabilities(*childSpec) error {
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

func loadFilter(s *childSpec) error {
	prog, err := seccomp.Unmarshal(s.Seccomp)
	if err != nil {
		return err
	}
	return seccomp.Load(prog)
}

// loopbackUp brings up lo in the run's new network namespace, which starts down.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
