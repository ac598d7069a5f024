package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/cgroup"
	"github.com/brig-sandbox/brig/egress"
	"github.com/brig-sandbox/brig/internal/safedir"
	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/packages"
	"github.com/brig-sandbox/brig/rootfs"
	"github.com/brig-sandbox/brig/supervisor"
)

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:  "check",
		Usage: "check that this host can run brig; exits non-zero when it can't",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "check the service's config file too, and this host with its [sandbox] and registries (the sandboxed runs still use the cgroup parent brig-local)"},
			&cli.BoolFlag{Name: "no-resolve", Usage: "do not resolve the registries' hosts to tell whether the egress proxy dials their addresses"},
		}, checkSandboxFlags()...),
		Action: checkAction,
	}
}

// checkSandboxFlags are sandboxFlags with check's own words for
// --cgroup-parent: check has no --local, and the parent it names is both the
// one whose layout is checked and the one its own runs use (the docs probe of
// 2026-12-06 read the run verb's words there).
func checkSandboxFlags() []cli.Flag {
	flags := sandboxFlags()
	for i, f := range flags {
		if slices.Contains(f.Names(), "cgroup-parent") {
			flags[i] = &cli.StringFlag{Name: "cgroup-parent", Usage: "the cgroup parent to check, and to run the check's sandboxes under (default: brig-local for those runs, and --config's parent, or brig, for the check of its layout)"}
		}
	}
	return flags
}

func checkAction(c *cli.Context) error {
	checks := jail.CheckHost()
	lc, sc, cfgChecks, parent, err := checkConfig(c)
	if err != nil {
		return err
	}
	checks = append(checks, cfgChecks...)
	checks = append(checks, jail.CheckCgroups(parent)...)
	state := checkStateDir(lc.StateDir)
	checks = append(checks, state)
	var p rootfs.Provider
	perr := errors.New("not checked")
	if state.OK {
		// Not in a state directory refused above: the roots are built in
		// it (the review of 2026-12-06 found check and run --local writing
		// there all the same).
		p, perr = newProvider(lc)
	}
	if perr != nil {
		// One line: the roots are opened together.
		hint := "fix --rootfs or [sandbox.rootfs], or build the root it names: brig rootfs build LANGUAGE --dir DIR"
		if !state.OK {
			hint = "fix the state directory first (above)"
		} else if errors.Is(perr, rootfs.ErrUnsafeLower) {
			// The root is sound; who may change it is not (a state
			// directory owned by a uid in the id range, the CLI audit).
			hint = "make each folder it names root's and writable by root alone (chown root:root DIR; chmod go-w DIR)"
		} else if errors.Is(perr, errNotRoot) || strings.Contains(perr.Error(), "Hint:") {
			hint = "" // the error says what to do
		}
		checks = append(checks, jail.Check{Name: "rootfs", Detail: perr.Error(), Hint: hint})
	}
	for _, lang := range rootfs.Languages {
		if p == nil {
			break
		}
		r, err := p.Root(lang)
		if err != nil {
			checks = append(checks, jail.Check{Name: "interpreter " + lang.String(), Detail: err.Error(), Hint: "install it, or build a rootfs: brig rootfs build " + lang.String()})
			continue
		}
		checks = append(checks, jail.Check{Name: "interpreter " + lang.String(), OK: true, Detail: fmt.Sprintf("%s %s (%s rootfs)", r.Interpreter, r.Version, p.Name())})
	}
	checks = append(checks, jail.CheckIDRange(lc.IDs, "", idRangeRoots(lc, p), packages.StagingDir(packageCacheDir(sc)))...)
	if p != nil {
		checks = append(checks, jail.CheckViewLayers(lc.StateDir, bindSources(p)))
		if ch, ok := usrViewCheck(p); ok {
			checks = append(checks, ch)
		}
	}
	if lc.Copies {
		checks = append(checks, jail.CheckInterpreterCopies())
	}
	if lc.Warm[rootfs.Python] {
		checks = append(checks, jail.CheckWarmPython())
	}
	checks = append(checks, initCheck())
	checks = append(checks, directCheck())
	lookup := net.DefaultResolver.LookupNetIP
	if c.Bool("no-resolve") {
		lookup = nil
	}
	checks = append(checks, packageChecks(c.Context, sc, lookup)...)
	if allOK(checks) {
		checks = append(checks, smokeRuns(c.Context, lc)...)
	}
	return printChecks(c.App.Writer, checks)
}

