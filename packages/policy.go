package packages

import (
	"cmp"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/brig-sandbox/brig/internal/text"
)

// The policy modes, as the operator's config writes them.
const (
	PolicyOpen     = "open"     // every package (also the empty mode)
	PolicyAllow    = "allow"    // only the names and globs of Allow
	PolicyDeny     = "deny"     // every package but the names and globs of Deny
	PolicyReviewed = "reviewed" // only the exact name and version pairs of Reviewed
)

// PolicyConfig is the operator's package policy. It is pure: Check decides on
// the parsed requests, before anything is fetched.
//
// Names and globs (path.Match syntax: "*", "?", "[a-z]") match normalised names:
// an entry is normalised for the language being checked (PEP 503 for Python,
// so "Django_*" matches "django-rest"; npm names exactly as written, as npm
// compares them: "JSONStream" is a legacy name of its own, not "jsonstream"),
// so one list can serve both languages. A scoped npm glob keeps its "/":
// "@types/*" matches "@types/node", and "*" alone matches scoped names too.
type PolicyConfig struct {
	// Mode is "" or "open", "allow", "deny" or "reviewed".
	Mode string
	// Allow lists the names and globs admitted in "allow" mode.
	Allow []string
	// Deny lists the names and globs refused in "deny" mode.
	Deny []string
	// Reviewed lists the pairs admitted in "reviewed" mode: "numpy==1.26.4" for
	// Python, "lodash@4.17.21" or "@types/node@20.11.0" for npm. A request must
	// then pin exactly one of them ("numpy==1.26.4"; "numpy>=1" is refused).
	// Versions compare as the language does: PEP 440 equality for Python
	// ("1.2" is "1.2.0", names PEP 503-normalised), exact semver for npm.
	Reviewed []string
}

// ErrBlocked matches a *BlockedError with errors.Is.
var ErrBlocked = errors.New("package blocked by policy")

// BlockedError is a request the policy refuses: the run ends with the outcome
// "blocked" and its code never runs.
type BlockedError struct {
	Request string // the request as the run wrote it (Raw)
	Rule    string // "allow", "deny:<entry>" or "reviewed"
	Message string // one sentence naming the package and the rule
}

func (e *BlockedError) Error() string { return e.Message }

func (e *BlockedError) Is(target error) bool { return target == ErrBlocked }

// maxListedEntries bounds how many policy entries a refusal quotes, so that a
// long list does not swamp the message.
const maxListedEntries = 10

// Validate checks the mode and every entry; the service runs it when it loads
// the config, before it accepts a run.
func (p PolicyConfig) Validate() error {
	switch p.Mode {
	case "", PolicyOpen, PolicyDeny:
	case PolicyAllow:
		if len(p.Allow) == 0 {
			return errors.New(`validating the package policy: mode "allow" with an empty allow list refuses every package; list the allowed names, or deny "*" to refuse all`)
		}
	case PolicyReviewed:
		if len(p.Reviewed) == 0 {
			return errors.New(`validating the package policy: mode "reviewed" with an empty reviewed list refuses every package; list name==version (Python) or name@version (npm) pairs`)
		}
	default:
		return fmt.Errorf("validating the package policy: unknown mode %q (want %s, %s, %s or %s)", p.Mode, PolicyOpen, PolicyAllow, PolicyDeny, PolicyReviewed)
	}
	// A list its mode does not read would look like a policy and be none: a
	// deny list under "open" denies nothing.
	mode := cmp.Or(p.Mode, PolicyOpen)
	for _, list := range []struct {
		mode    string
		entries []string
	}{{PolicyAllow, p.Allow}, {PolicyDeny, p.Deny}, {PolicyReviewed, p.Reviewed}} {
		if len(list.entries) > 0 && list.mode != mode {
			return fmt.Errorf("validating the package policy: the %s list names %q and %d more, which mode %q does not read: set mode = %q to use the list, or empty it", list.mode, list.entries[0], len(list.entries)-1, mode, list.mode)
		}
	}
	for _, list := range []struct {
		field   string
		entries []string
	}{{"allow", p.Allow}, {"deny", p.Deny}} {
		for _, e := range list.entries {
			if err := validateGlob(e); err != nil {
				return fmt.Errorf("validating the package policy's %s list: %w", list.field, err)
			}
		}
	}
	for _, e := range p.Reviewed {
		if _, _, _, err := parseReviewed(e); err != nil {
			return fmt.Errorf("validating the package policy's reviewed list: %w", err)
		}
	}
	return nil
}

