package jail

import (
	"io"
	"os"
	"strings"
	"sync"
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

	mu        sync.Mutex
	buf       strings.Builder // guarded by mu
	chars     int             // guarded by mu; code points in buf
	truncated bool            // guarded by mu
	pending   []byte          // guarded by mu; an incomplete UTF-8 sequence at a chunk's end
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

// Drain reads r to EOF (or a read error, such as the pipe being closed) and feeds
// every byte to o.
func (o *Output) Drain(r io.Reader) {
	b := drainBuffers.Get().(*[64 << 10]byte)
	defer drainBuffers.Put(b)
	for {
		n, err := r.Read(b[:])
		if n > 0 {
			o.Write(b[:n])
		}
		if err != nil {
			o.flush()
			return
		}
	}
}

// Write implements io.Writer; it never fails.
func (o *Output) Write(p []byte) (int, error) {
	o.decode(p, false)
	return len(p), nil
}

// flush decodes what is pending at the end of the stream: an incomplete sequence is
// invalid there, one U+FFFD.
func (o *Output) flush() { o.decode(nil, true) }

// decode is decodeLocked under the lock, and the callbacks after it.
func (o *Output) decode(p []byte, atEOF bool) {
	o.mu.Lock()
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

// takeBuffered ends the drains of pipes whose writers are all gone or can
// write no more, but whose write ends are not closed yet: it waits until each
// pipe is empty (its drain has read what it held: FIONREAD, which is TIOCINQ
// on Linux), then stops the drains with a read deadline. It reports false,
// having stopped nothing, if a pipe is not emptied within a second; EOF ends
// the drains then as ever.
func takeBuffered(pipes ...*os.File) bool {
	deadline := time.Now().Add(time.Second)
	for _, p := range pipes {
		rc, err := p.SyscallConn()
		if err != nil {
			return false
		}
		for {
			var n int
			var ierr error
			if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }); err != nil || ierr != nil {
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
	for _, p := range pipes {
		p.SetReadDeadline(time.Now())
	}
	return true
}
