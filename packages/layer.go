package packages

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Set is one run's package requests for a language, normalised: the key of a
// layer.
type Set struct {
	// Language is "python" or "javascript".
	Language string
	// Runtime is the interpreter's version ("3.11.2", "20.20.2"): a layer is
	// built for one.
	Runtime string
	// Requests are as ParseRequests returns them.
	Requests []Request
	// Options are the installer options that change what is installed (such
	// as "source-builds" when the operator allows building sdists): part of
	// the key, in any order.
	Options []string
}

// Key is the layer's content address: a hex SHA-256 of a canonical encoding of
// the set (language, runtime, each request's normalised name, extras and
// constraint, sorted by name) and of the installer options that change what is
// installed. Two sets that differ only in order or in how a name was spelled
// have the same key.
//
// The Python constraint is compared without spaces, case-insensitively and
// with its comma-separated clauses sorted (">=2, <3" and "<3,>=2" are one
// set); an npm range with its runs of spaces folded to one and an operator
// joined to its version (">= 1 <2" is ">=1 <2") and "=" dropped ("=1.2.3" is
// "1.2.3"). Both are spellings the tools
// read the same way. A Python constraint in PEP 508's parentheses is one
// without them (Request.Constraint).
func (s Set) Key() string {
	type entry struct {
		Name       string   `json:"n"`
		Extras     []string `json:"e,omitempty"`
		Constraint string   `json:"c"`
	}
	canon := struct {
		Version  int      `json:"v"`
		Language string   `json:"l"`
		Runtime  string   `json:"r"`
		Requests []entry  `json:"q"`
		Options  []string `json:"o,omitempty"`
	}{Version: keyVersion[s.Language], Language: s.Language, Runtime: s.Runtime}
	for _, r := range s.Requests {
		canon.Requests = append(canon.Requests, entry{Name: r.Name, Extras: r.Extras, Constraint: canonicalConstraint(s.Language, r.Constraint)})
	}
	sort.Slice(canon.Requests, func(i, j int) bool { return canon.Requests[i].Name < canon.Requests[j].Name })
	canon.Options = slices.Sorted(slices.Values(s.Options))
	canon.Options = slices.Compact(canon.Options)
	b, err := json.Marshal(canon)
	if err != nil {
		panic(fmt.Sprintf("encoding a layer key: %v", err)) // strings and ints always encode
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// keyVersion, a language's, changes when the key's encoding or what its
// installer makes of a set changes, so that older layers are not taken for
// newer ones. Python's 2: extras are keyed lower-cased, not normalised, and
// pip gets the key's names and extras in the key's order (a layer of 1 may
// hold what another spelling or order installed). JavaScript's 2: a layer
// names its packages by the registry's tarball URL, with their aliases and
// sources, which the policy judges (a layer of 1 names them by their
// package.json).
var keyVersion = map[string]int{languagePython: 2, languageJavaScript: 2}

// canonicalConstraint is one spelling of a constraint per meaning, as far as
// it can be told without a resolver.
func canonicalConstraint(language, c string) string {
	if language == languagePython {
		clauses := strings.Split(strings.ToLower(strings.ReplaceAll(c, " ", "")), ",")
		for i, cl := range clauses {
			clauses[i] = canonicalPEP440Clause(cl)
		}
		sort.Strings(clauses)
		return strings.Join(clauses, ",")
	}
	sets := strings.Split(c, "||")
	for i, set := range sets {
		fields := npmComparators(set)
		for j, f := range fields {
			// node-semver reads "=1.2.3" as "1.2.3".
			fields[j] = strings.TrimPrefix(f, "=")
		}
		sets[i] = strings.Join(fields, " ")
	}
	return strings.Join(sets, " || ")
}

// canonicalPEP440Clause writes a clause's version in its canonical PEP 440
// form where the operator compares versions zero-padded (==, !=, <, <=, >,
// >=, without a wildcard): "==1.2.0", "==01.2" and "==1.2" select the same
// releases, and share a layer. ~= (whose meaning counts the release's
// segments), === (a string match) and wildcards are left as written.
func canonicalPEP440Clause(clause string) string {
	op := ""
	for _, o := range []string{"===", "==", "!=", "~=", "<=", ">=", "<", ">"} {
		if strings.HasPrefix(clause, o) {
			op = o
			break
		}
	}
	v := strings.TrimPrefix(clause, op)
	if op == "" || op == "===" || op == "~=" || strings.HasSuffix(v, ".*") {
		return clause
	}
	if cv, ok := canonicalPEP440(v); ok {
		return op + cv
	}
	return clause
}

// Resolved is one package of an installed layer.
type Resolved struct {
	Name    string `json:"name"`    // normalised
	Version string `json:"version"` // exact
	// Hash is the installed artifact's digest as the tool gives it
	// ("sha256=..." for a wheel, the integrity string for npm); "" when none.
	Hash string `json:"hash,omitempty"`
	// Request is the request (Raw) it satisfies; "" for a dependency.
	Request string `json:"request,omitempty"`
	// Aliases are its other names (npm: the folder it is installed in, an
	// alias's, "x": "npm:y@1"; its package.json's, which a tarball may make
	// another package's), by which deny refuses it too.
	Aliases []string `json:"aliases,omitempty"`
	// Source is where it was fetched from when that is not a registry's
	// tarball (npm: a git, file or other URL dependency), which no reviewed
	// pair names; "" for a registry's, or where it is not known.
	Source string `json:"source,omitempty"`
	// RequiredBy are, for a dependency, the requested packages (their
	// normalised names) whose dependencies include it; empty in a layer
	// installed before brig recorded it.
	RequiredBy []string `json:"required_by,omitempty"`
}

// Manifest is what is recorded with a layer, in its manifest.json.
type Manifest struct {
	Key         string     `json:"key"`
	Language    string     `json:"language"`
	Runtime     string     `json:"runtime"`
	Requests    []string   `json:"requests"` // Raw, in the run's order
	Options     []string   `json:"options,omitempty"`
	Packages    []Resolved `json:"packages"`
	Bytes       int64      `json:"bytes"` // disk usage of the content (allocated blocks)
	InstalledAt time.Time  `json:"installed_at"`
	// InstallSeconds is how long its install took, which bounds the wait
	// for a re-resolve of it (refreshWait); 0 in a layer older than it.
	InstallSeconds float64 `json:"install_seconds,omitempty"`
	// LastUsed is when a run last acquired the layer (its install for a new
	// one). It is not in manifest.json: the cache keeps it as the mtime of the
	// layer's directory, so that a use writes no file.
	LastUsed time.Time `json:"-"`
}

// Installer fills staging, an empty directory, with the layer of set: for
// Python a directory that is importable as it is (pip's --target), for
// JavaScript the contents of a node_modules directory. progress gets one line
// at a time, for the runs' package events. An unknown package or an
// unsatisfiable version is an *UnavailableError.
type Installer interface {
	Install(ctx context.Context, set Set, staging string, progress func(string)) ([]Resolved, error)
}

// UnavailableError is an install that failed because a requested package or
// version can't be had; Message is the installer's own explanation, trimmed to
// what a model can act on.
type UnavailableError struct {
	Message string
	// Err is what refused it, when not the installer (a *LayerError).
	Err error
}

func (e *UnavailableError) Error() string { return e.Message }

func (e *UnavailableError) Unwrap() error { return e.Err }

// IndexError is an install that failed because the registry did not answer:
// not the request's fault, and worth trying again later. Message says what the
// installer saw.
type IndexError struct {
	Message string
}

func (e *IndexError) Error() string { return e.Message }

// ErrUnavailable matches an *UnavailableError with errors.Is.
var ErrUnavailable = errors.New("package unavailable")

func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// CacheConfig configures a Cache.
type CacheConfig struct {
	// Dir holds the layers (created 0755 root); required.
	Dir string
	// MaxBytes bounds the layers' total size; the least recently used layers no
	// run holds are evicted past it. Zero means DefaultCacheBytes.
	MaxBytes int64
	// LayerMaxBytes bounds one layer's installed size, at most MaxBytes: an
	// install past it is stopped, its run failing package_unavailable, so
	// that one request can neither fill the disk down to MinFreeBytes nor
	// publish a layer that evicts every other. Zero means
	// DefaultLayerBytes, or MaxBytes where that is less.
	LayerMaxBytes int64
	// MinFreeBytes is the disk space installs leave free on the cache's file
	// system (with a twentieth of its inodes, where it counts them), for the
	// journal and the host: before and during an install, and before its
	// layer is published, unused layers are evicted (least recently used
	// first) to keep it free, and an install that can't is stopped. Zero
	// means DefaultMinFreeBytes.
	MinFreeBytes int64
	// Installer builds missing layers; required.
	Installer Installer
	// OpenTTL is how long a layer whose requests are not all exact pins
	// (requests>=2, lodash@^4) serves them before the next run that asks
	// for it, finding no run holding it, has them resolved again, so that an
	// open constraint reaches releases newer than its first install. Zero
	// means DefaultOpenTTL.
	OpenTTL time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultCacheBytes is the default size cap of the layer cache.
const DefaultCacheBytes = 10 << 30

// DefaultLayerBytes is the default CacheConfig.LayerMaxBytes: half the
// default cache, room for a machine-learning stack's wheels (a framework with
// its accelerator libraries installs 4 to 5 GB).
const DefaultLayerBytes = 5 << 30

// DefaultMinFreeBytes is the default CacheConfig.MinFreeBytes.
const DefaultMinFreeBytes = 1 << 30

// DefaultOpenTTL is the default CacheConfig.OpenTTL.
const DefaultOpenTTL = 24 * time.Hour

// Open reports whether a request of the set is not an exact pin: what it
// installs may change as the registry publishes.
func (s Set) Open() bool {
	for _, r := range s.Requests {
		if _, ok := exactPin(s.Language, r.Constraint); !ok {
			return true
		}
	}
	return false
}

// OpenCache opens (or creates) the cache at cfg.Dir, dropping anything a
// crashed install left in its staging area. It takes an exclusive lock on the
// directory: a second cache on the same directory (another brig) is refused
// until Close. See cache.go for the layout.
func OpenCache(cfg CacheConfig) (*Cache, error) {
	return openCache(cfg)
}

// Lease is a layer a run holds: it is not evicted until Release.
type Lease struct {
	// Dir is the layer's directory, to be mounted read-only in the run.
	Dir      string
	Manifest Manifest
	// Cached is false when this call installed the layer or waited for
	// another call's install of it.
	Cached bool

	cache   *Cache
	release sync.Once
}

// Release ends the lease: the layer may be evicted once no lease holds it.
// Calling it again does nothing.
func (l *Lease) Release() {
	l.release.Do(func() { l.cache.release(l.Manifest.Key) })
}

// Acquire returns a lease on the layer of set, installing it first when it is
// missing: one install per key at a time; concurrent callers for the same key
// wait for it and all get its progress lines.
//
// The install runs on a context of its own (the cache's, cancelled by Close),
// not on ctx: a caller that gives up returns ctx's error at once, and the
// install goes on while another caller waits for it; the installer bounds its
// own time. Once every caller has given up, the install is stopped (its
// installer killed): nothing would see it, and it would hold a sandbox and
// up to its memory outside every run's admission. A caller for the key that
// comes meanwhile waits for that install's end, then installs afresh. A caller that joins an install in progress first gets
// the lines it already sent, then the rest as they come. progress is called
// from the install's goroutine, one line at a time, and must not block for
// long nor call back into the cache. A nil progress is allowed.
//
// A failed install's error is returned to every caller waiting for it: an
// *UnavailableError as the installer returned it, others wrapped. Nothing of
// it stays in the cache, and the next Acquire tries again.
func (c *Cache) Acquire(ctx context.Context, set Set, progress func(string)) (*Lease, error) {
	return c.acquire(ctx, set, progress)
}