func validateGlob(e string) error {
	if strings.TrimSpace(e) == "" {
		return errors.New("an entry is blank")
	}
	if strings.TrimSpace(e) != e {
		return fmt.Errorf("entry %q has spaces at its start or end", e)
	}
	if _, err := path.Match(e, ""); err != nil {
		return fmt.Errorf("entry %q is not a valid glob: %w", e, err)
	}
	if !nameGlobRE().MatchString(e) {
		// "requests>=2" or "lodash@4" would match no name, and so deny or
		// allow nothing, without a word.
		return fmt.Errorf("entry %q is not a package name or a glob of names (such as numpy, django-*, @types/*): "+
			"these lists take names only; pin versions with mode %q", e, PolicyReviewed)
	}
	return nil
}

// nameGlobRE is an allow or deny entry: a Python or npm name (scoped or not),
// or a glob of such names (path.Match's *, ? and [...]).
var nameGlobRE = lazyRegexp(`^(@[A-Za-z0-9*?\[\]!^._~-]+/)?[A-Za-z0-9*?\[][A-Za-z0-9*?\[\]!^._~-]*$`)

// parseReviewed splits a reviewed pair into its language, name (not yet
// normalised) and version.
func parseReviewed(e string) (language, name, version string, err error) {
	if n, v, ok := strings.Cut(e, "=="); ok {
		n, v = strings.TrimSpace(n), strings.TrimSpace(v)
		if _, version := canonicalPEP440(v); !pyNameRE().MatchString(n) || !version {
			return "", "", "", fmt.Errorf("entry %q is not a Python name==version pair such as %s", e, pyExample)
		}
		return languagePython, n, v, nil
	}
	at := strings.LastIndexByte(e, '@')
	if at <= 0 {
		return "", "", "", fmt.Errorf("entry %q is neither name==version (Python, such as %s) nor name@version (npm, such as lodash@4.17.21)", e, pyExample)
	}
	n, v := e[:at], e[at+1:]
	if checkNpmName(e, n, v) != nil || !isExactSemver(v) {
		return "", "", "", fmt.Errorf("entry %q is not an npm name@version pair with an exact version, such as lodash@4.17.21", e)
	}
	return languageJavaScript, n, v, nil
}

// isExactSemver reports whether v is one exact version: three numbers, with an
// optional prerelease and build.
func isExactSemver(v string) bool {
	core, _, _ := strings.Cut(v, "+")
	core, _, _ = strings.Cut(core, "-")
	if strings.Count(core, ".") != 2 || strings.ContainsAny(core, "xX*") {
		return false
	}
	return validPartial(v)
}

// normaliseName is name as the language compares it; glob metacharacters pass
// through. npm compares names exactly: new names are lower case, and a legacy
// name with capitals ("JSONStream") is another package than its lower case.
func normaliseName(language, name string) string {
	if language == languagePython {
		return normalisePython(name)
	}
	return name
}

// matchGlob reports whether the normalised name matches the normalised glob.
// path.Match's "*" stops at "/", so a bare "*" is taken to mean every name,
// scoped npm names included.
func matchGlob(glob, name string) bool {
	if glob == "*" {
		return true
	}
	ok, _ := path.Match(glob, name) // validated at load; a bad glob matches nothing
	return ok
}

