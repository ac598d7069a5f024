package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/packages"
)

// fileInstaller installs one file per set: enough for a real layer.
type fileInstaller struct{}

func (fileInstaller) Install(_ context.Context, set packages.Set, staging string, _ func(string)) ([]packages.Resolved, error) {
	var out []packages.Resolved
	for _, r := range set.Requests {
		if err := os.WriteFile(filepath.Join(staging, r.Name+".py"), []byte("X = 1\n"), 0o644); err != nil {
			return nil, err
		}
		out = append(out, packages.Resolved{Name: r.Name, Version: "1.0", Request: r.Raw})
	}
	return out, nil
}

// TestPackagesCLI: ls lists the layers with their requests and versions, rm
// removes one by a prefix of its key, prune the rest; rm and prune refuse while
// another process holds the cache.
func TestPackagesCLI(t *testing.T) {
	testutil.RequireRoot(t) // the cache gives layers to root
	dir := t.TempDir()
	cache, err := packages.OpenCache(packages.CacheConfig{Dir: dir, Installer: fileInstaller{}})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, req := range []string{"alpha==1.0", "beta==1.0"} {
		reqs, err := packages.ParseRequests("python", []string{req})
		if err != nil {
			t.Fatal(err)
		}
		lease, err := cache.Acquire(context.Background(), packages.Set{Language: "python", Runtime: "3.11.2", Requests: reqs}, nil)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, lease.Manifest.Key)
		lease.Release()
	}
	out, _, code := brig(t, "", "packages", "ls", "--cache-dir", dir)
	if code != 0 || !strings.Contains(out, keys[0][:12]) || !strings.Contains(out, "alpha==1.0") || !strings.Contains(out, "beta 1.0") {
		t.Fatalf("ls: got %q (exit %d), want both layers", out, code)
	}
	if _, stderr, code := brig(t, "", "packages", "rm", "--cache-dir", dir, keys[0][:12]); code == 0 || !strings.Contains(stderr, "stop brig serve") {
		t.Errorf("rm while the cache is held: exit %d, stderr %q; want a refusal saying to stop the service", code, stderr)
	}
	cache.Close()
	if out, stderr, code := brig(t, "", "packages", "rm", "--cache-dir", dir, keys[0][:12]); code != 0 || !strings.Contains(out, keys[0]) {
		t.Fatalf("rm: got %q %q (exit %d)", out, stderr, code)
	}
	// A directory that holds no cache is an error, not an empty one.
	missing := filepath.Join(t.TempDir(), "nosuch")
	for _, verb := range [][]string{{"ls"}, {"prune", "--max-bytes", "0"}, {"rm", "abc"}} {
		args := append([]string{"packages", verb[0], "--cache-dir", missing}, verb[1:]...)
		if _, stderr, code := brig(t, "", args...); code == 0 || !strings.Contains(stderr, "no package cache at") {
			t.Errorf("packages %s on a missing directory: exit %d, stderr %q; want a refusal", verb[0], code, stderr)
		}
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("a refused command created %s", missing)
	}
	// prune without --max-bytes empties nothing: the flag is required.
	if _, stderr, code := brig(t, "", "packages", "prune", "--cache-dir", dir); code == 0 || !strings.Contains(stderr, "max-bytes") {
		t.Errorf("prune without --max-bytes: exit %d, stderr %q; want a refusal naming the flag", code, stderr)
	}
	if layers, err := packages.ListLayers(dir); err != nil || len(layers) != 1 {
		t.Fatalf("after a refused prune: got %d layers (%v), want 1", len(layers), err)
	}
	if out, stderr, code := brig(t, "", "packages", "prune", "--cache-dir", dir, "--max-bytes", "0"); code != 0 || !strings.Contains(out, keys[1]) {
		t.Fatalf("prune: got %q %q (exit %d)", out, stderr, code)
	}
	if layers, err := packages.ListLayers(dir); err != nil || len(layers) != 0 {
		t.Errorf("after rm and prune: got %d layers (%v), want none", len(layers), err)
	}
}
