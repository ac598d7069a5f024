package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/internal/testutil"
)

// TestRootfsBuildStopsOnSignal: a signal to brig rootfs build stops
// debootstrap, which runs in a process group of its own (a terminal's Ctrl-C
// reaches brig alone), and removes the partial tree: brig had exited and left
// both (the operator probe of 2026-12-06). A stand-in debootstrap on PATH
// writes into its target and waits.
func TestRootfsBuildStopsOnSignal(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	pidFile := filepath.Join(dir, "debootstrap.pid")
	// Its target is the argument before the mirror, its last.
	fake := "#!/bin/sh\necho $$ > " + pidFile + "\nfor a; do target=$prev; prev=$a; done\nmkdir -p \"$target/usr\" && echo partial > \"$target/usr/file\"\nexec sleep 60\n"
	if err := os.WriteFile(filepath.Join(bin, "debootstrap"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "rootfs")
	os.Mkdir(out, 0o755)
	cmd := exec.Command(os.Args[0], "rootfs", "build", "--dir", filepath.Join(out, "python"), "--mirror", "http://127.0.0.1:9/debian", "--suite", "bookworm", "python")
	cmd.Env = append(os.Environ(), "BRIG_CLI=1", "PATH="+bin+":"+os.Getenv("PATH"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var pid int
	deadline := time.Now().Add(10 * time.Second)
	for pid == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the stand-in debootstrap did not start in 10 s; brig said:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
		if b, err := os.ReadFile(pidFile); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
	}
	time.Sleep(200 * time.Millisecond) // its tree written
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), "stopped by a signal") {
		t.Errorf("got %v, stderr %q; want exit 2 saying a signal stopped the build", err, stderr.String())
	}
	if syscall.Kill(pid, 0) == nil {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("got debootstrap (pid %d) still running after brig stopped, want it killed", pid)
	}
	if left, _ := filepath.Glob(filepath.Join(out, ".python.build-*")); len(left) > 0 {
		t.Errorf("got the partial tree %v left, want it removed", left)
	}
}
