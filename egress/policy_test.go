package egress

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/api"
)

// The policies TestDecideName runs every host through.
var (
	anyPolicy        = Policy{Mode: api.NetworkAny}
	domainsPolicy    = Policy{Mode: api.NetworkDomains, Domains: []string{"example.com", "xn--bcher-kva.example", "kelvin.example"}}
	registriesPolicy = Policy{Mode: api.NetworkRegistries, Domains: []string{"pkgs.example.net"}}
)

func allow(rule string) Decision { return Decision{Allowed: true, Rule: rule} }
func deny(rule string) Decision  { return Decision{Rule: rule} }

// ipLiterals are IP addresses in every spelling a resolver, a browser or
// inet_aton accepts, as a DNS question, an SNI, a Host header or a CONNECT
// line may carry them.
var ipLiterals = []string{
	"127.0.0.1",
	"127.0.0.1.",
	"127.1",
	"127.0.1",
	"2130706433",   // 127.0.0.1 as one decimal number
	"0x7f000001",   // as one hex number
	"0X7F000001",   // upper case
	"0177.0.0.1",   // octal first byte
	"0x7f.1",       // hex and short
	"0x7f.0.0.1",   // hex first byte
	"017700000001", // as one octal number
	"127.000.000.001",
	"0x",        // 0 to the URL parser
	"1.2.3.4.5", // not an address, but it ends in a number
	"example.com.1",
	"example.0x1f",
	"10.0.0.1:80",
	"127.1:443",
	"169.254.169.254",
	"0.0.0.0",
	"::1",
	"[::1]",
	"[::1]:443",
	"::",
	"::ffff:127.0.0.1",
	"[::ffff:127.0.0.1]",
	"[::ffff:127.0.0.1]:443",
	"::ffff:7f00:1",
	"::127.0.0.1",
	"64:ff9b::7f00:1",
	"fe80::1%eth0",
	"[fe80::1%eth0]",
	"[fe80::1%25eth0]:443", // the zone %-escaped, as in a URL
	"2001:db8::1",
	"2001:DB8::1",
	"\uff11\uff12\uff17.\uff10.\uff10.\uff11", // fullwidth digits map to 127.0.0.1
	"127\u30020\u30020\u30021",                // ideographic full stops map to dots
}

// invalidHosts are no host name: DecideName refuses them in every mode.
var invalidHosts = []string{
	"",
	".",
	"..",
	"localhost",  // a single label is looked up in the host's search domains
	"localhost.", // even absolute
	"com",
	".example.com",
	"example..com",
	"example.com..",
	"-example.com",
	"example-.com",
	"api.-example.com",
	"my_host.example.com",
	"_dmarc.example.com",
	"_http._tcp.example.com",
	"exa mple.com",
	" example.com",
	"example.com ",
	"example.com\n",
	"example.com\x00",
	"example.com\x00.evil.net",
	"exa\\.mple.com", // a DNS presentation escape
	"example.com:443",
	"example.com:",
	"[example.com]",
	"[::1",
	"user@example.com",
	"example.com/path",
	"http://example.com",
	"*.example.com",
	"ex!ample.com",
	"%65xample.com",
	"xn--zzzzzz.example", // not punycode
	"xn--a.example",
	"xn--.example",
	"xn--ss-.com",
	"a\u200db.example", // a joiner out of context
	strings.Repeat("a", 64) + ".com",
	long(254),
	long(253) + "..",
	strings.Repeat("a.", 2000) + "com", // far over the input bound
	"\xff\xfe.example",                 // not UTF-8
	"\u2136A.A",                        // mixes directions once mapped: found by FuzzDecideName
}

// nameCase is one row of TestDecideName.
type nameCase struct {
	name string
	host string
	port int // 0 means 443, unless portZero
	// portZero asks for port 0.
	portZero bool
	// wantName is the Decision's Name, except for ip literals and invalid
	// hosts, which have none.
	wantName string
	// The decisions of anyPolicy, domainsPolicy and registriesPolicy.
	any, domains, registries Decision
}

