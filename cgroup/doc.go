// Package cgroup owns brig's control groups: one group per run under a parent
// group, with a memory limit that leaves no room for swap, a pids limit and a
// CPU quota; placing the run's processes in it; reading what it used and
// whether the kernel OOM-killed anything; killing everything inside, on demand
// and on the first OOM kill, so that a run is one unit; removing it; and
// sweeping leftovers after a crash.
//
// One API covers the three layouts hosts have. Pure cgroup v2 (ModeUnified)
// is the common case. cgroup v1 (ModeLegacy) keeps one hierarchy per
// controller; brig uses only memory, pids, cpu, cpuacct and freezer. The
// hybrid layout (ModeHybrid) has the v1 controllers plus a cgroup2 hierarchy
// at <mount root>/unified: limits go through v1, and each group's cgroup2
// twin gives cgroup.kill, cgroup.events, CLONE_INTO_CGROUP and the CPU time,
// so a hybrid group with cgroup.kill has no cpuacct or freezer directory. The files are
// driven through github.com/containerd/cgroups/v3.
//
// Fail closed: a limit whose controller the host lacks is an error wrapping
// ErrControllerUnavailable, never a run without the limit. A missing kernel
// feature with a fallback (cgroup.kill before Linux 5.14) is logged once by
// New, with the kernel version.
//
// Typical use, by the supervisor and the jail:
//
//	m, err := cgroup.New(cgroup.Config{}) // detects the layout; parent "brig"
//	if err != nil { ... }
//	if n, err := m.Sweep(); ... // at start: remove groups a crash left behind
//
//	g, err := m.Create(runID)
//	if err != nil { ... }
//	defer g.Delete() // kills what is left, waits, removes it everywhere
//	if err := g.SetLimits(cgroup.Limits{MemoryBytes: 256 << 20, Pids: 64, CPUs: 1}); err != nil { ... }
//	attr := &syscall.SysProcAttr{}
//	if fd := g.CloneFD(); fd >= 0 {
//		attr.UseCgroupFD, attr.CgroupFD = true, fd // born inside (v2, hybrid twin)
//	}
//	... start the process ...
//	if g.NeedsAttach() {
//		err = g.Attach(pid) // v1 hierarchies
//	}
//	select { // the run's end, its deadline, or an OOM kill, which took the whole group
//	case <-exited:
//	case <-deadline:
//	case <-g.OOMKilled():
//	}
//	g.Kill()
//	u, err := g.Usage() // CPU, peak memory, OOM kills
package cgroup
