package cgroup

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/brig-sandbox/brig/internal/testutil"
	"golang.org/x/sys/unix"
)

func TestDetect(t *testing.T) {
	tests := []struct {
		name     string
		root     string
		want     Mode
		wantErr  error
		needsDir string // skip unless this exists: the case describes a hybrid host
	}{
		{name: "hybrid host", root: DefaultMountRoot, want: ModeHybrid, needsDir: "/sys/fs/cgroup/unified"},
		{name: "its cgroup2 hierarchy", root: "/sys/fs/cgroup/unified", want: ModeUnified, needsDir: "/sys/fs/cgroup/unified"},
		{name: "a v1 hierarchy is no mount root", root: "/sys/fs/cgroup/memory", wantErr: ErrNoCgroups, needsDir: "/sys/fs/cgroup/memory"},
		{name: "plain directory", root: t.TempDir(), wantErr: ErrNoCgroups},
		{name: "missing", root: "/nonexistent/cgroup", wantErr: os.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.needsDir != "" {
				_, err := os.Stat(tt.needsDir)
				testutil.Require(t, err == nil, tt.needsDir+" is missing: not a hybrid host")
			}
			got, err := Detect(tt.root)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Detect(%q) error: got %v, want %v", tt.root, err, tt.wantErr)
			}
			if err == nil && got != tt.want {
				t.Errorf("Detect(%q): got %v, want %v", tt.root, got, tt.want)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	testutil.RequireRoot(t)
	requireHybridHost(t)
	testutil.CheckLeaks(t, testParent)
	tests := []struct {
		name    string
		cfg     Config
		wantErr error
	}{
		{name: "v2 forced on the hybrid root", cfg: Config{Mode: ModeUnified}, wantErr: ErrNoCgroups},
		{name: "v1 forced on a cgroup2 mount", cfg: Config{MountRoot: "/sys/fs/cgroup/unified", Mode: ModeLegacy}, wantErr: ErrNoCgroups},
		{name: "hybrid forced on a cgroup2 mount", cfg: Config{MountRoot: "/sys/fs/cgroup/unified", Mode: ModeHybrid}, wantErr: ErrNoCgroups},
		{name: "invalid before touching anything", cfg: Config{Parent: "../escape"}, wantErr: ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cfg.Parent == "" {
				tt.cfg.Parent = testParent
			}
			tt.cfg.Logger = testLogger(t)
			_, err := New(tt.cfg)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("New(%+v): got %v, want %v", tt.cfg, err, tt.wantErr)
			}
		})
	}
}

func TestControllers(t *testing.T) {
	testutil.RequireRoot(t)
	requireHybridHost(t)
	testutil.CheckLeaks(t, testParent)
	all := map[string]bool{"memory": true, "pids": true, "cpu": true, "cpuacct": true, "freezer": true}
	// A hybrid group with cgroup.kill uses the twin instead of the v1 freezer
	// (twinServes), and its cpu.stat instead of cpuacct.
	hybrid := map[string]bool{"memory": true, "pids": true, "cpu": true, "cpuacct": true, "freezer": false}
	tests := []struct {
		layout   layout
		wantMode Mode
		want     map[string]bool
	}{
		{layout: layout{"detected", ModeDetect, DefaultMountRoot}, wantMode: ModeHybrid, want: hybrid},
		{layout: layout{"hybrid", ModeHybrid, DefaultMountRoot}, wantMode: ModeHybrid, want: hybrid},
		{layout: layout{"v1", ModeLegacy, DefaultMountRoot}, wantMode: ModeLegacy, want: all},
		// The development hosts' cgroup2 hierarchy holds only hugetlb; cpu.stat
		// and cgroup.freeze are core files.
		{layout: layout{"v2", ModeUnified, "/sys/fs/cgroup/unified"}, wantMode: ModeUnified,
			want: map[string]bool{"memory": false, "pids": false, "cpu": false, "cpuacct": true, "freezer": true}},
	}
	for _, tt := range tests {
		t.Run(tt.layout.name, func(t *testing.T) {
			m := newManager(t, tt.layout)
			if got := m.Mode(); got != tt.wantMode {
				t.Errorf("Mode: got %v, want %v", got, tt.wantMode)
			}
			got := m.Controllers()
			if !maps.Equal(got, tt.want) {
				t.Errorf("Controllers: got %v, want %v", got, tt.want)
			}
			got["memory"] = !got["memory"]
			if m.Controllers()["memory"] == got["memory"] {
				t.Errorf("Controllers: got the Manager's own map, want a copy")
			}
		})
	}
}

