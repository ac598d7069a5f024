package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/cgroup"
	"github.com/brig-sandbox/brig/internal/testutil"
)

func TestEscapeControls(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"plain text", "hello, world\n", "hello, world\n"},
		{"newline and tab kept", "a\tb\nc", "a\tb\nc"},
		{"printable unicode kept", "é 日本 😀 \u00a0 \u00ff", "é 日本 😀 \u00a0 \u00ff"},
		{"empty", "", ""},
		{"ESC", "\x1b[31mred", `\x1b[31mred`},
		{"OSC 52 clipboard write", "\x1b]52;c;aGk=\x07", `\x1b]52;c;aGk=\x07`},
		{"carriage return", "ok\rno\r\n", `ok\x0dno\x0d` + "\n"},
		{"backspace and NUL", "a\bb\x00", `a\x08b\x00`},
		{"last C0", "\x1f", `\x1f`},
		{"DEL", "\x7f", `\x7f`},
		{"first C1", "\u0080", `\u0080`},
		{"8-bit CSI", "\u009b31m", `\u009b31m`},
		{"last C1", "\u009f", `\u009f`},
		{"after C1 kept", "\u00a0", "\u00a0"},
		{"backslash doubled", `C:\path`, `C:\\path`},
		{"the text of an escape is told apart", `\x1b` + "\x1b", `\\x1b\x1b`},
		{"a byte that is not UTF-8", "a\x9bb\xff", `a\x9bb\xff`},
		{"a cut sequence", "\xe6\x97", `\xe6\x97`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := escapeControls(tc.in); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEscapeJSONControls(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"none", `{"a":"é\u001b\\"}`, `{"a":"é\u001b\\"}`},
		{"C1", "{\"a\":\"x\u009by\u0080\"}", `{"a":"x\u009by\u0080"}`},
		{"DEL", "{\"a\":\"\x7f\"}", `{"a":"\u007f"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := escapeJSONControls(tc.in); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// openPTY returns a pseudo-terminal's master and its terminal end, with output
// processing off (a newline stays a newline).
func openPTY(t *testing.T) (master, term *os.File) {
	t.Helper()
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	testutil.Require(t, err == nil, "no /dev/ptmx to make a terminal with")
	master = os.NewFile(uintptr(m), "ptmx")
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlocking the pty: %v", err)
	}
	n, err := unix.IoctlGetUint32(m, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("naming the pty: %v", err)
	}
	term, err = os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	tio, err := unix.IoctlGetTermios(int(term.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Oflag &^= unix.OPOST
	if err := unix.IoctlSetTermios(int(term.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	return master, term
}

// brigOnTerminal runs the CLI with one of stdout and stderr on a terminal (the
// other on a pipe) and returns what each got and the exit status.
func brigOnTerminal(t *testing.T, stdoutIsTerminal bool, args ...string) (termOut, pipeOut string, status int) {
	t.Helper()
	master, term := openPTY(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "BRIG_CLI=1")
	var pipe bytes.Buffer
	if stdoutIsTerminal {
		cmd.Stdout, cmd.Stderr = term, &pipe
	} else {
		cmd.Stdout, cmd.Stderr = &pipe, term
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	term.Close() // the child has it; the master reads EIO once the child's copies close
	got := make(chan []byte, 1)
	go func() {
		var b bytes.Buffer
		io.Copy(&b, master) // ends with EIO when the terminal end is closed
		got <- b.Bytes()
	}()
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		status = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(<-got), pipe.String(), status
}

// TestRunEscapesOnATerminal: brig run shows a program's control characters
// escaped on a terminal, each stream judged on its own; a pipe gets the bytes,
// and so does a terminal with --raw.
func TestRunEscapesOnATerminal(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CheckLeaks(t, cliCgroupParent, cliServeParent)
	const (
		program = `import sys
s = "a\x1b]52;c;aGk=\x07b\tc\r\n\x9b31m\\x\x7f\u00e9\n"
sys.stdout.write(s); sys.stdout.flush(); sys.stderr.write(s)
`
		raw     = "a\x1b]52;c;aGk=\x07b\tc\r\n\u009b31m\\x\x7f\u00e9\n"
		escaped = `a\x1b]52;c;aGk=\x07b` + "\t" + `c\x0d` + "\n" + `\u009b31m\\x\x7f` + "\u00e9\n"
	)
	socket, serve, logs := startServe(t)
	t.Cleanup(func() {
		// A clean stop, so that the service removes its cgroups before the
		// leak check.
		serve.Process.Signal(unix.SIGTERM)
		if err := serve.Wait(); err != nil {
			t.Errorf("brig serve exited with %v after SIGTERM; it logged:\n%s", err, logs)
		}
		os.Remove(cgroup.ParentLockPath("", cliServeParent))
	})
	file := filepath.Join(t.TempDir(), "p.py")
	if err := os.WriteFile(file, []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	remote := []string{"run", "--socket", socket, "-l", "python"}
	local := slices.Concat([]string{"run"}, localFlags(t), []string{"-l", "python"})
	with := func(base []string, more ...string) []string { return slices.Concat(base, more) }
	for _, tc := range []struct {
		name             string
		args             []string
		stdoutIsTerminal bool
		wantTerm         string
	}{
		{"stdout a terminal", with(remote, file), true, escaped},
		{"stderr a terminal", with(remote, file), false, escaped},
		{"stdout a terminal, --raw", with(remote, "--raw", file), true, raw},
		{"stderr a terminal, --raw", with(remote, "--raw", file), false, raw},
		{"local, stdout a terminal", with(local, file), true, escaped},
		{"local, stderr a terminal, --raw", with(local, "--raw", file), false, raw},
	} {
		t.Run(tc.name, func(t *testing.T) {
			term, pipe, status := brigOnTerminal(t, tc.stdoutIsTerminal, tc.args...)
			if status != 0 {
				t.Fatalf("got exit status %d (terminal %q, pipe %q), want 0", status, term, pipe)
			}
			if term != tc.wantTerm {
				t.Errorf("terminal: got %q, want %q", term, tc.wantTerm)
			}
			if pipe != raw {
				t.Errorf("pipe: got %q, want the exact output %q", pipe, raw)
			}
		})
	}
	t.Run("json on a terminal", func(t *testing.T) {
		term, _, status := brigOnTerminal(t, true, with(remote, "--json", file)...)
		if status != 0 {
			t.Fatalf("got exit status %d (%q), want 0", status, term)
		}
		if want := `"stdout": "a\u001b]52;c;aGk=\u0007b\tc\r\n\u009b31m\\x\u007fé\n"`; !bytes.Contains([]byte(term), []byte(want)) {
			t.Errorf("got %s, want it to hold %s (C1 escaped, as JSON)", term, want)
		}
	})
}
