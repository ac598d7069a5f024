package jail

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/internal/testutil"
)

// TestEmptyLayer: the read-only views' empty layer is made once and then
// taken as it is only while it is an empty directory of root's that only root
// may write; anything in it would be in every run's host folders.
func TestEmptyLayer(t *testing.T) {
	testutil.RequireRoot(t)
	state := t.TempDir()
	dir, err := emptyLayer(state)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := emptyLayer(state); err != nil || again != dir {
		t.Fatalf("the second time: %q, %v; want %q again", again, err, dir)
	}
	refused := func(what string) {
		t.Helper()
		if _, err := emptyLayer(state); err == nil || !strings.Contains(err.Error(), "must be an empty directory of root's") {
			t.Errorf("with %s: got %v, want it refused", what, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "evil"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	refused("a file in it")
	os.Remove(filepath.Join(dir, "evil"))
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	refused("mode 0777")
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 1, 1); err != nil {
		t.Fatal(err)
	}
	refused("another owner")
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), dir); err != nil {
		t.Fatal(err)
	}
	refused("a symlink in its place")
}

// TestCheckViewLayers: the check passes either way, and warns, naming it,
// about a host folder on another filesystem than the state directory (here
// /proc against a temporary directory's).
func TestCheckViewLayers(t *testing.T) {
	state := t.TempDir()
	same := filepath.Join(state, "folder")
	if err := os.Mkdir(same, 0o755); err != nil {
		t.Fatal(err)
	}
	if c := CheckViewLayers(state, []string{same}); !c.OK || c.Warn {
		t.Errorf("a folder on the state directory's filesystem: got %+v, want a pass without a warning", c)
	}
	c := CheckViewLayers(state, []string{same, "/proc"})
	if !c.OK || !c.Warn || !strings.Contains(c.Detail, "/proc on another filesystem") || strings.Contains(c.Detail, same) {
		t.Errorf("/proc: got %+v, want a passing warning that names /proc alone", c)
	}
}

// TestSandboxNamespaceRefusesOwn: the supervisor never takes its own mount
// namespace for a sandbox's (one whose pid 1 has not made its own yet), and
// takes a process's own.
func TestSandboxNamespaceRefusesOwn(t *testing.T) {
	if ns, err := sandboxNamespace(os.Getpid(), "mnt"); err == nil {
		unix.Close(ns)
		t.Fatal("sandboxNamespace took this process's own mount namespace")
	}
	if err := mountIntoSandbox(os.Getpid(), runIDs{}, []Mount{{Source: t.TempDir(), Target: "/x", Writable: true}}, "", true); err == nil || !strings.Contains(err.Error(), "has not made its own") {
		t.Errorf("mountIntoSandbox into this process: got %v, want a refusal", err)
	}
	testutil.RequireRoot(t)
	cmd := exec.Command("/bin/sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	ns, err := sandboxNamespace(cmd.Process.Pid, "mnt")
	if err != nil {
		t.Fatalf("a child's own mount namespace: %v", err)
	}
	unix.Close(ns)
}
