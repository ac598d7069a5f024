package jail

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/jail/pid1"
	"github.com/brig-sandbox/brig/rootfs"
)

// TestTimeoutKillsEverything: a program that outlives its timeout, however it
// resists, is stopped at the deadline and reported as such.
func TestTimeoutKillsEverything(t *testing.T) {
	l := newTestLauncher(t, 0)
	const resist = "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGALRM):\n    signal.signal(s, signal.SIG_IGN)\n"
	for _, tc := range []struct {
		name string
		lang rootfs.Language
		code string
		// marker, when set, is in the command line of processes the program
		// leaves that do not hold its output pipes.
		marker string
	}{
		{"sleep", rootfs.Python, "import time\ntime.sleep(100)", ""},
		{"busy loop", rootfs.Python, "while True:\n    pass", ""},
		{"ignores SIGTERM", rootfs.Python, resist + "import time\nwhile True:\n    time.sleep(0.01)", ""},
		{"busy children ignoring SIGTERM", rootfs.Python, resist + "import os\nfor _ in range(3):\n    if os.fork() == 0:\n        break\nwhile True:\n    pass", ""},
		{"detached busy children", rootfs.Python, "import subprocess, sys, time\nps = [subprocess.Popen([sys.executable, '-c', 'import signal\\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\\nwhile True: pass # 1000.6161'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True) for _ in range(3)]\ntime.sleep(0.2)\nprint(all(p.poll() is None for p in ps), flush=True)\ntime.sleep(100)", "1000.6161"},
		{"stops itself", rootfs.Python, "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)", ""},
		{"javascript busy loop", rootfs.JavaScript, "for (;;) {}", ""},
		{"javascript timer", rootfs.JavaScript, "process.on('SIGTERM', () => {}); setTimeout(() => {}, 100000)", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var started time.Time
			res := run(t, l, tc.lang, tc.code, withTimeout(time.Second), func(s *Spec) {
				s.OnStart = func(time.Time) { started = time.Now() }
			})
			sinceStart := time.Since(started)
			if res.End != EndTimeout {
				t.Errorf("got end %q (message %q, stderr %q), want timeout", res.End, res.Message, res.Stderr)
			}
			if res.Usage.WallMS < 1000 || res.Usage.WallMS > 1150 {
				t.Errorf("wall: got %d ms, want 1000 to 1150", res.Usage.WallMS)
			}
			// The run's CPU limit (DefaultCPUs) holds however many processes spin.
			if limit := int64(float64(res.Usage.WallMS)*DefaultCPUs) + 150; res.Usage.CPUMS > limit {
				t.Errorf("cpu: got %d ms in %d ms of wall time, want at most %d", res.Usage.CPUMS, res.Usage.WallMS, limit)
			}
			if started.IsZero() {
				t.Fatalf("OnStart: got no call, want one")
			}
			// Run returns once the output is drained, which every process holding
			// the pipes must have died for; one that let go of them must be dead
			// within 150 ms of the deadline too.
			if sinceStart > 1150*time.Millisecond {
				t.Errorf("interpreter start to Run's return: got %v, want 1s to 1.15s", sinceStart)
			}
			if tc.marker != "" {
				if res.Stdout != "True\n" {
					t.Errorf("children running before the deadline: got %q, want True", res.Stdout)
				}
				if left := waitGone(time.Second+150*time.Millisecond-sinceStart, func() []string { return hostProcsWith(tc.marker) }); len(left) > 0 {
					t.Errorf("processes 150 ms after the deadline: got %q, want none", left)
				}
			}
			assertNoRunCgroups(t, l)
		})
	}
}

// pyHog allocates and touches mib MiB in 16 MiB pieces.
func pyHog(mib int) string {
	return fmt.Sprintf("hog = []\nfor _ in range(%d):\n    hog.append(b'x' * (16 << 20))\nprint('allocated', len(hog) * 16)\n", mib/16)
}

