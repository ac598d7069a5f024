package cgroup

import (
	"errors"
	"testing"
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
