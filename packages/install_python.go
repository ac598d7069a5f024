package packages

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/brig-sandbox/brig/internal/text"
)

// pythonDriverSource is the program the Python installer's jail runs: pip,
// in process, with args, its output sent to stderr (the progress) and
// watched for its error lines, then one result line on stdout with what pip's
// --report says it installed. %s is the base64 of the JSON of args, so that no
// request or URL is ever read as Python.
//
// With source builds off, pip's --only-binary holds the index's candidates to
// wheels, but not a dependency given by URL (PEP 508's "name @ url", which a
// private index or a mirror may serve): pip downloads it and, for a source
// archive, runs its build backend, the package's own code, inside the
// installer, which could then rewrite the report the layer's manifest and the
// policy's check of the dependencies are read from. The driver refuses every
// link pip would prepare that is not a wheel, before it is fetched
// (TestInstallPythonUnavailable, "a dependency by URL"), and refuses to run a
// pip it can't hold so.
//
// pip logs an index page it could not fetch only at debug level, and then
// says "no matching distribution" whether the project is unknown (a 404) or
// the index did not answer; the driver listens to that one logger (by its
// module's name) to tell the two apart.
const pythonDriverSource = `import base64, collections, json, logging, os, platform, runpy, shutil, sys, tempfile

ARGS = json.loads(base64.b64decode('%s'))
REPORT = %q
MARKER = %q
PIP_TMP = %q
WHEELS_ONLY = '--only-binary=:all:' in ARGS

# pip's --target unpacks the whole set into a temporary folder, then moves it
# into the layer: on the jail's /tmp, a tmpfs of half the installer's memory,
# a set larger than that never installed. Its temporary folders are in the
# layer's own mount instead, on the cache's disk, where the move is a rename
# and the layer's size bound watches the unpack.
os.makedirs(PIP_TMP, exist_ok=True)
os.environ['TMPDIR'] = PIP_TMP
tempfile.tempdir = None


def wheels_only():
    from pip._internal.exceptions import InstallationError
    from pip._internal.operations.prepare import RequirementPreparer

    def guard(prepare):
        def prepare_wheel(self, req, *args, **kwargs):
            link = req.link
            if link is None or not link.is_wheel:
                where = str(link) if link is not None else 'no link'  # str redacts a password
                raise InstallationError(
                    '%%s (%%s) is not a wheel: brig installs wheels only, since building a '
                    'source archive runs the package\'s own code' %% (req.name or req, where))
            return prepare(self, req, *args, **kwargs)
        return prepare_wheel

    for name in ('prepare_linked_requirement', '_prepare_linked_requirement'):
        # A pip without them can't be held to wheels: fail, never install.
        setattr(RequirementPreparer, name, guard(getattr(RequirementPreparer, name)))


class Tee:
    """Writes through to stderr and keeps pip's error lines and last lines."""

    def __init__(self, stream):
        self.stream = stream
        self.partial = ''
        self.errors = []
        self.warnings = []
        self.discarded = []
        self.tail = collections.deque(maxlen=20)

    def write(self, s):
        n = self.stream.write(s)
        lines = (self.partial + s).split('\n')
        self.partial = lines.pop()
        for line in lines:
            line = line.rstrip()
            if not line:
                continue
            if line.startswith('ERROR:') and len(self.errors) < 20:
                self.errors.append(line[:2000])
            if line.startswith('WARNING:') and len(self.warnings) < 20:
                self.warnings.append(line[:2000])
            if line.startswith('Discarding ') and len(self.discarded) < 10:
                # A candidate pip dropped, and why (its metadata is not its
                # file name's), which its errors leave out.
                self.discarded.append(line[:2000])
            self.tail.append(line[:2000])
        return n

    def flush(self):
        self.stream.flush()

    def isatty(self):
        return False

    def __getattr__(self, name):
        return getattr(self.stream, name)


class FetchFailures(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.seen = []

    def emit(self, record):
        try:
            msg = record.getMessage()
        except Exception:
            return
        if msg.startswith('Could not fetch URL') and len(self.seen) < 10:
            self.seen.append(msg[:500])


# The result goes to a copy of stdout that no child process inherits; the
# stdout that pip and any process it starts see is stderr.
out = os.fdopen(os.dup(1), 'w')
os.dup2(2, 1)
tee = Tee(sys.stderr)
sys.stdout = sys.stderr = tee
fetch = FetchFailures()
collector = logging.getLogger('pip._internal.index.collector')
collector.setLevel(logging.DEBUG)
collector.addHandler(fetch)

sys.argv = ['pip'] + ARGS
code = 0
try:
    if WHEELS_ONLY:
        wheels_only()
    runpy.run_module('pip', run_name='__main__', alter_sys=True)
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
tee.write('\n')
shutil.rmtree(PIP_TMP, ignore_errors=True)

packages = []
if code == 0:
    with open(REPORT) as f:
        report = json.load(f)
    for item in report.get('install', []):
        meta = item.get('metadata') or {}
        archive = (item.get('download_info') or {}).get('archive_info') or {}
        hashes = archive.get('hashes') or {}
        digest = 'sha256=' + hashes['sha256'] if 'sha256' in hashes else archive.get('hash') or ''
        packages.append({'name': meta.get('name', ''), 'version': meta.get('version', ''), 'hash': digest,
                         'requires': meta.get('requires_dist') or [], 'extras': item.get('requested_extras') or []})

result = {'runtime': platform.python_version(), 'exit': code, 'packages': packages, 'errors': tee.errors, 'warnings': tee.warnings, 'tail': list(tee.tail), 'fetch_failures': fetch.seen, 'discarded': tee.discarded}
out.write(MARKER + json.dumps(result) + '\n')
out.flush()
`

