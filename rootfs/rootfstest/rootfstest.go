// Package rootfstest gives tests a real built rootfs of each language, made with
// debootstrap once per machine in a cache folder that outlives test runs, so that
// the rootfs, jail and packages tests share one build instead of making their own.
//
// Typical use, in a test that needs root:
//
//	root := rootfstest.Root(t, rootfs.Python) // builds on first use (about a minute)
//	spec.Root = root
package rootfstest

import (
	"bytes"
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/rootfs"
)

// CacheDir holds the test builds, one folder per language, and their locks. It is
// not under a test's temporary folder on purpose: a build takes a minute or two and
// downloads from the host's Debian mirror, so it is kept between runs.
const CacheDir = "/var/cache/brig-test/rootfs"

// BuildTimeout bounds one build, well above the minute or two it takes.
const BuildTimeout = 8 * time.Minute

// Dir is the cached build of lang.
func Dir(lang rootfs.Language) string { return filepath.Join(CacheDir, string(lang)) }

// Ensure builds lang's rootfs in Dir(lang) unless a valid build is there, and returns
// its manifest. Test packages running at once wait for one build through its lock.
// debootstrap's progress goes to tb's log. It skips tb when not root.
func Ensure(tb testing.TB, lang rootfs.Language) *rootfs.Manifest {
	tb.Helper()
	testutil.RequireRoot(tb)
	ctx, cancel := context.WithTimeout(context.Background(), BuildTimeout)
	defer cancel()
	start := time.Now()
	w := &logWriter{tb: tb}
	m, err := rootfs.EnsureBuilt(ctx, rootfs.BuildOptions{Language: lang, Dir: Dir(lang)}, w)
	w.flush()
	if err != nil {
		tb.Fatalf("building the test %s rootfs: %v", lang, err)
	}
	if d := time.Since(start); d > time.Second {
		tb.Logf("the test %s rootfs took %s to build", lang, d.Round(time.Second))
	}
	return m
}

// Root is Ensure's build opened as a Provider would give it to the jail.
func Root(tb testing.TB, lang rootfs.Language) *rootfs.Root {
	tb.Helper()
	Ensure(tb, lang)
	b, err := rootfs.OpenBuilt(map[rootfs.Language]string{lang: Dir(lang)})
	if err != nil {
		tb.Fatal(err)
	}
	r, err := b.Root(lang)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// logWriter passes whole lines to tb.Log. debootstrap writes from exec's copying
// goroutine while the test waits in Ensure, so the lines are logged as they come.
type logWriter struct {
	tb   testing.TB
	mu   sync.Mutex
	part []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.part = append(w.part, p...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.tb.Log(string(w.part[:i]))
		w.part = w.part[i+1:]
	}
}

func (w *logWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.part) > 0 {
		w.tb.Log(string(w.part))
		w.part = nil
	}
}