// TestV1OnlyBrigHierarchies checks that the v1 backend makes groups in the
// hierarchies brig uses and in no other (cpuset, devices, blkio, ...); on
// hybrid, not in those whose work the twin does (twinServes).
func TestV1OnlyBrigHierarchies(t *testing.T) {
	testutil.RequireRoot(t)
	requireHybridHost(t)
	testutil.CheckLeaks(t, testParent)
	for _, l := range []struct {
		layout layout
		twin   bool
	}{
		{layout{"hybrid", ModeHybrid, DefaultMountRoot}, true},
		{layout{"v1", ModeLegacy, DefaultMountRoot}, false},
	} {
		t.Run(l.layout.name, func(t *testing.T) {
			g := newGroup(t, newManager(t, l.layout))
			tests := []struct {
				hierarchy string
				want      bool
			}{
				{"memory", true}, {"pids", true}, {"cpu", true}, {"unified", l.twin},
				{"cpuacct", !l.twin}, {"freezer", !l.twin},
				{"cpuset", false}, {"devices", false}, {"blkio", false}, {"systemd", false},
			}
			for _, tt := range tests {
				dir := filepath.Join(DefaultMountRoot, tt.hierarchy, g.path)
				_, err := os.Stat(dir)
				if got := err == nil; got != tt.want {
					t.Errorf("%s exists: got %v, want %v", dir, got, tt.want)
				}
			}
		})
	}
}

func TestCreateDelete(t *testing.T) {
	testutil.RequireRoot(t)
	for _, l := range hostLayouts(t) {
		t.Run(l.name, func(t *testing.T) {
			testutil.CheckLeaks(t, testParent)
			m := newManager(t, l)
			g, err := m.Create("create-delete")
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			for _, d := range g.dirs() {
				if _, err := os.Stat(d); err != nil {
					t.Errorf("after Create: got %v, want %s to exist", err, d)
				}
			}
			if _, err := m.Create("create-delete"); !errors.Is(err, ErrExists) {
				t.Errorf("Create of a live name: got %v, want ErrExists", err)
			}
			// A second Manager, as after a restart, must not adopt the group.
			if _, err := newManager(t, l).Create("create-delete"); !errors.Is(err, ErrExists) {
				t.Errorf("Create of a leftover: got %v, want ErrExists", err)
			}
			if _, err := m.Create("bad/name"); !errors.Is(err, ErrInvalid) {
				t.Errorf("Create(bad/name): got %v, want ErrInvalid", err)
			}

			if err := g.Delete(); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			for _, d := range g.dirs() {
				if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("after Delete: got %v, want %s gone", err, d)
				}
			}
			if got := g.CloneFD(); got != -1 {
				t.Errorf("CloneFD after Delete: got %d, want -1", got)
			}
			if err := g.Delete(); err != nil {
				t.Errorf("second Delete: got %v, want nil", err)
			}
			for name, op := range map[string]func() error{
				"SetLimits": func() error { return g.SetLimits(Limits{Pids: 1}) },
				"Attach":    func() error { return g.Attach(os.Getpid()) },
				"Kill":      g.Kill,
				"Usage":     func() error { _, err := g.Usage(); return err },
			} {
				if err := op(); !errors.Is(err, ErrDeleted) {
					t.Errorf("%s after Delete: got %v, want ErrDeleted", name, err)
				}
			}

			// The name is free again.
			g2, err := m.Create("create-delete")
			if err != nil {
				t.Fatalf("Create after Delete: %v", err)
			}
			if err := g2.Delete(); err != nil {
				t.Fatalf("Delete: %v", err)
			}
		})
	}
}