// checkStateDir says whether brig can keep its state in dir: a folder it can
// make and write in (the rootfs skeleton, the journal, the package cache).
func checkStateDir(dir string) jail.Check {
	ch := jail.Check{Name: "state directory", Hint: supervisor.StateDirHint}
	if err := safedir.Make(dir, 0o755); err != nil {
		ch.Detail = err.Error()
		return ch
	}
	f, err := os.CreateTemp(dir, ".brig-check-")
	if err != nil {
		ch.Detail = fmt.Sprintf("%s can't be written: %v", dir, err)
		return ch
	}
	f.Close()
	os.Remove(f.Name())
	ch.OK, ch.Detail = true, dir+" is writable"
	return ch
}

// checkConfig is the sandboxes' config brig check checks, from the flags or,
// with --config, from the service's config file with the flags given over it,
// and the registries configured there; the checks of the config itself (with
// --config, whether brig serve would take the file, and each warning serve
// would log of it); and the cgroup parent whose layout is checked: the
// config's, where serve's runs go. The sandboxed runs use the cgroup parent of
// local runs all the same, unless --cgroup-parent says otherwise: a running
// service owns its own.
func checkConfig(c *cli.Context) (launcherConfig, serveConfig, []jail.Check, string, error) {
	defaults := defaultServeConfig()
	if !c.IsSet("config") {
		lc, err := launcherConfigFrom(c, localParent)
		if err != nil {
			return lc, defaults, nil, "", err
		}
		defaults.StateDir = lc.StateDir // where the package cache's disk is checked
		if err := lc.check(); err != nil {
			return lc, defaults, []jail.Check{{Name: "config", Detail: err.Error(), Hint: "fix the flags"}}, lc.CgroupParent, nil
		}
		return lc, defaults, nil, lc.CgroupParent, nil
	}
	// The flags check shares with serve are given over the file as serve
	// gives them.
	sc, err := serveConfigFrom(c)
	if err != nil {
		return launcherConfig{}, defaults, nil, "", err
	}
	ch := jail.Check{Name: "config", OK: true, Detail: c.String("config") + " is valid"}
	lc, lerr := sc.launcherConfig()
	// What serve would log of the file at its start, warnings and up.
	var logged bytes.Buffer
	warns := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey) {
				return slog.Attr{}
			}
			return a
		}}))
	cfg, _, serr := sc.serviceConfig(c.Context, warns)
	if serr == nil {
		warnConfig(sc, warns)
		supervisor.WarnMemoryBudget(warns, cfg.MemoryBudgetMiB)
	}
	_, logErr := newLogger(io.Discard, sc.LogFormat, sc.LogLevel) // serve's first check
	if err := errors.Join(logErr, serr, lerr); err != nil {
		ch = jail.Check{Name: "config", Detail: err.Error(), Hint: "fix " + c.String("config") + " or the flags given over it; deploy/brig.toml lists every key with its default"}
	}
	checks := []jail.Check{ch}
	for _, line := range strings.Split(strings.TrimSpace(logged.String()), "\n") {
		if line != "" {
			checks = append(checks, jail.Check{Name: "config", OK: true, Warn: true, Detail: "brig serve would warn: " + line})
		}
	}
	parent := lc.CgroupParent
	lc.CgroupParent = localParent
	override(c, "cgroup-parent", &lc.CgroupParent, c.String)
	override(c, "cgroup-parent", &parent, c.String)
	return lc, sc, checks, parent, nil
}

// usrViewCheck says, for the host rootfs, whether each sandbox shows the parts
// of /usr through one overlay (rootfs.View) or through one each, which costs
// each sandbox's making more (about 0.65 ms for 8 here: README, Security
// model) and why; ok is false for other providers.
func usrViewCheck(p rootfs.Provider) (ch jail.Check, ok bool) {
	v, ok := p.(interface{ ViewOff() (why, hint string) })
	n := len(bindSources(p))
	if !ok || n == 0 {
		return ch, false
	}
	ch = jail.Check{Name: "one view of /usr", OK: true}
	why, hint := v.ViewOff()
	if why == "" {
		ch.Detail = fmt.Sprintf("each sandbox shows the %d parts of /usr a run sees through one overlay", n)
		return ch, true
	}
	ch.Warn = true
	ch.Detail = fmt.Sprintf("each sandbox mounts the %d parts of /usr a run sees as an overlay each: %s", n, why)
	ch.Hint = hint
	return ch, true
}

// directCheck says whether networked runs' direct attempts (a program that
// dials an address, not a name) are listed: they fail either way.
func directCheck() jail.Check {
	ch := jail.Check{Name: "direct connections listed", OK: true, Detail: "a networked run's program that dials an address is refused at once, and the attempt is listed"}
	if err := egress.CheckDirect(); err != nil {
		ch.Warn = true
		ch.Detail = "a networked run's program that dials an address is not refused at once and listed: " + err.Error()
		ch.Hint = "run the service as root (it needs CAP_NET_ADMIN and CAP_NET_RAW in the runs' network namespaces)"
	}
	return ch
}

