package cgroup

import (
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"strings"
	"time"
	"unicode"
)

// Defaults, in one place.
const (
	// DefaultMountRoot is where distributions mount cgroups.
	DefaultMountRoot = "/sys/fs/cgroup"
	// DefaultParent is the cgroup, in every hierarchy, under which brig makes
	// its run groups.
	DefaultParent = "brig"

	// cpuPeriod is the CFS period a CPU limit is expressed against, in µs:
	// the kernel's own for a new group, which a v1 group's first limits
	// therefore leave unwritten (setV1Locked).
	cpuPeriod = 100_000
	// minCPUQuota is the smallest CFS quota the kernel accepts, in µs.
	minCPUQuota = 1_000
	// maxNameLen bounds a group name; cgroupfs itself takes up to 255 bytes.
	maxNameLen = 128

	// killTimeout bounds the freeze, SIGKILL, thaw fallback of Kill.
	killTimeout = 2 * time.Second
	// defaultEmptyTimeout bounds how long Delete waits for killed processes to
	// leave the group before it gives up with ErrBusy.
	defaultEmptyTimeout = 5 * time.Second
)

// Config says where the cgroups are and where brig's groups go.
type Config struct {
	// MountRoot is where cgroups are mounted: the cgroup2 mount itself in the
	// unified layout, the tmpfs holding one directory per controller in the
	// legacy and hybrid ones. Zero: DefaultMountRoot.
	MountRoot string
	// Parent is the cgroup, relative to each hierarchy's root, under which run
	// groups are made; it is created when missing and never removed. Zero:
	// DefaultParent.
	Parent string
	// Mode forces a layout. Zero (ModeDetect): Detect(MountRoot).
	Mode Mode
	// Logger receives the fallbacks this host forces (no cgroup.kill, no
	// freezer, unaccounted swap). Zero: slog.Default().
	Logger *slog.Logger
}

// Limits are the resource limits of one run's group.
type Limits struct {
	// MemoryBytes is the hard memory limit in bytes, with swap disabled: v1
	// writes it to memory.limit_in_bytes and memory.memsw.limit_in_bytes, v2 to
	// memory.max with memory.swap.max 0. Zero: no memory limit.
	MemoryBytes int64
	// Pids is the most tasks (processes and threads) the group may hold,
	// pids.max. Zero: no limit.
	Pids int64
	// CPUs is the CFS bandwidth in CPUs over a 100 ms period (1.0 is one full
	// CPU, 0.5 half of one, 2 two). Zero: no CPU limit.
	CPUs float64
}

// Usage is what a group consumed, read from the kernel's own counters.
type Usage struct {
	// CPU is the CPU time, user and system, of every task that was in the group.
	CPU time.Duration
	// PeakMemoryBytes is the group's high-water memory mark in bytes; zero
	// where the kernel does not keep one (v2 before Linux 5.19).
	PeakMemoryBytes int64
	// OOMKills counts the tasks the kernel's OOM killer killed in the group,
	// for whatever memory was short: the group's own limit, an ancestor's, or
	// the host's.
	OOMKills uint64
	// OwnLimitReached says the group's memory reached its own limit, read
	// where OOMKills is above zero: v2's oom line of memory.events (an
	// allocation about to fail at the limit), v1's peak within 2 MiB of it
	// (memory's, or memory and swap's).
	// False with kills counted, the kill was for memory short elsewhere: an
	// ancestor's limit or the host's.
	OwnLimitReached bool
	// PidsMaxHits counts the forks and clones the group's pids.max refused
	// (the max line of pids.events); zero where the host has no pids
	// controller.
	PidsMaxHits uint64
}

// check is one validation rule: ok says whether it holds, what describes it
// for the error.
type check struct {
	ok   bool
	what string
}