func TestDecideName(t *testing.T) {
	tests := []nameCase{
		{name: "listed domain", host: "example.com", wantName: "example.com",
			any: allow("mode any"), domains: allow("domain example.com"), registries: deny("not a registry host")},
		{name: "subdomain", host: "api.example.com", wantName: "api.example.com",
			any: allow("mode any"), domains: allow("domain example.com"), registries: deny("not a registry host")},
		{name: "deep subdomain", host: "a.b-c.d1.example.com", wantName: "a.b-c.d1.example.com",
			any: allow("mode any"), domains: allow("domain example.com"), registries: deny("not a registry host")},
		{name: "upper case", host: "API.Example.COM", wantName: "api.example.com",
			any: allow("mode any"), domains: allow("domain example.com"), registries: deny("not a registry host")},
		{name: "trailing dot", host: "example.com.", wantName: "example.com",
			any: allow("mode any"), domains: allow("domain example.com"), registries: deny("not a registry host")},
		{name: "upper case and trailing dot", host: "WWW.EXAMPLE.COM.", wantName: "www.example.com",
			any: allow("mode any"), domains: allow("domain example.com"), registries: deny("not a registry host")},
		{name: "ideographic full stop", host: "api\u3002example\u3002com", wantName: "api.example.com",
			any: allow("mode any"), domains: allow("domain example.com"), registries: deny("not a registry host")},
		{name: "fullwidth letters", host: "\uff45xample.com", wantName: "example.com",
			any: allow("mode any"), domains: allow("domain example.com"), registries: deny("not a registry host")},
		{name: "hyphen in a suffix is not a subdomain", host: "evil-example.com", wantName: "evil-example.com",
			any: allow("mode any"), domains: deny("not in the run's domains"), registries: deny("not a registry host")},
		{name: "suffix without a dot", host: "badexample.com", wantName: "badexample.com",
			any: allow("mode any"), domains: deny("not in the run's domains"), registries: deny("not a registry host")},
		{name: "listed domain as a prefix", host: "example.com.evil.net", wantName: "example.com.evil.net",
			any: allow("mode any"), domains: deny("not in the run's domains"), registries: deny("not a registry host")},
		{name: "listed domain as a label", host: "example.com-evil.net", wantName: "example.com-evil.net",
			any: allow("mode any"), domains: deny("not in the run's domains"), registries: deny("not a registry host")},
		{name: "parent of a listed domain", host: "net", wantName: "",
			any: deny("invalid host name"), domains: deny("invalid host name"), registries: deny("invalid host name")},
		{name: "other top-level domain", host: "example.co", wantName: "example.co",
			any: allow("mode any"), domains: deny("not in the run's domains"), registries: deny("not a registry host")},
		{name: "IDN in Unicode", host: "bücher.example", wantName: "xn--bcher-kva.example",
			any: allow("mode any"), domains: allow("domain xn--bcher-kva.example"), registries: deny("not a registry host")},
		{name: "IDN in Unicode, upper case", host: "BÜCHER.Example.", wantName: "xn--bcher-kva.example",
			any: allow("mode any"), domains: allow("domain xn--bcher-kva.example"), registries: deny("not a registry host")},
		{name: "IDN in punycode", host: "xn--bcher-kva.example", wantName: "xn--bcher-kva.example",
			any: allow("mode any"), domains: allow("domain xn--bcher-kva.example"), registries: deny("not a registry host")},
		{name: "IDN in punycode, upper case", host: "XN--BCHER-KVA.EXAMPLE", wantName: "xn--bcher-kva.example",
			any: allow("mode any"), domains: allow("domain xn--bcher-kva.example"), registries: deny("not a registry host")},
		{name: "IDN subdomain", host: "shop.bücher.example", wantName: "shop.xn--bcher-kva.example",
			any: allow("mode any"), domains: allow("domain xn--bcher-kva.example"), registries: deny("not a registry host")},
		{name: "IDN lookalike", host: "bucher.example", wantName: "bucher.example",
			any: allow("mode any"), domains: deny("not in the run's domains"), registries: deny("not a registry host")},
		{name: "Cyrillic lookalike of a listed domain", host: "ex\u0430mple.com", wantName: "xn--exmple-4nf.com",
			any: allow("mode any"), domains: deny("not in the run's domains"), registries: deny("not a registry host")},
		// UTS 46 maps the Kelvin sign to "k", as browsers do; the proxy resolves
		// the mapped name, so the run reaches kelvin.example and nothing else.
		{name: "Kelvin sign maps to k", host: "\u212aelvin.example", wantName: "kelvin.example",
			any: allow("mode any"), domains: allow("domain kelvin.example"), registries: deny("not a registry host")},
		{name: "eszett is kept, not mapped to ss", host: "straße.example", wantName: "xn--strae-oqa.example",
			any: allow("mode any"), domains: deny("not in the run's domains"), registries: deny("not a registry host")},
		{name: "soft hyphen is removed", host: "exam\u00adple.com", wantName: "example.com",
			any: allow("mode any"), domains: allow("domain example.com"), registries: deny("not a registry host")},
		{name: "double hyphen inside a label", host: "r3---sn-abc.example.com", wantName: "r3---sn-abc.example.com",
			any: allow("mode any"), domains: allow("domain example.com"), registries: deny("not a registry host")},
		{name: "digits in labels", host: "0x7f.example.com", wantName: "0x7f.example.com",
			any: allow("mode any"), domains: allow("domain example.com"), registries: deny("not a registry host")},
		{name: "registry host", host: "pkgs.example.net", wantName: "pkgs.example.net",
			any: allow("mode any"), domains: deny("not in the run's domains"), registries: allow("registry pkgs.example.net")},
		{name: "registry subdomain", host: "files.pkgs.example.net", wantName: "files.pkgs.example.net",
			any: allow("mode any"), domains: deny("not in the run's domains"), registries: deny("not a registry host")},
		{name: "registry host, other case, trailing dot", host: "PKGS.example.NET.", wantName: "pkgs.example.net",
			any: allow("mode any"), domains: deny("not in the run's domains"), registries: allow("registry pkgs.example.net")},
		{name: "registry parent", host: "example.net", wantName: "example.net",
			any: allow("mode any"), domains: deny("not in the run's domains"), registries: deny("not a registry host")},
		{name: "label of 63", host: strings.Repeat("a", 63) + ".example.com", wantName: strings.Repeat("a", 63) + ".example.com",
			any: allow("mode any"), domains: allow("domain example.com"), registries: deny("not a registry host")},
		{name: "name of 253", host: long(253), wantName: long(253),
			any: allow("mode any"), domains: deny("not in the run's domains"), registries: deny("not a registry host")},
		{name: "name of 253 and a dot", host: long(253) + ".", wantName: long(253),
			any: allow("mode any"), domains: deny("not in the run's domains"), registries: deny("not a registry host")},

		{name: "port 1", host: "example.com", port: 1, wantName: "example.com",
			any: allow("mode any"), domains: allow("domain example.com"), registries: deny("not a registry host")},
		{name: "port 80", host: "example.com", port: 80, wantName: "example.com",
			any: allow("mode any"), domains: allow("domain example.com"), registries: deny("not a registry host")},
		{name: "port 22", host: "example.com", port: 22, wantName: "example.com",
			any: allow("mode any"), domains: allow("domain example.com"), registries: deny("not a registry host")},
		{name: "port 65535", host: "example.com", port: 65535, wantName: "example.com",
			any: allow("mode any"), domains: allow("domain example.com"), registries: deny("not a registry host")},
		{name: "port 0", host: "example.com", portZero: true, wantName: "example.com",
			any: deny("invalid port"), domains: deny("invalid port"), registries: deny("invalid port")},
		{name: "port 65536", host: "example.com", port: 65536, wantName: "example.com",
			any: deny("invalid port"), domains: deny("invalid port"), registries: deny("invalid port")},
		{name: "negative port", host: "example.com", port: -443, wantName: "example.com",
			any: deny("invalid port"), domains: deny("invalid port"), registries: deny("invalid port")},
		{name: "ip literal and port 0", host: "127.0.0.1", portZero: true,
			any: deny(ruleIPLiteral), domains: deny(ruleIPLiteral), registries: deny(ruleIPLiteral)},
		// RFC 6761: never looked up outside, in any mode, on any path.
		{name: "under localhost", host: "secret.localhost",
			any: deny(ruleLoopbackName), domains: deny(ruleLoopbackName), registries: deny(ruleLoopbackName)},
		{name: "under localhost, upper case and a dot", host: "A.LocalHost.",
			any: deny(ruleLoopbackName), domains: deny(ruleLoopbackName), registries: deny(ruleLoopbackName)},
	}
	for _, h := range ipLiterals {
		tests = append(tests, nameCase{name: "ip literal " + h, host: h, any: deny(ruleIPLiteral), domains: deny(ruleIPLiteral), registries: deny(ruleIPLiteral)})
	}
	for _, h := range invalidHosts {
		tests = append(tests, nameCase{name: "invalid " + h, host: h, any: deny("invalid host name"), domains: deny("invalid host name"), registries: deny("invalid host name")})
	}
	for _, tt := range tests {
		port := tt.port
		if port == 0 && !tt.portZero {
			port = 443
		}
		for _, m := range []struct {
			p    Policy
			want Decision
		}{{anyPolicy, tt.any}, {domainsPolicy, tt.domains}, {registriesPolicy, tt.registries}} {
			t.Run(m.p.Mode+"/"+tt.name, func(t *testing.T) {
				got := m.p.DecideName(tt.host, port)
				want := m.want
				if want.Rule != ruleIPLiteral && want.Rule != ruleInvalidHost && want.Rule != ruleLoopbackName {
					want.Name = tt.wantName
				}
				if got != want {
					t.Errorf("DecideName(%q, %d) in mode %s: got %+v, want %+v", tt.host, port, m.p.Mode, got, want)
				}
			})
		}
	}
}

