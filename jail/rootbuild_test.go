package jail

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/jail/pid1"
	"github.com/brig-sandbox/brig/jail/reaper"
	"github.com/brig-sandbox/brig/rootfs"
	"github.com/brig-sandbox/brig/seccomp/bpf"
)

// pid1Probe prints, from inside a run, what the run can see of its pid 1.
// It looks at once: pid 1 is hardened before the program's first instruction.
const pid1Probe = `import os
fields = dict(l.split(':', 1) for l in open('/proc/1/status').read().splitlines())
for k in ('Name', 'Uid', 'Gid', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp'):
    print(k, fields[k].split()[0] if k not in ('Uid', 'Gid') else ' '.join(fields[k].split()))
for path in ('/proc/1/fd', '/proc/1/root', '/proc/1/cwd', '/proc/1/environ'):
    try:
        os.listdir(path) if path.endswith('fd') or path.endswith('root') else open(path).read()
        print(path, 'readable')
    except OSError as e:
        print(path, type(e).__name__)
print('ns', os.readlink('/proc/self/ns/mnt') == os.readlink('/proc/1/ns/mnt') if os.access('/proc/1/ns/mnt', os.R_OK) else 'hidden')
`

// warmPythonLauncher is a Launcher whose Python runs take a zygote's
// sandbox, with opts applied after.
func warmPythonLauncher(tb testing.TB, opts ...func(*Config)) *Launcher {
	tb.Helper()
	return newTestLauncher(tb, 1, append([]func(*Config){func(c *Config) {
		c.Warm = map[rootfs.Language]bool{rootfs.Python: true}
	}}, opts...)...)
}

// checkHardenedPID1 checks what a run saw of its pid 1 (pid1Probe): an
// unprivileged id that is not the program's, every capability set empty,
// no_new_privs, a filter, and nothing of it readable.
func checkHardenedPID1(t *testing.T, res *Result, name, start string) {
	t.Helper()
	if res.End != EndCompleted || res.Start != start {
		t.Fatalf("run: %s (%s, start %s), stderr %q", res.End, res.Message, res.Start, res.Stderr)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		k, v, _ := strings.Cut(line, " ")
		got[k] = v
	}
	want := map[string]string{
		"Name": name, "CapInh": "0000000000000000", "CapPrm": "0000000000000000",
		"CapEff": "0000000000000000", "CapBnd": "0000000000000000", "CapAmb": "0000000000000000",
		"NoNewPrivs": "1", "Seccomp": "2",
		"/proc/1/fd": "PermissionError", "/proc/1/root": "PermissionError",
		"/proc/1/cwd": "PermissionError", "/proc/1/environ": "PermissionError",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("pid 1's %s: got %q, want %q (all: %q)", k, got[k], v, res.Stdout)
		}
	}
	// The program's namespace maps two host ids: the init's to 0 and the
	// program's own to 1000. Pid 1 is the init's.
	for _, k := range []string{"Uid", "Gid"} {
		if got[k] != "0 0 0 0" {
			t.Errorf("pid 1's %s: %q, want the init's host id, which the program sees as 0", k, got[k])
		}
	}
}

