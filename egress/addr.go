package egress

import "net/netip"

// Address classes. ClassPublic is the only one a run reaches without the
// operator naming the destination.
const (
	ClassPublic = "public"
	// ClassInvalid is the zero netip.Addr: never dialled.
	ClassInvalid = "invalid"
)

// addrClass is one row of the address table: a prefix and the class of every
// address in it, unless a longer prefix in the table says otherwise.
type addrClass struct {
	prefix netip.Prefix
	class  string
}

// where is the range a rule names for the row: a catch-all row names what its
// addresses are outside of, as "reserved (outside 2000::/3)" says more than
// "reserved (::/0)".
func (r addrClass) where() string {
	if r.prefix == pfx("::/0") {
		return "outside 2000::/3"
	}
	return r.prefix.String()
}

// addrTable classifies every address by its longest matching prefix. The two
// catch-all rows make the table total: all of IPv4 not listed is public, and
// of IPv6 only 2000::/3, the global unicast space IANA allocates from, is
// public; the rest of IPv6 is reserved, so an address IANA has not allocated
// is refused rather than guessed at. Sources: the IANA IPv4 and IPv6
// Special-Purpose Address Registries and the RFCs named per row.
var addrTable = []addrClass{
	{pfx("0.0.0.0/0"), ClassPublic},
	// "This network" (RFC 791, RFC 1122): on Linux, connecting to 0.0.0.0
	// reaches the host's own listeners.
	{pfx("0.0.0.0/8"), "this-network"},
	{pfx("10.0.0.0/8"), "private"},
	// Shared address space of carrier-grade NAT (RFC 6598); clouds use it for
	// their own services as well.
	{pfx("100.64.0.0/10"), "cgnat"},
	// Alibaba Cloud's instance metadata service.
	{pfx("100.100.100.200/32"), "metadata"},
	{pfx("127.0.0.0/8"), "loopback"},
	{pfx("169.254.0.0/16"), "link-local"},
	// The instance metadata service of AWS, GCP, Azure, OCI and others: it
	// hands out the machine's credentials.
	{pfx("169.254.169.254/32"), "metadata"},
	{pfx("172.16.0.0/12"), "private"},
	// IETF protocol assignments (RFC 6890): DS-Lite, NAT64 discovery and
	// anycast service addresses, none of them a host a run needs.
	{pfx("192.0.0.0/24"), "reserved"},
	{pfx("192.0.2.0/24"), "documentation"}, // TEST-NET-1, RFC 5737
	// The deprecated 6to4 relay anycast (RFC 7526): a packet to it is
	// tunnelled on to an IPv6 address the proxy never checked.
	{pfx("192.88.99.0/24"), "6to4"},
	{pfx("192.168.0.0/16"), "private"},
	{pfx("198.18.0.0/15"), "benchmark"},       // RFC 2544
	{pfx("198.51.100.0/24"), "documentation"}, // TEST-NET-2, RFC 5737
	{pfx("203.0.113.0/24"), "documentation"},  // TEST-NET-3, RFC 5737
	{pfx("224.0.0.0/4"), "multicast"},
	// Reserved for future use (RFC 1112): no host a name should resolve to.
	{pfx("240.0.0.0/4"), "reserved"},
	{pfx("255.255.255.255/32"), "broadcast"},
	// Azure's WireServer: a public-looking address that only means something
	// inside Azure, where it serves the host agent and the VM's configuration.
	{pfx("168.63.129.16/32"), "metadata"},

	{pfx("::/0"), "reserved"},
	{pfx("2000::/3"), ClassPublic},
	{pfx("::/128"), "unspecified"},
	{pfx("::1/128"), "loopback"},
	// IPv4-compatible addresses (RFC 4291, deprecated): an IPv4 address in
	// IPv6 clothes that no resolver should return.
	{pfx("::/96"), "ipv4-compatible"},
	// IPv4-mapped addresses are refused whatever IPv4 address they embed:
	// dialled on a dual-stack socket they reach that IPv4 address, and no
	// name publishes one in its AAAA records, so one in an answer is a
	// rebinding attempt or a bug. The proxy checks the name's A records (as
	// 4-byte addresses, netip.Addr.Unmap) instead.
	{pfx("::ffff:0:0/96"), "ipv4-mapped"},
	// NAT64 (RFC 6052, RFC 8215): the gateway forwards to the embedded IPv4
	// address, which may be private.
	{pfx("64:ff9b::/96"), "nat64"},
	{pfx("64:ff9b:1::/48"), "nat64"},
	{pfx("100::/64"), "discard"}, // RFC 6666
	// IETF protocol assignments (RFC 2928): Teredo, benchmarking, ORCHID and
	// anycast service addresses, none of them a host a run needs.
	{pfx("2001::/23"), "reserved"},
	// Teredo (RFC 4380) embeds an IPv4 server and client address, which may
	// be private.
	{pfx("2001::/32"), "teredo"},
	{pfx("2001:2::/48"), "benchmark"},       // RFC 5180
	{pfx("2001:db8::/32"), "documentation"}, // RFC 3849
	{pfx("3fff::/20"), "documentation"},     // RFC 9637
	{pfx("2002::/16"), "6to4"},              // embeds an IPv4 address, RFC 3056
	{pfx("fc00::/7"), "ula"},                // unique local, RFC 4193
	{pfx("fd00:ec2::254/128"), "metadata"},  // AWS's instance metadata over IPv6
	{pfx("fe80::/10"), "link-local"},        // RFC 4291
	{pfx("fec0::/10"), "site-local"},        // deprecated by RFC 3879
	{pfx("ff00::/8"), "multicast"},          // RFC 4291
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// embeddedIPv4 are the IPv4 addresses an IPv6 address of a class that embeds
// them carries, where a gateway or a tunnel delivers its packets: the last
// 32 bits of NAT64's well-known prefix, 6to4's bits 16 to 47, Teredo's server
// (bits 32 to 63) and its client (the last 32 bits, inverted). The local-use
// NAT64 prefix (RFC 8215) is an operator's to extend to any of RFC 6052's
// lengths from its own /48 (bits 64 to 71 skipped), so its address may embed
// any of four readings, of which only one is meant: those are in maybe.
func embeddedIPv4(a netip.Addr, class string) (sure, maybe []netip.Addr) {
	if !a.Is6() || a.Is4In6() {
		return nil, nil
	}
	b := a.As16()
	at := func(i, j, k, l int) netip.Addr { return netip.AddrFrom4([4]byte{b[i], b[j], b[k], b[l]}) }
	switch class {
	case "nat64":
		if pfx("64:ff9b::/96").Contains(a) {
			return []netip.Addr{at(12, 13, 14, 15)}, nil
		}
		return nil, []netip.Addr{at(6, 7, 9, 10), at(7, 9, 10, 11), at(9, 10, 11, 12), at(12, 13, 14, 15)}
	case "6to4":
		return []netip.Addr{at(2, 3, 4, 5)}, nil
	case "teredo":
		return []netip.Addr{at(4, 5, 6, 7), netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})}, nil
	}
	return nil, nil
}

// ClassifyAddr names the class of an address: "public", or the non-public class
// it falls in ("loopback", "private", "cgnat", "link-local", "metadata",
// "multicast", "this-network", "reserved", "ula", "ipv4-mapped", "nat64",
// "6to4", "teredo", ...). It is pure.
func ClassifyAddr(a netip.Addr) string {
	return classify(a).class
}

// classify returns the table row that decides a: the longest prefix holding
// it. An IPv6 zone says which link, not which address, so it is ignored.
func classify(a netip.Addr) addrClass {
	if !a.IsValid() {
		return addrClass{class: ClassInvalid}
	}
	a = a.WithZone("")
	best := addrClass{prefix: netip.Prefix{}, class: ClassInvalid}
	for _, row := range addrTable {
		if row.prefix.Contains(a) && (!best.prefix.IsValid() || row.prefix.Bits() > best.prefix.Bits()) {
			best = row
		}
	}
	return best
}
