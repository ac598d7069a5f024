package osthread

import (
	"errors"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRunNeverOnTheMainThread: f never runs on the main thread, however many
// calls there are; a tainted thread is not reused; errors come back.
func TestRunNeverOnTheMainThread(t *testing.T) {
	seen := map[int]bool{}
	for i := range 200 {
		var tid int
		err := Run(func() (bool, error) {
			tid = unix.Gettid()
			return i%2 == 0, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if tid == unix.Getpid() {
			t.Fatal("f ran on the main thread")
		}
		if i%2 == 0 {
			if seen[tid] {
				t.Fatalf("a thread left tainted (%d) ran f again", tid)
			}
			seen[tid] = true
		}
	}
	want := errors.New("boom")
	if err := Run(func() (bool, error) { return false, want }); err != want {
		t.Errorf("got %v, want f's error", err)
	}
	if _, err := os.Readlink("/proc/self/ns/mnt"); err != nil {
		t.Errorf("/proc/self after the runs: %v", err)
	}
	if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(unix.Getpid())); err != nil {
		t.Errorf("the main thread is gone: %v", err)
	}
}