// TestReaperIsHardenedPID1: a zygote's sandbox's pid 1 is the reaper, and
// the program finds it as unprivileged and as closed to it as a Go init.
func TestReaperIsHardenedPID1(t *testing.T) {
	l := warmPythonLauncher(t)
	if l.reaper == nil {
		t.Fatal("the reaper is off")
	}
	waitWarm(t, l)
	checkHardenedPID1(t, run(t, l, rootfs.Python, pid1Probe), "brig-reaper", StartWarm)
	// And from the host: the init's own host ids, not root's.
	waitWarm(t, l)
	s := <-l.pools[poolKey(rootOf(t, l, rootfs.Python), rootfs.Python)]
	defer s.discard()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("Uid:\t%[1]d\t%[1]d\t%[1]d\t%[1]d\n", s.ids.InitUID),
		fmt.Sprintf("Gid:\t%[1]d\t%[1]d\t%[1]d\t%[1]d\n", s.ids.InitGID),
		"Threads:\t1\n",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the reaper's status has no %q:\n%s", want, b)
		}
	}
	// Its descriptors are the status pipe and its scratch tmpfs's context,
	// which a Go init keeps too.
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.cmd.Process.Pid))
	if err != nil || len(fds) != 2 || fds[0].Name() != strconv.Itoa(reaper.StatusFD) || fds[1].Name() != strconv.Itoa(reaper.ScratchFD) {
		t.Fatalf("the reaper's descriptors: %v (%v), want %d and %d", fds, err, reaper.StatusFD, reaper.ScratchFD)
	}
	if ctx, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", s.cmd.Process.Pid, reaper.ScratchFD)); err != nil || ctx != "anon_inode:[fscontext]" {
		t.Errorf("the reaper's descriptor %d: %q (%v), want its scratch tmpfs's context", reaper.ScratchFD, ctx, err)
	}
}

// TestReaperBuildsTheSameRoot: the root a reaper builds (its C build_root) is
// the one a Go init builds (pid1's rootSteps): the same mounts in the same
// order, with the same sources, options and filesystems, the same /dev, the
// same owner of /sandbox and the same hostname, and the same scratch size,
// which the run's memory limit resizes through the kept context in both.
func TestReaperBuildsTheSameRoot(t *testing.T) {
	const probe = `import os
for line in open('/proc/self/mountinfo'):
    f = line.split()
    sep = f.index('-')
    # root, mount point, options, optional fields; the filesystem, source, super options
    print(' '.join(f[3:6] + f[6:sep] + f[sep + 1:]))
for n in sorted(os.listdir('/dev')):
    st = os.lstat('/dev/' + n)
    print('dev', n, oct(st.st_mode), st.st_rdev, os.readlink('/dev/' + n) if os.path.islink('/dev/' + n) else '')
st = os.stat('/sandbox')
print('sandbox', st.st_uid, st.st_gid, oct(st.st_mode), os.uname().nodename)
v = os.statvfs('/tmp')
print('scratch', v.f_blocks * v.f_frsize)
`
	tables := map[bool]string{}
	for goInit, pid1Name := range map[bool]string{true: "exe", false: "brig-reaper"} {
		programReaperOff = goInit // read at each clone
		l := newTestLauncher(t, 0, func(c *Config) { c.Warm = nil })
		res := run(t, l, rootfs.Python, probe+"print('pid 1', open('/proc/1/comm').read().strip())\n",
			func(s *Spec) { s.MemoryBytes = 256 << 20 })
		programReaperOff = false
		if !res.Succeeded() {
			t.Fatalf("go init %v: %s (%s) %s", goInit, res.End, res.Message, res.Stderr)
		}
		// The pid 1 differs, and nothing else.
		table, ok := strings.CutSuffix(res.Stdout, "pid 1 "+pid1Name+"\n")
		if !ok {
			t.Fatalf("go init %v: pid 1 is not %s:\n%s", goInit, pid1Name, res.Stdout)
		}
		tables[goInit] = table
	}
	if tables[true] != tables[false] {
		t.Errorf("the roots differ:\n%s", lineDiff(tables[true], tables[false]))
	}
	if _, err := processCopies(); err == nil && !strings.Contains(tables[false], " /usr/bin/python3.11 ro,nosuid,nodev,") {
		t.Errorf("no interpreter copy bound over /usr/bin/python3.11 to compare:\n%s", tables[false])
	}
	if !strings.Contains(tables[false], "scratch 134217728\n") {
		t.Errorf("the scratch tmpfs is not half of the run's 256 MiB:\n%s", tables[false])
	}
}

