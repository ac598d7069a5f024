package egress

import (
	"net/netip"
	"testing"
)

// lastAddr is the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// TestClassifyAddr checks every prefix of the address table at its edges:
// its first and last address, and the addresses just outside it. The
// expectations are written out here, not derived from the table, and every
// row of the table must be here.
func TestClassifyAddr(t *testing.T) {
	tests := []struct {
		prefix string
		// The classes of the prefix's first and last address (a longer
		// prefix may hold one of them), and of the addresses just before the
		// first and after the last: "" when there is none, at the ends of the
		// address space.
		first, last, before, after string
	}{
		{"0.0.0.0/0", "this-network", "broadcast", "", ""},
		{"0.0.0.0/8", "this-network", "this-network", "", "public"},
		{"10.0.0.0/8", "private", "private", "public", "public"},
		{"100.64.0.0/10", "cgnat", "cgnat", "public", "public"},
		{"100.100.100.200/32", "metadata", "metadata", "cgnat", "cgnat"},
		{"127.0.0.0/8", "loopback", "loopback", "public", "public"},
		{"168.63.129.16/32", "metadata", "metadata", "public", "public"},
		{"169.254.0.0/16", "link-local", "link-local", "public", "public"},
		{"169.254.169.254/32", "metadata", "metadata", "link-local", "link-local"},
		{"172.16.0.0/12", "private", "private", "public", "public"},
		{"192.0.0.0/24", "reserved", "reserved", "public", "public"},
		{"192.0.2.0/24", "documentation", "documentation", "public", "public"},
		{"192.88.99.0/24", "6to4", "6to4", "public", "public"},
		{"192.168.0.0/16", "private", "private", "public", "public"},
		{"198.18.0.0/15", "benchmark", "benchmark", "public", "public"},
		{"198.51.100.0/24", "documentation", "documentation", "public", "public"},
		{"203.0.113.0/24", "documentation", "documentation", "public", "public"},
		{"224.0.0.0/4", "multicast", "multicast", "public", "reserved"},
		{"240.0.0.0/4", "reserved", "broadcast", "multicast", ""},
		{"255.255.255.255/32", "broadcast", "broadcast", "reserved", ""},

		{"::/0", "unspecified", "multicast", "", ""},
		{"::/128", "unspecified", "unspecified", "", "loopback"},
		{"::1/128", "loopback", "loopback", "unspecified", "ipv4-compatible"},
		{"::/96", "unspecified", "ipv4-compatible", "", "reserved"},
		{"::ffff:0:0/96", "ipv4-mapped", "ipv4-mapped", "reserved", "reserved"},
		{"64:ff9b::/96", "nat64", "nat64", "reserved", "reserved"},
		{"64:ff9b:1::/48", "nat64", "nat64", "reserved", "reserved"},
		{"100::/64", "discard", "discard", "reserved", "reserved"},
		{"2000::/3", "public", "public", "reserved", "reserved"},
		{"2001::/23", "teredo", "reserved", "public", "public"},
		{"2001::/32", "teredo", "teredo", "public", "reserved"},
		{"2001:2::/48", "benchmark", "benchmark", "reserved", "reserved"},
		{"2001:db8::/32", "documentation", "documentation", "public", "public"},
		{"2002::/16", "6to4", "6to4", "public", "public"},
		{"3fff::/20", "documentation", "documentation", "public", "public"},
		{"fc00::/7", "ula", "ula", "reserved", "reserved"},
		{"fd00:ec2::254/128", "metadata", "metadata", "ula", "ula"},
		{"fe80::/10", "link-local", "link-local", "reserved", "site-local"},
		{"fec0::/10", "site-local", "site-local", "link-local", "multicast"},
		{"ff00::/8", "multicast", "multicast", "site-local", ""},
	}
	tested := map[netip.Prefix]bool{}
	for _, tt := range tests {
		p := netip.MustParsePrefix(tt.prefix)
		tested[p] = true
		t.Run(tt.prefix, func(t *testing.T) {
			first, last := p.Addr(), lastAddr(p)
			for _, c := range []struct {
				what string
				a    netip.Addr
				want string
			}{
				{"first", first, tt.first},
				{"last", last, tt.last},
				{"before", first.Prev(), tt.before},
				{"after", last.Next(), tt.after},
			} {
				if !c.a.IsValid() {
					if c.want != "" {
						t.Errorf("%s address of %s: there is none, want one of class %s", c.what, p, c.want)
					}
					continue
				}
				if got := ClassifyAddr(c.a); got != c.want {
					t.Errorf("ClassifyAddr(%s), the %s address of %s: got %q, want %q", c.a, c.what, p, got, c.want)
				}
			}
		})
	}
	for _, row := range addrTable {
		if !tested[row.prefix] {
			t.Errorf("the address table's row %s (%s) has no case in TestClassifyAddr", row.prefix, row.class)
		}
	}
}

