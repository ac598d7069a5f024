// Package egress owns a run's egress: the policy that decides which hosts a run may
// reach (pure: a function of the policy, the host and the port, with no sockets in
// it), the DNS server the sandbox resolves through, and the transparent and CONNECT
// proxies that enforce the decisions. Today it holds the policy's name rules: the
// host names of a `domains` network and how a host matches them.
//
// Typical use:
//
//	domain, err := egress.ParseDomain(req.Network.Domains[i]) // "Example.COM." -> "example.com"
//	if err != nil {
//		// 400, field fmt.Sprintf("network.domains[%d]", i), message err.Error()
//	}
//	allowed := egress.Matches(domain, "api.example.com") // true: subdomains are included
package egress