// lineDiff lists the lines of a (-) and b (+) that the other lacks.
func lineDiff(a, b string) string {
	var out []string
	as, bs := strings.Split(a, "\n"), strings.Split(b, "\n")
	for _, l := range as {
		if !slices.Contains(bs, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range bs {
		if !slices.Contains(as, l) {
			out = append(out, "+ "+l)
		}
	}
	if len(out) == 0 {
		return "(the same lines, in another order)"
	}
	return strings.Join(out, "\n")
}

// TestZygoteSandboxWithGoInit: where the reaper is off, a zygote's sandbox
// has a Go init, as hardened.
func TestZygoteSandboxWithGoInit(t *testing.T) {
	reaperOff = true
	l := warmPythonLauncher(t)
	reaperOff = false
	if l.reaper != nil {
		t.Fatal("reaperOff did not turn the reaper off")
	}
	waitWarm(t, l)
	res := run(t, l, rootfs.Python, pid1Probe)
	// The Go init re-executes this test binary, whose name the kernel
	// took from /proc/self/exe.
	checkHardenedPID1(t, res, "exe", StartWarm)
	waitWarm(t, l) // the pool's next sandbox, its init's too
	if res := run(t, l, rootfs.Python, "import os\nos.makedirs('/tmp/a/b')\nprint(open('/etc/hostname').read().strip() if os.path.exists('/etc/hostname') else os.uname().nodename)"); res.End != EndCompleted || res.Start != StartWarm {
		t.Errorf("second run: %s (%s), start %s", res.End, res.Message, res.Start)
	}
}

// TestColdReaperStartsTheProgram: a cold sandbox's pid 1 is the reaper, which
// started the program as the Go init does (the program's parent is pid 1)
// and then made itself as unprivileged and as closed to it as in a zygote's
// sandbox.
func TestColdReaperStartsTheProgram(t *testing.T) {
	l := newTestLauncher(t, 1, func(c *Config) { c.Warm = nil })
	if l.reaper == nil {
		t.Fatal("the reaper is off")
	}
	res := run(t, l, rootfs.Python, pid1Probe+"print('ppid', os.getppid())\n")
	checkHardenedPID1(t, res, "brig-reaper", StartCold)
	if !strings.Contains(res.Stdout, "ppid 1\n") {
		t.Errorf("the program's parent: got %q, want pid 1", res.Stdout)
	}
}

// TestColdProgramNeverSeesPID1Privileged: a cold program's first instruction
// runs after its pid 1 has dropped its identity and capabilities, with the
// reaper and with the Go init. Pid 1 is the program's parent, which writes
// the program's id maps with its privileges; the program's process then waits
// to exec until pid 1 has hardened itself. When pid 1 hardened after the exec
// instead, dash's first read of /proc/1/status, on one CPU beside a spinning
// thread, saw it still host root with every capability in 12 of 100 runs with
// the reaper and 42 of 100 with the Go init.
func TestColdProgramNeverSeesPID1Privileged(t *testing.T) {
	if _, err := os.Stat("/usr/bin/dash"); err != nil {
		t.Skip("no /usr/bin/dash on this host:", err)
	}
	// On one CPU, beside a spinning thread, where pid 1 waits its turn
	// longer once its program has started.
	withBothInits(t, "/usr/bin/dash", 1, pinToOneCPU, func(t *testing.T, l *Launcher) {
		const probe = "while read -r k v rest; do case $k in Uid:|CapEff:) echo $k $v;; esac; done </proc/1/status\n"
		const runs = 50
		seen := 0
		for range runs {
			res := run(t, l, rootfs.Python, probe)
			if res.End != EndCompleted {
				t.Fatalf("run: %s (%s), stderr %q", res.End, res.Message, res.Stderr)
			}
			if res.Stdout != "Uid: 0\nCapEff: 0000000000000000\n" {
				seen++
				t.Logf("pid 1 as the program saw it first: %q", res.Stdout)
			}
		}
		if seen > 0 {
			t.Errorf("%d of %d programs saw their pid 1 privileged", seen, runs)
		}
	})
}

// withBothInits runs body on a cold launcher of a pool of pool, whose host
// rootfs has interpreter as every language's, once with the reaper starting
// the program and once with the Go init; setup, when set, comes before the
// launcher.
func withBothInits(t *testing.T, interpreter string, pool int, setup func(*testing.T), body func(*testing.T, *Launcher)) {
	for _, goInit := range []bool{false, true} {
		t.Run(fmt.Sprintf("go init %v", goInit), func(t *testing.T) {
			programReaperOff = goInit
			// A cleanup registered before the launcher's, so that it runs
			// after the launcher's Close, whose pool refills read it (the
			// race detector's find, with a defer).
			t.Cleanup(func() { programReaperOff = false })
			state := t.TempDir()
			p, err := rootfs.NewHost(state, rootfs.HostConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if setup != nil {
				setup(t)
			}
			body(t, newTestLauncherWith(t, state, otherInterpreter{p, interpreter}, pool, func(c *Config) { c.Warm = nil }))
		})
	}
}

// pinToOneCPU puts every thread of this process, and so every process it
// starts from now on, on the CPU it runs on, with a thread that spins there,
// until the test ends.
func pinToOneCPU(t *testing.T) {
	var all, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	var here uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&here)), 0, 0); e != 0 {
		t.Fatal(e)
	}
	one.Set(int(here))
	setAll := func(set *unix.CPUSet) {
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, task := range tasks {
			if tid, err := strconv.Atoi(task.Name()); err == nil {
				unix.SchedSetaffinity(tid, set)
			}
		}
	}
	setAll(&one)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for {
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		setAll(&all)
	})
}

