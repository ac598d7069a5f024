package jail

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/cgroup"
	"github.com/brig-sandbox/brig/jail/pid1"
	"github.com/brig-sandbox/brig/jail/reaper"
	"github.com/brig-sandbox/brig/rootfs"
	"github.com/brig-sandbox/brig/seccomp"
)

// Defaults of Config.
const (
	DefaultStateDir = "/var/lib/brig"
	DefaultCPUs     = 1.0
	DefaultPids     = 512
	// maxPids is PID_MAX_LIMIT on 64-bit kernels: pids.max refuses more.
	maxPids         = 1 << 22
	DefaultHostname = "sandbox"
	// drainGrace bounds how long the output readers may take to reach EOF once the
	// init is gone (every writer is dead by then; this only guards a defect).
	drainGrace = 2 * time.Second
	// prepareNice is the nice value of inits while they prepare and wait in the
	// pool (they inherit it from the spawner's thread); a run's init is set back
	// to 0 when the run takes it. It ranks them only against the processes of
	// their own cpu cgroup: the spawner's thread and an init before its move
	// against the service's threads, and afterwards nothing, since each
	// sandbox is a cpu cgroup of its own with the default weight, which the
	// scheduler weighs against the runs' groups before any nice value. Making
	// a pooled sandbox's group an idle one (cpu.idle) until its run was
	// measured and not kept (bench/HISTORY.md, fifteenth session): the same
	// throughput in both languages and the same Python p50, JavaScript's tail
	// traded for its p50.
	prepareNice = 19
	// sandboxTimerSlack is the timer slack, in ns, of every sandbox's processes
	// (they inherit it from the spawner's thread, which sets it): the kernel's
	// default, which every process init starts has, whatever the spawner's
	// thread inherited. The service widens its Go runtime monitor's slack
	// (internal/sysmon), and a thread that the monitor starts inherits it; a
	// program's sleeps and timed waits would otherwise end up to a millisecond
	// late.
	sandboxTimerSlack = 50_000
	// refillDelay is how long a filler waits, once a run has taken a sandbox,
	// before it prepares the next: the run's first milliseconds are then not
	// shared with a preparation. Nice 19 is not enough for them: a program
	// woken beside a preparation waited for it up to a scheduler slice (the
	// first byte of a warm Python run: 2.39 to 2.86 ms p50 without the wait,
	// 1.40 to 1.80 with 5 ms; C=1 spaced runs' p50 9.3 to 10.4 ms against 6.7
	// and 6.8; C=2 throughput unchanged, README).
	refillDelay = 5 * time.Millisecond
	// setupTimeout bounds how long a sandbox may take to start its program (it
	// takes milliseconds; this only guards a defect or a wedged host).
	setupTimeout = 30 * time.Second
)

// BackstopMargin is how long past its time limit a run's sandbox ends by
// itself (reaper.ArmBackstop), for when the supervisor that enforces the
// limit is stopped. It is armed once the supervisor has heard of the
// interpreter's start, which a loaded host may deliver late.
const BackstopMargin = 10 * time.Second

// backstopMargin is BackstopMargin, but for the tests of the backstop.
var backstopMargin = BackstopMargin

// cloneFlags are the namespaces every init is cloned into. The cgroup namespace is
// made by the init itself (see prepareSteps), and the user namespace by the init
// when it starts the program (see spawnInUserNS): the init stays host root while
// it builds the root, and without CLONE_NEWUSER Go clones it with vfork, whose
// cost does not grow with the supervisor's memory. The program's clone copies
// only the init, a small process whatever the supervisor's size.
const cloneFlags = unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS

// reaperCloneFlags are a reaper's: its pid namespace, of which it must be pid
// 1. It makes the other four of cloneFlags itself, first thing
// (jail/reaper), so that their kernel work is not the supervisor's: the
// clone's copy_namespaces, a network namespace's above all, was 12.8 % of the
// service's CPU samples at C=2 (perf, README). The supervisor enters them
// only once the reaper is ready (Run's Attach and mounts, forkWarm).
const reaperCloneFlags = unix.CLONE_NEWPID

