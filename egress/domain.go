package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unicode"

	"golang.org/x/net/publicsuffix"
)

// Bounds of a host name (RFC 1035; RFC 1123 lets a label start with a digit).
const (
	maxNameChars  = 253 // without the trailing dot
	maxLabelChars = 63
)

// hostOnly ends the messages for entries that hold more than a host name.
const hostOnly = "give the host name only, such as example.com"

// ParseDomain checks one entry of network.domains and returns it normalised: lower
// case, no trailing dot. The error's message is a sentence that says what to write
// instead; the caller prefixes the field's name.
func ParseDomain(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("the host name is empty: give a full host name such as example.com")
	}
	for _, c := range s {
		switch {
		case unicode.IsControl(c):
			return "", fmt.Errorf("%q has a control character (%U): %s", s, c, hostOnly)
		case unicode.IsSpace(c):
			return "", fmt.Errorf("%q has a space: %s", s, hostOnly)
		}
	}
	if strings.Contains(s, "://") {
		return "", fmt.Errorf("%q is a URL: %s", s, hostOnly)
	}
	// Before the ":" check: an IPv6 address is full of them.
	if isIP(s) {
		return "", fmt.Errorf("%q is an IP address: a domains network admits host names only; give the host name the service uses, such as example.com", s)
	}
	if i := strings.IndexAny(s, "/:?#@[]"); i >= 0 {
		return "", fmt.Errorf("%q has %q, which a host name does not (no scheme, user, port or path): %s", s, s[i], hostOnly)
	}
	if strings.Contains(s, "*") {
		if rest, ok := strings.CutPrefix(s, "*."); ok && !strings.Contains(rest, "*") {
			return "", fmt.Errorf("%q is a wildcard: write %s: subdomains are included", s, rest)
		}
		return "", fmt.Errorf("%q is a wildcard: write the domain itself, such as example.com: subdomains are included", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return "", fmt.Errorf("%q has characters outside ASCII: write an international name in its punycode (xn--) form, such as xn--bcher-kva.example", s)
		}
	}
	if strings.Contains(s, "_") {
		return "", fmt.Errorf("%q has an underscore: host names are letters, digits and hyphens in labels separated by dots, such as api.example.com", s)
	}

	name := asciiLower(strings.TrimSuffix(s, "."))
	if trimmed := strings.TrimLeft(name, "."); trimmed != name && trimmed != "" {
		return "", fmt.Errorf("%q starts with a dot: write %s: subdomains are included", s, trimmed)
	}
	if len(name) > maxNameChars {
		return "", fmt.Errorf("%q is %d characters long: a host name is at most %d", s, len(name), maxNameChars)
	}
	labels := strings.Split(name, ".")
	if len(labels) < 2 {
		return "", fmt.Errorf("%q is not a full host name: give a full host name such as example.com", s)
	}
	for _, label := range labels {
		if err := checkLabel(s, label); err != nil {
			return "", err
		}
	}
	// No top-level domain is a number; a name that ends in one is an IPv4
	// address in another spelling ("127.1", "0x7f.0x1") or a typo of one.
	if endsInNumber(name) {
		return "", fmt.Errorf("%q ends in a number, like an IP address: give a host name such as example.com", s)
	}
	// An entry admits its subdomains: a public suffix ("co.uk") would admit
	// every site anyone registers under it (the network probe of 2026-12-06).
	// The ICANN section only: a private suffix ("github.io") is one company's
	// hosting, which a run may mean to reach whole.
	if suffix, icann := publicsuffix.PublicSuffix(name); icann && suffix == name {
		return "", fmt.Errorf("%q is a public suffix, under which anyone may register a domain, and an entry admits its subdomains: give the hosts themselves, such as example.%s", s, name)
	}
	// The name must be one a connection can be decided on, or the entry
	// would be accepted and match nothing.
	switch got, err := NormalizeHost(name); {
	case errors.Is(err, ErrLoopbackName):
		return "", fmt.Errorf("%q is a name of the run's own loopback (RFC 6761), where no connection leaves the sandbox: give a host name such as example.com", s)
	case err != nil || got != name:
		return "", fmt.Errorf("%q is not a valid host name (an xn-- label must be valid punycode): give a host name such as example.com", s)
	}
	return name, nil
}

// checkLabel checks one label of entry s: letters, digits and hyphens, 1 to 63 of
// them, not starting or ending with a hyphen. IDNA A-labels ("xn--...") pass.
func checkLabel(s, label string) error {
	switch {
	case label == "":
		return fmt.Errorf("%q has an empty label (two dots in a row, or only dots): give a host name such as api.example.com", s)
	case len(label) > maxLabelChars:
		return fmt.Errorf("%q has a label of %d characters: each part between dots is at most %d", s, len(label), maxLabelChars)
	case label[0] == '-' || label[len(label)-1] == '-':
		return fmt.Errorf("%q has a label %q that starts or ends with a hyphen: host names do not", s, label)
	}
	for i := 0; i < len(label); i++ {
		if c := label[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("%q has %q, which a host name does not: host names are letters, digits and hyphens in labels separated by dots, such as api.example.com", s, c)
		}
	}
	return nil
}

// Matches reports whether host (any case, optional trailing dot) is domain or one
// of its subdomains. domain is as ParseDomain returns it. Case is folded in ASCII
// only, as DNS does: Unicode folding would turn the Kelvin sign (U+212A) into
// "k" and let a host that is not the domain match it.
func Matches(domain, host string) bool {
	domain = asciiLower(strings.TrimSuffix(domain, "."))
	host = asciiLower(strings.TrimSuffix(host, "."))
	if domain == "" || host == "" {
		return false
	}
	if host == domain {
		return true
	}
	sub, ok := strings.CutSuffix(host, "."+domain)
	// An empty label ("..example.com", ".example.com") names no host: no match.
	return ok && sub != "" && !strings.HasPrefix(sub, ".") && !strings.HasSuffix(sub, ".")
}

// isIP reports whether s is an IP address, bracketed or not, with or without a
// port.
func isIP(s string) bool {
	if strings.HasPrefix(s, "[") {
		return true // only an IPv6 literal is written in brackets
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	_, err := netip.ParseAddrPort(s)
	return err == nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