// TestDecideNameRegistryPorts: mode registries with Ports admits its hosts
// on those ports alone (a mirror's SSH or database is not the registry); with
// none, on every port.
func TestDecideNameRegistryPorts(t *testing.T) {
	p := Policy{Mode: api.NetworkRegistries, Domains: []string{"pkgs.example.net"}, Ports: []int{80, 443, 8443}}
	for _, tt := range []struct {
		host string
		port int
		want Decision
	}{
		{"pkgs.example.net", 443, Decision{Allowed: true, Rule: "registry pkgs.example.net", Name: "pkgs.example.net"}},
		{"pkgs.example.net", 8443, Decision{Allowed: true, Rule: "registry pkgs.example.net", Name: "pkgs.example.net"}},
		{"pkgs.example.net", 22, Decision{Rule: "not a registry port", Name: "pkgs.example.net"}},
		{"mirror.pkgs.example.net", 443, Decision{Rule: "not a registry host", Name: "mirror.pkgs.example.net"}},
		{"other.example.net", 443, Decision{Rule: "not a registry host", Name: "other.example.net"}},
	} {
		if got := p.DecideName(tt.host, tt.port); got != tt.want {
			t.Errorf("DecideName(%s, %d): got %+v, want %+v", tt.host, tt.port, got, tt.want)
		}
	}
	p.Ports = nil
	if got := p.DecideName("pkgs.example.net", 22); !got.Allowed {
		t.Errorf("without Ports: got %+v, want every port admitted", got)
	}
	// Domains is not limited by Ports.
	d := Policy{Mode: api.NetworkDomains, Domains: []string{"pkgs.example.net"}, Ports: []int{443}}
	if got := d.DecideName("pkgs.example.net", 22); !got.Allowed {
		t.Errorf("mode domains: got %+v, want every port admitted", got)
	}
}

// TestDecideNameModes: mode none and an unknown mode admit nothing; a mode
// with no domains admits nothing either.
func TestDecideNameModes(t *testing.T) {
	tests := []struct {
		name string
		p    Policy
		want Decision
	}{
		{name: "none", p: Policy{Mode: api.NetworkNone, Domains: []string{"example.com"}}, want: deny("mode none")},
		{name: "empty", p: Policy{Domains: []string{"example.com"}}, want: deny("unknown mode")},
		{name: "unknown", p: Policy{Mode: "all", Domains: []string{"example.com"}}, want: deny("unknown mode")},
		{name: "case is not folded", p: Policy{Mode: "ANY"}, want: deny("unknown mode")},
		{name: "domains without domains", p: Policy{Mode: api.NetworkDomains}, want: Decision{Rule: "not in the run's domains", Name: "example.com"}},
		{name: "registries without hosts", p: Policy{Mode: api.NetworkRegistries}, want: Decision{Rule: "not a registry host", Name: "example.com"}},
		{name: "domain entry with a trailing dot", p: Policy{Mode: api.NetworkDomains, Domains: []string{"example.com."}}, want: Decision{Allowed: true, Rule: "domain example.com.", Name: "example.com"}},
		{name: "empty domain entry", p: Policy{Mode: api.NetworkDomains, Domains: []string{""}}, want: Decision{Rule: "not in the run's domains", Name: "example.com"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.DecideName("example.com", 443); got != tt.want {
				t.Errorf("DecideName(example.com, 443) with %+v: got %+v, want %+v", tt.p, got, tt.want)
			}
		})
	}
}

