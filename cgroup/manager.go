package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"
)

// Log field names.
const (
	logKeyMode        = "mode"
	logKeyRoot        = "root"
	logKeyParent      = "parent"
	logKeyGroup       = "cgroup"
	logKeyKernel      = "kernel"
	logKeyControllers = "controllers"
	logKeyErr         = "err"
)

// Manager makes run groups under one parent cgroup. It is safe for concurrent
// use.
type Manager struct {
	cfg    Config
	mode   Mode
	kernel string
	// controllers is what Controllers reports; SetLimits checks it first.
	controllers map[string]bool
	// hostSwaps says /proc/swaps listed an active swap area when New ran.
	hostSwaps bool
	// emptyTimeout is defaultEmptyTimeout; tests shorten it.
	emptyTimeout time.Duration

	// v1Info describes the v1 hierarchies; empty on ModeUnified.
	v1Info v1Layout
	// v2 is the parent in the cgroup2 hierarchy (ModeUnified) or the hybrid
	// twin (ModeHybrid); nil on ModeLegacy.
	v2     *cgroup2.Manager
	v2Info v2Layout

	// above are the levels above the parent that New made, in every
	// hierarchy, each hierarchy's deepest first: a stop removes them again
	// where nothing else is left in them. madeParents are the parent's own
	// directories that New made (Abandon).
	above, madeParents []string

	// mu guards live.
	mu sync.Mutex
	// live holds the names of the groups this Manager created and has not yet
	// deleted; Sweep leaves them alone.
	live map[string]bool
}

// New validates cfg, detects or checks the layout, and creates the parent
// group in every hierarchy brig uses. On ModeUnified it enables memory, pids
// and cpu in the parent's subtree_control where the host delegates them; it
// never writes to a cgroup above the parent. Fallbacks the host forces (no
// cgroup.kill, no v1 freezer, swap that cannot be limited) are logged once here,
// with the kernel version.
func New(cfg Config) (*Manager, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	detected, err := Detect(cfg.MountRoot)
	if err != nil {
		return nil, err
	}
	mode := cfg.Mode
	if mode == ModeDetect {
		mode = detected
	}
	if !compatible(mode, detected) {
		return nil, fmt.Errorf("cgroup mode %s was configured but %q holds the %s layout: %w", mode, cfg.MountRoot, detected, ErrNoCgroups)
	}
	m := &Manager{cfg: cfg, mode: mode, kernel: kernelRelease(), emptyTimeout: defaultEmptyTimeout, live: map[string]bool{}}
	m.hostSwaps = hostSwaps()

	if mode == ModeLegacy || mode == ModeHybrid {
		if m.v1Info, err = findV1(cfg.MountRoot); err != nil {
			return nil, err
		}
	}
	switch mode {
	case ModeUnified:
		m.noteMissing(cfg.MountRoot)
		m.v2Info, err = setupV2(cfg.MountRoot, cfg.Parent, true)
	case ModeHybrid:
		m.noteMissing(filepath.Join(cfg.MountRoot, unifiedDir))
		m.v2Info, err = setupV2(filepath.Join(cfg.MountRoot, unifiedDir), cfg.Parent, false)
	}
	if err != nil {
		return nil, err
	}
	if mode == ModeHybrid && m.v2Info.hasKill {
		m.v1Info = m.v1Info.without(twinServes)
	}
	if mode == ModeLegacy || mode == ModeHybrid {
		for _, h := range m.v1Info.hierarchies {
			m.noteMissing(h.dir)
		}
		if err = newV1Parent(m.v1Info, cfg.Parent); err != nil {
			return nil, err
		}
	}
	m.v2 = m.v2Info.parent
	m.controllers = m.findControllers()
	m.logFallbacks()
	cfg.Logger.Info("cgroup manager ready", logKeyMode, mode.String(), logKeyRoot, cfg.MountRoot,
		logKeyParent, cfg.Parent, logKeyControllers, m.controllers, logKeyKernel, m.kernel)
	return m, nil
}