// TestWarmJavaScriptReaper: a warm JavaScript sandbox's reaper started its
// node before the run, at the pool's nice value, handed it the run's
// environment (however large its JSON) at nice 0, and is pid 1 as hardened as
// in a cold sandbox.
func TestWarmJavaScriptReaper(t *testing.T) {
	l := newTestLauncher(t, 1, func(c *Config) { c.Warm = map[rootfs.Language]bool{rootfs.JavaScript: true} })
	if l.reaper == nil {
		t.Fatal("the reaper is off")
	}
	waitWarm(t, l)
	key := poolKey(rootOf(t, l, rootfs.JavaScript), rootfs.JavaScript)
	s := <-l.pools[key]
	l.rooms[key] <- struct{}{} // as took does: the filler makes the next
	nice := func(pid int) string {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		return f[16] // stat's 19th field
	}
	if got := nice(s.childPID); got != strconv.Itoa(prepareNice) {
		t.Errorf("a pooled node's nice value: got %s, want the pool's %d", got, prepareNice)
	}
	s.discard()
	waitWarm(t, l)
	// Each '<' is 6 bytes of the handover's JSON: 15 variables of 131,000,
	// as large as ValidateEnv lets them be, are 11.8 MB of it.
	env := map[string]string{}
	for i := range 15 {
		env[fmt.Sprintf("X%02d", i)] = strings.Repeat("<", 131_000)
	}
	big := run(t, l, rootfs.JavaScript, `console.log(Object.keys(process.env).filter(k => k.startsWith('X')).reduce((n, k) => n + process.env[k].length, 0), require('os').getPriority())`,
		func(s *Spec) { s.Env = env })
	if big.End != EndCompleted || big.Start != StartWarm || big.Stdout != "1965000 0\n" {
		t.Fatalf("a large environment: %s (%s, start %s), stdout %q; want 1965000 at nice 0", big.End, big.Message, big.Start, big.Stdout)
	}
	waitWarm(t, l)
	res := run(t, l, rootfs.JavaScript, `const fs = require('fs');
const f = Object.fromEntries(fs.readFileSync('/proc/1/status', 'utf8').trim().split('\n').map(l => l.split(':\t')));
let fd; try { fs.readdirSync('/proc/1/fd'); fd = 'readable'; } catch (e) { fd = e.code; }
console.log(f.Name, f.CapEff, f.CapBnd, f.NoNewPrivs, f.Seccomp, fd, process.ppid, process.env.K, require.main === module);`,
		func(s *Spec) { s.Env = map[string]string{"K": "v"} })
	if res.End != EndCompleted || res.Start != StartWarm {
		t.Fatalf("run: %s (%s, start %s), stderr %q", res.End, res.Message, res.Start, res.Stderr)
	}
	if want := "brig-reaper 0000000000000000 0000000000000000 1 2 EACCES 1 v true\n"; res.Stdout != want {
		t.Errorf("got %q, want %q", res.Stdout, want)
	}
}

