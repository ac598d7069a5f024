package packages

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/internal/text"
	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/rootfs"
)

// InstallerConfig configures the installer NewInstaller returns.
type InstallerConfig struct {
	// Run runs one sandboxed program: the service's jail launcher's Run,
	// wrapped so that spec.Attach starts the run's network in mode
	// "registries". Required.
	Run func(ctx context.Context, spec jail.Spec) (*jail.Result, error)
	// Registries are the registry URLs of each language ("python",
	// "javascript"): for Python the package index URLs (the first is pip's
	// --index-url, the others --extra-index-url), for JavaScript the npm
	// registry's URL (one). A language without URLs can't install packages.
	Registries map[string][]string
	// Timeout bounds one install, from the installer's start; zero means
	// DefaultInstallTimeout. At most the jail's 300 s.
	Timeout time.Duration
	// MemoryMiB bounds the installer's memory and its temporary files; zero
	// means DefaultInstallMemoryMiB.
	MemoryMiB int
	// AllowSourceBuilds lets pip build source distributions, which runs the
	// package's own build code inside the installer's jail: that code can
	// then write anything into the layer, and forge what the installer
	// reports of it. Off, pip takes wheels only (--only-binary=:all:) and no
	// package code runs at install time.
	AllowSourceBuilds bool
}

// Defaults of InstallerConfig.
const (
	DefaultInstallTimeout   = 300 * time.Second
	DefaultInstallMemoryMiB = 1024
)

// Where an installer's jail sees things. The staging folder is mounted on the
// run's own /tmp (the mount point is made there); npm's prefix is /tmp, so
// that its node_modules is the staging folder itself and the layer is exactly
// what npm installed, with nothing to move.
const (
	pyStaging     = "/tmp/layer"
	pyReport      = "/tmp/brig-pip-report.json"
	pipTmpName    = ".brig-pip-tmp" // pip's temporary folders, in staging (pythonDriverSource), removed before the layer is checked
	npmPrefix     = "/tmp"
	npmStaging    = npmPrefix + "/node_modules"
	npmRootName   = "_brig-layer" // a name no registry package can have, so that no request is refused as the project itself (ENOSELF)
	resultMarker  = "brig-install-result "
	maxProgress   = 200 // lines of installer output forwarded as progress
	maxMessage    = 800 // bytes of an unavailable message
	maxErrorLines = 8   // lines of installer output quoted in a plain error
)

// NewInstaller returns the Installer that runs pip or npm inside a jail of
// cfg.Run. It checks cfg before anything runs.
func NewInstaller(cfg InstallerConfig) (Installer, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultInstallTimeout
	}
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = DefaultInstallMemoryMiB
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("checking the installer configuration: %w", err)
	}
	return &jailInstaller{cfg: cfg}, nil
}

func (c InstallerConfig) validate() error {
	var errs []error
	if c.Run == nil {
		errs = append(errs, errors.New("run: required (the jail launcher's Run)"))
	}
	if c.Timeout < time.Second || c.Timeout > api.MaxTimeoutSeconds*time.Second {
		errs = append(errs, fmt.Errorf("timeout: %s is outside 1s to %ds, the jail's bounds", c.Timeout, api.MaxTimeoutSeconds))
	}
	if c.MemoryMiB < api.MinMemoryMiB || c.MemoryMiB > api.MaxMemoryMiB {
		errs = append(errs, fmt.Errorf("memory: %d MiB is outside %d to %d MiB, the jail's bounds", c.MemoryMiB, api.MinMemoryMiB, api.MaxMemoryMiB))
	}
	for _, lang := range slices.Sorted(maps.Keys(c.Registries)) {
		urls := c.Registries[lang]
		switch {
		case lang != languagePython && lang != languageJavaScript:
			errs = append(errs, fmt.Errorf("registries: unknown language %q (want %s or %s)", lang, languagePython, languageJavaScript))
			continue
		case lang == languageJavaScript && len(urls) > 1:
			errs = append(errs, fmt.Errorf("registries[%s]: npm takes one registry, got %d URLs", lang, len(urls)))
		}
		for i, u := range urls {
			if err := checkRegistryURL(u); err != nil {
				errs = append(errs, fmt.Errorf("registries[%s][%d]: %w", lang, i, err))
			}
		}
	}
	return errors.Join(errs...)
}

