package packages

import (
	"fmt"
	"os"
	"testing"

	"github.com/brig-sandbox/brig/cgroup"
	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/jail/pid1"
)

// testCgroupParent is this package's own cgroup parent: go test runs packages in
// parallel, and each checks only its own for leaks.
const testCgroupParent = "brig-test-packages"

// TestMain makes the test binary able to serve as a run's init: the installer
// tests run pip and npm in jails, and the Launcher re-executes /proc/self/exe,
// which under go test is this binary.
func TestMain(m *testing.M) {
	pid1.Main()
	// As brig's main does: a descriptor the test's parent left open (a
	// shell's, make's) reaches no sandbox or zygote, and its umask does not
	// decide what a run can read.
	jail.ResetInherited()
	// Remove what an interrupted earlier run of these tests left (but not the
	// groups of a test binary running beside this one), so that the leak checks
	// start from nothing.
	if os.Geteuid() == 0 {
		if cg, err := cgroup.New(cgroup.Config{Parent: testCgroupParent}); err == nil {
			cg.SweepIf(jail.LeftoverOfDeadProcess)
		}
	}
	code := m.Run()
	if os.Geteuid() == 0 {
		if err := testutil.RemoveCgroupParent(testCgroupParent); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}
