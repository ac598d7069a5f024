package packages

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/internal/testutil"
)

// fakeInstaller writes a small importable tree and reports the requests as
// resolved. It counts its calls, and can wait, fail or leave a bad tree.
type fakeInstaller struct {
	// size is the bytes of the one data file it writes (0: 4 KiB).
	size int
	// lines are sent as progress: the first before started is signalled, the
	// rest after gate opens.
	lines []string
	// started, when set, gets a value once Install has sent its first line.
	started chan string
	// gate, when set, is waited on (or the context) before the install goes on.
	gate chan struct{}
	// err is returned after the tree is written.
	err error
	// spoil, when set, runs on the written tree (a setuid file, a device...).
	spoil func(root string) error

	mu    sync.Mutex
	calls int
	// ctxErr is the context's error when Install returned.
	ctxErr error
}

func (f *fakeInstaller) Install(ctx context.Context, set Set, staging string, progress func(string)) ([]Resolved, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	if ents, err := os.ReadDir(staging); err != nil || len(ents) != 0 {
		return nil, fmt.Errorf("staging %s is not an empty directory (%v)", staging, err)
	}
	lines := f.lines
	if len(lines) > 0 {
		progress(lines[0])
		lines = lines[1:]
	}
	if f.started != nil {
		f.started <- set.Key()
	}
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			f.mu.Lock()
			f.ctxErr = ctx.Err()
			f.mu.Unlock()
			return nil, fmt.Errorf("running pip: %w", ctx.Err())
		}
	}
	for _, l := range lines {
		progress(l)
	}
	size := f.size
	if size == 0 {
		size = 4096
	}
	var resolved []Resolved
	for _, r := range set.Requests {
		dir := filepath.Join(staging, r.Name)
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "__init__.py"), []byte("VERSION = '1.0.0'\n"), 0o666); err != nil {
			return nil, err
		}
		resolved = append(resolved, Resolved{Name: r.Name, Version: "1.0.0", Hash: "sha256=00", Request: r.Raw})
	}
	if err := os.WriteFile(filepath.Join(staging, "data.bin"), bytes.Repeat([]byte{'x'}, size), 0o644); err != nil {
		return nil, err
	}
	if f.spoil != nil {
		if err := f.spoil(staging); err != nil {
			return nil, err
		}
	}
	if f.err != nil {
		return nil, f.err
	}
	return resolved, nil
}

func (f *fakeInstaller) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func openTestCache(t *testing.T, dir string, maxBytes int64, inst Installer) *Cache {
	t.Helper()
	c, err := OpenCache(CacheConfig{Dir: dir, MaxBytes: maxBytes, Installer: inst, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("opening the cache: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func acquire(t *testing.T, c *Cache, set Set) *Lease {
	t.Helper()
	l, err := c.Acquire(context.Background(), set, nil)
	if err != nil {
		t.Fatalf("acquiring %v: %v", set.Requests, err)
	}
	return l
}

func keys(ms []Manifest) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Key)
	}
	return out
}