// TestMemoryLimit: what the run's processes use together is bounded; going over is
// reason memory, staying under succeeds.
func TestMemoryLimit(t *testing.T) {
	l := newTestLauncher(t, 0)
	for _, tc := range []struct {
		name    string
		lang    rootfs.Language
		code    string
		reason  End
		minPeak int64
	}{
		{"python 1 GiB", rootfs.Python, pyHog(1024), EndMemory, 200 << 20},
		{"javascript 1 GiB", rootfs.JavaScript, "const b = Buffer.alloc(1 << 30, 1); console.log(b.length)", EndMemory, 200 << 20},
		{"four children of 100 MiB", rootfs.Python, `
import os, sys, time
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        hog = [b'x' * (10 << 20) for _ in range(10)]
        time.sleep(3)
        os._exit(0)
    kids.append(pid)
sys.exit(1 if any(os.waitpid(k, 0)[1] != 0 for k in kids) else 0)
`, EndMemory, 200 << 20},
		{"python 100 MiB", rootfs.Python, pyHog(112), EndCompleted, 100 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, l, tc.lang, tc.code, withMemoryMiB(256))
			if res.End != tc.reason {
				t.Errorf("got end %q (message %q, stderr %.300q), want %q", res.End, res.Message, res.Stderr, tc.reason)
			}
			if res.Usage.PeakMemoryBytes < tc.minPeak || res.Usage.PeakMemoryBytes > 256<<20 {
				t.Errorf("peak memory: got %d MiB, want %d to 256 MiB", res.Usage.PeakMemoryBytes>>20, tc.minPeak>>20)
			}
		})
	}
}

// TestWritableSpaceFull: the run's files share a tmpfs of half its memory, so
// filling it is ENOSPC for the program, which decides what happens next, never an
// OOM kill.
func TestWritableSpaceFull(t *testing.T) {
	l := newTestLauncher(t, 0)
	const memMiB = 256
	scratch := ScratchBytes(memMiB << 20)
	fill := `
import errno, os
def fill(path):
    n = 0
    chunk = b'x' * (1 << 20)
    try:
        with open(path, 'wb', buffering=0) as f:
            while True:
                n += f.write(chunk)
    except OSError as e:
        return errno.errorcode[e.errno], n
`
	for _, tc := range []struct {
		name   string
		code   string
		reason End
		// wantErr is the first word printed; the byte counts follow.
		wantErr string
	}{
		{"tmp", fill + "print(*fill('/tmp/fill'))", EndCompleted, "ENOSPC"},
		{"sandbox", fill + "print(*fill('/sandbox/fill'))", EndCompleted, "ENOSPC"},
		{"dev shm", fill + "print(*fill('/dev/shm/fill'))", EndCompleted, "ENOSPC"},
		{"tmp then dev shm share one budget", fill + "a = fill('/tmp/fill')\nb = fill('/dev/shm/fill')\nprint(a[0], a[1] + b[1])", EndCompleted, "ENOSPC"},
		{"uncaught", "with open('/tmp/fill', 'wb') as f:\n    while True:\n        f.write(b'x' * (1 << 20))", EndError, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, l, rootfs.Python, tc.code, withMemoryMiB(memMiB))
			if res.End != tc.reason {
				t.Fatalf("got reason %q (message %q, stderr %.300q), want %q (never memory)", res.End, res.Message, res.Stderr, tc.reason)
			}
			if tc.wantErr == "" {
				if !strings.Contains(res.Stderr, "No space left on device") {
					t.Errorf("stderr: got %.300q, want the ENOSPC traceback", res.Stderr)
				}
				return
			}
			f := strings.Fields(res.Stdout)
			if len(f) != 2 || f[0] != tc.wantErr {
				t.Fatalf("got %q, want %s and a byte count", res.Stdout, tc.wantErr)
			}
			n, _ := strconv.ParseInt(f[1], 10, 64)
			if n < scratch-8<<20 || n > scratch {
				t.Errorf("bytes written: got %d MiB, want about %d MiB (ScratchBytes of %d MiB), and no more", n>>20, scratch>>20, memMiB)
			}
		})
	}
	t.Run("empty files", func(t *testing.T) {
		// They take no page of the size, but an inode each, of which the
		// tmpfs has one a page of its size: ENOSPC, not an OOM kill (an
		// audit's program was killed for memory after 3 s).
		res := run(t, l, rootfs.Python, `
import errno, os
os.mkdir('/tmp/d')
n = 0
try:
    while True:
        open('/tmp/d/%d' % n, 'w').close()
        n += 1
except OSError as e:
    print(errno.errorcode[e.errno], n)
`, withMemoryMiB(memMiB))
		f := strings.Fields(res.Stdout)
		if res.End != EndCompleted || len(f) != 2 || f[0] != "ENOSPC" {
			t.Fatalf("got %s %q (message %q, stderr %.300q), want completed with ENOSPC and a count", res.End, res.Stdout, res.Message, res.Stderr)
		}
		inodes := scratch / pid1.ScratchBytesPerInode
		if n, _ := strconv.ParseInt(f[1], 10, 64); n < inodes-100 || n > inodes {
			t.Errorf("empty files made: got %d, want about %d (an inode for each %d bytes of the %d MiB), and no more", n, inodes, pid1.ScratchBytesPerInode, scratch>>20)
		}
	})
}

