package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/brig-sandbox/brig/cgroup"
	"github.com/brig-sandbox/brig/internal/safedir"
	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/rootfs"
	"github.com/brig-sandbox/brig/supervisor"
)

// sandboxFlags are the flags of every verb that builds sandboxes.
func sandboxFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "state-dir", Value: jail.DefaultStateDir, Usage: "directory for brig's state (rootfs skeleton, scratch mount point): root's, writable by root alone, on a path no one else can change"},
		&cli.StringFlag{Name: "cgroup-parent", Usage: "cgroup under which runs' groups are made (default \"brig\" for the service, \"brig-local\" for --local)"},
		&cli.StringSliceFlag{Name: "rootfs", Usage: "a built rootfs for a language, as LANG=DIR (from brig rootfs build); languages without one use the host rootfs"},
		&cli.Float64Flag{Name: "cpus", Value: jail.DefaultCPUs, Usage: "CPU limit of each run, in CPUs"},
		&cli.Int64Flag{Name: "pids", Value: jail.DefaultPids, Usage: "limit on processes and threads of each run"},
		&cli.IntFlag{Name: "pool", Usage: "sandboxes kept cloned and waiting for a run (0: clone each run's on demand)"},
		&cli.StringSliceFlag{Name: "warm", Usage: "a language whose pooled sandboxes hold its interpreter already started (repeatable; needs --pool)"},
		&cli.BoolFlag{Name: "interpreter-copies", Value: true, Usage: "run the interpreters from copies on huge pages, which start faster for the copies' memory (=false: from their own files)"},
		&cli.UintFlag{Name: "id-first", Value: jail.DefaultIDFirst, Usage: "first host id of the range runs are mapped to (every brig process of a host must use the same range)"},
		&cli.UintFlag{Name: "id-count", Value: jail.DefaultIDCount, Usage: "how many host ids the range holds (two per sandbox)"},
	}
}

// launcherConfig is what the flags of sandboxFlags become.
type launcherConfig struct {
	StateDir     string
	CgroupParent string
	Built        map[rootfs.Language]string
	CPUs         float64
	Pids         int64
	Pool         int
	// IDs is the host id range of the runs.
	IDs jail.IDRange
	// Warm are the languages with warm sandboxes.
	Warm map[rootfs.Language]bool
	// Copies runs the interpreters from copies on huge pages.
	Copies bool
}

func launcherConfigFrom(c *cli.Context, defaultParent string) (launcherConfig, error) {
	if err := checkIDFlags(c); err != nil {
		return launcherConfig{}, err
	}
	lc := launcherConfig{
		StateDir:     c.String("state-dir"),
		CgroupParent: c.String("cgroup-parent"),
		Built:        map[rootfs.Language]string{},
		CPUs:         c.Float64("cpus"),
		Pids:         c.Int64("pids"),
		Pool:         c.Int("pool"),
		IDs:          jail.IDRange{First: uint32(c.Uint("id-first")), Count: uint32(c.Uint("id-count"))},
		Warm:         map[rootfs.Language]bool{},
		Copies:       c.Bool("interpreter-copies"),
	}
	for _, w := range c.StringSlice("warm") {
		lang, err := rootfs.ParseLanguage(w)
		if err != nil {
			return lc, fmt.Errorf("--warm %q: %w", w, err)
		}
		lc.Warm[lang] = true
	}
	if lc.CgroupParent == "" {
		lc.CgroupParent = defaultParent
	}
	if err := parseRootfsFlags(c.StringSlice("rootfs"), lc.Built); err != nil {
		return lc, err
	}
	return lc, nil
}

// minPids is the lowest pids limit the service takes (sandbox.pids, --pids).
const minPids = 32