// Config configures a Launcher.
type Config struct {
	// StateDir holds the scratch mount point; zero means DefaultStateDir.
	StateDir string
	// Rootfs gives each language's root. Required.
	Rootfs rootfs.Provider
	// Cgroups creates the runs' cgroups. Required.
	Cgroups *cgroup.Manager
	// Filter is the programs' compiled seccomp filter; nil means seccomp.Default()'s
	// verdicts, from the stacks of programFilters.
	Filter seccomp.Program
	// PoolSize is how many sandboxes are kept cloned and waiting for a run; zero
	// means none: each run clones its own when it starts.
	PoolSize int
	// CPUs is each run's CPU limit in CPUs; zero means DefaultCPUs.
	CPUs float64
	// Pids is each run's limit on processes and threads; zero means DefaultPids.
	Pids int64
	// IDs is the range of host ids the runs' programs and inits are mapped to,
	// two per sandbox; zero means DefaultIDFirst and DefaultIDCount.
	IDs IDRange
	// IDLockDir is where brig processes lock the blocks of IDs they use; zero
	// means IDLockDir.
	IDLockDir string
	// Warm lists the languages whose pooled sandboxes hold their interpreter
	// already started, waiting for its program (see warm.go). It needs
	// PoolSize; a run that can't use one (WarmEligible) runs cold.
	Warm map[rootfs.Language]bool
	// ZygoteRuns and ZygoteAge bound the life of a Python zygote (zygote.go):
	// it is replaced after this many forks or this long, whichever comes
	// first; zero means DefaultZygoteRuns and DefaultZygoteAge.
	ZygoteRuns int
	ZygoteAge  time.Duration
	// WarmMaxAge bounds how long a warm sandbox waits in its pool: an older
	// one is replaced (pool.go's refresh) and never given to a run. Its
	// interpreter's clocks count from its start (node's process.uptime()),
	// and a zygote's child keeps its zygote's layout and hash seed however
	// long it waits. Zero means DefaultWarmMaxAge.
	WarmMaxAge time.Duration
	// InitPath is the binary each sandbox's init runs (brig-init, or brig
	// re-executed); zero means DefaultInitPath's choice.
	InitPath string
	// InterpreterCopies runs each interpreter from a copy on a tmpfs of huge
	// pages, bound over its file in each sandbox's root (copies.go): a
	// start that touches fewer pages, for the copies' memory.
	InterpreterCopies bool
	// ReaperPath is the binary a zygote's sandbox's reaper runs (brig-reaper,
	// or brig re-executed: rootbuild.go); zero means DefaultReaperPath's.
	ReaperPath string
	// Logger gets one line per pool failure; nil means slog.Default().
	Logger *slog.Logger
}