// TestColdGoInit: with the reaper's program start off, a cold sandbox's Go
// init starts the program (pid1's spawnInUserNS), as hardened, and a warm
// JavaScript sandbox's its node (startWarm).
func TestColdGoInit(t *testing.T) {
	programReaperOff = true
	t.Cleanup(func() { programReaperOff = false }) // after the launchers' Close, as in withBothInits
	l := newTestLauncher(t, 1, func(c *Config) { c.Warm = nil })
	res := run(t, l, rootfs.Python, pid1Probe+"print('ppid', os.getppid())\n")
	checkHardenedPID1(t, res, "exe", StartCold)
	if !strings.Contains(res.Stdout, "ppid 1\n") {
		t.Errorf("the program's parent: got %q, want pid 1", res.Stdout)
	}
	// Closed first: its pool's refill, spawned after the next launcher's leak
	// check has counted the children, read as that launcher's leak (CI, under
	// load: "test leaked: child processes 18495").
	l.Close()
	// And a warm JavaScript sandbox's, which starts node before the run.
	js := newTestLauncher(t, 1, func(c *Config) { c.Warm = map[rootfs.Language]bool{rootfs.JavaScript: true} })
	waitWarm(t, js)
	// Its node preloads its bootstrap from its stdin, as a reaper's does
	// (nodeBoot): the program then runs from node's own start, with
	// /dev/null as its stdin.
	res = run(t, js, rootfs.JavaScript, `const fs = require('fs')
console.log(fs.readFileSync('/proc/1/status', 'utf8').split('\n')[0], process.ppid, fs.readlinkSync('/proc/self/fd/0'), new Error().stack.split('\n').pop().includes('run_main_module'))`)
	if res.End != EndCompleted || res.Start != StartWarm || res.Stdout != "Name:\texe 1 /dev/null true\n" {
		t.Errorf("warm JavaScript: %s (%s, start %s), stdout %q; want the Go init (exe) as pid 1, node's own start", res.End, res.Message, res.Start, res.Stdout)
	}
}

// TestReaperBinary builds brig-reaper as make does (a static executable
// without a C library) and runs a zygote's sandbox with it.
func TestReaperBinary(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, ReaperBinary)
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	// The Makefile's flags, read from it, so that the test builds what make does.
	mk, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var flags []string
	for _, line := range strings.Split(string(mk), "\n") {
		if v, ok := strings.CutPrefix(line, "REAPER_CFLAGS := "); ok {
			flags = strings.Fields(v)
		}
	}
	if len(flags) == 0 {
		t.Fatal("the Makefile has no REAPER_CFLAGS line")
	}
	args := append(flags, "-DREAPER_STANDALONE", `-DREAPER_STAMP="test-stamp"`, "-o", bin, filepath.Join("reaper", "reaper.c"))
	cmd := exec.Command(cc, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the reaper as the Makefile does: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, pid1.StampArg).Output()
	if err != nil || strings.TrimSpace(string(out)) != "test-stamp" {
		t.Fatalf("%s %s: %q, %v; want its build stamp", bin, pid1.StampArg, out, err)
	}
	// Not pid 1, or any other argument: it refuses, and says why.
	if out, err := exec.Command(bin, "reaper").CombinedOutput(); err == nil || !strings.Contains(string(out), "not run by hand") {
		t.Errorf("run by hand: %q, %v; want a refusal", out, err)
	}
	l := warmPythonLauncher(t, func(c *Config) { c.ReaperPath = bin })
	if l.reaper == nil {
		t.Fatal("the reaper is off")
	}
	waitWarm(t, l)
	checkHardenedPID1(t, run(t, l, rootfs.Python, pid1Probe), "brig-reaper", StartWarm)
}

