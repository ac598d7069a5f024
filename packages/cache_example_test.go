package packages_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/brig-sandbox/brig/packages"
)

// oneFileInstaller stands for pip or npm: it writes one module per request.
type oneFileInstaller struct{}

func (oneFileInstaller) Install(ctx context.Context, set packages.Set, staging string, progress func(string)) ([]packages.Resolved, error) {
	var out []packages.Resolved
	for _, r := range set.Requests {
		progress("installing " + r.Name)
		if err := os.WriteFile(filepath.Join(staging, r.Name+".py"), []byte("X = 1\n"), 0o644); err != nil {
			return nil, err
		}
		out = append(out, packages.Resolved{Name: r.Name, Version: "1.26.4", Request: r.Raw})
	}
	return out, nil
}

// A run's requests go through the policy, then the cache, which installs the
// layer the first time and hands out the published one after.
func Example() {
	dir, err := os.MkdirTemp("", "brig-cache-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	policy := packages.PolicyConfig{Mode: packages.PolicyAllow, Allow: []string{"numpy", "django-*"}}
	if err := policy.Validate(); err != nil {
		panic(err)
	}
	cache, err := packages.OpenCache(packages.CacheConfig{
		Dir:       filepath.Join(dir, "packages"),
		Installer: oneFileInstaller{},
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	defer cache.Close()

	for _, list := range [][]string{{"requests>=2"}, {"NumPy==1.26.4"}, {"numpy==1.26.4"}} {
		reqs, err := packages.ParseRequests("python", list)
		if err != nil {
			panic(err)
		}
		if err := policy.Check("python", reqs); errors.Is(err, packages.ErrBlocked) {
			fmt.Println("blocked:", err)
			continue
		}
		set := packages.Set{Language: "python", Runtime: "3.11.2", Requests: reqs}
		lease, err := cache.Acquire(context.Background(), set, func(line string) { fmt.Println("progress:", line) })
		if err != nil {
			panic(err)
		}
		fmt.Println("cached:", lease.Cached, "version:", lease.Manifest.Packages[0].Version)
		lease.Release() // when the run ends
	}
	// Output:
	// blocked: requests is not on this host's allow list (allowed: numpy, django-*)
	// progress: brig: installing NumPy==1.26.4 (python; not in the package cache)
	// progress: installing numpy
	// cached: false version: 1.26.4
	// cached: true version: 1.26.4
}