// emptyLayer makes, or checks, the empty directory that is the second layer
// of every read-only view (pid1.ReadOnlyView) of a sandbox's host folders and
// read-only mounts: whatever it held would be in each of those folders of
// every run, so one that is not an empty, root-owned directory writable by
// root alone is refused.
func emptyLayer(stateDir string) (string, error) {
	dir := filepath.Join(stateDir, "jail", "empty")
	if err := os.MkdirAll(dir, 0o555); err != nil {
		return "", fmt.Errorf("creating the empty layer of read-only mounts: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return "", fmt.Errorf("checking the empty layer of read-only mounts: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("checking the empty layer of read-only mounts: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 || st.Mode&0o022 != 0 || len(entries) > 0 {
		return "", fmt.Errorf("%s, the empty layer of the sandboxes' read-only mounts, must be an empty directory of root's that only root may write "+
			"(mode %#o, owner %d, %d entries): remove it, and brig makes it again", dir, st.Mode, st.Uid, len(entries))
	}
	return dir, nil
}

// programFilters compiles the filters a program loads (see Launcher): with
// the default policy, small ones on top of the one it inherits, which
// together give Default's verdicts (seccomp's SpawnedProgram, Zygote,
// ZygoteChild and ZygoteProgram), so that no run makes the kernel compile Default's 1385
// instructions (0.5 ms of CPU each time: bench/measure/filter_load.py). With a filter of the
// caller's, a cold program loads it whole on top of Spawner, and a warm
// Python one loads it whole with no zygote filter beneath.
func programFilters(custom seccomp.Program) (program, zygote, zygoteChild, zygoteProgram []byte, err error) {
	if custom != nil {
		return custom.Marshal(), nil, custom.Marshal(), nil, nil
	}
	var progs [4]seccomp.Program
	for i, p := range []struct {
		policy seccomp.Policy
		whose  string
	}{
		{seccomp.SpawnedProgram(), "the program's"}, {seccomp.Zygote(), "the zygote's"},
		{seccomp.ZygoteChild(), "the zygote child's"}, {seccomp.ZygoteProgram(), "the zygote child's program's"},
	} {
		if progs[i], err = seccomp.Compile(p.policy); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("compiling %s seccomp filter: %w", p.whose, err)
		}
	}
	return progs[0].Marshal(), progs[1].Marshal(), progs[2].Marshal(), progs[3].Marshal(), nil
}

// groupSeq numbers the run cgroups of this process (run-<pid>-<n>): one counter
// for every Launcher of the process, whose groups share a parent.
var groupSeq atomic.Uint64

// Launcher starts runs. It is safe for concurrent use.
type Launcher struct {
	cfg Config
	// rlimits are every run's, cold and warm: runRlimits under the process's
	// hard limits (fitRlimits).
	rlimits []pid1.Rlimit
	// oomScoreWarned: a sandbox's oom_score_adj could not be set, and the
	// log said so (markOOMVictim).
	oomScoreWarned atomic.Bool
	// programFilter is the filter a cold program (a sandbox's interpreter)
	// loads on top of spawnFilter; a warm Python program inherits
	// zygoteFilter from its zygote and loads zygoteChildFilter on top, then
	// zygoteProgramFilter once it has shown its run's environment
	// (programFilters).
	programFilter, zygoteFilter, zygoteChildFilter, zygoteProgramFilter []byte
	// spawnFilter is the init thread's filter until the program starts, and
	// initFilter the init's once it has hardened itself: see
	// pid1.PrepareSpec.SpawnSeccomp and InitSeccomp.
	spawnFilter, initFilter []byte
	// reaper, when set, is the run-independent config of a sandbox's pid 1:
	// a reaper (jail/reaper), which builds the root itself, instead of a Go
	// init. Nil only when turned off for tests (reaperOff).
	reaper *reaper.Config
	// mountTemplate is the mount namespace a reaper enters before it makes
	// its sandbox's (mountns.go); nil: the service's own.
	mountTemplate *os.File
	// copies, when set, holds the interpreters' copies on huge pages that
	// the sandboxes' inits bind over the interpreters (copies.go): the
	// process's, which outlives the Launcher.
	copies *copies
	// copiesMu guards copiesFound, copiesFor's recent findings by root.
	copiesMu    sync.Mutex
	copiesFound map[string]copiesFound
	ids         *idAllocator
	scratch     string
	// empty is an empty directory of the host's, the second layer of the
	// read-only views of the runs' mounts (mountIntoSandbox).
	empty string
	log   *slog.Logger
	// detachedViews says that the kernel takes detached mounts as overlay
	// layers, of which a run's read-only mounts are made (mountIntoSandbox).
	detachedViews bool
	// exits tells of a warm program's exit before the kernel has torn down
	// its address space (exitwatch.go); nil where taskstats is missing.
	exits *exitWatch
	// earlyExits counts the runs whose end exits let Run take without waiting
	// for the program's pipes to close.
	earlyExits atomic.Int64

	// spawns is served by one goroutine locked to its own OS thread: an init's
	// parent-death signal fires when the thread that cloned it exits, so every
	// clone comes from a thread that lives as long as the Launcher.
	spawns chan spawnRequest
	// onSpawner runs functions on the spawner's thread: starting a process
	// that must outlive whatever thread asks for it (a zygote, whose
	// parent-death signal would otherwise fire when a Go thread that a
	// locked goroutine took over exits).
	onSpawner chan func()
	// deaths counts the helpers that died while they waited or served
	// (DeathStats).
	deaths struct{ pooled, zygotes atomic.Uint64 }
	// pools holds, for each distinct root the provider gives (the host rootfs
	// serves both languages with one), the inits that have built it and wait.
	pools map[string]chan *slot
	// rooms holds, per pool, a token for each sandbox it may prepare more
	// (see fill).
	rooms map[string]chan struct{}
	// waiting counts, per pool, the runs waiting for its next sandbox
	// (waitPrepared).
	waiting map[string]*atomic.Int32
	// pokes wake, per pool, its tend.
	pokes     map[string]chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	// wg counts the spawner and the fillers; Close waits for them.
	wg sync.WaitGroup

	mu sync.Mutex
	// closed is set by Close; Run refuses to start once it is. Guarded by mu.
	closed bool
	// warmFailing has the warm languages whose last pool preparation failed:
	// their runs go cold until one succeeds. Guarded by mu.
	warmFailing map[rootfs.Language]bool
	// active counts runs under way and the background release of finished
	// ones; Close waits for it before it stops the spawner. Add under mu.
	active sync.WaitGroup

	// zmu guards the Python zygotes (zygote.go): the one serving each root,
	// the one starting to succeed it, those retired but still reporting their
	// children's exits, and whether Close has ended them all.
	zmu     sync.Mutex
	zygotes map[string]*zygote
	znext   map[string]*zygoteStart
	retired []*zygote
	zclosed bool
	// pinWarning logs once that zygotes run without their memory pinned.
	pinWarning sync.Once
	// pinModes has, per rootfs (Root.Lower), the verdict of its first zygote's pin
	// trial (pinOn or pinOff), which the zygotes that follow take; pinMu
	// guards it (zygoteFor starts zygotes under zmu).
	pinMu    sync.Mutex
	pinModes map[string]string
	// zygoteModules has, per rootfs (Root.Lower), the top-level names of the
	// modules its last ready zygote had imported, which a package layer must
	// not hold for a run of it to go warm (warmFor); guarded by pinMu.
	zygoteModules map[string]map[string]bool
	// hugeCodeWarning logs once that zygotes run without their code on huge
	// pages.
	hugeCodeWarning sync.Once
}

// ResetInherited undoes two things the process was started with that would
// reach the sandboxes. It marks close-on-exec every descriptor above stderr:
// a shell's or a harness's open files would otherwise reach every sandbox's
// pid 1, which holds them as root until it hardens, and every zygote (the
// Launcher's own descriptors are close-on-exec already; those a child must get
// go through exec.Cmd, which clears the flag on its copies). And it sets the
// umask to 022: what a sandbox's init makes (its scratch folders, /sandbox),
// a package layer's files and a zygote's are read by a run's ids, not root's,
// and under a hardened umask (077, 027) every run failed at its init's chdir
// to /sandbox (permission denied). What must stay private brig creates with
// its own mode (the journal and the lock files, 0600). A program starts with
// 022, as under a login's default, whatever the service's was. Call it first
// thing, before any goroutine opens a descriptor that must be inherited
// (brig's main and the test binaries do).
func ResetInherited() {
	unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) // Linux 5.11: brig check requires 6.x
	unix.Umask(0o022)
}