// check refuses the values lc can't mean. A flag or a config key means what it
// says: jail reads a zero limit or id range as its default, so a zero is
// refused here rather than silently replaced.
func (lc launcherConfig) check() error {
	errs := refuseNonPositive(
		bound{"cpus", lc.CPUs > 0, lc.CPUs},
		bound{"pids", lc.Pids > 0, lc.Pids},
		bound{"id_first", lc.IDs.First > 0, lc.IDs.First},
		bound{"id_count", lc.IDs.Count > 0, lc.IDs.Count},
	)
	if lc.Pool < 0 || lc.Pool > 64 {
		errs = append(errs, fmt.Errorf("pool %d: give 0 to 64 sandboxes", lc.Pool))
	}
	if lc.Pids > 0 && lc.Pids < minPids {
		errs = append(errs, fmt.Errorf("pids %d: give at least %d: node starts about a dozen threads before a program runs, and under a lower limit a JavaScript run fails as if it timed out and its warm sandboxes never come up", lc.Pids, minPids))
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid configuration: %w", errors.Join(errs...))
	}
	if err := lc.jailConfig().Validate(); err != nil {
		return fmt.Errorf("invalid configuration of the sandboxes ([sandbox] or its flags): %w", err)
	}
	return nil
}

// bound is a config value, by its key, that must be positive: ok says it is.
type bound struct {
	key string
	ok  bool
	val any
}

// refuseNonPositive is an error for each bound that is not positive.
func refuseNonPositive(bounds ...bound) []error {
	var errs []error
	for _, b := range bounds {
		if !b.ok {
			errs = append(errs, fmt.Errorf("%s %v: give a positive value", b.key, b.val))
		}
	}
	return errs
}

// jailConfig is lc as the Launcher's config, without its Rootfs, Cgroups and
// Logger.
func (lc launcherConfig) jailConfig() jail.Config {
	return jail.Config{
		StateDir: lc.StateDir,
		PoolSize: lc.Pool,
		CPUs:     lc.CPUs,
		Pids:     lc.Pids,
		IDs:      lc.IDs,
		Warm:     lc.Warm,

		InterpreterCopies: lc.Copies,
	}
}

// parseRootfsFlags adds the values of --rootfs, each LANG=DIR, to built.
func parseRootfsFlags(values []string, built map[rootfs.Language]string) error {
	for _, kv := range values {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--rootfs %q: write it as LANG=DIR, e.g. %s=%s", kv, rootfs.Python, filepath.Join(jail.DefaultStateDir, "rootfs", rootfs.Python.String()))
		}
		lang, err := rootfs.ParseLanguage(k)
		if err != nil {
			return fmt.Errorf("--rootfs %q: %w", kv, err)
		}
		built[lang] = v
	}
	return nil
}

