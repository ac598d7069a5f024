package egress

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/idna"

	"github.com/brig-sandbox/brig/api"
)

// Decision is the policy's verdict on one DNS query or connection attempt.
type Decision struct {
	Allowed bool
	// Rule names what decided, for the canonical log line and the Result:
	// "domain example.com", "mode any", "not in the run's domains", "ip literal",
	// "address class private (10.0.0.0/8)", ... A pinned name is decided by the
	// policy as any other: the pin only gives the address it is dialled at.
	Rule string
	// Name is the host name DecideName decided, normalised (ASCII lower case,
	// punycode, no trailing dot); empty when the host was refused as an IP
	// literal or as no host name. The proxy resolves, pins and logs this name,
	// never the raw one it read, so what it dials is what was decided.
	Name string
}

// Policy is one run's egress policy: which names it may reach.
type Policy struct {
	// Mode is api.NetworkRegistries, api.NetworkDomains or api.NetworkAny.
	Mode string
	// Domains are the names the run may reach with their subdomains, as
	// ParseDomain returns them: the request's with NetworkDomains, the registry
	// hosts of the run's language with NetworkRegistries, none with NetworkAny.
	Domains []string
	// Ports, with NetworkRegistries, are the ports its hosts may be reached
	// on (the web's and those the registry URLs name: a registry's host may
	// be a mirror that serves more than packages); empty admits every port.
	Ports []int
}

// The fixed rules. A rule that names a domain, a class or a prefix is built
// where it is decided.
const (
	ruleModeAny      = "mode any"
	ruleModeNone     = "mode none"
	ruleUnknownMode  = "unknown mode"
	ruleNotDomain    = "not in the run's domains"
	ruleNotRegistry  = "not a registry host"
	ruleRegistryPort = "not a registry port"
	ruleIPLiteral    = "ip literal (the proxy dials names only)"
	ruleInvalidHost  = "invalid host name"
	ruleLoopbackName = "a name of the run's own loopback (localhost)"
	ruleInvalidPort  = "invalid port"
	ruleAddrPublic   = "address public"
	ruleHostAddr     = "address of this host"
	ruleInvalidAddr  = "invalid address"
	// ruleAddrClass is followed by the refused address's class and its range.
	ruleAddrClass    = "address class "
	rulePrivateAllow = "private address allowed by the operator for "
	// ruleRegistryAddr is followed by the address's class.
	ruleRegistryAddr = "a registry host's address, of class "
)

// Errors of NormalizeHost.
var (
	// ErrIPLiteral: the host is an IP address, in any spelling a resolver,
	// a browser or inet_aton accepts.
	ErrIPLiteral = errors.New("ip literal")
	// ErrInvalidHost: the host is no host name.
	ErrInvalidHost = errors.New("invalid host name")
	// ErrLoopbackName: localhost or a name under it (RFC 6761), which names
	// the run's own loopback and is never looked up outside.
	ErrLoopbackName = errors.New("a name of loopback")
)

// maxHostInput bounds the raw host NormalizeHost reads: four times the
// longest name, room for a Unicode name's UTF-8 and mapped characters, and no
// more, so a hostile SNI or Host header costs little to refuse.
const maxHostInput = 4 * maxNameChars

// lookupProfile converts a host to its ASCII form for comparing it: the
// lookup mapping of UTS #46 (case, width and compatibility folding) with its
// label validation and the Bidi rule, as idna.Lookup, but without
// CheckHyphens, which refuses "--" in a label's third and fourth places and
// so real names such as r3---sn-abc.googlevideo.com (browsers leave it off
// too). Leading and trailing hyphens and the lengths are checked after it, by
// checkLabel. StrictDomainName (set by MapForLookup) refuses "_" and every
// other ASCII character outside letters, digits and hyphens, so a DNS
// presentation escape ("a\.b") is refused too.
var lookupProfile = idna.New(idna.MapForLookup(), idna.BidiRule(), idna.CheckHyphens(false), idna.Transitional(false))

