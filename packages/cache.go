package packages

// The cache on disk, under CacheConfig.Dir (0755, owned by the service's user,
// root in the service):
//
//	lock                   flock'd while a Cache has the directory open
//	layers/<key>/          a published layer; its mtime is its last use
//	layers/<key>/manifest.json
//	layers/<key>/root/     the content: Lease.Dir, mounted read-only in runs
//	staging/<key>.<rand>/  an install in progress, laid out like a layer;
//	                       also where an evicted layer is moved to be deleted
//
// A layer appears in layers/ only by one rename of its complete staging
// directory, after its checks, so a crash at any point leaves either nothing
// or a whole layer. OpenCache deletes all of staging/: what a crashed install
// or eviction left there is never taken for a layer.
//
// The last use of a layer is its directory's mtime, set at each Acquire, so
// that the least-recently-used order survives a restart without a file to
// write on every run.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/brig-sandbox/brig/internal/safedir"
	"github.com/brig-sandbox/brig/internal/text"
)

// Errors of the cache's operator functions and of a closed cache.
var (
	// ErrInUse is Remove's error for a layer a run holds.
	ErrInUse = errors.New("layer in use")
	// ErrNoLayer is Remove's error for a key the cache does not hold.
	ErrNoLayer = errors.New("no such layer")
	// ErrCacheClosed is the error of Acquire, Remove and Prune after Close.
	ErrCacheClosed = errors.New("package cache closed")
)

const (
	layersDirName  = "layers"
	stagingDirName = "staging"
	lockFileName   = "lock"
	manifestName   = "manifest.json"
	contentDirName = "root"
	// maxProgressReplay bounds the lines an install keeps for callers that
	// join it late; they miss the ones past it, and get the lines after.
	maxProgressReplay = 1000
)

// StagingDir is where a cache of dir stages its installs: files of its
// installers' ids, which no run sees and OpenCache clears (brig's id range
// check leaves it out, so that a crashed install does not stop the next start).
func StagingDir(dir string) string { return filepath.Join(dir, stagingDirName) }

// keyRE is what Set.Key returns; a directory in layers/ with another name is
// not a layer, and Remove refuses other names before they reach a path.
var keyRE = lazyRegexp(`^[0-9a-f]{64}$`)

// Stats are the cache's counters since OpenCache, for the supervisor's
// metrics.
type Stats struct {
	Hits            uint64  // Acquire calls served by a published layer
	Misses          uint64  // Acquire calls that installed, waited for an install, or were Refused
	Refused         uint64  // of Misses, those answered by a refusal remembered (refusedFor)
	Installs        uint64  // installs that published a layer
	InstallFailures uint64  // installs that failed (unavailable, refused, cancelled)
	InstallSeconds  float64 // total time of all installs, failed ones included
	Evictions       uint64  // layers removed to keep under a size cap (Prune included)
	Refreshes       uint64  // open layers resolved again after CacheConfig.OpenTTL
	Layers          int     // published layers now
	Bytes           int64   // their total size now
}

// Cache is the content-addressed cache of installed layers.
type Cache struct {
	log       *slog.Logger
	installer Installer
	maxBytes  int64
	layerMax  int64
	minFree   int64
	openTTL   time.Duration
	// stillEvery is stillInstallingEvery; tests shorten it.
	stillEvery time.Duration
	layersDir  string
	stageDir   string
	lock       *os.File // holds the flock on the directory

	// ctx is the installs' context: Close cancels it, not a caller's.
	ctx    context.Context
	cancel context.CancelFunc
	// installs counts the install goroutines, for Close.
	installs sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	layers  map[string]*cachedLayer // published, by key
	flights map[string]*flight      // installs in progress, by key
	bytes   int64                   // sum of layers' Bytes
	stats   Stats
	// refused are the sets whose last install the request was at fault for
	// (an *UnavailableError: no such version, a layer past layerMax), by
	// key, each until refusedFor after it: answered so again without an
	// install (the soak's 62 installs of one unavailable version, 0.7 to
	// 7.9 s of registry traffic each).
	refused map[string]refusal
}

// refusal is a set's remembered *UnavailableError.
type refusal struct {
	err   error
	until time.Time
}

// refusedFor is how long a set's install the request was at fault for is
// answered from memory: short, so that a version published meanwhile is
// soon found.
const refusedFor = 30 * time.Second

// cachedLayer is a published layer; its fields are guarded by Cache.mu.
type cachedLayer struct {
	manifest Manifest
	lastUse  time.Time
	refs     int // leases held
	// refreshAfter holds an open layer's next re-resolve back after one
	// that failed (staleRetry, doubled for each failure in a row: failed).
	refreshAfter time.Time
	failed       int
}

// staleRetry is how long an open layer kept because its re-resolve failed
// (the registry down) is served before the next re-resolve: runs meanwhile
// don't each wait for the registry's timeouts.
const staleRetry = time.Minute

// refreshWait is how long the runs that wait for a re-resolve of the open
// layer m wait before it is stopped and m is served as it was: three times
// its own install's time, and at least refreshWaitMin. A registry that
// accepts connections and never answers had every run of the set wait out
// the whole install timeout (the packages probe of 2026-12-06: 60 s of a 60 s
// install_timeout, and again at each retry; 5 minutes at the default).
func refreshWait(m Manifest) time.Duration {
	return max(refreshWaitMin, time.Duration(3*m.InstallSeconds*float64(time.Second)))
}

// refreshWaitMin is refreshWait's least (a variable for the tests).
var refreshWaitMin = 20 * time.Second

// flight is an install in progress that callers wait for.
type flight struct {
	done chan struct{} // closed, with Cache.mu held, once manifest and err are set
	// waiters are the callers waiting, guarded by Cache.mu: the install hands
	// each a lease (a ref) when it publishes.
	waiters  int
	manifest Manifest
	err      error
	// cancel stops the install, once its last waiter has gone (abandoned,
	// guarded by Cache.mu): no run wants the layer any more, and an
	// installer nobody waits for would go on unseen, outside every run's
	// admission, for up to its install timeout.
	cancel    context.CancelFunc
	abandoned bool
	// stale is the open layer this install re-resolves, moved out of
	// layers/ (takeLocked) and deleted once the install ends, unless the
	// install failed for another reason than the registry's refusal (the
	// registry down): then it is put back and served.
	stale      victim
	staleLayer *cachedLayer
	kept       bool // the stale layer was put back and is what manifest is
	// slow: the re-resolve was stopped past refreshWait, for its waiters to
	// have the stale layer (guarded by Cache.mu).
	slow bool

	pmu     sync.Mutex
	lines   []string // sent so far, for callers that join late
	subs    map[int]func(string)
	nextSub int
}

