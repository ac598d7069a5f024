package jail

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/rootfs"
)

// collector gathers OnStdout or OnStderr chunks, safely for the drain goroutine.
type collector struct {
	mu     sync.Mutex
	chunks []string
	first  time.Time
}

func (c *collector) add(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.first.IsZero() {
		c.first = time.Now()
	}
	c.chunks = append(c.chunks, s)
}

func (c *collector) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.chunks, "")
}

// firstRunes is the first n code points of s.
func firstRunes(s string, n int) string {
	i := 0
	for range n {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i]
}

// TestOutputCapsInRun: the caps count characters, not bytes; what is kept is a
// prefix of what was printed; the stream of chunks is exactly what is kept.
func TestOutputCapsInRun(t *testing.T) {
	l := newTestLauncher(t, 0)
	const pattern = "aé日" // 1, 2 and 3 bytes
	over := strings.Repeat(pattern, 400_000)
	for _, tc := range []struct {
		name          string
		lang          rootfs.Language
		code          string
		stderr        bool
		printed       string
		wantTruncated bool
	}{
		{"stdout over the cap", rootfs.Python, "import sys\nsys.stdout.write('aé日' * 400000)", false, over, true},
		{"stdout exactly at the cap", rootfs.Python, "import sys\nsys.stdout.write('aé日' * 333333 + 'a')", false, strings.Repeat(pattern, 333_333) + "a", false},
		{"stdout one past the cap", rootfs.Python, "import sys\nsys.stdout.write('aé日' * 333333 + 'aé')", false, strings.Repeat(pattern, 333_333) + "aé", true},
		{"stderr over the cap", rootfs.Python, "import sys\nsys.stderr.write('日é' * 75000)", true, strings.Repeat("日é", 75_000), true},
		{"stderr exactly at the cap", rootfs.Python, "import sys\nsys.stderr.write('日é' * 50000)", true, strings.Repeat("日é", 50_000), false},
		{"javascript stdout over the cap", rootfs.JavaScript, "process.stdout.write('aé日'.repeat(400000))", false, over, true},
		// Node queues what the pipe does not take, and process.exit() drops
		// it: 65,536 bytes were kept of these 600,000 (outputPipe).
		{"javascript stdout before process.exit", rootfs.JavaScript, "process.stdout.write('aé日'.repeat(100000)); process.exit(0)", false, strings.Repeat(pattern, 100_000), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errs collector
			res := run(t, l, tc.lang, tc.code, func(s *Spec) { s.OnStdout, s.OnStderr = out.add, errs.add })
			if !res.Succeeded() {
				t.Fatalf("got %s reason %s message %q, want succeeded", res.End, res.Step, res.Message)
			}
			got, truncated, streamed, limit := res.Stdout, res.StdoutTruncated, out.text(), api.MaxStdoutChars
			if tc.stderr {
				got, truncated, streamed, limit = res.Stderr, res.StderrTruncated, errs.text(), api.MaxStderrChars
			}
			want := tc.printed
			if utf8.RuneCountInString(want) > limit {
				want = firstRunes(want, limit)
			}
			if n := utf8.RuneCountInString(got); n != utf8.RuneCountInString(want) {
				t.Errorf("kept: got %d chars (%d bytes), want %d", n, len(got), utf8.RuneCountInString(want))
			}
			if got != want {
				t.Errorf("kept: got a text that is not the first %d chars printed", utf8.RuneCountInString(want))
			}
			if truncated != tc.wantTruncated {
				t.Errorf("truncated: got %v, want %v", truncated, tc.wantTruncated)
			}
			if streamed != got {
				t.Errorf("streamed chunks: got %d bytes, want exactly the kept %d", len(streamed), len(got))
			}
		})
	}
}