// bindSources are the host folders the roots of p mount into every sandbox
// (rootfs.Root.Binds), each once.
func bindSources(p rootfs.Provider) []string {
	var out []string
	for _, lang := range rootfs.Languages {
		r, err := p.Root(lang)
		if err != nil {
			continue
		}
		for _, b := range r.Binds {
			if !slices.Contains(out, b.Source) {
				out = append(out, b.Source)
			}
		}
	}
	return out
}

// idRangeRoots are the directories whose files' owners the id range is
// checked against: the state directory and every rootfs layer and bind a run
// sees (none when p is nil: the roots can't be opened).
func idRangeRoots(lc launcherConfig, p rootfs.Provider) []string {
	seen := []string{lc.StateDir}
	if p == nil {
		return seen
	}
	for _, lang := range rootfs.Languages {
		r, err := p.Root(lang)
		if err != nil {
			continue
		}
		dirs := []string{r.Lower}
		for _, b := range r.Binds {
			dirs = append(dirs, b.Source)
		}
		for _, d := range dirs {
			if !slices.Contains(seen, d) {
				seen = append(seen, d)
			}
		}
	}
	return seen
}

// initCheck says which binary each sandbox's init runs. Re-executing brig
// works; it only costs each sandbox about a millisecond more, so it passes.
func initCheck() jail.Check {
	path, why := jail.DefaultInitPath()
	if why != "" {
		return jail.Check{Name: "sandbox init", OK: true, Detail: "brig re-executed (" + why + "); " + jail.InitBinary + " of the same build beside brig starts faster"}
	}
	return jail.Check{Name: "sandbox init", OK: true, Detail: path}
}

// smokeRuns runs a one-line program of each language through a real sandbox: the
// proof that every step works here.
func smokeRuns(ctx context.Context, lc launcherConfig) []jail.Check {
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	sb, err := newSandbox(lc, nil, false, discard)
	under := ""
	if errors.Is(err, cgroup.ErrParentLocked) && lc.CgroupParent != localParent {
		// A running service owns --cgroup-parent: its sweep or its stop
		// would kill these runs, which go beside local runs instead.
		under = fmt.Sprintf(" (under %s: a running service owns %s or a group above it)", localParent, lc.CgroupParent)
		lc.CgroupParent = localParent
		sb, err = newSandbox(lc, nil, false, discard)
	}
	if err != nil {
		return []jail.Check{{Name: "sandbox", Detail: err.Error(), Hint: "see the error"}}
	}
	defer sb.Close()
	var out []jail.Check
	for _, lang := range rootfs.Languages {
		code := map[rootfs.Language]string{rootfs.Python: "print('ok')", rootfs.JavaScript: "console.log('ok')"}[lang]
		res, err := sb.Run(ctx, jail.Spec{Language: lang, Code: code, Timeout: 10 * time.Second, MemoryBytes: api.DefaultMemoryMiB << 20})
		ch := jail.Check{Name: "sandboxed run " + lang.String(), Hint: "see the message; the sandbox can't be built on this host"}
		switch {
		case err != nil:
			ch.Detail = err.Error()
		case !res.Succeeded() || res.Stdout != "ok\n":
			ch.Detail = fmt.Sprintf("ended %s: %s %s", res.End, res.Message, res.Stderr)
		default:
			ch.OK = true
			ch.Detail = fmt.Sprintf("printed ok, started in %d ms%s", res.Timing.StartMS, under)
		}
		out = append(out, ch)
	}
	return out
}

func allOK(checks []jail.Check) bool {
	for _, c := range checks {
		if !c.OK {
			return false
		}
	}
	return true
}

func printChecks(w io.Writer, checks []jail.Check) error {
	for _, c := range checks {
		mark := "pass"
		switch {
		case !c.OK:
			mark = "FAIL"
		case c.Warn:
			mark = "warn"
		}
		line := fmt.Sprintf("%s  %-30s %s", mark, c.Name, c.Detail)
		if (!c.OK || c.Warn) && c.Hint != "" {
			line += "  (hint: " + c.Hint + ")"
		}
		fmt.Fprintln(w, line)
	}
	if !allOK(checks) {
		return exitError(1)
	}
	return nil
}