// entries lists what a cache directory holds, for the tests that a failure
// left nothing.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestCacheSaysStillInstalling: an install that sends no line for a while
// gets brig's, with the size written so far, so that a harness can tell a slow
// install from a hung one.
func TestCacheSaysStillInstalling(t *testing.T) {
	testutil.CheckLeaks(t)
	inst := &fakeInstaller{lines: []string{"resolving"}, started: make(chan string, 1), gate: make(chan struct{})}
	c := openTestCache(t, filepath.Join(t.TempDir(), "cache"), 0, inst)
	c.stillEvery = 100 * time.Millisecond
	set := mustSet(t, "python", "3.11.2", "pkg-a==1")

	var mu sync.Mutex
	var lines []string
	still := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		l, err := c.Acquire(context.Background(), set, func(line string) {
			mu.Lock()
			defer mu.Unlock()
			lines = append(lines, line)
			if strings.HasPrefix(line, "brig: still installing: ") {
				select {
				case still <- line:
				default:
				}
			}
		})
		if err == nil {
			l.Release()
		}
		done <- err
	}()
	<-inst.started
	select {
	case line := <-still:
		if !strings.Contains(line, "written so far") {
			t.Errorf("got %q, want the size written so far", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("got no line of brig's in 10 s of an install that sent none")
	}
	close(inst.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) < 3 || lines[0] != installingLine(set) || lines[1] != "resolving" {
		t.Errorf("got lines %q, want brig's first, the installer's, then brig's while it waited", lines)
	}
}

func TestCacheInstallThenHit(t *testing.T) {
	testutil.CheckLeaks(t)
	dir := filepath.Join(t.TempDir(), "cache")
	inst := &fakeInstaller{}
	c := openTestCache(t, dir, 0, inst)
	set := mustSet(t, "python", "3.11.2", "Requests>=2", "numpy==1.26.4")

	var lines []string
	inst.lines = []string{"resolving", "done"}
	first, err := c.Acquire(context.Background(), set, func(l string) { lines = append(lines, l) })
	if err != nil {
		t.Fatal(err)
	}
	if first.Cached {
		t.Errorf("got Cached true for the first acquire, want false")
	}
	// brig's own line first, what is installed; then the installer's.
	if want := []string{installingLine(set), "resolving", "done"}; !slices.Equal(lines, want) {
		t.Errorf("got progress %q, want %q", lines, want)
	}
	if want := filepath.Join(dir, "layers", set.Key(), "root"); first.Dir != want {
		t.Errorf("got Dir %s, want %s", first.Dir, want)
	}
	if _, err := os.Stat(filepath.Join(first.Dir, "requests", "__init__.py")); err != nil {
		t.Errorf("the layer lacks its module: %v", err)
	}
	m := first.Manifest
	if m.Key != set.Key() || m.Language != "python" || m.Runtime != "3.11.2" || m.Bytes <= 4096 ||
		!slices.Equal(m.Requests, []string{"Requests>=2", "numpy==1.26.4"}) || len(m.Packages) != 2 || m.InstalledAt.IsZero() {
		t.Errorf("got manifest %+v", m)
	}
	var onDisk Manifest
	b, err := os.ReadFile(filepath.Join(dir, "layers", set.Key(), "manifest.json"))
	if err == nil {
		err = json.Unmarshal(b, &onDisk)
	}
	if err != nil || onDisk.Key != m.Key || onDisk.Bytes != m.Bytes || !reflect.DeepEqual(onDisk.Packages, m.Packages) {
		t.Errorf("got manifest.json %+v (%v), want %+v", onDisk, err, m)
	}

	// The installer made its files group and world writable: publishing
	// takes that away, and gives them to the cache's owner.
	err = filepath.WalkDir(first.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o022 != 0 {
			t.Errorf("got %s mode %v, want no group or other write", p, fi.Mode())
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Geteuid() {
			t.Errorf("got %s owned by %d, want %d", p, st.Uid, os.Geteuid())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	second := acquire(t, c, mustSet(t, "python", "3.11.2", "numpy==1.26.4", "requests >=2"))
	if !second.Cached || second.Dir != first.Dir || inst.Calls() != 1 {
		t.Errorf("got Cached %v, Dir %s after %d installs, want a hit on %s after 1", second.Cached, second.Dir, inst.Calls(), first.Dir)
	}
	first.Release()
	second.Release()
	second.Release() // a second release does nothing

	s := c.Stats()
	if s.Hits != 1 || s.Misses != 1 || s.Installs != 1 || s.InstallFailures != 0 || s.Layers != 1 || s.Bytes != m.Bytes || s.InstallSeconds <= 0 {
		t.Errorf("got stats %+v, want 1 hit, 1 miss, 1 install, 1 layer of %d bytes", s, m.Bytes)
	}
	if got := entries(t, filepath.Join(dir, "staging")); len(got) != 0 {
		t.Errorf("got staging %q, want it empty", got)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("got the cache directory's mode %v (%v), want 0755", fi.Mode(), err)
	}
}

func TestCacheConcurrentAcquireInstallsOnce(t *testing.T) {
	testutil.CheckLeaks(t)
	const callers = 8
	inst := &fakeInstaller{
		lines:   []string{"resolving", "downloading", "done"},
		started: make(chan string, 1),
		gate:    make(chan struct{}),
	}
	c := openTestCache(t, t.TempDir(), 0, inst)
	set := mustSet(t, "javascript", "20.20.2", "lodash@^4.17.0")

	type result struct {
		lease *Lease
		err   error
		lines []string
	}
	results := make(chan result, callers)
	acquireOne := func() {
		var lines []string
		l, err := c.Acquire(context.Background(), set, func(s string) { lines = append(lines, s) })
		results <- result{l, err, lines}
	}
	go acquireOne()
	<-inst.started // the install has sent its first line: the others join late
	for range callers - 1 {
		go acquireOne()
	}
	waitFor(t, "all callers waiting on the install", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		f := c.flights[set.Key()]
		return f != nil && f.waiters == callers
	})
	close(inst.gate)

	var dirs []string
	for range callers {
		r := <-results
		if r.err != nil {
			t.Fatalf("got %v, want a lease", r.err)
		}
		if r.lease.Cached {
			t.Errorf("got Cached true for a caller that waited for the install")
		}
		if want := append([]string{installingLine(set)}, inst.lines...); !slices.Equal(r.lines, want) {
			t.Errorf("got progress %q, want %q", r.lines, want)
		}
		dirs = append(dirs, r.lease.Dir)
		defer r.lease.Release()
	}
	if got := inst.Calls(); got != 1 {
		t.Errorf("got %d installs, want 1", got)
	}
	if dirs = slices.Compact(dirs); len(dirs) != 1 {
		t.Errorf("got leases on %q, want one layer", dirs)
	}
	c.mu.Lock()
	refs := c.layers[set.Key()].refs
	c.mu.Unlock()
	if refs != callers {
		t.Errorf("got %d refs, want %d", refs, callers)
	}
	if s := c.Stats(); s.Misses != callers || s.Installs != 1 {
		t.Errorf("got stats %+v, want %d misses and 1 install", s, callers)
	}
}

func TestCacheDifferentSetsInstallSeparately(t *testing.T) {
	testutil.CheckLeaks(t)
	inst := &fakeInstaller{started: make(chan string, 2), gate: make(chan struct{})}
	c := openTestCache(t, t.TempDir(), 0, inst)
	sets := []Set{
		mustSet(t, "python", "3.11.2", "numpy==1.26.4"),
		mustSet(t, "python", "3.11.2", "numpy==2.0.0"),
	}
	leases := make(chan *Lease, len(sets))
	for _, s := range sets {
		go func() {
			l, err := c.Acquire(context.Background(), s, nil)
			if err != nil {
				t.Error(err)
			}
			leases <- l
		}()
	}
	// Both installs run at once: neither waits for the other.
	got := []string{<-inst.started, <-inst.started}
	close(inst.gate)
	slices.Sort(got)
	want := []string{sets[0].Key(), sets[1].Key()}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("got installs of %q, want %q", got, want)
	}
	a, b := <-leases, <-leases
	if a == nil || b == nil {
		t.FailNow()
	}
	defer a.Release()
	defer b.Release()
	if a.Dir == b.Dir || inst.Calls() != 2 {
		t.Errorf("got %s and %s after %d installs, want two layers", a.Dir, b.Dir, inst.Calls())
	}
}

func TestCacheCancelledCallerLeavesTheInstall(t *testing.T) {
	testutil.CheckLeaks(t)
	inst := &fakeInstaller{lines: []string{"resolving"}, started: make(chan string, 1), gate: make(chan struct{})}
	c := openTestCache(t, t.TempDir(), 0, inst)
	set := mustSet(t, "python", "3.11.2", "numpy==1.26.4")

	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, set, nil)
		gaveUp <- err
	}()
	<-inst.started
	stays := make(chan *Lease, 1)
	go func() { stays <- acquire(t, c, set) }()
	waitFor(t, "both callers waiting", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.flights[set.Key()].waiters == 2
	})
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v from the cancelled caller, want context.Canceled", err)
	}
	close(inst.gate)
	l := <-stays
	inst.mu.Lock()
	ctxErr := inst.ctxErr
	inst.mu.Unlock()
	if ctxErr != nil {
		t.Errorf("got the install's context ended (%v), want it to go on", ctxErr)
	}
	// Only the caller that stayed holds the layer.
	if err := c.Remove(set.Key()); !errors.Is(err, ErrInUse) {
		t.Errorf("got %v removing a held layer, want ErrInUse", err)
	}
	l.Release()
	if err := c.Remove(set.Key()); err != nil {
		t.Errorf("got %v removing a layer no one holds, want it removed", err)
	}
}

// TestCacheInstallStopsWhenNoCallerWaits: once every caller of an install
// has given up (its runs stopped), the install's context ends (the installer
// is killed), and a caller that comes afterwards gets an install of its own.
func TestCacheInstallStopsWhenNoCallerWaits(t *testing.T) {
	testutil.CheckLeaks(t)
	inst := &fakeInstaller{started: make(chan string, 2), gate: make(chan struct{})}
	var logs testutil.LogBuffer
	c, err := OpenCache(CacheConfig{Dir: t.TempDir(), Installer: inst, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	set := mustSet(t, "python", "3.11.2", "numpy==1.26.4")

	abandon(t, c, set, inst.started)
	// Counted as failed once its goroutine is done with it, after the
	// installer has returned.
	waitFor(t, "the abandoned install to end", func() bool { return c.Stats().InstallFailures == 1 })
	// Logged as what was asked, not warned of as a failure (the admission
	// audit's DELETEs each logged a warning).
	waitFor(t, "the abandoned install's log line", func() bool {
		return len(logs.Lines("package layer install stopped: no run waits for it")) == 1
	})
	if n := len(logs.Lines("package layer install failed")); n != 0 {
		t.Errorf("got %d warnings of a failed install, want none: %s", n, logs.String())
	}
	inst.mu.Lock()
	ctxErr := inst.ctxErr
	inst.mu.Unlock()
	if !errors.Is(ctxErr, context.Canceled) {
		t.Errorf("got the installer's context ending with %v, want it cancelled", ctxErr)
	}
	if s := c.Stats(); s.Layers != 0 {
		t.Errorf("got stats %+v, want no layer from the stopped install", s)
	}
	// The next caller gets a fresh install, which goes on to publish.
	close(inst.gate)
	l := acquire(t, c, set)
	defer l.Release()
	if got := inst.Calls(); got != 2 {
		t.Errorf("got %d installs, want 2 (the stopped one and a fresh one)", got)
	}
	if l.Cached {
		t.Error("got a cached lease, want the fresh install's")
	}
}

// TestCacheCallerDuringAbandonedInstallWaitsForItsEnd: a caller that comes
// while an abandoned install is being stopped does not join it (it would get
// its cancellation); it waits for that install's end and installs afresh.
func TestCacheCallerDuringAbandonedInstallWaitsForItsEnd(t *testing.T) {
	testutil.CheckLeaks(t)
	release := make(chan struct{})
	inst := &slowStopInstaller{fakeInstaller: fakeInstaller{started: make(chan string, 2), gate: make(chan struct{})},
		release: release, stopping: make(chan struct{})}
	c := openTestCache(t, t.TempDir(), 0, inst)
	set := mustSet(t, "python", "3.11.2", "numpy==1.26.4")

	abandon(t, c, set, inst.started)
	// The first install has seen its cancellation but has not returned yet.
	<-inst.stopping
	got := make(chan *Lease, 1)
	go func() { got <- acquire(t, c, set) }()
	select {
	case <-inst.started:
		t.Fatal("a second install started before the stopped one ended")
	case <-time.After(100 * time.Millisecond):
	}
	close(inst.gate)
	close(release)
	l := <-got
	defer l.Release()
	if n := inst.Calls(); n != 2 {
		t.Errorf("got %d installs, want 2", n)
	}
}

// abandon starts an Acquire of set, waits until its install has started (a
// value on started), and has the caller give up, as a stopped run does.
func abandon(t *testing.T, c *Cache, set Set, started <-chan string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, set, nil)
		gaveUp <- err
	}()
	<-started
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v from the cancelled caller, want context.Canceled", err)
	}
}

