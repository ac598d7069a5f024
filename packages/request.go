package packages

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/brig-sandbox/brig/api"
)

// Bounds of one request, in Unicode code points: API.md's, which api owns.
const (
	minRequestChars = api.MinPackageChars
	maxRequestChars = api.MaxPackageChars
)

// The languages a request can be for, as api spells them.
const (
	languagePython     = string(api.Python)
	languageJavaScript = string(api.JavaScript)
)

// Request is one parsed package request.
type Request struct {
	Raw string // as the run asked, unchanged
	// Name is normalised: Python per PEP 503 (lower case, runs of -_. become -);
	// npm names as written, as npm compares them, scope included ("@types/node";
	// new npm names are lower case, a few legacy ones such as "JSONStream" are
	// not).
	Name string
	// Extras are the Python extras, lower-cased and sorted; nil for npm. Not
	// normalised as Name is (PEP 685): pip up to 23 lower-cases a requested
	// extra and compares it with the package's own spelling (safe_extra), so
	// "foo_bar" and "foo-bar" install different things where a package
	// provides one of them, and two requests that share a layer must not.
	Extras []string
	// Constraint is the version constraint as written after the name and extras
	// ("==1.26.4", ">=2,<3", "^4.17.0", "*", "20"), without PEP 508's optional
	// parentheses ("numpy (>=1.26)" has ">=1.26").
	Constraint string
}

// RequestError is what ParseRequest and ParseRequests return for a request that
// can't be accepted. Callers tell it apart with errors.As; Message is the sentence
// for the API's error body.
type RequestError struct {
	Index   int    // position in the list given to ParseRequests; -1 from ParseRequest
	Request string // the request as given
	Message string // what is wrong and how to write it instead
}

func (e *RequestError) Error() string {
	if e.Index < 0 {
		return e.Message
	}
	return fmt.Sprintf("packages[%d]: %s", e.Index, e.Message)
}

// refuse is the error for request s, with a message that says how to write it.
func refuse(s, format string, args ...any) error {
	return &RequestError{Index: -1, Request: s, Message: fmt.Sprintf(format, args...)}
}

// ParseRequest parses one request of the given language ("python" or
// "javascript"). A request brig can't accept is a *RequestError; an unknown
// language is a plain error (the caller validates the language first).
func ParseRequest(language string, s string) (Request, error) {
	var (
		r   Request
		err error
	)
	switch language {
	case languagePython:
		r, err = parsePython(s)
	case languageJavaScript:
		r, err = parseJavaScript(s)
	default:
		return Request{}, fmt.Errorf("parsing package request %q: unknown language %q (want %s or %s)", s, language, languagePython, languageJavaScript)
	}
	if err != nil {
		return Request{}, err
	}
	r.Raw = s
	return r, nil
}

// ParseRequests parses a list; it refuses duplicates of the same normalised name,
// and the error names the index.
func ParseRequests(language string, list []string) ([]Request, error) {
	reqs := make([]Request, 0, len(list))
	seen := make(map[string]int, len(list)) // normalised name -> index of its request
	for i, s := range list {
		r, err := ParseRequest(language, s)
		var rerr *RequestError
		if errors.As(err, &rerr) {
			rerr.Index = i
			return nil, rerr
		}
		if err != nil {
			return nil, err
		}
		if j, ok := seen[r.Name]; ok {
			example := "pandas>=2,<3"
			if language == languageJavaScript {
				example = "lodash@>=4 <5"
			}
			return nil, &RequestError{Index: i, Request: s, Message: fmt.Sprintf(
				"%q asks for %s again (packages[%d] is %q): request each package once, with all its constraints in one request, such as %s",
				s, r.Name, j, list[j], example)}
		}
		seen[r.Name] = i
		reqs = append(reqs, r)
	}
	return reqs, nil
}