func TestSweep(t *testing.T) {
	testutil.RequireRoot(t)
	for _, l := range hostLayouts(t) {
		t.Run(l.name, func(t *testing.T) {
			testutil.CheckLeaks(t, testParent)
			// crashed stands for a brig that died with groups left behind, one of
			// them still running a process.
			crashed := newManager(t, l)
			var left []*Group
			for _, name := range []string{"left-idle", "left-running"} {
				g, err := crashed.Create(name)
				if err != nil {
					t.Fatalf("Create(%q): %v", name, err)
				}
				left = append(left, g)
			}
			v := startInGroup(t, left[1], "sleep", "60")
			waitProcs(t, left[1], 1)
			want := len(left)
			// A leftover present in only one hierarchy, as a crash in the middle
			// of Create leaves it.
			partial := filepath.Join(left[0].dirs()[len(left[0].dirs())-1], "..", "left-partial")
			if err := os.Mkdir(partial, 0o755); err != nil {
				t.Fatal(err)
			}
			want++

			m := newManager(t, l)
			live := newGroup(t, m)
			got, err := m.Sweep()
			if err != nil {
				t.Fatalf("Sweep: %v", err)
			}
			if got != want {
				t.Errorf("Sweep removed: got %d, want %d", got, want)
			}
			if sig := v.wait(t); sig != syscall.SIGKILL {
				t.Errorf("process in a leftover: got signal %v, want SIGKILL", sig)
			}
			for _, g := range left {
				for _, d := range g.dirs() {
					if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("after Sweep: got %v, want %s gone", err, d)
					}
				}
			}
			if _, err := os.Stat(partial); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after Sweep: got %v, want %s gone", err, partial)
			}
			for _, d := range live.dirs() {
				if _, err := os.Stat(d); err != nil {
					t.Errorf("live group after Sweep: got %v, want %s kept", err, d)
				}
			}
			// The crashed Manager's handles still delete cleanly.
			for _, g := range left {
				if err := g.Delete(); err != nil {
					t.Errorf("Delete of a swept group: got %v, want nil", err)
				}
			}
			if got, err := m.Sweep(); got != 0 || err != nil {
				t.Errorf("second Sweep: got %d, %v; want 0, nil", got, err)
			}
		})
	}
}

// TestSweepIf removes only the leftovers the filter accepts: on a parent that
// several processes share, another process's groups stay.
func TestSweepIf(t *testing.T) {
	testutil.RequireRoot(t)
	for _, l := range hostLayouts(t) {
		t.Run(l.name, func(t *testing.T) {
			testutil.CheckLeaks(t, testParent)
			other := newManager(t, l)
			theirs, err := other.Create("theirs")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { theirs.Delete() })
			mine, err := other.Create("mine-left")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { mine.Delete() }) // closes its descriptor once swept
			m := newManager(t, l)
			got, err := m.SweepIf(func(name string) bool { return name == "mine-left" })
			if err != nil || got != 1 {
				t.Fatalf("SweepIf: got %d, %v; want 1, nil", got, err)
			}
			for _, d := range mine.dirs() {
				if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("accepted leftover: got %v, want %s gone", err, d)
				}
			}
			for _, d := range theirs.dirs() {
				if _, err := os.Stat(d); err != nil {
					t.Errorf("refused group: got %v, want %s kept", err, d)
				}
			}
		})
	}
}

