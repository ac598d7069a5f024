package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/brig-sandbox/brig/internal/testutil"
)

// testHost is a network namespace the test made whose lo also holds an
// address of each family, with a TCP and a UDP listener on each: a host a
// run's program might dial by address. It is reachable from nowhere else, so
// a direct attempt that got past the run's device would not leave this
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
// ruleDirect: a TCP connection each time, a UDP destination once. Nothing
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
		if c.Allowed || c.Rule != ruleDirect {
			t.Errorf("direct attempt %+v: want refused with rule %q", c, ruleDirect)
		}
		got = append(got, want{c.Host, c.Port})
	}
	if len(got) != len(wants) {
		t.Fatalf("listed direct attempts %v, want %v", got, wants)
	}
	for i := range wants {
		if got[i] != wants[i] {
			t.Errorf("direct attempt %d: listed %v, want %v", i, got[i], wants[i])
		}
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

// FuzzParseDirect: whatever a program makes its kernel send to the device,
// reading it never panics, and an answer is a well-formed packet of the
// attempt's family that quotes it.
func FuzzParseDirect(f *testing.F) {
	syn4 := []byte{0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0, 192, 0, 0, 8, 10, 254, 0, 2,
		0x9c, 0x40, 0x01, 0xbb, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0}
	udp6 := append([]byte{0x60, 0, 0, 0, 0, 12, 17, 64}, netip.MustParseAddr("fd62:7269:6700::8").AsSlice()...)
	udp6 = append(udp6, netip.MustParseAddr("fd00:b219::2").AsSlice()...)
	udp6 = append(udp6, 0x9c, 0x40, 0, 53, 0, 12, 0, 0, 'p', 'i', 'n', 'g')
	f.Add(syn4)
	f.Add(udp6)
	f.Add([]byte{0x45})
	f.Add([]byte{0x4f, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2})
	f.Fuzz(func(t *testing.T, p []byte) {
		a, ok := parseDirect(p)
		if !ok {
			return
		}
		ans := a.unreachable(p)
		if len(ans) == 0 {
			return
		}
		if a.src.Is4() {
			if ans[0]>>4 != 4 || checksum(ans[:20]) != 0 || int(ans[2])<<8|int(ans[3]) != len(ans) {
				t.Fatalf("answer %x to %x: not a well-formed IPv4 packet", ans, p)
			}
		} else if ans[0]>>4 != 6 || int(ans[4])<<8|int(ans[5]) != len(ans)-40 {
			t.Fatalf("answer %x to %x: not a well-formed IPv6 packet", ans, p)
		}
	})
}