// Check returns nil when the policy admits every request of language, else
// the first refusal as a *BlockedError, whose message names the others too
// (up to maxListedRefusals), so that a harness learns them in one round trip
// (the npm probe of 2026-12-06 needed two for two denied packages). reqs are
// as ParseRequests returns them.
func (p PolicyConfig) Check(language string, reqs []Request) error {
	var first *BlockedError
	var others []string
	for _, r := range reqs {
		err := p.check(language, r)
		var b *BlockedError
		switch {
		case err == nil:
		case !errors.As(err, &b):
			return err
		case first == nil:
			first = b
		case b.Rule == PolicyAllow:
			others = append(others, r.Name+" is not on it either") // the list once
		default:
			others = append(others, b.Message)
		}
	}
	if first == nil {
		return nil
	}
	if len(others) > maxListedRefusals {
		others = append(others[:maxListedRefusals], fmt.Sprintf("and %d more of the requests are refused", len(others)-maxListedRefusals))
	}
	if len(others) > 0 {
		first.Message += "; " + strings.Join(others, "; ")
	}
	return first
}

// maxListedRefusals bounds how many refusals beyond the first a message names.
const maxListedRefusals = 5

func (p PolicyConfig) check(language string, r Request) error {
	switch p.Mode {
	case "", PolicyOpen:
		return nil
	case PolicyAllow:
		for _, g := range p.Allow {
			if matchGlob(normaliseName(language, g), r.Name) {
				return nil
			}
		}
		return &BlockedError{Request: r.Raw, Rule: PolicyAllow, Message: fmt.Sprintf(
			"%s is not on this host's allow list (allowed: %s)", r.Name, listEntries(p.Allow))}
	case PolicyDeny:
		for _, g := range p.Deny {
			if matchGlob(normaliseName(language, g), r.Name) {
				return &BlockedError{Request: r.Raw, Rule: PolicyDeny + ":" + g, Message: fmt.Sprintf(
					"%s is refused by this host's deny list (entry %s)", r.Name, g)}
			}
		}
		return nil
	case PolicyReviewed:
		return p.checkReviewed(language, r)
	}
	// Validate refuses other modes; fail closed if it was not called.
	return &BlockedError{Request: r.Raw, Rule: p.Mode, Message: fmt.Sprintf(
		"%s is refused: this host's package policy has an unknown mode %q", r.Name, p.Mode)}
}

// reviewedOf returns the reviewed versions of name (normalised) for
// language, and their entries as the config writes them.
func (p PolicyConfig) reviewedOf(language, name string) (versions, pairs []string) {
	for _, e := range p.Reviewed {
		lang, n, version, err := parseReviewed(e)
		if err != nil || lang != language || normaliseName(language, n) != name {
			continue
		}
		versions = append(versions, version)
		pairs = append(pairs, e)
	}
	return versions, pairs
}

func (p PolicyConfig) checkReviewed(language string, r Request) error {
	versions, pairs := p.reviewedOf(language, r.Name)
	if len(versions) == 0 {
		return &BlockedError{Request: r.Raw, Rule: PolicyReviewed, Message: fmt.Sprintf(
			"%s has no reviewed version on this host, which installs only reviewed name and version pairs", r.Name)}
	}
	if pinned, ok := exactPin(language, r.Constraint); ok {
		for _, v := range versions {
			if sameVersion(language, pinned, v) {
				return nil
			}
		}
	}
	// The advice keeps the request's extras: a pin that drops them would
	// install less than was asked for.
	display := r.Name
	if len(r.Extras) > 0 {
		display += "[" + strings.Join(r.Extras, ",") + "]"
	}
	how := "pin one of them exactly, as " + exampleReviewed(language, display, versions[0])
	return &BlockedError{Request: r.Raw, Rule: PolicyReviewed, Message: fmt.Sprintf(
		"%s asks for a version of %s that is not reviewed on this host (reviewed: %s): %s", r.Raw, r.Name, listEntries(pairs), how)}
}