// slowStopInstaller is a fakeInstaller that, once its context ends, says so
// on stopping and returns only when release is closed: an installer whose
// process takes a while to die.
type slowStopInstaller struct {
	fakeInstaller
	release  chan struct{}
	stopping chan struct{}
}

func (f *slowStopInstaller) Install(ctx context.Context, set Set, staging string, progress func(string)) ([]Resolved, error) {
	res, err := f.fakeInstaller.Install(ctx, set, staging, progress)
	if ctx.Err() != nil {
		close(f.stopping)
		<-f.release
	}
	return res, err
}

func TestCacheFailedInstall(t *testing.T) {
	unavailable := &UnavailableError{Message: "No matching distribution found for numpy==99.0.0"}
	tests := []struct {
		name  string
		root  bool
		inst  *fakeInstaller
		check func(t *testing.T, err error)
	}{
		{name: "unavailable", inst: &fakeInstaller{err: unavailable}, check: func(t *testing.T, err error) {
			if err != error(unavailable) || !errors.Is(err, ErrUnavailable) {
				t.Errorf("got %#v, want the installer's *UnavailableError as it is", err)
			}
		}},
		{name: "installer error", inst: &fakeInstaller{err: errors.New("pip exited with status 2")}, check: func(t *testing.T, err error) {
			if err == nil || !strings.Contains(err.Error(), "installing layer") || !strings.Contains(err.Error(), "pip exited") {
				t.Errorf("got %v, want the installer's error wrapped", err)
			}
		}},
		{name: "setuid file", inst: &fakeInstaller{spoil: func(root string) error {
			return os.Chmod(filepath.Join(root, "data.bin"), 0o755|os.ModeSetuid)
		}}, check: wantBadLayer("data.bin, which is setuid")},
		{name: "device", root: true, inst: &fakeInstaller{spoil: func(root string) error {
			return syscall.Mknod(filepath.Join(root, "null"), syscall.S_IFCHR|0o666, int(1<<8|3))
		}}, check: wantBadLayer("null, which is a device")},
		{name: "escaping symlink", inst: &fakeInstaller{spoil: func(root string) error {
			return os.Symlink("../../../../etc", filepath.Join(root, "numpy", "etc"))
		}}, check: wantBadLayer("numpy/etc, which points to")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root {
				testutil.RequireRoot(t)
			}
			testutil.CheckLeaks(t)
			dir := t.TempDir()
			c := openTestCache(t, dir, 0, tt.inst)
			set := mustSet(t, "python", "3.11.2", "numpy==1.26.4")
			l, err := c.Acquire(context.Background(), set, nil)
			if l != nil {
				t.Fatalf("got a lease on %s, want an error", l.Dir)
			}
			tt.check(t, err)
			for _, sub := range []string{"layers", "staging"} {
				if got := entries(t, filepath.Join(dir, sub)); len(got) != 0 {
					t.Errorf("got %s holding %q, want it empty", sub, got)
				}
			}
			if got := c.List(); len(got) != 0 {
				t.Errorf("got layers %q, want none", keys(got))
			}
			// A refusal the request is at fault for is the answer again,
			// from memory, for refusedFor; then, or at once for another
			// failure, the next acquire tries again.
			if errors.Is(err, ErrUnavailable) {
				_, again := c.Acquire(context.Background(), set, nil)
				if s := c.Stats(); again != err || tt.inst.Calls() != 1 || s.Refused != 1 {
					t.Errorf("within refusedFor: got %v, %d installs, stats %+v; want the same refusal, no install", again, tt.inst.Calls(), s)
				}
				c.mu.Lock()
				r := c.refused[set.Key()]
				r.until = time.Now().Add(-time.Second)
				c.refused[set.Key()] = r
				c.mu.Unlock()
			}
			c.Acquire(context.Background(), set, nil)
			if s := c.Stats(); tt.inst.Calls() != 2 || s.InstallFailures != 2 || s.Installs != 0 {
				t.Errorf("got %d installs and stats %+v, want 2 failed installs", tt.inst.Calls(), s)
			}
		})
	}
}

func wantBadLayer(part string) func(t *testing.T, err error) {
	return func(t *testing.T, err error) {
		t.Helper()
		// The packages' contents: the run's package_unavailable, not internal.
		if !errors.Is(err, ErrBadLayer) || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), part) || !strings.Contains(err.Error(), "Ask for another version") {
			t.Errorf("got %v, want a refused layer (ErrBadLayer, ErrUnavailable) holding %q and a hint", err, part)
		}
	}
}

// layerBytes is the size of the fake installer's layer of one package with a
// data file of size bytes.
func layerBytes(t *testing.T, size int) int64 {
	t.Helper()
	c := openTestCache(t, t.TempDir(), 0, &fakeInstaller{size: size})
	l := acquire(t, c, mustSet(t, "python", "3.11.2", "aaa==1"))
	l.Release()
	return l.Manifest.Bytes
}

func TestCacheEviction(t *testing.T) {
	testutil.CheckLeaks(t)
	const size = 256 << 10
	one := layerBytes(t, size)
	dir := t.TempDir()
	// Room for two layers, not three (the layers differ by a few bytes of
	// manifest at most, far less than half of one).
	c := openTestCache(t, dir, one*5/2, &fakeInstaller{size: size})
	a := mustSet(t, "python", "3.11.2", "aaa==1")
	b := mustSet(t, "python", "3.11.2", "bbb==1")
	d := mustSet(t, "python", "3.11.2", "ddd==1")

	held := acquire(t, c, a) // the oldest, but held
	acquire(t, c, b).Release()
	acquire(t, c, d).Release()

	if got, want := keys(c.List()), []string{d.Key(), a.Key()}; !slices.Equal(got, want) {
		t.Errorf("got layers %q, want %q (b evicted, a held)", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "layers", b.Key())); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %v for the evicted layer's directory, want it gone", err)
	}
	if _, err := os.Stat(filepath.Join(held.Dir, "aaa", "__init__.py")); err != nil {
		t.Errorf("the held layer lost its files: %v", err)
	}
	// The install's goroutine deletes the evicted layer after handing out
	// the lease.
	waitFor(t, "the evicted layer deleted", func() bool { return len(entries(t, filepath.Join(dir, "staging"))) == 0 })
	if s := c.Stats(); s.Evictions != 1 || s.Layers != 2 || s.Bytes > one*5/2 {
		t.Errorf("got stats %+v, want 1 eviction and 2 layers", s)
	}
	held.Release()

	// Held layers stay past the cap, and go when they are released. (A
	// layer alone is at most the cap: TestCacheBoundsALayer.)
	small := openTestCache(t, t.TempDir(), one*3/2, &fakeInstaller{size: size})
	la, lb := acquire(t, small, a), acquire(t, small, b)
	if got := keys(small.List()); !slices.Equal(got, []string{b.Key(), a.Key()}) {
		t.Errorf("got layers %q, want both held layers kept past the cap", got)
	}
	if _, err := os.Stat(filepath.Join(la.Dir, "aaa")); err != nil {
		t.Errorf("the held layer lost its files: %v", err)
	}
	la.Release()
	lb.Release()
	if got := keys(small.List()); len(got) != 1 {
		t.Errorf("got layers %q after the releases, want one, within the cap", got)
	}
}