// pipArgs are pip's arguments for requests from urls.
func pipArgs(reqs []Request, urls []string, allowSourceBuilds bool) []string {
	args := []string{
		"install",
		// Ignore PIP_* variables and every pip.conf: the arguments are the
		// whole configuration.
		"--isolated",
		// An importable directory, and no check of what the interpreter
		// already has (pip sets --ignore-installed with --target): the layer
		// holds every package it needs.
		"--target", pyStaging,
		"--no-cache-dir",
		"--disable-pip-version-check",
		"--no-input",
		"--no-color",
		"--progress-bar", "off",
		"--report", pyReport,
	}
	if !allowSourceBuilds {
		// No sdist, so no setup.py or build backend runs: no package code at
		// install time.
		args = append(args, "--only-binary=:all:")
	}
	for i, u := range urls {
		if i == 0 {
			args = append(args, "--index-url", u)
		} else {
			args = append(args, "--extra-index-url", u)
		}
		// pip ignores an http index unless its host is trusted; the
		// operator configured it so (a mirror on the local network, the
		// tests' stand-in).
		if p, err := url.Parse(u); err == nil && p.Scheme == "http" {
			args = append(args, "--trusted-host", p.Host)
		}
	}
	args = append(args, "--")
	// In the key's order and spelling: pip's answer can depend on both (an
	// earlier request's candidates are tried first; an extra's spelling), and
	// the layer is shared by every run of its key, whichever installed it.
	reqs = slices.SortedFunc(slices.Values(reqs), func(a, b Request) int { return strings.Compare(a.Name, b.Name) })
	for _, r := range reqs {
		args = append(args, pipRequirement(r))
	}
	return args
}

// pipRequirement is r written as its layer's key holds it (Set.Key): the
// normalised name and the extras. The constraint keeps its versions as the run
// wrote them, without spaces, for pip's messages to quote (pip compares
// versions as the key does: "==1.0" and "==1" are one constraint to both).
func pipRequirement(r Request) string {
	s := r.Name
	if len(r.Extras) > 0 {
		s += "[" + strings.Join(r.Extras, ",") + "]"
	}
	return s + strings.ReplaceAll(r.Constraint, " ", "")
}

