package supervisor

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/egress"
	"github.com/brig-sandbox/brig/packages"
)

// networkModes are the network modes of API.md, in its order.
var networkModes = api.Strings(api.NetworkModes)

// languages are the languages whose registries the config may name.
var languages = api.Strings(api.Languages)

// checkNetworkModes checks the modes a host offers: known, each once, and
// "none" among them, since a request without a network asks for it.
func checkNetworkModes(modes []string) []error {
	var errs []error
	for i, m := range modes {
		switch {
		case !slices.Contains(networkModes, m):
			errs = append(errs, fmt.Errorf("network mode %q: use none, registries, domains or any", m))
		case slices.Contains(modes[:i], m):
			errs = append(errs, fmt.Errorf("network mode %q is listed twice: list each once", m))
		}
	}
	if !slices.Contains(modes, api.NetworkNone) {
		errs = append(errs, fmt.Errorf("network modes %q: list \"none\" too: it is the mode of every request that names no network", modes))
	}
	return errs
}

// checkEgress checks the operator's egress configuration: egress owns what a
// valid one is (pins, private hosts, resolver, limits), in the config file's
// words.
func checkEgress(c egress.Config) []error {
	if err := c.Validate(); err != nil {
		return []error{fmt.Errorf("egress: %w", err)}
	}
	return nil
}

// checkHostName checks a host name of the config: a name, as ParseDomain
// writes it, so that it compares equal to the names runs ask for.
func checkHostName(h string) error {
	norm, err := egress.ParseDomain(h)
	if err != nil {
		return err
	}
	if norm != h {
		return fmt.Errorf("write it as %q", norm)
	}
	return nil
}

// checkRegistryHosts checks the registry hosts of each language.
func checkRegistryHosts(hosts map[string][]string) []error {
	var errs []error
	for _, lang := range sortedKeys(hosts) {
		if !slices.Contains(languages, lang) {
			errs = append(errs, fmt.Errorf("registries of %q: not a language brig runs; use python or javascript", lang))
			continue
		}
		for _, h := range hosts[lang] {
			if err := checkHostName(h); err != nil {
				errs = append(errs, fmt.Errorf("registry host %q of %s: %w", h, lang, err))
			}
		}
	}
	return errs
}

