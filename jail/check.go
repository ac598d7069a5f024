package jail

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/cgroup"
)

// Check is one host requirement and whether this host meets it.
type Check struct {
	Name string
	OK   bool
	// Warn marks a passing check that found something the operator should
	// change (brig check prints it as "warn", with its hint).
	Warn   bool
	Detail string // what was found
	Hint   string // what to do when !OK or Warn
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
	for _, ns := range []string{"mnt", "pid", "net", "ipc", "uts", "cgroup", "user"} {
		if _, err := os.Stat("/proc/self/ns/" + ns); err != nil {
			missing = append(missing, ns)
		}
	}
	out = append(out, Check{
		Name:   "namespaces",
		OK:     len(missing) == 0,
		Detail: orNone("mount, pid, net, ipc, uts, cgroup and user namespaces available", "missing: "+strings.Join(missing, ", "), len(missing) == 0),
		Hint:   "enable CONFIG_*_NS in the kernel",
	})
	maxUserNS, _ := os.ReadFile("/proc/sys/user/max_user_namespaces")
	n, _ := strconv.Atoi(strings.TrimSpace(string(maxUserNS)))
	out = append(out, Check{
		Name:   "user namespaces",
		OK:     n > 0,
		Detail: fmt.Sprintf("user.max_user_namespaces = %d", n),
		Hint:   "each run's program lives in a user namespace of its own: sysctl -w user.max_user_namespaces=15000",
	})
	actions, _ := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail")
	okSeccomp := strings.Contains(string(actions), "kill_process") && strings.Contains(string(actions), "errno")
	out = append(out, Check{
		Name:   "seccomp",
		OK:     okSeccomp,
		Detail: "actions: " + strings.TrimSpace(string(actions)),
		Hint:   "enable CONFIG_SECCOMP_FILTER; brig needs the kill_process and errno actions",
	})
	out = append(out, CheckFileMax(), CheckTCPMem(), CheckHugePages(), CheckOOMFloor(), CheckCgroupNamespace())
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

// CheckCgroupNamespace checks that brig runs in the host's cgroup
// namespace, where the path /proc/self/cgroup gives for the cgroup2
// hierarchy is the one its mount shows: in one of its own (a container
// runtime's private cgroupns; containerd gives privileged containers the
// host's, Docker's --privileged on cgroup v2 does not), the cgroups brig
// makes under the mount are outside its namespace, and moving a sandbox into
// one fails (ENOENT under nsdelegate) with nothing to say why. A host with no
// cgroup2 hierarchy has nothing to check.
func CheckCgroupNamespace() Check {
	self, _ := os.ReadFile("/proc/self/cgroup")
	return checkCgroupNamespace(string(self), cgroup2Mount(), os.Getpid())
}

func checkCgroupNamespace(self, mount string, pid int) Check {
	c := Check{Name: "cgroup namespace", OK: true, Detail: "no cgroup2 hierarchy",
		Hint: "run brig in the host's cgroup namespace: a privileged container on containerd, --cgroupns=host with Docker or Podman"}
	var path string
	for _, line := range strings.Split(self, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path = p
		}
	}
	if path == "" || mount == "" {
		return c
	}
	procs, err := os.ReadFile(filepath.Join(mount, path, "cgroup.procs"))
	if err == nil && slices.Contains(strings.Fields(string(procs)), strconv.Itoa(pid)) {
		c.Detail = fmt.Sprintf("the host's: %s in %s", path, mount)
		return c
	}
	c.OK = false
	c.Detail = fmt.Sprintf("a cgroup namespace of its own: its cgroup %q is not where %s shows it", path, mount)
	return c
}

// cgroup2Mount is where the cgroup2 hierarchy is mounted: /sys/fs/cgroup on a
// v2 host, /sys/fs/cgroup/unified on a hybrid one, "" where there is none.
func cgroup2Mount() string {
	for _, d := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(d, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return d
		}
	}
	return ""
}

// FileMaxWanted is the host-wide open-file limit (fs.file-max) below which
// one run could starve the others and the host: a file a run opens, or maps
// and closes, costs it about 420 bytes of its memory limit, so a 2 GiB run
// can hold some five million, past the default limit (a tenth of RAM in KiB:
// 2.4 million on 24 GiB), and then nothing without CAP_SYS_ADMIN opens a file
// (ENFILE): other runs' interpreters, the host's unprivileged daemons. With
// the limit out of the way (systemd's default, LONG_MAX) the runs' memory
// limits bound their files. Not required: the check says so, brig runs.
const FileMaxWanted = 1 << 62