// TestReaperReportsItsFailure: a reaper that can't harden itself says at
// which step, as an init does, and the sandbox is not used.
func TestReaperReportsItsFailure(t *testing.T) {
	l := newTestLauncher(t, 0, func(c *Config) { c.Warm = map[rootfs.Language]bool{rootfs.Python: true} })
	if l.reaper == nil {
		t.Fatal("the reaper is off")
	}
	// A jump past the program's end: the kernel refuses the filter.
	broken := *l.reaper
	broken.Filter = bpf.Program{{Code: unix.BPF_JMP | unix.BPF_JA, K: 5}}
	l.reaper = &broken
	s, err := l.prepare(rootOf(t, l, rootfs.Python), rootfs.Python)
	if err == nil {
		s.discard()
		t.Fatal("a reaper with a filter the kernel refuses prepared a sandbox")
	}
	if !strings.Contains(err.Error(), `"init seccomp"`) || !strings.Contains(err.Error(), "errno 22 (invalid argument)") {
		t.Errorf("got %v, want the step and errno (EINVAL)", err)
	}
}

// otherInterpreter is the host rootfs with path as every language's
// interpreter: one that is not there, or dash, a program that starts in well
// under a millisecond (so that it looks at its pid 1 long before a Python
// program could).
type otherInterpreter struct {
	rootfs.Provider
	path string
}

func (m otherInterpreter) Root(lang rootfs.Language) (*rootfs.Root, error) {
	r, err := m.Provider.Root(lang)
	if err != nil {
		return nil, err
	}
	c := *r
	c.Interpreter = m.path
	return &c, nil
}

// TestColdStartFailureIsReported: a program the reaper can't exec ends the
// run as brig's failure, naming the step and the error, as the Go init's do.
func TestColdStartFailureIsReported(t *testing.T) {
	withBothInits(t, "/usr/bin/no-such-interpreter", 0, nil, func(t *testing.T, l *Launcher) {
		res, err := l.Run(context.Background(), Spec{Language: rootfs.Python, Code: "print(1)", Timeout: 10 * time.Second, MemoryBytes: api.DefaultMemoryMiB << 20})
		if err != nil {
			t.Fatal(err)
		}
		if res.End != EndInternal || !strings.Contains(res.Message, "execve") || !strings.Contains(res.Message, "no such file or directory") {
			t.Fatalf("got %s: %q, want an internal failure naming execve and its error", res.End, res.Message)
		}
	})
}

// TestWarmNodeDiedInPool: a warm JavaScript sandbox whose node died while it
// waited in the pool is passed over, as a zygote's child that died is: the run
// takes another sandbox instead of failing.
func TestWarmNodeDiedInPool(t *testing.T) {
	l := newTestLauncher(t, 1, func(c *Config) { c.Warm = map[rootfs.Language]bool{rootfs.JavaScript: true} })
	waitWarm(t, l)
	pool := l.pools[poolKey(rootOf(t, l, rootfs.JavaScript), rootfs.JavaScript)]
	s := <-pool
	node := s.childPID
	pool <- s
	if err := unix.Kill(node, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !exited(node); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the pooled node %d had not exited 10 s after SIGKILL", node)
		}
	}
	res := run(t, l, rootfs.JavaScript, `console.log('ok')`)
	if res.End != EndCompleted || res.Stdout != "ok\n" {
		t.Fatalf("got %s (%s, start %s), stdout %q; want the run done in another sandbox", res.End, res.Message, res.Start, res.Stdout)
	}
}