// withRegistryHosts is ecfg with RegistryHosts set to every language's
// registry hosts, once each, unless it has its own: the names whose
// addresses egress judges as a registry's (egress.Config.RegistryHosts),
// for runs and the package installer alike.
func withRegistryHosts(ecfg egress.Config, hosts map[string][]string) egress.Config {
	if ecfg.RegistryHosts != nil {
		return ecfg
	}
	all := []string{}
	for _, lang := range sortedKeys(hosts) {
		for _, h := range hosts[lang] {
			if !slices.Contains(all, h) {
				all = append(all, h)
			}
		}
	}
	ecfg.RegistryHosts = all
	return ecfg
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// egressPolicy is the egress policy of a run of req (validated, defaults
// filled): with "domains" the request's names, normalised and each once; with
// "registries" the registry hosts of its language (none when there are none:
// the run reaches nothing); with "any" no names. It is pure; the run's execute
// passes it to egress.Start.
func (cfg Config) egressPolicy(req api.Request) egress.Policy {
	pol := egress.Policy{Mode: req.Network.Mode}
	switch req.Network.Mode {
	case api.NetworkDomains:
		for _, d := range req.Network.Domains {
			if n, err := egress.ParseDomain(d); err == nil && !slices.Contains(pol.Domains, n) {
				pol.Domains = append(pol.Domains, n)
			}
		}
	case api.NetworkRegistries:
		pol.Domains = slices.Clone(cfg.RegistryHosts[req.Language])
		pol.Ports = slices.Clone(cfg.RegistryPorts[req.Language])
		if len(pol.Ports) == 0 {
			pol.Ports = packages.RegistryPortsOf(nil) // the web's
		}
	}
	return pol
}

// registryEnv is what a run of lang with network registries gets of its
// registry: its package manager's settings (names brig reserves) naming the
// URLs its installer uses, which may be an operator's mirror that the
// manager's own default is not, so that a program's own pip or npm asks the
// registry that mode admits. (Other modes keep the managers' defaults: a
// domains run that allows the public registry reaches it.) A URL with a
// user, a query or a fragment, where credentials go, is left out: the run is
// not trusted with them. A token in a URL's path can't be told from a name;
// README says to keep credentials out of the URLs.
func registryEnv(lang string, urls []string) map[string]string {
	var indexes, trusted []string
	for _, u := range urls {
		p, err := url.Parse(u)
		if err != nil || p.User != nil || p.RawQuery != "" || p.ForceQuery || p.Fragment != "" {
			continue
		}
		indexes = append(indexes, u)
		if p.Scheme == "http" && !slices.Contains(trusted, p.Hostname()) {
			trusted = append(trusted, p.Hostname()) // pip ignores an http index otherwise
		}
	}
	if len(indexes) == 0 {
		return nil
	}
	env := map[string]string{}
	switch lang {
	case string(api.Python):
		env["PIP_INDEX_URL"] = indexes[0]
		if len(indexes) > 1 {
			env["PIP_EXTRA_INDEX_URL"] = strings.Join(indexes[1:], " ")
		}
		if len(trusted) > 0 {
			env["PIP_TRUSTED_HOST"] = strings.Join(trusted, " ")
		}
	case string(api.JavaScript):
		env["npm_config_registry"] = indexes[0]
	}
	return env
}

// registries is GET /v1/health's registries: each language's registry hosts
// that mode registries admits, an empty list for one with none, or for every
// language when the host does not offer the mode (the hosts it read are then
// its package installer's alone).
func (cfg Config) registries() map[string][]string {
	out := make(map[string][]string, len(languages))
	offered := slices.Contains(cfg.NetworkModes, api.NetworkRegistries)
	for _, lang := range languages {
		if offered {
			out[lang] = slices.Clone(cfg.RegistryHosts[lang])
		}
		if out[lang] == nil {
			out[lang] = []string{}
		}
	}
	return out
}

// recordEgress is what a networked run's execute does with the connections
// (*egress.Run).Close returns: each is counted in the metrics, and the list
// becomes the Result's network.connections (never nil: API.md lists it always)
// as far as api.MaxConnectionsBytes holds it; what the run's lists or that
// bound left out is counted too, and the count returned.
func (s *Service) recordEgress(mode string, conns []egress.Connection, omitted egress.Omitted) ([]api.Connection, int) {
	out := make([]api.Connection, 0, len(conns))
	for _, c := range conns {
		s.metrics.observeEgress(mode, c)
		out = append(out, apiConnection(c))
	}
	// What the run's lists left out is counted all the same.
	for allowed, byRule := range omitted.Decisions {
		for rule, n := range byRule {
			s.metrics.observeEgressDecisions(mode, allowed, rule, n)
		}
	}
	s.metrics.observeEgressBytes(omitted.BytesSent, omitted.BytesReceived)
	out, left := listWithin(out, api.MaxConnectionsBytes)
	return out, omitted.Total() + left
}

// listWithin keeps of conns, in their order, those whose JSON fits in budget
// bytes, the allowed ones first (a flood of refusals must not push out a
// connection that got through, nor its bytes), and says how many it left out.
// The egress bounds the count of each (egress.MaxRefusals), not their size:
// 10,000 refusals of 253-character names, with an allowed connection's a
// second, made a result of 9.6 MB that no client read (an audit).
func listWithin(conns []api.Connection, budget int) ([]api.Connection, int) {
	// At most 6 bytes a character escaped, and the rest of a connection's JSON
	// (its names, two counts and a port) within 200.
	most := 0
	for _, c := range conns {
		most += 6*(len(c.Host)+len(c.Rule)+len(c.Failure)) + 200
	}
	if most <= budget {
		return conns, 0
	}
	keep := make([]bool, len(conns))
	budget-- // the array's brackets, less the comma its last element does not take
	for _, allowed := range []bool{true, false} {
		for i, c := range conns {
			if c.Allowed != allowed {
				continue
			}
			if b, err := api.Marshal(c); err == nil && len(b)+1 <= budget {
				budget -= len(b) + 1 // and its comma
				keep[i] = true
			}
		}
	}
	kept := conns[:0]
	for i, c := range conns {
		if keep[i] {
			kept = append(kept, c)
		}
	}
	return kept, len(keep) - len(kept)
}

// apiConnection is a Connection of the Result.
func apiConnection(c egress.Connection) api.Connection {
	return api.Connection{
		Host:          c.Host,
		Port:          c.Port,
		Allowed:       c.Allowed,
		Rule:          c.Rule,
		BytesSent:     c.BytesSent,
		BytesReceived: c.BytesReceived,
		Failure:       c.Failure,
	}
}
