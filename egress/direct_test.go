package egress

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/internal/osthread"
	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/jail/pid1"
)

// testHost is a network namespace the test made whose lo also holds an
// address of each family, with a TCP and a UDP listener on each: a host a
// run's program might dial by address. It is reachable from nowhere else, so
// a direct attempt that got out of the run's namespace would not leave this
// machine, and would show up here.
type testHost struct {
	ns     *testNS
	addrs  []netip.Addr
	port   int
	tcpIn  atomic.Int64
	udpIn  atomic.Int64
	closer []io.Closer
}

func newTestHost(t *testing.T) *testHost {
	t.Helper()
	h := &testHost{ns: newTestNS(t), addrs: []netip.Addr{netip.MustParseAddr("10.254.0.2"), netip.MustParseAddr("fd00:b219::2")}}
	var err error
	h.ns.do(func() {
		var link netlink.Link
		if link, err = netlink.LinkByName("lo"); err != nil {
			return
		}
		for _, a := range h.addrs {
			n := &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}
			if err = netlink.AddrAdd(link, &netlink.Addr{IPNet: n, Flags: syscall.IFA_F_NODAD}); err != nil {
				return
			}
		}
		var l *net.TCPListener
		if l, err = net.ListenTCP("tcp", &net.TCPAddr{IP: h.addrs[0].AsSlice()}); err != nil {
			return
		}
		h.port = l.Addr().(*net.TCPAddr).Port
		h.serve(l)
		for i, a := range h.addrs {
			if i > 0 {
				if l, err = net.ListenTCP("tcp", &net.TCPAddr{IP: a.AsSlice(), Port: h.port}); err != nil {
					return
				}
				h.serve(l)
			}
			var u *net.UDPConn
			if u, err = net.ListenUDP("udp", &net.UDPAddr{IP: a.AsSlice(), Port: h.port}); err != nil {
				return
			}
			h.closer = append(h.closer, u)
			go func() {
				buf := make([]byte, 64)
				for {
					if _, _, err := u.ReadFrom(buf); err != nil {
						return
					}
					h.udpIn.Add(1)
				}
			}()
		}
	})
	if err != nil {
		t.Fatalf("making the test host: %v", err)
	}
	t.Cleanup(func() {
		for _, c := range h.closer {
			c.Close()
		}
	})
	return h
}

func (h *testHost) serve(l *net.TCPListener) {
	h.closer = append(h.closer, l)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			h.tcpIn.Add(1)
			c.Close()
		}
	}()
}

// TestRunDirectAttempts: a program that dials an address instead of a name
// is refused at once ("connection refused", not a wait), over TCP and UDP and
// both families, and each attempt is listed and announced as a refusal with
// RuleDirect: a TCP connection each time, a UDP destination once. Nothing
// reaches the host it dialed.
func TestRunDirectAttempts(t *testing.T) {
	testutil.RequireRoot(t)
	u := newUpstreams(t)
	r, ns, events := startRun(t, u.config(io.Discard), testPolicy)
	host := newTestHost(t)

	type want struct {
		host string
		port int
	}
	var wants []want
	for _, a := range host.addrs {
		addr := net.JoinHostPort(a.String(), strconv.Itoa(host.port))
		for range 2 { // two connections, two listings
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			start := time.Now()
			c, err := ns.dial(ctx, "tcp", addr)
			cancel()
			if err == nil {
				c.Close()
				t.Fatalf("dialing %s from the run: connected, want refused", addr)
			}
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("dialing %s from the run: %v, want connection refused", addr, err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("dialing %s from the run: refused after %v, want at once", addr, took)
			}
			wants = append(wants, want{a.String(), host.port})
		}
		// Three datagrams to one destination: each answered, one listing.
		var rerr error
		ns.do(func() {
			c, err := net.Dial("udp", addr)
			if err != nil {
				rerr = err
				return
			}
			defer c.Close()
			for range 3 {
				c.Write([]byte("ping"))
			}
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, rerr = c.Read(make([]byte, 8))
		})
		if !errors.Is(rerr, syscall.ECONNREFUSED) {
			t.Errorf("a UDP exchange with %s from the run: %v, want connection refused", addr, rerr)
		}
		wants = append(wants, want{a.String(), host.port})
	}

	conns := r.Close()
	var got []want
	for _, c := range conns {
		if c.Via != viaDirect {
			continue
		}
		if c.Allowed || c.Rule != RuleDirect {
			t.Errorf("direct attempt %+v: want refused with rule %q", c, RuleDirect)
		}
		got = append(got, want{c.Host, c.Port})
	}
	// Each socket has its reader: the order of the list is not the program's.
	order := func(a, b want) int { return cmp.Or(cmp.Compare(a.host, b.host), cmp.Compare(a.port, b.port)) }
	slices.SortFunc(got, order)
	slices.SortFunc(wants, order)
	if !slices.Equal(got, wants) {
		t.Errorf("listed direct attempts %v, want %v", got, wants)
	}
	announced := 0
	for _, c := range *events {
		if c.Via == viaDirect {
			announced++
		}
	}
	if announced != len(wants) {
		t.Errorf("announced %d direct attempts, want %d", announced, len(wants))
	}
	if n, m := host.tcpIn.Load(), host.udpIn.Load(); n != 0 || m != 0 {
		t.Errorf("the dialed host got %d connections and %d datagrams, want none", n, m)
	}
}