// TestCreateAfterParentRemoved: another brig process sharing the parent may
// remove it when it stops (RemoveParentIfEmpty); a Create then makes it again.
func TestCreateAfterParentRemoved(t *testing.T) {
	testutil.RequireRoot(t)
	for _, l := range hostLayouts(t) {
		t.Run(l.name, func(t *testing.T) {
			testutil.CheckLeaks(t, testParent)
			m := newManager(t, l)
			other := newManager(t, l)
			if err := other.RemoveParentIfEmpty(); err != nil {
				t.Fatalf("removing the shared parent: %v", err)
			}
			for _, d := range m.parentDirs() {
				if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("parent %s: got %v, want it removed", d, err)
				}
			}
			g := newGroup(t, m)
			for _, d := range g.dirs() {
				if _, err := os.Stat(d); err != nil {
					t.Errorf("after Create: got %v, want %s to exist", err, d)
				}
			}
		})
	}
}

// TestNestedParentLevels: the levels New makes above a nested parent are
// removed with it, in every hierarchy, and a level another parent still uses
// stays without an error (the cgroup v2 probe of 2026-12-06 found
// `--cgroup-parent a/b` leaving a behind).
func TestNestedParentLevels(t *testing.T) {
	testutil.RequireRoot(t)
	for _, l := range hostLayouts(t) {
		t.Run(l.name, func(t *testing.T) {
			testutil.CheckLeaks(t, testParent)
			newManager(t, l) // the test parent, which no nested manager makes
			level := testParent + "/nest-" + l.name
			nested := func(name string) *Manager {
				m, err := New(Config{MountRoot: l.root, Parent: level + "/" + name, Mode: l.mode, Logger: testLogger(t)})
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			levelDirs := func(m *Manager) []string {
				var dirs []string
				for _, d := range m.parentDirs() {
					dirs = append(dirs, filepath.Dir(d))
				}
				return dirs
			}
			a := nested("a") // makes the level
			b := nested("b")
			if err := a.RemoveParent(); err != nil {
				t.Fatalf("removing a while b holds the level: %v", err)
			}
			for _, d := range levelDirs(b) {
				if _, err := os.Stat(d); err != nil {
					t.Errorf("the level %s, which b still holds: %v", d, err)
				}
			}
			if err := b.RemoveParent(); err != nil {
				t.Fatal(err)
			}
			// b did not make the level: it stays, and the next that makes it
			// again would not. Take it away, then make it with a lone parent.
			if err := testutil.RemoveCgroupParent(level); err != nil {
				t.Fatal(err)
			}
			c := nested("c")
			if len(c.above) == 0 {
				t.Fatalf("New made %s without counting it", level)
			}
			if err := c.RemoveParent(); err != nil {
				t.Fatal(err)
			}
			for _, d := range levelDirs(c) {
				if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("the level %s above the parent: got %v, want it removed", d, err)
				}
			}
			for _, d := range levelDirs(c) {
				if _, err := os.Stat(filepath.Dir(d)); err != nil {
					t.Errorf("the test parent above the level, which c did not make: %v", err)
				}
			}
		})
	}
}

