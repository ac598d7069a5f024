package jail

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/rootfs"
)

// The warm pass: the jail's escape and containment tests run against both
// start paths. `go test ./jail/` runs the package's tests as always (the cold
// pass: newTestLauncher makes cold sandboxes unless a test asks for warm
// ones), then, if they passed, TestMain re-executes the test binary with
// BRIG_TEST_WARM=1 and -test.run restricted to warmPassTests: the warm pass.
// In it, every Launcher the tests make has warm sandboxes for both languages
// (newTestLauncherWith), and every run that can take one waits for one and
// fails its test if it took another path (launch, checkPath): the warm path
// is exercised, and a silent fallback to a cold sandbox is caught.
//
// BRIG_TEST_WARM=1 go test -run '^TestPty$' ./jail/ runs a test of the warm
// pass alone. Without -run it would run every test of the package warm, and
// those of warm_test.go and zygote_test.go, which compare warm with cold,
// would fail.

// warmPassEnv names the variable that makes a test binary the warm pass.
const warmPassEnv = "BRIG_TEST_WARM"

// warmPassTests are the tests the warm pass runs: every test of
// warmPassFiles that runs a program, and TestHelloBothLanguages.
// TestWarmPassList checks that the list and the files agree.
var warmPassTests = []string{
	"TestHelloBothLanguages",
	// escape_test.go
	"TestNamespacesFromInside", "TestCapabilitiesFromInside", "TestFilesystemFromInside",
	"TestScriptPathJavaScript", "TestScratchIsFreshPerRun", "TestHostRootfsUnchanged",
	"TestIdentityFromInside", "TestInitNotInspectable", "TestEnvCannotOverrideBrig", "TestRunsCannotWatchSharedFiles",
	// userns_test.go
	"TestUserNamespaceIDs", "TestHostUserCannotReachRun", "TestRunsDoNotShareUIDCounters",
	"TestMountTableRevealsNoHostPath", "TestPty", "TestWhatProgramsExpect", "TestUsrShowsOnlyItsParts", "TestAttach", "TestMounts", "TestMountsByPath",
	// filter_run_test.go, seccomp_jail_test.go
	"TestFilterRulesInsideRun", "TestSeccompInsideRun", "TestSeccompJavaScript",
	// limits_test.go, oom_test.go
	"TestTimeoutKillsEverything", "TestMemoryLimit", "TestWritableSpaceFull", "TestOOMEndsWholeRun", "TestTCPBuffersCountAsMemory", "TestRunsAreTheOOMKillersFirstVictims",
	// process_test.go
	"TestForkAndThreadBombs", "TestBackgroundChildrenDoNotOutliveRun", "TestOrphansAreReaped",
	"TestProgramDiesOfItsOwnSignal", "TestKillEverythingFromInside", "TestProgramSignalDispositions", "TestSignalsToInit",
	// lifecycle_test.go
	"TestCloseWaitsForRunsAndRefusesNew", "TestProgramRunsAtNormalPriority", "TestProgramTimerSlack", "TestStopBeforeTheRunIsSent",
	// output_test.go
	"TestOutputCapsInRun", "TestInvalidUTF8InRun", "TestOnStdoutStreams", "TestOutcomesInRun",
	"TestOutputCapsDoNotBlock",
	// pool_test.go
	"TestPoolRunsAreFresh", "TestPoolRespectsEachRunsLimits",
}

// warmPassFiles hold the escape and containment tests (adversary_test.go
// holds their helpers).
var warmPassFiles = []string{
	"escape_test.go", "userns_test.go", "filter_run_test.go", "seccomp_jail_test.go",
	"limits_test.go", "oom_test.go", "adversary_test.go", "process_test.go",
	"lifecycle_test.go", "output_test.go", "pool_test.go",
}

// warmPassSkipped are the tests of warmPassFiles the warm pass leaves out,
// and why: none starts a program.
var warmPassSkipped = map[string]string{
	"TestRunRejectsInvalidEnv":        "Run refuses the spec before it takes a sandbox",
	"TestIDAllocator":                 "a unit test of the id allocator",
	"TestCheckIDRange":                "a unit test of brig check",
	"TestClassifyOOM":                 "a unit test of classify",
	"TestLeftoverOfDeadProcess":       "a unit test of a cgroup name",
	"TestOutputChunkings":             "a unit test of Output",
	"TestOutputWriteAfterCap":         "a unit test of Output",
	"TestDrainPacesATrickle":          "a unit test of Drain, on a pipe of its own",
	"TestTakeBuffered":                "a unit test of takeBuffered, on pipes of its own",
	"TestDrainKeepsUpWithABulkWriter": "a unit test of Drain, on a pipe of its own",
	"TestDrainDiscardsPastTheCap":     "a unit test of Drain's discard, on a pipe of its own",
	"TestOutputReplacesAsPython":      "a unit test of Output, against python3 on the host",
	"TestWarmWaitRounds":              "a unit test of waitPrepared, on a Launcher of channels alone",
	"TestWaitReadyGivesUp":            "a unit test of waitReady, on a slot of a sleep process",
	"TestCloneError":                  "a unit test of cloneError, on a clone of /bin/true",
	"TestSignalName":                  "a unit test of SignalName",
}