// checkRegistryURL accepts an absolute http or https URL with a host; the
// installers get it as one command-line argument.
func checkRegistryURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a URL: %v", s, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: want an http or https URL", s)
	case u.Host == "":
		return fmt.Errorf("%q has no host", s)
	case strings.HasPrefix(s, "-"):
		return fmt.Errorf("%q starts with \"-\"", s)
	}
	return nil
}

// OptionSourceBuilds is the Set option of a Python layer installed with
// source builds allowed: such a layer may hold what an sdist's build made, so
// it is another layer than the wheels-only one of the same requests.
const OptionSourceBuilds = "source-builds"

// Options are the Set.Options of language's layers as this configuration
// installs them: the caller puts them in each Set, so that a change of the
// configuration changes the layers' keys. Install refuses a set with others.
func (c InstallerConfig) Options(language string) []string {
	if language == languagePython && c.AllowSourceBuilds {
		return []string{OptionSourceBuilds}
	}
	return nil
}

// jailInstaller is the Installer of NewInstaller.
type jailInstaller struct {
	cfg InstallerConfig
}

// Install runs the language's installer in a jail whose /tmp/layer (Python)
// or /tmp/node_modules (JavaScript) is staging. The jail gives a writable
// mount's directory to the run's host ids, so staging and what the installer
// wrote are left theirs: the caller takes the tree over after checking it (the
// cache does, see Cache.build), as a chown would clear the setuid bits the
// check looks for. Every process of the run has ended when Install returns.
func (in *jailInstaller) Install(ctx context.Context, set Set, staging string, progress func(string)) ([]Resolved, error) {
	if len(set.Requests) == 0 {
		return nil, errors.New("installing packages: the set has no requests")
	}
	if set.Language != languagePython && set.Language != languageJavaScript {
		return nil, fmt.Errorf("installing packages: unknown language %q (want %s or %s)", set.Language, languagePython, languageJavaScript)
	}
	if want := in.cfg.Options(set.Language); !sameOptions(set.Options, want) {
		// The layer would be published under a key that does not say how
		// it was installed.
		return nil, fmt.Errorf("installing %s packages: the set's options %q are not this installer's %q", set.Language, set.Options, want)
	}
	urls := in.cfg.Registries[set.Language]
	if len(urls) == 0 {
		return nil, fmt.Errorf("installing %s packages: no registry is configured for %s", set.Language, set.Language)
	}
	var (
		code, target string
		err          error
	)
	if set.Language == languagePython {
		target = pyStaging
		code, err = pythonDriver(pipArgs(set.Requests, urls, in.cfg.AllowSourceBuilds))
	} else {
		target = npmStaging
		code, err = npmDriver(npmConfigOf(set.Requests, urls))
	}
	if err != nil {
		return nil, fmt.Errorf("writing the %s installer: %w", set.Language, err)
	}

	lines := newLineSplitter(progress, maxProgress)
	spec := jail.Spec{
		Language:    rootfs.Language(set.Language),
		Code:        code,
		Timeout:     in.cfg.Timeout,
		MemoryBytes: int64(in.cfg.MemoryMiB) << 20,
		Mounts:      []jail.Mount{{Source: staging, Target: target, Writable: true}},
		// The driver sends the tool's output to stderr and keeps stdout for
		// its result: the output is the progress.
		OnStderr: lines.write,
	}
	res, err := in.cfg.Run(ctx, spec)
	lines.flush()
	if set.Language == languagePython {
		// The driver removes it; a killed one can't.
		os.RemoveAll(filepath.Join(staging, pipTmpName))
	}
	if err != nil {
		return nil, fmt.Errorf("running the %s installer: %w", set.Language, err)
	}
	if err := endError(set.Language, in.cfg, res); err != nil {
		return nil, err
	}
	out, err := parseDriverResult(res.Stdout)
	if err != nil {
		return nil, fmt.Errorf("the %s installer failed: %w%s", set.Language, err, quoteTail(res.Stderr))
	}
	if set.Runtime != "" && out.Runtime != set.Runtime {
		// The layer would be published under the key of another
		// interpreter than the one it was installed for.
		return nil, fmt.Errorf("the %s installer ran on %s %s, but the set is for %s", set.Language, set.Language, out.Runtime, set.Runtime)
	}
	if set.Language == languagePython {
		return pythonResolved(set, out, in.cfg.AllowSourceBuilds)
	}
	return npmResolved(set, out, urls)
}

