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
//
// The mechanism (run.go and the files it uses) serves one networked run: Start
// enters the network namespace of the run's sandbox init on a thread of its
// own (netns.go), binds a DNS server (dns.go, 127.0.0.1:53 over UDP and TCP),
// the transparent proxy (proxy.go, 127.0.0.1:80 and :443) and the CONNECT
// proxy (proxyhttp.go, 127.0.0.1:ProxyPort) there, makes every other
// address local to the namespace so that a program's direct attempt on an
// address is refused at once, and lists each one from raw sockets that read
// a copy of its first packet (direct.go); it serves them from the host's
// side, where it also resolves and dials (dial.go). The DNS server
// answers an allowed name with 127.0.0.1 and never forwards a denied one. The
// proxies read the SNI of the ClientHello (sni.go) or the request's Host
// without terminating TLS, decide, dial a checked address and splice; the
// per-run limits are in limit.go. Close ends it all and returns every attempted
// connection.
//
//	r, err := egress.Start(&cfg, pol, initPID, func(c egress.Connection) { /* an egress event */ })
//	env := egress.Env() // the proxy variables for the program
//	...                 // the run
//	conns := r.Close()  // the Result's network.connections
package egress