// TestAbandon: a start refused after New removes what New made, and only
// that: the parent's directory that held another program's group stays (the
// docs probe of 2026-12-06: a refused start left the parent in the
// hierarchies where it had been missing).
func TestAbandon(t *testing.T) {
	testutil.RequireRoot(t)
	for _, l := range hostLayouts(t) {
		t.Run(l.name, func(t *testing.T) {
			testutil.CheckLeaks(t, testParent)
			newManager(t, l) // the test parent, which New below does not make
			parent := testParent + "/abandon-" + l.name
			first, err := New(Config{MountRoot: l.root, Parent: parent, Mode: l.mode, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			dirs := first.parentDirs()
			// Another program's: the parent in one hierarchy, with a group.
			for _, d := range dirs[1:] {
				if err := unix.Rmdir(d); err != nil {
					t.Fatal(err)
				}
			}
			foreign := filepath.Join(dirs[0], "x")
			if err := os.Mkdir(foreign, 0o755); err != nil {
				t.Fatal(err)
			}
			defer func() {
				unix.Rmdir(foreign)
				unix.Rmdir(dirs[0])
			}()
			m, err := New(Config{MountRoot: l.root, Parent: parent, Mode: l.mode, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Abandon(); err != nil {
				t.Fatal(err)
			}
			for i, d := range dirs {
				_, err := os.Stat(d)
				if i == 0 && err != nil {
					t.Errorf("the directory that was there before New: %v, want it kept", err)
				}
				if i > 0 && !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s, which New made: got %v, want it removed", d, err)
				}
			}
		})
	}
}

// TestForeign: Foreign lists another program's groups and processes in a
// parent, each process once though v1 lists it in every hierarchy, and
// writes nothing: a refused parent keeps its memory.swappiness, which New
// would have set to 0 (the last session's note: a refused start wrote it),
// and a missing parent is not made.
func TestForeign(t *testing.T) {
	testutil.RequireRoot(t)
	for _, l := range hostLayouts(t) {
		t.Run(l.name, func(t *testing.T) {
			testutil.CheckLeaks(t, testParent)
			newManager(t, l)
			parent := testParent + "/foreign-" + l.name
			cfg := Config{MountRoot: l.root, Parent: parent, Mode: l.mode, Logger: testLogger(t)}
			ours := func(name string) bool { return strings.HasPrefix(name, "run-") }
			dirs, err := ParentDirs(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if groups, procs, err := Foreign(dirs, ours); err != nil || len(groups) != 0 || procs != 0 {
				t.Errorf("a missing parent: got %v, %d, %v; want nothing", groups, procs, err)
			}
			var roots []string
			if l.mode != ModeUnified {
				v1, err := findV1(l.root)
				if err != nil {
					t.Fatal(err)
				}
				for _, h := range v1.hierarchies {
					roots = append(roots, h.dir)
				}
			}
			switch l.mode {
			case ModeUnified:
				roots = append(roots, l.root)
			case ModeHybrid:
				roots = append(roots, filepath.Join(l.root, unifiedDir))
			}
			for _, r := range roots {
				if _, err := os.Stat(filepath.Join(r, parent)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("Foreign of a missing parent made %s: %v", filepath.Join(r, parent), err)
				}
			}
			// Another program's parent: its process in every hierarchy, a
			// group of its own in one, and a group named as brig names its.
			sleep := exec.Command("sleep", "60")
			if err := sleep.Start(); err != nil {
				t.Fatal(err)
			}
			var made []string
			defer func() {
				sleep.Process.Kill()
				sleep.Wait()
				for i := len(made) - 1; i >= 0; i-- {
					rmdirTree(made[i])
				}
			}()
			for i, r := range roots {
				d := filepath.Join(r, parent)
				if up := filepath.Dir(d); !exists(up) { // the hierarchies New leaves out
					if err := os.Mkdir(up, 0o755); err != nil {
						t.Fatal(err)
					}
					made = append(made, up)
				}
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
				made = append(made, d)
				sub := "run-1-1"
				if i == 0 {
					sub = "theirs"
				}
				if err := os.Mkdir(filepath.Join(d, sub), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0); err != nil {
					t.Fatal(err)
				}
			}
			swappiness := filepath.Join(l.root, "memory", parent, "memory.swappiness")
			if l.mode != ModeUnified {
				if err := os.WriteFile(swappiness, []byte("37"), 0); err != nil {
					t.Fatal(err)
				}
			}
			groups, procs, err := Foreign(dirs, ours)
			if err != nil || !slices.Equal(groups, []string{"theirs"}) || procs != 1 {
				t.Errorf("another program's parent in %d hierarchies: got %v, %d, %v; want [theirs], 1 process", len(roots), groups, procs, err)
			}
			if l.mode != ModeUnified {
				if b, _ := os.ReadFile(swappiness); strings.TrimSpace(string(b)) != "37" {
					t.Errorf("the parent's memory.swappiness: got %q, want it left at 37", b)
				}
			}
		})
	}
}
