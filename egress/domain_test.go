package egress

import (
	"strings"
	"testing"
)

func TestParseDomain(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		want     string // the normalised name; "" when refused
		wantHint string // a piece of the message when refused
	}{
		{name: "plain", in: "example.com", want: "example.com"},
		{name: "subdomain", in: "api.example.com", want: "api.example.com"},
		{name: "upper case", in: "API.Example.COM", want: "api.example.com"},
		{name: "trailing dot", in: "example.com.", want: "example.com"},
		{name: "digits and hyphens", in: "a-1.0x.example-2.org", want: "a-1.0x.example-2.org"},
		{name: "A-label", in: "xn--bcher-kva.example", want: "xn--bcher-kva.example"},
		{name: "label of 63", in: strings.Repeat("a", 63) + ".com", want: strings.Repeat("a", 63) + ".com"},
		{name: "name of 253", in: long(253), want: long(253)},
		{name: "name of 253 and a dot", in: long(253) + ".", want: long(253)},

		{name: "empty", in: "", wantHint: "give a full host name such as example.com"},
		{name: "single label", in: "localhost", wantHint: "give a full host name such as example.com"},
		{name: "top-level domain", in: "com", wantHint: "give a full host name such as example.com"},
		{name: "only a dot", in: ".", wantHint: "give a full host name such as example.com"},
		{name: "IPv4", in: "93.184.216.34", wantHint: "is an IP address"},
		{name: "IPv4 with port", in: "10.0.0.1:80", wantHint: "is an IP address"},
		{name: "IPv6", in: "::1", wantHint: "is an IP address"},
		{name: "IPv6 bracketed", in: "[::1]", wantHint: "is an IP address"},
		{name: "IPv6 bracketed with port", in: "[2001:db8::1]:443", wantHint: "is an IP address"},
		{name: "IPv4 short form", in: "127.1", wantHint: "like an IP address"},
		{name: "IPv4 hex form", in: "0x7f.0.0.1", wantHint: "like an IP address"},
		{name: "IPv4 hex last label", in: "0x7f.0x1", wantHint: "like an IP address"},
		{name: "invalid punycode", in: "xn--zzzz.test", wantHint: "must be valid punycode"},
		{name: "under localhost", in: "foo.localhost", wantHint: "the run's own loopback"},
		{name: "public suffix", in: "co.uk", wantHint: "is a public suffix"},
		{name: "public suffix in capitals", in: "COM.AU.", wantHint: "such as example.com.au"},
		{name: "under a public suffix", in: "example.co.uk", want: "example.co.uk"},
		{name: "a private suffix", in: "github.io", want: "github.io"},
		{name: "IPv4 trailing dot", in: "1.2.3.4.", wantHint: "like an IP address"},
		{name: "wildcard", in: "*.example.com", wantHint: "write example.com: subdomains are included"},
		{name: "wildcard inside", in: "api.*.example.com", wantHint: "subdomains are included"},
		{name: "leading dot", in: ".example.com", wantHint: "write example.com: subdomains are included"},
		{name: "URL", in: "https://example.com", wantHint: "give the host name only, such as example.com"},
		{name: "path", in: "example.com/x", wantHint: "give the host name only, such as example.com"},
		{name: "port", in: "example.com:443", wantHint: "give the host name only, such as example.com"},
		{name: "user", in: "me@example.com", wantHint: "give the host name only, such as example.com"},
		{name: "query", in: "example.com?x", wantHint: "give the host name only, such as example.com"},
		{name: "space", in: "example .com", wantHint: "has a space"},
		{name: "blank", in: "   ", wantHint: "has a space"},
		{name: "control character", in: "example.com\n", wantHint: "control character"},
		{name: "underscore", in: "my_host.example.com", wantHint: "has an underscore"},
		{name: "non-ASCII", in: "bücher.example", wantHint: "punycode (xn--) form"},
		{name: "two dots", in: "api..example.com", wantHint: "empty label"},
		{name: "hyphen first", in: "-api.example.com", wantHint: "starts or ends with a hyphen"},
		{name: "hyphen last", in: "api-.example.com", wantHint: "starts or ends with a hyphen"},
		{name: "label of 64", in: strings.Repeat("a", 64) + ".com", wantHint: "at most 63"},
		{name: "name of 254", in: long(254), wantHint: "at most 253"},
		{name: "other character", in: "ex!ample.com", wantHint: "letters, digits and hyphens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseDomain(tt.in)
			if tt.want != "" {
				if err != nil || got != tt.want {
					t.Errorf("ParseDomain(%q): got %q, %v, want %q", tt.in, got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseDomain(%q): got %q, want an error", tt.in, got)
			}
			if !strings.Contains(err.Error(), tt.wantHint) {
				t.Errorf("ParseDomain(%q): got %q, want it to contain %q", tt.in, err, tt.wantHint)
			}
		})
	}
}

// long is a valid host name of n characters (n at least 5): labels of 63 "a"s,
// then a shorter one, then ".com".
func long(n int) string {
	var b strings.Builder
	for b.Len()+64+4 < n {
		b.WriteString(strings.Repeat("a", 63) + ".")
	}
	b.WriteString(strings.Repeat("b", n-b.Len()-4))
	b.WriteString(".com")
	return b.String()
}

func TestMatches(t *testing.T) {
	tests := []struct {
		name   string
		domain string
		host   string
		want   bool
	}{
		{name: "itself", domain: "example.com", host: "example.com", want: true},
		{name: "subdomain", domain: "example.com", host: "api.example.com", want: true},
		{name: "deep subdomain", domain: "example.com", host: "a.b.c.example.com", want: true},
		{name: "case and trailing dot", domain: "example.com", host: "EXAMPLE.com.", want: true},
		{name: "subdomain case and trailing dot", domain: "example.com", host: "Api.Example.COM.", want: true},
		{name: "suffix without a dot", domain: "example.com", host: "badexample.com", want: false},
		{name: "parent", domain: "api.example.com", host: "example.com", want: false},
		{name: "sibling", domain: "api.example.com", host: "www.example.com", want: false},
		{name: "domain as a prefix", domain: "example.com", host: "example.com.evil.net", want: false},
		{name: "other top-level domain", domain: "example.com", host: "example.co", want: false},
		{name: "empty host", domain: "example.com", host: "", want: false},
		{name: "only a dot", domain: "example.com", host: ".", want: false},
		{name: "empty domain", domain: "", host: "example.com", want: false},
		{name: "empty label before", domain: "example.com", host: ".example.com", want: false},
		{name: "two dots before", domain: "example.com", host: "api..example.com", want: false},
		{name: "Kelvin sign is not k", domain: "kelvin.com", host: "\u212aelvin.com", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Matches(tt.domain, tt.host); got != tt.want {
				t.Errorf("Matches(%q, %q): got %v, want %v", tt.domain, tt.host, got, tt.want)
			}
		})
	}
}
