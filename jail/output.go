package jail

import (
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Output keeps what one stream of the program printed: at most Cap characters
// (Unicode code points), with bytes that are not UTF-8 replaced by U+FFFD, one for
// each maximal subpart of a sequence (invalidLen), as Python's and Node's
// decoders and the WHATWG encoding standard replace them. It is fed by a reader goroutine that keeps draining the pipe after the
// cap, so the program never blocks on a full pipe; what is past the cap is counted
// as truncated and dropped.
type Output struct {
	cap int
	// onChunk, when set, gets each kept piece of text as it arrives. The pieces add
	// up to the kept text exactly, so a stream of them never exceeds the cap.
	onChunk func(string)
	// onCut, when set, is called once, when the first text past the cap is
	// dropped.
	onCut func()

	// tid is the thread of Drain's latest read (takeBuffered), once it runs.
	tid atomic.Int32
	// discarded counts the bytes past the cap that Drain moved to /dev/null
	// without reading them (discard); noSplice says splice could not, and
	// Drain reads them instead. Drain's own.
	discarded atomic.Int64
	noSplice  bool

	mu        sync.Mutex
	buf       strings.Builder // guarded by mu
	chars     int             // guarded by mu; code points in buf
	truncated bool            // guarded by mu
	pending   []byte          // guarded by mu; an incomplete UTF-8 sequence at a chunk's end
	ended     bool            // guarded by mu; the stream's end was decoded: nothing more is kept
}

// NewOutput returns an Output that keeps capChars code points and calls onChunk (if
// not nil) with each kept piece.
func NewOutput(capChars int, onChunk func(string)) *Output {
	return &Output{cap: capChars, onChunk: onChunk}
}

// drainBuffers are Drain's read buffers, a pipe's default capacity each, kept
// from one run to the next: made for each stream, they were half of all the
// service allocated (two of 64 KiB a run, against some 100 KiB of the rest),
// and so set how often its collector ran. Output copies what it keeps, so a
// buffer is free again once its Drain returns.
var drainBuffers = sync.Pool{New: func() any { return new([64 << 10]byte) }}

// outputPipe is a pipe for a program's stdout or stderr, whose read end
// Drain reads in a blocking system call, not through Go's poller (a thread
// for each drain waiting in its read: two a run in flight). A pipe that was
// ever polled wakes its poller at each write (the kernel's pipe
// poll_usage), read or not, and each woke the service's scheduler: a
// program that wrote a byte at a time for 3 s cost the service 0.78 to 1.06
// s of CPU (12,212 epoll_pwait calls in 2 s against 330 reads; the red
// team's flood of small writes 4.8 s for the run's 3.6). Unpolled, a write
// wakes the reader only when it finds the pipe empty, and Drain's pauses
// (drainGap) leave it not empty.
//
// It holds capacity bytes (stdoutPipeBytes, stderrPipeBytes), not a pipe's
// default 64 KiB: Node writes to a pipe without blocking and queues what does
// not fit, which process.exit() drops, so a program that printed 490,000
// characters and called it kept 65,536 (the outcomes audit; so does a bare
// node into a pipe). The pages are the writer's, charged to the run's memory
// as it writes. A pipe's capacity also counts against its maker's
// fs.pipe-user-pages-soft (16,384 pages): past it, root's processes that hold
// neither CAP_SYS_ADMIN nor CAP_SYS_RESOURCE get pipes of one page (the
// review's), so stderr, whose cap is a tenth of stdout's, gets less. A host
// whose fs.pipe-max-size is lower keeps the default.
func outputPipe(capacity int) (r, w *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, err
	}
	unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, capacity)
	return os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1"), nil
}

// stdoutPipeBytes and stderrPipeBytes are the output pipes' capacities: the
// default fs.pipe-max-size, about api.MaxStdoutChars of ASCII, and 128 KiB,
// more than api.MaxStderrChars of it. A sandbox's two hold 288 pages of its
// maker's 16,384, against 32 at the default, and 512 where the program grows
// its stderr pipe (F_SETPIPE_SZ, charged to the pipe's maker) or its stderr
// passes its cap (discard grows it).
const (
	stdoutPipeBytes = 1 << 20
	stderrPipeBytes = 128 << 10
)

// drainGap is the least time between two of Drain's reads once a program
// writes in a trickle: a short read (less than drainTrickle) that came
// within drainGap of the one before is followed by a pause, so that what the
// program writes meanwhile waits in the pipe, and is read with the next. The
// first two reads, any after a quiet drainGap and every long one are not
// delayed, so that a run's first output, and its last before its exit, arrive
// at once, and a program that writes much is read as fast as it writes (a
// pause after every read had held one at 62 MB/s: the review of 2026-12-05).
const (
	drainGap     = time.Millisecond
	drainTrickle = 4 << 10
)

