package egress

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// errBytesLimit cuts a connection when the run has sent or received its
// MaxBytes.
var errBytesLimit = errors.New("the run's byte limit was reached")

// limits are one run's bounds on its connections: how many are open at once,
// how fast new ones come, and how many bytes go each way over the run.
type limits struct {
	open     chan struct{} // a semaphore of MaxConns slots
	rate     *rate.Limiter // ConnsPerSecond, with a burst of MaxConns
	refused  *rate.Limiter // refusals before the proxies pause: rate's
	queries  *rate.Limiter // DNS queries: dnsQueriesPerConn times rate's
	sent     budget        // bytes the run may still send
	received budget        // bytes the run may still receive
	// delayed counts the DNS reads that waited for queries' rate.
	delayed atomic.Int64
}

// dnsQueriesPerConn is how many DNS queries a run may have answered for each
// connection it may open, in rate and burst: a resolver asks A and AAAA for a
// name, and again for a search domain or a retry. The queries cost the
// service's CPU, not the run's: the red team's run made 100,000 in 9 s, which
// cost the service 6.6 s of CPU to the run's 2.8.
const dnsQueriesPerConn = 4

func newLimits(maxConns int, perSecond float64, maxBytes int64) *limits {
	l := &limits{
		open:    make(chan struct{}, maxConns),
		rate:    rate.NewLimiter(rate.Limit(perSecond), maxConns),
		refused: rate.NewLimiter(rate.Limit(perSecond), maxConns),
		queries: rate.NewLimiter(rate.Limit(dnsQueriesPerConn*perSecond), dnsQueriesPerConn*maxConns),
	}
	l.sent.left.Store(maxBytes)
	l.received.left.Store(maxBytes)
	return l
}

// admit takes a slot for a new connection, or returns the rule that refuses it.
func (l *limits) admit() (ok bool, rule string) {
	select {
	case l.open <- struct{}{}:
	default:
		return false, ruleTooMany
	}
	if !l.rate.Allow() {
		<-l.open
		return false, ruleTooFast
	}
	return true, ""
}

func (l *limits) release() { <-l.open }

// refusalPause is how long a proxy leaves new connections in the kernel's
// backlog after refusing one: nothing while refusals come within the
// connection rate and its burst, then as long as the rate gives each. A
// refusal costs the service's CPU, not the run's: the egress probe's run
// that connected and closed in a loop made 334,000 connections in 15 s, each
// accepted and refused, which took the service 16.4 s of CPU; paced, the
// loop waits in the run's own connect.
func (l *limits) refusalPause() time.Duration { return l.refused.Reserve().Delay() }

// budget is bytes left over a run, shared by its connections. Copies reserve
// a chunk, copy at most that, and give back what they did not use, so the
// run's total never passes the limit even with many connections at once.
type budget struct{ left atomic.Int64 }

// take reserves up to want bytes and returns how many it got, 0 when none are
// left.
func (b *budget) take(want int64) int64 {
	for {
		left := b.left.Load()
		if left <= 0 {
			return 0
		}
		n := min(want, left)
		if b.left.CompareAndSwap(left, left-n) {
			return n
		}
	}
}

func (b *budget) give(n int64) { b.left.Add(n) }

// A raw copy reserves spliceFirst of the budget, and twice what it used up
// each time after, to spliceChunk: a large transfer's bookkeeping is nothing
// next to its copy (Go splices at most 1 MiB a call), and a connection that
// waits for its answer holds little. A reservation is held while the copy
// waits: at 1 MiB from the start, four connections waiting at once held a
// 1 MiB budget whole, and a fifth was cut having moved nothing.
const (
	spliceFirst = 16 << 10
	spliceChunk = 1 << 20
)

// spliceCopy copies src to dst until EOF, within the run's budget b, adding
// what it copied to count as it goes. dst and src are *net.TCPConn and the
// io.LimitedReader around src is one that net's splice path unwraps, so the
// bytes move with splice(2) and never enter user space.
func spliceCopy(dst, src *net.TCPConn, b *budget, count *atomic.Int64) error {
	for chunk := int64(spliceFirst); ; chunk = min(2*chunk, spliceChunk) {
		n := b.take(chunk)
		if n == 0 {
			return errBytesLimit
		}
		lr := &io.LimitedReader{R: src, N: n}
		w, err := io.Copy(dst, lr)
		count.Add(w)
		b.give(n - w)
		if err != nil {
			return err
		}
		if lr.N > 0 {
			return nil // EOF before the chunk was used up
		}
	}
}

// meteredWriter writes to w within the run's budget b: the path of the bytes
// the proxy reads itself (a ClientHello, a request head, a request body).
type meteredWriter struct {
	w     io.Writer
	b     *budget
	count *atomic.Int64
}

func (m meteredWriter) Write(p []byte) (int, error) {
	got := m.b.take(int64(len(p)))
	n, err := m.w.Write(p[:got])
	m.count.Add(int64(n))
	m.b.give(got - int64(n))
	if err == nil && got < int64(len(p)) {
		err = errBytesLimit
	}
	return n, err
}
