package packages

import "strings"

// Version equality, for the reviewed policy: an exact pin and an installed
// version are the same version when the language's tools say so, whatever the
// spelling. Ordering and ranges are the installers' business; brig only needs
// "is this the reviewed version".

// pep440RE is a PEP 440 version, as the `packaging` library's VERSION_PATTERN
// reads it (case-insensitive): epoch, release, pre-, post- and dev-release,
// local label. The groups are those canonicalPEP440 uses.
var pep440RE = lazyRegexp(`^(?i)v?` +
	`(?:([0-9]+)!)?` + // 1 epoch
	`([0-9]+(?:\.[0-9]+)*)` + // 2 release
	`(?:[-_.]?(alpha|a|beta|b|preview|pre|c|rc)[-_.]?([0-9]+)?)?` + // 3 pre phase, 4 its number
	`(?:-([0-9]+)|[-_.]?(post|rev|r)[-_.]?([0-9]+)?)?` + // 5 implicit post number; 6 post, 7 its number
	`(?:[-_.]?(dev)[-_.]?([0-9]+)?)?` + // 8 dev, 9 its number
	`(?:\+([a-z0-9]+(?:[-_.][a-z0-9]+)*))?$`) // 10 local label

// canonicalPEP440 is v's one spelling per PEP 440 version, false when v is not
// a PEP 440 version. Two versions are equal under PEP 440 exactly when their
// canonical forms are: the release is compared with zero padding ("1.2" is
// "1.2.0"), numbers without leading zeros, the pre-, post- and dev-release
// spellings folded ("1.0alpha1" is "1.0a1", "1.0-1" is "1.0.post1"), and the
// local label lower-cased with "." for its separators. Unlike packaging's
// canonicalize_version the epoch 0 and the local label are kept apart: "1.0"
// and "1.0+cpu" are different versions.
func canonicalPEP440(v string) (string, bool) {
	return pep440Form(v, false)
}

// normalPEP440 is v as Python's packaging library prints a Version (str),
// which pip's "===" compares with the pin: canonicalPEP440's spelling with the
// release's trailing zeros kept ("1.0.0-1" is "1.0.0.post1"), false when v is
// not a PEP 440 version.
func normalPEP440(v string) (string, bool) {
	return pep440Form(v, true)
}

func pep440Form(v string, keepZeros bool) (string, bool) {
	m := pep440RE().FindStringSubmatch(v)
	if m == nil {
		return "", false
	}
	var b strings.Builder
	if epoch := trimLeadingZeros(m[1]); epoch != "0" {
		b.WriteString(epoch + "!")
	}
	release := strings.Split(m[2], ".")
	for i := range release {
		release[i] = trimLeadingZeros(release[i])
	}
	for !keepZeros && len(release) > 1 && release[len(release)-1] == "0" {
		release = release[:len(release)-1]
	}
	b.WriteString(strings.Join(release, "."))
	if m[3] != "" {
		phase := "rc" // c, pre, preview and rc
		switch strings.ToLower(m[3]) {
		case "a", "alpha":
			phase = "a"
		case "b", "beta":
			phase = "b"
		}
		b.WriteString(phase + trimLeadingZeros(m[4]))
	}
	switch {
	case m[5] != "":
		b.WriteString(".post" + trimLeadingZeros(m[5]))
	case m[6] != "":
		b.WriteString(".post" + trimLeadingZeros(m[7]))
	}
	if m[8] != "" {
		b.WriteString(".dev" + trimLeadingZeros(m[9]))
	}
	if m[10] != "" {
		parts := strings.FieldsFunc(strings.ToLower(m[10]), func(c rune) bool { return c == '-' || c == '_' || c == '.' })
		for i, p := range parts {
			if strings.Trim(p, "0123456789") == "" {
				parts[i] = trimLeadingZeros(p) // numeric segments compare as numbers
			}
		}
		b.WriteString("+" + strings.Join(parts, "."))
	}
	return b.String(), true
}

// trimLeadingZeros is the decimal number n (digits only) without leading
// zeros; "" and "000" are "0". Numbers stay strings: PEP 440 bounds none.
func trimLeadingZeros(n string) string {
	n = strings.TrimLeft(n, "0")
	if n == "" {
		return "0"
	}
	return n
}

// samePEP440 reports whether a and b are one version under PEP 440. A string
// that is not a PEP 440 version (what "===" may pin) equals only itself, case
// aside, as pip's arbitrary equality compares.
func samePEP440(a, b string) bool {
	ca, okA := canonicalPEP440(a)
	cb, okB := canonicalPEP440(b)
	if okA && okB {
		return ca == cb
	}
	return strings.EqualFold(a, b)
}

// sameSemver reports whether a and b are one exact semver version: equal
// major, minor and patch and the same prerelease, build metadata aside (it has
// no part in semver's precedence). Both must be exact versions (isExactSemver),
// whose numbers have no leading zeros, so equal versions are equal strings.
func sameSemver(a, b string) bool {
	if !isExactSemver(a) || !isExactSemver(b) {
		return false
	}
	a, _, _ = strings.Cut(a, "+")
	b, _, _ = strings.Cut(b, "+")
	return a == b
}