// TestClassifyAddrSpots checks addresses a reader knows by heart, and the
// spellings of one address that must not change its class.
func TestClassifyAddrSpots(t *testing.T) {
	tests := []struct {
		name string
		addr string // "" is the zero Addr
		want string
	}{
		{name: "public IPv4", addr: "93.184.215.14", want: "public"},
		{name: "public resolver", addr: "9.9.9.9", want: "public"},
		{name: "public IPv6", addr: "2606:4700:4700::1111", want: "public"},
		{name: "public IPv6 next to Teredo", addr: "2001:4860:4860::8888", want: "public"},
		{name: "loopback", addr: "127.0.0.1", want: "loopback"},
		{name: "loopback's far end", addr: "127.255.255.254", want: "loopback"},
		{name: "IPv6 loopback", addr: "::1", want: "loopback"},
		{name: "metadata", addr: "169.254.169.254", want: "metadata"},
		{name: "ECS task metadata is link-local", addr: "169.254.170.2", want: "link-local"},
		{name: "IPv6 metadata", addr: "fd00:ec2::254", want: "metadata"},
		{name: "other fd00:ec2:: addresses are ula", addr: "fd00:ec2::23", want: "ula"},
		{name: "mapped loopback", addr: "::ffff:127.0.0.1", want: "ipv4-mapped"},
		{name: "mapped public", addr: "::ffff:93.184.215.14", want: "ipv4-mapped"},
		{name: "mapped metadata", addr: "::ffff:169.254.169.254", want: "ipv4-mapped"},
		{name: "compatible loopback", addr: "::127.0.0.1", want: "ipv4-compatible"},
		{name: "nat64 of loopback", addr: "64:ff9b::127.0.0.1", want: "nat64"},
		{name: "local-use nat64", addr: "64:ff9b:1:2::1", want: "nat64"},
		{name: "6to4 of a private address", addr: "2002:a00:1::1", want: "6to4"},
		{name: "teredo", addr: "2001:0:4136:e378:8000:63bf:3fff:fdd2", want: "teredo"},
		{name: "SIIT translated", addr: "::ffff:0:a00:1", want: "reserved"},
		{name: "SRv6 SID block", addr: "5f00::1", want: "reserved"},
		{name: "link-local with a zone", addr: "fe80::1%eth0", want: "link-local"},
		{name: "public with a zone", addr: "2606:4700:4700::1111%eth0", want: "public"},
		{name: "loopback with a zone", addr: "::1%lo", want: "loopback"},
		{name: "zero Addr", addr: "", want: "invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a netip.Addr
			if tt.addr != "" {
				a = netip.MustParseAddr(tt.addr)
			}
			if got := ClassifyAddr(a); got != tt.want {
				t.Errorf("ClassifyAddr(%s): got %q, want %q", tt.addr, got, tt.want)
			}
		})
	}
}

// TestAddrTable checks the table's shape: each prefix once, in its canonical
// (masked) form, so a typo such as 10.0.0.1/8 can't hide a row.
func TestAddrTable(t *testing.T) {
	seen := map[netip.Prefix]bool{}
	for _, row := range addrTable {
		if row.prefix != row.prefix.Masked() {
			t.Errorf("row %s: got a prefix with host bits, want %s", row.prefix, row.prefix.Masked())
		}
		if seen[row.prefix] {
			t.Errorf("row %s: got it twice, want it once", row.prefix)
		}
		seen[row.prefix] = true
		if row.class == "" || row.class == ClassInvalid {
			t.Errorf("row %s: got class %q, want a name", row.prefix, row.class)
		}
	}
}