// sameOptions reports whether a and b hold the same options, in any order.
func sameOptions(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// endError is the error of a jail run that did not end by itself: the
// installer was killed, or could not start. A run that exited, with any
// status, is judged by its driver's result line.
func endError(lang string, cfg InstallerConfig, res *jail.Result) error {
	switch res.End {
	case jail.EndCompleted, jail.EndError:
		// The driver exits with the tool's status, after its result line.
		return nil
	case jail.EndTimeout:
		return fmt.Errorf("the %s installer ran past its time limit of %s and was stopped: the registry answered too slowly, or the packages are too large to fetch and install in that time; fewer or smaller packages may fit%s", lang, cfg.Timeout, quoteTail(res.Stderr))
	case jail.EndMemory:
		if res.ShortElsewhere {
			// The host's shortage, not the set's size: the same install
			// may succeed again, so it is not remembered as unavailable.
			return fmt.Errorf("the %s installer was killed for memory short on the host (it was under its %d MiB): try again", lang, cfg.MemoryMiB)
		}
		// The set's own size, not a passing failure: the same install would
		// end so again.
		return &UnavailableError{Message: fmt.Sprintf("the %s installer ran out of its %d MiB of memory and was stopped: these packages need more to install than this host gives an install; ask for fewer or smaller packages", lang, cfg.MemoryMiB)}
	case jail.EndInternal:
		return fmt.Errorf("the %s installer's sandbox failed at step %q: %s", lang, res.Step, res.Message)
	case jail.EndStopped:
		return fmt.Errorf("the %s installer was stopped: %s", lang, res.Message)
	}
	return fmt.Errorf("the %s installer failed: %s%s", lang, res.Message, quoteTail(res.Stderr))
}

// driverResult is the line the drivers print on stdout after the tool ran.
type driverResult struct {
	// Runtime is the interpreter's version ("3.11.2", "20.20.2").
	Runtime string `json:"runtime"`
	// Exit is the tool's exit status.
	Exit     int             `json:"exit"`
	Packages []driverPackage `json:"packages"`
	// Errors are the tool's error lines ("ERROR: ...", "npm error ..."), the
	// first few; Tail its last lines of output.
	Errors []string `json:"errors"`
	Tail   []string `json:"tail"`
	// Warnings are pip's "WARNING: ..." lines, the first few: an index it
	// ignored or could not reach.
	Warnings []string `json:"warnings"`
	// FetchFailures are pip's index pages it could not fetch, and why: a 404
	// is an unknown project, anything else the index not answering.
	FetchFailures []string `json:"fetch_failures"`
	// Discarded are pip's "Discarding <link>: <reason>" lines, the first
	// few: a candidate it dropped (a wheel whose metadata contradicts its
	// file name), which its errors then call a version it can't find.
	Discarded []string `json:"discarded"`
}

type driverPackage struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Hash    string `json:"hash"`
	// Path is the package's place in npm's lockfile ("node_modules/a").
	Path string `json:"path"`
	// Resolved is where npm fetched it from (the lockfile's "resolved"):
	// a registry's tarball URL names the package as the registry serves it.
	Resolved string `json:"resolved,omitempty"`
	// Requires is what the package depends on: pip's Requires-Dist lines
	// ("dep-b>=1; extra == 'x'"), npm's dependency names.
	Requires []string `json:"requires,omitempty"`
	// Extras are the extras pip installed the package with.
	Extras []string `json:"extras,omitempty"`
}

