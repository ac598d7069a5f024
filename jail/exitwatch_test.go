package jail

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/rootfs"
)

// TestExitWatch: the taskstats record of a process's end carries its wait
// status, for a process that exits, one that had threads, and one killed.
func TestExitWatch(t *testing.T) {
	testutil.RequireRoot(t)
	w, err := newExitWatch()
	if err != nil {
		t.Skipf("no taskstats on this host: %v", err)
	}
	defer w.close()
	for _, tc := range []struct {
		name string
		argv []string
		kill bool
		want syscall.WaitStatus
		none bool // no record: the zygote's report serves
	}{
		{"exit", []string{"sh", "-c", "read x; exit 3"}, false, 3 << 8, false},
		{"threads joined", []string{"python3", "-c", "import threading, sys; t = threading.Thread(target=sys.stdin.readline); t.start(); t.join(); sys.exit(5)"}, false, 5 << 8, false},
		{"a thread left running", []string{"python3", "-c", "import threading, os, sys, time; t = threading.Thread(target=time.sleep, args=(60,), daemon=True); t.start(); sys.stdin.readline(); os._exit(5)"}, false, 0, true},
		{"killed", []string{"sleep", "60"}, true, syscall.WaitStatus(syscall.SIGKILL), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(tc.argv[0], tc.argv[1:]...)
			in, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			got := w.expect(cmd.Process.Pid)
			defer w.forget(cmd.Process.Pid)
			if tc.kill {
				cmd.Process.Kill()
			} else {
				in.Write([]byte("go\n"))
			}
			if tc.none {
				cmd.Wait()
				select {
				case ws := <-got:
					t.Errorf("got status %#x from a group whose leader did not exit last, want none", ws)
				case <-time.After(300 * time.Millisecond):
				}
				return
			}
			select {
			case ws := <-got:
				if syscall.WaitStatus(ws) != tc.want {
					t.Errorf("got status %#x, want %#x", ws, uint32(tc.want))
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no record of the exit within 10 s")
			}
			cmd.Wait()
		})
	}
}

// TestEarlyExitKeepsOutput: a warm Python program whose exit the kernel's
// record tells of before its teardown ends the run on that record, with all
// its output and its exit status, taken from the pipes without waiting for
// their EOF; a program that leaves a process holding its output is waited
// for as before, and its output is whole too.
func TestEarlyExitKeepsOutput(t *testing.T) {
	l := newWarmLauncher(t, 1)
	if l.exits == nil {
		t.Skip("no taskstats on this host: runs learn of exits from the zygote alone")
	}
	for _, tc := range []struct {
		name, code, stdout string
		exit               int
		early              bool
	}{
		{"alone", "import sys\nsys.stdout.write('x' * 1000000)\nsys.stderr.write('e' * 70000)\nsys.exit(3)\n", strings.Repeat("x", 1000000), 3, true},
		{"a process left", "import subprocess\nsubprocess.Popen(['sleep', '5'])\nprint('done')\n", "done\n", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Which of the kernel's record and the zygote's report reaches the
			// run first is a race the record wins by about a millisecond: up
			// to five runs, for one on the early record.
			before := l.earlyExits.Load()
			for range 5 {
				waitWarm(t, l)
				res := run(t, l, rootfs.Python, tc.code)
				if res.Start != StartWarm {
					t.Fatalf("the run started %s, want warm", res.Start)
				}
				if res.ExitCode == nil || *res.ExitCode != tc.exit || res.Stdout != tc.stdout {
					t.Fatalf("got exit %v and %d characters of stdout (%q...), want exit %d and %d", res.ExitCode, len(res.Stdout), res.Stdout[:min(20, len(res.Stdout))], tc.exit, len(tc.stdout))
				}
				if tc.early && res.Stderr != strings.Repeat("e", 70000) {
					t.Fatalf("got %d characters of stderr, want 70000", len(res.Stderr))
				}
				if l.earlyExits.Load() > before {
					break
				}
			}
			if got := l.earlyExits.Load() > before; got != tc.early {
				t.Errorf("a run ended on the early record: %v, want %v", got, tc.early)
			}
		})
	}
}