func TestNormalizeHost(t *testing.T) {
	tests := []struct {
		name    string
		host    string
		want    string
		wantErr error
	}{
		{name: "plain", host: "example.com", want: "example.com"},
		{name: "case and dot", host: "Example.COM.", want: "example.com"},
		{name: "IDN", host: "Bücher.example", want: "xn--bcher-kva.example"},
		{name: "emoji", host: "\U0001F600.example", want: "xn--e28h.example"},
		{name: "ip literal", host: "0x7f.1", wantErr: ErrIPLiteral},
		{name: "ipv6 literal", host: "[::1]:80", wantErr: ErrIPLiteral},
		{name: "invalid", host: "a_b.example", wantErr: ErrInvalidHost},
		{name: "single label", host: "intranet", wantErr: ErrInvalidHost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NormalizeHost(tt.host)
			if got != tt.want || !errors.Is(err, tt.wantErr) {
				t.Errorf("NormalizeHost(%q): got %q, %v, want %q, %v", tt.host, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestDecideAddr(t *testing.T) {
	cfg := &Config{AllowPrivateHosts: []string{"internal.example", "Corp.Example."}}
	// This host's addresses, as the proxy lists them from its interfaces: a
	// public one, a private one and an IPv6 link-local one with its zone.
	hostAddrs := []netip.Addr{
		netip.MustParseAddr("93.184.215.14"),
		netip.MustParseAddr("10.1.1.1"),
		netip.MustParseAddr("2606:2800:21f:cb07::1"),
		netip.MustParseAddr("fe80::1%eth0"),
	}
	const privateAllowed = "private address allowed by the operator for "
	tests := []struct {
		name string
		// noConfig asks for a nil *Config.
		noConfig bool
		host     string
		addr     string // "" is the zero Addr
		want     Decision
	}{
		{name: "public", host: "api.example.com", addr: "93.184.215.34", want: allow("address public")},
		{name: "public IPv6", host: "api.example.com", addr: "2606:2800:21f:cb07::2", want: allow("address public")},
		{name: "public for an allowed private host", host: "internal.example", addr: "93.184.215.34", want: allow("address public")},
		{name: "nil config, public", noConfig: true, host: "api.example.com", addr: "93.184.215.34", want: allow("address public")},

		// DNS rebinding: a name the run may reach answers with a private address.
		{name: "rebinding to private", host: "api.example.com", addr: "10.0.0.1", want: deny("address class private (10.0.0.0/8)")},
		{name: "rebinding to 172.16", host: "api.example.com", addr: "172.31.255.255", want: deny("address class private (172.16.0.0/12)")},
		{name: "rebinding to 192.168", host: "api.example.com", addr: "192.168.1.1", want: deny("address class private (192.168.0.0/16)")},
		{name: "rebinding to loopback", host: "api.example.com", addr: "127.0.0.1", want: deny("address class loopback (127.0.0.0/8)")},
		{name: "rebinding to IPv6 loopback", host: "api.example.com", addr: "::1", want: deny("address class loopback (::1/128)")},
		{name: "rebinding to metadata", host: "api.example.com", addr: "169.254.169.254", want: deny("address class metadata (169.254.169.254/32)")},
		{name: "rebinding to IPv6 metadata", host: "api.example.com", addr: "fd00:ec2::254", want: deny("address class metadata (fd00:ec2::254/128)")},
		{name: "rebinding to cgnat", host: "api.example.com", addr: "100.64.0.1", want: deny("address class cgnat (100.64.0.0/10)")},
		{name: "rebinding to ula", host: "api.example.com", addr: "fd12:3456::1", want: deny("address class ula (fc00::/7)")},
		{name: "rebinding to mapped loopback", host: "api.example.com", addr: "::ffff:127.0.0.1", want: deny("address class ipv4-mapped (::ffff:0.0.0.0/96)")},
		{name: "mapped public", host: "api.example.com", addr: "::ffff:93.184.215.34", want: deny("address class ipv4-mapped (::ffff:0.0.0.0/96)")},
		{name: "rebinding to nat64", host: "api.example.com", addr: "64:ff9b::a00:1", want: deny("address class nat64 (64:ff9b::/96)")},
		{name: "rebinding to 6to4", host: "api.example.com", addr: "2002:7f00:1::1", want: deny("address class 6to4 (2002::/16)")},
		{name: "rebinding to teredo", host: "api.example.com", addr: "2001:0:4136:e378:8000:63bf:3fff:fdd2", want: deny("address class teredo (2001::/32)")},
		{name: "rebinding to this-network", host: "api.example.com", addr: "0.0.0.0", want: deny("address class this-network (0.0.0.0/8)")},
		{name: "rebinding to unspecified", host: "api.example.com", addr: "::", want: deny("address class unspecified (::/128)")},
		{name: "unallocated IPv6", host: "api.example.com", addr: "4000::1", want: deny("address class reserved (outside 2000::/3)")},
		{name: "nil config, private", noConfig: true, host: "internal.example", addr: "10.0.0.1", want: deny("address class private (10.0.0.0/8)")},
		{name: "invalid address", host: "api.example.com", addr: "", want: deny("invalid address")},

		// The operator's internal services.
		{name: "allowed private host", host: "internal.example", addr: "10.0.0.1", want: allow(privateAllowed + "internal.example")},
		{name: "allowed private host's subdomain", host: "db.internal.example", addr: "172.16.0.5", want: allow(privateAllowed + "internal.example")},
		{name: "allowed private host, any case and a dot", host: "DB.Internal.Example.", addr: "192.168.0.5", want: allow(privateAllowed + "internal.example")},
		{name: "entry written in upper case", host: "git.corp.example", addr: "10.2.0.1", want: allow(privateAllowed + "corp.example")},
		{name: "allowed private host, ula", host: "internal.example", addr: "fd00::5", want: allow(privateAllowed + "internal.example")},
		{name: "allowed private host, cgnat", host: "internal.example", addr: "100.100.0.1", want: allow(privateAllowed + "internal.example")},
		{name: "allowed private host, link-local", host: "internal.example", addr: "169.254.10.1", want: allow(privateAllowed + "internal.example")},
		{name: "allowed private host, nat64", host: "internal.example", addr: "64:ff9b::a00:1", want: allow(privateAllowed + "internal.example")},
		{name: "not an allowed private host: hyphen", host: "evil-internal.example", addr: "10.0.0.1", want: deny("address class private (10.0.0.0/8)")},
		{name: "not an allowed private host: prefix", host: "internal.example.evil.net", addr: "10.0.0.1", want: deny("address class private (10.0.0.0/8)")},
		{name: "not an allowed private host: parent", host: "example", addr: "10.0.0.1", want: deny("address class private (10.0.0.0/8)")},
		// What names this machine or no single machine stays refused: a Pin
		// reaches it.
		{name: "allowed private host, loopback", host: "internal.example", addr: "127.0.0.1", want: deny("address class loopback (127.0.0.0/8)")},
		{name: "allowed private host, IPv6 loopback", host: "internal.example", addr: "::1", want: deny("address class loopback (::1/128)")},
		{name: "allowed private host, this-network", host: "internal.example", addr: "0.0.0.0", want: deny("address class this-network (0.0.0.0/8)")},
		{name: "allowed private host, unspecified", host: "internal.example", addr: "::", want: deny("address class unspecified (::/128)")},
		{name: "allowed private host, multicast", host: "internal.example", addr: "224.0.0.1", want: deny("address class multicast (224.0.0.0/4)")},
		{name: "allowed private host, IPv6 multicast", host: "internal.example", addr: "ff02::1", want: deny("address class multicast (ff00::/8)")},
		{name: "allowed private host, broadcast", host: "internal.example", addr: "255.255.255.255", want: deny("address class broadcast (255.255.255.255/32)")},
		{name: "allowed private host, mapped", host: "internal.example", addr: "::ffff:10.0.0.1", want: deny("address class ipv4-mapped (::ffff:0.0.0.0/96)")},
		{name: "allowed private host, ipv4-compatible", host: "internal.example", addr: "::a00:1", want: deny("address class ipv4-compatible (::/96)")},
		// The forms that embed an IPv4 address are refused where it is one
		// no name opens, or this host's (the network audit's NAT64 of
		// loopback, allowed before).
		{name: "allowed private host, nat64 of loopback", host: "internal.example", addr: "64:ff9b::7f00:1", want: deny("address class nat64 (64:ff9b::/96) embedding 127.0.0.1")},
		{name: "allowed private host, nat64 of an own address", host: "internal.example", addr: "64:ff9b::a01:101", want: deny("address class nat64 (64:ff9b::/96) embedding 10.1.1.1")},
		{name: "allowed private host, local-use nat64 of loopback", host: "internal.example", addr: "64:ff9b:1:aaaa:bbbb:cc00:7f00:1", want: deny("address class nat64 (64:ff9b:1::/48) embedding 127.0.0.1")},
		{name: "allowed private host, local-use nat64 /48 of loopback", host: "internal.example", addr: "64:ff9b:1:7f00:0:100::", want: deny("address class nat64 (64:ff9b:1::/48) embedding 127.0.0.1")},
		{name: "allowed private host, local-use nat64 of a private address", host: "internal.example", addr: "64:ff9b:1:aaaa:bbbb:cc00:a00:1", want: allow(privateAllowed + "internal.example")},
		// Its other readings, mostly zeros, are not refused for their class
		// (the review: every such address had been, as this-network).
		{name: "allowed private host, local-use nat64 /96 of a private address", host: "internal.example", addr: "64:ff9b:1::a00:1", want: allow(privateAllowed + "internal.example")},
		{name: "allowed private host, local-use nat64 /48 of a private address", host: "internal.example", addr: "64:ff9b:1:a00:0:100::", want: allow(privateAllowed + "internal.example")},
		{name: "allowed private host, local-use nat64 /64 of a private address", host: "internal.example", addr: "64:ff9b:1:0:a:0:100:0", want: allow(privateAllowed + "internal.example")},
		{name: "allowed private host, 6to4 of loopback", host: "internal.example", addr: "2002:7f00:1::1", want: deny("address class 6to4 (2002::/16) embedding 127.0.0.1")},
		{name: "allowed private host, 6to4 of a private address", host: "internal.example", addr: "2002:a00:1::1", want: allow(privateAllowed + "internal.example")},
		{name: "allowed private host, teredo server of an own address", host: "internal.example", addr: "2001:0:a01:101::1", want: deny("address class teredo (2001::/32) embedding 10.1.1.1")},
		{name: "allowed private host, teredo client of loopback", host: "internal.example", addr: "2001:0:a00:1:8000:63bf:80ff:fffe", want: deny("address class teredo (2001::/32) embedding 127.0.0.1")},

		// This host's own addresses: refused always.
		{name: "own public address", host: "api.example.com", addr: "93.184.215.14", want: deny("address of this host")},
		{name: "own public IPv6 address", host: "api.example.com", addr: "2606:2800:21f:cb07::1", want: deny("address of this host")},
		{name: "own private address for an allowed private host", host: "internal.example", addr: "10.1.1.1", want: deny("address of this host")},
		{name: "own address, mapped", host: "internal.example", addr: "::ffff:10.1.1.1", want: deny("address of this host")},
		{name: "own link-local address without its zone", host: "internal.example", addr: "fe80::1", want: deny("address of this host")},
		{name: "own link-local address, other zone", host: "internal.example", addr: "fe80::1%eth1", want: deny("address of this host")},
		{name: "another link-local address", host: "internal.example", addr: "fe80::2%eth0", want: allow(privateAllowed + "internal.example")},
		{name: "neighbour of an own address", host: "api.example.com", addr: "93.184.215.15", want: allow("address public")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cfg
			if tt.noConfig {
				c = nil
			}
			var a netip.Addr
			if tt.addr != "" {
				a = netip.MustParseAddr(tt.addr)
			}
			if got := c.DecideAddr(tt.host, a, hostAddrs); got != tt.want {
				t.Errorf("DecideAddr(%q, %s): got %+v, want %+v", tt.host, tt.addr, got, tt.want)
			}
		})
	}
}

// TestDecideAddrRefusesEveryClass: without AllowPrivateHosts, every row of
// the address table but the public ones is refused, at both ends of its
// prefix.
func TestDecideAddrRefusesEveryClass(t *testing.T) {
	cfg := &Config{}
	for _, row := range addrTable {
		if row.class == ClassPublic {
			continue
		}
		for _, a := range []netip.Addr{row.prefix.Masked().Addr(), lastAddr(row.prefix)} {
			t.Run(row.prefix.String()+"/"+a.String(), func(t *testing.T) {
				if d := cfg.DecideAddr("api.example.com", a, nil); d.Allowed {
					t.Errorf("DecideAddr(%s): got %+v, want refused", a, d)
				}
			})
		}
	}
}

// TestDecideAddrRegistryHosts: a registry host (Config.RegistryHosts) may
// resolve to a private, shared, unique-local, documentation or benchmarking
// address, as a host's network routes its registry to a mirror or a gateway
// there; not to link-local, metadata, an embedding form or this machine, and
// not a subdomain or another name; and, with RegistriesPublicOnly, to none.
func TestDecideAddrRegistryHosts(t *testing.T) {
	cfg := &Config{RegistryHosts: []string{"registry.test", "files.test"}}
	hostAddrs := []netip.Addr{netip.MustParseAddr("10.1.1.1")}
	const reg = "a registry host's address, of class "
	tests := []struct {
		name, host, addr string
		want             Decision
	}{
		{"private", "registry.test", "10.0.0.7", allow(reg + "private")},
		{"documentation", "registry.test", "203.0.113.9", allow(reg + "documentation")},
		{"documentation IPv6", "files.test", "2001:db8::9", allow(reg + "documentation")},
		{"cgnat", "files.test", "100.64.3.3", allow(reg + "cgnat")},
		{"ula", "registry.test", "fd12::3", allow(reg + "ula")},
		{"benchmark", "registry.test", "198.18.0.9", allow(reg + "benchmark")},
		{"any case and a dot", "Registry.TEST.", "192.168.4.4", allow(reg + "private")},
		{"public", "registry.test", "93.184.215.34", allow("address public")},
		{"link-local", "registry.test", "169.254.10.1", deny("address class link-local (169.254.0.0/16)")},
		{"metadata", "registry.test", "169.254.169.254", deny("address class metadata (169.254.169.254/32)")},
		{"nat64", "registry.test", "64:ff9b::a00:1", deny("address class nat64 (64:ff9b::/96)")},
		{"6to4", "registry.test", "2002:7f00:1::1", deny("address class 6to4 (2002::/16)")},
		{"reserved", "registry.test", "240.0.0.1", deny("address class reserved (240.0.0.0/4)")},
		{"loopback", "registry.test", "127.0.0.1", deny("address class loopback (127.0.0.0/8)")},
		{"this host's", "registry.test", "10.1.1.1", deny("address of this host")},
		{"a subdomain", "mirror.registry.test", "10.0.0.7", deny("address class private (10.0.0.0/8)")},
		{"another name", "api.example.com", "203.0.113.9", deny("address class documentation (203.0.113.0/24)")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cfg.DecideAddr(tt.host, netip.MustParseAddr(tt.addr), hostAddrs); got != tt.want {
				t.Errorf("DecideAddr(%q, %s): got %+v, want %+v", tt.host, tt.addr, got, tt.want)
			}
		})
	}
	only := *cfg
	only.RegistriesPublicOnly = true
	if got := only.DecideAddr("registry.test", netip.MustParseAddr("203.0.113.9"), nil); got.Allowed {
		t.Errorf("with RegistriesPublicOnly: got %+v, want the documentation address refused", got)
	}
	only.AllowPrivateHosts = []string{"registry.test"}
	if got := only.DecideAddr("registry.test", netip.MustParseAddr("203.0.113.9"), nil); !got.Allowed {
		t.Errorf("with RegistriesPublicOnly and the host in AllowPrivateHosts: got %+v, want it allowed", got)
	}
}

func TestPin(t *testing.T) {
	cfg := &Config{Pins: map[string]string{
		"Mirror.Example.com:443": "127.0.0.1:8443",
		"example.org.:80":        "[::1]:8080",
		"broken.example:443":     "not an address",
	}}
	tests := []struct {
		name   string
		cfg    *Config
		host   string
		port   int
		want   string // "" when not pinned
		wantOK bool
	}{
		{name: "pinned", host: "mirror.example.com", port: 443, want: "127.0.0.1:8443", wantOK: true},
		{name: "any case and a trailing dot", host: "MIRROR.example.COM.", port: 443, want: "127.0.0.1:8443", wantOK: true},
		{name: "key with a trailing dot", host: "example.org", port: 80, want: "[::1]:8080", wantOK: true},
		{name: "other port", host: "mirror.example.com", port: 80},
		{name: "subdomain is not pinned", host: "www.mirror.example.com", port: 443},
		{name: "parent is not pinned", host: "example.com", port: 443},
		{name: "unpinned", host: "api.example.com", port: 443},
		{name: "bad value fails closed", host: "broken.example", port: 443},
		{name: "nil config", host: "mirror.example.com", port: 443, cfg: &Config{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cfg
			if tt.cfg != nil {
				c = tt.cfg
			}
			got, ok := c.Pin(tt.host, tt.port)
			var want netip.AddrPort
			if tt.want != "" {
				want = netip.MustParseAddrPort(tt.want)
			}
			if got != want || ok != tt.wantOK {
				t.Errorf("Pin(%q, %d): got %v, %v, want %v, %v", tt.host, tt.port, got, ok, want, tt.wantOK)
			}
		})
	}
	var nilCfg *Config
	if got, ok := nilCfg.Pin("mirror.example.com", 443); ok {
		t.Errorf("Pin on a nil Config: got %v, true, want false", got)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		// Pieces of the error, in order; none when valid.
		want []string
	}{
		{name: "zero", cfg: Config{}},
		{name: "defaults", cfg: Config{}.WithDefaults()},
		{name: "full", cfg: Config{
			Pins:              map[string]string{"mirror.example.com:443": "127.0.0.1:8443", "Example.org.:80": "[::1]:8080", "a.example:1": "[fe80::1%eth0]:65535"},
			AllowPrivateHosts: []string{"internal.example", "Corp.Example."},
			Resolver:          "192.0.2.53:53",
			MaxConns:          1, ConnsPerSecond: 0.5, MaxBytes: 1, HandshakeTimeout: time.Millisecond,
		}},
		{name: "IPv6 resolver", cfg: Config{Resolver: "[2001:db8::53]:53"}},

		{name: "pin without a port", cfg: Config{Pins: map[string]string{"example.com": "127.0.0.1:80"}}, want: []string{`pins["example.com"]: the key is not host:port`}},
		{name: "pin to an ip literal", cfg: Config{Pins: map[string]string{"127.0.0.1:80": "127.0.0.1:80"}}, want: []string{`pins["127.0.0.1:80"]:`, "is an IP address"}},
		{name: "pin of a wildcard", cfg: Config{Pins: map[string]string{"*.example.com:80": "127.0.0.1:80"}}, want: []string{`pins["*.example.com:80"]:`, "wildcard"}},
		{name: "pin of a single label", cfg: Config{Pins: map[string]string{"localhost:80": "127.0.0.1:80"}}, want: []string{"not a full host name"}},
		{name: "pin of port 0", cfg: Config{Pins: map[string]string{"example.com:0": "127.0.0.1:80"}}, want: []string{`port "0": give a port from 1 to 65535`}},
		{name: "pin of port 65536", cfg: Config{Pins: map[string]string{"example.com:65536": "127.0.0.1:80"}}, want: []string{`port "65536"`}},
		{name: "pin of a named port", cfg: Config{Pins: map[string]string{"example.com:https": "127.0.0.1:80"}}, want: []string{`port "https"`}},
		{name: "pin to a name", cfg: Config{Pins: map[string]string{"example.com:443": "localhost:443"}}, want: []string{`"localhost:443" is not ip:port`}},
		{name: "pin to an address without a port", cfg: Config{Pins: map[string]string{"example.com:443": "127.0.0.1"}}, want: []string{`"127.0.0.1" is not ip:port`}},
		{name: "pin to port 0", cfg: Config{Pins: map[string]string{"example.com:443": "127.0.0.1:0"}}, want: []string{"is not ip:port"}},
		{name: "pin to the unspecified address", cfg: Config{Pins: map[string]string{"example.com:443": "0.0.0.0:443"}}, want: []string{"unspecified address"}},
		{name: "two pins of one destination", cfg: Config{Pins: map[string]string{"example.com:443": "127.0.0.1:1", "Example.com.:443": "127.0.0.1:2"}}, want: []string{`pins["example.com:443"]: the same destination as pins["Example.com.:443"]`}},
		{name: "allowed private host is an address", cfg: Config{AllowPrivateHosts: []string{"example.com", "10.0.0.1"}}, want: []string{"allow_private_hosts[1]:", "is an IP address"}},
		{name: "allowed private host is a wildcard", cfg: Config{AllowPrivateHosts: []string{"*.internal.example"}}, want: []string{"allow_private_hosts[0]:", "write internal.example"}},
		{name: "allowed private host is empty", cfg: Config{AllowPrivateHosts: []string{""}}, want: []string{"allow_private_hosts[0]:", "empty"}},
		{name: "resolver without a port", cfg: Config{Resolver: "192.0.2.53"}, want: []string{`resolver "192.0.2.53": give an IP address and a port`}},
		{name: "resolver is a name", cfg: Config{Resolver: "dns.example:53"}, want: []string{`resolver "dns.example:53"`}},
		{name: "resolver port 0", cfg: Config{Resolver: "192.0.2.53:0"}, want: []string{`resolver "192.0.2.53:0"`}},
		{name: "resolver unspecified", cfg: Config{Resolver: "0.0.0.0:53"}, want: []string{`resolver "0.0.0.0:53"`}},
		{name: "negative max_conns", cfg: Config{MaxConns: -1}, want: []string{"max_conns -1: give zero (the default, 64) or more"}},
		{name: "negative conns_per_second", cfg: Config{ConnsPerSecond: -1}, want: []string{"conns_per_second -1: give a finite number, zero (the default, 50) or more"}},
		{name: "NaN conns_per_second", cfg: Config{ConnsPerSecond: math.NaN()}, want: []string{"conns_per_second NaN"}},
		{name: "infinite conns_per_second", cfg: Config{ConnsPerSecond: math.Inf(1)}, want: []string{"conns_per_second +Inf"}},
		{name: "negative max_bytes", cfg: Config{MaxBytes: -1}, want: []string{"max_bytes -1: give zero (the default, 1073741824) or more"}},
		{name: "negative handshake_timeout", cfg: Config{HandshakeTimeout: -time.Second}, want: []string{"handshake_timeout -1s: give zero (the default, 10s) or more"}},
		{name: "every problem at once", cfg: Config{
			Pins:              map[string]string{"b.example:1": "x", "a.example:1": "y"},
			AllowPrivateHosts: []string{"a b"},
			Resolver:          "x",
			MaxConns:          -1, ConnsPerSecond: -1, MaxBytes: -1, HandshakeTimeout: -1,
		}, want: []string{`pins["a.example:1"]`, `pins["b.example:1"]`, "allow_private_hosts[0]", "resolver", "max_conns", "conns_per_second", "max_bytes", "handshake_timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Errorf("Validate: got %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: got no error, want one with %q", tt.want)
			}
			rest := err.Error()
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("Validate: got %q, want %q in it (in order: %q)", err, w, tt.want)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

func TestWithDefaults(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	tests := []struct {
		name string
		cfg  Config
		want Config
	}{
		{name: "zero", cfg: Config{}, want: Config{
			MaxConns: DefaultMaxConns, ConnsPerSecond: DefaultConnsPerSecond, MaxBytes: DefaultMaxBytes,
			HandshakeTimeout: DefaultHandshakeTimeout, Logger: slog.Default(),
		}},
		{name: "set", cfg: Config{
			Resolver: "192.0.2.53:53", MaxConns: 1, ConnsPerSecond: 2, MaxBytes: 3, HandshakeTimeout: 4, Logger: logger,
		}, want: Config{
			Resolver: "192.0.2.53:53", MaxConns: 1, ConnsPerSecond: 2, MaxBytes: 3, HandshakeTimeout: 4, Logger: logger,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.cfg.WithDefaults()
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("WithDefaults: got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// decideNameCorpus seeds FuzzDecideName and is checked by TestDecideNameCorpus.
func decideNameCorpus() []string {
	seeds := []string{
		"example.com", "API.Example.COM.", "evil-example.com", "example.com.evil.net",
		"bücher.example", "xn--bcher-kva.example", "\u212aelvin.example", "straße.example",
		"pkgs.example.net", "files.pkgs.example.net", "r3---sn-abc.example.com",
		"\U0001F600.example", "ex\u0430mple.com", "a.b", "0.example", "example.0",
		strings.Repeat("\u00e9", 100) + ".example",
	}
	seeds = append(seeds, ipLiterals...)
	return append(seeds, invalidHosts...)
}

// checkDecideName checks what must hold of DecideName for every host and port.
func checkDecideName(t *testing.T, host string, port int) {
	t.Helper()
	dAny := anyPolicy.DecideName(host, port)
	name, err := NormalizeHost(host)
	for _, p := range []Policy{anyPolicy, domainsPolicy, registriesPolicy} {
		d := p.DecideName(host, port)
		if d.Name != name {
			t.Errorf("DecideName(%q, %d) in mode %s: got name %q, NormalizeHost says %q, %v", host, port, p.Mode, d.Name, name, err)
		}
		if d.Rule == "" {
			t.Errorf("DecideName(%q, %d) in mode %s: got no rule", host, port, p.Mode)
		}
		if !d.Allowed {
			continue
		}
		if port < 1 || port > 65535 {
			t.Errorf("DecideName(%q, %d) in mode %s: got allowed, want port %d refused", host, port, p.Mode, port)
		}
		// An allowed name is a valid domains entry as written, and no address.
		if got, err := ParseDomain(d.Name); got != d.Name || err != nil {
			t.Errorf("DecideName(%q, %d) in mode %s: allowed name %q: ParseDomain got %q, %v, want it unchanged", host, port, p.Mode, d.Name, got, err)
		}
		if isAddrLiteral(d.Name) {
			t.Errorf("DecideName(%q, %d) in mode %s: allowed name %q is an IP literal", host, port, p.Mode, d.Name)
		}
		if again, err := NormalizeHost(d.Name); again != d.Name || err != nil {
			t.Errorf("NormalizeHost(%q): got %q, %v, want it unchanged", d.Name, again, err)
		}
		if p.Mode != api.NetworkAny {
			matched := false
			for _, dom := range p.Domains {
				matched = matched || Matches(dom, d.Name) && strings.HasSuffix(d.Rule, " "+dom)
			}
			if !matched {
				t.Errorf("DecideName(%q, %d) in mode %s: got %+v, want the rule to name a domain that matches", host, port, p.Mode, d)
			}
			if !dAny.Allowed {
				t.Errorf("DecideName(%q, %d): allowed in mode %s, refused in mode any (%s)", host, port, p.Mode, dAny.Rule)
			}
		}
	}
}

func FuzzDecideName(f *testing.F) {
	for _, h := range decideNameCorpus() {
		f.Add(h, 443)
	}
	f.Add("example.com", 0)
	f.Add("example.com", 65536)
	f.Fuzz(func(t *testing.T, host string, port int) {
		checkDecideName(t, host, port)
	})
}

// TestDecideNameCorpus is FuzzDecideName's checks over its seed corpus, as a
// plain test.
func TestDecideNameCorpus(t *testing.T) {
	for _, h := range decideNameCorpus() {
		for _, port := range []int{443, 0, 65536} {
			checkDecideName(t, h, port)
		}
	}
}

func Example_policy() {
	pol := Policy{Mode: api.NetworkDomains, Domains: []string{"example.com"}}
	d := pol.DecideName("API.Example.COM.", 443) // from an SNI, a Host header, ...
	fmt.Println(d.Allowed, d.Rule, d.Name)
	fmt.Println(pol.DecideName("0x7f.1", 443).Rule)

	cfg := Config{AllowPrivateHosts: []string{"internal.example"}}.WithDefaults()
	// The proxy resolves d.Name and decides every address before it dials one.
	fmt.Println(cfg.DecideAddr(d.Name, netip.MustParseAddr("10.0.0.7"), nil).Rule)
	fmt.Println(cfg.DecideAddr("db.internal.example", netip.MustParseAddr("10.0.0.7"), nil).Rule)
	// Output:
	// true domain example.com api.example.com
	// ip literal (the proxy dials names only)
	// address class private (10.0.0.0/8)
	// private address allowed by the operator for internal.example
}

func BenchmarkDecideName(b *testing.B) {
	for _, bb := range []struct{ name, host string }{
		{"ascii", "API.Example.COM."},
		{"idn", "shop.bücher.example"},
		{"ip literal", "0x7f.1"},
	} {
		b.Run(bb.name, func(b *testing.B) {
			for b.Loop() {
				domainsPolicy.DecideName(bb.host, 443)
			}
		})
	}
}

func BenchmarkDecideAddr(b *testing.B) {
	cfg := &Config{AllowPrivateHosts: []string{"internal.example"}}
	hostAddrs := []netip.Addr{netip.MustParseAddr("10.1.1.1"), netip.MustParseAddr("fe80::1")}
	for _, bb := range []struct{ name, addr string }{
		{"public v4", "93.184.215.34"},
		{"public v6", "2606:4700:4700::1111"},
		{"private", "10.0.0.1"},
	} {
		a := netip.MustParseAddr(bb.addr)
		b.Run(bb.name, func(b *testing.B) {
			for b.Loop() {
				cfg.DecideAddr("api.example.com", a, hostAddrs)
			}
		})
	}
}