func TestCacheSurvivesRestart(t *testing.T) {
	testutil.CheckLeaks(t)
	dir := t.TempDir()
	inst := &fakeInstaller{}
	c := openTestCache(t, dir, 0, inst)
	a := mustSet(t, "python", "3.11.2", "aaa==1")
	b := mustSet(t, "python", "3.11.2", "bbb==1")
	d := mustSet(t, "python", "3.11.2", "ddd==1")
	for _, s := range []Set{a, b, d, a} { // a installed first, used last
		acquire(t, c, s).Release()
	}
	before := c.List()
	if got, want := keys(before), []string{a.Key(), d.Key(), b.Key()}; !slices.Equal(got, want) {
		t.Fatalf("got order %q, want %q", got, want)
	}

	if _, err := OpenCache(CacheConfig{Dir: dir, Installer: inst}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("got %v opening a directory another cache holds, want it refused", err)
	}
	c.Close()

	c = openTestCache(t, dir, 0, inst)
	after := c.List()
	if got := keys(after); !slices.Equal(got, keys(before)) {
		t.Errorf("got order %q after a restart, want %q", got, keys(before))
	}
	for i := range after {
		if !after[i].LastUsed.Equal(before[i].LastUsed) || after[i].Bytes != before[i].Bytes {
			t.Errorf("got %s last used %v, %d bytes after a restart, want %v, %d",
				after[i].Key, after[i].LastUsed, after[i].Bytes, before[i].LastUsed, before[i].Bytes)
		}
	}
	if l := acquire(t, c, b); !l.Cached || inst.Calls() != 3 {
		t.Errorf("got Cached %v after %d installs, want a hit after 3", l.Cached, inst.Calls())
	} else {
		l.Release()
	}
	c.Close()

	// Reopened with a cap of one layer: the most recently used (b) stays.
	c = openTestCache(t, dir, after[0].Bytes+after[0].Bytes/2, inst)
	if got := keys(c.List()); !slices.Equal(got, []string{b.Key()}) {
		t.Errorf("got layers %q, want only the most recently used", got)
	}
}

func TestCacheIgnoresWhatACrashLeft(t *testing.T) {
	testutil.CheckLeaks(t)
	dir := t.TempDir()
	set := mustSet(t, "python", "3.11.2", "numpy==1.26.4")
	key := set.Key()
	// A crashed install: a staging folder with a plausible manifest and
	// half the content, and an eviction that was moving a layer away.
	crashed := filepath.Join(dir, "staging", key+".123456")
	if err := os.MkdirAll(filepath.Join(crashed, "root", "numpy"), 0o755); err != nil {
		t.Fatal(err)
	}
	m, _ := json.Marshal(Manifest{Key: key, Language: "python", Runtime: "3.11.2", Bytes: 1})
	if err := os.WriteFile(filepath.Join(crashed, "manifest.json"), m, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "staging", "evicted."+key+".42", key, "root"), 0o755); err != nil {
		t.Fatal(err)
	}
	// And in layers/, what is not a whole layer: a bad name, no manifest, a
	// manifest of another key, a file.
	other := mustSet(t, "python", "3.11.2", "other==1").Key()
	for _, d := range []string{"not-a-key", other + "/root", strings.Repeat("0", 64) + "/root"} {
		if err := os.MkdirAll(filepath.Join(dir, "layers", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "layers", strings.Repeat("0", 64), "manifest.json"), m, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "layers", strings.Repeat("1", 64)), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	inst := &fakeInstaller{}
	c := openTestCache(t, dir, 0, inst)
	if got := entries(t, filepath.Join(dir, "staging")); len(got) != 0 {
		t.Errorf("got staging %q after opening, want it emptied", got)
	}
	if got := entries(t, filepath.Join(dir, "layers")); len(got) != 0 {
		t.Errorf("got layers %q after opening, want the broken ones removed", got)
	}
	l := acquire(t, c, set)
	defer l.Release()
	if l.Cached || inst.Calls() != 1 {
		t.Errorf("got Cached %v after %d installs, want a fresh install", l.Cached, inst.Calls())
	}
	if _, err := os.Stat(filepath.Join(l.Dir, "numpy", "__init__.py")); err != nil {
		t.Errorf("the fresh layer lacks its module: %v", err)
	}
}

func TestCacheRemoveAndPrune(t *testing.T) {
	testutil.CheckLeaks(t)
	dir := t.TempDir()
	c := openTestCache(t, dir, 0, &fakeInstaller{})
	a := mustSet(t, "python", "3.11.2", "aaa==1")
	b := mustSet(t, "python", "3.11.2", "bbb==1")
	d := mustSet(t, "python", "3.11.2", "ddd==1")
	held := acquire(t, c, a)
	acquire(t, c, b).Release()
	acquire(t, c, d).Release()

	tests := []struct {
		name string
		key  string
		want error
	}{
		{name: "held", key: a.Key(), want: ErrInUse},
		{name: "unknown", key: strings.Repeat("f", 64), want: ErrNoLayer},
		{name: "not a key", key: "../" + a.Key(), want: ErrNoLayer},
		{name: "removed", key: b.Key()},
		{name: "removed twice", key: b.Key(), want: ErrNoLayer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Remove(tt.key)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "layers", b.Key())); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %v for the removed layer's directory, want it gone", err)
	}

	removed, err := c.Prune(0)
	if err != nil || !slices.Equal(removed, []string{d.Key()}) {
		t.Errorf("got %q, %v from Prune(0), want %q: every layer not held", removed, err, d.Key())
	}
	if got := keys(c.List()); !slices.Equal(got, []string{a.Key()}) {
		t.Errorf("got layers %q, want the held one", got)
	}
	held.Release()
	if removed, err := c.Prune(held.Manifest.Bytes); err != nil || len(removed) != 0 {
		t.Errorf("got %q, %v from a Prune the cache fits under, want nothing removed", removed, err)
	}
	if got := entries(t, filepath.Join(dir, "layers")); !slices.Equal(got, []string{a.Key()}) {
		t.Errorf("got layers/ holding %q, want %q", got, a.Key())
	}
}

func TestCacheCloseCancelsInstalls(t *testing.T) {
	testutil.CheckLeaks(t)
	dir := t.TempDir()
	inst := &fakeInstaller{started: make(chan string, 1), gate: make(chan struct{})}
	c := openTestCache(t, dir, 0, inst)
	set := mustSet(t, "python", "3.11.2", "numpy==1.26.4")
	errc := make(chan error, 1)
	go func() {
		_, err := c.Acquire(context.Background(), set, nil)
		errc <- err
	}()
	<-inst.started
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("got %v from an install cut by Close, want context.Canceled", err)
	}
	if _, err := c.Acquire(context.Background(), set, nil); !errors.Is(err, ErrCacheClosed) {
		t.Errorf("got %v from Acquire after Close, want ErrCacheClosed", err)
	}
	if err := c.Remove(set.Key()); !errors.Is(err, ErrCacheClosed) {
		t.Errorf("got %v from Remove after Close, want ErrCacheClosed", err)
	}
	if _, err := c.Prune(0); !errors.Is(err, ErrCacheClosed) {
		t.Errorf("got %v from Prune after Close, want ErrCacheClosed", err)
	}
	if got := entries(t, filepath.Join(dir, "staging")); len(got) != 0 {
		t.Errorf("got staging %q, want it empty", got)
	}
}

