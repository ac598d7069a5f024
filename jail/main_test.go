package jail

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/cgroup"
	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/jail/pid1"
	"github.com/brig-sandbox/brig/rootfs"
)

// testCgroupParent is this package's own cgroup parent: go test runs packages in
// parallel, and each checks only its own for leaks.
const testCgroupParent = "brig-test-jail"

// testWarm is set in the warm pass (warmpass_test.go): the Launchers the
// tests make have warm sandboxes for both languages, and a run that can take
// one must.
var testWarm = os.Getenv(warmPassEnv) == "1"

// TestMain makes the test binary able to serve as a run's init: the Launcher
// re-executes /proc/self/exe, which under go test is this binary. Once the
// tests have passed, it runs the warm pass (runWarmPass), unless it is the
// warm pass.
func TestMain(m *testing.M) {
	pid1.Main()
	// As brig's main does: a descriptor the test's parent left open (a
	// shell's, make's) reaches no sandbox or zygote, and its umask does not
	// decide what a run can read.
	ResetInherited()
	begin := time.Now()
	// Remove what an interrupted earlier run of these tests left, so that the leak
	// checks start from nothing.
	if os.Geteuid() == 0 {
		if cg, err := cgroup.New(cgroup.Config{Parent: testCgroupParent}); err == nil {
			cg.SweepIf(LeftoverOfDeadProcess) // not a concurrent test binary's
		}
		// The process's interpreter copies (copies.go) live as long as the
		// process: made before the leak checks count descriptors.
		processCopies()
	}
	code := m.Run()
	if os.Geteuid() == 0 {
		if err := testutil.RemoveCgroupParent(testCgroupParent); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	if code == 0 && !testWarm {
		code = runWarmPass(begin)
	}
	os.Exit(code)
}

// newTestLauncher returns a Launcher on the host rootfs with its own state
// directory, closed (and checked for leaks) when the test ends; opts change
// its Config.
func newTestLauncher(tb testing.TB, pool int, opts ...func(*Config)) *Launcher {
	tb.Helper()
	testutil.RequireRoot(tb)
	state := tb.TempDir()
	p, err := rootfs.NewHost(state, rootfs.HostConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	return newTestLauncherWith(tb, state, p, pool, opts...)
}

// newTestLauncherWith is newTestLauncher with a rootfs provider of the test's.
func newTestLauncherWith(tb testing.TB, state string, p rootfs.Provider, pool int, opts ...func(*Config)) *Launcher {
	tb.Helper()
	testutil.RequireRoot(tb)
	testutil.CheckLeaks(tb, testCgroupParent)
	cg, err := cgroup.New(cgroup.Config{Parent: testCgroupParent})
	if err != nil {
		tb.Fatal(err)
	}
	cfg := Config{StateDir: state, Rootfs: p, Cgroups: cg, PoolSize: pool, InterpreterCopies: true}
	if testWarm {
		cfg.Warm = map[rootfs.Language]bool{rootfs.Python: true, rootfs.JavaScript: true}
		cfg.PoolSize = max(pool, 1)
	}
	for _, o := range opts {
		o(&cfg)
	}
	l, err := NewLauncher(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}

// run runs code with the API's default limits unless spec says otherwise. On
// the warm pass, a run that can take a warm sandbox takes one (launch), or
// fails the test.
func run(tb testing.TB, l *Launcher, lang rootfs.Language, code string, opts ...func(*Spec)) *Result {
	tb.Helper()
	spec := Spec{Language: lang, Code: code, Timeout: 10 * time.Second, MemoryBytes: api.DefaultMemoryMiB << 20}
	for _, o := range opts {
		o(&spec)
	}
	res, err := launch(context.Background(), l, spec)
	if err != nil {
		tb.Fatalf("Run: %v", err)
	}
	if err := checkPath(l, spec, res); err != nil {
		tb.Error(err)
	}
	return res
}

func TestHelloBothLanguages(t *testing.T) {
	l := newTestLauncher(t, 0)
	for _, tc := range []struct {
		name string
		lang rootfs.Language
		code string
		want string
	}{
		{"python", rootfs.Python, "print('hello')", "hello\n"},
		{"javascript", rootfs.JavaScript, "console.log('hello')", "hello\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, l, tc.lang, tc.code)
			if !res.Succeeded() || res.Stdout != tc.want {
				t.Fatalf("got outcome %s stdout %q stderr %q message %q, want succeeded %q", res.End, res.Stdout, res.Stderr, res.Message, tc.want)
			}
		})
	}
}

var _ = filepath.Join

// rootOf is l's root for lang.
func rootOf(tb testing.TB, l *Launcher, lang rootfs.Language) *rootfs.Root {
	tb.Helper()
	root, err := l.cfg.Rootfs.Root(lang)
	if err != nil {
		tb.Fatal(err)
	}
	return root
}