// progress sends a line of the installer to every caller waiting.
func (f *flight) progress(line string) {
	f.pmu.Lock()
	defer f.pmu.Unlock()
	if len(f.lines) < maxProgressReplay {
		f.lines = append(f.lines, line)
	}
	for _, sub := range f.subs {
		sub(line)
	}
}

// subscribe replays the lines sent so far to fn, then sends it the next ones
// until unsubscribe.
func (f *flight) subscribe(fn func(string)) int {
	if fn == nil {
		return -1
	}
	f.pmu.Lock()
	defer f.pmu.Unlock()
	for _, l := range f.lines {
		fn(l)
	}
	id := f.nextSub
	f.nextSub++
	f.subs[id] = fn
	return id
}

func (f *flight) unsubscribe(id int) {
	f.pmu.Lock()
	defer f.pmu.Unlock()
	delete(f.subs, id)
}

func openCache(cfg CacheConfig) (_ *Cache, retErr error) {
	if cfg.Dir == "" {
		return nil, errors.New("opening the package cache: no directory configured")
	}
	if cfg.Installer == nil {
		return nil, errors.New("opening the package cache: no installer configured")
	}
	if cfg.MaxBytes < 0 {
		return nil, fmt.Errorf("opening the package cache: a negative size cap (%d bytes)", cfg.MaxBytes)
	}
	if cfg.MinFreeBytes < 0 {
		return nil, fmt.Errorf("opening the package cache: a negative min_free_bytes (%d)", cfg.MinFreeBytes)
	}
	if cfg.LayerMaxBytes < 0 {
		return nil, fmt.Errorf("opening the package cache: a negative layer_max_bytes (%d)", cfg.LayerMaxBytes)
	}
	c := &Cache{
		log:        cfg.Logger,
		installer:  cfg.Installer,
		maxBytes:   cfg.MaxBytes,
		layerMax:   cfg.LayerMaxBytes,
		minFree:    cfg.MinFreeBytes,
		openTTL:    cfg.OpenTTL,
		stillEvery: stillInstallingEvery,
		layersDir:  filepath.Join(cfg.Dir, layersDirName),
		stageDir:   StagingDir(cfg.Dir),
		layers:     make(map[string]*cachedLayer),
		flights:    make(map[string]*flight),
		refused:    make(map[string]refusal),
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.maxBytes == 0 {
		c.maxBytes = DefaultCacheBytes
	}
	if c.layerMax == 0 {
		c.layerMax = min(DefaultLayerBytes, c.maxBytes)
	}
	if c.layerMax > c.maxBytes {
		return nil, fmt.Errorf("opening the package cache: layer_max_bytes (%d) is more than cache_max_bytes (%d): a layer that can't be kept would evict every other; give at most the cache's size", c.layerMax, c.maxBytes)
	}
	if c.minFree == 0 {
		c.minFree = DefaultMinFreeBytes
	}
	if cfg.OpenTTL < 0 {
		return nil, fmt.Errorf("opening the package cache: a negative open_ttl (%s)", cfg.OpenTTL)
	}
	if c.openTTL == 0 {
		c.openTTL = DefaultOpenTTL
	}
	// Its layers are mounted into runs as they are: a folder another user
	// may write, or one on a path they can change, would let them plant
	// code in other uids' runs (the upgrade probe of 2026-12-06 did, under a
	// cache_dir in a 0777 folder). The state directory's rule (safedir).
	if err := safedir.Make(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("opening the package cache: %w: give packages.cache_dir a folder that root owns and only root may write, on a path no one else can change", err)
	}
	for _, d := range []string{cfg.Dir, c.layersDir, c.stageDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("opening the package cache: %w", err)
		}
		// Layers are trusted once published: a directory someone else owns
		// could be changed under the cache.
		fi, err := os.Lstat(d)
		if err != nil {
			return nil, fmt.Errorf("opening the package cache: %w", err)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() {
			return nil, fmt.Errorf("opening the package cache: %s is not a directory of this user (uid %d): give a directory only brig writes", d, os.Geteuid())
		}
		// MkdirAll leaves an existing directory's mode, and the umask trims a
		// new one's; the runs' jails and the installer read through these.
		if err := os.Chmod(d, 0o755); err != nil {
			return nil, fmt.Errorf("opening the package cache: %w", err)
		}
	}
	lock, err := os.OpenFile(filepath.Join(cfg.Dir, lockFileName), os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the package cache: %w", err)
	}
	defer func() {
		if retErr != nil {
			lock.Close()
		}
	}()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("opening the package cache: %s is in use by another brig (is another brig serve using this state directory, or this cache_dir?)", cfg.Dir)
		}
		return nil, fmt.Errorf("opening the package cache: locking %s: %w", cfg.Dir, err)
	}
	c.lock = lock

	// The lock is ours, so no install is running: whatever staging/ holds was
	// left by a crash, an open layer taken out for its re-resolve among it,
	// which goes back first (the upgrade probe of 2026-12-06: a crash during
	// a hung re-resolve lost the layer, and the registry's outage then failed
	// its runs).
	c.restoreStale()
	if err := clearDir(c.stageDir); err != nil {
		return nil, fmt.Errorf("opening the package cache: clearing its staging area: %w", err)
	}
	if err := c.load(); err != nil {
		return nil, fmt.Errorf("opening the package cache: %w", err)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.mu.Lock()
	victims, err := c.evictLocked(c.maxBytes)
	c.mu.Unlock()
	c.remove(victims)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("opening the package cache: %w", err)
	}
	return c, nil
}

