package packages

import (
	"context"
	"errors"
	"log/slog"
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
}

// Key is the layer's content address: a hex SHA-256 of a canonical encoding of
// the set (language, runtime, each request's normalised name, extras and
// constraint, sorted by name) and of the installer options that change what is
// installed. Two sets that differ only in order or in how a name was spelled
// have the same key.
func (s Set) Key() string {
	panic("unimplemented: helper L")
}

// Resolved is one package of an installed layer.
type Resolved struct {
	Name    string // normalised
	Version string // exact
	// Hash is the installed artifact's digest as the tool gives it
	// ("sha256=..." for a wheel, the integrity string for npm); "" when none.
	Hash string
	// Request is the request (Raw) it satisfies; "" for a dependency.
	Request string
}

// Manifest is what is recorded with a layer.
type Manifest struct {
	Key         string
	Language    string
	Runtime     string
	Requests    []string // Raw, in the run's order
	Packages    []Resolved
	Bytes       int64
	InstalledAt time.Time
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
}

func (e *UnavailableError) Error() string { return e.Message }

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
	// Installer builds missing layers; required.
	Installer Installer
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultCacheBytes is the default size cap of the layer cache.
const DefaultCacheBytes = 10 << 30

// Cache is the content-addressed cache of installed layers.
type Cache struct{}

// OpenCache opens (or creates) the cache at cfg.Dir, dropping anything a
// crashed install left in its staging area.
func OpenCache(cfg CacheConfig) (*Cache, error) {
	panic("unimplemented: helper L")
}

// Lease is a layer a run holds: it is not evicted until Release.
type Lease struct {
	// Dir is the layer's directory, to be mounted read-only in the run.
	Dir      string
	Manifest Manifest
	// Cached is false when this call installed the layer.
	Cached bool
}

// Acquire returns a lease on the layer of set, installing it first when it is
// missing: one install per key at a time; concurrent callers for the same key
// wait for it and all get its progress lines.
func (c *Cache) Acquire(ctx context.Context, set Set, progress func(string)) (*Lease, error) {
	panic("unimplemented: helper L")
}