// TestInvalidUTF8InRun: bytes that are not UTF-8 become U+FFFD, one per maximal
// subpart, and a character split across writes is not.
func TestInvalidUTF8InRun(t *testing.T) {
	l := newTestLauncher(t, 0)
	for _, tc := range []struct {
		name   string
		code   string
		stdout string
		stderr string
	}{
		{"invalid byte", `import sys; sys.stdout.buffer.write(b'a\xffb')`, "a\uFFFDb", ""},
		{"invalid byte on stderr", `import sys; sys.stderr.buffer.write(b'a\xffb')`, "", "a\uFFFDb"},
		{"split character", "import sys, time\nsys.stdout.buffer.write(b'\\xe6\\x97'); sys.stdout.flush(); time.sleep(0.2)\nsys.stdout.buffer.write(b'\\xa5!')", "日!", ""},
		{"cut short at the end", `import sys; sys.stdout.buffer.write(b'a\xe6\x97')`, "a\uFFFD", ""},
		{"surrogate", `import sys; sys.stdout.buffer.write(b'\xed\xa0\x80x')`, "\uFFFD\uFFFD\uFFFDx", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, l, rootfs.Python, tc.code)
			if res.Stdout != tc.stdout || res.Stderr != tc.stderr {
				t.Errorf("got stdout %q stderr %q, want %q and %q", res.Stdout, res.Stderr, tc.stdout, tc.stderr)
			}
		})
	}
}

// TestOnStdoutStreams: output reaches the callbacks as it is printed, not at the end.
func TestOnStdoutStreams(t *testing.T) {
	l := newTestLauncher(t, 0)
	for _, tc := range []struct {
		name   string
		lang   rootfs.Language
		code   string
		stderr bool
	}{
		{"python stdout", rootfs.Python, "import time\nprint('first', flush=True)\ntime.sleep(1)\nprint('second')", false},
		{"python stderr", rootfs.Python, "import sys, time\nprint('first', file=sys.stderr, flush=True)\ntime.sleep(1)\nprint('second', file=sys.stderr)", true},
		{"javascript stdout", rootfs.JavaScript, "console.log('first'); setTimeout(() => console.log('second'), 1000)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errs collector
			res := run(t, l, tc.lang, tc.code, func(s *Spec) { s.OnStdout, s.OnStderr = out.add, errs.add })
			returned := time.Now()
			c, got := &out, res.Stdout
			if tc.stderr {
				c, got = &errs, res.Stderr
			}
			if got != "first\nsecond\n" {
				t.Fatalf("got %q, want first and second", got)
			}
			if c.first.IsZero() || returned.Sub(c.first) < 500*time.Millisecond {
				t.Errorf("first chunk: got it %v before Run returned, want more than 500ms", returned.Sub(c.first))
			}
			if c.text() != got {
				t.Errorf("chunks: got %q, want %q", c.text(), got)
			}
		})
	}
}

// TestOutcomesInRun: how the program ends is what the result says.
func TestOutcomesInRun(t *testing.T) {
	l := newTestLauncher(t, 0)
	for _, tc := range []struct {
		name     string
		lang     rootfs.Language
		code     string
		reason   End
		exitCode int
		stderr   string // a substring
	}{
		{"success", rootfs.Python, "print('ok')", EndCompleted, 0, ""},
		{"exit 3", rootfs.Python, "import sys; sys.exit(3)", EndError, 3, ""},
		{"exception", rootfs.Python, "def f():\n    return 1 / 0\nf()", EndError, 1, "Traceback (most recent call last):\n  File \"/sandbox/main.py\", line 3"},
		{"exception name", rootfs.Python, "1 / 0", EndError, 1, "ZeroDivisionError: division by zero"},
		{"syntax error", rootfs.Python, "def (:", EndError, 1, "SyntaxError"},
		{"javascript success", rootfs.JavaScript, "console.log('ok')", EndCompleted, 0, ""},
		{"javascript throw", rootfs.JavaScript, "throw new Error('boom')", EndError, 1, "Error: boom"},
		{"javascript exit 3", rootfs.JavaScript, "process.exit(3)", EndError, 3, ""},
		{"javascript syntax error", rootfs.JavaScript, "function (", EndError, 1, "SyntaxError"},
		{"javascript unhandled rejection", rootfs.JavaScript, "Promise.reject(new Error('later'))", EndError, 1, "later"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, l, tc.lang, tc.code)
			if res.End != tc.reason {
				t.Errorf("got %q (message %q), want %q", res.End, res.Message, tc.reason)
			}
			if res.ExitCode == nil || *res.ExitCode != tc.exitCode {
				t.Errorf("exit code: got %v, want %d", res.ExitCode, tc.exitCode)
			}
			if res.Signal != "" {
				t.Errorf("signal: got %q, want none", res.Signal)
			}
			if !strings.Contains(res.Stderr, tc.stderr) {
				t.Errorf("stderr: got %q, want it to contain %q", res.Stderr, tc.stderr)
			}
			if tc.reason != EndCompleted && res.Message == "" {
				t.Errorf("message: got none, want a sentence for the failure")
			}
		})
	}
}

