package supervisor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/egress"
	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/packages"
)

// PackagesConfig configures the runs' packages.
type PackagesConfig struct {
	// Cache holds the installed layers and installs the missing ones; nil
	// means this host installs no packages (a request with packages is a 400).
	Cache *packages.Cache
	// Policy decides which packages may be installed; its zero value admits
	// every package.
	Policy packages.PolicyConfig
	// Languages are those whose packages can be installed (the installer has a
	// registry for them); with a Cache, nil means both.
	Languages []string
	// Options are the installer's options per language
	// (packages.InstallerConfig.Options), part of each layer's key.
	Options map[string][]string
	// InstallMemoryMiB is an install's memory limit (its sandbox's, outside
	// the run's group); zero means packages.DefaultInstallMemoryMiB (Config's
	// withDefaults). A run
	// with packages is admitted for the larger of it and its own, so that
	// memory_budget_mib holds the installs the runs wait for too.
	InstallMemoryMiB int
	// InstallTimeout is an install's time limit, which GET /v1/limits
	// tells; zero means packages.DefaultInstallTimeout (withDefaults).
	InstallTimeout time.Duration
}

// admittedMiB is the memory a run of req is admitted for: its own, or an
// install's when it asks for packages, which it may wait for in its slot.
func (p PackagesConfig) admittedMiB(req api.Request) int {
	if len(req.Packages) == 0 {
		return *req.MemoryMiB
	}
	return max(*req.MemoryMiB, p.InstallMemoryMiB)
}

// languages lists the languages whose runs may ask for packages, never nil.
func (p PackagesConfig) languages() []string {
	switch {
	case p.Cache == nil:
		return []string{}
	case p.Languages == nil:
		return api.Strings(api.Languages)
	}
	return p.Languages
}

// Where a run sees its package layer. Python imports from PYTHONPATH (a name
// brig reserves) with no change to the program. Node resolves both require()
// and import by walking up from /sandbox/main.js, so a node_modules at the root
// serves both, where NODE_PATH would serve require() alone.
const (
	pythonLayerTarget     = "/opt/brig/python"
	javascriptLayerTarget = "/node_modules"
)

// layerSpec adds the lease's layer to a run's spec, and its programs' folder
// (pip's --target bin, npm's .bin) to the front of its PATH, so that a program
// runs a package's command by its name, as after pip or npm install
// (`black`, `tsc`; the npm probe of 2026-12-06 found "tsc: not found").
func layerSpec(spec *jail.Spec, language string, lease *packages.Lease) {
	switch language {
	case string(api.Python):
		spec.Mounts = append(spec.Mounts, jail.Mount{Source: lease.Dir, Target: pythonLayerTarget})
		spec.BrigEnv = map[string]string{"PYTHONPATH": pythonLayerTarget, "PATH": pythonLayerTarget + "/bin:" + jail.DefaultPath}
	case string(api.JavaScript):
		spec.Mounts = append(spec.Mounts, jail.Mount{Source: lease.Dir, Target: javascriptLayerTarget})
		spec.BrigEnv = map[string]string{"PATH": javascriptLayerTarget + "/.bin:" + jail.DefaultPath}
	}
}

