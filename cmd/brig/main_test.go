package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/cgroup"
	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/jail/pid1"
	"github.com/brig-sandbox/brig/rootfs"
)

// TestMain lets the test binary be brig itself: the CLI tests run it with
// BRIG_CLI=1, and the jail re-executes it as a run's init and as a zygote's
// (pid1.Main, first, as brig's main does: the zygote's init gets neither
// BRIG_CLI nor "init", and until 2026-12-03 ran this package's tests
// instead, as root in a half-made sandbox, which left their temporary
// directories behind and gave the services under test no warm Python).
func TestMain(m *testing.M) {
	pid1.Main()
	if os.Getenv("BRIG_CLI") == "1" || (len(os.Args) == 2 && os.Args[1] == "init") {
		if d, err := time.ParseDuration(os.Getenv("BRIG_TEST_WAIT")); err == nil {
			stopWait, acceptWait = d, d // brig run's waits, shortened
		}
		main()
		os.Exit(0)
	}
	code := m.Run()
	if os.Geteuid() == 0 {
		for _, p := range []string{cliCgroupParent, cliServeParent} {
			if err := testutil.RemoveCgroupParent(p); err != nil {
				fmt.Fprintln(os.Stderr, err)
				code = 1
			}
		}
	}
	os.Exit(code)
}

const cliCgroupParent = "brig-test-cli"

// brig runs the CLI with args and stdin, and returns its stdout, stderr and exit
// status.
func brig(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return brigCmd(t, exec.Command(os.Args[0], args...), stdin)
}

// brigWithin is brig without stdin, stopped after d: SIGTERM, as an operator
// stops the service, so that it cleans up after itself, and SIGKILL 10 s later.
func brigWithin(t *testing.T, d time.Duration, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	return brigCmd(t, cmd, "")
}

func brigCmd(t *testing.T, cmd *exec.Cmd, stdin string) (string, string, int) {
	t.Helper()
	cmd.Env = append(os.Environ(), "BRIG_CLI=1")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case errors.Is(err, context.DeadlineExceeded) && cmd.ProcessState != nil:
		code = cmd.ProcessState.ExitCode() // stopped by brigWithin
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func localFlags(t *testing.T) []string {
	return []string{"--local", "--state-dir", t.TempDir(), "--cgroup-parent", cliCgroupParent}
}

// runCase is one `brig run` and what it must print and exit with.
type runCase struct {
	name       string
	args       []string
	stdin      string
	wantOut    string
	wantErr    string
	wantStatus int
}

// scriptWriter returns a function that writes a program into dir and gives its
// path.
func scriptWriter(t *testing.T, dir string) func(name, body string) string {
	return func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// commonRunCases hold whichever way brig run runs a program, in this process
// or through the service: output streams to the terminal, and the exit status is
// the program's own or the documented one.
func commonRunCases(script func(name, body string) string) []runCase {
	return []runCase{
		{"python file", []string{"--language", "python", script("a.py", "print('hi')")}, "", "hi\n", "", 0},
		{"program's exit status", []string{"-l", "python", script("b.py", "import sys; print('x'); sys.exit(3)")}, "", "x\n", "", 3},
		{"stdin", []string{"-l", "python", "-"}, "print(6*7)", "42\n", "", 0},
		{"javascript", []string{"-l", "javascript", script("c.js", "console.log('js'); process.exit(4)")}, "", "js\n", "", 4},
		{"stderr", []string{"-l", "python", script("d.py", "import sys; sys.stderr.write('oops\\n')")}, "", "", "oops\n", 0},
		{"env", []string{"-l", "python", "--env", "GREETING=hello", script("e.py", "import os; print(os.environ['GREETING'])")}, "", "hello\n", "", 0},
		{"death by signal", []string{"-l", "python", script("f.py", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")}, "", "", "killed by SIGTERM", 128 + 15},
		{"timeout", []string{"-l", "python", "--timeout", "1", script("g.py", "import time; time.sleep(30)")}, "", "", "time limit", exitTimeout},
		{"memory", []string{"-l", "python", "--memory", "128", script("h.py", "b = bytearray(1 << 30)")}, "", "", "memory limit", exitMemory},
		{"reserved env", []string{"-l", "python", "--env", "PATH=/x", script("i.py", "pass")}, "", "", "reserved by brig", 2},
		// A value is not cut at its commas (nor a package request's, "a>=1,<2").
		{"env with commas", []string{"-l", "python", "--env", "LIST=a,b,c", script("l.py", "import os; print(os.environ['LIST'])")}, "", "a,b,c\n", "", 0},
		{"no file", []string{"-l", "python", "/nonexistent/missing.py"}, "", "", "reading the program", 2},
		{"flags after FILE", []string{script("k.py", "print(1)"), "-l", "python", "--timeout", "5"}, "", "1\n", "", 0},
	}
}

// checkRunCases runs each case as brig run with prefix before its arguments.
func checkRunCases(t *testing.T, prefix []string, cases []runCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, status := brig(t, tc.stdin, append(append([]string{"run"}, prefix...), tc.args...)...)
			if status != tc.wantStatus {
				t.Errorf("exit status: got %d, want %d (stderr %q)", status, tc.wantStatus, errs)
			}
			if out != tc.wantOut {
				t.Errorf("stdout: got %q, want %q", out, tc.wantOut)
			}
			if !strings.Contains(errs, tc.wantErr) {
				t.Errorf("stderr: got %q, want it to contain %q", errs, tc.wantErr)
			}
		})
	}
}

func TestRunLocal(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CheckLeaks(t, cliCgroupParent)
	script := scriptWriter(t, t.TempDir())
	// Refused as the service refuses them, naming the field and its flag
	// (the CLI audit: "invalid run spec: the timeout 5m1s is outside 1s to
	// 300s", and any --id taken).
	cases := append(commonRunCases(script),
		runCase{"memory out of bounds", []string{"-l", "python", "--memory", "64", script("j.py", "pass")}, "", "", "memory_mib is 64; give a whole number of MiB from 128 to 2048 (leave it out for 512) [--memory]", 2},
		runCase{"timeout out of bounds", []string{"-l", "python", "--timeout", "301", script("j.py", "pass")}, "", "", "timeout_seconds is 301; give a whole number of seconds from 1 to 300 (leave it out for 30) [--timeout]", 2},
		runCase{"bad id", []string{"-l", "python", "--id", "bad/id", script("j.py", "pass")}, "", "", "id contains '/'", 2})
	checkRunCases(t, localFlags(t), cases)
	out, _, status := brig(t, "", append(append([]string{"run"}, localFlags(t)...), "--json", "-l", "python", "--timeout", "0", script("j.py", "pass"))...)
	var body api.ErrorBody
	if err := json.Unmarshal([]byte(out), &body); err != nil || status != 2 || body.Error.Code != api.ErrorInvalidRequest ||
		body.Error.Field != "timeout_seconds" || !strings.HasPrefix(body.Error.Message, "is 0; ") {
		t.Errorf("--json --timeout 0: exit %d, stdout %q (%v); want 2 and the service's invalid_request body for timeout_seconds", status, out, err)
	}
}

// TestRunLocalUnderAServicesParent: brig run --local is refused on the
// parent a service owns, whose sweep at its start and removal at its stop
// would kill its runs (the last sessions' note: nothing stopped it), with
// what to do instead; and a service is refused while such a run holds it
// (cgroup.TestShareParent).
func TestRunLocalUnderAServicesParent(t *testing.T) {
	testutil.RequireRoot(t)
	const parent = cliCgroupParent + "-owned"
	owner, err := cgroup.LockParent("", parent)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(cgroup.ParentLockPath("", parent))
	defer owner.Close()
	prog := filepath.Join(t.TempDir(), "p.py")
	os.WriteFile(prog, []byte("print(1)\n"), 0o644)
	out, errs, status := brig(t, "", "run", "--local", "--state-dir", t.TempDir(), "--cgroup-parent", parent, "-l", "python", prog)
	if status == 0 || out != "" || !strings.Contains(errs, "a brig serve owns the cgroup parent") || !strings.Contains(errs, "another --cgroup-parent") {
		t.Errorf("run --local under a service's parent: exit %d, stdout %q, stderr %q; want it refused, saying what to do", status, out, errs)
	}
	for _, h := range []string{"memory", "pids", "cpu", "unified"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", h, parent)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the refused run made the parent in %s: %v", h, err)
		}
	}
}