// newProvider opens the roots of lc: its built ones, the host's for the rest.
func newProvider(lc launcherConfig) (rootfs.Provider, error) {
	if os.Geteuid() != 0 {
		return nil, errNotRoot
	}
	// Every verb that builds sandboxes (serve, run --local, bench --local,
	// check) writes its roots and the jail's folders here: not in one
	// another user may write to (safedir).
	if err := safedir.Make(lc.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("the state directory: %w: %s", err, supervisor.StateDirHint)
	}
	// Not returned as it is: a nil *Mixed in a Provider is not a nil Provider.
	m, err := rootfs.Open(lc.StateDir, lc.Built)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// errNotRoot is newProvider's error when brig is not root.
var errNotRoot = errors.New("brig builds sandboxes and must run as root (Hint: sudo)")

// sandbox is a Launcher and what it was built from.
type sandbox struct {
	*jail.Launcher
	provider rootfs.Provider
	cgroups  *cgroup.Manager
	// owned is whether this process owns the cgroup parent (the service).
	owned bool
	// shared is the parent's lock that a verb running sandboxes in this
	// process holds shared, released by Close; nil for the service, which
	// holds its own.
	shared *cgroup.ParentLock
}

// hostInfo is what GET /v1/health says of this host's sandboxes.
func (sb *sandbox) hostInfo() (supervisor.HostInfo, error) {
	host := supervisor.HostInfo{Languages: map[string]string{}, CgroupMode: sb.cgroups.Mode().String(), Rootfs: sb.provider.Name()}
	for _, lang := range rootfs.Languages {
		root, err := sb.provider.Root(lang)
		if err != nil {
			return host, fmt.Errorf("the %s rootfs: %w", lang, err)
		}
		host.Languages[lang.String()] = root.Version
	}
	return host, nil
}

// Close stops the launcher and removes the cgroup parent: the service's own,
// or a shared local one when no other brig process has groups in it.
func (sb *sandbox) Close() error {
	err := sb.Launcher.Close()
	rm := sb.cgroups.RemoveParentIfEmpty
	if sb.owned {
		rm = sb.cgroups.RemoveParent
	}
	err = errors.Join(err, rm())
	if sb.shared != nil {
		err = errors.Join(err, sb.shared.Close())
	}
	return err
}

// localParent is the cgroup parent of the verbs that run sandboxes in their own
// process (run --local, bench --local, check's runs).
const localParent = "brig-local"

// newSandbox builds everything a Launcher needs. sweep removes every group left
// under the parent (the service, which owns its parent and holds its lock, does
// that); otherwise only those of brig processes that are gone are removed, and
// the parent's lock is taken shared (cgroup.ShareParent), beside others that
// run sandboxes in their process, never under a service, whose sweep at its
// start or whose stop would kill their runs (an error wrapping
// cgroup.ErrParentLocked). p is lc's roots, opened by the caller, or nil.
func newSandbox(lc launcherConfig, p rootfs.Provider, sweep bool, log *slog.Logger) (_ *sandbox, retErr error) {
	var shared *cgroup.ParentLock
	if !sweep {
		var err error
		if shared, err = cgroup.ShareParent("", lc.CgroupParent); err != nil {
			return nil, err
		}
		defer func() {
			if retErr != nil {
				shared.Close()
			}
		}()
	}
	if p == nil {
		var err error
		if p, err = newProvider(lc); err != nil {
			return nil, err
		}
	}
	// A parent that holds anything else brig refuses before New writes a
	// file of it: the service sweeps every group of brig's in it and
	// removes it when it stops, and the others remove it once it is empty
	// (the review of 2026-12-06: brig run --local set a foreign group's
	// memory.swappiness and removed its empty directories).
	if err := jail.ForeignGroups(lc.CgroupParent); err != nil {
		return nil, err
	}
	// Nor beside an older brig service, whose locks this one's do not see.
	if err := cgroup.OlderOwner(lc.CgroupParent, sweep); err != nil {
		return nil, err
	}
	cg, err := cgroup.New(cgroup.Config{Parent: lc.CgroupParent, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("opening cgroups: %w (Hint: run `brig check`)", err)
	}
	started := false
	defer func() {
		if !started {
			if err := cg.Abandon(); err != nil {
				log.Warn("removing the cgroup directories of a refused start", "err", err)
			}
		}
	}()
	// Every run is limited in memory, processes and CPU: a host whose parent
	// can't have one of them runs nothing, and says so now rather than at
	// each run.
	if err := cg.CanLimit(cgroup.Limits{MemoryBytes: 1, Pids: 1, CPUs: 1}); err != nil {
		return nil, fmt.Errorf("the runs' cgroups under %q can't be limited: %w", lc.CgroupParent, err)
	}
	leftover := jail.LeftoverOfDeadProcess
	if sweep {
		leftover = jail.IsRunGroup
	}
	n, err := cg.SweepIf(leftover)
	if err != nil {
		return nil, fmt.Errorf("removing leftover run cgroups: %w", err)
	}
	if n > 0 {
		log.Info("removed leftover run cgroups", "count", n)
	}
	jc := lc.jailConfig()
	jc.Rootfs, jc.Cgroups, jc.Logger = p, cg, log
	l, err := jail.NewLauncher(jc)
	if err != nil {
		return nil, err
	}
	started = true
	return &sandbox{Launcher: l, provider: p, cgroups: cg, owned: sweep, shared: shared}, nil
}

// localSandbox is the sandbox of a verb that runs in this process (run --local,
// bench --local): the shared local cgroup parent, warnings on stderr.
func localSandbox(c *cli.Context) (*sandbox, launcherConfig, error) {
	lc, err := launcherConfigFrom(c, localParent)
	if err == nil {
		err = lc.check()
	}
	if err != nil {
		return nil, lc, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sb, err := newSandbox(lc, nil, false, log)
	return sb, lc, err
}

// checkIDFlags refuses an --id-first or --id-count past what a host id holds
// (32 bits), which the conversion would otherwise cut silently: 4294967296
// read as 0 (the operator audit).
func checkIDFlags(c *cli.Context) error {
	for _, name := range []string{"id-first", "id-count"} {
		if c.IsSet(name) && c.Uint(name) > math.MaxUint32 {
			return fmt.Errorf("--%s %d is past the largest host id, %d: give a range within 32 bits (brig check says which ids are free)", name, c.Uint(name), uint32(math.MaxUint32))
		}
	}
	return nil
}