// packageChecks say which languages can install packages here: their package
// manager answers with a registry, whose hosts resolve here to addresses the
// egress proxy dials (sc's [egress]). A language without one is not a failure
// (its runs may still run without packages), so these lines pass, with a
// warning. A nil lookup resolves nothing.
func packageChecks(ctx context.Context, sc serveConfig, lookup lookupFunc) []jail.Check {
	var out []jail.Check
	for _, lang := range api.Languages {
		r, err := packages.Managers{}.Registry(ctx, lang.String(), *sc.Egress.registries(lang))
		ch := jail.Check{Name: "packages " + lang.String(), OK: true}
		switch {
		case err != nil:
			ch.Warn = true
			ch.Detail = fmt.Sprintf("no packages: %v", err)
			ch.Hint = fmt.Sprintf("install its package manager, or set [egress.registries] %s", lang)
		case len(r.Indexes) == 0:
			ch.Warn = true
			ch.Detail = "no packages: its package manager names no registry"
			ch.Hint = fmt.Sprintf("configure one in the package manager, or set [egress.registries] %s", lang)
		default:
			ch.Detail = fmt.Sprintf("installed from %d registry URL(s) (hosts %s)", len(r.Indexes), strings.Join(r.Hosts, ", "))
			if lookup != nil {
				registryAddrCheck(ctx, sc, lang, r.Hosts, lookup, &ch)
			}
		}
		out = append(out, ch)
	}
	if sc.Packages.Enabled {
		out = append(out, cacheSpaceCheck(sc))
	}
	return out
}

// cacheSpaceCheck warns of a package cache's disk with less free than its
// installs keep (packages.LowSpace): every install would fail.
func cacheSpaceCheck(sc serveConfig) jail.Check {
	ch := jail.Check{Name: "package cache disk", OK: true}
	dir := packageCacheDir(sc)
	for { // the cache may not exist yet: its nearest folder that does
		if _, err := os.Stat(dir); err == nil || filepath.Dir(dir) == dir {
			break
		}
		dir = filepath.Dir(dir)
	}
	low, free, err := packages.LowSpace(dir, sc.Packages.MinFreeBytes)
	switch {
	case err != nil:
		ch.Warn, ch.Detail = true, err.Error()
	case low != "":
		ch.Warn = true
		// The service evicts layers no run holds before it refuses an
		// install (with the service stopped, every layer is one).
		var cached int64
		if ms, err := packages.ListLayers(packageCacheDir(sc)); err == nil {
			for _, m := range ms {
				cached += m.Bytes
			}
		}
		ch.Detail = fmt.Sprintf("%s has %s: installs evict the cached layers (%d MiB) to keep it, and are stopped once none is left", dir, low, cached>>20)
		ch.Hint = "free space there (brig packages prune removes cached layers), give [packages] cache_dir a larger disk, or lower packages.min_free_bytes"
	default:
		ch.Detail = fmt.Sprintf("%s has %s", dir, free)
	}
	return ch
}

// lookupFunc resolves a host name, as net.Resolver.LookupNetIP.
type lookupFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

// registryAddrCheck adds to ch what lang's registry hosts resolve to here
// when that is not a public address, and whether the egress proxy of sc
// dials it (egress.Config.DecideAddr, as for an installer): a refused one, or
// a name that does not resolve, is a warning that says what to change.
// brig check resolves with this host's resolver, as the proxy does unless
// [egress] resolver names another.
func registryAddrCheck(ctx context.Context, sc serveConfig, lang api.Language, hosts []string, lookup lookupFunc, ch *jail.Check) {
	ecfg := sc.supervisorConfig(nil).Egress
	ecfg.RegistryHosts = hosts
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	for _, h := range hosts {
		addrs, err := lookup(ctx, "ip", h)
		if err != nil {
			ch.Warn = true
			ch.Detail += fmt.Sprintf("; %s does not resolve here: %v", h, err)
			ch.Hint = fmt.Sprintf("its installs fail until it does: check this host's DNS, or set [egress.registries] %s to a registry this host reaches", lang)
			continue
		}
		for _, a := range addrs {
			a = a.Unmap()
			if egress.ClassifyAddr(a) == egress.ClassPublic {
				continue
			}
			if d := ecfg.DecideAddr(h, a, nil); d.Allowed {
				ch.Detail += fmt.Sprintf("; %s resolves to %s here, reached as %s", h, a, d.Rule)
			} else {
				ch.Warn = true
				ch.Detail += fmt.Sprintf("; %s resolves to %s here, which the egress proxy refuses (%s)", h, a, d.Rule)
				ch.Hint = fmt.Sprintf("if this host reaches %s through a mirror or a gateway there, list it in [egress] allow_private_hosts", h)
			}
			break
		}
	}
}