// TestLocalVerbsLeaveAForeignParent: brig run --local refuses a parent that
// holds what brig did not make, before it writes a file of it, as the service
// does (the review of 2026-12-06: it set a foreign group's memory.swappiness
// to 0 and removed its empty directories); and brig check, while a service
// owns its --cgroup-parent, neither removes that parent, idle as it is, nor
// runs its sandboxes there, but beside local runs.
func TestLocalVerbsLeaveAForeignParent(t *testing.T) {
	testutil.RequireRoot(t)
	const foreign, owned = cliCgroupParent + "-foreign", cliCgroupParent + "-idle-service"
	var dirs, ownedDirs []string
	for _, h := range []string{"memory", "pids", "cpu", "unified"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", h, "cgroup.procs")); err != nil {
			t.Skipf("expects the hybrid layout of the development hosts: %v", err)
		}
		dirs = append(dirs, filepath.Join("/sys/fs/cgroup", h, foreign))
		ownedDirs = append(ownedDirs, filepath.Join("/sys/fs/cgroup", h, owned))
	}
	theirs := filepath.Join(dirs[0], "theirs")
	defer func() {
		os.Remove(theirs)
		for _, d := range append(dirs, ownedDirs...) {
			os.Remove(d)
		}
		os.Remove(cgroup.ParentLockPath("", foreign))
		os.Remove(cgroup.ParentLockPath("", owned))
		os.Remove(cgroup.ParentLockPath("", owned+"/sub"))
	}()
	for _, d := range append(dirs, ownedDirs...) {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	swappiness := filepath.Join(dirs[0], "memory.swappiness")
	if err := os.WriteFile(swappiness, []byte("37"), 0); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(t.TempDir(), "p.py")
	os.WriteFile(prog, []byte("print(1)\n"), 0o644)
	out, errs, status := brig(t, "", "run", "--local", "--state-dir", t.TempDir(), "--cgroup-parent", foreign, "-l", "python", prog)
	if status == 0 || out != "" || !strings.Contains(errs, "holds groups brig did not make (theirs)") {
		t.Errorf("run --local on a foreign parent: exit %d, stdout %q, stderr %q; want it refused, naming the group", status, out, errs)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("the foreign parent's %s: got %v, want it left", d, err)
		}
	}
	if b, _ := os.ReadFile(swappiness); strings.TrimSpace(string(b)) != "37" {
		t.Errorf("the foreign parent's memory.swappiness: got %q, want it left at 37", b)
	}
	service, err := cgroup.LockParent("", owned) // an idle service's
	if err != nil {
		t.Fatal(err)
	}
	defer service.Close()
	out, _, _ = brig(t, "", "check", "--no-resolve", "--state-dir", t.TempDir(), "--cgroup-parent", owned)
	if !strings.Contains(out, "(under brig-local: a running service owns "+owned+" or a group above it)") ||
		!strings.Contains(out, "a running brig serve owns it or a group above it") {
		t.Errorf("check under a service's parent: got\n%s\nwant its sandboxed runs under brig-local, saying why", out)
	}
	for _, d := range ownedDirs {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("the idle service's parent %s after a check: got %v, want it left", d, err)
		}
	}
	// A group within the service's parent is not made (the review of
	// 2026-12-06: it stayed, and the service's restart after a crash
	// refused its parent for holding it).
	out, _, _ = brig(t, "", "check", "--no-resolve", "--state-dir", t.TempDir(), "--cgroup-parent", owned+"/sub")
	for _, d := range ownedDirs {
		if _, err := os.Stat(filepath.Join(d, "sub")); !errors.Is(err, fs.ErrNotExist) {
			os.Remove(filepath.Join(d, "sub"))
			t.Errorf("a check of a group within a service's parent made %s: %v", filepath.Join(d, "sub"), err)
		}
	}
	if !strings.Contains(out, "a running brig serve owns it or a group above it") {
		t.Errorf("check of a group within a service's parent: got\n%s\nwant the controllers not checked, saying why", out)
	}
}