// TestDirectFilter: the raw sockets' kernel filters pass a TCP SYN and a UDP
// datagram to an address that is not loopback, and nothing else: not the
// run's own traffic with its DNS and proxies on 127.0.0.1, not a segment of a
// connection, not a reset; and the reader takes each as one attempt, to the
// address and port it was sent to (an IPv6 raw socket's data starts at the
// transport header; the reader drops its loopback destinations).
func TestDirectFilter(t *testing.T) {
	v4 := func(dst string, proto byte, l4 []byte) []byte {
		d := netip.MustParseAddr(dst).As4()
		h := []byte{0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, proto, 0, 0, 192, 0, 2, 9}
		return append(append(h, d[:]...), l4...)
	}
	tcp := func(flags byte) []byte {
		return []byte{0x9c, 0x40, 0x01, 0xbb, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0}
	}
	udp := []byte{0x9c, 0x40, 0, 53, 0, 12, 0, 0, 'p', 'i', 'n', 'g'}
	const syn, ack, rst = 0x02, 0x10, 0x04
	for _, c := range []struct {
		name     string
		version  int
		dst      string
		proto    string
		packet   []byte
		wantPort int // 0: no attempt
	}{
		{"v4 SYN out", 4, "198.51.100.7", "tcp", v4("198.51.100.7", 6, tcp(syn)), 443},
		{"v4 SYN to loopback", 4, "127.0.0.1", "tcp", v4("127.0.0.1", 6, tcp(syn)), 0},
		{"v4 SYN to 127.0.0.53", 4, "127.0.0.53", "tcp", v4("127.0.0.53", 6, tcp(syn)), 0},
		{"v4 SYN-ACK", 4, "198.51.100.7", "tcp", v4("198.51.100.7", 6, tcp(syn|ack)), 0},
		{"v4 ACK", 4, "198.51.100.7", "tcp", v4("198.51.100.7", 6, tcp(ack)), 0},
		{"v4 RST", 4, "198.51.100.7", "tcp", v4("198.51.100.7", 6, tcp(rst|ack)), 0},
		{"v4 UDP out", 4, "198.51.100.7", "udp", v4("198.51.100.7", 17, udp), 53},
		{"v4 UDP to the run's DNS", 4, "127.0.0.1", "udp", v4("127.0.0.1", 17, udp), 0},
		{"v6 SYN out", 6, "2001:db8::7", "tcp", tcp(syn), 443},
		{"v6 SYN to a v4-mapped address", 6, "::ffff:198.51.100.7", "tcp", tcp(syn), 443},
		{"v6 SYN to ::1", 6, "::1", "tcp", tcp(syn), 0},
		{"v6 ACK", 6, "2001:db8::7", "tcp", tcp(ack), 0},
		{"v6 RST", 6, "2001:db8::7", "tcp", tcp(rst), 0},
		{"v6 UDP out", 6, "2001:db8::7", "udp", udp, 53},
		{"v6 UDP to ::1", 6, "::1", "udp", udp, 0},
	} {
		pass := true
		if c.version == 4 || c.proto == "tcp" { // an IPv6 UDP socket has no filter
			vm, err := bpf.NewVM(mustDisassemble(t, directFilter(c.version, c.proto)))
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			n, err := vm.Run(c.packet)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			pass = n > 0
		}
		l4 := c.packet
		if c.version == 4 {
			l4 = c.packet[20:]
		}
		k, ok := directAttemptKey(netip.MustParseAddr(c.dst), l4, c.proto == "udp")
		if got := pass && ok; got != (c.wantPort != 0) {
			t.Errorf("%s: an attempt %v (filter %v, reader %v), want %v", c.name, got, pass, ok, c.wantPort != 0)
		}
		if ok && c.wantPort != 0 && (int(k.dstPort) != c.wantPort || k.dst != netip.MustParseAddr(c.dst).Unmap()) {
			t.Errorf("%s: attempt %+v, want %s port %d", c.name, k, c.dst, c.wantPort)
		}
	}
}

func mustDisassemble(t *testing.T, raw []bpf.RawInstruction) []bpf.Instruction {
	t.Helper()
	insns, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("a filter does not disassemble")
	}
	return insns
}

// BenchmarkNetnsDirect is what a networked run's namespace costs to make and
// unmake, without and with what lists direct attempts.
func BenchmarkNetnsDirect(b *testing.B) {
	testutil.RequireRoot(b)
	for _, direct := range []bool{false, true} {
		b.Run("direct="+strconv.FormatBool(direct), func(b *testing.B) {
			for b.Loop() {
				err := osthread.Run(func() (bool, error) {
					if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
						return false, err
					}
					if err := pid1.LinkUp("lo"); err != nil {
						return true, err
					}
					if direct {
						d, err := openDirect()
						if err != nil {
							return true, err
						}
						d.Close()
					}
					return true, nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