// chunkReader returns its pieces one Read at a time, then EOF.
type chunkReader struct{ pieces []string }

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.pieces) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.pieces[0])
	r.pieces[0] = r.pieces[0][n:]
	if r.pieces[0] == "" {
		r.pieces = r.pieces[1:]
	}
	return n, nil
}

// chunkings are the ways to cut s that the tests feed an Output: whole, every
// single split point, byte by byte, and in pieces of 2 to 5 bytes.
func chunkings(s string) map[string][]string {
	out := map[string][]string{"whole": {s}}
	for i := 1; i < len(s); i++ {
		out["split at "+strconv.Itoa(i)] = []string{s[:i], s[i:]}
	}
	for k := 1; k <= 5; k++ {
		var pieces []string
		for i := 0; i < len(s); i += k {
			pieces = append(pieces, s[i:min(i+k, len(s))])
		}
		out["pieces of "+strconv.Itoa(k)] = pieces
	}
	return out
}

// TestOutputChunkings: the kept text, the truncation flag and the stream of chunks
// do not depend on how the pipe cut the bytes.
func TestOutputChunkings(t *testing.T) {
	for _, tc := range []struct {
		name          string
		in            string
		cap           int
		want          string
		wantTruncated bool
	}{
		{"multibyte", "héllo 日本 😀!", 100, "héllo 日本 😀!", false},
		{"invalid in the middle", "a\xffb", 100, "a\uFFFDb", false},
		{"invalid runs", "\xff\xfe\xfd", 100, "\uFFFD\uFFFD\uFFFD", false},
		{"cut short at the end", "a\xe6\x97", 100, "a\uFFFD", false},
		{"lone lead byte at the end", "日\xf0", 100, "日\uFFFD", false},
		{"cut short before ASCII", "\xe6\x97a", 100, "\uFFFDa", false},
		{"surrogate", "\xed\xa0\x80", 100, "\uFFFD\uFFFD\uFFFD", false},
		{"overlong", "\xc0\xaf", 100, "\uFFFD\uFFFD", false},
		{"literal replacement char", "\uFFFD", 100, "\uFFFD", false},
		{"cap at a multibyte boundary", "aé日😀", 3, "aé日", true},
		{"exactly the cap", "aé日😀", 4, "aé日😀", false},
		{"cap counts an invalid byte as one", "a\xff\xff", 2, "a\uFFFD", true},
		{"cap then an incomplete sequence", "a\xe6", 1, "a", true},
		{"cap then a complete character", "é日", 1, "é", true},
		{"cap zero", "x", 0, "", true},
		{"empty", "", 5, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for how, pieces := range chunkings(tc.in) {
				var chunks []string
				o := NewOutput(tc.cap, func(s string) { chunks = append(chunks, s) })
				o.Drain(&chunkReader{pieces: append([]string(nil), pieces...)})
				got, truncated := o.Text()
				if got != tc.want || truncated != tc.wantTruncated {
					t.Errorf("%s %q: got %q truncated %v, want %q truncated %v", how, pieces, got, truncated, tc.want, tc.wantTruncated)
				}
				if s := strings.Join(chunks, ""); s != got {
					t.Errorf("%s: chunks add up to %q, want the kept %q", how, s, got)
				}
				for _, c := range chunks {
					if c == "" || !utf8.ValidString(c) {
						t.Errorf("%s: got chunk %q, want non-empty valid UTF-8", how, c)
					}
				}
			}
		})
	}
}

// countingReader counts a reader's reads.
type countingReader struct {
	r     io.Reader
	reads atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return c.r.Read(p)
}