// warmPassBroken are tests of warmPassFiles that fail on the warm path
// because of a defect of the warm path itself, and why: the warm pass leaves
// them out until it is fixed. Remove an entry with its fix.
var warmPassBroken = map[string]string{}

// runWarmPass runs the warm pass as a child of this test binary, streaming
// its output, and returns its exit code. It does nothing (0) for a binary
// asked to list tests, run benchmarks or fuzz, or whose -test.run matches
// none of warmPassTests.
//
// The child gets this binary's arguments, with -test.run the intersection of
// the user's -test.run (if any) with warmPassTests: for each of the
// pattern's alternatives, its first element (the top-level test's) is
// replaced by the listed names it matches, and the rest (the subtests') kept.
// -test.skip passes through. -test.timeout is what is left of this binary's;
// the files a test binary writes once (the test log, which go test's cache
// reads, and the profiles) are this binary's alone.
func runWarmPass(begin time.Time) int {
	for _, f := range []string{"test.list", "test.bench", "test.fuzz"} {
		if v := flag.Lookup(f); v != nil && v.Value.String() != "" {
			return 0
		}
	}
	user := ""
	if v := flag.Lookup("test.run"); v != nil {
		user = v.Value.String()
	}
	pattern, ok := warmPassPattern(user, warmPassTests)
	if !ok {
		return 0
	}
	args := []string{"-test.run=" + pattern}
	if v := flag.Lookup("test.timeout"); v != nil {
		if d, err := time.ParseDuration(v.Value.String()); err == nil && d > 0 {
			args = append(args, "-test.timeout="+max(d-time.Since(begin), time.Second).String())
		}
	}
	dropped := map[string]bool{
		"test.run": true, "test.timeout": true, "test.testlogfile": true, "test.coverprofile": true,
		"test.cpuprofile": true, "test.memprofile": true, "test.blockprofile": true,
		"test.mutexprofile": true, "test.trace": true,
	}
	in := os.Args[1:]
	for i := 0; i < len(in); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(in[i], "-"), "=")
		if !strings.HasPrefix(in[i], "-") || !dropped[name] {
			args = append(args, in[i])
			continue
		}
		if !hasValue { // -test.run X: the value is the next argument
			i++
		}
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "warm pass:", err)
		return 1
	}
	fmt.Printf("jail: the warm pass: %s=1 -test.run=%s\n", warmPassEnv, pattern)
	cmd := exec.Command(exe, args...)
	cmd.Args[0] = os.Args[0]
	cmd.Env = append(os.Environ(), warmPassEnv+"=1")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	// Killed with this binary (go test kills it when it runs past its
	// timeout), from a thread that lives as long as it does.
	runtime.LockOSThread()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		if code := exit.ExitCode(); code > 0 {
			return code
		}
		fmt.Fprintln(os.Stderr, "warm pass:", err)
		return 1
	case err != nil:
		fmt.Fprintln(os.Stderr, "warm pass:", err)
		return 1
	}
	return 0
}

// warmPassPattern is the -test.run of the warm pass for the user's -test.run
// (see runWarmPass), and false when it would run no test. It splits the
// pattern as the testing package does: at '|' and '/' outside brackets and
// parentheses.
func warmPassPattern(user string, names []string) (string, bool) {
	if user == "" {
		return "^(" + strings.Join(names, "|") + ")$", true
	}
	var alts []string
	for _, alt := range splitOutside(user, '|') {
		first, rest, _ := strings.Cut(alt, "\x00")
		re, err := regexp.Compile(first)
		if err != nil {
			return "", false // the cold pass has said so already
		}
		var matched []string
		for _, n := range names {
			if re.MatchString(n) {
				matched = append(matched, n)
			}
		}
		if len(matched) == 0 {
			continue
		}
		p := "^(" + strings.Join(matched, "|") + ")$"
		if rest != "" {
			p += "/" + strings.ReplaceAll(rest, "\x00", "/")
		}
		alts = append(alts, p)
	}
	if len(alts) == 0 {
		return "", false
	}
	return strings.Join(alts, "|"), true
}

// splitOutside splits s at sep outside brackets and parentheses, and marks
// each of the parts' own '/' of the same kind with a NUL.
func splitOutside(s string, sep byte) []string {
	var parts []string
	var cur []byte
	brackets, parens := 0, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '[':
			brackets++
		case ']':
			brackets = max(brackets-1, 0) // an unmatched ']' is legal
		case '(':
			if brackets == 0 {
				parens++
			}
		case ')':
			if brackets == 0 {
				parens--
			}
		case '\\':
			if i+1 < len(s) {
				cur = append(cur, c)
				i++
				c = s[i]
			}
		case sep, '/':
			if brackets == 0 && parens == 0 {
				if c == sep {
					parts = append(parts, string(cur))
					cur = cur[:0]
					continue
				}
				c = 0
			}
		}
		cur = append(cur, c)
	}
	return append(parts, string(cur))
}

