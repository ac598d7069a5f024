package cgroup

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestLockParent: a parent has one owner at a time, and its lock is free again
// once closed; another parent has its own lock. No root needed.
func TestLockParent(t *testing.T) {
	dir := t.TempDir()
	first, err := LockParent(dir, "brig/test")
	if err != nil {
		t.Fatalf("first lock: %v", err)
	}
	if _, err := LockParent(dir, "brig/test"); !errors.Is(err, ErrParentLocked) {
		t.Fatalf("second lock of one parent: got %v, want ErrParentLocked", err)
	}
	other, err := LockParent(dir, "brig-other")
	if err != nil {
		t.Fatalf("another parent: got %v, want its own lock", err)
	}
	other.Close()
	if err := first.Close(); err != nil {
		t.Fatalf("closing: %v", err)
	}
	again, err := LockParent(dir, "brig/test")
	if err != nil {
		t.Fatalf("lock after close: got %v, want the lock", err)
	}
	again.Close()
}

// TestLockParentNested: a service on a parent and another on a group within
// it are refused either way round, since each would sweep or remove the
// other's groups; siblings under one ancestor are not.
func TestLockParentNested(t *testing.T) {
	dir := t.TempDir()
	outer, err := LockParent(dir, "brig-n")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LockParent(dir, "brig-n/sub"); !errors.Is(err, ErrParentLocked) {
		t.Fatalf("a group within a locked parent: got %v, want ErrParentLocked", err)
	}
	outer.Close()
	a, err := LockParent(dir, "brig-n/a/x")
	if err != nil {
		t.Fatalf("brig-n/a/x: %v", err)
	}
	defer a.Close()
	b, err := LockParent(dir, "brig-n/b")
	if err != nil {
		t.Fatalf("a sibling: got %v, want its own lock", err)
	}
	defer b.Close()
	for _, p := range []string{"brig-n", "brig-n/a"} {
		if _, err := LockParent(dir, p); !errors.Is(err, ErrParentLocked) {
			t.Fatalf("%s, an ancestor of a locked parent: got %v, want ErrParentLocked", p, err)
		}
	}
	// One file per parent: "a_b" is not "a/b" (they shared one before).
	under, err := LockParent(dir, "brig-n_a")
	if err != nil {
		t.Fatalf("brig-n_a beside brig-n/a: got %v, want its own lock", err)
	}
	under.Close()
	if _, err := LockParent(dir, ""); err == nil {
		t.Fatal("an empty parent: got a lock, want an error")
	}
}

// TestShareParent: processes that share a parent (brig run --local) run side
// by side, and an owner (brig serve) is refused while one holds it, and they
// while an owner does, on the parent or an ancestor of it; an owner of a
// group within their parent is not, since their sweep leaves its groups.
func TestShareParent(t *testing.T) {
	dir := t.TempDir()
	a, err := ShareParent(dir, "brig-s")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ShareParent(dir, "brig-s")
	if err != nil {
		t.Fatalf("a second sharer: got %v, want the lock", err)
	}
	if _, err := LockParent(dir, "brig-s"); !errors.Is(err, ErrParentLocked) {
		t.Fatalf("an owner of a shared parent: got %v, want ErrParentLocked", err)
	}
	within, err := LockParent(dir, "brig-s/svc")
	if err != nil {
		t.Fatalf("an owner of a group within a shared parent: got %v, want the lock", err)
	}
	within.Close()
	a.Close()
	b.Close()
	for _, p := range []string{"brig-s", "brig-s/x"} {
		owner, err := LockParent(dir, "brig-s")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ShareParent(dir, p); !errors.Is(err, ErrParentLocked) {
			t.Errorf("sharing %s while a service owns brig-s: got %v, want ErrParentLocked", p, err)
		}
		owner.Close()
	}
}

// TestLockFolderIsTheOwners: a lock is not taken in a folder others may write
// to, and a lock file that is a symbolic link is not followed (the review of
// 2026-12-06: in /run/lock, another user held brig's locks and made root
// create a file where a link of theirs led).
func TestLockFolderIsTheOwners(t *testing.T) {
	open := t.TempDir()
	if err := os.Chmod(open, 0o1777); err != nil {
		t.Fatal(err)
	}
	if _, err := LockParent(open, "brig-t"); err == nil || errors.Is(err, ErrParentLocked) {
		t.Errorf("a lock in a folder anyone may write to: got %v, want it refused", err)
	}
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "made-by-the-lock")
	if err := os.Symlink(target, ParentLockPath(dir, "brig-t")); err != nil {
		t.Fatal(err)
	}
	if _, err := ShareParent(dir, "brig-t"); err == nil {
		t.Error("a lock file that is a symbolic link: got the lock, want an error")
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the link's target: got %v, want nothing made", err)
	}
}

// TestParentHeld: a parent's lock another process holds, shared or not, is
// seen in /proc/locks; this process's own is not another's.
func TestParentHeld(t *testing.T) {
	dir := t.TempDir()
	own, err := LockParent(dir, "brig-h")
	if err != nil {
		t.Fatal(err)
	}
	if ParentHeld(dir, "brig-h") {
		t.Error("this process's own lock: got held by another, want not")
	}
	own.Close()
	if ParentHeld(dir, "brig-none") {
		t.Error("a parent never locked: got held, want not")
	}
	other := exec.Command("flock", "-s", ParentLockPath(dir, "brig-h"), "sleep", "30")
	if err := other.Start(); err != nil {
		t.Skipf("no flock(1) to hold a lock from another process: %v", err)
	}
	defer func() {
		other.Process.Kill()
		other.Wait()
	}()
	for deadline := time.Now().Add(5 * time.Second); !ParentHeld(dir, "brig-h"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a lock another process holds: not seen within 5 s")
		}
	}
}