// clearDir removes everything in dir.
// restoreStale puts back each layer a crash left taken out for its re-resolve
// (takeAsLocked, stalePrefix), where layers/ has none of its key. Best effort:
// one it can't is deleted with staging/, and installed again when asked for.
func (c *Cache) restoreStale() {
	ents, err := os.ReadDir(c.stageDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), stalePrefix)
		if !ok {
			continue
		}
		key := rest[:max(strings.LastIndexByte(rest, '.'), 0)]
		if !keyRE().MatchString(key) {
			continue
		}
		src, dst := filepath.Join(c.stageDir, e.Name(), key), filepath.Join(c.layersDir, key)
		if _, err := os.Lstat(dst); err == nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(src, manifestName)); err != nil {
			continue
		}
		if err := os.Rename(src, dst); err != nil {
			c.log.Warn("putting back an open package layer a crash left out during its re-resolve", "key", key, "err", err)
			continue
		}
		c.log.Info("put back an open package layer a crash left out during its re-resolve", "key", key)
	}
}

func clearDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
	}
	return errors.Join(errs...)
}

// load reads the published layers; an entry of layers/ that is not a whole
// layer (an operator's or a disk's doing: publishing can't leave one) is
// removed.
func (c *Cache) load() error {
	ents, err := os.ReadDir(c.layersDir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		dir := filepath.Join(c.layersDir, e.Name())
		m, lastUse, err := readLayer(dir, e.Name())
		if err != nil {
			c.log.Warn("removing a broken layer from the package cache", "dir", dir, "err", err)
			if err := os.RemoveAll(dir); err != nil {
				return fmt.Errorf("removing broken layer %s: %w", dir, err)
			}
			continue
		}
		m.LastUsed = lastUse
		c.layers[m.Key] = &cachedLayer{manifest: m, lastUse: lastUse}
		c.bytes += m.Bytes
	}
	return nil
}

func readLayer(dir, name string) (Manifest, time.Time, error) {
	var m Manifest
	if !keyRE().MatchString(name) {
		return m, time.Time{}, errors.New("its name is not a layer key")
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return m, time.Time{}, err
	}
	if !fi.IsDir() {
		return m, time.Time{}, errors.New("not a directory")
	}
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return m, time.Time{}, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, time.Time{}, fmt.Errorf("reading its manifest: %w", err)
	}
	if m.Key != name {
		return m, time.Time{}, fmt.Errorf("its manifest is for layer %q", m.Key)
	}
	if ci, err := os.Lstat(filepath.Join(dir, contentDirName)); err != nil || !ci.IsDir() {
		return m, time.Time{}, errors.New("it has no content directory")
	}
	return m, fi.ModTime(), nil
}

// Close cancels the installs in progress (their callers get an error), waits
// for them to end and releases the directory. Leases still held stay valid
// on disk until the next OpenCache's eviction.
func (c *Cache) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.installs.Wait()
	return c.lock.Close() // closing the file drops the flock
}

func (c *Cache) acquire(ctx context.Context, set Set, progress func(string)) (*Lease, error) {
	if len(set.Requests) == 0 {
		return nil, errors.New("acquiring a package layer: the set has no requests")
	}
	key := set.Key()
	c.mu.Lock()
	for {
		if c.closed {
			c.mu.Unlock()
			return nil, ErrCacheClosed
		}
		f := c.flights[key]
		if f == nil || !f.abandoned {
			break
		}
		// Its install is being stopped: once it has ended, the layer (had it
		// been published all the same) or a fresh install.
		c.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the install of layer %s: %w", key, ctx.Err())
		}
		c.mu.Lock()
	}
	var stale victim
	var staleLayer *cachedLayer
	if l, ok := c.layers[key]; ok && l.refs == 0 && set.Open() && time.Since(l.manifest.InstalledAt) > c.openTTL && time.Now().After(l.refreshAfter) {
		// Resolved too long ago: installed again below, as a miss. A layer
		// a run holds is served as it is; a later run refreshes it.
		v, err := c.takeAsLocked(key, stalePrefix)
		if err != nil {
			c.log.Warn("re-resolving an open package layer; serving it as it is", "key", key, "err", err)
		} else {
			c.stats.Refreshes++
			stale, staleLayer = v, l
			c.log.Info("re-resolving an open package layer", "key", key, "installed_at", l.manifest.InstalledAt)
		}
	}
	if l, ok := c.layers[key]; ok && l.refs == 0 {
		// A layer whose content folder, or whole folder, is gone from the
		// disk (deleted by hand) is installed again, not served as a mount
		// that fails. (One a run holds is left: its lease's release would
		// count against the new layer's.)
		if _, err := os.Lstat(filepath.Join(c.layersDir, key, contentDirName)); errors.Is(err, fs.ErrNotExist) {
			c.log.Warn("a package layer's folder is gone from the disk: installing it again", "key", key)
			if _, err := os.Lstat(filepath.Join(c.layersDir, key)); errors.Is(err, fs.ErrNotExist) {
				c.bytes -= l.manifest.Bytes
				delete(c.layers, key)
			} else if v, err := c.takeLocked(key); err == nil {
				defer c.remove([]victim{v}) // once the lock is let go, as eviction's
			} else {
				c.log.Warn("moving a broken package layer out of the cache", "key", key, "err", err)
			}
		}
	}
	if l, ok := c.layers[key]; ok {
		l.refs++
		l.lastUse = time.Now()
		c.stats.Hits++
		m := l.manifest
		m.LastUsed = l.lastUse
		c.mu.Unlock()
		c.touch(key, m.LastUsed)
		return c.lease(m, true), nil
	}
	c.stats.Misses++
	if r, ok := c.refused[key]; ok && c.flights[key] == nil {
		if time.Now().Before(r.until) {
			c.stats.Refused++
			c.mu.Unlock()
			return nil, r.err
		}
		delete(c.refused, key)
	}
	f := c.flights[key]
	if f == nil {
		ictx, cancel := context.WithCancel(c.ctx)
		f = &flight{done: make(chan struct{}), subs: make(map[int]func(string)), cancel: cancel, stale: stale, staleLayer: staleLayer}
		c.flights[key] = f
		c.installs.Add(1)
		// The first line each waiter gets: npm's own come only at its end
		// (it runs without progress), and a harness could not tell a slow
		// install from none (the packages probe of 2026-12-06).
		f.progress(installingLine(set))
		go c.install(ictx, f, key, set)
	}
	f.waiters++
	var wait time.Duration // read under the lock: the install's end writes the stale layer
	if f.staleLayer != nil {
		wait = refreshWait(f.staleLayer.manifest)
	}
	c.mu.Unlock()

	sub := f.subscribe(progress)
	var slow <-chan time.Time
	if wait > 0 {
		// A re-resolve that takes too long is stopped, and its end puts the
		// layer back (install, kept) for every waiter.
		t := time.NewTimer(wait)
		defer t.Stop()
		slow = t.C
	}