// fitRlimits is what a run's limits can be under the process's hard limits.
// A sandbox's pid 1 and a zygote's child set a run's limits inside their user
// namespaces, which can lower a limit but never raise one, so a service
// started with a lower hard limit (a systemd unit's LimitNOFILE=1024, a
// shell's ulimit -Hc 0) had every run fail at its step "rlimits". Where a
// hard limit is below a run's, the process raises it, keeping its soft limit,
// if it may (CAP_SYS_RESOURCE, which some hosts' root lacks, these machines'
// among them); if not, the run gets the hard limit, which is lower, with a warning.
// But RLIMIT_CORE: 0 does not stop a dump to a core_pattern pipe, a program
// the kernel starts as host root, where 1 does (pid1.DefaultRlimits), so a
// hard 0 is taken only while the host's core_pattern is a file's name, as read
// here, once (a pipe installed later reaches the runs until brig is restarted
// with a hard limit of 1: the warning says so), and NewLauncher fails
// otherwise. A raise of RLIMIT_NOFILE also ends the runtime's restoring of
// its starting soft limit in the children it forks, which is harmless: every
// child brig starts sets its own.
func fitRlimits(want []pid1.Rlimit, log *slog.Logger) ([]pid1.Rlimit, error) {
	got := slices.Clone(want)
	for i, r := range got {
		var have syscall.Rlimit
		if err := syscall.Getrlimit(r.Resource, &have); err != nil {
			return nil, fmt.Errorf("reading the service's %s: %w", rlimitName(r.Resource), err)
		}
		if have.Max >= r.Max {
			continue
		}
		err := syscall.Setrlimit(r.Resource, &syscall.Rlimit{Cur: have.Cur, Max: r.Max})
		if err == nil {
			log.Info("raised the service's hard limit to a run's, which a sandbox can't raise itself", "limit", rlimitName(r.Resource), "was", have.Max, "now", r.Max)
			continue
		}
		fix := fmt.Sprintf("start brig with a hard limit of at least %d (ulimit -H; systemd: Limit%s=)", r.Max, strings.TrimPrefix(rlimitName(r.Resource), "RLIMIT_"))
		if r.Resource == unix.RLIMIT_CORE {
			pattern, perr := os.ReadFile(corePatternPath)
			where := fmt.Sprintf("the host's core_pattern pipe %q", strings.TrimSpace(string(pattern)))
			if perr != nil {
				where = fmt.Sprintf("a core_pattern pipe, if the host has one (%v)", perr)
			}
			if perr != nil || strings.HasPrefix(string(pattern), "|") {
				return nil, fmt.Errorf("the service's hard RLIMIT_CORE is %d and it can't raise it (%v): a run's core dumps would reach %s, which only a limit of 1 stops; %s",
					have.Max, err, where, fix)
			}
			fix += "; until then a core_pattern pipe installed while brig runs gets the runs' core dumps"
		}
		got[i].Cur, got[i].Max = min(r.Cur, have.Max), have.Max
		log.Warn("runs get the service's hard limit, below brig's, which the service can't raise", "limit", rlimitName(r.Resource), "run", got[i].Max, "brig", r.Max, "err", err, "hint", fix)
	}
	return got, nil
}

// corePatternPath is the host's core_pattern, but for fitRlimits's test.
var corePatternPath = "/proc/sys/kernel/core_pattern"

// rlimitName is a resource's name as getrlimit(2) spells it.
func rlimitName(resource int) string {
	switch resource {
	case unix.RLIMIT_CORE:
		return "RLIMIT_CORE"
	case unix.RLIMIT_RTPRIO:
		return "RLIMIT_RTPRIO"
	case unix.RLIMIT_NOFILE:
		return "RLIMIT_NOFILE"
	case unix.RLIMIT_STACK:
		return "RLIMIT_STACK"
	case unix.RLIMIT_MEMLOCK:
		return "RLIMIT_MEMLOCK"
	}
	return fmt.Sprintf("rlimit %d", resource)
}

