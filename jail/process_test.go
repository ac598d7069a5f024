package jail

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/rootfs"
)

// timedRun runs code and returns the result and how long Run took.
func timedRun(tb testing.TB, l *Launcher, lang rootfs.Language, code string, opts ...func(*Spec)) (*Result, time.Duration) {
	tb.Helper()
	begin := time.Now()
	res := run(tb, l, lang, code, opts...)
	return res, time.Since(begin)
}

// assertNoRunCgroups fails tb unless every run cgroup of this process is gone
// within two seconds of Run returning (the Launcher may remove it in the
// background), but those of the sandboxes waiting in l's pools. A cgroup is
// only removed once empty, so none left means no process of the run survived.
//
// A pool's waiting sandboxes have run cgroups too (on the warm pass, every
// Launcher has pools): it first waits until each of l's pools is full, when
// none is preparing a sandbox (a pool prepares one only for a free place in
// it), and then wants no more run cgroups than the pools hold. The two
// seconds count from then.
func assertNoRunCgroups(tb testing.TB, l *Launcher) {
	tb.Helper()
	pooled := 0
	for _, pool := range l.pools {
		if err := waitFull(pool); err != nil {
			tb.Fatal(err)
		}
		pooled += cap(pool)
	}
	left := waitGone(2*time.Second, func() []string {
		paths := runCgroups(tb)
		names := map[string]bool{} // a group has a directory per hierarchy
		for _, p := range paths {
			names[filepath.Base(p)] = true
		}
		if len(names) > pooled {
			return paths
		}
		return nil
	})
	if len(left) > 0 {
		tb.Errorf("run cgroups 2s after Run: got %v, want none (but the %d of the sandboxes waiting in the pools)", left, pooled)
	}
}

// assertNoHostProcs fails tb unless no host process has marker in its command line
// within a second of Run returning (SIGKILLed processes take a moment to go).
func assertNoHostProcs(tb testing.TB, marker string) {
	tb.Helper()
	if left := waitGone(time.Second, func() []string { return hostProcsWith(marker) }); len(left) > 0 {
		tb.Errorf("processes 1s after Run: got %q, want none", left)
	}
}