// TestOlderBrigsLockRefused: a service or a local run is refused on a parent
// an older brig service owns (its lock, before 2026-12-06, was in /run/lock,
// with "/" as "_"), or a group within it, which no lock of this build's would
// see (the upgrade probe of 2026-12-06 saw each kill the other's runs); a file
// there that is not root's counts for nothing, since anyone may make one. A
// check of a parent that holds a running brig's parent names it so.
func TestOlderBrigsLockRefused(t *testing.T) {
	testutil.RequireRoot(t)
	const parent = cliCgroupParent + "-older"
	legacy := "/run/lock/brig-cgroup-" + parent + ".lock"
	if err := os.WriteFile(legacy, nil, 0o600); err != nil {
		t.Skipf("no /run/lock to make an older brig's lock in: %v", err)
	}
	defer func() {
		os.Remove(legacy)
		for _, h := range []string{"memory", "pids", "cpu", "unified"} {
			os.Remove(filepath.Join("/sys/fs/cgroup", h, parent, "svc"))
			os.Remove(filepath.Join("/sys/fs/cgroup", h, parent))
		}
		for _, p := range []string{parent, parent + "/x", parent + "/svc"} {
			os.Remove(cgroup.ParentLockPath("", p))
		}
	}()
	hold := func(mode, path string) func() {
		t.Helper()
		cmd := exec.Command("flock", mode, path, "sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Skipf("no flock(1) to hold a lock from another process: %v", err)
		}
		var st syscall.Stat_t
		syscall.Stat(path, &st)
		key := fmt.Sprintf(":%d ", st.Ino)
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if b, _ := os.ReadFile("/proc/locks"); strings.Contains(string(b), key) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not held within 5 s", path)
			}
		}
		return func() {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}
	release := hold("-x", legacy)
	state := t.TempDir()
	_, stderr, code := brigWithin(t, 20*time.Second, "serve", "--socket", filepath.Join(state, "brig.sock"), "--state-dir", state, "--cgroup-parent", parent, "--pool", "0")
	want := fmt.Sprintf("an older brig serve (before 2026-12-06) uses the cgroup parent %q", parent)
	if code == 0 || !strings.Contains(stderr, want) {
		t.Errorf("serve on an older brig's parent: exit %d, %q; want it refused with %q", code, stderr, want)
	}
	prog := filepath.Join(t.TempDir(), "p.py")
	os.WriteFile(prog, []byte("print(1)\n"), 0o644)
	out, stderr, code := brig(t, "", "run", "--local", "--state-dir", t.TempDir(), "--cgroup-parent", parent+"/x", "-l", "python", prog)
	if code == 0 || out != "" || !strings.Contains(stderr, want) {
		t.Errorf("run --local within an older brig's parent: exit %d, %q %q; want it refused with %q", code, out, stderr, want)
	}
	release()
	// Another user's file, held: nothing of brig's.
	if err := os.Chown(legacy, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	release = hold("-x", legacy)
	out, stderr, code = brig(t, "", "run", "--local", "--state-dir", t.TempDir(), "--cgroup-parent", parent+"/x", "-l", "python", prog)
	release()
	if code != 0 || out != "1\n" {
		t.Errorf("run --local beside another user's lock file in /run/lock: exit %d, %q %q; want it run", code, out, stderr)
	}
	// A check of a parent that holds a running brig's parent names it so,
	// not as a group brig did not make.
	svc := filepath.Join("/sys/fs/cgroup/memory", parent, "svc")
	if err := os.MkdirAll(svc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cgroup.ParentLockPath("", parent+"/svc"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	release = hold("-x", cgroup.ParentLockPath("", parent+"/svc"))
	defer release()
	out, _, _ = brig(t, "", "check", "--no-resolve", "--state-dir", t.TempDir(), "--cgroup-parent", parent)
	if !strings.Contains(out, "holds the cgroup parents of running brig processes (svc)") || strings.Contains(out, "did not make") {
		t.Errorf("check of a parent that holds a running brig's: got\n%s\nwant svc named as a running brig's parent", out)
	}
}

// startPiped starts the CLI with args, its stdout a pipe the caller reads.
func startPiped(t *testing.T, args ...string) (*exec.Cmd, io.ReadCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "BRIG_CLI=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

// TestRunLocalSlowReader: a reader of brig run --local's output slower than
// the run gets all of it, where the drains' grace after the run's end had
// left it what the pipe held (the review: 65,536 of 300,000 bytes, exit 0).
func TestRunLocalSlowReader(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CheckLeaks(t, cliCgroupParent)
	prog := filepath.Join(t.TempDir(), "p.py")
	os.WriteFile(prog, []byte("import sys\nsys.stdout.write('x' * 300000)\n"), 0o644)
	cmd, out := startPiped(t, append(append([]string{"run"}, localFlags(t)...), "-l", "python", prog)...)
	defer cmd.Process.Kill()
	time.Sleep(4 * time.Second) // past the run, and its drains' grace
	b, err := io.ReadAll(out)
	if werr := cmd.Wait(); len(b) != 300000 || err != nil || werr != nil {
		t.Errorf("read %d bytes (%v), brig run %v; want all 300000 and exit 0", len(b), err, werr)
	}
}

// TestRunStopInAUserNamespace: brig run in a user namespace, whose uid the
// service knows by another, stops its run by its id alone: a stop naming its
// namespace's uid found nothing (the review of 2026-12-06, under unshare -r).
func TestRunStopInAUserNamespace(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	testutil.Require(t, err == nil && exec.Command(unshare, "-U", "-r", "true").Run() == nil, "this host can't make a user namespace with unshare -U -r")
	posted, deleted := make(chan struct{}, 1), make(chan string, 10)
	sock := testutil.ServeUnix(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost:
			posted <- struct{}{}
			<-r.Context().Done()
		case http.MethodDelete:
			deleted <- r.URL.RawQuery
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"id":"x","language":"python","state":"finished","status":"failed","reason":"stopped","outcome":"failed"}`))
		}
	})
	prog := filepath.Join(t.TempDir(), "p.py")
	os.WriteFile(prog, []byte("print(1)\n"), 0o644)
	cmd := exec.Command(unshare, "-U", "-r", os.Args[0], "run", "--socket", sock, "-l", "python", prog)
	cmd.Env = append(os.Environ(), "BRIG_CLI=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	select {
	case <-posted:
	case <-time.After(10 * time.Second):
		t.Fatal("brig run sent no request")
	}
	// unshare execs brig run in its own place: the signal reaches it.
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case q := <-deleted:
		if q != "" {
			t.Errorf("got a DELETE with ?%s, want the id alone: the namespace's uid is not the one the service knows", q)
		}
	case <-time.After(10 * time.Second):
		t.Error("got no DELETE after the Ctrl-C")
	}
	cmd.Wait()
}

// TestRunRemoteSlowReader: a reader of brig run's output that pauses longer
// than the service waits on a stream's write still gets all of it, and the
// run's status. The fake service drops a stream it can't write for 2 s, as
// the service does after 30 (the clients probe of 2026-12-06: 340,223 of
// 408,051 bytes, exit 2, for a run that had succeeded).
func TestRunRemoteSlowReader(t *testing.T) {
	const size = 1_000_000
	sock := testutil.ServeUnix(t, func(w http.ResponseWriter, r *http.Request) {
		var req api.Request
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/x-ndjson")
		rc := http.NewResponseController(w)
		enc := json.NewEncoder(w)
		send := func(ev api.Event) bool {
			rc.SetWriteDeadline(time.Now().Add(2 * time.Second))
			return enc.Encode(ev) == nil && rc.Flush() == nil
		}
		if !send(api.Event{Event: api.EventAccepted, ID: req.ID}) {
			return
		}
		chunk := strings.Repeat("x", 10_000)
		for range size / len(chunk) {
			if !send(api.Event{Event: api.EventStdout, Data: chunk}) {
				return // the connection is dropped, as the service drops it
			}
		}
		code := 0
		send(api.Event{Event: api.EventResult, Result: &api.Result{ID: req.ID, Language: "python", State: api.StateFinished,
			Status: api.StatusCompleted, Outcome: api.OutcomeSucceeded, ExitCode: &code}})
	})
	prog := filepath.Join(t.TempDir(), "p.py")
	os.WriteFile(prog, []byte("print(1)\n"), 0o644)
	cmd, out := startPiped(t, "run", "--socket", sock, "-l", "python", prog)
	defer cmd.Process.Kill()
	time.Sleep(4 * time.Second) // past the fake's 2 s
	b, err := io.ReadAll(out)
	if werr := cmd.Wait(); len(b) != size || err != nil || werr != nil {
		t.Errorf("read %d bytes (%v), brig run %v; want all %d and exit 0", len(b), err, werr, size)
	}
}

// TestRunOutputWriteFails: output that can't be written (a full disk) stops
// the run and says why, where it had been dropped unseen and the program's
// status given (the CLI audit: `brig run f.py > /dev/full` exited 3, silent).
func TestRunOutputWriteFails(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CheckLeaks(t, cliCgroupParent)
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("this host has no /dev/full: %v", err)
	}
	defer full.Close()
	// A program still going is stopped; one that ended first (the review)
	// does not give its status either.
	for _, code := range []string{"import sys, time\nprint('x', flush=True)\ntime.sleep(30)\nsys.exit(3)\n", "print('x')\n"} {
		prog := filepath.Join(t.TempDir(), "p.py")
		os.WriteFile(prog, []byte(code), 0o644)
		cmd := exec.Command(os.Args[0], append(append([]string{"run"}, localFlags(t)...), "-l", "python", prog)...)
		cmd.Env = append(os.Environ(), "BRIG_CLI=1")
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = full, &stderr
		start := time.Now()
		cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(stderr.String(), "writing the program's output failed") ||
			!strings.Contains(stderr.String(), "its status") || time.Since(start) > 20*time.Second {
			t.Errorf("brig run > /dev/full: exit %d after %v, stderr %q; want 2 at once and the failure said", code, time.Since(start).Round(time.Millisecond), stderr.String())
		}
	}
}

func TestRunLocalJSON(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CheckLeaks(t, cliCgroupParent)
	args := append([]string{"run"}, localFlags(t)...)
	out, errs, status := brig(t, "print('é' * 3)\nraise SystemExit(2)", append(args, "-l", "python", "--json", "--id", "run-1", "-")...)
	if status != 2 {
		t.Fatalf("exit status: got %d, want 2 (stderr %q)", status, errs)
	}
	var res api.Result
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("decoding the result %q: %v", out, err)
	}
	for _, c := range []struct{ what, got, want string }{
		{"id", res.ID, "run-1"},
		{"language", res.Language.String(), "python"},
		{"state", res.State.String(), api.StateFinished.String()},
		{"status", res.Status.String(), api.StatusFailed.String()},
		{"reason", string(res.Reason), string(api.ReasonError)},
		{"outcome", string(res.Outcome), string(api.OutcomeFailed)},
		{"stdout", res.Stdout, "ééé\n"},
		{"network mode", res.Network.Mode, api.NetworkNone},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %q, want %q", c.what, c.got, c.want)
		}
	}
	if res.ExitCode == nil || *res.ExitCode != 2 {
		t.Errorf("exit_code: got %v, want 2", res.ExitCode)
	}
	if res.Usage.WallMS <= 0 || res.Usage.PeakMemoryBytes <= 0 || res.Timing.TotalMS < res.Timing.StartMS {
		t.Errorf("usage %+v timing %+v: want a positive wall time and peak, total >= start", res.Usage, res.Timing)
	}
}

func TestCheck(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CheckLeaks(t, cliCgroupParent)
	out, errs, status := brig(t, "", "check", "--no-resolve", "--state-dir", t.TempDir(), "--cgroup-parent", cliCgroupParent)
	if status != 0 {
		t.Fatalf("brig check: got exit status %d, want 0\n%s%s", status, out, errs)
	}
	for _, want := range []string{"pass  kernel", "pass  seccomp", "pass  cgroup controllers", "pass  one view of /usr", "pass  sandboxed run python", "pass  sandboxed run javascript"} {
		if !strings.Contains(out, want) {
			t.Errorf("brig check output lacks %q:\n%s", want, out)
		}
	}
}

// viewOffRoots is a host rootfs without its view of /usr.
type viewOffRoots struct{}

func (viewOffRoots) Name() string { return "host" }
func (viewOffRoots) Root(lang rootfs.Language) (*rootfs.Root, error) {
	return &rootfs.Root{Language: lang, Binds: []rootfs.Bind{{Source: "/usr/bin", Target: "/usr/bin"}}}, nil
}
func (viewOffRoots) ViewOff() (string, string) {
	return "no trusted attributes", "move the state directory"
}

// TestUsrViewCheck: brig check (and the service's start) warns, with why and
// what to do, where the host rootfs mounts each part of /usr on its own, and
// says nothing of a rootfs that binds no host folder.
func TestUsrViewCheck(t *testing.T) {
	ch, ok := usrViewCheck(viewOffRoots{})
	if !ok || !ch.OK || !ch.Warn || !strings.Contains(ch.Detail, "no trusted attributes") || ch.Hint != "move the state directory" {
		t.Errorf("without the view: got %+v, %v; want a warning with why and the hint", ch, ok)
	}
	if ch, ok := usrViewCheck(builtRoots{}); ok {
		t.Errorf("a built rootfs: got %+v, want no check", ch)
	}
}

// builtRoots is a rootfs that binds no host folder.
type builtRoots struct{ viewOffRoots }

func (builtRoots) Root(lang rootfs.Language) (*rootfs.Root, error) {
	return &rootfs.Root{Language: lang}, nil
}

func TestInterspersed(t *testing.T) {
	cmds := []*cli.Command{runCommand(), rootfsCommand(), checkCommand()}
	for _, tc := range []struct {
		name string
		in   string
		want string
	}{
		{"flag after positional", "brig rootfs build python --dir /x", "brig rootfs build --dir /x -- python"},
		{"flags first already", "brig run --local -l python f.py", "brig run --local -l python -- f.py"},
		{"file first", "brig run f.py --local --timeout 5 -l python", "brig run --local --timeout 5 -l python -- f.py"},
		{"stdin dash", "brig run - --local -l python", "brig run --local -l python -- -"},
		{"value with equals", "brig run f.py --timeout=5", "brig run --timeout=5 -- f.py"},
		{"bool flag does not take the next", "brig run --json f.py", "brig run --json -- f.py"},
		{"double dash", "brig run -l python -- --weird-name.py", "brig run -l python -- --weird-name.py"},
		{"no positional", "brig check --pool 2", "brig check --pool 2"},
		{"unknown verb untouched", "brig nope a --b", "brig nope a --b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(interspersed(cmds, strings.Fields(tc.in)), " ")
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// brig bench refuses a flag the chosen benchmark would ignore, before it
// measures anything, with the reason.
func TestBenchRefusesFlagsItWouldIgnore(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--pool", "4"}, "--pool applies to --local only"},
		{[]string{"bench", "--heap-mib", "64"}, "--heap-mib applies to --local only"},
		{[]string{"bench", "--local", "-c", "4"}, "-c applies to the service benchmark"},
		{[]string{"bench", "--local", "--rss-runs", "4"}, "--rss-runs applies to the service benchmark"},
		{[]string{"bench", "--local", "--rounds", "3"}, "--rounds applies to the service benchmark"},
		{[]string{"bench", "-n", "0"}, "-n 0: give a positive number"},
		{[]string{"bench", "-n", "5", "-d", "1s"}, "-n and -d both set the length of each phase"},
		// Asked before any bare phase, which would run first and long.
		{[]string{"bench", "--socket", "/nonexistent/brig.sock", "-n", "1000"}, "asking the service at /nonexistent/brig.sock"},
	} {
		_, stderr, code := brig(t, "", tc.args...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("brig %v: exit %d, stderr %q; want a failure saying %q", tc.args, code, stderr, tc.want)
		}
	}
}

// TestUnknownCommand: an unknown verb is an error that names the verbs (exit
// 2), and `brig help` is the help.
func TestUnknownCommand(t *testing.T) {
	_, stderr, code := brig(t, "", "serv")
	if code != 2 || !strings.Contains(stderr, `unknown command "serv"`) || !strings.Contains(stderr, "serve, run, check") {
		t.Errorf("brig serv: exit %d, stderr %q; want 2 and the list of commands", code, stderr)
	}
	if out, stderr, code := brig(t, "", "help"); code != 0 || !strings.Contains(out, "COMMANDS") {
		t.Errorf("brig help: exit %d, stdout %q, stderr %q; want the help", code, out, stderr)
	}
	if out, stderr, code := brig(t, "", "help", "run"); code != 0 || !strings.Contains(out, "brig run - run one program") {
		t.Errorf("brig help run: exit %d, stdout %q, stderr %q; want run's help", code, out, stderr)
	}
	_, stderr, code = brig(t, "", "packages", "lss")
	if code != 2 || !strings.Contains(stderr, "the commands are ls, rm, prune (brig packages COMMAND --help)") {
		t.Errorf("brig packages lss: exit %d, stderr %q; want 2 and the list of packages' commands", code, stderr)
	}
}

// TestFailedCheckLeavesNoCgroup: a check that fails (here, an id range too
// small to be accepted) removes the cgroup parent it made to look at the
// controllers.
func TestFailedCheckLeavesNoCgroup(t *testing.T) {
	testutil.RequireRoot(t)
	const parent = "brig-test-check"
	out, _, code := brig(t, "", "check", "--no-resolve", "--cgroup-parent", parent, "--id-count", "100")
	if code == 0 || !strings.Contains(out, "FAIL") {
		t.Fatalf("brig check with 100 ids: exit %d, %q; want a failure", code, out)
	}
	for _, d := range []string{"memory", "pids", "cpu", "unified"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", d, parent)); err == nil {
			t.Errorf("the check left /sys/fs/cgroup/%s/%s", d, parent)
		}
	}
}

// brig check --config checks the service's config file, and the host with its
// [sandbox] keys; a bad file is a failing line, not the end of the check.
func TestCheckConfigFile(t *testing.T) {
	testutil.RequireRoot(t)
	const parent = "brig-test-check-config"
	p := filepath.Join(t.TempDir(), "brig.toml")
	os.WriteFile(p, []byte("queue_size = -2\nlog_format = \"xml\"\n[sandbox]\nid_first = 1000\n"), 0o644)
	out, _, code := brig(t, "", "check", "--no-resolve", "--config", p, "--cgroup-parent", parent)
	for _, want := range []string{"FAIL  config", "queue_size -2", `log format "xml": use json or text`, "FAIL  id range", "starts below 65536"} {
		if code != 1 || !strings.Contains(out, want) {
			t.Errorf("brig check --config: exit %d, want 1 and %q in:\n%s", code, want, out)
		}
	}
	// A flag is refused as the same key would be.
	out, _, code = brig(t, "", "check", "--no-resolve", "--cpus", "0", "--cgroup-parent", parent)
	if code != 1 || !strings.Contains(out, "FAIL  config") || !strings.Contains(out, "cpus 0: give a positive value") {
		t.Errorf("brig check --cpus 0: exit %d, want 1 and the refusal in:\n%s", code, out)
	}
	for _, d := range []string{"memory", "pids", "cpu", "unified"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", d, parent)); err == nil {
			t.Errorf("the check left /sys/fs/cgroup/%s/%s", d, parent)
		}
	}
}

// brig check --config checks the cgroup parent the file names, where serve's
// runs go (the sandboxed check runs keep brig-local), and says each warning
// serve would log of the file: the operator audit's foreign parent passed the
// check and failed serve.
func TestCheckConfigParentAndWarnings(t *testing.T) {
	testutil.RequireRoot(t)
	const parent = "brig-test-check-foreign"
	foreign := filepath.Join("/sys/fs/cgroup/memory", parent, "other")
	if err := os.MkdirAll(foreign, 0o755); err != nil {
		t.Skipf("making a foreign group in the memory hierarchy: %v", err)
	}
	t.Cleanup(func() {
		os.Remove(foreign)
		for _, d := range []string{"memory", "pids", "cpu", "cpuacct", "unified"} {
			os.Remove(filepath.Join("/sys/fs/cgroup", d, parent))
		}
	})
	p := filepath.Join(t.TempDir(), "brig.toml")
	os.WriteFile(p, []byte(fmt.Sprintf("state_dir = %q\nmemory_budget_mib = 100000000\nmax_concurrent = 100\n[sandbox]\ncpus = 64.0\nid_count = 128\ncgroup_parent = %q\n", t.TempDir(), parent)), 0o644)
	out, _, code := brig(t, "", "check", "--no-resolve", "--config", p)
	for _, want := range []string{"FAIL  cgroup parent", "groups brig did not make (other)", "brig serve would warn", "memory_budget_mib is more than", "sandbox.cpus is more than", "sandbox.id_count holds fewer sandboxes"} {
		if code != 1 || !strings.Contains(out, want) {
			t.Errorf("brig check --config naming a foreign parent: exit %d, want 1 and %q in:\n%s", code, want, out)
		}
	}
	// Warm starts asked for with no pool to hold them.
	os.WriteFile(p, []byte(fmt.Sprintf("state_dir = %q\n[sandbox]\npool = 0\nwarm = [\"python\"]\ncgroup_parent = %q\n", t.TempDir(), parent)), 0o644)
	if out, _, _ := brig(t, "", "check", "--no-resolve", "--config", p); !strings.Contains(out, "sandbox.warm names languages but sandbox.pool is 0") {
		t.Errorf("brig check --config with warm and pool 0: want the warning in:\n%s", out)
	}
}

// TestCheckMissingRootfs: a built rootfs that can't be opened is one failing
// line with what to do, not a crash of the check.
func TestCheckMissingRootfs(t *testing.T) {
	testutil.RequireRoot(t)
	const parent = "brig-test-check-rootfs"
	out, stderr, code := brig(t, "", "check", "--no-resolve", "--state-dir", t.TempDir(), "--cgroup-parent", parent, "--rootfs", "python=/nonexistent")
	if code != 1 || strings.Contains(stderr, "panic") || strings.Count(out, "FAIL  rootfs") != 1 || !strings.Contains(out, "brig rootfs build python --dir /nonexistent") {
		t.Errorf("brig check --rootfs python=/nonexistent: exit %d, want 1 and one failing rootfs line with the build command in:\n%s%s", code, out, stderr)
	}
	// A config file that brig serve would refuse fails the check too.
	p := filepath.Join(t.TempDir(), "brig.toml")
	os.WriteFile(p, []byte("[packages]\ninstall_memory_mib = 10\n"), 0o644)
	out, _, code = brig(t, "", "check", "--no-resolve", "--config", p, "--cgroup-parent", parent)
	if code != 1 || !strings.Contains(out, "FAIL  config") || !strings.Contains(out, "packages.install_memory_mib 10") {
		t.Errorf("brig check --config with install_memory_mib = 10: exit %d, want 1 and the key refused in:\n%s", code, out)
	}
}

// TestUsageErrorIsOneLine: a bad flag value is an error of one line that says
// what the flag wants and where the flags are listed, not the whole help text
// nor the flag package's "parse error".
func TestUsageErrorIsOneLine(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--timeout", "1.5", "x.py"}, `brig: --timeout "1.5": want a whole number: wall-clock limit in seconds (1-300)`},
		{[]string{"run", "--cpus", "x", "x.py"}, `--cpus "x": want a number: CPU limit of each run`},
		{[]string{"run", "--json=maybe", "x.py"}, `--json "maybe": want true or false`},
		{[]string{"serve", "--grace", "forever"}, `--grace "forever": want a duration such as 30s or 2m`},
		{[]string{"bench", "-n", "x"}, `-n "x": want a whole number: runs of each kind`},
		{[]string{"run", "--nosuch", "x.py"}, "there is no flag --nosuch"},
		{[]string{"run", "--timeout", "99999999999999999999", "x.py"}, `--timeout "99999999999999999999": value out of range: wall-clock limit`},
		{[]string{"run", "--id-first", "-1", "x.py"}, `--id-first "-1": want a whole number, 0 or more`},
		{[]string{"run", "--timeout", `1\2"`, "x.py"}, `--timeout "1\\2\"": want a whole number`},
		{[]string{"--nosuch", "run"}, "there is no flag --nosuch"},
		// A list of numbers had given strconv's own words.
		{[]string{"serve", "--allow-uid", "root"}, `--allow-uid "root": want a whole number (the flag repeats for more)`},
		// The flag package reads these in another base: 8, 16 (the limits probe).
		{[]string{"run", "--timeout", "010", "x.py"}, `--timeout "010": give it in decimal`},
		{[]string{"run", "x.py", "--memory=0x100"}, `--memory "0x100": give it in decimal`},
		{[]string{"serve", "--allow-uid", "1_000"}, `--allow-uid "1_000": give it in decimal`},
	} {
		_, stderr, code := brig(t, "", tt.args...)
		where := fmt.Sprintf("(brig %s --help lists the flags)", tt.args[0])
		if strings.HasPrefix(tt.args[0], "-") {
			where = "(brig --help lists the flags and commands)"
		}
		if code != 2 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, tt.want) ||
			!strings.Contains(stderr, where) || strings.Contains(stderr, "parse error") {
			t.Errorf("brig %q: exit %d, stderr %q; want 2 and one line saying %q and %q", tt.args, code, stderr, tt.want, where)
		}
	}
}

// brig run's exit status: the program's own where it has one, else one per
// reason, each its own.
func TestExitStatus(t *testing.T) {
	three := 3
	for _, tc := range []struct {
		res  api.Result
		want int
	}{
		{api.Result{Reason: api.ReasonNone, ExitCode: new(int)}, 0},
		{api.Result{Reason: api.ReasonError, ExitCode: &three}, 3},
		{api.Result{Reason: api.ReasonError, Signal: "SIGSEGV"}, 139},
		{api.Result{Reason: api.ReasonError, Signal: "SIGRTMIN+6"}, 168},
		{api.Result{Reason: api.ReasonError, Signal: "SIGRTMAX"}, 192},
		{api.Result{Reason: api.ReasonError, Signal: "SIG32"}, 160},
		{api.Result{Reason: api.ReasonError, Signal: "SIGNOTONE"}, 1},
		{api.Result{Reason: api.ReasonTimeout}, exitTimeout},
		{api.Result{Reason: api.ReasonMemory}, exitMemory},
		{api.Result{Reason: api.ReasonStopped}, exitStopped},
		{api.Result{Reason: api.ReasonPackageBlocked}, exitBlocked},
		{api.Result{Reason: api.ReasonPackageUnavailable}, exitNoPkg},
		{api.Result{Reason: api.ReasonInternal}, exitInternal},
	} {
		if got := exitStatus(&tc.res); got != tc.want {
			t.Errorf("%s %s: got %d, want %d", tc.res.Reason, tc.res.Signal, got, tc.want)
		}
	}
}

// On a terminal, brig run says which connections the egress refused and why.
func TestRefusals(t *testing.T) {
	var b strings.Builder
	conns := []api.Connection{
		{Host: "ok.test", Port: 443, Allowed: true, Rule: "domain ok.test"},
		{Host: "evil.test", Port: 80, Allowed: false, Rule: "not in the run's domains"},
		{Host: "ok.test", Port: 443, Allowed: true, Rule: "domain ok.test", Failure: "the run's byte limit was reached"},
	}
	for range 11 {
		conns = append(conns, api.Connection{Host: "x.test", Port: 0, Rule: "not in the run's domains"})
	}
	refusals(&b, conns)
	got := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(got) != 11 || got[0] != "brig: egress refused evil.test:80 (not in the run's domains)" ||
		got[1] != "brig: egress failed ok.test:443 (the run's byte limit was reached)" ||
		got[10] != "brig: and 3 more connections refused or failed (--json lists them)" {
		t.Errorf("got %q", got)
	}
}

// TestRunRefusesBadInvocations: brig run says what is wrong with its command
// line before it reaches any service (exit 2): a missing --language, with a
// FILE too; a program that is not UTF-8, which would otherwise reach the
// interpreter with U+FFFD in place of its bytes; a flag the mode chosen would
// ignore.
func TestRunRefusesBadInvocations(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.py"), filepath.Join(dir, "bad.py")
	os.WriteFile(good, []byte("print(1)\n"), 0o644)
	os.WriteFile(bad, []byte("print(\"\xff\")\n"), 0o644)
	sock := filepath.Join(dir, "none.sock")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--socket", sock, good}, "run needs --language python"},
		{[]string{"run", "--socket", sock, "-"}, "run needs --language python"},
		{[]string{"run", "--socket", sock, "-l", "python", bad}, "the program is not UTF-8 (byte 7, 0xff)"},
		{[]string{"run", "--local", "--socket", sock, "-l", "python", good}, "--socket applies to runs through the service, not --local"},
		{[]string{"run", "--pool", "2", "--socket", sock, "-l", "python", good}, "--pool applies to --local only"},
		{[]string{"run", "--socket", sock, "-l", "python", "/dev/zero"}, "the program is more than 4194304 bytes"},
		{[]string{"run", "--local", "-l", "python", "--domain", "example.com", good}, "drop --package, --network and --domain"},
		{[]string{"run", "--local", "-l", "python", "--warm", "python", good}, "--warm needs --pool"},
		{[]string{"run", "--socket", sock, "-l", "python", "--env", "A=1", "--env", "A=2", good}, "--env gives A twice"},
		// JSON would have carried U+FFFD in its place (the CLI audit).
		{[]string{"run", "--socket", sock, "-l", "python", "--env", "K=a\xffb", good}, "--env K: the value is not UTF-8"},
		{[]string{"serve", "/etc/brig/brig.toml"}, `brig serve takes no arguments, got ["/etc/brig/brig.toml"]; to read a config file, give it as --config /etc/brig/brig.toml`},
		{[]string{"check", "extra"}, `brig check takes no arguments`},
		// Past 32 bits, which a conversion cut to 0 (the operator audit).
		{[]string{"check", "--no-resolve", "--id-first", "4294967296"}, "--id-first 4294967296 is past the largest host id"},
		{[]string{"serve", "--id-count", "4294968296"}, "--id-count 4294968296 is past the largest host id"},
		{[]string{"packages", "ls", "extra"}, `brig packages ls takes no arguments`},
	} {
		_, stderr, code := brig(t, "", tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("brig %v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	// With --json, a request it refuses before sending is also the body the
	// service would answer, on stdout (it printed nothing there: the harness
	// probe).
	for _, tc := range []struct {
		args        []string
		code, field string
	}{
		{[]string{"-l", "python", "--env", "PATH=/x", good}, api.ErrorInvalidRequest, "env.PATH"},
		{[]string{"-l", "python", "--env", "1A=x", good}, api.ErrorInvalidRequest, "env.1A"},
		{[]string{"-l", "python", "--env", "A=1", "--env", "A=2", good}, api.ErrorInvalidRequest, "env.A"},
		{[]string{"-l", "python", "--env", "A", good}, api.ErrorInvalidRequest, "env"},
		{[]string{"-l", "python", bad}, api.ErrorInvalidRequest, "code"},
		{[]string{good}, api.ErrorInvalidRequest, "language"},
		// The service answers a body past its bound 413 too_large.
		{[]string{"-l", "python", "/dev/zero"}, api.ErrorTooLarge, ""},
	} {
		args := append([]string{"run", "--socket", sock, "--json"}, tc.args...)
		stdout, stderr, code := brig(t, "", args...)
		var body api.ErrorBody
		if err := json.Unmarshal([]byte(stdout), &body); err != nil || code != 2 || body.Error.Code != tc.code ||
			body.Error.Field != tc.field || body.Error.Message == "" || !strings.Contains(stderr, body.Error.Message) {
			t.Errorf("brig %v: exit %d, stdout %q (%v), stderr %q; want 2 and a %s body naming %q", args, code, stdout, err, stderr, tc.code, tc.field)
		}
	}
	// A file that can't be read is this machine's error, not the request's.
	if stdout, _, code := brig(t, "", "run", "--socket", sock, "--json", "-l", "python", filepath.Join(dir, "missing.py")); code != 2 || stdout != "" {
		t.Errorf("a missing program file: exit %d, stdout %q; want 2 and nothing on stdout", code, stdout)
	}
}

// TestVersion: brig --version names the build.
func TestVersion(t *testing.T) {
	out, _, code := brig(t, "", "--version")
	if code != 0 || !strings.HasPrefix(out, "brig version ") || len(strings.TrimSpace(out)) <= len("brig version ") {
		t.Errorf("brig --version: exit %d, %q; want 0 and the build's version", code, out)
	}
}

// TestRunInterruptedBeforeAcceptedStopsTheRun: a Ctrl-C before the service's
// accepted event reached brig run still stops the run the service may have
// accepted: brig run gives a run without --id an id of its own and DELETEs
// it by that id. (Up to 2026-12-05 it only dropped its request, and a streamed
// run the service had accepted meanwhile went on to its end.) The service
// here is a fake that takes the request and never answers it.
func TestRunInterruptedBeforeAcceptedStopsTheRun(t *testing.T) {
	posted, deleted := make(chan string, 1), make(chan string, 10)
	var deletes atomic.Int32
	sock := testutil.ServeUnix(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost:
			var req api.Request
			json.NewDecoder(r.Body).Decode(&req)
			posted <- req.ID
			<-r.Context().Done() // accepted, as far as the client knows not yet
		case http.MethodDelete:
			deleted <- strings.TrimPrefix(r.URL.Path, "/v1/runs/") + "?" + r.URL.RawQuery
			w.Header().Set("Content-Type", "application/json")
			if deletes.Add(1) == 1 {
				w.WriteHeader(http.StatusNotFound)
				w.Write([]byte(`{"error":{"code":"not_found","message":"no run"}}`))
				return
			}
			w.Write([]byte(`{"id":"x","language":"python","state":"finished","status":"failed","reason":"stopped","outcome":"failed","stdout":"late\n"}`))
		}
	})
	prog := filepath.Join(t.TempDir(), "p.py")
	os.WriteFile(prog, []byte("print(1)\n"), 0o644)
	cmd := exec.Command(os.Args[0], "run", "--socket", sock, "-l", "python", prog)
	cmd.Env = append(os.Environ(), "BRIG_CLI=1")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var id string
	select {
	case id = <-posted:
	case <-time.After(10 * time.Second):
		t.Fatal("brig run sent no request")
	}
	if id == "" {
		t.Fatal("brig run sent a request without an id: it could not stop the run by it")
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case got := <-deleted:
		// With its own uid: for root an id alone would mean another uid's
		// run of that id, where root has none.
		if want := fmt.Sprintf("%s?uid=%d", id, os.Geteuid()); got != want {
			t.Errorf("got DELETE of %q, want of %q, the run's id and brig run's uid", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Error("got no DELETE after the Ctrl-C, want the run stopped by its id")
	}
	// The second DELETE finds the run, which the service accepted late:
	// brig run prints its result (the audit of 2026-12-05: it printed
	// nothing) and exits as for a stopped run.
	if err := cmd.Wait(); cmd.ProcessState.ExitCode() != exitStopped {
		t.Errorf("brig run: %v; want exit %d", err, exitStopped)
	}
	if !strings.Contains(stdout.String(), "late\n") {
		t.Errorf("brig run printed %q; want the stopped run's output", stdout.String())
	}
}

// TestRunSecondSignalDoesNotWait: a service that took the run and then stops
// answering (stopped, wedged) keeps brig run waiting for its DELETE only until
// a second signal, which exits at once naming the run. (Up to 2026-12-05
// only SIGKILL ended it.)
func TestRunSecondSignalDoesNotWait(t *testing.T) {
	sock := testutil.ServeUnix(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.Write([]byte(`{"event":"accepted","id":"hang-1"}` + "\n"))
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done() // neither the stream nor the DELETE is answered
	})
	prog := filepath.Join(t.TempDir(), "p.py")
	os.WriteFile(prog, []byte("print(1)\n"), 0o644)
	cmd := exec.Command(os.Args[0], "run", "--socket", sock, "--id", "hang-1", "-l", "python", prog)
	cmd.Env = append(os.Environ(), "BRIG_CLI=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	time.Sleep(500 * time.Millisecond) // the accepted event read
	cmd.Process.Signal(syscall.SIGINT)
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGINT)
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(3 * time.Second):
		t.Fatal("brig run still waited 3 s after a second SIGINT")
	}
	if code := cmd.ProcessState.ExitCode(); code != exitStopped || !strings.Contains(stderr.String(), "run hang-1 may still be going") {
		t.Errorf("brig run: exit %d, stderr %q; want %d and the run named", code, stderr.String(), exitStopped)
	}
}

// TestRunWaitsBounded: a service that takes the connection and never answers
// holds brig run for acceptWait, and one that accepts the run and then answers
// neither its stop nor its stream, after one SIGINT, for stopWait: one
// deadline for both (the CLI audit of 2026-12-06 waited 20 s for a stopWait
// of 10, and without end for the accept).
func TestRunWaitsBounded(t *testing.T) {
	const wait = 2 * time.Second
	for _, tc := range []struct {
		name   string
		accept bool
		want   int
		says   string
	}{
		{"never accepted", false, 2, "did not accept run wait-1 within 2s"},
		{"stop unanswered", true, exitStopped, "did not end run wait-1's stream within 2s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deleted := make(chan string, 100)
			sock := testutil.ServeUnix(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost && tc.accept {
					w.Header().Set("Content-Type", "application/x-ndjson")
					w.Write([]byte(`{"event":"accepted","id":"wait-1"}` + "\n"))
					w.(http.Flusher).Flush()
				}
				if r.Method == http.MethodDelete {
					deleted <- r.URL.Path
				}
				<-r.Context().Done()
			})
			prog := filepath.Join(t.TempDir(), "p.py")
			os.WriteFile(prog, []byte("print(1)\n"), 0o644)
			cmd := exec.Command(os.Args[0], "run", "--socket", sock, "--id", "wait-1", "-l", "python", prog)
			cmd.Env = append(os.Environ(), "BRIG_CLI=1", "BRIG_TEST_WAIT="+wait.String())
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			start := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			if tc.accept {
				time.Sleep(500 * time.Millisecond) // the accepted event read
				start = time.Now()
				cmd.Process.Signal(syscall.SIGINT)
			}
			exited := make(chan struct{})
			go func() { cmd.Wait(); close(exited) }()
			// Never accepted, it also looks for the run by its id, to stop
			// it, for stopWait.
			bound := wait + wait/2
			if !tc.accept {
				bound += wait
			}
			select {
			case <-exited:
			case <-time.After(bound):
				t.Fatalf("brig run still waited %v; want at most %v", time.Since(start).Round(time.Millisecond), bound)
			}
			if took := time.Since(start); took < wait {
				t.Errorf("brig run ended after %v; want it to have waited %v", took, wait)
			}
			if code := cmd.ProcessState.ExitCode(); code != tc.want || !strings.Contains(stderr.String(), tc.says) {
				t.Errorf("brig run: exit %d, stderr %q; want %d and %q", code, stderr.String(), tc.want, tc.says)
			}
			// Both stop the run by its id, should the service take it.
			select {
			case p := <-deleted:
				if p != "/v1/runs/wait-1" {
					t.Errorf("got a DELETE of %s, want /v1/runs/wait-1", p)
				}
			default:
				t.Error("brig run sent no DELETE of its run")
			}
		})
	}
}

// TestRunStopsWhenItsOutputGoesAway: a reader of brig run's output that goes
// away (`brig run ... | head -1`) stops the run, as a signal does, where
// SIGPIPE used to kill brig run and leave the run going.
func TestRunStopsWhenItsOutputGoesAway(t *testing.T) {
	const result = `{"id":"pipe-1","language":"python","state":"finished","status":"failed","reason":"stopped","outcome":"failed"}`
	deleted := make(chan string, 1)
	var once sync.Once
	stopped := make(chan struct{})
	sock := testutil.ServeUnix(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost:
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.Write([]byte(`{"event":"accepted","id":"pipe-1"}` + "\n" + `{"event":"started"}` + "\n"))
			for i := 0; r.Context().Err() == nil; i++ {
				select {
				case <-stopped:
					w.Write([]byte(`{"event":"result","result":` + result + "}\n"))
					return
				default:
				}
				fmt.Fprintf(w, `{"event":"stdout","data":"tick %d\n"}`+"\n", i)
				w.(http.Flusher).Flush()
				time.Sleep(20 * time.Millisecond)
			}
		case http.MethodDelete:
			select {
			case deleted <- strings.TrimPrefix(r.URL.Path, "/v1/runs/"):
			default:
			}
			once.Do(func() { close(stopped) })
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(result))
		}
	})
	prog := filepath.Join(t.TempDir(), "p.py")
	os.WriteFile(prog, []byte("print(1)\n"), 0o644)
	cmd, out := startPiped(t, "run", "--socket", sock, "--id", "pipe-1", "-l", "python", prog)
	defer cmd.Process.Kill()
	if _, err := out.Read(make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	out.Close() // as head -1 does
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	select {
	case got := <-deleted:
		if got != "pipe-1" {
			t.Errorf("got DELETE of %q, want pipe-1", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("got no DELETE once brig run's output went away")
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("brig run did not exit once its run was stopped")
	}
	if code := cmd.ProcessState.ExitCode(); code != exitStopped {
		t.Errorf("brig run exited %d; want %d, a stopped run's", code, exitStopped)
	}
}

// TestCheckStateDir: a state directory brig can't make or write fails a line
// of its own, whose hint is about --state-dir, and the rootfs line that fails
// for it points there rather than to --rootfs.
func TestCheckStateDir(t *testing.T) {
	testutil.RequireRoot(t)
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	out, _, code := brig(t, "", "check", "--no-resolve", "--state-dir", filepath.Join(file, "state"), "--cgroup-parent", cliCgroupParent)
	if code == 0 || !strings.Contains(out, "FAIL  state directory") || !strings.Contains(out, "give --state-dir (state_dir) a folder on a local filesystem that root owns") ||
		!strings.Contains(out, "fix the state directory first") {
		t.Errorf("check with a state directory under a file: exit %d,\n%s\nwant a failed state directory line and the rootfs line pointing to it", code, out)
	}
	// One that a uid other than root owns fails the rootfs line, whose hint
	// is to make it root's, not to build a root (the CLI audit).
	owned := filepath.Join(t.TempDir(), "state")
	os.Mkdir(owned, 0o755)
	os.Chown(owned, 61234, 0)
	out, _, code = brig(t, "", "check", "--no-resolve", "--state-dir", owned, "--cgroup-parent", cliCgroupParent)
	if code == 0 || !strings.Contains(out, "is owned by uid 61234") || !strings.Contains(out, "chown 0:0 "+owned) ||
		strings.Contains(out, "build the root it names") {
		t.Errorf("check with a state directory owned by uid 61234: exit %d,\n%s\nwant the state directory's line's hint to make it root's", code, out)
	}
	// One others may write to is refused before anything is made in it, by
	// check and by run --local (the review of 2026-12-06: both built their
	// roots there all the same).
	open := filepath.Join(t.TempDir(), "open")
	os.Mkdir(open, 0o700)
	syscall.Chmod(open, 0o1777)
	out, _, code = brig(t, "", "check", "--no-resolve", "--state-dir", open, "--cgroup-parent", cliCgroupParent)
	if code == 0 || !strings.Contains(out, "writable by its group or others (mode 1777)") || !strings.Contains(out, "fix the state directory first") {
		t.Errorf("check with a 1777 state directory: exit %d,\n%s\nwant it refused", code, out)
	}
	prog := filepath.Join(t.TempDir(), "p.py")
	os.WriteFile(prog, []byte("print(1)\n"), 0o644)
	_, stderr, code := brig(t, "", "run", "--local", "--language", "python", "--state-dir", open, "--cgroup-parent", cliCgroupParent, prog)
	if code == 0 || !strings.Contains(stderr, "writable by its group or others (mode 1777)") {
		t.Errorf("run --local with a 1777 state directory: exit %d, %q; want it refused", code, stderr)
	}
	if ents, _ := os.ReadDir(open); len(ents) > 0 {
		t.Errorf("the refused state directory got %d entries, want none", len(ents))
	}
}

// TestCheckCacheSpace: a package cache on a disk with less free than
// min_free_bytes is a warning, with what to change: every install would be
// stopped there.
func TestCheckCacheSpace(t *testing.T) {
	small := testutil.Tmpfs(t, "4m")
	sc := defaultServeConfig()
	sc.Packages.CacheDir = filepath.Join(small, "packages") // not made yet: its disk is checked
	if ch := cacheSpaceCheck(sc); !ch.OK || !ch.Warn || !strings.Contains(ch.Detail, "less than the 1024 MiB brig keeps free") ||
		!strings.Contains(ch.Detail, "installs evict the cached layers (0 MiB)") || !strings.Contains(ch.Hint, "packages.min_free_bytes") ||
		!strings.Contains(ch.Hint, "brig packages prune") {
		t.Errorf("a 4 MiB disk: got %+v, want a warning with a hint", ch)
	}
	// brig serve says so too, with packages on.
	sc.Packages.Enabled = true
	var logs strings.Builder
	warnConfig(sc, slog.New(slog.NewTextHandler(&logs, nil)))
	if !strings.Contains(logs.String(), "the package cache's disk has less free than installs keep") {
		t.Errorf("serve's start on a 4 MiB disk: got %q, want a warning", logs.String())
	}
	sc.Packages.MinFreeBytes = 1 << 20
	if ch := cacheSpaceCheck(sc); !ch.OK || ch.Warn || !strings.Contains(ch.Detail, small+" has 4 MiB and") {
		t.Errorf("a 4 MiB disk, 1 MiB kept: got %+v, want a pass with what is free", ch)
	}
}

// TestWarnPolicyWithNetwork: a package policy other than open, on a host
// that offers a run a network mode that reaches out, is warned of at the
// start: the policy bounds what a request names and its install resolves,
// not what a program downloads itself (the packages probe).
func TestWarnPolicyWithNetwork(t *testing.T) {
	for _, tc := range []struct {
		mode  string
		modes []string
		warn  bool
	}{
		{"open", []string{"none", "registries", "domains", "any"}, false},
		{"deny", []string{"none", "registries", "domains", "any"}, true},
		{"reviewed", []string{"none", "domains"}, true},
		{"allow", []string{"none"}, false},
	} {
		sc := defaultServeConfig()
		sc.Packages.Enabled = true
		sc.Packages.Policy.Mode, sc.Egress.Modes = tc.mode, tc.modes
		var logs strings.Builder
		warnConfig(sc, slog.New(slog.NewTextHandler(&logs, nil)))
		got := strings.Contains(logs.String(), "the package policy does not bound what a run fetches itself")
		if got != tc.warn || tc.warn && !strings.Contains(logs.String(), "egress.modes") {
			t.Errorf("policy %s, modes %v: got %q, want a warning %v", tc.mode, tc.modes, logs.String(), tc.warn)
		}
	}
}

// TestWarnPeersWithoutSocket: an allowed uid or gid that can't open the
// socket (mode 0660, root's and socket_group's) is warned of at the start,
// where the docs audit's got a bare permission error.
func TestWarnPeersWithoutSocket(t *testing.T) {
	nobody, err := user.LookupId("65534")
	if err != nil {
		t.Skipf("this host has no account of uid 65534: %v", err)
	}
	for _, tc := range []struct {
		name  string
		group string
		uids  []int
		gids  []int
		want  string // "" for no warning
	}{
		{"root only", "", []int{0}, nil, ""},
		{"a uid without a socket group", "", []int{0, 65534}, nil, "uid 65534 (" + nobody.Username + ")"},
		{"a uid without an account", "", []int{0, 61234}, nil, "uid 61234"},
		{"a uid in the socket group", nobody.Gid, []int{0, 65534}, nil, ""},
		{"a gid that is not the socket group", nobody.Gid, nil, []int{61234}, "gid 61234"},
		{"the socket group's gid", nobody.Gid, nil, []int{65534}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := defaultServeConfig()
			sc.SocketGroup, sc.AllowUIDs, sc.AllowGIDs = tc.group, tc.uids, tc.gids
			var logs strings.Builder
			warnConfig(sc, slog.New(slog.NewTextHandler(&logs, nil)))
			got := logs.String()
			if tc.want == "" && strings.Contains(got, "can't open the socket") {
				t.Errorf("got %q, want no warning", got)
			}
			if tc.want != "" && (!strings.Contains(got, "can't open the socket") || !strings.Contains(got, tc.want) || !strings.Contains(got, "set socket_group")) {
				t.Errorf("got %q, want a warning naming %s", got, tc.want)
			}
		})
	}
}

// TestWarnAdminGroupNotAllowed: an admin group that allow_gids does not name
// admits no one, which the start says (the identity probe).
func TestWarnAdminGroupNotAllowed(t *testing.T) {
	for _, tc := range []struct {
		admin, allow []int
		want         string // "" for no warning
	}{
		{nil, nil, ""},
		{[]int{4300}, []int{4300}, ""},
		{[]int{4300, 4301}, []int{4300}, "gids=[4301]"},
	} {
		sc := defaultServeConfig()
		sc.AdminGIDs, sc.AllowGIDs = tc.admin, tc.allow
		var logs strings.Builder
		warnConfig(sc, slog.New(slog.NewTextHandler(&logs, nil)))
		got := strings.Contains(logs.String(), "an admin group admits no one by itself")
		if got != (tc.want != "") || !strings.Contains(logs.String(), tc.want) {
			t.Errorf("admin %v, allowed %v: got %q, want a warning naming %q", tc.admin, tc.allow, logs.String(), tc.want)
		}
	}
}

// TestRunDomainAloneMeansDomains: --domain without --network asks for mode
// domains, as the Python client's domains= does, where it was refused; and a
// refusal of a field names the flag that sets it.
func TestRunDomainAloneMeansDomains(t *testing.T) {
	got := make(chan api.Request, 1)
	sock := testutil.ServeUnix(t, func(w http.ResponseWriter, r *http.Request) {
		var req api.Request
		json.NewDecoder(r.Body).Decode(&req)
		got <- req
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"error":{"code":"invalid_request","field":"timeout_seconds","message":"is 0"}}`))
	})
	prog := filepath.Join(t.TempDir(), "p.py")
	os.WriteFile(prog, []byte("print(1)\n"), 0o644)
	_, stderr, code := brig(t, "", "run", "--socket", sock, "-l", "python", "--domain", "ok.test", prog)
	req := <-got
	if req.Network == nil || req.Network.Mode != api.NetworkDomains || !slices.Equal(req.Network.Domains, []string{"ok.test"}) {
		t.Errorf("sent network %+v; want mode domains with ok.test", req.Network)
	}
	if code != 2 || !strings.Contains(stderr, "timeout_seconds is 0 [--timeout]") {
		t.Errorf("exit %d, stderr %q; want 2 and the field's flag named", code, stderr)
	}
	for field, flag := range map[string]string{"packages[3]": "--package", "env.K": "--env", "network.domains[0]": "--domain", "network.mode": "--network", "code": "FILE", "usage": ""} {
		if got := flagOf(field); got != flag {
			t.Errorf("flagOf(%q) = %q, want %q", field, got, flag)
		}
	}
}