// TestReaperBackstop: past a run's limit and a margin, its sandbox's reaper
// ends the sandbox by itself, on each path a reaper is pid 1 of (a zygote's
// child, a cold program, a warm node): the bound of a run's time while the
// supervisor is stopped (reaper.ArmBackstop). Here the margin is made
// negative so that the backstop comes 1 s in, long before the supervisor's
// own deadline, which would have ended the run as a timeout: the run ends
// with its init instead, the program killed. The service's test (cmd/brig's
// TestStoppedServiceBackstop) stops a real service.
func TestReaperBackstop(t *testing.T) {
	defer func(m time.Duration) { backstopMargin = m }(backstopMargin)
	const timeout = 60 * time.Second
	backstopMargin = time.Second - timeout
	for _, tc := range []struct {
		name  string
		warm  rootfs.Language
		lang  rootfs.Language
		code  string
		start string
	}{
		{"zygote", rootfs.Python, rootfs.Python, "import time\nprint('up', flush=True)\ntime.sleep(600)", StartWarm},
		{"cold", "", rootfs.Python, "import time\nprint('up', flush=True)\ntime.sleep(600)", StartCold},
		{"warm node", rootfs.JavaScript, rootfs.JavaScript, "console.log('up'); setTimeout(() => {}, 600000)", StartWarm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newTestLauncher(t, 1, func(c *Config) {
				c.Warm = nil
				if tc.warm != "" {
					c.Warm = map[rootfs.Language]bool{tc.warm: true}
				}
			})
			if l.reaper == nil {
				t.Fatal("the reaper is off")
			}
			if tc.warm != "" {
				waitWarm(t, l)
			}
			begin := time.Now()
			res := run(t, l, tc.lang, tc.code, func(s *Spec) { s.Timeout = timeout })
			took := time.Since(begin)
			// Which the launcher hears of first, the init's end or the
			// program's SIGKILL, is a race.
			ended := res.End == EndInternal || res.End == EndError && res.Signal == "SIGKILL"
			if res.Start != tc.start || res.Stdout != "up\n" || !ended {
				t.Errorf("got %s (%s), start %s, stdout %q; want the program started %s, then killed with its sandbox's init", res.End, res.Message, res.Start, res.Stdout, tc.start)
			}
			if took < time.Second || took > 8*time.Second {
				t.Errorf("the run took %v; want its backstop's 1 s and little more", took)
			}
		})
	}
}

// TestCloneFailureIsAnError: a sandbox that can't be made (here the
// descriptors run out, as an audit's 20,000 idle connections made them)
// fails its run `internal`, and the service goes on: the slot half made is
// discarded. (Up to 2026-12-05 the discard was of a nil slot, and the
// service died of the panic.)
func TestCloneFailureIsAnError(t *testing.T) {
	l := newTestLauncher(t, 0)
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	// Room for the cgroup's files, not for the sandbox's pipes.
	low := old
	low.Cur = uint64(len(fds) + 2)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	res, err := l.Run(context.Background(), Spec{Language: rootfs.Python, Code: "print(1)", Timeout: 10 * time.Second, MemoryBytes: 256 << 20})
	unix.Setrlimit(unix.RLIMIT_NOFILE, &old)
	if err == nil && res.End != EndInternal {
		t.Errorf("with no descriptors left: got %s (%s), want internal or an error", res.End, res.Message)
	}
	if res := run(t, l, rootfs.Python, "print(2)"); res.End != EndCompleted || res.Stdout != "2\n" {
		t.Errorf("the next run: got %s (%s) %q, want completed", res.End, res.Message, res.Stdout)
	}
}