// findControllers says which of memory, pids, cpu, cpuacct and freezer run
// groups can use.
func (m *Manager) findControllers() map[string]bool {
	c := map[string]bool{}
	if m.mode == ModeUnified {
		for _, name := range v2Controllers {
			c[name] = m.v2Info.enabled[name]
		}
		// cpu.stat with usage_usec and cgroup.freeze are core files of every
		// non-root cgroup2 group, whatever the controllers.
		c["cpuacct"] = true
		c["freezer"] = m.v2Info.hasFreeze
		return c
	}
	for _, name := range v1Controllers {
		c[name] = false
	}
	for _, s := range m.v1Info.subsystems {
		c[string(s.Name())] = true
	}
	if m.mode == ModeHybrid {
		// The twin's core cpu.stat (readUsageLocked).
		c["cpuacct"] = true
	}
	return c
}

func (m *Manager) logFallbacks() {
	log := m.cfg.Logger.With(logKeyMode, m.mode.String(), logKeyKernel, m.kernel)
	if m.v2 != nil && !m.v2Info.hasKill {
		log.Warn("cgroup.kill is missing (Linux 5.14+): Kill falls back to freeze, SIGKILL every process, thaw")
	}
	if m.mode == ModeLegacy {
		log.Warn("no cgroup2 hierarchy in use, so no cgroup.kill: Kill freezes the group, SIGKILLs every process, thaws")
	}
	if m.mode != ModeUnified && !m.controllers["freezer"] && (m.v2 == nil || !m.v2Info.hasKill) {
		log.Warn("neither cgroup.kill nor the v1 freezer is available: Kill signals processes in a loop, which a fast forker can outrun until its pids limit")
	}
	if m.mode == ModeUnified && m.controllers["memory"] && !m.v2Info.oomGroup {
		log.Warn("memory.oom.group is missing (Linux 4.19+): after an OOM kill brig kills the rest of the run's cgroup on the memory.events notification, a moment later than the kernel would")
	}
	if m.controllers["memory"] && !m.swapLimit() {
		if m.hostSwaps {
			log.Warn("swap is not accounted per cgroup (boot with swapaccount=1): memory limits will be refused rather than let runs swap")
		} else {
			log.Info("swap is not accounted per cgroup; the host has no active swap, so memory limits still hold")
		}
	}
}

// CanLimit says whether the groups can hold l: a *ControllerError for the
// first limit whose controller the host lacks, or a memory limit on a host
// that swaps without swap accounting. A service checks it at its start, with
// every limit a run has, so that it refuses to start rather than fail each
// run (as a pure cgroup v2 host without the controllers delegated to the
// parent would).
func (m *Manager) CanLimit(l Limits) error {
	need := map[string]bool{"memory": l.MemoryBytes > 0, "pids": l.Pids > 0, "cpu": l.CPUs > 0}
	for _, c := range []string{"memory", "pids", "cpu"} {
		if need[c] && !m.controllers[c] {
			e := &ControllerError{Controller: c, Mode: m.mode, Root: m.limitRoot()}
			if m.mode == ModeUnified {
				// Top-down: a controller reaches the parent only through
				// every ancestor's cgroup.subtree_control, and a cgroup
				// with processes of its own can't pass it on.
				e.Hint = "on cgroup v2 every ancestor of the parent must enable it in its cgroup.subtree_control: give a parent right below the hierarchy's root (systemd enables the controllers there for a unit with Delegate=yes), and in a container keep brig's own process out of the cgroup its runs' parent is under"
				if !rootOffers(m.cfg.MountRoot, c) {
					// No ancestor can pass on what the root lacks: the
					// hint above would not help (the cgroup v2 probe).
					e.Hint = "the hierarchy's root does not offer it (its cgroup.controllers lacks it): a v1 hierarchy holds it, as on a hybrid host, or the kernel lacks it, or, in a container's cgroup namespace, its runtime did not delegate it; use the host's v1 or hybrid layout, boot with the controller in cgroup v2 (systemd.unified_cgroup_hierarchy=1), or have the container's runtime delegate it"
				}
			}
			return e
		}
	}
	if need["memory"] && !m.swapLimit() && m.hostSwaps {
		return &ControllerError{
			Controller: "memory swap accounting", Mode: m.mode, Root: m.limitRoot(),
			Hint: "the host swaps and the kernel cannot limit a group's swap; boot with swapaccount=1 or turn swap off",
		}
	}
	return nil
}