// TestRunsAreTheOOMKillersFirstVictims: every process of a run, and its
// children, has oom_score_adj 1000, whatever the service's: when the host
// runs out of memory, the kernel's OOM killer takes the runs' untrusted
// programs first (the cgroup v2 review: a Kubernetes pod of Guaranteed QoS,
// at -997, made its runs all but immune).
func TestRunsAreTheOOMKillersFirstVictims(t *testing.T) {
	l := newTestLauncher(t, 0)
	for _, tc := range []struct {
		lang rootfs.Language
		code string
	}{
		{rootfs.Python, "import subprocess\nprint(open('/proc/self/oom_score_adj').read().strip(), subprocess.run(['cat', '/proc/self/oom_score_adj'], capture_output=True, text=True).stdout.strip())"},
		{rootfs.JavaScript, "const fs = require('fs'); console.log(fs.readFileSync('/proc/self/oom_score_adj', 'utf8').trim(), require('child_process').execFileSync('cat', ['/proc/self/oom_score_adj']).toString().trim())"},
	} {
		res := run(t, l, tc.lang, tc.code)
		if res.End != EndCompleted || res.Stdout != "1000 1000\n" {
			t.Errorf("%s: got %s (%s), stdout %q, stderr %.300q; want 1000 for the program and its child", tc.lang, res.End, res.Message, res.Stdout, res.Stderr)
		}
	}
	// The value is a floor only where brig holds CAP_SYS_RESOURCE (CheckOOMFloor
	// warns where it does not, as on these machines).
	t.Run("a floor", func(t *testing.T) {
		if !testutil.HasCapability(t, unix.CAP_SYS_RESOURCE) {
			t.Skip("the test lacks CAP_SYS_RESOURCE, without which the kernel makes no floor of the value: a run may lower it (brig check warns)")
		}
		for _, tc := range []struct {
			lang rootfs.Language
			code string
		}{
			{rootfs.Python, "import os\ntry:\n    os.write(os.open('/proc/self/oom_score_adj', os.O_WRONLY), b'0')\nexcept PermissionError:\n    print('refused')\nprint(open('/proc/self/oom_score_adj').read().strip())"},
			{rootfs.JavaScript, "const fs = require('fs'); try { fs.writeFileSync('/proc/self/oom_score_adj', '0') } catch (e) { console.log(e.code === 'EACCES' ? 'refused' : e.code) } console.log(fs.readFileSync('/proc/self/oom_score_adj', 'utf8').trim())"},
		} {
			if res := run(t, l, tc.lang, tc.code); res.End != EndCompleted || res.Stdout != "refused\n1000\n" {
				t.Errorf("%s lowering it: got %s (%s), stdout %q, stderr %.300q; want refused, and 1000 still", tc.lang, res.End, res.Message, res.Stdout, res.Stderr)
			}
		}
	})
}