// TestWarnHostLimits: runs at once that may hold half the host's pids, or
// every pty its containers share, are warned of, with what to change; a host
// with room is not.
func TestWarnHostLimits(t *testing.T) {
	kernel := t.TempDir()
	os.MkdirAll(filepath.Join(kernel, "pty"), 0o755)
	os.WriteFile(filepath.Join(kernel, "pid_max"), []byte("32768\n"), 0o644)
	os.WriteFile(filepath.Join(kernel, "pty", "max"), []byte("4096\n"), 0o644)
	os.WriteFile(filepath.Join(kernel, "pty", "reserve"), []byte("1024\n"), 0o644)
	for _, tt := range []struct {
		concurrent int
		pids       int64
		want       []string
	}{
		{8, 512, nil},
		{64, 512, []string{"half the host's pids", "every pty the host's containers share"}},
		{40, 512, []string{"half the host's pids"}},
	} {
		var logs strings.Builder
		warnHostLimits(tt.concurrent, tt.pids, kernel, slog.New(slog.NewTextHandler(&logs, nil)))
		if got := strings.Count(logs.String(), "level=WARN"); got != len(tt.want) {
			t.Errorf("%d runs of %d pids: got %d warnings, want %d:\n%s", tt.concurrent, tt.pids, got, len(tt.want), logs.String())
		}
		for _, w := range tt.want {
			if !strings.Contains(logs.String(), w) {
				t.Errorf("%d runs of %d pids: no warning saying %q:\n%s", tt.concurrent, tt.pids, w, logs.String())
			}
		}
	}
}
