package egress

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/internal/testutil"
)

// loopbackServer serves each connection to a listener on host loopback
// with handle, which closes it, each on a goroutine of its own, until the
// benchmark's cleanup, and returns its address.
func loopbackServer(tb testing.TB, handle func(net.Conn)) string {
	tb.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	tb.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return l.Addr().String()
}

// rawUpstream is a minimal HTTP/1 server on host loopback: it reads a request
// head and answers with size bytes, then closes. Lighter than net/http, so
// the benchmarks measure the proxy.
func rawUpstream(tb testing.TB, size int) string {
	head := []byte("HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(size) + "\r\nConnection: close\r\n\r\n")
	body := bytes.Repeat([]byte("x"), min(size, 1<<20))
	return loopbackServer(tb, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(line) <= 2 {
				break
			}
		}
		c.Write(head)
		for left := size; left > 0; {
			n, err := c.Write(body[:min(left, len(body))])
			if err != nil {
				return
			}
			left -= n
		}
	})
}

// sinkUpstream is a server on host loopback that reads each connection to
// its end and closes it.
func sinkUpstream(tb testing.TB) string {
	return loopbackServer(tb, func(c net.Conn) { io.Copy(io.Discard, c) })
}

// benchRun starts a run whose upstream.test:80 is pinned to upstream, with
// limits out of the way of a benchmark.
func benchRun(b *testing.B, upstream string) *testNS {
	return benchRunPinned(b, map[string]string{"upstream.test:80": upstream})
}

// benchRunPinned is benchRun with pins of the benchmark's.
func benchRunPinned(b *testing.B, pins map[string]string) *testNS {
	cfg := &Config{
		Pins:           pins,
		MaxConns:       1 << 16,
		ConnsPerSecond: 1e9,
		MaxBytes:       1 << 50,
		Logger:         slog.New(slog.DiscardHandler),
	}
	r, ns, _ := startRun(b, cfg, testPolicy)
	b.Cleanup(func() { r.Close() })
	return ns
}

// fetch makes one connection to addr, sends a request for upstream.test and
// reads the answer to its end.
func fetch(addr string, buf []byte) (int64, error) {
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: upstream.test\r\n\r\n"); err != nil {
		return 0, err
	}
	var total int64
	for {
		n, err := c.Read(buf)
		total += int64(n)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// BenchmarkProxyLatency measures a connection and a small request, through
// the transparent proxy on :80 from inside a namespace and directly to the
// same upstream on host loopback. The added latency per connection is the
// difference of the p50 (and p99) metrics.
func BenchmarkProxyLatency(b *testing.B) {
	testutil.RequireRoot(b)
	upstream := rawUpstream(b, 100)
	ns := benchRun(b, upstream)
	for _, tt := range []struct {
		name string
		addr string
		in   func(func())
	}{
		{name: "direct", addr: upstream, in: func(f func()) { f() }},
		{name: "proxy", addr: "127.0.0.1:80", in: ns.do},
	} {
		b.Run(tt.name, func(b *testing.B) {
			times := make([]time.Duration, 0, b.N)
			buf := make([]byte, 4096)
			var err error
			tt.in(func() {
				for i := 0; i < b.N && err == nil; i++ {
					start := time.Now()
					_, err = fetch(tt.addr, buf)
					times = append(times, time.Since(start))
				}
			})
			if err != nil {
				b.Fatal(err)
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(times[len(times)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkProxyThroughput moves 100 MiB from the upstream to a client,
// through the transparent proxy and directly.
func BenchmarkProxyThroughput(b *testing.B) {
	testutil.RequireRoot(b)
	const size = 100 << 20
	upstream := rawUpstream(b, size)
	ns := benchRun(b, upstream)
	for _, tt := range []struct {
		name string
		addr string
		in   func(func())
	}{
		{name: "direct", addr: upstream, in: func(f func()) { f() }},
		{name: "proxy", addr: "127.0.0.1:80", in: ns.do},
	} {
		b.Run(tt.name, func(b *testing.B) {
			b.SetBytes(size)
			buf := make([]byte, 256<<10)
			var err error
			var n int64
			tt.in(func() {
				for i := 0; i < b.N && err == nil; i++ {
					n, err = fetch(tt.addr, buf)
					if err == nil && n < size {
						err = io.ErrUnexpectedEOF
					}
				}
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkTunnelText sends 64 MiB of text lines up a raw CONNECT tunnel,
// which the proxy scans for the names a front routes by as long as the bytes
// stay text (scanTunnel), and directly to the same sink. cpu-ns/B is the
// whole process's CPU (client, proxy and sink) per byte sent: the proxy's
// share is the difference.
func BenchmarkTunnelText(b *testing.B) {
	testutil.RequireRoot(b)
	const size = 64 << 20
	sink := sinkUpstream(b)
	ns := benchRunPinned(b, map[string]string{"upstream.test:9000": sink})
	chunk := bytes.Repeat(append(bytes.Repeat([]byte("A"), 1023), '\n'), 64)
	send := func(addr string, connect bool) error {
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		if connect {
			io.WriteString(c, "CONNECT upstream.test:9000 HTTP/1.1\r\n\r\n")
			if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
				return err
			}
			// The blank line after the status line is left unread: the
			// upstream sends nothing.
		}
		for left := size; left > 0; left -= len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				return err
			}
		}
		c.(*net.TCPConn).CloseWrite()
		_, err = io.Copy(io.Discard, c)
		return err
	}
	for _, tt := range []struct {
		name    string
		addr    string
		connect bool
		in      func(func())
	}{
		{name: "direct", addr: sink, in: func(f func()) { f() }},
		{name: "tunnel", addr: "127.0.0.1:3128", connect: true, in: ns.do},
	} {
		b.Run(tt.name, func(b *testing.B) {
			b.SetBytes(size)
			var err error
			cpu := processCPU()
			tt.in(func() {
				for i := 0; i < b.N && err == nil; i++ {
					err = send(tt.addr, tt.connect)
				}
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N)/size, "cpu-ns/B")
		})
	}
}

// processCPU is the process's user and system CPU so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