// parseDriverResult finds the driver's result line in its stdout.
func parseDriverResult(stdout string) (*driverResult, error) {
	i := strings.LastIndex(stdout, resultMarker)
	if i < 0 {
		return nil, errors.New("it ended without its result")
	}
	line, _, _ := strings.Cut(stdout[i+len(resultMarker):], "\n")
	var r driverResult
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return nil, fmt.Errorf("reading its result: %w", err)
	}
	// The tool's lines go into messages as the progress lines do: a build's
	// colours had reached a Result's message (the packages probe of
	// 2026-12-06).
	for _, lines := range [][]string{r.Errors, r.Tail, r.Warnings, r.FetchFailures} {
		for i, l := range lines {
			lines[i] = printable(l)
		}
	}
	return &r, nil
}

// InstallFailed reports whether res, an installer's sandbox run (what
// InstallerConfig.Run returned), failed: it did not end by itself, or its
// tool did not succeed. A Run that knows why the installer could not have
// succeeded (its proxy could not reach the registry for a reason of the
// host's: supervisor.InstallerRun) returns its own error only then.
func InstallFailed(res *jail.Result) bool {
	if res.End != jail.EndCompleted && res.End != jail.EndError {
		return true
	}
	r, err := parseDriverResult(res.Stdout)
	return err != nil || r.Exit != 0
}

// quoteTail is the last lines of an installer's output, for an error message.
func quoteTail(output string) string {
	lines := strings.Split(strings.TrimRight(output, "\n"), "\n")
	var kept []string
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			kept = append(kept, l)
		}
	}
	if len(kept) == 0 {
		return ""
	}
	if len(kept) > maxErrorLines {
		kept = kept[len(kept)-maxErrorLines:]
	}
	return ": " + strings.Join(kept, " | ")
}

// lineSplitter turns the jail's output chunks into lines for progress, up to
// max lines, then one line saying that more was left out. A line is sent
// printable: what a registry's text holds (an npm deprecation notice) reaches
// every run waiting for the install, and a harness may show it on a terminal.
type lineSplitter struct {
	progress func(string)
	max      int
	sent     int
	partial  strings.Builder
}

func newLineSplitter(progress func(string), max int) *lineSplitter {
	return &lineSplitter{progress: progress, max: max}
}

// write is called by the jail with each chunk, one at a time.
func (s *lineSplitter) write(chunk string) {
	for {
		i := strings.IndexByte(chunk, '\n')
		if i < 0 {
			s.partial.WriteString(chunk)
			return
		}
		s.partial.WriteString(chunk[:i])
		s.emit()
		chunk = chunk[i+1:]
	}
}

// flush sends what is left after the last newline.
func (s *lineSplitter) flush() {
	if s.partial.Len() > 0 {
		s.emit()
	}
}

func (s *lineSplitter) emit() {
	line := strings.TrimRight(printable(s.partial.String()), " ")
	s.partial.Reset()
	if s.progress == nil || line == "" {
		return
	}
	switch {
	case s.sent < s.max:
		s.progress(text.Clip(line, 500))
	case s.sent == s.max:
		s.progress("(more installer output not shown)")
	default:
		return
	}
	s.sent++
}

// terminalSequenceRE matches a terminal's control sequences: CSI (colours,
// cursor moves, clearing) and OSC (titles, clipboard writes).
var terminalSequenceRE = lazyRegexp(`\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?`)

// printable is line without terminal sequences and control characters (C0,
// DEL, C1); a tab becomes a space.
func printable(line string) string {
	line = terminalSequenceRE().ReplaceAllString(line, "")
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t':
			return ' '
		case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
			return -1
		}
		return r
	}, line)
}