// firstFailed turns the first failed check into an error wrapping ErrInvalid.
func firstFailed(subject string, checks []check) error {
	for _, c := range checks {
		if !c.ok {
			return fmt.Errorf("validating %s: %s: %w", subject, c.what, ErrInvalid)
		}
	}
	return nil
}

// withDefaults fills the zero fields of c.
func (c Config) withDefaults() Config {
	if c.MountRoot == "" {
		c.MountRoot = DefaultMountRoot
	}
	if c.Parent == "" {
		c.Parent = DefaultParent
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate checks a defaulted Config before anything touches the host.
// Validate checks c as New would, before anything is made: a caller's early
// check of its configuration.
func (c Config) Validate() error { return c.withDefaults().validate() }

func (c Config) validate() error {
	_, modeKnown := modeNames[c.Mode]
	return firstFailed("cgroup config", []check{
		{filepath.IsAbs(c.MountRoot), fmt.Sprintf("mount root %q must be absolute", c.MountRoot)},
		{filepath.Clean(c.MountRoot) == c.MountRoot, fmt.Sprintf("mount root %q must be clean", c.MountRoot)},
		{!filepath.IsAbs(c.Parent), fmt.Sprintf("parent %q must be relative to the hierarchy root", c.Parent)},
		{filepath.Clean(c.Parent) == c.Parent, fmt.Sprintf("parent %q must be clean", c.Parent)},
		{c.Parent != "." && c.Parent != ".." && !strings.HasPrefix(c.Parent, "../"),
			fmt.Sprintf("parent %q must stay below the hierarchy root", c.Parent)},
		// A line of a state directory's record of parents, and a word of a
		// log line (the review of 2026-12-06).
		{strings.IndexFunc(c.Parent, unicode.IsControl) < 0, fmt.Sprintf("parent %q must hold no control character", c.Parent)},
		{modeKnown, fmt.Sprintf("unknown mode %d", int(c.Mode))},
	})
}

// validateName checks a run group's name: one path component that cannot
// collide with a control file or escape the parent.
func validateName(name string) error {
	return firstFailed(fmt.Sprintf("cgroup name %q", name), []check{
		{name != "", "empty"},
		{len(name) <= maxNameLen, fmt.Sprintf("longer than %d bytes", maxNameLen)},
		{strings.IndexFunc(name, badNameRune) < 0, "only letters, digits, '-', '_' and '.' are allowed"},
		{!strings.HasPrefix(name, "."), "must not start with '.'"},
	})
}

func badNameRune(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
}

// validate checks Limits before anything is written.
func (l Limits) validate() error {
	return firstFailed("cgroup limits", []check{
		{l.MemoryBytes >= 0, fmt.Sprintf("memory %d bytes is negative", l.MemoryBytes)},
		{l.Pids >= 0, fmt.Sprintf("pids %d is negative", l.Pids)},
		{!math.IsNaN(l.CPUs) && !math.IsInf(l.CPUs, 0) && l.CPUs >= 0, fmt.Sprintf("cpus %v is not a finite, non-negative number", l.CPUs)},
		// Before the quota's check: a quota of 1e300 CPUs overflows, and read
		// as below the minimum (the operator probe of 2026-12-06).
		{l.CPUs <= 1<<20, fmt.Sprintf("cpus %v is absurdly large", l.CPUs)},
		{l.CPUs == 0 || l.cpuQuota() >= minCPUQuota, fmt.Sprintf("cpus %v is below the kernel's minimum quota of %d µs per %d µs", l.CPUs, minCPUQuota, cpuPeriod)},
	})
}

// CheckCPUs refuses a CPU limit (Limits.CPUs) the kernel can't set: below its
// minimum quota, or not a finite number. 0 sets none.
func CheckCPUs(cpus float64) error { return Limits{CPUs: cpus}.validate() }

// cpuQuota is the CFS quota in µs per cpuPeriod that l.CPUs stands for.
func (l Limits) cpuQuota() int64 {
	return int64(math.Round(l.CPUs * cpuPeriod))
}
