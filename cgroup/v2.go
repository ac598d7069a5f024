package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/containerd/cgroups/v3/cgroup2"
)

// v2Controllers are the controllers brig enables for its run groups on v2.
var v2Controllers = []string{"memory", "pids", "cpu"}

// v2Layout is what New found of the cgroup2 hierarchy.
type v2Layout struct {
	// root is the cgroup2 mount: the mount root on ModeUnified, its "unified"
	// directory on ModeHybrid.
	root string
	// parent is the library's handle on the parent group.
	parent *cgroup2.Manager
	// enabled holds the controllers run groups get: those of v2Controllers the
	// parent's cgroup.subtree_control holds once New has enabled what it could.
	enabled map[string]bool
	// hasKill says cgroup.kill exists (Linux 5.14+).
	hasKill bool
	// hasFreeze says cgroup.freeze exists (Linux 5.2+).
	hasFreeze bool
	// swapLimit says memory.swap.max exists, so swap can be turned off.
	swapLimit bool
	// oomGroup says memory.oom.group exists (Linux 4.19+), so the kernel can
	// OOM-kill a whole group at once.
	oomGroup bool
}

// setupV2 makes the parent group in the cgroup2 hierarchy at root and, when
// enableControllers is set (ModeUnified), enables in its subtree_control those
// of v2Controllers that the parent was given. A controller reaches a group
// only through its parent's subtree_control, so for a nested parent (brig/a)
// it enables them, top-down, in each level above the parent that it made
// itself. It writes nothing in a group it did not make: a controller the
// host does not delegate to the parent stays unavailable, and the service
// refuses to start (Manager.CanLimit).
func setupV2(root, parent string, enableControllers bool) (v2Layout, error) {
	l := v2Layout{root: root, enabled: map[string]bool{}}
	dir := filepath.Join(root, parent)
	made := levelsMissing(root, parent)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return l, fmt.Errorf("creating cgroup2 parent %q: %w", dir, err)
	}
	if enableControllers {
		for i := len(made) - 1; i >= 0; i-- {
			if err := enableOffered(made[i]); err != nil {
				return l, err
			}
		}
	}
	m, err := cgroup2.Load("/"+parent, cgroup2.WithMountpoint(root))
	if err != nil {
		return l, fmt.Errorf("loading cgroup2 parent %q: %w", dir, err)
	}
	l.parent = m
	l.hasKill = exists(filepath.Join(dir, "cgroup.kill"))
	l.hasFreeze = exists(filepath.Join(dir, "cgroup.freeze"))
	if !enableControllers {
		return l, nil
	}

	if err := enableOffered(dir); err != nil {
		return l, err
	}
	subtree := filepath.Join(dir, "cgroup.subtree_control")
	b, err := os.ReadFile(subtree)
	if err != nil {
		return l, fmt.Errorf("reading %q: %w", subtree, err)
	}
	for _, c := range strings.Fields(string(b)) {
		l.enabled[c] = true
	}
	// The parent's own memory files exist when memory was delegated to it.
	l.swapLimit = exists(filepath.Join(dir, "memory.swap.max"))
	l.oomGroup = exists(filepath.Join(dir, "memory.oom.group"))
	return l, nil
}

// enableOffered enables in dir's subtree_control those of v2Controllers that
// dir was given, for its children.
func enableOffered(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("reading controllers of %q: %w", dir, err)
	}
	var enable []string
	for _, c := range strings.Fields(string(b)) {
		if slices.Contains(v2Controllers, c) {
			enable = append(enable, "+"+c)
		}
	}
	if len(enable) == 0 {
		return nil
	}
	subtree := filepath.Join(dir, "cgroup.subtree_control")
	if err := os.WriteFile(subtree, []byte(strings.Join(enable, " ")), 0); err != nil {
		if errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("enabling controllers %v in %q: %w: the group holds processes of its own, and cgroup v2 passes controllers on only from a group without any (the no-internal-process rule); give a cgroup parent none of whose groups holds a process (not brig's own unit's group: under systemd, one outside it, or DelegateSubgroup=)", enable, subtree, err)
		}
		return fmt.Errorf("enabling controllers %v in %q: %w", enable, subtree, err)
	}
	return nil
}

// v2Resources turns Limits into the library's v2 resources.
func v2Resources(l Limits, swapLimit bool) *cgroup2.Resources {
	var r cgroup2.Resources
	if l.MemoryBytes > 0 {
		mem := l.MemoryBytes
		r.Memory = &cgroup2.Memory{Max: &mem}
		if swapLimit {
			var noSwap int64
			r.Memory.Swap = &noSwap
		}
	}
	if l.Pids > 0 {
		r.Pids = &cgroup2.Pids{Max: l.Pids}
	}
	if l.CPUs > 0 {
		quota, period := l.cpuQuota(), uint64(cpuPeriod)
		r.CPU = &cgroup2.CPU{Max: cgroup2.NewCPUMax(&quota, &period)}
	}
	return &r
}