// TestWarmPassPattern: the warm pass runs the listed tests the user's
// -test.run matches, with the user's subtest patterns.
func TestWarmPassPattern(t *testing.T) {
	names := []string{"TestAlpha", "TestBeta", "TestGamma"}
	for _, tc := range []struct {
		user, want string
		ok         bool
	}{
		{"", "^(TestAlpha|TestBeta|TestGamma)$", true},
		{"Alpha", "^(TestAlpha)$", true},
		{"TestDelta", "", false},
		{"(ha|ma)$", "^(TestAlpha|TestGamma)$", true},
		{"TestBeta/sub/x", "^(TestBeta)$/sub/x", true},
		{"TestAlpha/a|TestDelta|Gamma", "^(TestAlpha)$/a|^(TestGamma)$", true},
		{"Test(Alpha|Beta)/[a/b]", "^(TestAlpha|TestBeta)$/[a/b]", true},
		{`Test\|x`, "", false},
	} {
		got, ok := warmPassPattern(tc.user, names)
		if got != tc.want || ok != tc.ok {
			t.Errorf("warmPassPattern(%q) = %q, %v; want %q, %v", tc.user, got, ok, tc.want, tc.ok)
		}
	}
}

// TestWarmPassList: each test of warmPassFiles is in warmPassTests,
// warmPassSkipped or warmPassBroken, and each listed test exists.
func TestWarmPassList(t *testing.T) {
	fset := token.NewFileSet()
	all := map[string]string{} // test name: its file
	files, err := filepath.Glob("*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("the package's test files: %v %v", files, err)
	}
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") && fn.Name.Name != "TestMain" {
				all[fn.Name.Name] = name
			}
		}
	}
	listed := map[string]bool{}
	for _, n := range warmPassTests {
		if all[n] == "" {
			t.Errorf("warmPassTests has %s, which no test file has", n)
		}
		if listed[n] {
			t.Errorf("warmPassTests has %s twice", n)
		}
		listed[n] = true
	}
	for _, left := range []map[string]string{warmPassSkipped, warmPassBroken} {
		for _, n := range slices.Sorted(maps.Keys(left)) {
			if all[n] == "" || listed[n] {
				t.Errorf("%s is left out of the warm pass, but is in warmPassTests or no test file", n)
			}
		}
	}
	for n, file := range all {
		if slices.Contains(warmPassFiles, file) && !listed[n] && warmPassSkipped[n] == "" && warmPassBroken[n] == "" {
			t.Errorf("%s (%s) is in none of warmPassTests, warmPassSkipped and warmPassBroken", n, file)
		}
	}
}

// warmTakes holds a mutex per Launcher: on the warm pass, a run waits for a
// warm sandbox and takes it holding its Launcher's, so that concurrent runs
// each find one (and still overlap once started).
var warmTakes sync.Map // *Launcher: *sync.Mutex

// wantsWarm reports whether, on the warm pass, spec's run on l must take a
// warm sandbox: l has them for its language, and the run is one that can
// (warmFor's conditions).
func wantsWarm(l *Launcher, spec Spec) bool {
	if !testWarm || !l.cfg.Warm[spec.Language] || l.cfg.PoolSize == 0 {
		return false
	}
	env := maps.Clone(spec.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, spec.BrigEnv)
	ok, _ := WarmEligible(spec.Language, env)
	return ok && !(spec.Language == rootfs.JavaScript && spec.Attach != nil)
}

// launch is l.Run as the tests call it. On the warm pass, a run that can take
// a warm sandbox (wantsWarm) first waits until one waits for it; checkPath
// then says whether it took it. It returns errors, never fails a test, and
// so serves any goroutine.
func launch(ctx context.Context, l *Launcher, spec Spec) (*Result, error) {
	if !wantsWarm(l, spec) {
		return l.Run(ctx, spec)
	}
	m, _ := warmTakes.LoadOrStore(l, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	var once sync.Once
	unlock := func() { once.Do(mu.Unlock) }
	defer unlock()
	root, err := l.cfg.Rootfs.Root(spec.Language)
	if err != nil {
		return nil, err
	}
	if err := waitFor(l.pools[poolKey(root, spec.Language)]); err != nil {
		return nil, fmt.Errorf("the warm pass: the %s warm pool: %w", spec.Language, err)
	}
	// The sandbox is taken once the program has started: the next run may
	// wait for one.
	onStart := spec.OnStart
	spec.OnStart = func(at time.Time) {
		unlock()
		if onStart != nil {
			onStart(at)
		}
	}
	return l.Run(ctx, spec)
}

// checkPath says, on the warm pass, when a run that should have taken a warm
// sandbox (wantsWarm) took another path.
func checkPath(l *Launcher, spec Spec, res *Result) error {
	if res == nil || !wantsWarm(l, spec) || res.Start == StartWarm {
		return nil
	}
	return fmt.Errorf("the warm pass: a %s run took the %q path, want %q", spec.Language, res.Start, StartWarm)
}
