package jail

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/internal/testutil"
)

// TestCheckFileMax: the open-file check always passes, names the limit it
// read, and warns with what to do exactly when the limit is within a run's
// reach.
func TestCheckFileMax(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/fs/file-max")
	if err != nil {
		t.Skipf("no fs.file-max here: %v", err)
	}
	n, err := FileMax()
	if err != nil {
		t.Fatal(err)
	}
	c := CheckFileMax()
	if !c.OK || !strings.Contains(c.Detail, "fs.file-max = "+strings.TrimSpace(string(b))) {
		t.Fatalf("got %+v, want a pass naming fs.file-max = %s", c, strings.TrimSpace(string(b)))
	}
	if advises := c.Warn && strings.Contains(c.Hint, "sysctl -w fs.file-max="); advises != (n < FileMaxWanted) {
		t.Errorf("limit %d: got %+v, want a warning with the remedy exactly when it is below %d", n, c, uint64(FileMaxWanted))
	}
}

// TestCheckHugePages: a host pool of huge pages, which runs could take
// outside their memory limits, is warned of with the remedy; none passes
// quietly.
func TestCheckHugePages(t *testing.T) {
	for _, tc := range []struct {
		nr, overcommit string
		warn           bool
	}{{"0\n", "0\n", false}, {"16\n", "0\n", true}, {"0\n", "8\n", true}} {
		vm := t.TempDir()
		os.WriteFile(filepath.Join(vm, "nr_hugepages"), []byte(tc.nr), 0o644)
		os.WriteFile(filepath.Join(vm, "nr_overcommit_hugepages"), []byte(tc.overcommit), 0o644)
		c := checkHugePages(vm)
		if !c.OK || c.Warn != tc.warn || (tc.warn && !strings.Contains(c.Hint, "vm.nr_hugepages")) {
			t.Errorf("nr_hugepages %q, overcommit %q: got %+v, want a pass that warns %v", tc.nr, tc.overcommit, c, tc.warn)
		}
	}
}

// TestCheckOOMFloor: without CAP_SYS_RESOURCE a run can lower the
// oom_score_adj brig gives it, and the check warns with the remedy; with it,
// it passes quietly. This host's own check says which it is.
func TestCheckOOMFloor(t *testing.T) {
	if c := checkOOMFloor(true, -900); !c.OK || c.Warn {
		t.Errorf("with the capability: got %+v, want a quiet pass", c)
	}
	c := checkOOMFloor(false, -900)
	if !c.OK || !c.Warn || !strings.Contains(c.Detail, "lower it to -900") || !strings.Contains(c.Hint, "CAP_SYS_RESOURCE") {
		t.Errorf("without the capability: got %+v, want a pass that warns, naming the floor and the capability", c)
	}
	if got, want := CheckOOMFloor().Warn, !testutil.HasCapability(t, unix.CAP_SYS_RESOURCE); got != want {
		t.Errorf("this host: got a warning %v, want %v", got, want)
	}
}

// TestCheckCgroupNamespace: brig must run in the host's cgroup namespace,
// where /proc/self/cgroup's cgroup2 path is where the mount shows the
// process; in one of its own (a container runtime's private cgroupns), the
// path is its namespace's root and the mount's there does not list it. This
// host's own check passes.
func TestCheckCgroupNamespace(t *testing.T) {
	mount := t.TempDir()
	os.MkdirAll(filepath.Join(mount, "system.slice", "brig.service"), 0o755)
	os.WriteFile(filepath.Join(mount, "system.slice", "brig.service", "cgroup.procs"), []byte("7\n42\n"), 0o644)
	os.WriteFile(filepath.Join(mount, "cgroup.procs"), []byte("1\n2\n"), 0o644)
	for _, tc := range []struct {
		name, self string
		ok         bool
	}{
		{"the host's", "12:memory:/x\n0::/system.slice/brig.service\n", true},
		{"its own", "0::/\n", false},
		{"no cgroup2 hierarchy", "4:memory:/x\n", true},
	} {
		c := checkCgroupNamespace(tc.self, mount, 42)
		if c.OK != tc.ok || !c.OK && !strings.Contains(c.Hint, "host's cgroup namespace") {
			t.Errorf("%s: got %+v, want ok %v and a hint when not", tc.name, c, tc.ok)
		}
	}
	if c := CheckCgroupNamespace(); !c.OK {
		t.Errorf("this host: got %+v, want brig in the host's cgroup namespace", c)
	}
}

// TestCheckTCPMem: a pressure threshold at or below a run's largest memory
// limit is warned of with the remedy; one above passes quietly; an unreadable
// or malformed file passes, saying so.
func TestCheckTCPMem(t *testing.T) {
	page := uint64(os.Getpagesize())
	run := uint64(2048) << 20
	for _, tc := range []struct {
		body string
		warn bool
		says string
	}{
		{fmt.Sprintf("%d %d %d\n", run/page/2, run/page, 2*run/page), true, "can pass its pressure threshold (2048 MiB)"},
		{"287907 383879 575814\n", true, "(1499 MiB)"},
		{fmt.Sprintf("%d %d %d\n", run/page, run/page+1, 2*run/page), false, "is above a run's largest memory limit"},
		{"12 34\n", false, "not three numbers"},
	} {
		path := filepath.Join(t.TempDir(), "tcp_mem")
		os.WriteFile(path, []byte(tc.body), 0o644)
		c := checkTCPMem(path)
		if !c.OK || c.Warn != tc.warn || (c.Hint != "") != tc.warn || !strings.Contains(c.Detail, tc.says) {
			t.Errorf("tcp_mem %q: got %+v, want a pass, warning %v, saying %q", tc.body, c, tc.warn, tc.says)
		}
	}
	if c := checkTCPMem(filepath.Join(t.TempDir(), "missing")); !c.OK || c.Warn || !strings.Contains(c.Detail, "unreadable") {
		t.Errorf("no tcp_mem: got %+v, want a pass saying it is unreadable", c)
	}
}
