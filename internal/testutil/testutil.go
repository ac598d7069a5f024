// Package testutil holds the small helpers brig's tests share: skipping a test that
// needs root or a kernel feature with the reason, and checking that a test left no
// process, cgroup, mount or file descriptor behind.
//
// Typical use:
//
//	func TestJailMounts(t *testing.T) {
//		testutil.RequireRoot(t)
//		testutil.CheckLeaks(t)
//		...
//	}
package testutil

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RequireRoot skips tb unless the process runs as root. CI runs as root, so every
// privileged test runs there; elsewhere the skip says why.
func RequireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root (CI runs the tests as root): run `sudo go test ./...`")
	}
}

// HasCapability reports whether the process holds capability c in its
// effective set (root here lacks some: CAP_SYS_RESOURCE on these machines).
func HasCapability(tb testing.TB, c int) bool {
	tb.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			var caps uint64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%x", &caps); err != nil {
				tb.Fatalf("reading %q: %v", line, err)
			}
			return caps&(1<<c) != 0
		}
	}
	tb.Fatal("/proc/self/status has no CapEff line")
	return false
}

// Require skips tb with reason when ok is false. Use it for a kernel feature the host
// lacks, naming the feature and the kernel version in reason.
func Require(tb testing.TB, ok bool, reason string) {
	tb.Helper()
	if !ok {
		tb.Skip(reason)
	}
}

// Tmpfs mounts a tmpfs of size ("8m"), mode 0700 as tb.TempDir's (a
// tmpfs's own is 1777, which brig refuses for a state directory), on a
// fresh directory of tb's and
// unmounts it when tb ends: a small disk to fill. Needs root.
func Tmpfs(tb testing.TB, size string) string {
	tb.Helper()
	RequireRoot(tb)
	dir := tb.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		tb.Fatalf("mounting a tmpfs on %s: %v", dir, err)
	}
	tb.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			tb.Errorf("unmounting the tmpfs on %s: %v", dir, err)
		}
	})
	return dir
}

// cgroupDirs returns, for a parent cgroup name such as "brig-test-jail", the
// directories it has in every mounted hierarchy (v1 controllers, the unified
// hierarchy of the hybrid layout, and a pure v2 root).
func cgroupDirs(parent string) []string {
	dirs := []string{filepath.Join("/sys/fs/cgroup", parent)}
	ents, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range ents {
		if e.IsDir() {
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", e.Name(), parent))
		}
	}
	return dirs
}

type snapshot struct {
	children []string
	cgroups  []string
	mounts   []string
	fds      int
}

// ofOtherProcess reports whether a run's cgroup name (run-<pid>-<n>, as the
// jail names them) is another process's: a test binary of another package,
// or another developer's, may share the parent.
func ofOtherProcess(name string) bool {
	var pid, n int
	if _, err := fmt.Sscanf(name, "run-%d-%d", &pid, &n); err != nil {
		return false
	}
	return pid != os.Getpid()
}

func take(cgroupParents []string) snapshot {
	var s snapshot
	s.children = ChildPIDs()
	var roots []string
	for _, p := range cgroupParents {
		roots = append(roots, cgroupDirs(p)...)
	}
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() || p == root {
				return nil
			}
			if filepath.Dir(p) == root && ofOtherProcess(d.Name()) {
				return filepath.SkipDir
			}
			s.cgroups = append(s.cgroups, p)
			return nil
		})
	}
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) > 4 {
				s.mounts = append(s.mounts, fields[4])
			}
		}
		f.Close()
	}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		s.fds = len(ents)
	}
	sort.Strings(s.cgroups)
	sort.Strings(s.mounts)
	return s
}

// ChildPIDs lists the pids of this process's live (not yet reaped) children.
func ChildPIDs() []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	me := fmt.Sprint(os.Getpid())
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// comm may hold spaces; the fields after the last ')' are fixed.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == me {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// CheckLeaks registers a cleanup that fails tb if, once the test and its other
// cleanups are done, there are more child processes, cgroups below the given parent
// names (each test package uses its own parent, such as "brig-test-jail", since go
// test runs packages in parallel), mounts or open file descriptors than when
// CheckLeaks was called. It waits up to two seconds for things that go away
// asynchronously (a killed process being reaped).
func CheckLeaks(tb testing.TB, cgroupParents ...string) {
	tb.Helper()
	before := take(cgroupParents)
	tb.Cleanup(func() {
		var after snapshot
		deadline := time.Now().Add(2 * time.Second)
		for {
			after = take(cgroupParents)
			if diff(before, after) == "" || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if d := diff(before, after); d != "" {
			tb.Errorf("test leaked: %s", d)
		}
	})
}

func diff(a, b snapshot) string {
	var out []string
	if extra := minus(b.children, a.children); len(extra) > 0 {
		out = append(out, "child processes "+strings.Join(extra, ","))
	}
	if extra := minus(b.cgroups, a.cgroups); len(extra) > 0 {
		out = append(out, "cgroups "+strings.Join(extra, ","))
	}
	if extra := minus(b.mounts, a.mounts); len(extra) > 0 {
		out = append(out, "mounts "+strings.Join(extra, ","))
	}
	if b.fds > a.fds {
		out = append(out, fmt.Sprintf("file descriptors (%d before, %d after)", a.fds, b.fds))
	}
	return strings.Join(out, "; ")
}

func minus(b, a []string) []string {
	seen := map[string]int{}
	for _, x := range a {
		seen[x]++
	}
	var out []string
	for _, x := range b {
		if seen[x] > 0 {
			seen[x]--
			continue
		}
		out = append(out, x)
	}
	return out
}

// RemoveCgroupParent removes a test package's cgroup parent from every hierarchy
// once its tests are done (TestMain), so that the tests leave no cgroup behind.
// A parent that still has groups is left: another test binary of the package
// (a fuzz worker) may be using it, and each test's own leaks are reported by
// CheckLeaks.
func RemoveCgroupParent(parent string) error {
	var errs []error
	for _, d := range cgroupDirs(parent) {
		if err := syscall.Rmdir(d); err != nil && err != syscall.ENOENT && err != syscall.EBUSY {
			errs = append(errs, fmt.Errorf("removing the test cgroup parent %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