// preparePackages is the preparing state of a run that asks for packages: the
// policy, then a layer from the cache (installed first when missing, with
// package events). It returns the lease the run holds until it ends, or the
// result of a run that ends here: blocked, unavailable, stopped or internal.
func (s *Service) preparePackages(r *run) (*packages.Lease, *api.Result) {
	begin := time.Now()
	end := func(reason api.Reason, format string, args ...any) *api.Result {
		res := failedResult(r.id, r.req, reason, fmt.Sprintf(format, args...))
		res.Timing.PrepareMS = time.Since(begin).Milliseconds()
		return res
	}
	reqs, err := packages.ParseRequests(r.req.Language, r.req.Packages)
	if err != nil { // validation parsed them already: a defect
		return nil, end(api.ReasonInternal, "the package requests could not be read again: %v", err)
	}
	var blocked *packages.BlockedError
	if err := s.cfg.Packages.Policy.Check(r.req.Language, reqs); errors.As(err, &blocked) {
		return nil, end(api.ReasonPackageBlocked, "%s; the program did not run", blocked.Message)
	} else if err != nil {
		return nil, end(api.ReasonInternal, "checking the package policy: %v", err)
	}
	r.setState(api.StatePreparing)
	set := packages.Set{Language: r.req.Language, Runtime: s.host.Languages[r.req.Language], Requests: reqs,
		Options: s.cfg.Packages.Options[r.req.Language]}
	lease, err := s.cfg.Packages.Cache.Acquire(r.ctx, set, r.onPackage)
	var unavailable *packages.UnavailableError
	var index *packages.IndexError
	var unreachedErr *registryUnreachedError
	switch {
	case errors.As(err, &unavailable):
		return nil, end(api.ReasonPackageUnavailable, "%s", unavailable.Message)
	case errors.As(err, &index):
		// Not the request's fault: internal, and a message that says to try
		// again, without the layer's key that the error chain carries.
		return nil, end(api.ReasonInternal, "%s; the program did not run: the registry or this host's network failed, not the request, so the same request may work later, %s", index.Message, retryUnderANewID)
	case errors.As(err, &unreachedErr):
		return nil, end(api.ReasonInternal, "the packages could not be installed: %v; the program did not run: once that is mended, send the request again, %s", unreachedErr, retryUnderANewID)
	case r.ctx.Err() != nil:
		return nil, end(api.ReasonStopped, "the run was stopped while its packages were prepared; the program did not run")
	case err != nil:
		// The layer's key is the operator's, in the log; the run's message
		// has what the installer said.
		var layer *packages.InstallError
		if errors.As(err, &layer) {
			s.log.Error("installing packages", logID, r.id, "err", err)
			err = layer.Err
		}
		return nil, end(api.ReasonInternal, "the packages could not be installed: %v; the program did not run", err)
	}
	// The requests passed; what they pulled in must too (a denied or an
	// unreviewed dependency), whether installed now or long ago under another
	// policy. A refusal names this run's requests, not the installing run's.
	if err := s.cfg.Packages.Policy.CheckResolved(r.req.Language, asRequested(reqs, lease.Manifest.Packages)); errors.As(err, &blocked) {
		lease.Release()
		return nil, end(api.ReasonPackageBlocked, "%s; the program did not run", blocked.Message)
	} else if err != nil {
		lease.Release()
		return nil, end(api.ReasonInternal, "checking the package policy: %v", err)
	}
	r.prepared = time.Since(begin)
	r.setTiming(func(t *api.Timing) { t.PrepareMS = r.prepared.Milliseconds() })
	return lease, nil
}

// asRequested is a layer's packages as this run's requests name them: each
// package a request asks for carries this run's request (Raw), and each
// dependency the requests that pulled it in (RequiredBy). A layer is
// keyed by the normalised requests, so the run that installed it may have
// spelled them otherwise ("Alpha==1.0" for "alpha==1.0", "beta<3, >=2" for
// "beta>=2,<3"), and the manifest keeps that run's spelling. A request matches
// on its normalised name, which is what Resolved.Name holds (PEP 503 for
// Python, the npm name as written); only the packages the install resolved
// for a request have a Request, so an npm dependency nested under the same
// name is not taken for it.
func asRequested(reqs []packages.Request, pkgs []packages.Resolved) []packages.Resolved {
	raw := make(map[string]string, len(reqs)) // normalised name -> this run's request
	for _, q := range reqs {
		raw[q.Name] = q.Raw
	}
	out := slices.Clone(pkgs)
	for i, p := range out {
		if r, ok := raw[p.Name]; ok && p.Request != "" {
			out[i].Request = r
		}
		if len(p.RequiredBy) > 0 {
			by := make([]string, len(p.RequiredBy))
			for j, name := range p.RequiredBy {
				by[j] = cmp.Or(raw[name], name)
			}
			out[i].RequiredBy = by
		}
	}
	return out
}

