package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/internal/testutil"
)

// testParent is this package's parent group; the jail's tests use their own,
// since go test runs packages in parallel.
const testParent = "brig-test-cgroup"

// TestMain removes the test parent from every hierarchy once the tests are done.
func TestMain(m *testing.M) {
	code := m.Run()
	if os.Geteuid() == 0 {
		if err := testutil.RemoveCgroupParent(testParent); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// python is the interpreter victims run with: the python3 on PATH may be a
// pyenv shim that forks a shell first.
const python = "/usr/bin/python3"

// layout is one way of driving this host's cgroups.
type layout struct {
	name string
	mode Mode
	root string
}

// hostLayouts are the layouts this host can be driven as. A hybrid host (the
// development machines) gives all three: its v1 controllers as hybrid and as
// pure v1, and its cgroup2 hierarchy, which holds no controller brig limits,
// as v2.
func hostLayouts(t testing.TB) []layout {
	t.Helper()
	mode, err := Detect(DefaultMountRoot)
	testutil.Require(t, err == nil, fmt.Sprintf("no cgroups to test at %s: %v", DefaultMountRoot, err))
	switch mode {
	case ModeHybrid:
		return []layout{
			{"hybrid", ModeHybrid, DefaultMountRoot},
			{"v1", ModeLegacy, DefaultMountRoot},
			{"v2", ModeUnified, filepath.Join(DefaultMountRoot, unifiedDir)},
		}
	case ModeLegacy:
		return []layout{{"v1", ModeLegacy, DefaultMountRoot}}
	default:
		return []layout{{"v2", ModeUnified, DefaultMountRoot}}
	}
}

// requireHybridHost skips tests whose expectations are those of the hybrid
// development machines.
func requireHybridHost(t testing.TB) {
	t.Helper()
	mode, err := Detect(DefaultMountRoot)
	testutil.Require(t, err == nil && mode == ModeHybrid,
		fmt.Sprintf("expects the hybrid layout of the development hosts; %s has %v (err %v)", DefaultMountRoot, mode, err))
}

// newManager makes a Manager for l under testParent, logging into the test
// output.
func newManager(t testing.TB, l layout) *Manager {
	t.Helper()
	m, err := New(Config{MountRoot: l.root, Parent: testParent, Mode: l.mode, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("New(%s at %s): %v", l.mode, l.root, err)
	}
	return m
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

var groupSeq atomic.Int64

// newGroup creates a group named after the test and deletes it when the test
// ends.
func newGroup(t testing.TB, m *Manager) *Group {
	t.Helper()
	name := regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(t.Name(), "_")
	name = fmt.Sprintf("%.100s-%d", name, groupSeq.Add(1))
	g, err := m.Create(name)
	if err != nil {
		t.Fatalf("Create(%q): %v", name, err)
	}
	t.Cleanup(func() {
		if err := g.Delete(); err != nil {
			t.Errorf("Delete(%q): %v", name, err)
		}
	})
	return g
}

// victim is a process started inside a group.
type victim struct {
	cmd *exec.Cmd
	out *bytes.Buffer
}

// startInGroup starts argv inside g the way the jail places a run: born in the
// group's cgroup2 directory through CLONE_INTO_CGROUP where there is one, then
// Attach for the v1 hierarchies. The process holds on a read of stdin until it
// is inside everywhere, so nothing it does is charged to another group.
func startInGroup(t testing.TB, g *Group, argv ...string) *victim {
	t.Helper()
	cmd := exec.Command("/bin/sh", append([]string{"-c", `read _ && exec "$@"`, "sh"}, argv...)...)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if fd := g.CloneFD(); fd >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	}
	release, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %v: %v", argv, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if g.NeedsAttach() {
		if err := g.Attach(cmd.Process.Pid); err != nil {
			t.Fatalf("Attach(%d): %v", cmd.Process.Pid, err)
		}
	}
	if _, err := io.WriteString(release, "go\n"); err != nil {
		t.Fatal(err)
	}
	release.Close()
	return &victim{cmd: cmd, out: out}
}

// wait waits for the victim and returns the signal that killed it, or -1 when
// it exited.
func (v *victim) wait(t testing.TB) syscall.Signal {
	t.Helper()
	err := v.cmd.Wait()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("waiting for %v: %v", v.cmd.Args, err)
	}
	ws := v.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return ws.Signal()
	}
	return -1
}

// waitProcs waits until the group holds at least n processes and returns them.
func waitProcs(t testing.TB, g *Group, n int) []int {
	t.Helper()
	var pids []int
	ok, err := pollUntil(time.Now().Add(5*time.Second), func() (bool, error) {
		var err error
		pids, err = allProcs(g)
		return len(pids) >= n, err
	})
	if err != nil || !ok {
		t.Fatalf("waiting for %d processes in %q: got %v (err %v)", n, g.path, pids, err)
	}
	return pids
}

// allProcs lists the processes in any of the group's directories.
func allProcs(g *Group) ([]int, error) {
	var all []int
	for _, d := range g.dirs() {
		pids, err := procsTree(d)
		if err != nil {
			return nil, err
		}
		for _, p := range pids {
			if !slices.Contains(all, p) {
				all = append(all, p)
			}
		}
	}
	return all, nil
}

// waitEmpty waits until no process is left in the group.
func waitEmpty(t testing.TB, g *Group) {
	t.Helper()
	ok, err := pollUntil(time.Now().Add(5*time.Second), func() (bool, error) {
		busy, err := g.populated()
		return !busy, err
	})
	if err != nil || !ok {
		pids, _ := allProcs(g)
		t.Fatalf("waiting for %q to empty: still holds %v (err %v)", g.path, pids, err)
	}
}

// readFile reads a control file, trimmed.
func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return strings.TrimSpace(string(b))
}
