package egress

import (
	"log/slog"
	"net/netip"
	"time"
)

// Decision is the policy's verdict on one DNS query or connection attempt.
type Decision struct {
	Allowed bool
	// Rule names what decided, for the canonical log line and the Result:
	// "domain example.com", "mode any", "not in the run's domains", "ip literal",
	// "address class private (10.0.0.0/8)", "pinned by the operator", ...
	Rule string
}

// Policy is one run's egress policy: which names it may reach.
type Policy struct {
	// Mode is api.NetworkRegistries, api.NetworkDomains or api.NetworkAny.
	Mode string
	// Domains are the names the run may reach with their subdomains, as
	// ParseDomain returns them: the request's with NetworkDomains, the registry
	// hosts of the run's language with NetworkRegistries, none with NetworkAny.
	Domains []string
}

// DecideName decides a host name (from a DNS query, a ClientHello's SNI, a Host
// header or a CONNECT line) and port, before anything is resolved. It is pure.
func (p Policy) DecideName(host string, port int) Decision {
	panic("unimplemented: helper P")
}

// Config is the operator's egress configuration, shared by every run.
type Config struct {
	// Pins maps "host:port" to the "ip:port" the proxy dials for it. A pinned
	// destination is reached whatever its address class: how the tests reach
	// their upstreams on loopback, and how an operator points a name at a mirror.
	// The run's policy still decides the name.
	Pins map[string]string
	// AllowPrivateHosts are host names (with their subdomains) whose resolved
	// addresses may be of any class: the operator's own internal services.
	AllowPrivateHosts []string
	// Resolver is the upstream DNS server ("ip:port") the proxy resolves names
	// with, on the host side; empty means the first nameserver of the host's
	// /etc/resolv.conf.
	Resolver string
	// MaxConns bounds a run's connections open at once; zero means DefaultMaxConns.
	MaxConns int
	// ConnsPerSecond bounds the rate of a run's new connections (a token bucket
	// with a burst of MaxConns); zero means DefaultConnsPerSecond.
	ConnsPerSecond float64
	// MaxBytes bounds what a run sends and receives, each way, over all its
	// connections; zero means DefaultMaxBytes.
	MaxBytes int64
	// HandshakeTimeout bounds the time to read a ClientHello, a request head or
	// a CONNECT line; zero means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// Logger gets one canonical line per decision; nil means slog.Default().
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultMaxConns         = 64
	DefaultConnsPerSecond   = 50
	DefaultMaxBytes         = 1 << 30
	DefaultHandshakeTimeout = 10 * time.Second
)

// ClassifyAddr names the class of an address: "public", or the non-public class
// it falls in ("loopback", "private", "cgnat", "link-local", "metadata",
// "multicast", "this-network", "reserved", "ula", "ipv4-mapped", "nat64",
// "6to4", "teredo", ...). It is pure.
func ClassifyAddr(a netip.Addr) string {
	panic("unimplemented: helper P")
}

// DecideAddr decides one resolved address of host: public addresses pass,
// every other class is refused unless host is one of AllowPrivateHosts, and the
// host's own addresses (hostAddrs) are refused always. It is pure.
func (c *Config) DecideAddr(host string, a netip.Addr, hostAddrs []netip.Addr) Decision {
	panic("unimplemented: helper P")
}