// NormalizeHost returns host as the policy compares it: ASCII lower case,
// international labels in punycode (xn--), one trailing dot removed. It
// returns ErrIPLiteral for an IP address in any spelling ("127.1",
// "2130706433", "0x7f000001", "0177.0.0.1", "[::ffff:127.0.0.1]:443",
// "fe80::1%eth0", "１２７.０.０.１") and ErrInvalidHost for anything that is not
// a full host name: not UTF-8, one label only, an empty label, a character
// outside letters, digits and hyphens (an underscore included), a label that
// starts or ends with a hyphen or is over 63 characters, a name over 253.
// Every name it returns is one ParseDomain accepts unchanged, and
// NormalizeHost returns it unchanged too (FuzzDecideName checks both), so
// two hosts are the same destination when their names are equal.
func NormalizeHost(host string) (string, error) {
	// idna reads a byte that is not UTF-8 as U+FFFD, and would turn it into
	// an A-label that it refuses when read back.
	if len(host) > maxHostInput || !utf8.ValidString(host) {
		return "", ErrInvalidHost
	}
	if isAddrLiteral(host) {
		return "", ErrIPLiteral
	}
	ascii, err := lookupProfile.ToASCII(host)
	if err != nil {
		return "", ErrInvalidHost
	}
	// idna checks the Bidi rule before mapping, so it admits "\u2136a.a",
	// whose BET SYMBOL maps to the right-to-left Hebrew bet, and then refuses
	// the A-label it made of it. A host passes only if its ASCII form does.
	if again, err := lookupProfile.ToASCII(ascii); err != nil || again != ascii {
		return "", ErrInvalidHost
	}
	// Strip the dot after mapping, as "example.com。" maps to "example.com.".
	name := asciiLower(strings.TrimSuffix(ascii, "."))
	// After mapping as well: fullwidth digits map to an IPv4 address.
	if endsInNumber(name) {
		return "", ErrIPLiteral
	}
	if len(name) > maxNameChars {
		return "", ErrInvalidHost
	}
	labels := strings.Split(name, ".")
	if len(labels) < 2 {
		// A single label is looked up in the host's search domains: the
		// operator's network, not the internet.
		return "", ErrInvalidHost
	}
	for _, label := range labels {
		if checkLabel(name, label) != nil {
			return "", ErrInvalidHost
		}
	}
	if labels[len(labels)-1] == "localhost" {
		return "", ErrLoopbackName
	}
	return name, nil
}

// isAddrLiteral reports whether s is an IP address: IPv4 or IPv6, bare or in
// brackets, with or without a port or a zone (raw or %25-escaped as in a
// URL), or any name that ends in a number.
func isAddrLiteral(s string) bool {
	if h, _, err := net.SplitHostPort(s); err == nil {
		s = h // drops the brackets too
	} else if len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' {
		s = s[1 : len(s)-1]
	}
	if strings.Contains(s, ":") {
		if i := strings.IndexByte(s, '%'); i >= 0 {
			s = s[:i] // an IPv6 zone says which link, not which address
		}
		_, err := netip.ParseAddr(s)
		return err == nil
	}
	return endsInNumber(asciiLower(strings.TrimSuffix(s, ".")))
}

