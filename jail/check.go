package jail

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Check is one host requirement and whether this host meets it.
type Check struct {
	Name   string
	OK     bool
	Detail string // what was found
	Hint   string // what to do when !OK
}

// minKernel is the oldest kernel with everything the jail uses: the new mount API
// (fsopen, fspick: 5.2), pidfd_getfd (5.6), CLONE_INTO_CGROUP (5.7), close_range
// with CLOSE_RANGE_CLOEXEC (5.11), mount_setattr (5.12).
var minKernel = [2]int{5, 12}

// CheckHost checks the kernel features the jail needs. It reads /proc and uname and
// changes nothing.
func CheckHost() []Check {
	var out []Check
	var uts unix.Utsname
	unix.Uname(&uts)
	release := unix.ByteSliceToString(uts.Release[:])
	var major, minor int
	fmt.Sscanf(release, "%d.%d", &major, &minor)
	out = append(out, Check{
		Name:   "kernel",
		OK:     major > minKernel[0] || major == minKernel[0] && minor >= minKernel[1],
		Detail: "Linux " + release,
		Hint:   fmt.Sprintf("brig needs Linux %d.%d or newer", minKernel[0], minKernel[1]),
	})
	out = append(out, Check{
		Name:   "root",
		OK:     os.Geteuid() == 0,
		Detail: fmt.Sprintf("euid %d", os.Geteuid()),
		Hint:   "brig creates namespaces, mounts and cgroups: run it as root",
	})
	var missing []string
	for _, ns := range []string{"mnt", "pid", "net", "ipc", "uts", "cgroup"} {
		if _, err := os.Stat("/proc/self/ns/" + ns); err != nil {
			missing = append(missing, ns)
		}
	}
	out = append(out, Check{
		Name:   "namespaces",
		OK:     len(missing) == 0,
		Detail: orNone("mount, pid, net, ipc, uts and cgroup namespaces available", "missing: "+strings.Join(missing, ", "), len(missing) == 0),
		Hint:   "enable CONFIG_*_NS in the kernel",
	})
	actions, _ := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail")
	okSeccomp := strings.Contains(string(actions), "kill_process") && strings.Contains(string(actions), "errno")
	out = append(out, Check{
		Name:   "seccomp",
		OK:     okSeccomp,
		Detail: "actions: " + strings.TrimSpace(string(actions)),
		Hint:   "enable CONFIG_SECCOMP_FILTER; brig needs the kill_process and errno actions",
	})
	fs := filesystems()
	for _, f := range []string{"overlay", "tmpfs", "proc"} {
		out = append(out, Check{
			Name:   f,
			OK:     fs[f],
			Detail: orNone(f+" filesystem available", f+" not in /proc/filesystems", fs[f]),
			Hint:   "load it: modprobe " + f,
		})
	}
	return out
}

func orNone(yes, no string, ok bool) string {
	if ok {
		return yes
	}
	return no
}

func filesystems() map[string]bool {
	m := map[string]bool{}
	f, err := os.Open("/proc/filesystems")
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 0 {
			m[fields[len(fields)-1]] = true
		}
	}
	return m
}