// pythonDriver is the driver program for pip's arguments.
func pythonDriver(args []string) (string, error) {
	b, err := json.Marshal(args)
	if err != nil {
		return "", err
	}
	// %q of these ASCII constants is a valid Python string literal.
	return fmt.Sprintf(pythonDriverSource, base64.StdEncoding.EncodeToString(b), pyReport, resultMarker, pyStaging+"/"+pipTmpName), nil
}

// pythonResolved turns the driver's result into the layer's packages, or
// pip's failure into an error.
func pythonResolved(set Set, r *driverResult, allowSourceBuilds bool) ([]Resolved, error) {
	if r.Exit != 0 {
		return nil, pipError(r, allowSourceBuilds)
	}
	byName := make(map[string]string, len(set.Requests))
	for _, q := range set.Requests {
		byName[q.Name] = q.Raw
	}
	resolved := make([]Resolved, 0, len(r.Packages))
	for _, p := range r.Packages {
		name := normalisePython(p.Name)
		if name == "" || p.Version == "" {
			return nil, fmt.Errorf("the python installer reported a package without a name or version: %+v", p)
		}
		resolved = append(resolved, Resolved{Name: name, Version: p.Version, Hash: p.Hash, Request: byName[name]})
	}
	requiredBy(resolved, pythonEdges(resolved, r.Packages))
	sortResolved(resolved)
	return resolved, nil
}

var (
	// pipUnavailableRE are pip's error lines that mean a requested package or
	// version can't be had (pip 22 to 25 words them so).
	pipUnavailableRE = lazyRegexp(`^ERROR: (Could not find a version that satisfies|No matching distribution found|Cannot install .* because these package versions have conflicting dependencies|\S+ has an invalid wheel|Wheel '[^']*' located at .* is invalid|.* is not a wheel: brig installs wheels only|.* trying to install outside the target directory|.*Unknown scheme key used in)`)
	// pipDiscardedRE is pip's line (INFO, pip 21 to 25) for a candidate it
	// dropped, "Discarding <link> (from <index page>) (requires-python:...):
	// <reason>", the reason its MetadataInconsistent's "Requested x==1.0 from
	// <link> has inconsistent version: expected '1.0', but metadata has
	// '2.0'" (or name), or a later pip's MetadataInvalid.
	pipDiscardedRE = lazyRegexp(`^Discarding (\S+)(?: \([^)]*\))*: (\S.*)$`)
	// urlRE is a URL in pip's words.
	urlRE = lazyRegexp(`[A-Za-z][A-Za-z0-9+.-]*://\S+`)
	// pipNotZipRE is pip's line for a wheel that is not a zip archive (its
	// InvalidWheel, since pip 22.1), and the name it was for: the path it
	// names is the installer's temporary folder's.
	pipNotZipRE = lazyRegexp(`^ERROR: Wheel '([^']*)' located at .* is invalid\.?$`)
	// pipOutsideRE is pip's refusal of a wheel with a file whose path leaves
	// the install's folder ("../x", "/x"), and the request it was for.
	pipOutsideRE = lazyRegexp(`^ERROR: (?:For req: (\S+?)\. )?The wheel .* trying to install outside the target directory`)
	// pipVersionsRE is the list pip gives after a version it could not find.
	// pip (23.0 checked) lists yanked versions there and says nowhere which
	// they are, so the message can't either: a yanked one installs only when
	// pinned with == or ===.
	pipVersionsRE = lazyRegexp(`\(from versions: ([^)]*)\)`)
	// pipPreReleaseRE finds a pre-release or development release in pip's
	// list of versions (PEP 440's normal forms: 2.1rc1, 1.0a2, 3.0.dev1).
	pipPreReleaseRE = lazyRegexp(`\d(a|b|rc)\d+|\.dev\d+`)
	// pipNoiseRE are error lines that add nothing a model can act on.
	pipNoiseRE = lazyRegexp(`^ERROR: ResolutionImpossible: for help`)
	// pipBuildFailedRE is pip's line for a source archive whose build, or
	// its metadata's, failed. Not subprocess-exited-with-error alone, which
	// the install of the build's own dependencies ends with too, when the
	// index does not answer (the review of 2026-12-06).
	pipBuildFailedRE = lazyRegexp(`(error: (metadata-generation-failed|legacy-install-failure)|^ERROR: (Failed building wheel for|Could not build wheels for))`)
	// pipBuildDepsRE is pip's line for the install of a build's dependencies
	// that failed: the index's, or the request's, not the build's.
	pipBuildDepsRE = lazyRegexp(`install(ing)? build dependencies did not run successfully`)
)