// NewLauncher checks cfg, compiles the filter and starts the pool.
func NewLauncher(cfg Config) (*Launcher, error) {
	if cfg.Rootfs == nil || cfg.Cgroups == nil {
		return nil, errors.New("jail: Config.Rootfs and Config.Cgroups are required")
	}
	cfg = cfg.withDefaults()
	if cfg.InitPath == "" {
		var why string
		if cfg.InitPath, why = DefaultInitPath(); why != "" {
			cfg.Logger.Info("sandboxes' inits re-execute this binary", "init", cfg.InitPath, "why", why)
		}
	}
	if cfg.ReaperPath == "" {
		var why string
		if cfg.ReaperPath, why = DefaultReaperPath(); why != "" {
			cfg.Logger.Info("sandboxes' reapers re-execute this binary", "reaper", cfg.ReaperPath, "why", why)
		}
	}
	if err := validateConfig(cfg); err != nil {
		return nil, err
	}
	programFilter, zygoteFilter, zygoteChildFilter, zygoteProgramFilter, err := programFilters(cfg.Filter)
	if err != nil {
		return nil, err
	}
	spawn, err := seccomp.Compile(seccomp.Spawner())
	if err != nil {
		return nil, fmt.Errorf("compiling the init's seccomp filter: %w", err)
	}
	initFilter, err := seccomp.Compile(seccomp.Init())
	if err != nil {
		return nil, fmt.Errorf("compiling the hardened init's seccomp filter: %w", err)
	}
	rlimits, err := fitRlimits(runRlimits(), cfg.Logger)
	if err != nil {
		return nil, err
	}
	reaperCfg, why, err := newReaperConfig()
	if err != nil {
		return nil, err
	}
	if why != "" {
		cfg.Logger.Info("sandboxes have a Go init as their pid 1, not a reaper", "why", why)
	}
	ids, err := newIDAllocator(cfg.IDs, cfg.IDLockDir)
	if err != nil {
		return nil, err
	}
	scratch := filepath.Join(cfg.StateDir, "jail", "scratch")
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return nil, fmt.Errorf("creating the scratch mount point: %w", err)
	}
	empty, err := emptyLayer(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	l := &Launcher{
		cfg:                 cfg,
		rlimits:             rlimits,
		programFilter:       programFilter,
		zygoteFilter:        zygoteFilter,
		zygoteChildFilter:   zygoteChildFilter,
		zygoteProgramFilter: zygoteProgramFilter,
		spawnFilter:         spawn.Marshal(),
		initFilter:          initFilter.Marshal(),
		reaper:              reaperCfg,
		ids:                 ids,
		scratch:             scratch,
		empty:               empty,
		log:                 cfg.Logger,
		spawns:              make(chan spawnRequest),
		onSpawner:           make(chan func()),
		pools:               map[string]chan *slot{},
		rooms:               map[string]chan struct{}{},
		waiting:             map[string]*atomic.Int32{},
		pokes:               map[string]chan struct{}{},
		done:                make(chan struct{}),
	}
	if l.reaper != nil {
		// The reapers' mount namespace to copy (mountns.go).
		f, kept, err := newMountTemplate(l.templatePaths())
		if err != nil {
			l.log.Warn("the sandboxes' reapers copy the service's whole mount namespace", "why", err)
		} else {
			l.mountTemplate = f
			l.log.Debug("the sandboxes' reapers copy a mount namespace of the mounts their roots read", "mounts", kept)
		}
	}
	if cfg.InterpreterCopies {
		if l.copies, err = processCopies(); err != nil {
			l.log.Info("the interpreters run from their own files, not copies on huge pages", "why", err)
			l.copies = nil
		}
	}
	if l.exits, err = newExitWatch(); err != nil {
		l.log.Info("runs learn of their program's exit from its parent, after the kernel's teardown of it", "why", err)
	}
	// Detached mounts as overlay layers are Linux 6.15's: before it, a run's
	// read-only mounts (package layers) are views by path, which its mount
	// table names.
	if err := probeDetachedViews(empty); err != nil {
		l.log.Info("package layers are mounted by their paths, which a run's mount table shows (the state directory, the layer's key): this kernel refuses detached mounts as overlay layers (Linux 6.15 takes them)", "why", err)
	} else {
		l.detachedViews = true
	}
	l.wg.Add(1)
	go l.spawner()
	if cfg.PoolSize > 0 {
		for _, lang := range rootfs.Languages {
			root, err := cfg.Rootfs.Root(lang)
			if err != nil {
				l.log.Warn("no pool for a language whose rootfs is missing", "language", lang, "err", err)
				continue
			}
			// A warm language has a pool of its own (each sandbox holds its
			// interpreter); every root has a cold one, which the cold
			// languages share and the warm ones fall back on (a run whose
			// environment keeps it cold, or that finds no warm sandbox).
			kinds := []rootfs.Language{""}
			if cfg.Warm[lang] {
				kinds = append(kinds, lang)
			}
			for _, warm := range kinds {
				l.startPool(root, warm)
			}
		}
	}
	return l, nil
}

// startPool starts the pool of root's sandboxes prepared for warm ("": cold),
// unless it exists.
func (l *Launcher) startPool(root *rootfs.Root, warm rootfs.Language) {
	key := poolKey(root, warm)
	if _, ok := l.pools[key]; ok {
		return
	}
	pool := make(chan *slot, l.cfg.PoolSize)
	l.pools[key] = pool
	room := make(chan struct{}, l.cfg.PoolSize)
	for range l.cfg.PoolSize {
		room <- struct{}{}
	}
	l.rooms[key] = room
	l.waiting[key] = new(atomic.Int32)
	poke := make(chan struct{}, 1)
	l.pokes[key] = poke
	// A cold pool has one filler, which prepares its sandboxes one after
	// another; a warm pool one per pooled sandbox, so that their waits
	// overlap: a Node start's, a v1 cgroup move's. (A warm Python pool had a
	// single filler while its zygote's memory was shared copy-on-write with
	// its children: preparations side by side then cost each other CPU,
	// since the zygote's own copy-on-write faults cost 55 to 58 us with the
	// other CPU busy against 22 with it idle (section 4 of
	// bench/measure/cow_cost.py). Since the zygote pins its memory (zygote.py's
	// _pin), four fillers against one, each in turn: 126.4 and 158.9 % of
	// bare at C=2 against 100.9 and 101.8 %; 138.0 % back to back at C=1
	// against 113.3 %; 105.7 and 109.9 % at C=4 against two fillers' 102.2
	// and 104.0 %.)
	fillers := 1
	if warm != "" {
		fillers = l.cfg.PoolSize
	}
	for range fillers {
		l.wg.Add(1)
		go l.fill(root, warm, pool, room, poke)
	}
	l.wg.Add(1)
	go l.tend(warm, pool, room, poke)
}