// rootOffers says whether the cgroup2 hierarchy at root lists controller c
// in its root's cgroup.controllers (true where that can't be read).
func rootOffers(root, c string) bool {
	b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	return err != nil || slices.Contains(strings.Fields(string(b)), c)
}

// swapLimit says whether swap can be limited along with memory.
func (m *Manager) swapLimit() bool {
	if m.mode == ModeUnified {
		return m.v2Info.swapLimit
	}
	return m.v1Info.swapLimit
}

// limitRoot is where limits are written, for error messages.
func (m *Manager) limitRoot() string {
	if m.mode == ModeUnified {
		return m.cfg.MountRoot
	}
	return m.cfg.MountRoot + "/<controller>"
}

// Mode is the layout this Manager drives.
func (m *Manager) Mode() Mode { return m.mode }

// Controllers says which of memory, pids, cpu, cpuacct and freezer run groups
// can use. On v2 "cpuacct" stands for cpu.stat and "freezer" for cgroup.freeze.
// The map is the caller's.
func (m *Manager) Controllers() map[string]bool { return maps.Clone(m.controllers) }

// Create makes the group for one run, with no limits yet, in every hierarchy,
// and arms it so that an OOM kill of any of its processes takes all of them
// (see OOMKilled).
// A name already in use, by this Manager or by a leftover in any hierarchy, is
// ErrExists.
func (m *Manager) Create(name string) (_ *Group, retErr error) {
	if err := validateName(name); err != nil {
		return nil, err
	}
	if !m.claim(name) {
		return nil, fmt.Errorf("creating cgroup %q: %w", name, ErrExists)
	}
	g := m.group(name)
	var made []string
	defer func() {
		if retErr == nil {
			return
		}
		g.closeFDLocked()
		for _, d := range slices.Backward(made) {
			if err := unix.Rmdir(d); err != nil {
				m.cfg.Logger.Error("removing half-created cgroup", logKeyGroup, d, logKeyErr, err)
			}
		}
		m.release(name)
	}()

	// mkdir, not mkdir -p: a group of that name left over from before a crash
	// must not be adopted with whatever limits and processes it holds.
	for _, d := range g.dirs() {
		err := os.Mkdir(d, 0o755)
		if errors.Is(err, fs.ErrNotExist) {
			// A parent that several brig processes share is removed by
			// each as it stops, if empty: maybe just now. Made again, once.
			if err = m.makeParent(); err == nil {
				err = os.Mkdir(d, 0o755)
			}
		}
		if err != nil {
			if errors.Is(err, fs.ErrExist) {
				return nil, fmt.Errorf("creating cgroup %q: %w (a leftover? Sweep removes them)", d, ErrExists)
			}
			return nil, fmt.Errorf("creating cgroup %q: %w", d, err)
		}
		made = append(made, d)
	}
	var err error
	if m.mode != ModeUnified {
		if g.v1, err = cgroup1.Load(cgroup1.StaticPath(g.path), cgroup1.WithHierarchy(m.v1Info.hierarchy)); err != nil {
			return nil, fmt.Errorf("loading v1 cgroup %q: %w", g.path, err)
		}
	}
	if m.v2 != nil {
		if g.v2, err = cgroup2.Load(g.path, cgroup2.WithMountpoint(m.v2Info.root)); err != nil {
			return nil, fmt.Errorf("loading cgroup2 group %q: %w", g.dir2, err)
		}
		if g.fd2, err = unix.Open(g.dir2, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			g.fd2 = -1
			return nil, fmt.Errorf("opening cgroup2 group %q: %w", g.dir2, err)
		}
	}
	// Last, so that nothing fails after the watch has started; and before any
	// process enters, so that no OOM kill goes unseen.
	if err := g.armOOMLocked(); err != nil {
		return nil, fmt.Errorf("arming the OOM watch of cgroup %q: %w", g.name, err)
	}
	return g, nil
}

