package jail

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCrashLevel: a group that holds only empty run groups, or levels of them,
// is a nested parent's level a crash left, which ForeignGroups names as
// brig's (the upgrade probe of 2026-12-06 read "groups brig did not make" of
// one); anything else in it, or a process, or no run group, is not.
func TestCrashLevel(t *testing.T) {
	one, two := t.TempDir(), t.TempDir()
	dirs := []string{one, two}
	mk := func(p ...string) {
		if err := os.MkdirAll(filepath.Join(p...), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if crashLevel(dirs, "a") {
		t.Error("a missing group: got a crash's level, want not")
	}
	mk(one, "a", "x")
	if crashLevel(dirs, "a") {
		t.Error("a level without a run group: got a crash's level, want not")
	}
	mk(one, "a", "x", "run-12-1")
	if !crashLevel(dirs, "a") {
		t.Error("levels of empty run groups in one hierarchy, missing in another (cpuacct, which a hybrid group leaves out): got not a crash's level, want one")
	}
	mk(two, "a", "x", "run-12-2")
	if !crashLevel(dirs, "a") {
		t.Error("levels of empty run groups: got not a crash's level, want one")
	}
	if err := os.WriteFile(filepath.Join(two, "a", "x", "run-12-2", "cgroup.procs"), []byte("77\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if crashLevel(dirs, "a") {
		t.Error("a run group with a process: got a crash's level, want not")
	}
	os.Remove(filepath.Join(two, "a", "x", "run-12-2", "cgroup.procs"))
	mk(one, "a", "theirs")
	if crashLevel(dirs, "a") {
		t.Error("another program's group beside: got a crash's level, want not")
	}
	// A level without a run group and without a process may be one too:
	// ForeignGroups says so, as a maybe (the fourth review).
	if !idleLevel(dirs, "a") {
		t.Error("a level with no process: got not idle, want idle")
	}
	if err := os.WriteFile(filepath.Join(one, "a", "theirs", "cgroup.procs"), []byte("88\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if idleLevel(dirs, "a") {
		t.Error("a level with a process deep in it: got idle, want not")
	}
}