// validateConfig is the list of checks made before anything privileged.
// withDefaults is cfg with its zero values filled in.
func (cfg Config) withDefaults() Config {
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = DefaultCPUs
	}
	if cfg.Pids == 0 {
		cfg.Pids = DefaultPids
	}
	if cfg.WarmMaxAge == 0 {
		cfg.WarmMaxAge = DefaultWarmMaxAge
	}
	cfg.IDs = cfg.IDs.withDefaults()
	if cfg.IDLockDir == "" {
		cfg.IDLockDir = IDLockDir
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// Validate runs the checks of cfg, its defaults filled in, that NewLauncher
// runs, but for the required Rootfs and Cgroups: a caller runs them before
// anything privileged.
func (cfg Config) Validate() error {
	return validateConfig(cfg.withDefaults())
}

func validateConfig(cfg Config) error {
	for _, c := range []struct {
		ok  bool
		msg string
	}{
		{cfg.PoolSize >= 0 && cfg.PoolSize <= 64, "the pool size must be 0 to 64"},
		{cfg.CPUs > 0, "the CPU limit must be positive"},
		{cfg.Pids > 0, "the pids limit must be positive"},
		// pids.max takes no more than the kernel's largest pid_max: past
		// it, every run failed at its cgroup's setup (the operator probe of
		// 2026-12-06).
		// pids.max is the limit plus one, for the sandbox's init (newSlot).
		{cfg.Pids < maxPids, fmt.Sprintf("the pids limit %d is above %d, the most the kernel's pids.max takes (its largest pid_max) less the sandbox's init: give at most that", cfg.Pids, maxPids-1)},
		{!strings.ContainsAny(cfg.StateDir, ",:"), "the state directory may not contain ',' or ':' (they separate overlay options)"},
		{filepath.IsAbs(cfg.StateDir), "the state directory must be an absolute path"},
	} {
		if !c.ok {
			return fmt.Errorf("jail: invalid config: %s", c.msg)
		}
	}
	if err := cgroup.CheckCPUs(cfg.CPUs); err != nil {
		return fmt.Errorf("jail: invalid config: %w", err)
	}
	if err := cfg.IDs.validate(); err != nil {
		return fmt.Errorf("jail: invalid config: %w", err)
	}
	return nil
}

// Close refuses new runs, waits for the runs under way (callers stop them through
// their contexts) and their cleanup, then stops the pool and removes the sandboxes
// waiting in it.
// DeathStats counts what died outside of a run's own end: pooled sandboxes
// found dead while they waited, and Python zygotes that ended while they
// served. Each is replaced at once, so a run goes on warm: the counts are
// what an operator alerts on (the crash probe of 2026-12-06 found only log
// lines).
type DeathStats struct {
	PooledSandboxes, Zygotes uint64
}

// DeathStats says what died in the Launcher's pools so far.
func (l *Launcher) DeathStats() DeathStats {
	return DeathStats{PooledSandboxes: l.deaths.pooled.Load(), Zygotes: l.deaths.zygotes.Load()}
}

func (l *Launcher) Close() error {
	l.closeOnce.Do(l.close)
	return nil
}

// ErrClosed is returned by Run after Close.
var ErrClosed = errors.New("jail: launcher closed")

func (l *Launcher) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.active.Wait()
	// What the pools hold first, while the zygotes live: the spawner's
	// thread's end kills them (their parent-death signal), and a killed
	// zygote's children, in their sandboxes' pid namespaces, are then
	// reaped by the host's pid 1, which took an idle service's stop 1.35 to
	// 3.75 s (the soak). Their tokens are not given back, so no filler makes
	// another; what one was making is discarded below.
	for _, pool := range l.pools {
	taken:
		for {
			select {
			case s := <-pool:
				s.discard()
			default:
				break taken
			}
		}
	}
	// The spawner's thread exits now, and an init's parent-death signal with it:
	// only after every run is over.
	close(l.done)
	l.wg.Wait()
	for _, pool := range l.pools {
		close(pool)
		for s := range pool {
			s.discard()
		}
	}
	l.closeZygotes()
	if l.mountTemplate != nil {
		l.mountTemplate.Close()
	}
	l.ids.close()
	if l.exits != nil {
		l.exits.close()
	}
}