// pipError is pip's failure: an *IndexError when the index did not answer,
// an *UnavailableError when pip says a package or version can't be found or
// resolved, else a plain error.
// lastException is the last line of a Python traceback in tail, "OSError:
// [Errno 28] No space left on device", or "".
func lastException(tail []string) string {
	for i := len(tail) - 1; i >= 0; i-- {
		l := strings.TrimSpace(tail[i])
		if pythonExceptionRE().MatchString(l) {
			return l
		}
	}
	return ""
}

// pythonExceptionRE is a traceback's last line: a builtin's name by its
// ending, or any class named by its module ("pip._vendor.packaging.
// requirements.InvalidRequirement: ...", which the packages probe of
// 2026-12-06 got as "Exception:").
var pythonExceptionRE = lazyRegexp(`^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)(: .*)?$|^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+: \S.*$`)

// pipMalformedRE is a traceback's last line that says a package's own
// metadata can't be read: its doing, not brig's.
var pipMalformedRE = lazyRegexp(`\.(InvalidRequirement|InvalidVersion|InvalidSpecifier|InvalidMetadata|InvalidWheel|InvalidMarker): `)

func pipError(r *driverResult, allowSourceBuilds bool) error {
	down := indexFailures(r.FetchFailures)
	for _, w := range r.Warnings {
		if strings.Contains(w, "is not a trusted or secure host") || strings.Contains(w, "Retrying (Retry(") {
			down = append(down, strings.TrimPrefix(w, "WARNING: "))
		}
	}
	// A download that timed out or was cut (a wheel, after its index page was
	// read) ends pip in a traceback, not a fetch failure: the registry's
	// doing too, not the request's.
	for _, l := range r.Tail {
		if strings.Contains(l, "Read timed out") || strings.Contains(l, "Connection broken") || strings.Contains(l, "IncompleteRead") {
			down = append(down, l)
			break
		}
	}
	// pip checks each download against the hash its index page gave: a
	// mismatch in a request without hashes of its own is a download cut short
	// or changed on its way, the registry's doing too.
	if slices.ContainsFunc(r.Errors, func(l string) bool { return strings.Contains(l, "DO NOT MATCH THE HASHES") }) {
		down = append(down, "a download did not match the hash its index gave (cut short, or changed on its way)")
	}
	if len(down) > 0 {
		return &IndexError{Message: "the python installer could not read the package index: " + text.Clip(strings.Join(down, " | "), maxMessage)}
	}
	unavailable := false
	var lines []string
	versions := ""
	discarded := pipDiscarded(append(slices.Clone(r.Discarded), r.Tail...))
	// pip follows "Could not find a version that satisfies the requirement
	// x" with "No matching distribution found for x": one says it all.
	notFound := slices.ContainsFunc(r.Errors, func(l string) bool { return strings.HasPrefix(l, "ERROR: Could not find a version") })
	for _, l := range r.Errors {
		if pipUnavailableRE().MatchString(l) {
			unavailable = true
		}
		if pipNoiseRE().MatchString(l) || notFound && strings.HasPrefix(l, "ERROR: No matching distribution found") {
			continue
		}
		if m := pipVersionsRE().FindStringSubmatch(l); m != nil {
			versions = m[1]
			// The versions go in the hint, trimmed to the newest.
			l = strings.TrimSpace(pipVersionsRE().ReplaceAllString(l, ""))
		}
		if m := pipNotZipRE().FindStringSubmatch(l); m != nil {
			// Worded as pip's other invalid wheels are, and answered so
			// (the probe of pip 23.0 read internal, with the temporary
			// path).
			l = m[1] + " has an invalid wheel (not a valid zip archive)"
		}
		lines = append(lines, strings.TrimPrefix(l, "ERROR: "))
	}
	// pip's errors then call a discarded candidate's version one it could not
	// find, listed among those available (the probe of 2026-12: a wheel whose
	// METADATA's version was not its file name's).
	lines = append(lines, discarded...)
	if exc := lastException(r.Tail); strings.HasPrefix(exc, "RecursionError") && slices.ContainsFunc(r.Tail, func(l string) bool { return strings.Contains(l, "in makedirs") }) {
		// pip makes a wheel's folders recursively (os.makedirs), so one that
		// nests about a thousand deep ends it so: the package's doing.
		return &UnavailableError{Message: "pip could not install a requested package (" + text.Clip(exc, 100) + "): it can't unpack a wheel whose folders nest about a thousand deep. Ask for another version, or tell the package's maintainers."}
	}
	if exc := lastException(r.Tail); pipMalformedRE().MatchString(exc) {
		// Metadata that does not parse (a Requires-Dist of "b[fast"): pip
		// ends in a traceback, which read internal "Exception:".
		_, why, _ := strings.Cut(exc, ": ")
		return &UnavailableError{Message: "a requested package's metadata can't be read (" + text.Clip(why, 200) + "): the index serves a malformed package. Ask for another version, or tell the package's maintainers."}
	}
	if exc := lastException(r.Tail); strings.HasPrefix(exc, "AssertionError") && strings.HasSuffix(exc, " for wheel") {
		// pip's check that a wheel a requirement led to by URL is the
		// project it names ("'sux' != 'six' for wheel"): the package's
		// metadata is wrong, which is no defect of brig's (the packages
		// probe of 2026-12-06 read internal).
		return &UnavailableError{Message: "a requested package depends on a wheel by URL whose project is not the one it names (" + text.Clip(exc, 100) + "): the package's metadata is malformed. Ask for another version, or tell the package's maintainers."}
	}
	said := append(slices.Clone(r.Errors), r.Tail...)
	failed := slices.IndexFunc(said, func(l string) bool { return pipBuildFailedRE().MatchString(l) })
	if allowSourceBuilds && failed >= 0 && !slices.ContainsFunc(said, func(l string) bool { return pipBuildDepsRE().MatchString(l) }) {
		// A source archive's build failed: the package's own code, or what
		// it needs, not brig's doing (the packages probe of 2026-12-06 read
		// internal). A C extension's always does: the installer's view of
		// /usr has no compiler's files.
		why := strings.Join(lines, " ")
		if why == "" {
			why = "pip: " + strings.TrimSpace(said[failed])
		}
		return &UnavailableError{Message: text.Clip("a requested package's source build failed ("+why+"): brig builds pure-Python source archives only, with no C compiler. Ask for a version with a wheel for this Python, or tell the package's maintainers.", maxMessage)}
	}
	if !unavailable {
		msg := strings.Join(lines, " ")
		// pip's "ERROR: Exception:" heads a traceback whose last line is
		// what went wrong.
		if exc := lastException(r.Tail); exc != "" && (msg == "" || msg == "Exception:") {
			msg = exc
		}
		if msg == "" {
			msg = strings.TrimPrefix(quoteTail(strings.Join(r.Tail, "\n")), ": ")
		}
		if strings.Contains(msg, "[Errno 28]") {
			msg += " (the install ran out of disk space: the package cache's disk; fewer or smaller packages may fit)"
		}
		return fmt.Errorf("the python installer failed (pip exited with status %d): %s", r.Exit, text.Clip(msg, maxMessage))
	}
	for _, l := range r.Errors {
		if strings.Contains(l, "Unknown scheme key used in") {
			// A .data folder pip can't place ("x.data/../../y"); its paths
			// are the installer's temporary folders': not said.
			return &UnavailableError{Message: "a requested package's wheel holds a .data folder whose contents pip can't place (an unknown scheme key): the index serves a malformed wheel. Ask for another version, or tell the package's maintainers."}
		}
		if m := pipOutsideRE().FindStringSubmatch(l); m != nil {
			// Its paths are the installer's temporary folders': not said.
			what := "a requested package"
			if m[1] != "" {
				what = m[1]
			}
			return &UnavailableError{Message: text.Clip(what+": its wheel holds a file whose path leads outside the package's folder, which pip refuses to install. Ask for another version, or tell the package's maintainers.", maxMessage)}
		}
	}
	msg := strings.Join(lines, "; ")
	if !strings.HasSuffix(msg, ".") {
		msg += "."
	}
	switch {
	case strings.Contains(msg, "conflicting dependencies"):
		msg += " Loosen the version constraints so that one version of each package satisfies them all."
	case versions == "none" && !allowSourceBuilds:
		msg += " No version was found with a wheel for this Python: check the package's name; brig installs wheels only, so a package published only as source can't be installed."
	case versions == "none":
		msg += " No version was found: check the package's name."
	case strings.Contains(msg, "has an invalid wheel"):
		msg += " The index serves a malformed wheel for it: ask for another version, or tell the package's maintainers."
	case len(discarded) > 0:
		msg += " The index serves a malformed package, which pip does not install: ask for another version, or tell the package's maintainers"
		if versions != "" {
			msg += "; versions available: " + newestVersions(versions, 20)
		}
		msg += "."
	case versions != "":
		msg += " Check the version constraint; versions available: " + newestVersions(versions, 20) + "."
		if pipPreReleaseRE().MatchString(versions) {
			msg += " (Pre-releases and development releases among them are chosen only when the constraint names one, as in ==2.1rc1, as pip does.)"
		}
	}
	if !allowSourceBuilds && versions != "none" && versions != "" {
		msg += " (Only versions with a wheel for this Python are listed: brig installs wheels only.)"
	}
	return &UnavailableError{Message: text.Clip(msg, maxMessage)}
}