wait:
	for {
		select {
		case <-f.done:
			break wait
		case <-ctx.Done():
			break wait
		case <-slow:
			slow = nil
			c.mu.Lock()
			f.slow = true
			c.mu.Unlock()
			f.cancel()
		}
	}
	f.unsubscribe(sub)

	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-f.done:
	default:
		// Gone before the install ended: it goes on, without a lease for
		// us, while another run waits for it; else it is stopped.
		f.waiters--
		if f.waiters == 0 {
			f.abandoned = true
			f.cancel()
			c.log.Info("stopping a package layer install no run waits for any more", "key", key, "language", set.Language)
		}
		return nil, fmt.Errorf("waiting for the install of layer %s: %w", key, ctx.Err())
	}
	if f.err != nil {
		return nil, f.err
	}
	return c.lease(f.manifest, f.kept), nil // the install took our ref
}

// installingLine is the progress line that begins an install.
func installingLine(set Set) string {
	raw := make([]string, len(set.Requests))
	for i, r := range set.Requests {
		raw[i] = r.Raw
	}
	return fmt.Sprintf("brig: installing %s (%s; not in the package cache)", text.Clip(strings.Join(raw, ", "), 300), set.Language)
}

func (c *Cache) lease(m Manifest, cached bool) *Lease {
	return &Lease{
		Dir:      filepath.Join(c.layersDir, m.Key, contentDirName),
		Manifest: m,
		Cached:   cached,
		cache:    c,
	}
}

// touch records a use of a layer on disk, for the order of eviction after a
// restart; failing to is not worth failing the run.
func (c *Cache) touch(key string, t time.Time) {
	if err := os.Chtimes(filepath.Join(c.layersDir, key), t, t); err != nil {
		c.log.Warn("recording a use of a package layer", "key", key, "err", err)
	}
}

func (c *Cache) release(key string) {
	c.mu.Lock()
	if l, ok := c.layers[key]; ok && l.refs > 0 {
		l.refs--
	}
	if c.closed {
		// The directory may be another cache's by now.
		c.mu.Unlock()
		return
	}
	// A layer held past the cap at the last publish may go now.
	victims, err := c.evictLocked(c.maxBytes)
	c.mu.Unlock()
	if err != nil {
		c.log.Warn("evicting package layers", "err", err)
	}
	c.remove(victims)
}

// install runs the install of a flight and hands its waiters the result.
func (c *Cache) install(ctx context.Context, f *flight, key string, set Set) {
	defer c.installs.Done()
	defer f.cancel()
	start := time.Now()
	m, err := c.build(ctx, key, set, f.progress)
	took := time.Since(start)

	c.mu.Lock()
	c.stats.InstallSeconds += took.Seconds()
	// A re-resolve that failed for another reason than the request's (the
	// registry down or too slow, the waiters gone, the cache closing) keeps
	// the layer it was to replace; one the registry now refuses does not.
	var unavailable *UnavailableError
	kept := false
	if err != nil && !errors.As(err, &unavailable) && f.staleLayer != nil && f.stale.dir != "" {
		kept = c.restoreLocked(f, key)
	}
	switch {
	case kept:
		c.stats.InstallFailures++
		f.manifest, f.kept = f.staleLayer.manifest, true
	case err != nil:
		c.stats.InstallFailures++
		f.err = err
		if errors.As(err, &unavailable) && !f.abandoned {
			c.refuseLocked(key, err)
		}
	default:
		c.stats.Installs++
		c.layers[key] = &cachedLayer{manifest: m, lastUse: m.LastUsed, refs: f.waiters}
		c.bytes += m.Bytes
		f.manifest = m
	}
	delete(c.flights, key)
	close(f.done)
	abandoned, slow := f.abandoned, f.slow
	victims, everr := c.evictLocked(c.maxBytes)
	if f.staleLayer != nil && !kept {
		victims = append(victims, f.stale)
	}
	// A kept layer is back in c.layers, where the next acquire writes its
	// lastUse under c.mu: read now (the race detector's find).
	var keptUse, keptInstalled time.Time
	var keptRetry time.Duration
	if kept {
		keptUse, keptInstalled = f.staleLayer.lastUse, f.staleLayer.manifest.InstalledAt
		keptRetry = f.staleLayer.refreshAfter.Sub(keptUse).Round(time.Second)
	}
	c.mu.Unlock()

	switch {
	case kept && slow:
		c.touch(key, keptUse)
		c.log.Warn("re-resolving an open package layer took too long, and was stopped: serving the layer as it was (is the registry answering?)", "key", key, "language", set.Language,
			"installed_at", keptInstalled, "waited", took.Round(time.Millisecond).String(), "retry_after", keptRetry.String())
	case kept:
		c.touch(key, keptUse)
		c.log.Warn("re-resolving an open package layer failed: serving the layer as it was", "key", key, "language", set.Language,
			"installed_at", keptInstalled, "retry_after", keptRetry.String(), "err", err)
	case err != nil && abandoned:
		// Every run that waited for it was stopped (a DELETE, a client
		// gone): what was asked, not a failure to warn of.
		c.log.Info("package layer install stopped: no run waits for it", "key", key, "language", set.Language,
			"requests", len(set.Requests), "seconds", took.Seconds())
	case err != nil:
		c.log.Warn("package layer install failed", "key", key, "language", set.Language,
			"requests", len(set.Requests), "seconds", took.Seconds(), "err", err)
	default:
		c.log.Info("package layer installed", "key", key, "language", set.Language,
			"requests", len(set.Requests), "packages", len(m.Packages), "bytes", m.Bytes, "seconds", took.Seconds())
	}
	if everr != nil {
		c.log.Warn("evicting package layers", "err", everr)
	}
	c.remove(victims)
}