// endsInNumber reports whether the last label of name is a number as
// inet_aton and the WHATWG URL host parser read one: decimal digits (octal
// with a leading 0) or 0x and hex digits. Such a name is an IPv4 address in
// some spelling ("127.1", "2130706433", "0x7f.1", "0177.0.0.1") or no valid
// name at all: no top-level domain is a number.
func endsInNumber(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if isDigits(last) {
		return true
	}
	hex, ok := strings.CutPrefix(last, "0x")
	if !ok {
		return false
	}
	for i := 0; i < len(hex); i++ {
		if c := hex[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true // "0x" alone is 0 to the URL parser
}

// DecideName decides a host name (from a DNS query, a ClientHello's SNI, a Host
// header or a CONNECT line) and port, before anything is resolved. It is pure.
//
// The host is normalised by NormalizeHost. An IP literal is refused in every
// mode, any included: the proxy dials the addresses it resolved and checked
// for a name, never an address the run chose. Any port from 1 to 65535
// passes, but for mode registries with Ports. Mode any admits every host name;
// mode domains a listed name and its subdomains (Matches), mode registries a
// listed name alone; mode none and an unknown mode admit nothing.
func (p Policy) DecideName(host string, port int) Decision {
	registries := false
	switch p.Mode {
	case api.NetworkAny, api.NetworkDomains:
	case api.NetworkRegistries:
		registries = true
	case api.NetworkNone:
		return Decision{Rule: ruleModeNone}
	default:
		return Decision{Rule: ruleUnknownMode}
	}
	name, err := NormalizeHost(host)
	switch {
	case errors.Is(err, ErrIPLiteral):
		return Decision{Rule: ruleIPLiteral}
	case errors.Is(err, ErrLoopbackName):
		return Decision{Rule: ruleLoopbackName}
	case err != nil:
		return Decision{Rule: ruleInvalidHost}
	}
	if port < 1 || port > 65535 {
		return Decision{Rule: ruleInvalidPort, Name: name}
	}
	if p.Mode == api.NetworkAny {
		return Decision{Allowed: true, Rule: ruleModeAny, Name: name}
	}
	for _, d := range p.Domains {
		// A registry is its hosts alone, as DESIGN.md says, not their
		// subdomains, which a run could otherwise name at will (the egress
		// probe of 2026-12-05: any name under a registry's reached the
		// resolver and, with a public address, the network).
		if registries && asciiLower(strings.TrimSuffix(name, ".")) == asciiLower(strings.TrimSuffix(d, ".")) || !registries && Matches(d, name) {
			if registries {
				if len(p.Ports) > 0 && !slices.Contains(p.Ports, port) {
					return Decision{Rule: ruleRegistryPort, Name: name}
				}
				return Decision{Allowed: true, Rule: "registry " + d, Name: name}
			}
			return Decision{Allowed: true, Rule: "domain " + d, Name: name}
		}
	}
	if registries {
		return Decision{Rule: ruleNotRegistry, Name: name}
	}
	return Decision{Rule: ruleNotDomain, Name: name}
}

// Config is the operator's egress configuration, shared by every run.
type Config struct {
	// Pins maps "host:port" to the "ip:port" the proxy dials for it. A pinned
	// destination is reached whatever its address class: how the tests reach
	// their upstreams on loopback, and how an operator points a name at a mirror.
	// The run's policy still decides the name. It is the only way to reach
	// loopback or the host's own addresses.
	Pins map[string]string
	// AllowPrivateHosts are host names (with their subdomains) whose resolved
	// addresses may be of any non-public class that names another machine
	// (private, cgnat, ula, link-local, metadata, ...): the operator's own
	// internal services. Loopback, the host's own addresses, the unspecified,
	// this-network, multicast and broadcast addresses and IPv4-mapped ones stay
	// refused: they name this machine or no single machine; a Pin reaches them.
	AllowPrivateHosts []string
	// RegistryHosts are the package registries' host names (exact names, no
	// subdomains: the service's Config.RegistryHosts, read from the
	// configuration or from the package managers' own settings). Unless
	// RegistriesPublicOnly, each may resolve to an address of the classes in
	// registryClasses as well as a public one: a host that reaches its
	// registry through a mirror or a gateway of its own network resolves it
	// there, and the operator chose that registry, not the run. Link-local
	// and metadata addresses, and those AllowPrivateHosts never opens, stay
	// refused.
	RegistryHosts []string
	// RegistriesPublicOnly refuses the registry hosts' non-public addresses
	// too, unless AllowPrivateHosts lists them (config private_registries =
	// false).
	RegistriesPublicOnly bool
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

// WithDefaults returns c with its zero fields set to the defaults above. It
// leaves Resolver empty: reading /etc/resolv.conf is the proxy's I/O.
func (c Config) WithDefaults() Config {
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.ConnsPerSecond == 0 {
		c.ConnsPerSecond = DefaultConnsPerSecond
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate runs the checks of a Config, before or after WithDefaults, and
// returns every problem found, each prefixed with its field's name in the
// configuration file.
func (c Config) Validate() error {
	var errs []error
	pinned := map[string]string{} // normalised key -> the key as written
	for _, k := range slices.Sorted(maps.Keys(c.Pins)) {
		key, err := checkPin(k, c.Pins[k])
		if err != nil {
			errs = append(errs, fmt.Errorf("pins[%q]: %w", k, err))
			continue
		}
		if other, ok := pinned[key]; ok {
			errs = append(errs, fmt.Errorf("pins[%q]: the same destination as pins[%q]: give each host and port once", k, other))
		}
		pinned[key] = k
	}
	for i, h := range c.AllowPrivateHosts {
		if _, err := ParseDomain(h); err != nil {
			errs = append(errs, fmt.Errorf("allow_private_hosts[%d]: %w", i, err))
		}
	}
	if c.Resolver != "" {
		if ap, err := netip.ParseAddrPort(c.Resolver); err != nil || ap.Port() == 0 || ap.Addr().IsUnspecified() {
			errs = append(errs, fmt.Errorf("resolver %q: give an IP address and a port, such as 192.0.2.53:53 or [2001:db8::53]:53", c.Resolver))
		}
	}
	if c.MaxConns < 0 {
		errs = append(errs, fmt.Errorf("max_conns %d: give zero (the default, %d) or more", c.MaxConns, DefaultMaxConns))
	}
	if c.ConnsPerSecond < 0 || math.IsNaN(c.ConnsPerSecond) || math.IsInf(c.ConnsPerSecond, 0) {
		errs = append(errs, fmt.Errorf("conns_per_second %v: give a finite number, zero (the default, %d) or more", c.ConnsPerSecond, DefaultConnsPerSecond))
	}
	if c.MaxBytes < 0 {
		errs = append(errs, fmt.Errorf("max_bytes %d: give zero (the default, %d) or more", c.MaxBytes, DefaultMaxBytes))
	}
	if c.HandshakeTimeout < 0 {
		errs = append(errs, fmt.Errorf("handshake_timeout %s: give zero (the default, %s) or more", c.HandshakeTimeout, DefaultHandshakeTimeout))
	}
	return errors.Join(errs...)
}

// checkPin checks one entry of Pins and returns its key normalised.
func checkPin(k, v string) (string, error) {
	host, port, err := net.SplitHostPort(k)
	if err != nil {
		return "", fmt.Errorf("the key is not host:port: give a host name and a port, such as example.com:443")
	}
	name, err := ParseDomain(host)
	if err != nil {
		return "", err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("port %q: give a port from 1 to 65535", port)
	}
	ap, err := netip.ParseAddrPort(v)
	if err != nil || ap.Port() == 0 {
		return "", fmt.Errorf("%q is not ip:port: give the address to dial and its port, such as 127.0.0.1:8443 or [::1]:8443", v)
	}
	if ap.Addr().IsUnspecified() {
		return "", fmt.Errorf("%q is the unspecified address: give the address of one machine", v)
	}
	return name + ":" + strconv.Itoa(p), nil
}

// Pin returns the address the operator pinned for host (as DecideName's
// Decision.Name, or any case and a trailing dot) and port, if any. The proxy
// asks before it resolves: a pinned destination is dialled as pinned,
// whatever its address class, without a DNS lookup. It is pure.
func (c *Config) Pin(host string, port int) (netip.AddrPort, bool) {
	if c == nil || len(c.Pins) == 0 {
		return netip.AddrPort{}, false
	}
	name := asciiLower(strings.TrimSuffix(host, "."))
	// A scan, not a lookup: the keys are written by hand, in any case. Pins
	// are few, and Validate refuses two keys for one destination.
	for k, v := range c.Pins {
		h, ps, err := net.SplitHostPort(k)
		if err != nil || asciiLower(strings.TrimSuffix(h, ".")) != name {
			continue
		}
		if p, err := strconv.Atoi(ps); err != nil || p != port {
			continue
		}
		ap, err := netip.ParseAddrPort(v)
		if err != nil {
			return netip.AddrPort{}, false // fail closed: Validate reports it
		}
		return ap, true
	}
	return netip.AddrPort{}, false
}

// ClassifyAddr is in addr.go, beside its table.

// neverAllowed are the classes AllowPrivateHosts does not open: they name
// this machine (loopback, and this-network and unspecified, which Linux
// connects to the local host), no single machine (multicast, broadcast), or
// are never a genuine answer (ipv4-mapped, see addrTable). Only a Pin, an
// exact ip:port the operator wrote, reaches them.
var neverAllowed = map[string]bool{
	ClassInvalid:   true,
	"loopback":     true,
	"this-network": true,
	"unspecified":  true,
	"multicast":    true,
	"broadcast":    true,
	"ipv4-mapped":  true,
	// IPv4-compatible addresses are deprecated (RFC 4291): no genuine
	// answer, like ipv4-mapped.
	"ipv4-compatible": true,
}

// registryClasses are the non-public classes a registry host may resolve to
// (Config.RegistryHosts): those of networks where a mirror or a gateway lives
// (private, shared and unique-local ranges, and the documentation and
// benchmarking ranges that some networks route to a gateway), not link-local
// or metadata (a cloud's instance metadata is the classic target of a
// request forged through a proxy), nor the forms that embed another
// address (nat64, 6to4, teredo).
var registryClasses = map[string]bool{
	"private":       true,
	"cgnat":         true,
	"ula":           true,
	"documentation": true,
	"benchmark":     true,
}

// DecideAddr decides one resolved address of host: public addresses pass,
// every other class is refused unless host is one of AllowPrivateHosts, or is
// a registry host (RegistryHosts) on an address of registryClasses, and the
// host's own addresses (hostAddrs) are refused always. It is pure.
//
// "Always" means whatever the class and even for AllowPrivateHosts: the
// host's own addresses reach the supervisor's own listeners (its API, its
// metrics, sshd), not the operator's internal services. A Pin, which the
// proxy checks before it resolves and so before it calls DecideAddr, is the
// only way there. A name the run may reach that resolves to a private
// address (DNS rebinding) is refused here, in every mode, unless it is one of
// the operator's registry hosts, whose answers the run does not choose.
func (c *Config) DecideAddr(host string, a netip.Addr, hostAddrs []netip.Addr) Decision {
	if !a.IsValid() {
		return Decision{Rule: ruleInvalidAddr}
	}
	bare := a.WithZone("").Unmap()
	for _, h := range hostAddrs {
		if h.WithZone("").Unmap() == bare {
			return Decision{Rule: ruleHostAddr}
		}
	}
	row := classify(a)
	if row.class == ClassPublic {
		return Decision{Allowed: true, Rule: ruleAddrPublic}
	}
	refused := Decision{Rule: fmt.Sprintf("%s%s (%s)", ruleAddrClass, row.class, row.where())}
	if c == nil || neverAllowed[row.class] {
		return refused
	}
	for _, d := range c.AllowPrivateHosts {
		if Matches(d, host) {
			// A form that embeds an IPv4 address (nat64, 6to4, teredo)
			// reaches it through a gateway or a tunnel: one that embeds
			// this host's address or a class no name opens is refused as
			// that address would be (the network audit's 64:ff9b::7f00:1
			// hairpins to loopback on a NAT64 host). Of a local-use NAT64
			// address's readings, only loopback and this host's count: its
			// other readings are mostly zeros (this-network), and the
			// prefix is meant for private destinations.
			sure, maybe := embeddedIPv4(bare, row.class)
			for i, e := range append(sure, maybe...) {
				class := classify(e).class
				if neverAllowed[class] && (i < len(sure) || class == "loopback") ||
					slices.ContainsFunc(hostAddrs, func(h netip.Addr) bool { return h.WithZone("").Unmap() == e }) {
					refused.Rule += " embedding " + e.String()
					return refused
				}
			}
			return Decision{Allowed: true, Rule: rulePrivateAllow + asciiLower(strings.TrimSuffix(d, "."))}
		}
	}
	if !c.RegistriesPublicOnly && registryClasses[row.class] {
		name := asciiLower(strings.TrimSuffix(host, "."))
		for _, r := range c.RegistryHosts {
			if name == asciiLower(strings.TrimSuffix(r, ".")) {
				return Decision{Allowed: true, Rule: ruleRegistryAddr + row.class}
			}
		}
	}
	return refused
}