// exactPin returns the one version a constraint pins: "==1.2" or "===1.2" in
// Python, "1.2.3" or "=1.2.3" (also "= 1.2.3") in npm.
func exactPin(language, constraint string) (string, bool) {
	c := strings.TrimSpace(constraint)
	if language == languagePython {
		if strings.Contains(c, ",") || strings.HasSuffix(c, ".*") {
			return "", false
		}
		for _, op := range []string{"===", "=="} {
			if v, ok := strings.CutPrefix(c, op); ok {
				return strings.TrimSpace(v), true
			}
		}
		return "", false
	}
	c = strings.TrimSpace(strings.TrimPrefix(c, "="))
	if !isExactSemver(c) {
		return "", false
	}
	return c, true
}

// sameVersion compares two versions as the language does, for the exact pins
// the reviewed mode admits: PEP 440 equality for Python ("1.2" is "1.2.0",
// "1.0alpha1" is "1.0a1"), exact semver equality for npm (build metadata
// aside).
func sameVersion(language, a, b string) bool {
	if language == languagePython {
		return samePEP440(a, b)
	}
	return sameSemver(a, b)
}

func exampleReviewed(language, name, version string) string {
	if language == languagePython {
		return name + "==" + version
	}
	return name + "@" + version
}

func listEntries(entries []string) string {
	if len(entries) <= maxListedEntries {
		return strings.Join(entries, ", ")
	}
	return strings.Join(entries[:maxListedEntries], ", ") + fmt.Sprintf(" and %d more", len(entries)-maxListedEntries)
}