// refuseLocked remembers err, the request's fault, as key's answer for
// refusedFor, and forgets those past theirs, so that the map holds at most
// the sets refused within that time.
func (c *Cache) refuseLocked(key string, err error) {
	now := time.Now()
	for k, r := range c.refused {
		if now.After(r.until) {
			delete(c.refused, k)
		}
	}
	c.refused[key] = refusal{err: err, until: now.Add(refusedFor)}
}

// restoreLocked puts a flight's stale layer back where takeLocked moved it
// from, for its waiters, and holds its next re-resolve back by staleRetry. It
// reports whether it could: if not, the install's error stands.
func (c *Cache) restoreLocked(f *flight, key string) bool {
	if err := os.Rename(filepath.Join(f.stale.dir, key), filepath.Join(c.layersDir, key)); err != nil {
		c.log.Warn("putting back an open package layer whose re-resolve failed", "key", key, "err", err)
		return false
	}
	os.Remove(f.stale.dir)
	l := f.staleLayer
	// A registry that stays down, or hangs, holds a run of the set for
	// refreshWait at each re-resolve: they come less often the longer it
	// lasts (the review of 2026-12-06), and at least once an open_ttl.
	// One its waiters all left (DELETEs, clients gone) is no failure of the
	// registry's (the review of 2026-12-06).
	if !f.abandoned {
		l.failed++
	}
	retry := min(staleRetry<<min(max(l.failed-1, 0), 10), max(c.openTTL, staleRetry))
	l.refs, l.lastUse, l.refreshAfter = f.waiters, time.Now(), time.Now().Add(retry)
	l.manifest.LastUsed = l.lastUse
	c.layers[key] = l
	c.bytes += l.manifest.Bytes
	return true
}

// build installs set into a fresh staging directory and publishes it as
// layers/<key>. Publishing, in order:
//  1. CheckLayer, before anything changes the tree: chown would clear the
//     setuid bits it looks for;
//  2. every entry is given to the cache's owner (root in the service: the
//     installer ran as a jail's id) and loses its group and other write bits,
//     so that no run's id owns or can write a file of a layer;
//  3. manifest.json is written and synced;
//  4. one rename makes the layer visible, and the parent is synced so that
//     the rename survives a crash.
//
// The installer's process must have ended when Install returns: nothing may
// change the tree while it is checked and chowned.
// InstallError is an install's failure, with the key of the layer it was to
// make: the key is for the operator's log, the error's own words for the run.
type InstallError struct {
	Key string
	Err error
}

func (e *InstallError) Error() string { return fmt.Sprintf("installing layer %s: %v", e.Key, e.Err) }
func (e *InstallError) Unwrap() error { return e.Err }

func (c *Cache) build(ctx context.Context, key string, set Set, progress func(string)) (_ Manifest, retErr error) {
	// The installer writes to the disk the journal and the host use: room is
	// made before anything is written (on a full disk the staging directory
	// itself can't be made), and it is stopped once none can be.
	if err := c.makeRoom(); err != nil {
		return Manifest{}, &InstallError{Key: key, Err: err}
	}
	stage, err := os.MkdirTemp(c.stageDir, key+".")
	if err != nil {
		return Manifest{}, fmt.Errorf("installing layer %s: making its staging directory: %w", key, err)
	}
	defer func() {
		if retErr != nil {
			if err := os.RemoveAll(stage); err != nil {
				c.log.Warn("removing a failed install's staging directory", "dir", stage, "err", err)
			}
		}
	}()
	if err := os.Chmod(stage, 0o755); err != nil {
		return Manifest{}, fmt.Errorf("installing layer %s: %w", key, err)
	}
	root := filepath.Join(stage, contentDirName)
	if err := os.Mkdir(root, 0o755); err != nil {
		return Manifest{}, fmt.Errorf("installing layer %s: %w", key, err)
	}

	// An install that says nothing for stillEvery gets a line of brig's with
	// what it has written: npm's own come only at its end, and a harness
	// could not tell a slow install from a hung one (the packages probe of
	// 2026-12-06: a webpack install sent nothing for 9 s).
	began := time.Now()
	var lastLine atomic.Int64 // the last line's time, in ns since began; Acquire sent the first
	say := func(line string) {
		lastLine.Store(int64(time.Since(began)))
		progress(line)
	}
	written := func(size int64) {
		if since := time.Since(began); since-time.Duration(lastLine.Load()) >= c.stillEvery {
			say(fmt.Sprintf("brig: still installing: %s written so far, %d s in", mib(size), int(since.Seconds())))
		}
	}
	ictx, stop := context.WithCancelCause(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		c.watchSpace(ictx, stop, stage, written)
	}()
	resolved, err := c.installer.Install(ictx, set, root, say)
	stop(nil)
	<-watched
	var full *spaceError
	var big *layerSizeError
	if cause := context.Cause(ictx); err != nil && errors.As(cause, &full) {
		err = fmt.Errorf("the installer was stopped: %w", full)
	} else if err != nil && errors.As(cause, &big) {
		err = big.unavailable()
	}
	if err != nil {
		var unavailable *UnavailableError
		if errors.As(err, &unavailable) {
			return Manifest{}, err // as it is: the run's outcome carries its message
		}
		return Manifest{}, &InstallError{Key: key, Err: err}
	}

	if err := CheckLayer(root); err != nil {
		var bad *LayerError
		if errors.As(err, &bad) {
			// The packages' own contents, which the registry serves: the
			// request's to change, not the service's.
			return Manifest{}, &UnavailableError{Err: err, Message: text.Clip(fmt.Sprintf(
				"the packages' files hold %s, which %s: brig serves no setuid, setgid or special file, hard link or link leading outside in a package layer. Ask for another version, or another package.",
				bad.Path, bad.Reason), maxMessage)}
		}
		return Manifest{}, fmt.Errorf("publishing layer %s: %w", key, err)
	}
	size, err := normaliseTree(stage, os.Geteuid(), os.Getegid())
	if err != nil {
		return Manifest{}, fmt.Errorf("publishing layer %s: %w", key, err)
	}
	if size > c.layerMax {
		return Manifest{}, (&layerSizeError{size: size, max: c.layerMax, done: true}).unavailable()
	}
	if err := c.makeRoom(); err != nil {
		return Manifest{}, &InstallError{Key: key, Err: err}
	}
	m := Manifest{
		Key:            key,
		Language:       set.Language,
		Runtime:        set.Runtime,
		Options:        slices.Clone(set.Options),
		Packages:       resolved,
		Bytes:          size,
		InstalledAt:    time.Now().UTC(),
		InstallSeconds: math.Round(time.Since(began).Seconds()*1e6) / 1e6,
	}
	for _, r := range set.Requests {
		m.Requests = append(m.Requests, r.Raw)
	}
	if err := writeManifest(filepath.Join(stage, manifestName), m); err != nil {
		return Manifest{}, fmt.Errorf("publishing layer %s: %w", key, err)
	}
	dst := filepath.Join(c.layersDir, key)
	if err := os.Rename(stage, dst); err != nil {
		return Manifest{}, fmt.Errorf("publishing layer %s: %w", key, err)
	}
	// After the rename: some file systems set a moved directory's times.
	m.LastUsed = time.Now()
	c.touch(key, m.LastUsed)
	if err := syncDir(c.layersDir); err != nil {
		// Published, but maybe not after a crash: a half-layer can't result,
		// the rename is atomic, so say it and go on.
		c.log.Warn("syncing the package cache after a publish", "key", key, "err", err)
	}
	return m, nil
}