// CheckHugePages warns of a host pool of huge pages: a run may map them
// (MAP_HUGETLB, MFD_HUGETLB), and they count against no memory limit of its
// (hugetlb pages are charged to memory.max only with cgroup v2's
// memory_hugetlb_accounting), so one run could take the pool from the host and
// the other runs. It always passes.
func CheckHugePages() Check { return checkHugePages("/proc/sys/vm") }

func checkHugePages(vm string) Check {
	c := Check{Name: "huge page pool", OK: true, Detail: "no huge pages reserved (vm.nr_hugepages and vm.nr_overcommit_hugepages are 0)"}
	var pages []string
	for _, f := range []string{"nr_hugepages", "nr_overcommit_hugepages"} {
		b, err := os.ReadFile(filepath.Join(vm, f))
		if n := strings.TrimSpace(string(b)); err == nil && n != "0" {
			pages = append(pages, f+" = "+n)
		}
	}
	if len(pages) > 0 {
		c.Warn = true
		c.Detail = "the host keeps huge pages (" + strings.Join(pages, ", ") + "), which a run can map outside its memory limit and so take from the host and the other runs"
		c.Hint = "set vm.nr_hugepages and vm.nr_overcommit_hugepages to 0 on a host that runs brig, or mount cgroup v2 with memory_hugetlb_accounting"
	}
	return c
}

// CheckFileMax reports fs.file-max against FileMaxWanted; it always passes,
// and its Detail says what to do when the limit is lower.
func CheckFileMax() Check {
	n, err := FileMax()
	c := Check{Name: "open-file limit", OK: true}
	switch {
	case err != nil:
		c.Detail = fmt.Sprintf("fs.file-max unreadable: %v", err)
	case n >= FileMaxWanted:
		c.Detail = fmt.Sprintf("fs.file-max = %d: the runs' memory limits bound their open files", n)
	default:
		c.Warn = true
		c.Detail = fmt.Sprintf("fs.file-max = %d: one run's files (about 420 bytes of its memory each) could reach it and "+
			"starve other runs and the host's unprivileged processes (ENFILE)", n)
		c.Hint = "raise it as systemd does: sysctl -w fs.file-max=9223372036854775807"
	}
	return c
}

// CheckTCPMem warns where one run's socket buffers can pass the host's TCP
// memory pressure threshold (net.ipv4.tcp_mem's second value), past which the
// kernel trims every socket's buffers host-wide, and, at its third, refuses
// them memory: a run's buffers count against its memory limit (v2's
// memory.max, v1's memory.kmem.tcp.limit_in_bytes, which brig sets to the
// same), up to api.MaxMemoryMiB, and the kernel sizes tcp_mem from the host's
// RAM (1.46 GiB of pressure on 24 GiB): the egress red team's run in network
// mode none held 1.53 GiB in unread loopback connections of its own. A run's
// own connections in its own namespace are no one's to refuse, so brig does
// not bound them below its memory limit; the check says what to raise. It
// always passes.
func CheckTCPMem() Check { return checkTCPMem("/proc/sys/net/ipv4/tcp_mem") }

func checkTCPMem(path string) Check {
	c := Check{Name: "TCP memory", OK: true}
	b, err := os.ReadFile(path)
	f := strings.Fields(string(b))
	var pressure uint64
	if err == nil && len(f) == 3 {
		pressure, err = strconv.ParseUint(f[1], 10, 64)
	} else if err == nil {
		err = fmt.Errorf("%q is not three numbers", strings.TrimSpace(string(b)))
	}
	if err != nil {
		c.Detail = fmt.Sprintf("net.ipv4.tcp_mem unreadable: %v", err)
		return c
	}
	run := uint64(api.MaxMemoryMiB) << 20
	pressureBytes := pressure * uint64(os.Getpagesize())
	c.Detail = fmt.Sprintf("net.ipv4.tcp_mem = %s: its pressure threshold, %d MiB, is above a run's largest memory limit, %d MiB", strings.Join(f, " "), pressureBytes>>20, run>>20)
	if pressureBytes <= run {
		c.Warn = true
		c.Detail = fmt.Sprintf("net.ipv4.tcp_mem = %s: one run's socket buffers, which count against its memory limit (up to %d MiB), can pass its pressure threshold (%d MiB), "+
			"past which the kernel trims every socket's buffers on the host", strings.Join(f, " "), run>>20, pressureBytes>>20)
		c.Hint = fmt.Sprintf("raise net.ipv4.tcp_mem's second and third values (pages of %d bytes) above the largest memory limit times the runs you allow at once", os.Getpagesize())
	}
	return c
}

