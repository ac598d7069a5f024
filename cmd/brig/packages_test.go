package main

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/jail"
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
	if _, stderr, code := brig(t, "", "packages", "rm", "--cache-dir", dir, "zzz"); code == 0 || !strings.Contains(stderr, `no layer's key starts with "zzz"`) {
		t.Errorf("rm of no layer: exit %d, stderr %q; want a refusal saying none matches", code, stderr)
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
	// A prune with nothing to remove says so; a negative size says what to give.
	if out, stderr, code := brig(t, "", "packages", "prune", "--cache-dir", dir, "--max-bytes", "0"); code != 0 || !strings.Contains(out, "nothing to remove: the cache's 0 layers take 0 bytes") {
		t.Errorf("prune of an empty cache: got %q %q (exit %d), want it to say nothing was removed", out, stderr, code)
	}
	if _, stderr, code := brig(t, "", "packages", "prune", "--cache-dir", dir, "--max-bytes", "-1"); code != 2 || !strings.Contains(stderr, "give what the cache may keep, 0 bytes or more") {
		t.Errorf("prune --max-bytes -1: got %q (exit %d), want a refusal saying what to give", stderr, code)
	}
}

// TestRegistryAddrCheck: brig check's packages line says where a registry
// host resolves when that is not public, passes when the egress proxy dials
// it as a registry's (private_registries, the default), warns with a hint
// when it refuses it (private_registries = false, or a link-local address)
// or when the name does not resolve, and says nothing of a public address.
func TestRegistryAddrCheck(t *testing.T) {
	answers := map[string]string{"npm.test": "203.0.113.9", "meta.test": "169.254.3.3", "pub.test": "93.184.215.34"}
	lookup := func(_ context.Context, _, host string) ([]netip.Addr, error) {
		if a, ok := answers[host]; ok {
			return []netip.Addr{netip.MustParseAddr(a)}, nil
		}
		return nil, errors.New("no such host")
	}
	publicOnly := defaultServeConfig()
	publicOnly.Egress.PrivateRegistries = false
	for _, tt := range []struct {
		name     string
		sc       serveConfig
		host     string
		warn     bool
		detail   string // "" when nothing is added
		wantHint string
	}{
		{"documentation, by default", defaultServeConfig(), "npm.test", false, "npm.test resolves to 203.0.113.9 here, reached as a registry host's address, of class documentation", ""},
		{"documentation, public only", publicOnly, "npm.test", true, "which the egress proxy refuses (address class documentation", "list it in [egress] allow_private_hosts"},
		{"link-local", defaultServeConfig(), "meta.test", true, "meta.test resolves to 169.254.3.3 here, which the egress proxy refuses (address class link-local", "allow_private_hosts"},
		{"public", defaultServeConfig(), "pub.test", false, "", ""},
		{"no such host", defaultServeConfig(), "gone.test", true, "gone.test does not resolve here", "set [egress.registries] javascript"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ch := jail.Check{Name: "packages javascript", OK: true, Detail: "installed"}
			registryAddrCheck(context.Background(), tt.sc, api.JavaScript, []string{tt.host}, lookup, &ch)
			if ch.Warn != tt.warn || !ch.OK {
				t.Errorf("got warn %v, ok %v, want warn %v and ok: %+v", ch.Warn, ch.OK, tt.warn, ch)
			}
			if tt.detail == "" && ch.Detail != "installed" || !strings.Contains(ch.Detail, tt.detail) {
				t.Errorf("detail %q, want it to say %q", ch.Detail, tt.detail)
			}
			if !strings.Contains(ch.Hint, tt.wantHint) || tt.wantHint == "" && ch.Hint != "" {
				t.Errorf("hint %q, want %q", ch.Hint, tt.wantHint)
			}
		})
	}
}