// normaliseTree gives every entry under dir (dir included) to uid:gid and
// clears its group and other write bits, and returns the tree's disk usage
// (allocated blocks). It never follows a symlink: Lchown, and no chmod of a
// link. CheckLayer has refused hard links, so no file outside the tree is
// changed.
func normaliseTree(dir string, uid, gid int) (int64, error) {
	var size int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(p, uid, gid); err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if err := os.Chmod(p, fi.Mode().Perm()&^0o022); err != nil {
				return err
			}
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			size += st.Blocks * 512
		} else {
			size += fi.Size()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("normalising owners and modes: %w", err)
	}
	return size, nil
}

func writeManifest(path string, m Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the manifest: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("writing the manifest: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing the manifest: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// spaceCheckEvery is how often an install's disk is checked.
const spaceCheckEvery = 250 * time.Millisecond

// stillInstallingEvery is how long an install may send no progress line
// before brig sends one of its own, with the size written so far (at the next
// measure of it: a second or more apart).
const stillInstallingEvery = 5 * time.Second

// spaceError is a cache file system with less free than the cache keeps.
type spaceError struct{ msg string }

func (e *spaceError) Error() string { return e.msg }

// LowSpace says what the file system of dir lacks of what a cache there keeps
// free (minFree bytes, and a twentieth of its inodes where it counts them),
// or "" if nothing, with what it has free.
func LowSpace(dir string, minFree int64) (low, free string, err error) {
	low, free, _, err = lowSpace(dir, minFree)
	return low, free, err
}

// lowSpace is LowSpace, with how many bytes are missing of minFree.
func lowSpace(dir string, minFree int64) (low, free string, missing int64, err error) {
	bytes, inodes, files, err := freeSpace(dir)
	if err != nil {
		return "", "", 0, err
	}
	free = fmt.Sprintf("%s and %d inodes free", mib(bytes), inodes)
	missing = max(0, minFree-bytes)
	if missing > 0 {
		return fmt.Sprintf("%s free, less than the %s brig keeps free there (packages.min_free_bytes)", mib(bytes), mib(minFree)), free, missing, nil
	}
	if files > 0 && inodes < files/20 {
		return fmt.Sprintf("%d of its %d inodes free, less than the twentieth brig keeps free", inodes, files), free, 0, nil
	}
	return "", free, 0, nil
}

// freeSpace reads the bytes and inodes free to an unprivileged writer on
// dir's file system, and its inodes in all (0 where it does not count them).
func freeSpace(dir string) (bytes int64, inodes, files uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, 0, fmt.Errorf("reading the free space of %s: %w", dir, err)
	}
	unit := st.Frsize // statfs counts blocks in fragments
	if unit == 0 {
		unit = st.Bsize
	}
	return int64(st.Bavail) * unit, st.Ffree, st.Files, nil
}

// makeRoom evicts unused layers, least recently used first, until the cache's
// file system has what the cache keeps free; it fails with a *spaceError once
// no unused layer is left, or at once, evicting none, when the unused layers
// could not make up the bytes missing.
func (c *Cache) makeRoom() error { return c.makeRoomAfter(nil) }

// makeRoomAfter is makeRoom, which calls first, when not nil and the disk
// lacks room, before it evicts a layer or fails for space, and does neither
// when first returns false; it then reads the disk again, which first may
// have waited on.
func (c *Cache) makeRoomAfter(first func() bool) error {
	full := func(low, why string) error {
		return &spaceError{msg: "the disk of this host's package cache has " + low + ", and " + why +
			": the host's operator must free space there; the same request may work later, unless its packages alone fill the disk"}
	}
	low, _, missing, err := lowSpace(c.stageDir, c.minFree)
	if err != nil || low == "" {
		return err
	}
	if first != nil {
		if !first() {
			return nil
		}
		if low, _, missing, err = lowSpace(c.stageDir, c.minFree); err != nil || low == "" {
			return err
		}
	}
	// Evicting is worth it only if the unused layers could make up for what
	// is missing: the disk may be filled by something else, and emptying the
	// cache would then save no install.
	c.mu.Lock()
	var unused int64
	for _, l := range c.layers {
		if l.refs == 0 {
			unused += l.manifest.Bytes
		}
	}
	c.mu.Unlock()
	if unused == 0 {
		return full(low, "no unused package layer is left to evict")
	} else if unused < missing {
		return full(low, fmt.Sprintf("the package layers no run holds, %s, would not make up the %s missing (none was evicted)", mib(unused), mib(missing)))
	}
	for {
		c.mu.Lock()
		var v victim
		oldest := c.oldestUnusedLocked()
		if oldest != nil {
			v, err = c.takeLocked(oldest.manifest.Key)
			if err == nil {
				c.stats.Evictions++
			}
		}
		c.mu.Unlock()
		if oldest == nil {
			return full(low, "no unused package layer is left to evict")
		}
		if err != nil {
			return full(low, "evicting a package layer failed ("+err.Error()+")")
		}
		c.log.Info("evicting a package layer to keep the cache's disk space free", "key", v.key, "low", low)
		c.remove([]victim{v}) // now: the space is wanted before the next check
		if low, _, err = LowSpace(c.stageDir, c.minFree); err != nil || low == "" {
			return err
		}
	}
}

// watchSpace makes room every spaceCheckEvery while an install runs, and stops
// it (cancel, with the *spaceError) once it can't; and it measures the install's
// staging tree, on a goroutine of its own, stopping it (with a
// *layerSizeError) once that passes the cache's layerMax. A measure walks the
// tree (about 4 us a file, BenchmarkTreeSize), so one that took d waits at
// least 10 d for the next, and a second at least: a tenth of a core. The
// disk's free space, read at every tick, starts one sooner, 2 d after the
// last (a third of a core at most, against a neighbour filling the disk),
// when it has fallen by more than the tree's room below layerMax since the
// last began: an install can't have grown by more than the disk. And before
// a layer is evicted for its room, the size is known: an install past it is
// stopped before it evicts anyone's layer.
//
// written gets each measure's size, from this goroutine.
func (c *Cache) watchSpace(ctx context.Context, cancel context.CancelCauseFunc, stage string, written func(int64)) {
	t := time.NewTicker(spaceCheckEvery)
	defer t.Stop()
	type measure struct {
		size      int64
		took      time.Duration
		beganFree int64
	}
	measured := make(chan measure, 1)
	measuring := false
	defer func() {
		if measuring {
			<-measured // the walk ends with ctx
		}
	}()
	var (
		next, soon time.Time // when the last measure's cost allows the next: at all, and for a fall of the disk
		size       int64     // the last measure
		freeAt     int64     // the disk's free bytes when it began
	)
	start := func(free int64) {
		measuring = true
		go func() {
			began := time.Now()
			n := treeSize(ctx, stage)
			measured <- measure{n, time.Since(began), free}
		}()
	}
	// over takes a measure's result, and reports whether it stopped the
	// install.
	over := func(m measure) bool {
		measuring, size, freeAt = false, m.size, m.beganFree
		now := time.Now()
		next, soon = now.Add(max(time.Second, 10*m.took)), now.Add(2*m.took)
		if size > c.layerMax {
			cancel(&layerSizeError{size: size, max: c.layerMax})
			return true
		}
		written(size)
		return false
	}
	// await waits for the measure under way, and reports whether the
	// install ended or was stopped for its size.
	await := func() bool {
		select {
		case <-ctx.Done():
			return true
		case m := <-measured:
			return over(m)
		}
	}
	var free int64 // the disk's, at this tick
	// sizeFirst comes before a layer is evicted for room, or the install
	// stopped for want of it: an install past its size is stopped for that,
	// the request's to change, not the host's (the last review's: a package
	// set too large for the disk had ended internal).
	sizeFirst := func() bool {
		if !measuring {
			start(free)
		}
		return !await()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-measured:
			if over(m) {
				return
			}
			continue
		case <-t.C:
		}
		var err error
		free, _, _, err = freeSpace(c.stageDir)
		now := time.Now()
		if !measuring && (now.After(next) || err == nil && now.After(soon) && freeAt-free > c.layerMax-size) {
			start(free)
		}
		if err := c.makeRoomAfter(sizeFirst); err != nil {
			var full *spaceError
			if errors.As(err, &full) {
				cancel(err)
				return
			}
			c.log.Warn("checking an install's disk space", "err", err)
		}
	}
}