// CheckOOMFloor says whether the runs' oom_score_adj of 1000 (markOOMVictim)
// is a floor they can't lower. The kernel makes a written value the process's
// floor (oom_score_adj_min, which its children inherit) only when the writer
// holds CAP_SYS_RESOURCE; without it a run may lower its own value back to the
// service's floor (the escape probe of 2026-12-06: from 1000 to 0 here, where
// root lacks the capability), and the OOM killer then weighs it as it weighs
// the host's own processes. The runs' memory limits bound them either way. It
// always passes.
func CheckOOMFloor() Check {
	floor := 0
	if b, err := os.ReadFile("/proc/self/oom_score_adj"); err == nil {
		floor, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	return checkOOMFloor(hasCapability(unix.CAP_SYS_RESOURCE), floor)
}

func checkOOMFloor(capSysResource bool, own int) Check {
	c := Check{Name: "OOM killer's order", OK: true}
	if capSysResource {
		c.Detail = "every process of a run has oom_score_adj " + sandboxOOMScoreAdj + ", a floor it can't lower (CAP_SYS_RESOURCE): the OOM killer takes the runs first"
		return c
	}
	c.Warn = true
	c.Detail = fmt.Sprintf("brig lacks CAP_SYS_RESOURCE: a run starts at oom_score_adj %s but may lower it to %d, at most the service's own, "+
		"and the OOM killer then weighs it as the host's processes (its memory limit still bounds it)", sandboxOOMScoreAdj, own)
	c.Hint = "run brig with CAP_SYS_RESOURCE: as root with its full capability set, as the systemd unit and the privileged pod of deploy/ do"
	return c
}

// hasCapability reports whether the process holds capability c in its
// effective set.
func hasCapability(c int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[c/32].Effective&(1<<(c%32)) != 0
}

// CheckViewLayers says whether the read-only views of the host folders a run
// sees (sources: the rootfs's binds) are on the filesystem of their empty
// layer, the state directory's: where one is not, overlayfs maps its inode
// numbers (xino) and logs a kernel line for each view of each sandbox. It
// always passes; its Detail names the folders elsewhere.
func CheckViewLayers(stateDir string, sources []string) Check {
	c := Check{Name: "read-only views", OK: true}
	var state unix.Stat_t
	if err := unix.Stat(stateDir, &state); err != nil {
		c.Detail = fmt.Sprintf("the state directory %s: %v", stateDir, err)
		return c
	}
	var elsewhere []string
	for _, src := range sources {
		var st unix.Stat_t
		if err := unix.Stat(src, &st); err == nil && st.Dev != state.Dev {
			elsewhere = append(elsewhere, src)
		}
	}
	if len(elsewhere) == 0 {
		c.Detail = fmt.Sprintf("the %d host folders a run sees are on the state directory's filesystem", len(sources))
		return c
	}
	c.Warn = true
	c.Detail = fmt.Sprintf("%s on another filesystem than the state directory %s: the kernel logs an overlayfs \"xino\" line "+
		"for each of their views in each sandbox", strings.Join(elsewhere, ", "), stateDir)
	c.Hint = "put the state directory (--state-dir, sandbox.state_dir) on the filesystem of /usr"
	return c
}

// FileMax reads the host-wide open-file limit, fs.file-max.
func FileMax() (uint64, error) {
	b, err := os.ReadFile("/proc/sys/fs/file-max")
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// requiredControllers are the cgroup controllers a run's limits need: fail
// closed, a run never starts without one of its limits.
var requiredControllers = []string{"memory", "pids", "cpu"}

// CheckCgroups checks the host's cgroup layout and that the controllers a run
// needs are usable under parent (which cgroup.New makes if it is missing).
func CheckCgroups(parent string) []Check {
	mode, err := cgroup.Detect(cgroup.DefaultMountRoot)
	out := []Check{{Name: "cgroup mode", OK: err == nil, Detail: fmt.Sprint(mode),
		Hint: fmt.Sprint("mount cgroup v2 (or v1 controllers) under ", cgroup.DefaultMountRoot, ": ", err)}}
	// A parent that holds what brig did not make is not opened: New would
	// write into it.
	if foreign := ForeignGroups(parent); foreign != nil {
		return append(out,
			Check{Name: "cgroup controllers", OK: true, Warn: true, Detail: fmt.Sprintf("not checked under %q, which brig may not use", parent),
				Hint: "run brig check again with the parent you choose"},
			Check{Name: "cgroup parent", Detail: foreign.Error(), Hint: "choose another --cgroup-parent (sandbox.cgroup_parent), one no other software uses"})
	}
	// Nor is a parent a running service owns, or a group within one (the
	// review of 2026-12-06: New made brig/sub in a live service's parent,
	// which refused its own restart after a crash); the service checked its
	// controllers when it started.
	var lock *cgroup.ParentLock
	err = cgroup.OlderOwner(parent, false)
	if err == nil {
		lock, err = cgroup.ShareParent("", parent)
	}
	switch {
	case errors.Is(err, cgroup.ErrParentLocked):
		return append(out,
			Check{Name: "cgroup controllers", OK: true, Detail: fmt.Sprintf("not checked under %q: a running brig serve owns it or a group above it, and checked them when it started", parent)},
			Check{Name: "cgroup parent", OK: true, Detail: fmt.Sprintf("%q is a running service's", parent)})
	case err != nil:
		hint := "see the error"
		if errors.Is(err, fs.ErrPermission) {
			hint = "run it as root"
		}
		return append(out, Check{Name: "cgroup parent", Detail: err.Error(), Hint: hint})
	}
	defer lock.Close()
	cg, err := cgroup.New(cgroup.Config{Parent: parent, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		hint := "brig needs the " + strings.Join(requiredControllers, ", ") + " controllers"
		switch {
		case errors.Is(err, cgroup.ErrInvalid):
			hint = "give a cgroup parent below the hierarchy's root (--cgroup-parent, sandbox.cgroup_parent)"
		case errors.Is(err, fs.ErrPermission):
			hint = "run it as root"
		}
		return append(out, Check{Name: "cgroup controllers", Detail: err.Error(), Hint: hint})
	}
	have := cg.Controllers()
	limits := cg.CanLimit(cgroup.Limits{MemoryBytes: 1, Pids: 1, CPUs: 1})
	// A check leaves no parent behind that it made: the sandboxed runs that
	// follow make it again, and remove it after. (Not one a running service
	// owns, above: the review of 2026-12-06 found an idle service's parent
	// removed.)
	cg.RemoveParentIfEmpty()
	var names, missing []string
	for n, ok := range have {
		if ok {
			names = append(names, n)
		}
	}
	for _, n := range requiredControllers {
		if !have[n] {
			missing = append(missing, n)
		}
	}
	slices.Sort(names)
	out = append(out, Check{Name: "cgroup controllers", OK: len(missing) == 0,
		Detail: "usable: " + strings.Join(names, ", "), Hint: "enable the missing controllers: " + strings.Join(missing, ", ")})
	if limits != nil && len(missing) == 0 { // swap accounting: the controllers are there
		out = append(out, Check{Name: "cgroup limits", Detail: limits.Error(), Hint: "boot with swapaccount=1 or turn swap off"})
	}
	return append(out, Check{Name: "cgroup parent", OK: true, Detail: fmt.Sprintf("%q holds nothing but brig's groups", parent)})
}

// FirstFailure is an error for the first check that failed, with its hint, or
// nil when every one passed: what a service that must not start says.
func FirstFailure(checks []Check) error {
	for _, ch := range checks {
		if !ch.OK {
			return fmt.Errorf("this host can't run brig: %s: %s (%s; Hint: run `brig check`)", ch.Name, ch.Detail, ch.Hint)
		}
	}
	return nil
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

// IDRangeProcesses names CheckIDRange's check of the processes: the one that
// reports a passing state (a brig process that just stopped leaves runs that
// are still dying, their ids no longer held) rather than a configuration.
const IDRangeProcesses = "id range: processes"

// CheckIDRange checks that nothing on the host but brig's own runs uses an id of
// r: no account or group in /etc/passwd and /etc/group, no subordinate range in
// /etc/subuid and /etc/subgid, no process (other than those of ids a brig
// process holds now), and no owner of a file under roots (the rootfs layers and
// binds a run sees, and the state directory). A run mapped to such an id would
// share it with whatever already has it. The folders of skip are not walked:
// what no run sees and its owner clears before any run (the package cache's
// staging area, where a crashed install leaves its installer's files).
func CheckIDRange(r IDRange, lockDir string, roots []string, skip ...string) []Check {
	return checkIDRange(r, lockDir, roots, skip, []string{"/etc/passwd", "/etc/group"}, []string{"/etc/subuid", "/etc/subgid"})
}

func checkIDRange(r IDRange, lockDir string, roots, skip, accountFiles, subIDFiles []string) []Check {
	r = r.withDefaults()
	if lockDir == "" {
		lockDir = IDLockDir
	}
	if err := r.validate(); err != nil {
		return []Check{{Name: "id range", Detail: err.Error(), Hint: "configure a range of unused ids above 65535"}}
	}
	var out []Check
	var found []string
	for _, f := range accountFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			fields := strings.Split(line, ":")
			if len(fields) < 3 {
				continue
			}
			if id, err := strconv.ParseUint(fields[2], 10, 32); err == nil && r.Contains(uint32(id)) {
				found = append(found, fmt.Sprintf("%s %s (%d)", filepath.Base(f), fields[0], id))
			}
		}
	}
	for _, f := range subIDFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			fields := strings.Split(line, ":")
			if len(fields) != 3 {
				continue
			}
			first, err1 := strconv.ParseUint(fields[1], 10, 32)
			n, err2 := strconv.ParseUint(fields[2], 10, 32)
			if err1 == nil && err2 == nil && n > 0 && first <= uint64(r.Last()) && first+n-1 >= uint64(r.First) {
				found = append(found, fmt.Sprintf("%s %s (%d+%d)", filepath.Base(f), fields[0], first, n))
			}
		}
	}
	out = append(out, Check{Name: "id range: accounts", OK: len(found) == 0,
		Detail: orNone(fmt.Sprintf("no account, group or subordinate range in %s", r), "in the range: "+strings.Join(found, ", "), len(found) == 0),
		Hint:   "choose another id range (sandbox.id_first and sandbox.id_count in the config, --id-first and --id-count) or move those ids out of it"})

	found = found[:0]
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "status"))
		if err != nil {
			continue // gone meanwhile
		}
		// Each pid once, with each of its ids in the range once (a status
		// gives the real, effective, saved and filesystem ids).
		var ids []string
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			if k != "Uid" && k != "Gid" {
				continue
			}
			for _, f := range strings.Fields(v) {
				id, err := strconv.ParseUint(f, 10, 32)
				if err != nil || !r.Contains(uint32(id)) || IDsInUse(r, lockDir, uint32(id)) {
					continue
				}
				if s := fmt.Sprintf("%s %d", strings.ToLower(k), id); !slices.Contains(ids, s) {
					ids = append(ids, s)
				}
			}
		}
		if len(ids) > 0 {
			found = append(found, fmt.Sprintf("pid %s (%s)", p.Name(), strings.Join(ids, ", ")))
		}
	}
	hint := "a process brig did not start runs as an id of the range: choose another range"
	if os.Geteuid() != 0 {
		// The locks that tell brig's runs from the rest are root's to read.
		hint = "run brig check as root, which tells brig's own runs from other processes"
	}
	out = append(out, Check{Name: IDRangeProcesses, OK: len(found) == 0,
		Detail: orNone("no process of the range's ids but brig's runs", "in the range: "+strings.Join(uniqueFirst(found, 5), ", "), len(found) == 0),
		Hint:   hint})

	found = found[:0]
	for _, root := range roots {
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return nil // unreadable or gone: not ours to judge
			}
			if d.IsDir() && slices.Contains(skip, p) {
				return filepath.SkipDir
			}
			var st unix.Stat_t
			if unix.Lstat(p, &st) == nil && (r.Contains(st.Uid) || r.Contains(st.Gid)) {
				found = append(found, fmt.Sprintf("%s (%d:%d)", p, st.Uid, st.Gid))
			}
			return nil
		})
	}
	out = append(out, Check{Name: "id range: files", OK: len(found) == 0,
		Detail: orNone(fmt.Sprintf("no file a run sees is owned by the range (%s)", strings.Join(roots, ", ")),
			"owned by the range: "+strings.Join(uniqueFirst(found, 5), ", "), len(found) == 0),
		Hint: "a run mapped to that id would own the file: chown it to root, or choose another range"})
	return out
}

// uniqueFirst is the first n of ss, and how many more there are.
func uniqueFirst(ss []string, n int) []string {
	if len(ss) <= n {
		return ss
	}
	return append(ss[:n:n], fmt.Sprintf("and %d more", len(ss)-n))
}
