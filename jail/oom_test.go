package jail

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/cgroup"
	"github.com/brig-sandbox/brig/rootfs"
)

// TestOOMEndsWholeRun: a run is one unit. When the kernel OOM-kills any of its
// processes, the whole run ends with reason memory, whatever the others would
// have done: a parent that catches its child's death and exits 0 does not make
// the run completed, and one that would sleep on does not keep it going.
func TestOOMEndsWholeRun(t *testing.T) {
	l := newTestLauncher(t, 0)
	const (
		memMiB = 128
		// marker is in the command line of a detached process the program
		// starts first: it must not outlive the run either.
		marker = "1000.7171"
		// timeout is far above what any case takes, so that only the OOM kill
		// can end the sleeping ones.
		timeout = 120 * time.Second
		// promptly bounds a run that would sleep 60 s. It is no measure of
		// speed: the OOM kill ends the run in well under a second.
		promptly = 30 * time.Second
	)
	// pyHogChild is a Python child that touches 400 MiB, past the run's limit.
	pyHogChild := "b = bytearray(400 << 20)\\nfor i in range(0, len(b), 4096): b[i] = 1\\nprint('child allocated')"
	pyDetached := fmt.Sprintf("subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(100) # %s'], start_new_session=True)\n", marker)
	for _, tc := range []struct {
		name string
		lang rootfs.Language
		code string
	}{
		{"python parent exits 0", rootfs.Python, "import subprocess, sys\n" + pyDetached +
			"p = subprocess.run([sys.executable, '-c', \"" + pyHogChild + "\"])\n" +
			"print('child returned', p.returncode, flush=True)\nsys.exit(0)\n"},
		{"python parent sleeps", rootfs.Python, "import subprocess, sys, time\n" + pyDetached +
			"p = subprocess.run([sys.executable, '-c', \"" + pyHogChild + "\"])\n" +
			"print('child returned', p.returncode, flush=True)\ntime.sleep(60)\n"},
		{"python parent sleeps while the child allocates", rootfs.Python, "import subprocess, sys, time\n" + pyDetached +
			"subprocess.Popen([sys.executable, '-c', \"" + pyHogChild + "\"])\ntime.sleep(60)\n"},
		{"javascript parent sleeps", rootfs.JavaScript, `
const { spawn, spawnSync } = require('child_process');
spawn('sleep', ['100', '` + marker + `'], { detached: true, stdio: 'ignore' });
const r = spawnSync(process.execPath, ['-e', 'const b = Buffer.alloc(400 << 20, 1); console.log(b.length)']);
console.log('child', r.status, r.signal);
setTimeout(() => {}, 60000);
`},
		{"javascript parent exits 0", rootfs.JavaScript, `
const { spawnSync } = require('child_process');
const r = spawnSync(process.execPath, ['-e', 'const b = Buffer.alloc(400 << 20, 1); console.log(b.length)']);
console.log('child', r.status, r.signal);
process.exit(0);
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			begin := time.Now()
			res := run(t, l, tc.lang, tc.code, withMemoryMiB(memMiB), withTimeout(timeout))
			took := time.Since(begin)
			t.Logf("Run took %v (wall %d ms); exit code %v signal %q; message %q; stdout %q",
				took, res.Usage.WallMS, exitCode(res), res.Signal, res.Message, res.Stdout)
			if res.End != EndMemory {
				t.Errorf("got end %q (message %q, stdout %q, stderr %.300q), want memory",
					res.End, res.Message, res.Stdout, res.Stderr)
			}
			if want := fmt.Sprintf("memory limit of %d MiB", memMiB); !strings.Contains(res.Message, want) {
				t.Errorf("message: got %q, want it to name the limit (%q)", res.Message, want)
			}
			if took > promptly || time.Duration(res.Usage.WallMS)*time.Millisecond > promptly {
				t.Errorf("Run took %v, wall %d ms: want both under %v, which an OOM-killed run takes (the program would run 60 s)",
					took, res.Usage.WallMS, promptly)
			}
			assertNoHostProcs(t, marker)
			assertNoRunCgroups(t, l)
		})
	}
}

func exitCode(res *Result) string {
	if res.ExitCode == nil {
		return "none"
	}
	return fmt.Sprint(*res.ExitCode)
}

// TestClassifyOOM: the reason and the program's own exit code and signal for
// each way a run can end around an OOM kill. Any OOM kill makes it memory, unless
// the deadline or a stop ended the run first.
func TestClassifyOOM(t *testing.T) {
	const (
		exited0   = syscall.WaitStatus(0)
		exited3   = syscall.WaitStatus(3 << 8)
		killedBy9 = syscall.WaitStatus(syscall.SIGKILL)
	)
	oomKill := cgroup.Usage{OOMKills: 1, OwnLimitReached: true}
	tests := []struct {
		name       string
		e          ending
		usage      cgroup.Usage
		wantReason End
		wantCode   string // "none" when there is no exit code
		wantSignal string
	}{
		{"the parent caught its child's OOM kill and exited 0", ending{started: true, exited: true, ws: exited0}, oomKill, EndMemory, "0", ""},
		{"the parent exited 3", ending{started: true, exited: true, ws: exited3}, oomKill, EndMemory, "3", ""},
		{"the program itself was OOM-killed", ending{started: true, exited: true, ws: killedBy9}, oomKill, EndMemory, "none", "SIGKILL"},
		{"the OOM signal came before the program's exit", ending{started: true, oomKilled: true}, oomKill, EndMemory, "none", "SIGKILL"},
		{"the OOM signal without a count (usage unreadable)", ending{started: true, oomKilled: true}, cgroup.Usage{}, EndMemory, "none", "SIGKILL"},
		{"the init was OOM-killed", ending{started: true, lost: true}, oomKill, EndMemory, "none", "SIGKILL"},
		{"the deadline came first", ending{started: true, timedOut: true}, oomKill, EndTimeout, "none", "SIGKILL"},
		{"a stop came first", ending{started: true, stopped: true}, oomKill, EndStopped, "none", "SIGKILL"},
		{"a stop before the init said the program started", ending{stopped: true}, cgroup.Usage{}, EndStopped, "none", "SIGKILL"},
		{"no OOM kill, exit 0", ending{started: true, exited: true, ws: exited0}, cgroup.Usage{}, EndCompleted, "0", ""},
		{"no OOM kill, killed by a signal", ending{started: true, exited: true, ws: killedBy9}, cgroup.Usage{}, EndError, "none", "SIGKILL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := &Result{}
			spec := Spec{MemoryBytes: 256 << 20, Timeout: time.Second}
			(&Launcher{}).classify(res, tt.e, tt.usage, spec)
			if res.End != tt.wantReason || exitCode(res) != tt.wantCode || res.Signal != tt.wantSignal {
				t.Errorf("got reason %q exit code %s signal %q, want %q %s %q (message %q)",
					res.End, exitCode(res), res.Signal, tt.wantReason, tt.wantCode, tt.wantSignal, res.Message)
			}
			if tt.e.stopped && !tt.e.started && !strings.Contains(res.Message, "as its program was being started") {
				t.Errorf("message: got %q, want it to say the program was being started", res.Message)
			}
			if tt.wantReason == EndMemory && (res.ShortElsewhere || !strings.Contains(res.Message, "went over its memory limit of 256 MiB")) {
				t.Errorf("message: got %q, want it to name the 256 MiB limit", res.Message)
			}
		})
	}
	// A kill where the run never reached its own limit: memory all the same,
	// but the message must not send the harness to raise memory_mib.
	res := &Result{}
	elsewhere := cgroup.Usage{OOMKills: 1, PeakMemoryBytes: 151 << 20}
	(&Launcher{}).classify(res, ending{started: true, exited: true, ws: killedBy9}, elsewhere, Spec{MemoryBytes: 512 << 20, Timeout: time.Second})
	if res.End != EndMemory || !res.ShortElsewhere || strings.Contains(res.Message, "went over") ||
		!strings.Contains(res.Message, "under its memory limit of 512 MiB (its peak 151 MiB)") || !strings.Contains(res.Message, "would not help") {
		t.Errorf("a kill for memory short outside the run: got %s, %q", res.End, res.Message)
	}
}

// tcpHog fills loopback TCP connections it never reads, from four processes
// of 1,900 connections each, then sleeps: what the limits audit of
// 2026-12-05 held, 689 MB to 1.24 GB of TCP buffers in a run of 128 MiB on
// v1, which charges them apart from the run's memory and past their own
// limit.
const tcpHog = `import os, socket, time
def fill():
    ln = socket.socket(); ln.bind(('127.0.0.1', 0)); ln.listen(4096)
    chunk, held, keep = b'x' * (1 << 20), 0, []
    for _ in range(1900):
        c = socket.create_connection(ln.getsockname()); s, _ = ln.accept()
        c.setblocking(False)
        keep += [c, s]
        try:
            while True:
                held += c.send(chunk)
        except BlockingIOError:
            pass
    return held
for _ in range(3):
    if os.fork() == 0:
        fill(); time.sleep(30); os._exit(0)
print('held', fill() >> 20, 'MiB', flush=True)
time.sleep(30)
`

// TestTCPBuffersCountAsMemory: a run's TCP socket buffers count against its
// memory limit (API.md: everything its processes use). On v1, which charges
// them apart, the run's supervisor ends it once its memory and its buffers
// together go over the limit (cgroup.Group.TCPBytes); on v2 they are its
// memory. Either way the run can't hold more than its limit, and its peak
// says what it held.
func TestTCPBuffersCountAsMemory(t *testing.T) {
	l := newTestLauncher(t, 0)
	const memMiB = 128
	begin := time.Now()
	res := run(t, l, rootfs.Python, tcpHog, func(s *Spec) {
		s.MemoryBytes = memMiB << 20
		s.Timeout = 60 * time.Second
	})
	if res.End != EndMemory {
		t.Fatalf("got %s (%s), stdout %q, stderr %q, peak %d MiB, after %v; want memory", res.End, res.Message, res.Stdout, res.Stderr, res.Usage.PeakMemoryBytes>>20, time.Since(begin))
	}
	if time.Since(begin) > 30*time.Second {
		t.Errorf("the run ended after %v: by its sleep, not by its memory", time.Since(begin))
	}
}