// group is the handle on the run group called name, whether or not it exists.
func (m *Manager) group(name string) *Group {
	g := &Group{m: m, name: name, path: path.Join("/", m.cfg.Parent, name), fd2: -1, oom: make(chan struct{})}
	if m.v2 != nil {
		g.dir2 = filepath.Join(m.v2Info.root, g.path)
	}
	return g
}

// claim marks name as live, reporting false when it already was.
func (m *Manager) claim(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.live[name] {
		return false
	}
	m.live[name] = true
	return true
}

func (m *Manager) release(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.live, name)
}

// Sweep kills the processes in, and removes, every group under the parent
// that this Manager is not using: brig's own leftovers after a crash. It
// reports how many it removed; the groups it could not remove are in the
// error.
func (m *Manager) Sweep() (int, error) {
	return m.SweepIf(func(string) bool { return true })
}

// SweepIf is Sweep limited to the groups whose name leftover accepts: for a
// parent that several processes share, each removing only what a dead one left.
func (m *Manager) SweepIf(leftover func(name string) bool) (int, error) {
	names := map[string]bool{}
	for _, d := range m.parentDirs() {
		subs, err := subgroups(d)
		if err != nil {
			return 0, fmt.Errorf("sweeping %q: %w", d, err)
		}
		for _, s := range subs {
			names[s] = true
		}
	}
	n := 0
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if !leftover(name) || !m.claim(name) {
			continue // a live run's group
		}
		err := m.group(name).Delete()
		m.release(name)
		if err != nil {
			errs = append(errs, fmt.Errorf("sweeping: %w", err))
			continue
		}
		m.cfg.Logger.Info("removed leftover cgroup", logKeyGroup, name, logKeyParent, m.cfg.Parent)
		n++
	}
	return n, errors.Join(errs...)
}

