// Package egress owns a run's egress: the policy that decides which hosts a run may
// reach (pure: a function of the policy, the host and the port, with no sockets in
// it), the DNS server the sandbox resolves through, and the transparent and CONNECT
// proxies that enforce the decisions.
//
// The policy decides in two steps, both pure. Policy.DecideName decides a host
// name and port as the run wrote them (in a DNS question, an SNI, a Host header
// or a CONNECT line) before anything is resolved: it normalises the name
// (NormalizeHost: ASCII lower case, punycode, no trailing dot), refuses IP
// literals in every spelling and mode, and matches the run's domains (Matches).
// The proxy then asks Config.Pin for an address the operator pinned; failing
// that it resolves Decision.Name itself and asks Config.DecideAddr about each
// address, which refuses every class but public (ClassifyAddr) unless the
// operator allowed the name, and the host's own addresses always. It dials
// only an address it checked.
//
// Typical use:
//
//	domain, err := egress.ParseDomain(req.Network.Domains[i]) // "Example.COM." -> "example.com"
//	if err != nil {
//		// 400, field fmt.Sprintf("network.domains[%d]", i), message err.Error()
//	}
//	pol := egress.Policy{Mode: api.NetworkDomains, Domains: domains}
//	d := pol.DecideName(sni, 443) // "API.Example.COM." -> allowed, "domain example.com"
//	if !d.Allowed { /* refuse, log d.Rule */ }
//	addr, pinned := cfg.Pin(d.Name, 443)
//	if !pinned { /* resolve d.Name; for each address a: cfg.DecideAddr(d.Name, a, hostAddrs) */ }
//
// Example_policy shows it run.
package egress