// checkCommon holds the checks both languages share; example is a well-formed
// request of the language, for the messages.
func checkCommon(s, example string) error {
	if n := utf8.RuneCountInString(s); n < minRequestChars || n > maxRequestChars {
		return refuse(s, "%q is %d characters long: a package request is %d to %d characters, such as %s",
			s, n, minRequestChars, maxRequestChars, example)
	}
	if !utf8.ValidString(s) {
		return refuse(s, "%q is not valid UTF-8: write a package request such as %s", s, example)
	}
	for _, c := range s {
		if unicode.IsControl(c) {
			return refuse(s, "%q has a control character (%U): write the request on one line, without tabs, such as %s", s, c, example)
		}
	}
	trimmed := strings.TrimSpace(s)
	switch {
	case trimmed == "":
		return refuse(s, "the package request is blank: give a package with a version constraint, such as %s", example)
	case strings.HasPrefix(trimmed, "-"):
		return refuse(s, "%q is an installer option, which brig does not take: give only package requests, such as %s", s, example)
	case trimmed != s:
		return refuse(s, "%q has spaces at its start or end: write it as %q", s, trimmed)
	}
	return nil
}

// lazyRegexp compiles expr on first use. Every sandbox's init is this binary
// re-executed, and pays for each package-level initialisation: compiling these
// at start cost it 0.2 ms.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// Python: a PEP 508 requirement cut down to name, extras and a PEP 440 specifier.

var (
	// pyNameRE is PEP 508's name.
	pyNameRE = lazyRegexp(`^(?i:[a-z0-9]|[a-z0-9][a-z0-9._-]*[a-z0-9])$`)
	// pySeparatorsRE is what PEP 503 folds into one "-".
	pySeparatorsRE = lazyRegexp(`[-_.]+`)

	// The version patterns of PEP 440's specifiers, after the `packaging` library's
	// Specifier regex. A local version ("+cpu") is checked apart: PEP 440 admits
	// it after == and != only.
	pyVersionRE    = lazyRegexp(`^(?i:` + pep440Release + `(?:\.[0-9]+)*` + pep440Suffixes + `)$`)
	pyLocalRE      = lazyRegexp(`^(?i:[a-z0-9]+(?:[-_.][a-z0-9]+)*)$`)
	pyCompatibleRE = lazyRegexp(`^(?i:` + pep440Release + `(?:\.[0-9]+)+` + pep440Suffixes + `)$`)
	pyWildcardRE   = lazyRegexp(`^(?i:` + pep440Release + `(?:\.[0-9]+)*\.\*)$`)
)

const (
	// pep440Release is the optional "v" and epoch and the release's first number.
	pep440Release = `v?(?:[0-9]+!)?[0-9]+`
	// pep440Suffixes are the optional pre-, post- and dev-release parts.
	pep440Suffixes = `(?:[-_.]?(?:alpha|beta|preview|pre|a|b|c|rc)[-_.]?[0-9]*)?` +
		`(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?` +
		`(?:[-_.]?dev[-_.]?[0-9]*)?`
)

// pyOperators are PEP 440's comparison operators, longest first so that a prefix
// match finds the whole operator.
var pyOperators = []string{"===", "==", "!=", "<=", ">=", "~=", "<", ">"}

const pyExample = "numpy==1.26.4"

// normalisePython is PEP 503's normalised name (PEP 685 for extras).
func normalisePython(name string) string {
	return pySeparatorsRE().ReplaceAllString(strings.ToLower(name), "-")
}

// pyPin is the message's hint for name (as written) without a usable constraint.
func pyPin(name string) string {
	return fmt.Sprintf("pin it as %s==VERSION, with the exact version you need, or leave it open as %s>=0", name, name)
}

func isPyNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