// TestDrainPacesATrickle: a program that writes a byte at a time is read at
// most once per drainGap, its bytes gathered in the pipe meanwhile, from a
// pipe that is not in Go's poller (outputPipe: a polled pipe wakes its poller
// at every write); all of it is kept.
func TestDrainPacesATrickle(t *testing.T) {
	r, w, err := outputPipe(stdoutPipeBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if flags, err := unix.FcntlInt(r.Fd(), unix.F_GETFL, 0); err != nil || flags&unix.O_NONBLOCK != 0 {
		t.Fatalf("the output pipe's read end: flags %#x (%v), want blocking: a non-blocking one is in the poller", flags, err)
	}
	o := NewOutput(1<<20, nil)
	cr := &countingReader{r: r}
	done := make(chan struct{})
	go func() { defer close(done); o.Drain(cr) }()
	const n = 20000
	start := time.Now()
	for range n {
		if _, err := w.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	<-done
	elapsed := time.Since(start)
	if got, _ := o.Text(); len(got) != n {
		t.Fatalf("kept %d bytes, want %d", len(got), n)
	}
	// The first two reads, one per drainGap after, and the EOF's.
	if most := int64(elapsed/drainGap) + 3; cr.reads.Load() > most {
		t.Errorf("%d reads of %d one-byte writes in %v, want at most %d", cr.reads.Load(), n, elapsed, most)
	}
	t.Logf("%d one-byte writes in %v: %d reads", n, elapsed, cr.reads.Load())
}

// TestDrainKeepsUpWithABulkWriter: a program that writes much is read as
// fast as it writes, not paced as a trickle is (a pause after every read had
// held one at 62 MB/s: the review of 2026-12-05): 64 MiB in 64 KiB writes
// take far fewer reads' pauses than a pause each.
func TestDrainKeepsUpWithABulkWriter(t *testing.T) {
	r, w, err := outputPipe(stdoutPipeBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	o := NewOutput(1<<20, nil)
	cr := &countingReader{r: r}
	done := make(chan struct{})
	go func() { defer close(done); o.Drain(cr) }()
	chunk := make([]byte, 64<<10)
	const chunks = 1024
	start := time.Now()
	for range chunks {
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	<-done
	elapsed := time.Since(start)
	t.Logf("64 MiB in %v, %d reads", elapsed, cr.reads.Load())
	// Paced, each read would have cost drainGap: 1,024 ms or more.
	if most := time.Duration(chunks) * drainGap / 2; elapsed > most {
		t.Errorf("64 MiB took %v (%d reads), want under %v: the drain paced a bulk writer", elapsed, cr.reads.Load(), most)
	}
}

// TestTakeBuffered: the outputs of pipes whose writers wrote all they will are
// taken whether each drain waits in its read (a writer still open) or has
// read EOF already (closed): the second had been taken for a drain not yet
// in its read, and every such run waited a second for nothing.
func TestTakeBuffered(t *testing.T) {
	var outs []*Output
	var pipes []*os.File
	var drained sync.WaitGroup
	defer drained.Wait() // their EOFs: the pipes' deferred closes come first
	for _, closeIt := range []bool{false, true} {
		r, w, err := outputPipe(stdoutPipeBytes)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		defer w.Close()
		o := NewOutput(100, nil)
		drained.Add(1)
		go func() { defer drained.Done(); o.Drain(r) }()
		w.Write([]byte("done\xe2"))
		if closeIt {
			w.Close()
		}
		outs, pipes = append(outs, o), append(pipes, r)
	}
	// The closed one's drain has read its EOF.
	for deadline := time.Now().Add(5 * time.Second); !outs[1].atEnd(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the closed pipe's drain did not read its EOF in 5 s")
		}
	}
	start := time.Now()
	if !takeBuffered(outs, pipes) {
		t.Fatalf("takeBuffered gave up after %v", time.Since(start))
	}
	for i, o := range outs {
		// An incomplete sequence at the end is one U+FFFD, as at EOF.
		if got, _ := o.Text(); got != "done\uFFFD" {
			t.Errorf("output %d: %q, want %q", i, got, "done\uFFFD")
		}
	}
}

// TestDrainDiscardsPastTheCap: once an output is past its cap, what its pipe
// still brings is moved to /dev/null, not read and decoded (a flood of
// output cost the service as much CPU as the program: the limits probe), and
// the drain still ends at EOF; a drain waiting so is one takeBuffered takes,
// as one waiting in its read (else each such run's end waited a second).
func TestDrainDiscardsPastTheCap(t *testing.T) {
	r, w, err := outputPipe(stdoutPipeBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	o := NewOutput(1000, nil)
	done := make(chan struct{})
	go func() { defer close(done); o.Drain(r) }()
	chunk := []byte(strings.Repeat("x", 64<<10))
	const chunks = 256
	for range chunks {
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); o.discarded.Load() < chunks*64<<10-64<<10; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("discarded %d of %d bytes in 5 s, want all but the first read's", o.discarded.Load(), chunks*64<<10)
		}
	}
	start := time.Now()
	if !takeBuffered([]*Output{o}, []*os.File{r}) {
		t.Errorf("takeBuffered gave up after %v on a drain discarding", time.Since(start))
	}
	w.Close()
	<-done
	if got, truncated := o.Text(); len(got) != 1000 || !truncated {
		t.Errorf("got %d chars, truncated %v; want 1000, truncated", len(got), truncated)
	}
}

// TestOutputWriteAfterCap: writes past the cap are accepted (the pipe keeps
// draining) and dropped.
func TestOutputWriteAfterCap(t *testing.T) {
	calls := 0
	o := NewOutput(3, func(string) { calls++ })
	for i, tc := range []struct {
		in            string
		want          string
		wantTruncated bool
	}{
		{"ab", "ab", false},
		{"c", "abc", false},
		{"", "abc", false},
		{"d", "abc", true},
		{strings.Repeat("x", 1<<20), "abc", true},
	} {
		n, err := o.Write([]byte(tc.in))
		if n != len(tc.in) || err != nil {
			t.Errorf("write %d: got %d, %v, want %d, nil", i, n, err, len(tc.in))
		}
		got, truncated := o.Text()
		if got != tc.want || truncated != tc.wantTruncated {
			t.Errorf("after write %d: got %q truncated %v, want %q truncated %v", i, got, truncated, tc.want, tc.wantTruncated)
		}
	}
	if calls != 2 {
		t.Errorf("chunks: got %d calls, want 2", calls)
	}
}

// TestOutputCapsDoNotBlock: a program printing far past the caps keeps running and
// ends normally.
func TestOutputCapsDoNotBlock(t *testing.T) {
	l := newTestLauncher(t, 0)
	var mu sync.Mutex
	var streamed int
	res := run(t, l, rootfs.Python, `
import sys
line = 'x' * 1023 + '\n'
for _ in range(8 * 1024):
    sys.stdout.write(line)
    sys.stderr.write(line)
sys.stdout.flush()
sys.stderr.write('done\n')
`, withTimeout(20*time.Second), func(s *Spec) {
		s.OnStdout = func(c string) { mu.Lock(); streamed += len(c); mu.Unlock() }
	})
	if !res.Succeeded() {
		t.Fatalf("got %s reason %s message %q, want succeeded", res.End, res.Step, res.Message)
	}
	if !res.StdoutTruncated || !res.StderrTruncated {
		t.Errorf("truncated: got stdout %v stderr %v, want both", res.StdoutTruncated, res.StderrTruncated)
	}
	if len(res.Stdout) != api.MaxStdoutChars || len(res.Stderr) != api.MaxStderrChars {
		t.Errorf("kept: got %d and %d chars, want %d and %d", len(res.Stdout), len(res.Stderr), api.MaxStdoutChars, api.MaxStderrChars)
	}
	mu.Lock()
	defer mu.Unlock()
	if streamed != len(res.Stdout) {
		t.Errorf("streamed: got %d bytes, want %d (the kept stdout)", streamed, len(res.Stdout))
	}
}

// TestOutputReplacesAsPython: invalid UTF-8 is replaced as Python's
// bytes.decode('utf-8', 'replace') does (a harness that decodes the same
// bytes itself gets the same text), whole or fed a byte at a time, on 3,000
// strings of bytes chosen to hit every lead byte's edge.
func TestOutputReplacesAsPython(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this host to compare with")
	}
	alphabet := []byte{'a', 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf3, 0xf4, 0xf5, 0xff}
	rng := rand.New(rand.NewPCG(1, 2))
	var inputs []string
	for range 3000 {
		b := make([]byte, 1+rng.IntN(8))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		inputs = append(inputs, hex.EncodeToString(b))
	}
	in, _ := json.Marshal(inputs)
	cmd := exec.Command(python, "-c", `import json, sys
print(json.dumps([bytes.fromhex(h).decode('utf-8', 'replace') for h in json.load(sys.stdin)]))`)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	if err := json.Unmarshal(out, &want); err != nil || len(want) != len(inputs) {
		t.Fatalf("python3 said %d strings, %v", len(want), err)
	}
	for i, h := range inputs {
		b, _ := hex.DecodeString(h)
		whole := NewOutput(100, nil)
		whole.Write(b)
		whole.flush()
		bytewise := NewOutput(100, nil)
		for j := range b {
			bytewise.Write(b[j : j+1])
		}
		bytewise.flush()
		for how, o := range map[string]*Output{"whole": whole, "a byte at a time": bytewise} {
			if got, _ := o.Text(); got != want[i] {
				t.Errorf("%x %s: got %+q, want %+q as Python decodes it", b, how, got, want[i])
			}
		}
	}
}
