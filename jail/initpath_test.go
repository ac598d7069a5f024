package jail

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/internal/testutil"
)

// TestDefaultInitPath: brig-init next to the executable is used only when it
// is root's, writable by root alone, and of the same build.
func TestDefaultInitPath(t *testing.T) {
	testutil.RequireRoot(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(filepath.Dir(exe), InitBinary)
	if _, err := os.Stat(p); err == nil {
		t.Skipf("%s exists; not replacing it", p)
	}
	t.Cleanup(func() { os.Remove(p) })
	// A stand-in that answers "stamp" as brig-init does.
	fake := func(stamp string, mode os.FileMode) {
		t.Helper()
		os.Remove(p)
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho "+stamp+"\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, stamp, fakeStamp string
		mode                   os.FileMode
		want, why              string
	}{
		{"no stamp in this binary", "", "", 0o755, "/proc/self/exe", "no build stamp"},
		{"same build", "b1", "b1", 0o755, p, ""},
		{"another build", "b1", "b2", 0o755, "/proc/self/exe", "another build"},
		{"writable by others", "b1", "b1", 0o757, "/proc/self/exe", "only root can write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake(tc.fakeStamp, tc.mode)
			got, why := helperPath(InitBinary, tc.stamp)
			if got != tc.want || !strings.Contains(why, tc.why) || (tc.why == "") != (why == "") {
				t.Errorf("got %q (%q), want %q (%q)", got, why, tc.want, tc.why)
			}
		})
	}
	os.Remove(p)
	if got, why := helperPath(InitBinary, "b1"); got != "/proc/self/exe" || !strings.Contains(why, "no "+InitBinary) {
		t.Errorf("without the file: got %q (%q), want /proc/self/exe and why", got, why)
	}
}

// TestResetInherited: a descriptor the process was started with, not
// close-on-exec, becomes so, and reaches no sandbox's pid 1 or zygote; a
// hardened umask becomes 022. (TestMain has called it already; this is its
// second call, on what a test set up as a parent would.)
func TestResetInherited(t *testing.T) {
	fd, err := syscall.Open("/dev/null", syscall.O_RDONLY, 0) // no O_CLOEXEC, as a shell's
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	unix.Umask(0o077)
	ResetInherited()
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("fd %d: flags %#x, %v; want close-on-exec", fd, flags, err)
	}
	if mask := unix.Umask(0o022); mask != 0o022 {
		t.Errorf("umask %#o after a start with 077, want 022", mask)
	}
}