// Run runs spec in a fresh sandbox and returns its result. Every way the run can
// end is in the result (a sandbox that could not be built is reason internal); the
// error is for a spec that is not valid. Cancelling ctx stops the run (reason
// stopped).
func (l *Launcher) Run(ctx context.Context, spec Spec) (*Result, error) {
	begin := time.Now()
	if err := validateSpec(spec); err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	l.active.Add(1)
	l.mu.Unlock()
	defer l.active.Done()
	res := &Result{}
	internal := func(step, format string, args ...any) (*Result, error) {
		res.Step = step
		res.Message = fmt.Sprintf(format, args...)
		res.End = EndInternal
		res.Timing.TotalMS = api.Millis(time.Since(begin))
		return res, nil
	}
	root, err := l.cfg.Rootfs.Root(spec.Language)
	if err != nil {
		return internal("rootfs", "the %s rootfs is not available: %v", spec.Language, err)
	}
	warm, why := l.warmFor(spec, root)
	res.Start = why
	s, ready, err := l.take(root, warm, spec.MemoryBytes, ctx.Done())
	if err == nil && warm != "" && s.warm == "" {
		res.Start = StartColdEmpty
	}
	if err != nil {
		return internal("sandbox", "could not prepare a sandbox: %v", err)
	}
	defer l.release(s)
	res.Cgroup = s.group.Path()
	if !ready {
		// A fresh sandbox. With mounts, its init must have built the root
		// first: its mount namespace is a copy of the host's until its
		// pivot_root, and mounts go in once it is ready. With a network,
		// its network namespace must exist: a reaper makes its own
		// (reaperCloneFlags), and until then /proc/PID/ns/net is the
		// host's, where Attach would bind the run's DNS server and
		// proxies. The run's CPU counts
		// from here, as a pooled sandbox's counts from when it became ready:
		// the init's own start is not the run's.
		if len(spec.Mounts) > 0 || spec.Attach != nil {
			if err := s.waitReady(nil); err != nil {
				return internal("sandbox", "could not prepare a sandbox: %v", err)
			}
			ready = true
		}
		if err := s.readBaseline(); err != nil {
			return internal("cgroup", "reading the run's cgroup: %v", err)
		}
	}
	// The init reads the whole spec before it acts on it, so this write does not
	// depend on the init making progress beyond reading.
	if err := mountIntoSandbox(s.cmd.Process.Pid, s.ids, spec.Mounts, l.empty, l.detachedViews); err != nil {
		return internal("mounts", "could not mount the run's directories: %v", err)
	}
	attached := map[string]string{}
	for k, v := range spec.BrigEnv {
		if !ReservedEnv(k) {
			return internal("env", "the run's own environment sets %s, which brig does not reserve", k)
		}
		attached[k] = v
	}
	if spec.Attach != nil {
		env, err := spec.Attach(s.cmd.Process.Pid)
		if err != nil {
			return internal("network", "could not set up the run's network: %v", err)
		}
		for k, v := range env {
			if !ReservedEnv(k) {
				return internal("network", "the network's environment sets %s, which brig does not reserve", k)
			}
			attached[k] = v
		}
	}
	if ctx.Err() != nil {
		// Stopped before the init has the run: its program never starts,
		// and nothing killed it (the limits probe of 2026-12-06 found
		// SIGKILL on a run stopped as it was accepted, with no started
		// event).
		res.Message = "the run was stopped before its program started; the program did not run"
		res.End = EndStopped
		res.Timing.TotalMS = api.Millis(time.Since(begin))
		return res, nil
	}
	rs := runSpecOf(spec, root, attached)
	// The kernel's record of the program's exit is awaited before the program
	// gets its run, so that no exit goes unheard.
	var early <-chan uint32
	if pid := s.programPID(); pid != 0 && l.exits != nil {
		early = l.exits.expect(pid)
		defer l.exits.forget(pid)
	}
	switch {
	case s.zchild != nil:
		// The zygote's child gets its run straight from here (supervise).
		err = s.zchild.setRun(rs)
	case s.reaperRun:
		var handover, b []byte
		if s.warm != "" {
			handover, err = pid1.WarmEnv(rs.Env)
		}
		if err == nil {
			b, err = reaper.MarshalRun(rs, handover)
		}
		if err == nil {
			_, err = s.spec.Write(b)
		}
	default:
		err = pid1.WriteRun(s.spec, rs)
	}
	s.spec.Close()
	s.spec = nil
	if err != nil {
		return internal("spec", "sending the spec to the sandbox init: %v", err)
	}

	// The program's output reaches the callbacks only after OnStart: its pipes
	// and the init's "started" message race, and a caller (the event stream)
	// must never see output before the run has started. Until then the pipes
	// hold the output (the program blocks once one is full, for microseconds).
	started := make(chan struct{})
	var startOnce sync.Once
	markStarted := func() { startOnce.Do(func() { close(started) }) }
	defer markStarted()
	afterStart := func(f func(string)) func(string) {
		if f == nil {
			return nil
		}
		return func(s string) { <-started; f(s) }
	}
	onStart := spec.OnStart
	spec.OnStart = func(at time.Time) {
		if onStart != nil {
			onStart(at)
		}
		markStarted()
	}
	stdout := NewOutput(api.MaxStdoutChars, afterStart(spec.OnStdout))
	stderr := NewOutput(api.MaxStderrChars, afterStart(spec.OnStderr))
	stdout.onCut, stderr.onCut = spec.OnStdoutCut, spec.OnStderrCut
	var drained sync.WaitGroup
	drained.Add(2)
	go func() { defer drained.Done(); stdout.Drain(s.stdout) }()
	go func() { defer drained.Done(); stderr.Drain(s.stderr) }()

	ended := l.supervise(ctx, spec, s, ready, res, begin, early)
	markStarted() // a run that ended without starting has no more to wait for
	if !ended.exited {
		// Killed while it ran (a timeout, the memory limit, a stop): once
		// every process of it has SIGKILL pending (the cgroup's kill, at
		// once; the pid namespace's waits for its init to die), what is
		// left of it dies unthrottled, and sooner.
		s.group.Kill() // again in release, whose error it reports
		if err := s.group.Unthrottle(); err != nil {
			l.log.Warn("lifting the CPU limit of a killed run", "err", err)
		}
	}

	// Every process of the run is killed: the pipes reach EOF as they die.
	// A program whose exit came before its teardown (exitWatch), and that left
	// no other process that could hold its pipes, has written all it will:
	// what the pipes hold is its output, without waiting for the EOF that
	// comes after the teardown.
	if ended.early && s.onlyProgramLeft() && takeBuffered([]*Output{stdout, stderr}, []*os.File{s.stdout, s.stderr}) {
		l.earlyExits.Add(1)
	} else {
		waitTimeout(&drained, drainGrace)
	}
	res.Stdout, res.StdoutTruncated = stdout.Text()
	res.Stderr, res.StderrTruncated = stderr.Text()
	usage, uerr := s.group.Usage()
	if uerr != nil {
		l.log.Warn("reading the run's usage", "err", uerr)
	}
	if uerr == nil {
		res.Usage.CPUMS = api.Millis(usage.CPU - s.baseline)
		res.Usage.PeakMemoryBytes = usage.PeakMemoryBytes
	}
	l.classify(res, ended, usage, spec)
	res.Timing.TotalMS = api.Millis(time.Since(begin))
	return res, nil
}