// pipDiscarded is what pip's "Discarding" lines in said say, once each: the
// file pip discarded, by its name, and why, with every URL in it (the index's
// host, a mirror's password) given as its file's name too.
func pipDiscarded(said []string) []string {
	var out []string
	for _, l := range said {
		m := pipDiscardedRE().FindStringSubmatch(l)
		if m == nil {
			continue
		}
		why := m[2]
		if _, rest, ok := strings.Cut(why, " has inconsistent "); ok {
			why = "it has inconsistent " + rest
		}
		why = urlRE().ReplaceAllStringFunc(why, urlFileName)
		s := text.Clip("pip discarded "+urlFileName(m[1])+": "+why, 300)
		if !slices.Contains(out, s) && len(out) < 3 {
			out = append(out, s)
		}
	}
	return out
}

// urlFileName is the last part of u's path, unquoted ("x-1.0+cpu-py3-none-
// any.whl"), without its host, query or fragment.
func urlFileName(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "a file"
	}
	name := path.Base(p.Path)
	if name == "." || name == "/" {
		return "a file"
	}
	return name
}

// indexFailures are the index pages pip could not fetch for another reason
// than a 404 (an unknown project).
func indexFailures(seen []string) []string {
	var down []string
	for _, f := range seen {
		if !strings.Contains(f, "404") {
			down = append(down, f)
		}
	}
	return down
}

// newestVersions is the last n of pip's comma-separated versions (pip lists
// them oldest first).
func newestVersions(list string, n int) string {
	vs := strings.Split(list, ",")
	for i := range vs {
		vs[i] = strings.TrimSpace(vs[i])
	}
	if len(vs) > n {
		return "…, " + strings.Join(vs[len(vs)-n:], ", ")
	}
	return strings.Join(vs, ", ")
}

// sortResolved orders a layer's packages by name, then version.
func sortResolved(rs []Resolved) {
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].Name != rs[j].Name {
			return rs[i].Name < rs[j].Name
		}
		return rs[i].Version < rs[j].Version
	})
}