// Foreign lists what a parent, at dirs (ParentDirs), already holds that ours
// did not make: the groups, in any hierarchy, whose name ours refuses, and
// the processes in the parent's own group (each counted once, though v1
// lists it in every hierarchy). A service that owns its parent sweeps every
// group in it and removes it when it stops, so it must not take a parent that
// holds anything else: a name already in use (system.slice, a typo) would
// lose its processes. Foreign only reads, so that a parent it refuses is left
// as it was: call it before New, which makes the parent and writes its files
// (memory.swappiness on v1, cgroup.subtree_control on v2).
func Foreign(dirs []string, ours func(name string) bool) (groups []string, procs int, err error) {
	names, pids := map[string]bool{}, map[string]bool{}
	for _, d := range dirs {
		subs, err := subgroups(d)
		if err != nil {
			return nil, 0, fmt.Errorf("reading %q: %w", d, err)
		}
		for _, s := range subs {
			if !ours(s) {
				names[s] = true
			}
		}
		b, err := readSmall(filepath.Join(d, "cgroup.procs"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, 0, err
		}
		for _, pid := range strings.Fields(string(b)) {
			pids[pid] = true
		}
	}
	return slices.Sorted(maps.Keys(names)), len(pids), nil
}

// ParentDirs are the directories cfg's parent has, or would have, in every
// hierarchy New would use, and those a v1 layout leaves to a hybrid's twin;
// it only reads.
func ParentDirs(cfg Config) ([]string, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	mode := cfg.Mode
	if mode == ModeDetect {
		var err error
		if mode, err = Detect(cfg.MountRoot); err != nil {
			return nil, err
		}
	}
	var roots []string
	switch mode {
	case ModeUnified:
		roots = []string{cfg.MountRoot}
	case ModeHybrid:
		roots = []string{filepath.Join(cfg.MountRoot, unifiedDir)}
	}
	if mode == ModeLegacy || mode == ModeHybrid {
		v1, err := findV1(cfg.MountRoot)
		if err != nil {
			return nil, err
		}
		for _, h := range v1.hierarchies {
			roots = append(roots, h.dir)
		}
	}
	dirs := make([]string, len(roots))
	for i, r := range roots {
		dirs[i] = filepath.Join(r, cfg.Parent)
	}
	return dirs, nil
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// hostSwaps says whether any swap area is active: /proc/swaps has a line past
// its header.
func hostSwaps() bool {
	b, err := os.ReadFile("/proc/swaps")
	if err != nil {
		return true // unknown: assume the worst, so swap must be limitable
	}
	return len(strings.Split(strings.TrimSpace(string(b)), "\n")) > 1
}

// RemoveParent sweeps every group under the parent and removes the parent
// itself, in every hierarchy: what a service that owns its parent does when it
// stops, and tests when they end. It fails while a group is in use.
func (m *Manager) RemoveParent() error {
	if _, err := m.Sweep(); err != nil {
		return err
	}
	m.mu.Lock()
	live := len(m.live)
	m.mu.Unlock()
	if live > 0 {
		return fmt.Errorf("removing the cgroup parent %q: %d groups are in use", m.cfg.Parent, live)
	}
	return m.removeParentDirs(false)
}

// RemoveParentIfEmpty removes the parent where no group is left under it: for a
// parent that several processes share, whichever stops last removes it.
func (m *Manager) RemoveParentIfEmpty() error {
	return m.removeParentDirs(true)
}

func (m *Manager) removeParentDirs(busyOK bool) error {
	var errs []error
	for _, d := range m.parentDirs() {
		err := unix.Rmdir(d)
		if err != nil && err != unix.ENOENT && !(busyOK && err == unix.EBUSY) {
			errs = append(errs, fmt.Errorf("removing the cgroup parent %s: %w", d, err))
		}
	}
	// The levels New made above a nested parent (brig/a) go where they hold
	// nothing else: another service's brig/b keeps them (EBUSY).
	return errors.Join(append(errs, removeIfEmpty(m.above))...)
}

// removeIfEmpty removes each of dirs, in order, that holds no group: one that
// does (EBUSY), or is gone, is left without an error.
func removeIfEmpty(dirs []string) error {
	var errs []error
	for _, d := range dirs {
		if err := unix.Rmdir(d); err != nil && err != unix.ENOENT && err != unix.EBUSY {
			errs = append(errs, fmt.Errorf("removing the cgroup directory %s that brig made: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// Abandon removes the directories New made, where nothing was made in them
// since: what a start refused after New (a parent that holds groups brig did
// not make, a controller missing) does, so as to leave the hierarchies as it
// found them (the docs probe of 2026-12-06 found a refused start's parent
// left in the hierarchies where it had been missing). A directory that was
// there before New stays.
func (m *Manager) Abandon() error {
	return removeIfEmpty(append(slices.Clone(m.madeParents), m.above...))
}

// noteMissing notes what New is about to make in the hierarchy at root: the
// parent's directory, and the levels above it.
func (m *Manager) noteMissing(root string) {
	if dir := filepath.Join(root, m.cfg.Parent); !exists(dir) {
		m.madeParents = append(m.madeParents, dir)
	}
	m.above = append(m.above, levelsMissing(root, m.cfg.Parent)...)
}

// levelsMissing are the folders between a hierarchy's root and the parent
// group there that do not exist yet, deepest first.
func levelsMissing(root, parent string) []string {
	var missing []string
	for d := filepath.Dir(filepath.Join(root, parent)); d != root && strings.HasPrefix(d, root+"/") && !exists(d); d = filepath.Dir(d) {
		missing = append(missing, d)
	}
	return missing
}

// makeParent makes the parent again where it is missing (as New made it:
// both steps do nothing where it exists).
func (m *Manager) makeParent() error {
	if m.mode == ModeLegacy || m.mode == ModeHybrid {
		if err := newV1Parent(m.v1Info, m.cfg.Parent); err != nil {
			return err
		}
	}
	var err error
	switch m.mode {
	case ModeUnified:
		_, err = setupV2(m.cfg.MountRoot, m.cfg.Parent, true)
	case ModeHybrid:
		_, err = setupV2(filepath.Join(m.cfg.MountRoot, unifiedDir), m.cfg.Parent, false)
	}
	return err
}

// parentDirs is the parent's directory in every hierarchy.
func (m *Manager) parentDirs() []string {
	var dirs []string
	for _, h := range m.v1Info.hierarchies {
		dirs = append(dirs, filepath.Join(h.dir, m.cfg.Parent))
	}
	if m.v2 != nil {
		dirs = append(dirs, filepath.Join(m.v2Info.root, m.cfg.Parent))
	}
	return dirs
}
