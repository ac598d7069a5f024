package jail

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/api"
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
			OnStart: func() { close(started) },
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