func TestCachePublishGivesTheLayerToRoot(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CheckLeaks(t)
	const runID = 123456 // a jail's host id
	inst := &fakeInstaller{spoil: func(root string) error {
		if err := os.Symlink("numpy/__init__.py", filepath.Join(root, "link")); err != nil {
			return err
		}
		return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if err := os.Lchown(p, runID, runID); err != nil {
				return err
			}
			if d.Type()&fs.ModeSymlink != 0 {
				return nil
			}
			return os.Chmod(p, 0o777)
		})
	}}
	c := openTestCache(t, t.TempDir(), 0, inst)
	l := acquire(t, c, mustSet(t, "python", "3.11.2", "numpy==1.26.4"))
	defer l.Release()
	err := filepath.WalkDir(filepath.Dir(l.Dir), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 0 || st.Gid != 0 {
			t.Errorf("got %s owned by %d:%d, want 0:0", p, st.Uid, st.Gid)
		}
		if fi.Mode()&fs.ModeSymlink == 0 && d.Name() != "manifest.json" && fi.Mode().Perm() != 0o755 {
			t.Errorf("got %s mode %v, want 0755", p, fi.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds; what it waits for takes milliseconds,
// the bound is there so that a bug fails rather than hangs.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkCacheHit is what a run with a cached layer pays in the cache:
// Acquire and Release of a published layer of five packages.
func BenchmarkCacheHit(b *testing.B) {
	c, err := OpenCache(CacheConfig{Dir: b.TempDir(), Installer: &fakeInstaller{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	set := mustSet(b, "python", "3.11.2", "numpy==1.26.4", "pandas>=2,<3", "requests>=2", "httpx[http2]==0.27.0", "pydantic>=2")
	l, err := c.Acquire(context.Background(), set, nil)
	if err != nil {
		b.Fatal(err)
	}
	l.Release()
	b.ResetTimer()
	for b.Loop() {
		// A run parses its requests and computes the key each time.
		reqs, err := ParseRequests("python", []string{"numpy==1.26.4", "pandas>=2,<3", "requests>=2", "httpx[http2]==0.27.0", "pydantic>=2"})
		if err != nil {
			b.Fatal(err)
		}
		l, err := c.Acquire(context.Background(), Set{Language: "python", Runtime: "3.11.2", Requests: reqs}, nil)
		if err != nil || !l.Cached {
			b.Fatalf("got %v, cached %v", err, l != nil && l.Cached)
		}
		l.Release()
	}
}

// BenchmarkCachePublish is the cache's own cost of a new layer of five
// packages (staging, check, chown, manifest, rename, sync), the installer
// aside: the fake one writes the files only.
func BenchmarkCachePublish(b *testing.B) {
	c, err := OpenCache(CacheConfig{Dir: b.TempDir(), Installer: &fakeInstaller{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	i := 0
	for b.Loop() {
		i++
		set := mustSet(b, "python", "3.11.2", "numpy==1.26.4", "pandas>=2,<3", "requests>=2", "httpx[http2]==0.27.0", fmt.Sprintf("pkg==%d", i))
		l, err := c.Acquire(context.Background(), set, nil)
		if err != nil {
			b.Fatal(err)
		}
		l.Release()
	}
}

func TestOpenCacheRefuses(t *testing.T) {
	tests := []struct {
		name string
		root bool
		cfg  func(dir string) CacheConfig
		want string
	}{
		{name: "no directory", cfg: func(string) CacheConfig { return CacheConfig{Installer: &fakeInstaller{}} }, want: "no directory"},
		{name: "no installer", cfg: func(dir string) CacheConfig { return CacheConfig{Dir: dir} }, want: "no installer"},
		{name: "negative cap", cfg: func(dir string) CacheConfig {
			return CacheConfig{Dir: dir, MaxBytes: -1, Installer: &fakeInstaller{}}
		}, want: "negative"},
		{name: "a layer larger than the cache", cfg: func(dir string) CacheConfig {
			return CacheConfig{Dir: dir, MaxBytes: 1 << 30, LayerMaxBytes: 2 << 30, Installer: &fakeInstaller{}}
		}, want: "layer_max_bytes (2147483648) is more than cache_max_bytes (1073741824)"},
		{name: "a symlink", cfg: func(dir string) CacheConfig {
			if err := os.Symlink(t.TempDir(), filepath.Join(dir, "link")); err != nil {
				t.Fatal(err)
			}
			return CacheConfig{Dir: filepath.Join(dir, "link"), Installer: &fakeInstaller{}}
		}, want: "is not a directory of this user"},
		{name: "another user's directory", root: true, cfg: func(dir string) CacheConfig {
			if err := os.MkdirAll(filepath.Join(dir, "c", "layers"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(filepath.Join(dir, "c", "layers"), 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return CacheConfig{Dir: filepath.Join(dir, "c"), Installer: &fakeInstaller{}}
		}, want: "layers is not a directory of this user"},
		// One another user could swap for theirs, and plant code in other
		// uids' runs (the upgrade probe of 2026-12-06).
		{name: "under a folder others may write", cfg: func(dir string) CacheConfig {
			open := filepath.Join(dir, "open")
			os.Mkdir(open, 0o700)
			syscall.Chmod(open, 0o777)
			return CacheConfig{Dir: filepath.Join(open, "cache"), Installer: &fakeInstaller{}}
		}, want: "without the sticky bit (mode 777)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root {
				testutil.RequireRoot(t)
			}
			testutil.CheckLeaks(t)
			c, err := OpenCache(tt.cfg(t.TempDir()))
			if err == nil {
				c.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error holding %q", err, tt.want)
			}
		})
	}
}

// TestCacheRefreshesOpenLayers: a layer of open constraints is resolved again
// once it is older than OpenTTL and no run holds it; one of exact pins never
// is, and one a run holds is served as it is.
func TestCacheRefreshesOpenLayers(t *testing.T) {
	testutil.CheckLeaks(t)
	inst := &fakeInstaller{}
	c, err := OpenCache(CacheConfig{Dir: filepath.Join(t.TempDir(), "cache"), OpenTTL: time.Nanosecond, Installer: inst, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	open, pinned := mustSet(t, "python", "3.11.2", "requests>=2"), mustSet(t, "python", "3.11.2", "numpy==1.26.4")
	if !open.Open() || pinned.Open() {
		t.Fatalf("got Open %v and %v, want true for >=2 and false for ==1.26.4", open.Open(), pinned.Open())
	}
	for _, set := range []Set{open, pinned} {
		acquire(t, c, set).Release()
	}
	held := acquire(t, c, open) // resolved again: the first is past its TTL
	if held.Cached || inst.Calls() != 3 {
		t.Fatalf("open layer past its TTL: got Cached %v after %d installs, want a new install (3)", held.Cached, inst.Calls())
	}
	if again := acquire(t, c, open); !again.Cached || inst.Calls() != 3 {
		t.Errorf("open layer a run holds: got Cached %v after %d installs, want it served as it is", again.Cached, inst.Calls())
	} else {
		again.Release()
	}
	held.Release()
	if l := acquire(t, c, pinned); !l.Cached || inst.Calls() != 3 {
		t.Errorf("pinned layer: got Cached %v after %d installs, want a hit", l.Cached, inst.Calls())
	} else {
		l.Release()
	}
	if s := c.Stats(); s.Refreshes != 1 || s.Layers != 2 {
		t.Errorf("got %d refreshes and %d layers, want 1 and 2", s.Refreshes, s.Layers)
	}
}

// cacheWithOpenLayer is a cache of a fakeInstaller, in a folder of t's, whose
// open layers are re-resolved past openTTL, holding the layer of the open set
// it returns, installed once: its lease, released.
func cacheWithOpenLayer(t *testing.T, openTTL time.Duration) (*Cache, *fakeInstaller, Set, *Lease) {
	t.Helper()
	inst := &fakeInstaller{}
	c, err := OpenCache(CacheConfig{Dir: filepath.Join(t.TempDir(), "cache"), OpenTTL: openTTL, Installer: inst, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	open := mustSet(t, "python", "3.11.2", "requests>=2")
	first := acquire(t, c, open)
	first.Release()
	return c, inst, open, first
}

// TestCacheKeepsAnOpenLayerWhenItsRegistryIsDown: an open layer whose
// re-resolve fails (the registry down, or too slow) is put back and served,
// and not re-resolved again for staleRetry; one the registry now refuses is
// gone, as before (a package audit: an outage turned cached runs into
// failures).
func TestCacheKeepsAnOpenLayerWhenItsRegistryIsDown(t *testing.T) {
	testutil.CheckLeaks(t)
	for _, tc := range []struct {
		name string
		err  error
		kept bool
	}{
		{"registry down", &InstallError{Key: "k", Err: &IndexError{Message: "the python installer could not read the package index: 502"}}, true},
		{"registry too slow", &InstallError{Key: "k", Err: errors.New("the registry answered too slowly")}, true},
		{"the registry refuses the request now", &UnavailableError{Message: "No matching distribution found for requests>=2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, inst, open, first := cacheWithOpenLayer(t, time.Nanosecond)
			inst.err = tc.err
			l, err := c.Acquire(context.Background(), open, nil)
			if !tc.kept {
				if l != nil || err == nil {
					t.Fatalf("got %v, %v, want the install's error", l, err)
				}
				// Deleted once the install's lock is let go, maybe after the
				// waiter has its error.
				for i := 0; i < 100 && len(entries(t, c.stageDir)) != 0; i++ {
					time.Sleep(10 * time.Millisecond)
				}
				if s := c.Stats(); s.Layers != 0 || len(entries(t, c.stageDir)) != 0 {
					t.Errorf("got %d layers and staging %q, want the old layer gone", s.Layers, entries(t, c.stageDir))
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v, want the layer as it was", err)
			}
			if !l.Cached || l.Dir != first.Dir || !l.Manifest.InstalledAt.Equal(first.Manifest.InstalledAt) || inst.Calls() != 2 {
				t.Errorf("got Cached %v, %s installed %v after %d installs, want the first layer (%s, %v) after 2", l.Cached, l.Dir, l.Manifest.InstalledAt, inst.Calls(), first.Dir, first.Manifest.InstalledAt)
			}
			if _, err := os.Stat(filepath.Join(l.Dir, "requests", "__init__.py")); err != nil {
				t.Errorf("the layer's files: %v", err)
			}
			l.Release()
			// Served as it is until staleRetry has passed: no install waits
			// for the registry meanwhile.
			wantOneLayerHit(t, c, open, inst, "served as it is")
		})
	}
}

// TestCacheStopsASlowReResolve: a re-resolve of an open layer that takes
// longer than refreshWait (a registry that accepts and never answers) is
// stopped, and its waiters get the layer as it was, without waiting out the
// install's timeout (the packages probe of 2026-12-06: 60 s, each run of the
// set); the next run within staleRetry is a hit. The bound is three times the
// layer's own install time, at least refreshWaitMin.
func TestCacheStopsASlowReResolve(t *testing.T) {
	testutil.CheckLeaks(t)
	defer func(d time.Duration) { refreshWaitMin = d }(refreshWaitMin)
	refreshWaitMin = 300 * time.Millisecond
	c, inst, open, first := cacheWithOpenLayer(t, time.Hour)
	layer := func() *cachedLayer { return c.layers[first.Manifest.Key] } // with c.mu held
	c.mu.Lock()
	layer().manifest.InstalledAt = time.Now().Add(-2 * time.Hour) // past its open_ttl
	c.mu.Unlock()
	if first.Manifest.InstallSeconds <= 0 || refreshWait(first.Manifest) != refreshWaitMin {
		t.Errorf("the layer's install took %v s by its manifest, waited for %v; want a time, and the least wait", first.Manifest.InstallSeconds, refreshWait(first.Manifest))
	}
	if got := refreshWait(Manifest{InstallSeconds: 10}); got != 30*time.Second {
		t.Errorf("the wait for a layer whose install took 10 s: %v, want 30s", got)
	}
	inst.gate = make(chan struct{}) // the registry never answers
	began := time.Now()
	var waiters sync.WaitGroup
	for i := 0; i < 2; i++ {
		waiters.Add(1)
		go func() {
			defer waiters.Done()
			l, err := c.Acquire(context.Background(), open, nil)
			if err != nil {
				t.Errorf("a run of the set during the slow re-resolve: %v, want the layer as it was", err)
				return
			}
			defer l.Release()
			if !l.Cached || l.Dir != first.Dir {
				t.Errorf("got Cached %v, %s, want the first layer (%s)", l.Cached, l.Dir, first.Dir)
			}
		}()
	}
	waiters.Wait()
	if took := time.Since(began); took > 5*refreshWaitMin {
		t.Errorf("the runs waited %v for the slow re-resolve, want about %v", took, refreshWaitMin)
	}
	if inst.Calls() != 2 {
		t.Errorf("got %d installs, want the first and the one re-resolve", inst.Calls())
	}
	again := acquire(t, c, open)
	again.Release()
	if !again.Cached || inst.Calls() != 2 {
		t.Errorf("got Cached %v after %d installs, want a hit within staleRetry", again.Cached, inst.Calls())
	}
	// Each stop in a row holds the next re-resolve back twice as long (a
	// registry that stays hung would hold a run every minute).
	for i, want := range []time.Duration{2 * staleRetry, 4 * staleRetry} {
		c.mu.Lock()
		l := layer()
		got := l.refreshAfter.Sub(l.lastUse)
		l.refreshAfter = time.Now()
		c.mu.Unlock()
		if got < want/2-time.Second || got > want/2+time.Second {
			t.Errorf("after %d stops, the next re-resolve after %v, want %v", i+1, got, want/2)
		}
		l2, err := c.Acquire(context.Background(), open, nil)
		if err != nil || !l2.Cached {
			t.Fatalf("got %v, %v, want the layer as it was", l2, err)
		}
		l2.Release()
		c.mu.Lock()
		l = layer()
		got = l.refreshAfter.Sub(l.lastUse)
		c.mu.Unlock()
		if got < want-time.Second || got > want+time.Second {
			t.Errorf("after %d stops, the next re-resolve after %v, want %v", i+2, got, want)
		}
	}
}

// TestCacheReinstallsALayerGoneFromDisk: a layer whose content folder was
// deleted by hand is installed again, where its mount failed every run of it
// with the state directory's path in the message (a package audit).
func TestCacheReinstallsALayerGoneFromDisk(t *testing.T) {
	testutil.CheckLeaks(t)
	for _, gone := range []string{"its content folder", "its whole folder"} {
		t.Run(gone, func(t *testing.T) {
			inst := &fakeInstaller{}
			dir := filepath.Join(t.TempDir(), "cache")
			c := openTestCache(t, dir, 0, inst)
			set := mustSet(t, "python", "3.11.2", "numpy==1.26.4")
			first := acquire(t, c, set)
			first.Release()
			rm := first.Dir
			if gone == "its whole folder" {
				rm = filepath.Dir(first.Dir)
			}
			if err := os.RemoveAll(rm); err != nil {
				t.Fatal(err)
			}
			l := acquire(t, c, set)
			defer l.Release()
			if l.Cached || inst.Calls() != 2 {
				t.Errorf("got Cached %v after %d installs, want a new install", l.Cached, inst.Calls())
			}
			if _, err := os.Stat(filepath.Join(l.Dir, "numpy", "__init__.py")); err != nil {
				t.Errorf("the new layer's files: %v", err)
			}
			if s := c.Stats(); s.Layers != 1 || s.Bytes != l.Manifest.Bytes {
				t.Errorf("got %d layers of %d bytes, want 1 of %d", s.Layers, s.Bytes, l.Manifest.Bytes)
			}
		})
	}
}

// diskFiller is an Installer that writes 1 MiB files into its staging folder,
// a few milliseconds apart, want of them (or, want 0, until it is stopped,
// going on past a full disk), and records its context's cause.
type diskFiller struct {
	want int

	mu    sync.Mutex
	cause error
}

func (d *diskFiller) Install(ctx context.Context, set Set, staging string, progress func(string)) ([]Resolved, error) {
	chunk := bytes.Repeat([]byte{'x'}, 1<<20)
	for i := 0; d.want == 0 || i < d.want; i++ {
		select {
		case <-ctx.Done():
			d.mu.Lock()
			d.cause = context.Cause(ctx)
			d.mu.Unlock()
			return nil, fmt.Errorf("running pip: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
		if err := os.WriteFile(filepath.Join(staging, fmt.Sprintf("f%d", i)), chunk, 0o644); err != nil && d.want != 0 {
			return nil, err
		}
	}
	var resolved []Resolved
	for _, r := range set.Requests {
		resolved = append(resolved, Resolved{Name: r.Name, Version: "1.0.0", Request: r.Raw})
	}
	return resolved, nil
}

// The cache keeps MinFreeBytes free on its disk, for the journal and the host:
// an unused layer is evicted to make room for an install, and an install that
// would take the disk below it with nothing left to evict is stopped, leaving
// nothing behind, its error saying what the operator can do.
func TestCacheKeepsItsDiskSpaceFree(t *testing.T) {
	testutil.CheckLeaks(t)
	dir := testutil.Tmpfs(t, "32m")
	inst := &diskFiller{want: 12}
	c, err := OpenCache(CacheConfig{Dir: dir, MinFreeBytes: 12 << 20, Installer: inst, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	a := mustSet(t, "python", "3.11.2", "aaa==1")
	b := mustSet(t, "python", "3.11.2", "bbb==1")
	acquire(t, c, a).Release()
	// 12 MiB more leave 8 free: a, unused, goes.
	held := acquire(t, c, b)
	if got := keys(c.List()); !slices.Equal(got, []string{b.Key()}) {
		t.Errorf("got layers %q, want only b's (a evicted for room)", got)
	}
	if s := c.Stats(); s.Evictions != 1 {
		t.Errorf("got %d evictions, want 1", s.Evictions)
	}

	// b is held: an install that fills the disk is stopped.
	inst.want = 0
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a bound for a cache that does not stop it
	_, err = c.Acquire(ctx, mustSet(t, "python", "3.11.2", "ccc==1"), nil)
	cancel()
	for _, want := range []string{"the installer was stopped", "less than the 12 MiB brig keeps free there (packages.min_free_bytes)",
		"no unused package layer is left to evict", "the host's operator must free space"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an error saying %q", err, want)
		}
	}
	var full *spaceError
	if inst.mu.Lock(); !errors.As(inst.cause, &full) {
		t.Errorf("the installer's context ended with %v, want the space error", inst.cause)
	}
	inst.mu.Unlock()
	if got := entries(t, filepath.Join(dir, "staging")); len(got) != 0 {
		t.Errorf("staging holds %q after the stopped install, want nothing", got)
	}
	if got := keys(c.List()); !slices.Equal(got, []string{b.Key()}) {
		t.Errorf("got layers %q, want b's, held, kept", got)
	}

	// Released, b goes for the next install's room.
	held.Release()
	inst.want = 12
	acquire(t, c, a).Release()
	if got := keys(c.List()); !slices.Equal(got, []string{a.Key()}) {
		t.Errorf("got layers %q, want only a's", got)
	}

	// The disk filled by something else, beyond what the unused layers take
	// (a layer of 2 MiB, 6 missing): evicting them would save no install, so
	// none is evicted.
	if err := c.Remove(a.Key()); err != nil {
		t.Fatal(err)
	}
	inst.want = 2
	acquire(t, c, a).Release()
	if err := os.WriteFile(filepath.Join(dir, "filler"), bytes.Repeat([]byte{'x'}, 24<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(context.Background(), b, nil)
	if err == nil || !strings.Contains(err.Error(), "would not make up the") || !strings.Contains(err.Error(), "(none was evicted)") {
		t.Errorf("got %v, want an error saying the unused layers would not make up what is missing", err)
	}
	if got := keys(c.List()); !slices.Equal(got, []string{a.Key()}) {
		t.Errorf("got layers %q, want a's kept", got)
	}
}

// TestCacheBoundsALayer: an install whose tree passes LayerMaxBytes is
// stopped while it writes, or refused once done, its run failing
// package_unavailable with what to change, and no other layer is evicted for
// it (the package audit's npm tarball of 3 GiB of zeros, with
// cache_max_bytes 1 GiB, filled the disk to min_free_bytes and evicted every
// layer, itself included).
func TestCacheBoundsALayer(t *testing.T) {
	testutil.CheckLeaks(t)
	dir := testutil.Tmpfs(t, "256m")
	inst := &diskFiller{want: 2}
	c, err := OpenCache(CacheConfig{Dir: dir, MaxBytes: 64 << 20, LayerMaxBytes: 8 << 20, MinFreeBytes: 1 << 20, Installer: inst, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	a := mustSet(t, "python", "3.11.2", "aaa==1")
	acquire(t, c, a).Release()
	for _, tc := range []struct {
		name    string
		pkg     string
		want    int // MiB the installer writes, 0: until stopped
		says    string
		stopped bool
	}{
		{"stopped while it writes", "big==1", 0, "before their install was stopped, more than the 8 MiB one package set may take on this host (packages.layer_max_bytes)", true},
		{"refused once done", "big==2", 10, "the packages take 10 MiB installed, more than the 8 MiB one package set may take on this host (packages.layer_max_bytes)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst.want, inst.cause = tc.want, nil
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a bound for a cache that does not stop it
			_, err := c.Acquire(ctx, mustSet(t, "python", "3.11.2", tc.pkg), nil)
			cancel()
			if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("got %v, want package_unavailable saying %q", err, tc.says)
			}
			var big *layerSizeError
			if inst.mu.Lock(); errors.As(inst.cause, &big) != tc.stopped {
				t.Errorf("the installer's context ended with %v; want it stopped for its size: %v", inst.cause, tc.stopped)
			}
			inst.mu.Unlock()
			if got := entries(t, filepath.Join(dir, "staging")); len(got) != 0 {
				t.Errorf("staging holds %q after the refused install, want nothing", got)
			}
			if got := keys(c.List()); !slices.Equal(got, []string{a.Key()}) {
				t.Errorf("got layers %q, want a's alone, kept", got)
			}
		})
	}
	// On a disk the install fills before its first measure ends, the size
	// is known before room is made: no layer is evicted for it (the second
	// review's: a measure beside the free-space check had evicted a first).
	small := testutil.Tmpfs(t, "40m")
	inst2 := &diskFiller{want: 2}
	c2, err := OpenCache(CacheConfig{Dir: small, MaxBytes: 32 << 20, LayerMaxBytes: 8 << 20, MinFreeBytes: 1 << 20, Installer: inst2, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c2.Close() })
	acquire(t, c2, a).Release()
	inst2.want = 0
	_, err = c2.Acquire(context.Background(), mustSet(t, "python", "3.11.2", "big==3"), nil)
	if !errors.Is(err, ErrUnavailable) || c2.Stats().Evictions != 0 || !slices.Equal(keys(c2.List()), []string{a.Key()}) {
		t.Errorf("an install filling the disk: got %v, %d evictions, layers %q; want package_unavailable, none evicted", err, c2.Stats().Evictions, keys(c2.List()))
	}
	// With no layer to evict, the size still decides before the want of
	// room: the request's package_unavailable, not the host's failure (the
	// last review's).
	bare := testutil.Tmpfs(t, "40m")
	c3, err := OpenCache(CacheConfig{Dir: bare, MaxBytes: 32 << 20, LayerMaxBytes: 8 << 20, MinFreeBytes: 1 << 20, Installer: &diskFiller{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c3.Close() })
	if _, err := c3.Acquire(context.Background(), mustSet(t, "python", "3.11.2", "big==4"), nil); !errors.Is(err, ErrUnavailable) {
		t.Errorf("an install filling a disk with no layer to evict: got %v, want package_unavailable for its size", err)
	}
}

// On a disk too full for a new folder (here: no inode left), an unused
// layer is evicted all the same, deleted where it is, and the install is
// refused with what the operator can do, not the staging folder's ENOSPC.
func TestCacheEvictsOnAFullDisk(t *testing.T) {
	testutil.CheckLeaks(t)
	dir := testutil.Tmpfs(t, "32m,nr_inodes=400")
	c, err := OpenCache(CacheConfig{Dir: dir, MinFreeBytes: 1 << 20, Installer: &diskFiller{want: 2}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	a := mustSet(t, "python", "3.11.2", "aaa==1")
	acquire(t, c, a).Release()
	fill := filepath.Join(dir, "filler")
	if err := os.Mkdir(fill, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if err := os.WriteFile(filepath.Join(fill, strconv.Itoa(i)), nil, 0o644); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "staging", "probe"), 0o755); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a folder on the full disk: got %v, want ENOSPC (nothing to test)", err)
	}
	_, err = c.Acquire(context.Background(), mustSet(t, "python", "3.11.2", "bbb==1"), nil)
	if err == nil || !strings.Contains(err.Error(), "no unused package layer is left to evict") || strings.Contains(err.Error(), "staging directory") {
		t.Errorf("got %v, want the space error, after a's eviction", err)
	}
	if got := c.List(); len(got) != 0 || c.Stats().Evictions != 1 {
		t.Errorf("got layers %q and %d evictions, want a's evicted", keys(got), c.Stats().Evictions)
	}
	if got := entries(t, filepath.Join(dir, "layers")); len(got) != 0 {
		t.Errorf("layers/ holds %q, want a's folder deleted", got)
	}
	if got := entries(t, filepath.Join(dir, "staging")); len(got) != 0 {
		t.Errorf("staging/ holds %q, want nothing", got)
	}
}

// BenchmarkTreeSize is watchSpace's measure of an install's staging tree:
// go test -run XXX -bench TreeSize ./packages/ (ns/op for 10,000 files).
func BenchmarkTreeSize(b *testing.B) {
	dir := b.TempDir()
	for i := range 100 {
		sub := filepath.Join(dir, fmt.Sprintf("d%d", i))
		if err := os.Mkdir(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		for j := range 100 {
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d", j)), []byte("x"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if treeSize(context.Background(), dir) == 0 {
			b.Fatal("measured nothing")
		}
	}
}

// TestMiB: sizes in messages are given to a tenth of a MiB, rounded down, so
// that a layer just over its bound never reads as equal to it (the packages
// probe: "took 1 MiB, more than the 1 MiB").
func TestMiB(t *testing.T) {
	for n, want := range map[int64]string{
		1000:             "1000 bytes",
		1 << 20:          "1 MiB",
		2_000_000:        "1.9 MiB",
		2_044_723:        "1.9 MiB",
		2_045_000:        "1.9 MiB",
		8 << 20:          "8 MiB",
		10<<20 + 1<<20/2: "10.5 MiB",
		(1 << 30) - 1:    "1023.9 MiB",
	} {
		if got := mib(n); got != want {
			t.Errorf("mib(%d): got %q, want %q", n, got, want)
		}
	}
}

// TestTreeSizeLeavesOutPipsFolders: pip's temporary folders in staging hold
// the downloads besides the set, which is counted once pip has moved it into
// the layer; a folder of that name deeper, a package's, is counted.
func TestTreeSizeLeavesOutPipsFolders(t *testing.T) {
	dir := t.TempDir()
	write := func(path string, size int) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, bytes.Repeat([]byte("x"), size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "pkg", "data"), 1<<20)
	write(filepath.Join(dir, pipTmpName, "pip-unpack-1", "pkg.whl"), 4<<20)
	if n := treeSize(context.Background(), dir); n < 1<<20 || n > 2<<20 {
		t.Errorf("got %d bytes, want the layer's 1 MiB without pip's folders", n)
	}
	write(filepath.Join(dir, "pkg", pipTmpName, "data"), 4<<20)
	if n := treeSize(context.Background(), dir); n < 5<<20 {
		t.Errorf("got %d bytes, want a package's own folder of that name counted", n)
	}
}

// TestCacheRestoresAStaleLayerAfterACrash: an open layer taken out for its
// re-resolve when the process died is put back by the next open, not deleted
// with staging/ (the upgrade probe of 2026-12-06: a crash during a hung
// re-resolve lost the layer, and the registry's outage then failed its runs);
// an evicted one is deleted as before.
func TestCacheRestoresAStaleLayerAfterACrash(t *testing.T) {
	testutil.CheckLeaks(t)
	inst := &fakeInstaller{}
	dir := filepath.Join(t.TempDir(), "cache")
	c := openTestCache(t, dir, 0, inst)
	open := mustSet(t, "python", "3.11.2", "requests>=2")
	pinned := mustSet(t, "python", "3.11.2", "numpy==1.26.4")
	acquire(t, c, open).Release()
	acquire(t, c, pinned).Release()
	c.mu.Lock()
	if _, err := c.takeAsLocked(open.Key(), stalePrefix); err != nil { // as a re-resolve does
		t.Fatal(err)
	}
	if _, err := c.takeLocked(pinned.Key()); err != nil { // as an eviction does
		t.Fatal(err)
	}
	c.mu.Unlock()
	c.Close() // the crash: neither the re-resolve nor the eviction ended
	// The open one back, the evicted one gone.
	wantOneLayerHit(t, openTestCache(t, dir, 0, inst), open, inst, "the open layer after the crash")
}

// wantOneLayerHit acquires set's layer from c and checks that it was a hit
// after inst's two installs, and that c holds that layer alone and nothing in
// staging.
func wantOneLayerHit(t *testing.T, c *Cache, set Set, inst *fakeInstaller, what string) {
	t.Helper()
	l := acquire(t, c, set)
	l.Release()
	if !l.Cached || inst.Calls() != 2 {
		t.Errorf("%s: got Cached %v after %d installs, want a hit after 2", what, l.Cached, inst.Calls())
	}
	if s := c.Stats(); s.Layers != 1 || len(entries(t, c.stageDir)) != 0 {
		t.Errorf("%s: got %d layers and staging %q, want 1 and nothing left in staging", what, s.Layers, entries(t, c.stageDir))
	}
}