// Drain reads r to EOF (or a read error) and feeds every byte to o. An
// output pipe's read end is blocking (outputPipe): closing it does not end
// a read under way, which ends when every write end is closed.
func (o *Output) Drain(r io.Reader) {
	b := drainBuffers.Get().(*[64 << 10]byte)
	defer drainBuffers.Put(b)
	var last time.Time
	for {
		// The thread of the read about to be made, for takeBuffered: a
		// goroutine stays on its thread while it waits in a system call.
		o.tid.Store(int32(unix.Gettid()))
		n, err := r.Read(b[:])
		now := time.Now()
		if n > 0 {
			o.Write(b[:n])
			if err == nil && o.isTruncated() && o.discard(r) {
				o.flush()
				return
			}
		}
		if err != nil {
			o.flush()
			return
		}
		if since := now.Sub(last); n < drainTrickle && since < drainGap {
			time.Sleep(drainGap - since)
			now = now.Add(drainGap - since)
		}
		last = now
	}
}

// isTruncated reports whether o is past its cap: nothing more is kept.
func (o *Output) isTruncated() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.truncated
}

// discard moves the rest of r, once o is past its cap, to /dev/null without
// reading it (splice: the pipe's pages are released, not copied). Read, each
// 64 KiB of it cost the service a copy and a decode that kept nothing: a
// program that printed without end took the service 4.6 to 4.9 s of CPU in
// a 5 s run, as much as its own (the limits probe of 2026-12-06). Woken for
// each of the program's writes, the splices alone cost about as much: a
// splice that found the pipe less than full is followed by a pause as
// long as the pipe takes to fill at 1 GiB/s (1 ms for stdout's 1 MiB), none
// for a pipe under 64 KiB (a program can shrink its own), so that output
// past the cap flows at up to that rate. It reports whether r ended (EOF, or
// an error a read would have met too); false where splice can't move from
// r, and Drain reads on, as it does from then on.
func (o *Output) discard(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok || o.noSplice {
		return false
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	null, err := unix.Open("/dev/null", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(null)
	ended := false
	rc.Read(func(fd uintptr) bool {
		size, err := unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0)
		if err != nil {
			o.noSplice = true
			return true
		}
		if size >= 64<<10 && size < stdoutPipeBytes {
			// stderr's 128 KiB: grown to stdout's, as the program may grow it
			// itself, so that its pauses are as few (paused each 128 KiB,
			// 256 MiB past the cap took 543 to 651 ms against 107 to 142).
			if n, err := unix.FcntlInt(fd, unix.F_SETPIPE_SZ, stdoutPipeBytes); err == nil {
				size = n
			}
		}
		pause := time.Duration(size) * time.Second / (1 << 30)
		if size < 64<<10 {
			pause = 0
		}
		for {
			o.tid.Store(int32(unix.Gettid())) // takeBuffered's, as Drain's read
			n, err := unix.Splice(int(fd), nil, null, nil, size, 0)
			switch {
			case err == unix.EINTR:
			case err == unix.EINVAL || err == unix.ENOSYS:
				o.noSplice = true
				return true // not ended: read on
			case err != nil || n == 0:
				ended = true
				return true
			default:
				o.discarded.Add(n)
				if pause > 0 && n < int64(size) {
					time.Sleep(pause)
				}
			}
		}
	})
	return ended
}

// Write implements io.Writer; it never fails.
func (o *Output) Write(p []byte) (int, error) {
	o.decode(p, false)
	return len(p), nil
}

// flush decodes what is pending at the end of the stream: an incomplete sequence is
// invalid there, one U+FFFD.
func (o *Output) flush() { o.decode(nil, true) }

// decode is decodeLocked under the lock, and the callbacks after it. Nothing
// is kept after the stream's end (atEOF): Drain's own, or takeBuffered's.
func (o *Output) decode(p []byte, atEOF bool) {
	o.mu.Lock()
	if o.ended {
		o.mu.Unlock()
		return
	}
	o.ended = atEOF
	was := o.truncated
	chunk := o.decodeLocked(p, atEOF)
	cut := o.truncated && !was
	o.mu.Unlock()
	if chunk != "" && o.onChunk != nil {
		o.onChunk(chunk)
	}
	if cut && o.onCut != nil {
		o.onCut()
	}
}

// decodeLocked appends p to what is pending, keeps as many whole characters as the
// cap allows and returns them.
func (o *Output) decodeLocked(p []byte, atEOF bool) string {
	if o.truncated {
		return ""
	}
	if len(o.pending) > 0 {
		p = append(o.pending, p...)
		o.pending = nil
	}
	// Fast path, the common case: valid text that fits under the cap.
	whole := len(p)
	if !atEOF {
		whole -= incompleteSuffix(p)
	}
	if utf8.Valid(p[:whole]) {
		if n := utf8.RuneCount(p[:whole]); o.chars+n <= o.cap {
			s := string(p[:whole])
			o.buf.WriteString(s)
			o.chars += n
			if whole < len(p) {
				o.pending = append([]byte(nil), p[whole:]...)
			}
			return s
		}
	}
	var out strings.Builder
	for len(p) > 0 {
		if !atEOF && !utf8.FullRune(p) {
			o.pending = append([]byte(nil), p...)
			break
		}
		if o.chars == o.cap {
			o.truncated = true
			break
		}
		r, size := utf8.DecodeRune(p)
		if r == utf8.RuneError && size == 1 {
			out.WriteRune(utf8.RuneError)
			size = invalidLen(p)
		} else {
			out.Write(p[:size])
		}
		o.chars++
		p = p[size:]
	}
	s := out.String()
	o.buf.WriteString(s)
	return s
}

// invalidLen is the length of the invalid sequence at the start of p that one
// U+FFFD replaces: its maximal subpart, the longest start of a well-formed
// sequence (Unicode 15, section 3.9, "U+FFFD Substitution of Maximal
// Subparts"), or its first byte. "\xe2\x82A" is U+FFFD and "A", as Python's
// errors="replace" and Node's TextDecoder give it, where Go's DecodeRune, and
// the x/text decoders built on it, make one U+FFFD per byte. Written here for
// want of a library that does it.
func invalidLen(p []byte) int {
	// The second byte's range for each lead byte; later ones are 80..BF.
	lo, hi, n := byte(0x80), byte(0xBF), 0
	switch b := p[0]; {
	case b >= 0xC2 && b <= 0xDF:
		n = 2
	case b == 0xE0:
		lo, n = 0xA0, 3
	case b == 0xED:
		hi, n = 0x9F, 3
	case b >= 0xE1 && b <= 0xEF:
		n = 3
	case b == 0xF0:
		lo, n = 0x90, 4
	case b >= 0xF1 && b <= 0xF3:
		n = 4
	case b == 0xF4:
		hi, n = 0x8F, 4
	default:
		return 1
	}
	i := 1
	for ; i < n && i < len(p) && p[i] >= lo && p[i] <= hi; i++ {
		lo, hi = 0x80, 0xBF
	}
	return i
}

// incompleteSuffix is the length of a UTF-8 sequence cut short at the end of p
// (0 to 3 bytes) that the next chunk may complete.
func incompleteSuffix(p []byte) int {
	for i := 1; i <= 3 && i <= len(p); i++ {
		c := p[len(p)-i]
		if c < 0x80 {
			return 0 // ASCII: nothing pending
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(p[len(p)-i:]) {
				return i
			}
			return 0
		}
	}
	return 0
}

// Text returns what was kept and whether anything was dropped.
func (o *Output) Text() (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String(), o.truncated
}

// takeBuffered ends the outputs (outs[i] drained from pipes[i]) of pipes whose
// writers are all gone or can write no more, but whose write ends are not
// closed yet: once each pipe is empty (FIONREAD, which is TIOCINQ on Linux)
// while its drain's thread waits in its read of it (so that no byte is on
// its way from the one to the other), or its drain has read EOF already
// (the writers closed it meanwhile), it ends each output as its EOF would
// (flush) and reports true; the drains end at the EOF that the teardown
// brings, keeping nothing more. It reports false, having ended nothing, if
// that is not so within a second; EOF ends the outputs then as ever.
func takeBuffered(outs []*Output, pipes []*os.File) bool {
	if !syscallFileReadable() {
		return false // EOF, which comes after the teardown, then
	}
	deadline := time.Now().Add(time.Second)
	for i, p := range pipes {
		rc, err := p.SyscallConn()
		if err != nil {
			return false
		}
		for {
			var n int
			var ierr error
			if err := rc.Control(func(fd uintptr) {
				// Empty first, then the read: a read found under way once
				// the pipe was empty, with no writer left, takes nothing
				// (a read found first might be copying the last bytes). A
				// tid gone stale (the drain moved on to another thread) is
				// no read of fd, and only makes this wait.
				n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCINQ)
				if ierr == nil && n == 0 && !outs[i].atEnd() && !readingFrom(int(outs[i].tid.Load()), int(fd)) {
					n = -1 // not yet: the drain is neither at EOF nor in its read
				}
			}); err != nil || ierr != nil {
				return false
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	for _, o := range outs {
		o.flush()
	}
	return true
}

// atEnd reports whether o's stream has ended: its drain read EOF.
func (o *Output) atEnd() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ended
}

// syscallFileReadable reports whether this kernel shows a thread's system
// call (/proc/thread-self/syscall, which needs CONFIG_HAVE_ARCH_TRACEHOOK):
// without it takeBuffered can't tell a drain waiting in its read, and every
// run would wait its second for nothing.
var syscallFileReadable = sync.OnceValue(func() bool {
	_, err := os.ReadFile("/proc/thread-self/syscall")
	return err == nil
})

// readingFrom reports whether thread tid of this process waits in a read(2)
// of descriptor fd, or a splice(2) from it (discard) (/proc/self/task/TID/syscall:
// the call's number, then its arguments; "running" when it runs).
func readingFrom(tid, fd int) bool {
	if tid <= 0 {
		return false
	}
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/syscall")
	f := strings.Fields(string(b))
	if err != nil || len(f) < 2 || f[0] != strconv.Itoa(unix.SYS_READ) && f[0] != strconv.Itoa(unix.SYS_SPLICE) {
		return false
	}
	arg, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
	return err == nil && arg == uint64(fd)
}