// Start paths of a run, as Result.Start says them.
const (
	StartWarm = "warm" // a pooled interpreter, already started
	StartCold = "cold" // the interpreter started for the run
	// StartColdEnv: warm starts are on for the language, but the run sets a
	// variable its interpreter reads at its own start, or (Node) has network.
	StartColdEnv = "cold-env"
	// StartColdFailing: warm starts are on, but the last warm sandbox failed to
	// prepare: the run falls back to the cold path.
	StartColdFailing = "cold-failing"
	// StartColdEmpty: warm starts are on, but no warm sandbox was waiting.
	StartColdEmpty = "cold-empty"
	// StartColdLayer: warm starts are on, but the run's package layer holds
	// a module the Python zygote had imported (enum34's enum, a
	// sitecustomize), which a cold start imports from the layer.
	StartColdLayer = "cold-layer"
)

// warmFor decides whether spec's run of root takes a warm sandbox, and says
// why not.
func (l *Launcher) warmFor(spec Spec, root *rootfs.Root) (rootfs.Language, string) {
	if !l.cfg.Warm[spec.Language] || l.cfg.PoolSize == 0 {
		return "", StartCold
	}
	env := maps.Clone(spec.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, spec.BrigEnv)
	// Node reads its CA bundle (NODE_EXTRA_CA_CERTS, which a networked run's
	// environment sets) at its own start.
	if ok, _ := WarmEligible(spec.Language, env); !ok || (spec.Language == rootfs.JavaScript && spec.Attach != nil) {
		return "", StartColdEnv
	}
	if spec.Language == rootfs.Python && l.layerShadowsZygote(spec, env["PYTHONPATH"], root) {
		return "", StartColdLayer
	}
	l.mu.Lock()
	failing := l.warmFailing[spec.Language]
	l.mu.Unlock()
	if failing {
		return "", StartColdFailing
	}
	return spec.Language, StartWarm
}

// layerShadowsZygote reports whether a folder spec mounts on pythonPath (its
// package layer) holds a module that root's zygote had imported: a cold start
// imports the layer's, a zygote's child has the zygote's. One listing of the
// layer's folder on the host, against the names the zygote said it has; before
// a zygote of root has said them (the first second of a service), any layer
// counts as shadowing: the run goes cold rather than risk it.
func (l *Launcher) layerShadowsZygote(spec Spec, pythonPath string, root *rootfs.Root) bool {
	if pythonPath == "" {
		return false
	}
	l.pinMu.Lock()
	have := l.zygoteModules[root.Lower]
	l.pinMu.Unlock()
	onPath := strings.Split(pythonPath, ":")
	for _, m := range spec.Mounts {
		if !slices.Contains(onPath, m.Target) {
			continue
		}
		if have == nil {
			return true
		}
		entries, err := os.ReadDir(m.Source)
		if err != nil {
			continue
		}
		for _, e := range entries {
			name := e.Name()
			if strings.Contains(name, ".") && !strings.HasSuffix(name, ".py") && !strings.HasSuffix(name, ".pyc") && !strings.HasSuffix(name, ".so") {
				continue
			}
			if top, _, _ := strings.Cut(name, "."); have[top] {
				return true
			}
		}
	}
	return false
}

func (l *Launcher) setWarmFailing(lang rootfs.Language, failing bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.warmFailing == nil {
		l.warmFailing = map[rootfs.Language]bool{}
	}
	if failing && !l.warmFailing[lang] {
		l.log.Warn("warm sandboxes fail to prepare: runs go cold until one succeeds", "language", string(lang))
	}
	l.warmFailing[lang] = failing
}

// release removes a finished run's sandbox in the background: its processes are
// already dead (supervise stopped it); what is left is closing pipes and removing
// the cgroup, which the result does not wait for.
func (l *Launcher) release(s *slot) {
	l.active.Add(1) // within Run's own count, so never from zero during Close
	go func() {
		defer l.active.Done()
		if err := s.discard(); err != nil {
			l.log.Warn("removing a finished run's sandbox", "err", err)
		}
	}()
}