// treeSize is the disk usage (allocated blocks) of the tree at dir, as far as
// it can be read while an installer writes it: what vanishes or can't be read
// meanwhile is not counted. It stops early, short, once ctx ends. pip's
// temporary folders (pipTmpName) are not the layer: they hold the downloaded
// archives besides the unpacked set, which pip then moves into the layer,
// where it is counted (the review of 2026-12-06 saw a layer of 230 MiB
// stopped at 308.6 MiB for its wheel); the free-space check bounds them.
func treeSize(ctx context.Context, dir string) int64 {
	var size int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return filepath.SkipAll
		}
		if err != nil {
			return nil // gone, or unreadable: its subtree is skipped
		}
		if d.IsDir() && d.Name() == pipTmpName && filepath.Dir(p) == dir {
			return filepath.SkipDir
		}
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) == nil {
			size += st.Blocks * 512
		}
		return nil
	})
	return size
}

// layerSizeError is an install whose tree passed the cache's layerMax: size so
// far, or in all when done.
type layerSizeError struct {
	size, max int64
	done      bool
}

func (e *layerSizeError) Error() string {
	return fmt.Sprintf("the install took %s, more than layer_max_bytes (%s)", mib(e.size), mib(e.max))
}

// unavailable is the run's failure: the packages asked for are larger than
// this host keeps, which the request can change, not the service.
func (e *layerSizeError) unavailable() error {
	took := "take " + mib(e.size) + " installed"
	if !e.done {
		took = "took " + mib(e.size) + " before their install was stopped"
	}
	return &UnavailableError{Err: e, Message: fmt.Sprintf(
		"the packages %s, more than the %s one package set may take on this host (packages.layer_max_bytes): ask for fewer or smaller packages, or ask the host's operator to raise it",
		took, mib(e.max))}
}

// mib words a size in MiB, or in bytes below one.
func mib(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d bytes", n)
	}
	// To a tenth, rounded down: a layer of 1.95 MiB over a bound of 1.9 read
	// "took 1 MiB, more than the 1 MiB" (the packages probe of 2026-12-06).
	return strconv.FormatFloat(float64(n*10>>20)/10, 'f', -1, 64) + " MiB"
}