// packageResults is the Result's packages block: for each request, in the
// run's order and as the run wrote it, the package that satisfies it. Without
// a lease (the run ended before its packages were resolved: refused by the
// policy, unavailable, stopped) each request still has its entry, with the
// name it normalises to and no version, so that a harness can match a refusal
// to what it sent.
func packageResults(req api.Request, lease *packages.Lease) []api.PackageResult {
	var pkgs []packages.Resolved
	reqs, err := packages.ParseRequests(req.Language, req.Packages)
	if lease != nil {
		pkgs = lease.Manifest.Packages
		if err == nil {
			pkgs = asRequested(reqs, pkgs)
		} // else validation and preparePackages parsed them already: match as written
	}
	out := make([]api.PackageResult, 0, len(req.Packages))
	for i, raw := range req.Packages {
		pr := api.PackageResult{Request: raw, Cached: lease != nil && lease.Cached}
		if err == nil {
			pr.Name = reqs[i].Name
		}
		for _, p := range pkgs {
			if p.Request == raw {
				pr.Name, pr.Version = p.Name, p.Version
				break
			}
		}
		out = append(out, pr)
	}
	return out
}

// InstallerRun is what the package installer runs its sandboxes with: l's Run,
// with network "registries" for the installer's language (hosts, as
// Config.RegistryHosts) attached in the sandbox, as every networked run has it.
// Each decision of the installer's proxy is logged with the layer's language.
// An installer that failed after its proxy refused a registry's address, or
// could not resolve its name, ends in an error that says so and what the
// operator can do, instead of the package manager's own words for the
// proxy's answer.
func InstallerRun(l Launcher, ecfg egress.Config, hosts map[string][]string) func(context.Context, jail.Spec) (*jail.Result, error) {
	return func(ctx context.Context, spec jail.Spec) (*jail.Result, error) {
		lang := string(spec.Language)
		pol := egress.Policy{Mode: api.NetworkRegistries, Domains: append([]string(nil), hosts[lang]...)}
		cfg := withRegistryHosts(ecfg, hosts)
		if cfg.Logger != nil {
			cfg.Logger = cfg.Logger.With("installer", lang)
		}
		var er *egress.Run
		spec.Attach = func(pid int) (map[string]string, error) {
			var err error
			if er, err = egress.Start(&cfg, pol, pid, nil); err != nil {
				return nil, err
			}
			return egress.Env(), nil
		}
		res, err := l.Run(ctx, spec)
		if er != nil {
			conns := er.Close()
			if err == nil && packages.InstallFailed(res) {
				if c := unreached(conns); c != nil {
					return nil, &registryUnreachedError{lang: lang, conn: *c}
				}
			}
		}
		return res, err
	}
}

// retryUnderANewID says how to send a request again whose id now holds its
// failure (a request that reuses the id gets this result, API.md's Retries).
const retryUnderANewID = "under a new id or none (this id keeps this result)"

// registryUnreachedError is an installer that failed after its proxy could
// not reach its registry for a reason of the host's, not the registry's: the
// name resolves to an address egress refuses, or does not resolve. Not the
// request's fault, and not one that time mends, so its message says what
// the operator can change.
type registryUnreachedError struct {
	lang string
	conn egress.Connection
}

func (e *registryUnreachedError) Error() string {
	if !e.conn.AddressRefused() {
		return fmt.Sprintf("the %s registry %s was not reached: %s (Hint for the operator: check this host's resolver, [egress] resolver or /etc/resolv.conf, "+
			"or set [egress.registries] %s to a registry this host reaches)", e.lang, e.conn.Host, e.conn.Failure, e.lang)
	}
	// "address class private (10.0.0.0/8)", or "address of this host".
	of := strings.TrimPrefix(strings.TrimPrefix(e.conn.Rule, "address "), "of ")
	return fmt.Sprintf("the %s registry %s was not reached: this host resolves it to an address of %s, which brig does not dial "+
		"(Hint for the operator: if this host reaches its registry through a mirror or a gateway there, list %s in [egress] allow_private_hosts)",
		e.lang, e.conn.Host, of, e.conn.Host)
}

// unreached is, when no connection of conns received anything, the first
// refused for the address its name resolved to, else the first whose name
// did not resolve; or nil. An installer that failed with one failed because
// of how the host resolves its registry, which only the operator can change;
// one that received anything reached a registry, and its tool says what
// went wrong.
func unreached(conns []egress.Connection) *egress.Connection {
	for _, c := range conns {
		if c.BytesReceived > 0 {
			return nil
		}
	}
	for _, pick := range []func(egress.Connection) bool{egress.Connection.AddressRefused, egress.Connection.Unresolved} {
		for i := range conns {
			if pick(conns[i]) {
				return &conns[i]
			}
		}
	}
	return nil
}