func parsePython(s string) (Request, error) {
	if err := checkCommon(s, pyExample); err != nil {
		return Request{}, err
	}
	// Sources other than the index first: they hold characters that would make
	// the name's message below misleading.
	if at := strings.IndexByte(s, '@'); at >= 0 || strings.Contains(s, "://") || strings.HasPrefix(strings.ToLower(s), "git+") {
		example := pyExample
		// npm's syntax for a Python run (a version or range after the "@", no
		// URL): say so, with pip's spelling.
		if at == 0 && !strings.Contains(s, "://") {
			return Request{}, refuse(s, "%q is a scoped npm package: a Python run's packages are pip's, written name==version, such as %s (an npm package needs a javascript run)", s, pyExample)
		}
		if at > 0 {
			if name := strings.TrimSpace(s[:at]); pyNameRE().MatchString(name) {
				example = name + "==1.0.0"
				if v := strings.TrimSpace(s[at+1:]); v != "" && strings.Trim(v, "0123456789.") == "" {
					return Request{}, refuse(s, "%q is written as for npm; a Python run's packages are pip's, written name==version, such as %s==%s", s, name, v)
				} else if v != "" && !strings.ContainsAny(v, ":/") {
					return Request{}, refuse(s, "%q is written as for npm; a Python run's packages are pip's, written name==version: %s", s, pyPin(name))
				}
			}
		}
		return Request{}, refuse(s, "%q is a URL or a direct reference: brig installs from the package index only; give the name with a version constraint, such as %s", s, example)
	}
	if semi := strings.IndexByte(s, ';'); semi >= 0 {
		if lb := strings.IndexByte(s[:semi], '['); lb >= 0 && !strings.Contains(s[lb:semi], "]") {
			return Request{}, refuse(s, "%q has a \";\" inside its extras: extras are names separated by commas, as in httpx[http2,brotli]==0.27.0", s)
		}
		example := strings.TrimSpace(s[:semi])
		if example == "" {
			example = pyExample
		}
		return Request{}, refuse(s, "%q has an environment marker, which brig does not take (a run's interpreter is known, so the marker decides nothing): drop everything from the \";\", as in %s", s, example)
	}
	if strings.ContainsAny(s, `/\`) {
		return Request{}, refuse(s, "%q is a path: brig installs from the package index only; give a name with a version constraint, such as %s", s, pyExample)
	}

	i := 0
	for i < len(s) && isPyNameByte(s[i]) {
		i++
	}
	name := s[:i]
	if name == "" {
		return Request{}, refuse(s, "%q does not start with a package name: a request is a name and a version constraint, such as %s", s, pyExample)
	}
	if !pyNameRE().MatchString(name) {
		return Request{}, refuse(s, "%q is not a valid package name: names are letters, digits, \".\", \"_\" and \"-\", and start and end with a letter or digit", name)
	}
	after := s[i:]
	rest := strings.TrimLeft(after, " ")
	if rest != "" {
		spaced := len(rest) < len(after)
		switch c := rest[0]; {
		case spaced && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'):
			return Request{}, refuse(s, "%q has a space inside the package name: write the name without spaces, then the constraint, such as %s", s, pyExample)
		case !spaced && !strings.ContainsRune("[=!<>~(", rune(c)):
			r, _ := utf8.DecodeRuneInString(rest)
			return Request{}, refuse(s, "%q has %q after the name %q: names are ASCII letters, digits, \".\", \"_\" and \"-\", followed by optional [extras] and a version constraint, such as httpx[http2]==0.27.0", s, r, name)
		}
	}

	var extras []string
	display := name // the name and extras as written, for the messages
	if strings.HasPrefix(rest, "[") {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return Request{}, refuse(s, "%q has no \"]\" closing its extras: write them as in httpx[http2]==0.27.0", s)
		}
		var err error
		if extras, err = parseExtras(s, rest[1:end]); err != nil {
			return Request{}, err
		}
		display = s[:len(s)-len(rest)+end+1]
		rest = strings.TrimLeft(rest[end+1:], " ")
	}

	// PEP 508 allows the specifiers in parentheses: "numpy (>=1.26)".
	if inner, ok := strings.CutPrefix(rest, "("); ok {
		inner, ok = strings.CutSuffix(inner, ")")
		if !ok {
			return Request{}, refuse(s, "%q has no \")\" closing its version constraint: write it as %s (>=1.0.0), or without the parentheses, as %s>=1.0.0", s, display, display)
		}
		rest = strings.Trim(inner, " ")
	}
	if rest == "" {
		return Request{}, refuse(s, "%q has no version constraint, which brig requires: %s", s, pyPin(display))
	}
	if err := checkSpecifiers(s, display, rest); err != nil {
		return Request{}, err
	}
	return Request{Name: normalisePython(name), Extras: extras, Constraint: rest}, nil
}

// parseExtras parses what is between "[" and "]": names separated by commas.
func parseExtras(s, list string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil // PEP 508 allows "name[]"
	}
	seen := make(map[string]bool)
	var extras []string
	for _, e := range strings.Split(list, ",") {
		e = strings.Trim(e, " ")
		if !pyNameRE().MatchString(e) {
			return nil, refuse(s, "%q has an invalid extra %q: extras are names separated by commas, as in httpx[http2]==0.27.0", s, e)
		}
		if n := strings.ToLower(e); !seen[n] {
			seen[n] = true
			extras = append(extras, n)
		}
	}
	sort.Strings(extras)
	return extras, nil
}

// checkSpecifiers checks a PEP 440 specifier list: clauses of an operator and a
// version, separated by commas. display is the name and extras, for the messages.
func checkSpecifiers(s, display, spec string) error {
	for _, clause := range strings.Split(spec, ",") {
		clause = strings.Trim(clause, " ")
		if clause == "" {
			return refuse(s, "%q has an empty clause in its version constraint: separate clauses with single commas, as in pandas>=2,<3", s)
		}
		op := ""
		for _, o := range pyOperators {
			if strings.HasPrefix(clause, o) {
				op = o
				break
			}
		}
		if op == "" {
			switch c := clause[0]; {
			case c == '=':
				return refuse(s, "%q uses \"=\": an exact version takes \"==\", as in %s==1.0.0", s, display)
			case c >= '0' && c <= '9':
				return refuse(s, "%q has a version without an operator: write %s==%s, or another PEP 440 operator (>=, <, ~=, !=)", s, display, clause)
			}
			return refuse(s, "%q has %q where a version constraint belongs: %s", s, clause, pyPin(display))
		}
		v := strings.TrimLeft(clause[len(op):], " ")
		release, local, isLocal := strings.Cut(v, "+")
		switch {
		case v == "":
			return refuse(s, "%q has %q without a version: write it as in %s%s1.0.0", s, op, display, op)
		case strings.Contains(v, " "):
			return refuse(s, "%q has a space inside the version %q: write each clause as an operator and one version, as in pandas>=2,<3", s, v)
		case op == "===":
			// Arbitrary equality compares strings; keep them to visible ASCII so
			// that they pass to the installer unchanged.
			for _, c := range v {
				if c <= ' ' || c > '~' {
					return refuse(s, "%q has %q after \"===\": its version must be visible ASCII characters only, as in %s===1.0.0", s, v, display)
				}
			}
		case strings.HasSuffix(v, ".*"):
			if op != "==" && op != "!=" {
				return refuse(s, "%q uses \".*\" with %q: a wildcard goes with == or != only, as in %s==1.26.*", s, op, display)
			}
			if !pyWildcardRE().MatchString(v) {
				return refuse(s, "%q has %q, which is not a PEP 440 wildcard: write release numbers then \".*\", as in %s==1.26.*", s, v, display)
			}
		case isLocal && op != "==" && op != "!=":
			return refuse(s, "%q has the local version %q after %q: PEP 440 allows a local version (+label) only after == or !=, as in %s==%s", s, v, op, display, v)
		case isLocal:
			if !pyVersionRE().MatchString(release) || !pyLocalRE().MatchString(local) {
				return refuse(s, "%q has %q, which is not a PEP 440 version: a local version is a version, \"+\" and a label of letters and digits separated by \".\", as in torch==2.1.0+cpu", s, v)
			}
		case op == "~=" && pyVersionRE().MatchString(v) && !pyCompatibleRE().MatchString(v):
			return refuse(s, "%q uses \"~=\" with one release number: ~= needs at least two, as in %s~=2.31", s, display)
		case !pyVersionRE().MatchString(v):
			return refuse(s, "%q has %q, which is not a PEP 440 version: write versions like 1.26.4, 2.0rc1 or 1.0.post1", s, v)
		}
	}
	return nil
}

// JavaScript: name@range in npm's syntax.

var (
	// npmNamePartRE is the rule validate-npm-package-name applies to a
	// package's name and to its scope: URL-safe, not starting with "." or "_".
	// Upper case is checked apart: the registry holds legacy names with
	// capitals ("JSONStream"), never a scoped one.
	npmNamePartRE = lazyRegexp(`^[A-Za-z0-9~-][A-Za-z0-9._~-]*$`)
	// npmTagRE is what a dist-tag ("latest", "next", "beta") looks like.
	npmTagRE = lazyRegexp(`^[A-Za-z][A-Za-z0-9._-]*$`)
)

const (
	npmExample      = "lodash@^4.17.0"
	npmRangeExample = "4.17.21, ^4.17.0, ~1.2, >=1 <2, 1.x, 1.2.3 - 2.3.4 or *"
)

// npmPin is the message's hint for name (as written) without a usable range.
func npmPin(name string) string {
	return fmt.Sprintf("pin it as %s@VERSION, with the exact version you need, or leave it open as %s@*", name, name)
}

func parseJavaScript(s string) (Request, error) {
	if err := checkCommon(s, npmExample); err != nil {
		return Request{}, err
	}
	// Sources other than the registry first: npm would take them, brig does not.
	lower := strings.ToLower(s)
	switch {
	case strings.Contains(lower, "npm:"):
		return Request{}, refuse(s, "%q is an npm alias (npm:): brig does not take aliases; request the package under its own name, such as %s", s, npmExample)
	case strings.HasPrefix(lower, "git@") || strings.Contains(lower, "git+") || strings.Contains(lower, "git:") ||
		strings.Contains(lower, "github:") || strings.Contains(lower, "gitlab:") ||
		strings.Contains(lower, "bitbucket:") || strings.Contains(lower, "gist:"):
		return Request{}, refuse(s, "%q is a git source: brig installs from the npm registry only; give name@range, such as %s", s, npmExample)
	case strings.Contains(lower, "://"):
		return Request{}, refuse(s, "%q is a URL: brig installs from the npm registry only; give name@range, such as %s", s, npmExample)
	case strings.Contains(lower, "file:") || strings.HasPrefix(s, "./") || strings.HasPrefix(s, "../") ||
		strings.HasPrefix(s, "/") || strings.HasPrefix(s, "~/") || strings.Contains(s, `\`):
		return Request{}, refuse(s, "%q is a path: brig installs from the npm registry only; give name@range, such as %s", s, npmExample)
	case strings.HasSuffix(lower, ".tgz") || strings.HasSuffix(lower, ".tar.gz") || strings.HasSuffix(lower, ".tar"):
		return Request{}, refuse(s, "%q is a tarball: brig installs from the npm registry only; give name@range, such as %s", s, npmExample)
	case strings.Contains(s, ":"):
		return Request{}, refuse(s, "%q has a \":\", which neither a package name nor a version range holds: give name@range, such as %s", s, npmExample)
	}
	// pip's syntax for a JavaScript run: say so, with the npm spelling.
	if i := strings.IndexAny(s, "=<>!~"); i > 0 && !strings.Contains(s, "@") {
		if name := strings.TrimSpace(s[:i]); npmNamePartRE().MatchString(name) {
			return Request{}, refuse(s, "%q is written as for pip; a JavaScript run's packages are npm's, written name@range, such as %s@%s", s, name, npmRangeOf(s[i:]))
		}
	}

	// The range follows the last "@" that is not a scope's leading one.
	at := strings.LastIndexByte(s, '@')
	if at <= 0 {
		if err := checkNpmName(s, s, "1.0.0"); err != nil {
			return Request{}, err
		}
		return Request{}, refuse(s, "%q has no version range, which brig requires: %s", s, npmPin(s))
	}
	if strings.Contains(s[1:at], "@") {
		// "lodash@1@2": read at the last "@", the name would be "lodash@1".
		return Request{}, refuse(s, "%q has \"@\" more than once after its name: write the name and one range, such as %s", s, npmExample)
	}
	name, rng := s[:at], s[at+1:]
	if err := checkNpmName(s, name, rng); err != nil {
		return Request{}, err
	}
	switch {
	case rng == "":
		return Request{}, refuse(s, "%q has an empty version range after \"@\": %s", s, npmPin(name))
	case validRange(rng):
	case strings.HasPrefix(rng, "v") && validRange(rng[1:]):
		return Request{}, refuse(s, "%q writes the version with a \"v\", which npm ignores and brig does not take: write it without, as %s@%s", s, name, rng[1:])
	case strings.Contains(rng, "~>") && validRange(strings.ReplaceAll(rng, "~>", "~")):
		return Request{}, refuse(s, "%q uses \"~>\", which npm reads as \"~\" and brig does not take: write it with \"~\", as %s@%s", s, name, strings.ReplaceAll(rng, "~>", "~"))
	case npmTagRE().MatchString(rng):
		return Request{}, refuse(s, "%q asks for the dist-tag %q, and a tag is not a version constraint: %s", s, rng, npmPin(name))
	case strings.Contains(rng, "/"):
		return Request{}, refuse(s, "%q has %q, a git source or a path, after \"@\": brig installs from the npm registry only; %s", s, rng, npmPin(name))
	default:
		return Request{}, refuse(s, "%q has %q, which is not an npm version range: write it like %s", s, rng, npmRangeExample)
	}
	return Request{Name: name, Constraint: rng}, nil
}

// checkNpmName checks an npm package name, scoped or not; rng is the range as
// written, for the messages. The name can't exceed npm's 214 characters: the
// whole request is at most that.
func checkNpmName(s, name, rng string) error {
	pkg := name
	if strings.HasPrefix(name, "@") {
		scope, p, ok := strings.Cut(name[1:], "/")
		if !ok {
			return refuse(s, "%q has a scope without a package: write @scope/name@range, such as @types/node@20", s)
		}
		// Scopes came after npm made new names lower case: no scoped name
		// has capitals. (Unscoped legacy names may: "JSONStream".)
		if lower := strings.ToLower(name); lower != name {
			return refuse(s, "%q has upper case letters, which no scoped npm name has: scopes and scoped names are lower case; if you meant %s, write %s@%s", s, lower, lower, rng)
		}
		if !npmNamePartRE().MatchString(scope) {
			return refuse(s, "%q has an invalid scope %q: scopes, like names, are lower case letters, digits, \"-\", \".\", \"_\" and \"~\", and do not start with \".\" or \"_\"", s, scope)
		}
		pkg = p
	} else if strings.Contains(name, "/") {
		return refuse(s, "%q looks like a GitHub repository (user/repo): brig installs from the npm registry only; give name@range, such as %s", s, npmExample)
	}
	if !npmNamePartRE().MatchString(pkg) {
		return refuse(s, "%q is not a valid npm package name: names are letters (lower case, but for a few older packages), digits, \"-\", \".\", \"_\" and \"~\", and do not start with \".\" or \"_\"", name)
	}
	if lower := strings.ToLower(name); lower == "node_modules" || lower == "favicon.ico" {
		return refuse(s, "%q is a name npm does not allow: give a package of the registry, such as %s", name, npmExample)
	}
	return nil
}

// validRange reports whether r is a version range in npm's syntax: node-semver's
// grammar (range-set, hyphen, simple, partial, qualifier), strictly: no "v"
// prefix, no "~>". Spaces between an operator and its version (">= 1.2") are
// taken, as node-semver takes them (npmComparators).
//
// It is written here because no library fits: Masterminds/semver, the usual Go
// choice, has its own constraint syntax (commas for "and", "||" spacing, "v"
// prefixes, ranges npm refuses), so it would accept requests npm refuses and the
// other way round; and this check needs no new dependency.
func validRange(r string) bool {
	for _, set := range strings.Split(r, "||") {
		fields := npmComparators(set)
		if len(fields) == 0 {
			return false // "1 || " and the like: node-semver reads it as "*", which is surely not meant
		}
		if len(fields) == 3 && fields[1] == "-" {
			if !validPartial(fields[0]) || !validPartial(fields[2]) {
				return false
			}
			continue
		}
		for _, f := range fields {
			if !validComparator(f) {
				return false
			}
		}
	}
	return true
}

// npmOperators are the comparator and range operators, longest first.
var npmOperators = []string{">=", "<=", ">", "<", "=", "~", "^"}

// npmComparators splits one set of a range (between "||") into its fields,
// an operator written apart from its version joined to it: node-semver reads
// ">= 1.2.3 < 2" as ">=1.2.3 <2" (its comparator, tilde and caret trims). Only
// " " separates: tabs and other spaces are refused earlier or left in a field,
// which then fails its check.
func npmComparators(set string) []string {
	var fields []string
	pending := "" // an operator waiting for its version
	for _, f := range strings.Split(set, " ") {
		switch {
		case f == "":
		case slices.Contains(npmOperators, f) && pending == "":
			pending = f
		default:
			fields = append(fields, pending+f)
			pending = ""
		}
	}
	if pending != "" {
		fields = append(fields, pending) // an operator with no version: refused
	}
	return fields
}

func validComparator(c string) bool {
	for _, op := range npmOperators {
		if strings.HasPrefix(c, op) {
			return validPartial(c[len(op):])
		}
	}
	return validPartial(c)
}

// validPartial reports whether p is 1 to 3 dot-separated numbers or x/X/*, with a
// -prerelease and a +build allowed after three of them.
func validPartial(p string) bool {
	p, build, hasBuild := strings.Cut(p, "+")
	p, pre, hasPre := strings.Cut(p, "-")
	parts := strings.Split(p, ".")
	if len(parts) > 3 || (hasPre || hasBuild) && len(parts) != 3 {
		return false
	}
	for _, part := range parts {
		if part != "x" && part != "X" && part != "*" && !isSemverNumber(part) {
			return false
		}
	}
	if hasPre && !validIdentifiers(pre, true) {
		return false
	}
	if hasBuild && !validIdentifiers(build, false) {
		return false
	}
	return true
}

// isSemverNumber is node-semver's numeric identifier: no leading zero, and at
// most 16 digits (its MAX_SAFE_COMPONENT_LENGTH).
func isSemverNumber(s string) bool {
	if s == "" || len(s) > 16 || len(s) > 1 && s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// validIdentifiers reports whether s is dot-separated identifiers of
// [0-9A-Za-z-]; in a prerelease, an all-digit identifier has no leading zero.
func validIdentifiers(s string, prerelease bool) bool {
	for _, id := range strings.Split(s, ".") {
		if id == "" {
			return false
		}
		numeric := true
		for i := 0; i < len(id); i++ {
			c := id[i]
			switch {
			case c >= '0' && c <= '9':
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '-':
				numeric = false
			default:
				return false
			}
		}
		if prerelease && numeric && len(id) > 1 && id[0] == '0' {
			return false
		}
	}
	return true
}

// npmRangeOf is the npm range that means what pip's version constraint c
// means, as far as a hint needs: == a version, >= and the like as they are,
// ~= as ^, clauses joined by spaces; "1.0.0" for what has no such spelling.
func npmRangeOf(c string) string {
	var clauses []string
	for _, cl := range strings.Split(c, ",") {
		cl = strings.TrimSpace(cl)
		j := strings.IndexFunc(cl, func(r rune) bool { return !strings.ContainsRune("=<>!~", r) })
		if j <= 0 {
			return "1.0.0"
		}
		op, v := cl[:j], strings.TrimSpace(cl[j:])
		if v == "" || strings.Trim(v, "0123456789.*") != "" {
			return "1.0.0"
		}
		switch op {
		case "==", "===":
			if v = strings.TrimSuffix(strings.TrimSuffix(v, "*"), "."); v == "" {
				v = "*"
			}
			clauses = append(clauses, v)
		case ">=", "<=", ">", "<":
			clauses = append(clauses, op+v)
		case "~=":
			// ~=A.B is >=A.B and ==A.*; ~=A.B.C is >=A.B.C and ==A.B.*,
			// which is npm's ~A.B.C.
			parts := strings.Split(v, ".")
			major, err := strconv.Atoi(parts[0])
			switch {
			case strings.Contains(v, "*") || err != nil || len(parts) < 2:
				return "1.0.0"
			case len(parts) == 2:
				clauses = append(clauses, fmt.Sprintf(">=%s <%d", v, major+1))
			default:
				clauses = append(clauses, "~"+v)
			}
		default:
			return "1.0.0"
		}
	}
	return strings.Join(clauses, " ")
}
