package cgroup

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Mode is the cgroup layout a Manager drives.
type Mode int

const (
	// ModeDetect, the zero value, asks New to detect the layout with Detect.
	ModeDetect Mode = iota
	// ModeUnified is pure cgroup v2: one hierarchy holding every controller.
	ModeUnified
	// ModeLegacy is cgroup v1: one hierarchy per controller, no cgroup2 at all.
	ModeLegacy
	// ModeHybrid is cgroup v1 controllers plus a cgroup2 hierarchy at
	// <MountRoot>/unified. Limits go through v1; the cgroup2 twin of each group
	// gives cgroup.kill, cgroup.events and CLONE_INTO_CGROUP.
	ModeHybrid
)

// modeNames are the spellings String returns and ParseMode accepts.
var modeNames = map[Mode]string{
	ModeDetect:  "detect",
	ModeUnified: "v2",
	ModeLegacy:  "v1",
	ModeHybrid:  "hybrid",
}

func (m Mode) String() string {
	if s, ok := modeNames[m]; ok {
		return s
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses a mode as String spells it ("v2", "v1", "hybrid" or
// "detect"). The empty string, an unset configuration key, means ModeDetect.
// Anything else is an error wrapping ErrInvalid.
func ParseMode(s string) (Mode, error) {
	if s == "" {
		return ModeDetect, nil
	}
	for m, name := range modeNames {
		if s == name {
			return m, nil
		}
	}
	return ModeDetect, fmt.Errorf("parsing cgroup mode %q (want v2, v1, hybrid or detect): %w", s, ErrInvalid)
}

// unifiedDir is where the hybrid layout mounts its cgroup2 hierarchy, below the
// mount root.
const unifiedDir = "unified"

// Detect tells the cgroup layout mounted at mountRoot (normally "/sys/fs/cgroup")
// from filesystem magic numbers: a cgroup2 mount is ModeUnified; otherwise v1
// controller mounts below it are ModeLegacy, or ModeHybrid when a cgroup2
// hierarchy is also mounted at mountRoot/unified. It only looks at the
// controllers brig uses, so a host with none of them mounted is an error
// wrapping ErrNoCgroups.
func Detect(mountRoot string) (Mode, error) {
	magic, err := fsMagic(mountRoot)
	if err != nil {
		return ModeDetect, fmt.Errorf("detecting cgroup layout at %q: %w", mountRoot, err)
	}
	if magic == unix.CGROUP2_SUPER_MAGIC {
		return ModeUnified, nil
	}
	hasV1 := false
	for _, c := range v1Controllers {
		if m, err := fsMagic(filepath.Join(mountRoot, c)); err == nil && m == unix.CGROUP_SUPER_MAGIC {
			hasV1 = true
			break
		}
	}
	if !hasV1 {
		return ModeDetect, fmt.Errorf("detecting cgroup layout at %q: neither a cgroup2 mount nor any of the v1 controllers %v below it: %w",
			mountRoot, v1Controllers, ErrNoCgroups)
	}
	if m, err := fsMagic(filepath.Join(mountRoot, unifiedDir)); err == nil && m == unix.CGROUP2_SUPER_MAGIC {
		return ModeHybrid, nil
	}
	return ModeLegacy, nil
}

// compatible says whether a Manager may run in mode want on a host where Detect
// found got. A hybrid host can also be driven as pure v1 (ignoring its cgroup2
// twin); every other pairing would write files that are not there.
func compatible(want, got Mode) bool {
	return want == got || (want == ModeLegacy && got == ModeHybrid)
}

func fsMagic(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	return int64(st.Type), nil
}
