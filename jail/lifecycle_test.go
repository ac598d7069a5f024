package jail

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/rootfs"
)

// TestCloseWaitsForRunsAndRefusesNew: Close returns only after a run under way has
// ended and been cleaned up (the leak check proves the cleanup), a Run after it is
// ErrClosed, and a second Close is harmless.
func TestCloseWaitsForRunsAndRefusesNew(t *testing.T) {
	l := newTestLauncher(t, 1)
	started := make(chan struct{})
	done := make(chan *Result)
	go func() {
		spec := Spec{
			Language: rootfs.Python, Code: "import time; time.sleep(0.5); print('done')",
			Timeout: 10 * time.Second, MemoryBytes: api.DefaultMemoryMiB << 20,
			OnStart: func(time.Time) { close(started) },
		}
		res, err := launch(context.Background(), l, spec)
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		if err := checkPath(l, spec, res); err != nil {
			t.Error(err)
		}
		done <- res
	}()
	<-started
	closed := make(chan struct{})
	go func() { l.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a run was under way")
	case res := <-done:
		if !res.Succeeded() || res.Stdout != "done\n" {
			t.Errorf("the run under Close: got %s %q (%s), want succeeded \"done\\n\"", res.End, res.Stdout, res.Message)
		}
	}
	<-closed
	if _, err := l.Run(context.Background(), Spec{Language: rootfs.Python, Code: "pass", Timeout: time.Second, MemoryBytes: api.DefaultMemoryMiB << 20}); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close: got %v, want ErrClosed", err)
	}
	l.Close()
}

// TestProgramRunsAtNormalPriority: pooled inits prepare at nice 19, but a run's
// program must not inherit it, pooled or not.
func TestProgramRunsAtNormalPriority(t *testing.T) {
	for _, pool := range []int{0, 1} {
		t.Run(fmt.Sprintf("pool=%d", pool), func(t *testing.T) {
			l := newTestLauncher(t, pool)
			time.Sleep(100 * time.Millisecond) // let a pooled init prepare
			res := run(t, l, rootfs.Python, "import os; print(os.nice(0))")
			if res.Stdout != "0\n" {
				t.Errorf("the program's nice value: got %q (%s), want 0", res.Stdout, res.Message)
			}
		})
	}
}

func TestLeftoverOfDeadProcess(t *testing.T) {
	dead := exec.Command("/bin/true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want bool
	}{
		{fmt.Sprintf("run-%d-1", os.Getpid()), false},
		{fmt.Sprintf("run-%d-7", dead.Process.Pid), true},
		{"run-x-1", false},
		{"something-else", false},
		{"run-0-1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := LeftoverOfDeadProcess(tc.name); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestProgramTimerSlack: a program's timer slack is the kernel's default,
// not what the thread that cloned its sandbox had: every thread of this test
// process has a millisecond (as threads that the service's runtime monitor
// starts have, cmd/brig's serve) while the Launcher starts.
func TestProgramTimerSlack(t *testing.T) {
	testutil.RequireRoot(t)
	setThreadsSlack(t, 1_000_000)
	t.Cleanup(func() { setThreadsSlack(t, sandboxTimerSlack) })
	for _, pool := range []int{0, 1} {
		t.Run(fmt.Sprintf("pool=%d", pool), func(t *testing.T) {
			l := newTestLauncher(t, pool)
			for lang, code := range map[rootfs.Language]string{
				rootfs.Python:     "print(open('/proc/self/timerslack_ns').read().strip())",
				rootfs.JavaScript: "console.log(require('fs').readFileSync('/proc/self/timerslack_ns', 'utf8').trim())",
			} {
				res := run(t, l, lang, code)
				if want := fmt.Sprintf("%d\n", sandboxTimerSlack); res.Stdout != want {
					t.Errorf("%s: the program's timer slack: got %q (%s), want %q", lang, res.Stdout, res.Message, want)
				}
			}
		})
	}
}

// setThreadsSlack sets the timer slack of every thread of this process; a
// thread started later inherits its starter's. Twice over the list: a thread
// started meanwhile by one not yet set is set the second time.
func setThreadsSlack(tb testing.TB, ns int) {
	tb.Helper()
	for range 2 {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			tb.Fatal(err)
		}
		for _, e := range ents {
			err := os.WriteFile("/proc/"+e.Name()+"/timerslack_ns", []byte(strconv.Itoa(ns)), 0)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				tb.Fatal(err)
			}
		}
	}
}

// TestStopBeforeTheRunIsSent: a run stopped before its init has it (here, before
// Run was called) never starts its program, and its result says so, with no
// signal: nothing killed a program that never ran (the limits probe of
// 2026-12-06 got SIGKILL). Both languages, pooled and fresh sandboxes.
func TestStopBeforeTheRunIsSent(t *testing.T) {
	for _, pool := range []int{0, 1} {
		// A launcher a subtest's own: each is closed, and checked for
		// leaks, before the next is made (the warm pass's pooled sandboxes
		// of the first had read as the second's leaks).
		t.Run(fmt.Sprintf("pool %d", pool), func(t *testing.T) { stopBeforeTheRunIsSent(t, newTestLauncher(t, pool)) })
	}
}

// stopBeforeTheRunIsSent is TestStopBeforeTheRunIsSent's check of l, in both
// languages.
func stopBeforeTheRunIsSent(t *testing.T, l *Launcher) {
	for _, lang := range []rootfs.Language{rootfs.Python, rootfs.JavaScript} {
		t.Run(lang.String(), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			started := false
			spec := Spec{Language: lang, Code: map[rootfs.Language]string{rootfs.Python: "print('ran')", rootfs.JavaScript: "console.log('ran')"}[lang],
				Timeout: 10 * time.Second, MemoryBytes: api.DefaultMemoryMiB << 20,
				OnStart: func(time.Time) { started = true }}
			res, err := l.Run(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			if res.End != EndStopped || res.Signal != "" || res.ExitCode != nil || res.Started || started || res.Stdout != "" ||
				res.Message != "the run was stopped before its program started; the program did not run" {
				t.Errorf("got end %q signal %q exit code %v started %v/%v stdout %q message %q, want stopped with no signal, not started",
					res.End, res.Signal, res.ExitCode, res.Started, started, res.Stdout, res.Message)
			}
		})
	}
}