// waitGone polls list until it is empty or d has passed, and returns its last value.
func waitGone(d time.Duration, list func() []string) []string {
	deadline := time.Now().Add(d)
	for {
		left := list()
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestForkAndThreadBombs: the pids limit stops a bomb, the run ends in bounded
// time and nothing of it survives; a run that reached the limit and then
// timed out says so (the limits probe: a fork bomb's end said only that the
// program ran too long).
func TestForkAndThreadBombs(t *testing.T) {
	l := newTestLauncher(t, 0)
	for _, tc := range []struct {
		name    string
		code    string
		timeout time.Duration
		// reasons the run may end with; the first for a program that stops itself.
		reasons []End
		// counted: the program prints how many it made before the limit refused one.
		counted bool
		// limitNamed: the run's message names the pids limit it reached.
		limitNamed bool
	}{
		{
			name: "fork until refused",
			code: `
import os, signal, errno
n = 0
while True:
    try:
        pid = os.fork()
    except OSError as e:
        print(n, errno.errorcode[e.errno])
        break
    if pid == 0:
        signal.pause()
        os._exit(0)
    n += 1
`,
			timeout: 20 * time.Second, reasons: []End{EndCompleted}, counted: true,
		},
		{
			name: "threads until refused",
			code: `
import threading, os
ev = threading.Event()
n = 0
while True:
    try:
        threading.Thread(target=ev.wait, daemon=True).start()
    except RuntimeError as e:
        print(n, 'EAGAIN')
        break
    n += 1
sys.stdout.flush()
os._exit(0)
`,
			timeout: 20 * time.Second, reasons: []End{EndCompleted}, counted: true,
		},
		{
			name: "threads until refused, then out of time",
			code: `
import threading
ev = threading.Event()
while True:
    try:
        threading.Thread(target=ev.wait, daemon=True).start()
    except RuntimeError:
        break
while True:
    pass
`,
			timeout: 5 * time.Second, reasons: []End{EndTimeout}, limitNamed: true,
		},
		{
			name: "fork bomb",
			code: `
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
`,
			timeout: 2 * time.Second, reasons: []End{EndTimeout, EndMemory},
		},
		{
			name: "thread bomb",
			code: `
import threading, time
def spin():
    while True:
        try:
            threading.Thread(target=spin, daemon=True).start()
        except RuntimeError:
            time.sleep(0.01)
spin()
`,
			timeout: 2 * time.Second, reasons: []End{EndTimeout, EndMemory},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code := tc.code
			if tc.counted {
				code = "import sys\n" + code
			}
			res, took := timedRun(t, l, rootfs.Python, code, withTimeout(tc.timeout))
			ok := false
			for _, r := range tc.reasons {
				ok = ok || res.End == r
			}
			if !ok {
				t.Errorf("reason: got %q (message %q, stderr %.300q), want one of %q", res.End, res.Message, res.Stderr, tc.reasons)
			}
			if limit := fmt.Sprintf("it had reached its limit of %d processes and threads (", DefaultPids); tc.limitNamed && !strings.Contains(res.Message, limit) {
				t.Errorf("got the message %q, want it to say %q", res.Message, limit)
			}
			if tc.counted {
				f := strings.Fields(res.Stdout)
				n := -1
				if len(f) == 2 {
					n, _ = strconv.Atoi(f[0])
				}
				// The program's own and those it made: the limit
				// GET /v1/limits gives, its sandbox's init not counted.
				if n != DefaultPids-1 || f[1] != "EAGAIN" {
					t.Errorf("made before refused: got %q, want %d and EAGAIN", res.Stdout, DefaultPids-1)
				}
			}
			if limit := tc.timeout + 3*time.Second; took > limit {
				t.Errorf("Run took %v, want under %v", took, limit)
			}
			assertNoRunCgroups(t, l)
		})
	}
}

// TestBackgroundChildrenDoNotOutliveRun: whatever the program leaves running ends
// with it, and does not keep the run going.
func TestBackgroundChildrenDoNotOutliveRun(t *testing.T) {
	l := newTestLauncher(t, 0)
	for _, tc := range []struct {
		name   string
		lang   rootfs.Language
		marker string // in the leftover's command line
		code   string
	}{
		{"new session", rootfs.Python, "1000.4242", `
import subprocess
subprocess.Popen(['/usr/bin/sleep', '1000.4242'], start_new_session=True)
print('started')
`},
		{"ignores SIGTERM and SIGHUP", rootfs.Python, "1000.4343", `
import subprocess, sys, time
subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); signal.signal(signal.SIGHUP, signal.SIG_IGN); print("child", flush=True); time.sleep(1000.4343)'], start_new_session=True)
time.sleep(0.3)
print('started')
`},
		{"double-forked daemon", rootfs.Python, "1000.4444", `
import os
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv('/usr/bin/sleep', ['sleep', '1000.4444'])
    os._exit(0)
os.wait()
print('started')
`},
		{"shell nohup", rootfs.Python, "1000.4545", `
import subprocess
subprocess.run(['/bin/sh', '-c', 'nohup /usr/bin/sleep 1000.4545 >/dev/null 2>&1 &'], check=True)
print('started')
`},
		{"node detached", rootfs.JavaScript, "1000.4646", `
require('child_process').spawn('/usr/bin/sleep', ['1000.4646'], {detached: true, stdio: 'inherit'}).unref();
console.log('started');
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, took := timedRun(t, l, tc.lang, tc.code)
			if !res.Succeeded() || !strings.HasSuffix(res.Stdout, "started\n") {
				t.Errorf("got outcome %s stdout %q stderr %q, want succeeded and started", res.End, res.Stdout, res.Stderr)
			}
			assertNoHostProcs(t, tc.marker)
			if res.Usage.WallMS > 1500 || took > 3*time.Second {
				t.Errorf("run took %d ms (Run %v), want it to end right after the program (under 1500 ms)", res.Usage.WallMS, took)
			}
			assertNoRunCgroups(t, l)
		})
	}
}

// TestOrphansAreReaped: children whose parent died are adopted and reaped by the
// init, not by the program and not left as zombies. Each orphan asks for its
// parent once the program has reaped that parent (the pipe's end), and the
// program waits for the init's reaping, so a loaded machine's slow exits are
// not taken for a missing adoption (a fixed 0.2 s wait saw a parent still alive
// in a fresh-clone CI run of 2026-12-06 beside three other test services).
func TestOrphansAreReaped(t *testing.T) {
	l := newTestLauncher(t, 0)
	got := probe(t, l, rootfs.Python, pyTrial+`
import time
for i in range(20):
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        if os.fork() == 0:
            os.close(wr)
            os.read(rd, 1)  # EOF: its parent is reaped
            write('/tmp/ppid-%d' % i, str(os.getppid()).encode())
            os._exit(0)
        os._exit(0)
    os.close(rd)
    os.waitpid(pid, 0)
    os.close(wr)
def listing():
    files = [f for f in os.listdir('/tmp') if f.startswith('ppid-')]
    pids, zombies = [], []
    for p in os.listdir('/proc'):
        if p.isdigit():
            try:
                s = open('/proc/%s/stat' % p).read()
            except OSError:
                continue
            pids.append(p)
            if s[s.rindex(')') + 2] == 'Z':
                zombies.append(p)
    return files, pids, zombies
deadline = time.monotonic() + 20
while True:
    files, pids, zombies = listing()
    if len(files) == 20 and not zombies and len(pids) == 2 or time.monotonic() > deadline:
        break
    time.sleep(0.01)
r['written'] = str(len(files))
r['orphan parents'] = ' '.join(sorted(set(open('/tmp/' + f).read() for f in files)))
r['zombies'] = ' '.join(zombies)
r['pids'] = str(len(pids))
`+pyDump)
	checkProbe(t, got, []check{
		{name: "every orphan ran", key: "written", want: "20"},
		{name: "adopted by the init", key: "orphan parents", want: "1"},
		{name: "no zombies", key: "zombies", want: ""},
		{name: "only init and program left", key: "pids", want: "2"},
	})
}

// TestProgramDiesOfItsOwnSignal: the program is not PID 1, so the signals it sends
// itself take their default action, and the result says which.
func TestProgramDiesOfItsOwnSignal(t *testing.T) {
	l := newTestLauncher(t, 0)
	for _, tc := range []struct {
		name   string
		lang   rootfs.Language
		code   string
		signal string
	}{
		{"SIGTERM", rootfs.Python, "import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(5)\nprint('survived')", "SIGTERM"},
		{"SIGKILL", rootfs.Python, "import os, signal, time\nos.kill(os.getpid(), signal.SIGKILL)\ntime.sleep(5)\nprint('survived')", "SIGKILL"},
		{"SIGUSR1", rootfs.Python, "import os, signal, time\nos.kill(os.getpid(), signal.SIGUSR1)\ntime.sleep(5)\nprint('survived')", "SIGUSR1"},
		{"SIGINT", rootfs.Python, "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(5)\nprint('survived')", "SIGINT"},
		{"abort", rootfs.Python, "import os\nos.abort()", "SIGABRT"},
		{"segfault", rootfs.Python, "import ctypes\nctypes.string_at(0)", "SIGSEGV"},
		{"javascript SIGTERM", rootfs.JavaScript, "process.kill(process.pid, 'SIGTERM'); setTimeout(() => console.log('survived'), 5000)", "SIGTERM"},
		// The real-time signals, which the C library does not name, by kill -l's names.
		{"SIGRTMIN+6", rootfs.Python, "import os, time\nos.kill(os.getpid(), 40)\ntime.sleep(5)\nprint('survived')", "SIGRTMIN+6"},
		{"SIG32", rootfs.Python, "import os, time\nos.kill(os.getpid(), 32)\ntime.sleep(5)\nprint('survived')", "SIG32"},
		{"javascript SIGRTMAX", rootfs.JavaScript, "process.kill(process.pid, 64); setTimeout(() => console.log('survived'), 5000)", "SIGRTMAX"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, l, tc.lang, tc.code)
			if res.Signal != tc.signal || res.End != EndError || res.ExitCode != nil {
				t.Errorf("got signal %q end %q exit code %v (stdout %q), want %s, error, no exit code", res.Signal, res.End, res.ExitCode, res.Stdout, tc.signal)
			}
			if want := "the program was killed by " + tc.signal; res.Message != want {
				t.Errorf("message: got %q, want %q", res.Message, want)
			}
			if res.Usage.WallMS > 3000 {
				t.Errorf("wall: got %d ms, want the signal to end it at once", res.Usage.WallMS)
			}
		})
	}
}

// TestSignalName: every signal a program can die of has a name, the one kill -l
// gives it, and SignalNumber reads it back.
func TestSignalName(t *testing.T) {
	for sig, want := range map[unix.Signal]string{
		unix.SIGHUP: "SIGHUP", unix.SIGKILL: "SIGKILL", unix.SIGSYS: "SIGSYS",
		32: "SIG32", 33: "SIG33", 34: "SIGRTMIN", 35: "SIGRTMIN+1", 49: "SIGRTMIN+15",
		50: "SIGRTMAX-14", 63: "SIGRTMAX-1", 64: "SIGRTMAX",
	} {
		if got := SignalName(sig); got != want {
			t.Errorf("SignalName(%d): got %q, want %q", sig, got, want)
		}
	}
	seen := map[string]bool{}
	for sig := unix.Signal(1); sig <= 64; sig++ {
		name := SignalName(sig)
		if seen[name] || SignalNumber(name) != sig {
			t.Errorf("SignalName(%d) = %q: twice, or read back as %d", sig, name, SignalNumber(name))
		}
		seen[name] = true
	}
	if n := SignalNumber("SIGNOTONE"); n != 0 {
		t.Errorf("SignalNumber(SIGNOTONE): got %d, want 0", n)
	}
}

// TestKillEverythingFromInside: kill(-1) and kill(0) reach only the run's own
// processes; the run reports whatever happened to the program.
func TestKillEverythingFromInside(t *testing.T) {
	l := newTestLauncher(t, 0)
	spawn := "import os, signal, subprocess, sys, time\nkids = [subprocess.Popen(['/usr/bin/sleep', '1000.5151']) for _ in range(3)]\ntime.sleep(0.1)\n"
	for _, tc := range []struct {
		name   string
		code   string
		stdout string
		signal string // "" for a program that survives and exits 0
	}{
		{"kill(-1, SIGKILL) spares the caller", spawn + "os.kill(-1, signal.SIGKILL)\nprint(*[k.wait() for k in kids])\n", "-9 -9 -9\n", ""},
		{"kill(-1, SIGTERM) spares the caller", spawn + "os.kill(-1, signal.SIGTERM)\nprint(*[k.wait() for k in kids])\n", "-15 -15 -15\n", ""},
		{"shell kill -9 -1 kills the program", spawn + "print('before', flush=True)\nsubprocess.run(['/bin/sh', '-c', 'kill -9 -1'])\ntime.sleep(5)\nprint('after')\n", "before\n", "SIGKILL"},
		{"kill(0, SIGKILL) kills the program's group", spawn + "print('before', flush=True)\nos.kill(0, signal.SIGKILL)\ntime.sleep(5)\n", "before\n", "SIGKILL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, took := timedRun(t, l, rootfs.Python, tc.code)
			if res.Stdout != tc.stdout {
				t.Errorf("stdout: got %q (stderr %q), want %q", res.Stdout, res.Stderr, tc.stdout)
			}
			if tc.signal == "" {
				if !res.Succeeded() {
					t.Errorf("got %s reason %s message %q, want succeeded", res.End, res.Step, res.Message)
				}
			} else if res.Signal != tc.signal || res.End != EndError {
				t.Errorf("got signal %q reason %q message %q, want %s and error", res.Signal, res.End, res.Message, tc.signal)
			}
			if took > 3*time.Second {
				t.Errorf("Run took %v, want under 3s", took)
			}
			assertNoHostProcs(t, "1000.5151")
		})
	}
}

// TestProgramSignalDispositions: the program starts with every signal at its
// default and none blocked, as under a bare interpreter, though its init
// ignores them all but two, and though the service was started with some
// ignored (nohup ignores SIGHUP, which a warm Python program, forked from a
// zygote, once inherited) or blocked (up to 2026-12-06 a warm Python program
// inherited the mask): the only ignored ones are those the interpreter ignores
// itself (SIGPIPE and SIGXFSZ for both). The blocked case is this test again in
// a test binary started with SIGUSR2 blocked, which a Go program can only be
// from its start (python3 blocks it and execs the binary; the Go runtime
// unblocks the signals it handles, such as SIGHUP), with its own warm pass.
func TestProgramSignalDispositions(t *testing.T) {
	const blockedEnv = "BRIG_TEST_STARTED_BLOCKED"
	if os.Getenv(blockedEnv) == "" && !testWarm {
		t.Run("started blocked", func(t *testing.T) {
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("/usr/bin/python3", "-c", `import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
os.execv(sys.argv[1], sys.argv[1:])`, exe, "-test.run=^TestProgramSignalDispositions$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), blockedEnv+"=1")
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "SigBlk:\t0000000000000800") {
				t.Fatalf("the test started with SIGUSR2 blocked: %v (want it to pass, and to have seen it blocked)\n%s", err, out)
			}
		})
	}
	if os.Getenv(blockedEnv) != "" {
		status, _ := os.ReadFile("/proc/self/status")
		t.Logf("this test binary's mask: %s", regexp.MustCompile(`SigBlk:\t\w+`).Find(status))
	}
	signal.Ignore(unix.SIGHUP, unix.SIGUSR1)
	defer signal.Reset(unix.SIGHUP, unix.SIGUSR1)
	l := newTestLauncher(t, 0)
	for _, tc := range []struct {
		lang rootfs.Language
		code string
	}{
		{rootfs.Python, "print(''.join(l for l in open('/proc/self/status') if l.startswith(('SigIgn', 'SigBlk'))), end='')"},
		{rootfs.JavaScript, "process.stdout.write(require('fs').readFileSync('/proc/self/status', 'utf8').split('\\n').filter(l => /^Sig(Ign|Blk)/.test(l)).map(l => l + '\\n').join(''))"},
	} {
		t.Run(string(tc.lang), func(t *testing.T) {
			res := run(t, l, tc.lang, tc.code)
			want := "SigBlk:\t0000000000000000\nSigIgn:\t0000000001001000\n"
			if res.Stdout != want {
				t.Errorf("got %q (stderr %q, start %s), want %q", res.Stdout, res.Stderr, res.Start, want)
			}
		})
	}
}

// TestSignalsToInit: the program can send its init (the reaper, pid 1) no
// signal: its uid is not the init's, it holds no capability, and it is in a
// session of its own (SIGCONT). Not a queued one either, which the reaper
// would take as its time backstop's arming (reaper.ArmBackstop): SIGUSR1 and
// SIGALRM are blocked there, so queued rather than discarded as a signal at
// its default action is by a namespace's pid 1, and the uid is what keeps
// them out. Nor does any of them stop, kill or crash the init, or change the
// result.
func TestSignalsToInit(t *testing.T) {
	l := newTestLauncher(t, 0)
	for _, sig := range []unix.Signal{
		unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGKILL, unix.SIGSTOP,
		unix.SIGTSTP, unix.SIGTTIN, unix.SIGCONT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGPIPE,
		unix.SIGALRM, unix.SIGCHLD, unix.SIGXCPU, unix.SIGXFSZ, unix.SIGPROF, unix.SIGVTALRM,
		unix.SIGIO, unix.SIGPWR, unix.SIGWINCH, unix.SIGURG, unix.SIGSEGV, unix.SIGBUS,
		unix.SIGFPE, unix.SIGILL, unix.SIGTRAP, unix.SIGABRT, unix.SIGSYS, unix.SIGSTKFLT,
		unix.Signal(34), unix.Signal(64), // SIGRTMIN, SIGRTMAX
	} {
		t.Run(unix.SignalName(sig)+fmt.Sprint(" ", int(sig)), func(t *testing.T) {
			code := fmt.Sprintf(`import os, time
try:
    os.kill(1, %d)
    print('sent')
except OSError as e:
    print('refused', e.errno)
time.sleep(0.1)
print('alive')
`, int(sig))
			res, took := timedRun(t, l, rootfs.Python, code, withTimeout(5*time.Second))
			if !res.Succeeded() || res.Stdout != "refused 1\nalive\n" {
				t.Errorf("got %s reason %s message %q stdout %q stderr %.400q, want succeeded, refused (EPERM) and alive", res.End, res.Step, res.Message, res.Stdout, res.Stderr)
			}
			if res.Stderr != "" {
				t.Errorf("stderr: got %.400q, want nothing (the init must not print into the program's stderr)", res.Stderr)
			}
			if took > 3*time.Second {
				t.Errorf("Run took %v, want under 3s", took)
			}
		})
	}
	// The backstop's own arming, as the supervisor sends it: refused.
	res := run(t, l, rootfs.Python, `import ctypes, os, struct
libc = ctypes.CDLL(None, use_errno=True)
info = ctypes.create_string_buffer(struct.pack('iiiiiIQ', 10, 0, -1, 0, 0, 0, 1), 128)
print(libc.syscall({'x86_64': 129, 'aarch64': 138}[os.uname().machine], 1, 10, info), ctypes.get_errno())
`, withTimeout(5*time.Second))
	if res.Stdout != "-1 1\n" {
		t.Errorf("rt_sigqueueinfo(1, SIGUSR1, SI_QUEUE): got %s, stdout %q, stderr %.400q; want -1 and EPERM", res.End, res.Stdout, res.Stderr)
	}
}