// CheckResolved applies the policy to what an install resolved, dependencies
// included (a layer's Manifest.Packages), and returns the first refusal as a
// *BlockedError. Check, on the requests, runs before anything is fetched, but
// it can't see dependencies:
//   - "deny": a denied package is refused as a dependency too;
//   - "reviewed": every installed package must be a reviewed pair, as only
//     reviewed versions may be installed;
//   - "allow" admits the dependencies of allowed requests: the list names what
//     runs may ask for, not every package those pull in.
//
// The supervisor runs it on each lease's manifest (a layer stays cached when
// the policy changes) and releases the lease of a refused one.
func (p PolicyConfig) CheckResolved(language string, pkgs []Resolved) error {
	switch p.Mode {
	case PolicyDeny, PolicyReviewed:
	default:
		return nil
	}
	for _, r := range pkgs {
		if r.Source != "" && p.Mode == PolicyReviewed {
			return &BlockedError{Rule: PolicyReviewed, Message: fmt.Sprintf(
				"%s, %s, was installed from %s, not from the registry, which this host's reviewed pairs can't name: request versions whose dependencies all come from the registry",
				exampleReviewed(language, r.Name, r.Version), requiredOf(r), text.Clip(r.Source, 200))}
		}
		if err := p.checkResolved(language, r, r.Name); err != nil {
			return err
		}
		// deny refuses a package by any of its names; reviewed pairs are
		// the registry's, its Name, which an alias ("string-width-cjs":
		// "npm:string-width@^4") is not.
		if p.Mode == PolicyDeny {
			for _, alias := range r.Aliases {
				if err := p.checkResolved(language, r, alias); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// exactOfLocalBuild returns, for a Python version with a local label
// ("1.0+cpu") whose public version is one of the reviewed versions, that
// public version as pip's "===" compares it ("1.0"), and true. The spelling
// is the installed version's, the index's, since === compares spellings:
// "1.0.0" is not "1.0" to it.
func exactOfLocalBuild(language, version string, reviewed []string) (string, bool) {
	public, _, local := strings.Cut(version, "+")
	if language != languagePython || !local {
		return "", false
	}
	exact, ok := normalPEP440(public)
	if !ok || !slices.ContainsFunc(reviewed, func(v string) bool { return samePEP440(v, public) }) {
		return "", false
	}
	return exact, true
}

// requestedName is the name of the request raw, normalised, with its extras,
// for advice to request it otherwise: a pin that drops them would install
// less than was asked for. name when raw does not parse.
func requestedName(language, raw, name string) string {
	reqs, err := ParseRequests(language, []string{raw})
	if err != nil || len(reqs) != 1 || len(reqs[0].Extras) == 0 {
		return name
	}
	return reqs[0].Name + "[" + strings.Join(reqs[0].Extras, ",") + "]"
}

// requiredOf words what pulled r in: the request it satisfies, or the
// requests whose dependency it is.
func requiredOf(r Resolved) string {
	switch {
	case r.Request != "":
		return "which " + r.Request + " resolved to"
	case len(r.RequiredBy) > 0:
		return "a dependency of " + requestList(r.RequiredBy)
	}
	return "a dependency the install resolved"
}

// checkResolved is CheckResolved's check of r by one of its names.
func (p PolicyConfig) checkResolved(language string, r Resolved, name string) error {
	pin := exampleReviewed(language, name, r.Version)
	constraint := r.Version
	if language == languagePython {
		constraint = "==" + r.Version
	}
	name = normaliseName(language, name)
	req := Request{Raw: pin, Name: name, Constraint: constraint}
	err := p.check(language, req)
	var b *BlockedError
	if !errors.As(err, &b) {
		return nil
	}
	if r.Request != "" {
		b.Request = r.Request
	}
	what := fmt.Sprintf("%s, %s,", pin, requiredOf(r))
	// What to request instead: other packages, or other versions of
	// the requests that pulled it in, when they are known.
	others, otherVersions := "request packages", "request versions"
	if r.Request == "" && len(r.RequiredBy) > 0 {
		others = "request versions of " + requestList(r.RequiredBy)
		otherVersions = others
	}
	if p.Mode == PolicyDeny {
		b.Message = fmt.Sprintf("%s is refused by this host's deny list (entry %s)", what, strings.TrimPrefix(b.Rule, PolicyDeny+":"))
		if len(r.RequiredBy) > 0 && r.Request == "" {
			b.Message += fmt.Sprintf(": %s that do not depend on it, or other packages", others)
		}
		return b
	}
	versions, pairs := p.reviewedOf(language, name)
	exact, local := exactOfLocalBuild(language, r.Version, versions)
	switch {
	case local && r.Request != "":
		// The request pinned a reviewed version with ==, which PEP 440
		// matches to its local builds, and pip took one, as it will each
		// time the index has one: only === holds pip to the version
		// itself.
		b.Message = fmt.Sprintf("%s is not a reviewed version on this host (reviewed: %s), which installs only reviewed name and version pairs: pip's == matches a version's local builds too (PEP 440) and took %s; request %s, which matches %s alone",
			what, listEntries(pairs), r.Version, requestedName(language, r.Request, name)+"==="+exact, exact)
	case local:
		b.Message = fmt.Sprintf("%s is not a reviewed version on this host (reviewed: %s), which installs only reviewed name and version pairs: add it to the requests as %s (pip's == matches a version's local builds too, PEP 440, and took %s), or %s whose dependencies are reviewed",
			what, listEntries(pairs), name+"==="+exact, r.Version, otherVersions)
	case len(versions) == 0:
		b.Message = fmt.Sprintf("%s has no reviewed version on this host, which installs only reviewed name and version pairs: %s whose dependencies are all reviewed here", what, others)
	case r.Request != "":
		// The request's package is another version than those reviewed,
		// and not a local build of one (above).
		b.Message = fmt.Sprintf("%s is not a reviewed version on this host (reviewed: %s), which installs only reviewed name and version pairs", what, listEntries(pairs))
	default:
		b.Message = fmt.Sprintf("%s is not a reviewed version on this host (reviewed: %s), which installs only reviewed name and version pairs: add a reviewed version of it to the requests, as %s, or %s whose dependencies are reviewed",
			what, listEntries(pairs), exampleReviewed(language, name, versions[0]), otherVersions)
	}
	return b
}
