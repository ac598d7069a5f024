package cgroup

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// v1Controllers are the only v1 hierarchies brig uses. The library's default
// hierarchy would also make directories under cpuset, devices, blkio and the
// rest, which brig neither limits nor cleans up.
var v1Controllers = []string{"memory", "pids", "cpu", "cpuacct", "freezer"}

// v1Hierarchy is one mounted v1 hierarchy brig uses.
type v1Hierarchy struct {
	// name is the controller the hierarchy was found through.
	name cgroup1.Name
	// dir is the hierarchy's root directory, as reached from the mount root
	// (it may be a symlink, /sys/fs/cgroup/cpu -> cpu,cpuacct).
	dir string
}

// v1Layout is what New found of the v1 hierarchies.
type v1Layout struct {
	// subsystems are the library's controllers, one per available controller;
	// cpu and cpuacct are both here even when they share a hierarchy.
	subsystems []cgroup1.Subsystem
	// hierarchies holds one entry per distinct mounted hierarchy, so that
	// attaching, listing and removing touch each directory once.
	hierarchies []v1Hierarchy
	// swapLimit says memory.memsw.* exists, so swap can be limited with memory.
	swapLimit bool
}

// findV1 looks up which of v1Controllers are mounted below mountRoot, as the
// kernel reports them in /proc/self/mountinfo, and builds the library's
// subsystems for them.
func findV1(mountRoot string) (v1Layout, error) {
	mounts, err := v1Mounts()
	if err != nil {
		return v1Layout{}, err
	}
	var l v1Layout
	seen := map[string]bool{}
	for _, c := range v1Controllers {
		dir := filepath.Join(mountRoot, c)
		real, err := filepath.EvalSymlinks(dir)
		if err != nil || !mounts[real][c] {
			continue
		}
		l.subsystems = append(l.subsystems, newV1Subsystem(mountRoot, c))
		if !seen[real] {
			seen[real] = true
			l.hierarchies = append(l.hierarchies, v1Hierarchy{name: cgroup1.Name(c), dir: dir})
		}
		if c == "memory" {
			_, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes"))
			l.swapLimit = err == nil
		}
	}
	if len(l.subsystems) == 0 {
		return v1Layout{}, fmt.Errorf("finding v1 controllers %v below %q: none is mounted: %w", v1Controllers, mountRoot, ErrNoCgroups)
	}
	return l, nil
}

// newV1Subsystem is the library's controller for c, rooted at mountRoot.
func newV1Subsystem(mountRoot, c string) cgroup1.Subsystem {
	switch c {
	case "memory":
		// OptionalSwap keeps Stat working on hosts booted without swap
		// accounting.
		return cgroup1.NewMemory(mountRoot, cgroup1.OptionalSwap())
	case "pids":
		return cgroup1.NewPids(mountRoot)
	case "cpu":
		return cgroup1.NewCpu(mountRoot)
	case "cpuacct":
		return cgroup1.NewCpuacct(mountRoot)
	case "freezer":
		return cgroup1.NewFreezer(mountRoot)
	}
	panic("cgroup: no v1 subsystem for " + c) // v1Controllers and this switch disagree
}

// v1Mounts maps each v1 cgroup mount point to the controllers it holds, from
// the super options of /proc/self/mountinfo ("rw,cpu,cpuacct").
func v1Mounts() (map[string]map[string]bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading mounts: %w", err)
	}
	defer f.Close()
	out := map[string]map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 36 35 0:30 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		preF, postF := strings.Fields(pre), strings.Fields(post)
		if len(preF) < 5 || len(postF) < 3 || postF[0] != "cgroup" {
			continue
		}
		opts := map[string]bool{}
		for _, o := range strings.Split(postF[2], ",") {
			opts[o] = true
		}
		out[preF[4]] = opts
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading mounts: %w", err)
	}
	return out, nil
}

// twinServes are the v1 controllers whose work a hybrid host's unified twin
// does when it has cgroup.kill: the twin's core cpu.stat counts the same
// tasks' CPU time as cpuacct.usage, and cgroup.kill ends a group without the
// freezer. Every hierarchy a group uses costs a mkdir, a move per process
// brought in, and an rmdir (go test -bench 'CreateSetLimitsDelete|Attach'
// ./cgroup), so a hybrid group leaves these two out.
var twinServes = []string{"cpuacct", "freezer"}

// without is l less the controllers in drop, and less the hierarchies named
// by one of them. A hierarchy is named by the first of v1Controllers it holds,
// so one that also holds memory, pids or cpu (cpu,cpuacct) stays.
func (l v1Layout) without(drop []string) v1Layout {
	out := v1Layout{swapLimit: l.swapLimit}
	for _, s := range l.subsystems {
		if !slices.Contains(drop, string(s.Name())) {
			out.subsystems = append(out.subsystems, s)
		}
	}
	for _, h := range l.hierarchies {
		if !slices.Contains(drop, string(h.name)) {
			out.hierarchies = append(out.hierarchies, h)
		}
	}
	return out
}

// has says l uses controller c.
func (l v1Layout) has(c string) bool {
	return slices.ContainsFunc(l.subsystems, func(s cgroup1.Subsystem) bool { return string(s.Name()) == c })
}

// hierarchy is the library's cgroup1.Hierarchy for l: only the controllers
// brig uses.
func (l v1Layout) hierarchy() ([]cgroup1.Subsystem, error) { return l.subsystems, nil }

// newV1Parent makes the parent group in every hierarchy of l, and sets its
// memory.swappiness to 0, which each run group takes from it when made (v1
// copies a new group's swappiness from its parent's): a group's own limit then
// never swaps its memory out, even on a host whose swap was turned on after
// New checked /proc/swaps and which has no memory.memsw to limit swap with,
// so memory_mib still bounds what a run holds. No limit is written into the
// parent: limits belong to the run groups.
func newV1Parent(l v1Layout, parent string) error {
	_, err := cgroup1.New(cgroup1.StaticPath("/"+parent), &specs.LinuxResources{}, cgroup1.WithHierarchy(l.hierarchy))
	if err != nil {
		return fmt.Errorf("creating v1 parent cgroup %q: %w", parent, err)
	}
	for _, h := range l.hierarchies {
		if h.name != "memory" {
			continue
		}
		if err := os.WriteFile(filepath.Join(h.dir, parent, "memory.swappiness"), []byte("0"), 0); err != nil {
			return fmt.Errorf("setting the v1 parent cgroup %q's memory.swappiness: %w", parent, err)
		}
	}
	return nil
}
