package jail

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/jail/pid1"
)

// TestFitRlimits: under hard limits below a run's, a run gets brig's where
// the process may raise its own and the process's lower ones where it may
// not, but RLIMIT_CORE, whose 0 would let a run's dumps reach a core_pattern
// pipe: the Launcher then refuses to start. Each case is this test again in
// a test binary started with a hard RLIMIT_CORE of 0 and RLIMIT_NOFILE of
// 1024 (a process can't raise its own without CAP_SYS_RESOURCE, which these
// machines' root lacks, nor undo the lowering), with the core_pattern of a
// file of the test's.
func TestFitRlimits(t *testing.T) {
	const patternEnv = "BRIG_TEST_CORE_PATTERN"
	if path := os.Getenv(patternEnv); path != "" {
		corePatternPath = path
		got, err := fitRlimits(pid1.DefaultRlimits(), slog.Default())
		if err != nil {
			t.Log("refused:", err)
			return
		}
		for _, r := range got {
			t.Logf("%s: %d %d", rlimitName(r.Resource), r.Cur, r.Max)
		}
		return
	}
	capSysResource := testutil.HasCapability(t, unix.CAP_SYS_RESOURCE)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, pattern string
		want          []string // in the child's log
	}{
		{"a file's core_pattern", "core\n", map[bool][]string{
			true:  {"RLIMIT_CORE: 1 1", "RLIMIT_NOFILE: 4096 4096", "RLIMIT_MEMLOCK: 65536 65536"},
			false: {"RLIMIT_CORE: 0 0", "RLIMIT_NOFILE: 1024 1024", "RLIMIT_MEMLOCK: 65536 65536"},
		}[capSysResource]},
		{"a core_pattern pipe", "|/usr/lib/core-helper %p\n", map[bool][]string{
			true:  {"RLIMIT_CORE: 1 1", "RLIMIT_NOFILE: 4096 4096"},
			false: {"refused:", "core_pattern pipe", `"|/usr/lib/core-helper %p"`, "LimitCORE="},
		}[capSysResource]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pattern := filepath.Join(t.TempDir(), "core_pattern")
			if err := os.WriteFile(pattern, []byte(tc.pattern), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("/bin/sh", "-c", `ulimit -c 0 && ulimit -n 1024 && exec "$0" "$@"`, exe, "-test.run=^TestFitRlimits$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), patternEnv+"="+pattern)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("the child's log has no %q (CAP_SYS_RESOURCE: %v):\n%s", w, capSysResource, out)
				}
			}
		})
	}
}