// victim is an evicted layer moved into staging/, to be deleted.
type victim struct {
	key, dir string
}

// evictLocked takes the least recently used layers that no lease holds out
// of the cache until its layers total at most limit bytes, moving each into
// staging/ (a rename, quick enough to hold the lock for; remove deletes
// them after). A layer held is never taken, so the total may stay above the
// limit.
func (c *Cache) evictLocked(limit int64) ([]victim, error) {
	var victims []victim
	for c.bytes > limit {
		oldest := c.oldestUnusedLocked()
		if oldest == nil {
			break
		}
		v, err := c.takeLocked(oldest.manifest.Key)
		if err != nil {
			return victims, err
		}
		c.stats.Evictions++
		victims = append(victims, v)
	}
	return victims, nil
}

// oldestUnusedLocked is the least recently used layer no lease holds, or nil.
func (c *Cache) oldestUnusedLocked() *cachedLayer {
	var oldest *cachedLayer
	for _, l := range c.layers {
		if l.refs == 0 && (oldest == nil || l.lastUse.Before(oldest.lastUse)) {
			oldest = l
		}
	}
	return oldest
}

// takeLocked moves layer key out of layers/ and out of the cache. A disk too
// full for the folder it is moved into has it deleted where it is, with the
// lock held: no install of its key can publish meanwhile (there is none while
// the cache holds the layer, and none starts without the lock).
func (c *Cache) takeLocked(key string) (victim, error) { return c.takeAsLocked(key, evictedPrefix) }

// Prefixes of the folders of staging/ that hold layers taken out of the
// cache: evicted ones, deleted; and stale ones, an open layer's while it is
// re-resolved, put back by the next open after a crash meanwhile.
const (
	evictedPrefix = "evicted."
	stalePrefix   = "stale."
)

// takeAsLocked is takeLocked, into a folder of staging/ named with prefix.
func (c *Cache) takeAsLocked(key, prefix string) (victim, error) {
	src := filepath.Join(c.layersDir, key)
	trash, err := os.MkdirTemp(c.stageDir, prefix+key+".")
	if err == nil {
		if err = os.Rename(src, filepath.Join(trash, key)); err != nil {
			os.Remove(trash)
		}
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		trash, err = "", os.RemoveAll(src)
	}
	if err != nil {
		return victim{}, fmt.Errorf("evicting layer %s: %w", key, err)
	}
	c.bytes -= c.layers[key].manifest.Bytes
	delete(c.layers, key)
	return victim{key: key, dir: trash}, nil
}

// remove deletes evicted layers, after the lock is released: a caller whose
// install evicted layers may get its lease before they are deleted. What it
// can't delete OpenCache will.
func (c *Cache) remove(victims []victim) {
	for _, v := range victims {
		if v.dir == "" { // deleted already (takeLocked)
			c.log.Info("package layer evicted", "key", v.key)
			continue
		}
		if err := os.RemoveAll(v.dir); err != nil {
			c.log.Warn("deleting an evicted package layer", "key", v.key, "dir", v.dir, "err", err)
			continue
		}
		c.log.Info("package layer evicted", "key", v.key)
	}
}

// List returns the manifests of the published layers, each with its last
// use, the most recently used first.
func (c *Cache) List() []Manifest {
	c.mu.Lock()
	out := make([]Manifest, 0, len(c.layers))
	for _, l := range c.layers {
		m := l.manifest
		m.LastUsed = l.lastUse
		out = append(out, m)
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b Manifest) int { return b.LastUsed.Compare(a.LastUsed) })
	return out
}

// Remove deletes the layer key; a layer a run holds is refused with ErrInUse,
// and a key the cache does not hold is ErrNoLayer.
func (c *Cache) Remove(key string) error {
	if !keyRE().MatchString(key) {
		return fmt.Errorf("removing layer %q: %w (a key is 64 hexadecimal digits, as `brig packages ls` shows)", key, ErrNoLayer)
	}
	c.mu.Lock()
	l, ok := c.layers[key]
	switch {
	case c.closed:
		c.mu.Unlock()
		return ErrCacheClosed
	case !ok:
		c.mu.Unlock()
		return fmt.Errorf("removing layer %s: %w", key, ErrNoLayer)
	case l.refs > 0:
		c.mu.Unlock()
		return fmt.Errorf("removing layer %s: %w by %d runs", key, ErrInUse, l.refs)
	}
	v, err := c.takeLocked(key)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	c.remove([]victim{v})
	return nil
}

// Prune evicts the least recently used layers no run holds until the cache
// holds at most maxBytes (zero: every layer not in use), and returns their
// keys.
func (c *Cache) Prune(maxBytes int64) (removed []string, err error) {
	if maxBytes < 0 {
		return nil, fmt.Errorf("pruning the package cache: a negative size (%d bytes)", maxBytes)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrCacheClosed
	}
	victims, err := c.evictLocked(maxBytes)
	c.mu.Unlock()
	c.remove(victims)
	for _, v := range victims {
		removed = append(removed, v.key)
	}
	if err != nil {
		return removed, fmt.Errorf("pruning the package cache: %w", err)
	}
	return removed, nil
}

// Stats returns the cache's counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Layers = len(c.layers)
	s.Bytes = c.bytes
	return s
}

// ListLayers reads the manifests of the layers in the cache directory dir
// without opening the cache (no lock: a service may hold it), most recently
// used first, for `brig packages ls`. What is not a complete layer is skipped.
func ListLayers(dir string) ([]Manifest, error) {
	ents, err := os.ReadDir(filepath.Join(dir, layersDirName))
	if errors.Is(err, os.ErrNotExist) {
		return []Manifest{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the package cache: %w", err)
	}
	out := []Manifest{}
	for _, e := range ents {
		m, used, err := readLayer(filepath.Join(dir, layersDirName, e.Name()), e.Name())
		if err != nil {
			continue
		}
		m.LastUsed = used
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LastUsed.After(out[j].LastUsed) })
	return out, nil
}
