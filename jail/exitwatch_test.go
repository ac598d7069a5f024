package jail

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/rootfs"
)

// TestExitWatch: the taskstats record of a process's end carries its wait
// status, whichever of its threads ends last: a process that exits, one whose
// thread ended first, one that exits while a thread runs, one a thread exits,
// one a thread's SIGSEGV ends, and one killed.
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
		// ready: wait for a line on its stdout first (its thread runs).
		ready bool
	}{
		{"exit", []string{"sh", "-c", "read x; exit 3"}, false, 3 << 8, false},
		{"threads joined", []string{"python3", "-c", "import threading, sys; t = threading.Thread(target=sys.stdin.readline); t.start(); t.join(); sys.exit(5)"}, false, 5 << 8, false},
		{"a thread left running", []string{"python3", "-c", "import threading, os, sys, time; threading.Thread(target=time.sleep, args=(60,), daemon=True).start(); sys.stdin.readline(); os._exit(5)"}, false, 5 << 8, false},
		{"a thread exits the process", []string{"python3", "-c", "import threading, os, sys, time; threading.Thread(target=lambda: (sys.stdin.readline(), os._exit(7))).start(); time.sleep(60)"}, false, 7 << 8, false},
		{"a thread's SIGSEGV", []string{"python3", "-c", "import threading, ctypes, sys, time; threading.Thread(target=lambda: (sys.stdin.readline(), ctypes.string_at(0))).start(); time.sleep(60)"}, false, syscall.WaitStatus(syscall.SIGSEGV), false},
		{"killed", []string{"sleep", "60"}, true, syscall.WaitStatus(syscall.SIGKILL), false},
		{"killed with a thread", []string{"python3", "-c", "import threading, sys, time; threading.Thread(target=time.sleep, args=(60,)).start(); print(flush=True); time.sleep(60)"}, true, syscall.WaitStatus(syscall.SIGKILL), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(tc.argv[0], tc.argv[1:]...)
			in, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			got := w.expect(cmd.Process.Pid)
			defer w.forget(cmd.Process.Pid)
			if tc.ready {
				if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
					t.Fatalf("waiting for the program to start its thread: %v", err)
				}
			}
			if tc.kill {
				cmd.Process.Kill()
			} else {
				in.Write([]byte("go\n"))
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

// TestExitWatchAfterTheFact: expectChild hears of an exit that came before it
// was asked for, as a cold program's can, by its pid and its parent's, and of
// no exit with another parent.
func TestExitWatchAfterTheFact(t *testing.T) {
	testutil.RequireRoot(t)
	w, err := newExitWatch()
	if err != nil {
		t.Skipf("no taskstats on this host: %v", err)
	}
	defer w.close()
	cmd := exec.Command("sh", "-c", "read x; exit 6")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	// Asked for in time, the exit tells when the watch has read its record.
	heard := w.expect(pid)
	in.Write([]byte("go\n"))
	select {
	case <-heard:
	case <-time.After(10 * time.Second):
		t.Fatal("no record of the exit within 10 s")
	}
	w.forget(pid)
	cmd.Wait()
	other := w.expectChild(pid, os.Getpid()+1)
	defer w.forget(pid)
	select {
	case ws := <-other:
		t.Fatalf("with another parent's pid: got status %#x, want none", ws)
	default:
	}
	select {
	case ws := <-w.expectChild(pid, os.Getpid()):
		if syscall.WaitStatus(ws) != 6<<8 {
			t.Errorf("got status %#x, want %#x", ws, 6<<8)
		}
	default:
		t.Error("asked after the exit: got nothing, want its status")
	}
}

// TestEarlyExitKeepsOutput: a program (Python or node, warm or cold) whose exit the kernel's
// record tells of before its teardown ends the run on that record, with all
// its output and its exit status, taken from the pipes without waiting for
// their EOF. (Whether the output of a program that leaves a process behind
// can be taken so depends on whether that process, killed with the sandbox,
// has closed its files by then: TestOnlyProgramLeft.)
func TestEarlyExitKeepsOutput(t *testing.T) {
	l := newWarmLauncher(t, 1)
	if l.exits == nil {
		t.Skip("no taskstats on this host: runs learn of exits from the zygote alone")
	}
	pyCode := "import sys\nsys.stdout.write('x' * 1000000)\nsys.stderr.write('e' * 70000)\nsys.exit(3)\n"
	jsCode := "process.stdout.write('x'.repeat(1000000));\nprocess.stderr.write('e'.repeat(70000));\nprocess.exitCode = 3;\n"
	// A variable the interpreter reads at its start sends a run down the
	// cold path, whose program's pid is learnt once it has started.
	coldEnv := map[rootfs.Language]map[string]string{rootfs.Python: {"PYTHONHASHSEED": "0"}, rootfs.JavaScript: {"NODE_NO_WARNINGS": "1"}}
	for _, tc := range []struct {
		lang                       rootfs.Language
		name, code, stdout, stderr string
		exit                       int
		cold                       bool
	}{
		{rootfs.Python, "a thread left running", "import sys, threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\nprint('done')\nsys.exit(4)\n", "done\n", "", 4, false},
		{rootfs.Python, "alone", pyCode, strings.Repeat("x", 1000000), strings.Repeat("e", 70000), 3, false},
		{rootfs.JavaScript, "node", jsCode, strings.Repeat("x", 1000000), strings.Repeat("e", 70000), 3, false},
		{rootfs.Python, "cold", pyCode, strings.Repeat("x", 1000000), strings.Repeat("e", 70000), 3, true},
		{rootfs.JavaScript, "cold node", jsCode, strings.Repeat("x", 1000000), strings.Repeat("e", 70000), 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Which of the kernel's record and the zygote's or the init's
			// report reaches the run first is a race the record wins by about
			// a millisecond: up to five runs, for one on the early record.
			before := l.earlyExits.Load()
			start, opts := StartWarm, []func(*Spec){}
			if tc.cold {
				start = StartColdEnv
				opts = append(opts, func(s *Spec) { s.Env = coldEnv[tc.lang] })
			}
			for range 5 {
				waitWarm(t, l)
				res := run(t, l, tc.lang, tc.code, opts...)
				if res.Start != start {
					t.Fatalf("the run started %s, want %s", res.Start, start)
				}
				if res.ExitCode == nil || *res.ExitCode != tc.exit || res.Stdout != tc.stdout {
					t.Fatalf("got exit %v and %d characters of stdout (%q...), want exit %d and %d", res.ExitCode, len(res.Stdout), res.Stdout[:min(20, len(res.Stdout))], tc.exit, len(tc.stdout))
				}
				if res.Stderr != tc.stderr {
					t.Fatalf("got %d characters of stderr, want %d", len(res.Stderr), len(tc.stderr))
				}
				if l.earlyExits.Load() > before {
					break
				}
			}
			if l.earlyExits.Load() == before {
				t.Error("no run ended on the early record")
			}
		})
	}
}

// TestOnlyProgramLeft: a warm sandbox's output is taken without EOF only while
// its cgroup holds no process but its init and its program; one more, which
// could hold the program's pipes, keeps the run waiting for their EOF.
func TestOnlyProgramLeft(t *testing.T) {
	l := newWarmLauncher(t, 1)
	waitWarm(t, l)
	s := <-l.pools[poolKey(rootOf(t, l, rootfs.Python), rootfs.Python)]
	defer s.discard()
	if !s.onlyProgramLeft() {
		t.Fatal("a waiting warm sandbox: got another process in its cgroup, want its init and its program alone")
	}
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		other.Process.Kill()
		other.Wait()
	}()
	if err := s.group.Attach(other.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if s.onlyProgramLeft() {
		t.Error("with another process in the cgroup: got the program alone")
	}
	other.Process.Kill()
	other.Wait()
	if !s.onlyProgramLeft() {
		t.Error("once the other process is gone: got another process still")
	}
}

// TestLostInitKeepsWallTime: a run whose init dies without reporting (here
// killed from outside; an audit saw it in a memory kill) ends internal with
// its wall time from its start, not 0, and says it had started: with the exit
// watch too, which may report the program's SIGKILL (the init's death kills
// its pid namespace) before the init's pipe has been read to its end, where
// the run had ended error, "killed by SIGKILL", four times in seven (the
// recovery probe: a networked run's outcome then read failed, not unknown).
func TestLostInitKeepsWallTime(t *testing.T) {
	for _, watch := range []bool{true, false} {
		t.Run(fmt.Sprintf("exit watch %v", watch), func(t *testing.T) {
			l := newTestLauncher(t, 0)
			switch exits := l.exits; {
			case exits == nil && watch:
				t.Skip("the launcher has no exit watch here (its log says why)")
			case exits != nil && !watch:
				l.exits = nil
				t.Cleanup(func() { exits.close() })
			}
			for range 3 {
				killed := make(chan error, 1)
				res := run(t, l, rootfs.Python, "import time\ntime.sleep(10)\n", func(s *Spec) {
					s.OnStart = func(time.Time) {
						go func() {
							time.Sleep(300 * time.Millisecond)
							pid, err := sandboxInitOf(os.Getpid())
							if err == nil {
								err = unix.Kill(pid, unix.SIGKILL)
							}
							killed <- err
						}()
					}
				})
				if err := <-killed; err != nil {
					t.Fatalf("killing the sandbox's init: %v", err)
				}
				if res.End != EndInternal || res.Usage.WallMS < 300 || res.Usage.WallMS > 9000 || !res.Started {
					t.Fatalf("got %s (%s) with wall_ms %d, started %v, want internal with the 300 ms or more the program ran, started (a networked run's outcome is then unknown)", res.End, res.Message, res.Usage.WallMS, res.Started)
				}
			}
		})
	}
}

// TestSelfKillIsTheProgramsOwn: a program that SIGKILLs itself ends its run
// error, "killed by SIGKILL", never the lost init's internal: its init
// reports the exit and exits at once, so its status pipe may have no writer
// left when the kernel's record of the exit is read, and on a busy machine 5
// runs in 40 had read as internal (the review of 2026-12-05). Runs six at a
// time beside two spinning threads, in both languages.
func TestSelfKillIsTheProgramsOwn(t *testing.T) {
	l := newTestLauncher(t, 0)
	stop := make(chan struct{})
	var spin sync.WaitGroup
	for range 2 {
		spin.Add(1)
		go func() {
			defer spin.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	defer func() { close(stop); spin.Wait() }()
	codes := map[rootfs.Language]string{
		rootfs.Python:     "import os\nos.kill(os.getpid(), 9)\n",
		rootfs.JavaScript: "process.kill(process.pid, 'SIGKILL')\n",
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 6)
	var mu sync.Mutex
	var bad []string
	for i := range 36 {
		lang := rootfs.Languages[i%len(rootfs.Languages)]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			res, err := launch(context.Background(), l, Spec{Language: lang, Code: codes[lang], Timeout: 20 * time.Second, MemoryBytes: api.DefaultMemoryMiB << 20})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				bad = append(bad, fmt.Sprintf("%s: %v", lang, err))
			case res.End != EndError || res.Signal != "SIGKILL":
				bad = append(bad, fmt.Sprintf("%s: %s %q (%s)", lang, res.End, res.Signal, res.Message))
			}
		}()
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Errorf("%d of 36 self-killed runs did not end error by SIGKILL: %v", len(bad), bad)
	}
}

// sandboxInitOf is the one process below ancestor that is the first of a pid
// namespace of its own (its NSpid ends in 1): a sandbox's init.
func sandboxInitOf(ancestor int) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var found []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		var nspid []string
		for _, line := range strings.Split(string(status), "\n") {
			if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
				nspid = strings.Fields(rest)
			}
		}
		if len(nspid) != 2 || nspid[1] != "1" {
			continue
		}
		for p := pid; p > 1; {
			if p = parentOf(p); p == ancestor {
				found = append(found, pid)
				break
			}
		}
	}
	if len(found) != 1 {
		return 0, fmt.Errorf("found %d sandbox inits below %d (%v), want 1", len(found), ancestor, found)
	}
	return found[0], nil
}

// parentOf is pid's parent, or 0 when it can't be read.
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces and parentheses: the fields after it
	// follow its last ')'.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}
