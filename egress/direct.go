package egress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/bpf"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"

	"github.com/brig-sandbox/brig/internal/osthread"
	"github.com/brig-sandbox/brig/jail/pid1"
)

// A networked run reaches hosts by name: its DNS answers an allowed name with
// 127.0.0.1, where the proxies listen. A program that dials an address
// instead (a literal in its code, a resolver of its own) found no route,
// failed with "network unreachable", and nothing said it had tried. So a
// networked run's namespace makes every address local (a "local" default
// route on lo, IPv4 and IPv6, in the local table): a direct attempt is
// delivered to the namespace's own stack, where nothing listens on its
// address, and the kernel refuses it at once, as a host with nothing on that
// port would (a TCP reset; for UDP an ICMP port unreachable), so the program
// sees "connection refused". The service's raw sockets in the namespace,
// filtered in the kernel to a TCP SYN or a UDP datagram whose destination is
// not loopback, read a copy of each attempt's first packet, and the attempt
// is listed as refused (RuleDirect, via "direct"): a TCP connection each
// time, a UDP destination once a run. Nothing leaves the namespace, which has
// no device but lo; the sockets only read.
//
// (A TUN device that the default routes led to, whose packets the service
// answered, did the same, but making it took 0.8 ms a run, its registration
// and its sysctl tables most of it, and unmaking it 25 ms at the run's end
// unless it was left to the namespace's teardown.)

// RuleDirect is a direct attempt's rule, which says what to do instead (the
// supervisor counts it under its own rule_class).
const RuleDirect = "an address dialed directly (a run reaches hosts by name, through its DNS and proxies)"

// viaDirect is a direct attempt's Via.
const viaDirect = "direct"

// directRate bounds the packets a run's sockets are read for, so that a
// program that floods them costs the service little CPU: past the burst, the
// readers wait, and the kernel drops what no longer fits the sockets' buffers.
const (
	directRate  = 1000
	directBurst = 100
)

// loopbackIndex is lo's interface index in every network namespace.
const loopbackIndex = 1

// directSockets are a run's raw sockets, TCP and UDP of each family: an IPv4
// one's reads carry the IP header, an IPv6 one's the destination as a
// control message. (One packet socket on lo instead, for both families, had
// its close wait out an RCU grace period, and a warm networked run's p50 at
// C=1 went from 6.6 to 11.8 ms.)
type directSockets struct {
	// raw are the sockets: IPv4 TCP, IPv4 UDP, IPv6 TCP, IPv6 UDP.
	raw []*net.IPConn
	// readers counts serveDirect's goroutines.
	readers sync.WaitGroup

	mu   sync.Mutex
	seen map[directKey]bool
}

func (d *directSockets) Close() {
	for _, c := range d.raw {
		c.Close()
	}
}

// openDirect makes every address local in the calling thread's network
// namespace and opens the raw sockets there, filtered.
func openDirect() (_ *directSockets, retErr error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("opening netlink: %w", err)
	}
	defer h.Close()
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		bits := 32
		if family == netlink.FAMILY_V6 {
			bits = 128
		}
		route := &netlink.Route{
			Family: family, Table: unix.RT_TABLE_LOCAL, Type: unix.RTN_LOCAL, Scope: netlink.SCOPE_HOST,
			LinkIndex: loopbackIndex, Dst: &net.IPNet{IP: make(net.IP, bits/8), Mask: net.CIDRMask(0, bits)},
		}
		if err := h.RouteAdd(route); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("making every address local (%v): %w", route.Dst, err)
		}
	}
	d := &directSockets{seen: map[directKey]bool{}}
	defer func() {
		if retErr != nil {
			d.Close()
		}
	}()
	open := func(network string) (*net.IPConn, error) {
		c, err := net.ListenIP(network, nil)
		if err != nil {
			return nil, fmt.Errorf("opening a raw %s socket: %w", network, err)
		}
		d.raw = append(d.raw, c)
		return c, nil
	}
	for _, proto := range []string{"tcp", "udp"} {
		c, err := open("ip4:" + proto)
		if err != nil {
			return nil, err
		}
		if err := ipv4.NewPacketConn(c).SetBPF(directFilter(4, proto)); err != nil {
			return nil, fmt.Errorf("filtering the raw IPv4 %s socket: %w", proto, err)
		}
	}
	for _, proto := range []string{"tcp", "udp"} {
		c, err := open("ip6:" + proto)
		if err != nil {
			return nil, err
		}
		pc := ipv6.NewPacketConn(c)
		if proto == "tcp" { // every UDP datagram passes: no filter to compile
			if err := pc.SetBPF(directFilter(6, proto)); err != nil {
				return nil, fmt.Errorf("filtering the raw IPv6 %s socket: %w", proto, err)
			}
		}
		if err := pc.SetControlMessage(ipv6.FlagDst, true); err != nil {
			return nil, fmt.Errorf("asking the raw IPv6 %s socket for destinations: %w", proto, err)
		}
	}
	return d, nil
}

// directFilter is the kernel's filter of a raw socket of the IP version and
// transport given: a TCP segment passes if it is a SYN without ACK, a UDP
// datagram always; an IPv4 packet only if its destination is not in
// 127.0.0.0/8 (the run's DNS and proxies, and what the program does on
// loopback). An IPv6 raw socket's data starts at the transport header: its
// loopback destination (::1) is left to the reader.
func directFilter(version int, proto string) []bpf.RawInstruction {
	const accept, drop = 0xffff, 0
	var prog []bpf.Instruction
	if version == 4 {
		prog = append(prog,
			bpf.LoadAbsolute{Off: 16, Size: 4},
			bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xff000000},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 0x7f000000, SkipTrue: 1},
			bpf.RetConstant{Val: drop},
		)
	}
	if proto == "tcp" {
		flags := bpf.Instruction(bpf.LoadAbsolute{Off: 13, Size: 1})
		if version == 4 {
			prog = append(prog, bpf.LoadMemShift{Off: 0}) // X = the IPv4 header's length
			flags = bpf.LoadIndirect{Off: 13, Size: 1}
		}
		const syn, ack = 0x02, 0x10
		prog = append(prog,
			flags,
			bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: syn | ack},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: syn, SkipTrue: 1},
			bpf.RetConstant{Val: drop},
		)
	}
	prog = append(prog, bpf.RetConstant{Val: accept})
	raw, err := bpf.Assemble(prog)
	if err != nil {
		panic(fmt.Sprintf("assembling a direct attempts filter: %v", err)) // a constant program
	}
	return raw
}

// serveDirect reads the raw sockets until stopDirect, and lists each attempt
// once: a TCP connection by its ports, a UDP destination once a run.
func (r *Run) serveDirect(d *directSockets) {
	lim := rate.NewLimiter(directRate, directBurst)
	for i, c := range d.raw {
		rc, err := c.SyscallConn()
		if err != nil {
			continue
		}
		d.readers.Add(1)
		go func() {
			defer d.readers.Done()
			b := newDirectBuffers()
			// A packet a token; the function returning false waits for the
			// next. stopDirect's deadline, or Close, ends the wait.
			for lim.Wait(r.ctx) == nil {
				if rc.Read(func(fd uintptr) bool { return r.readDirect(d, i, int(fd), 1, b) > 0 }) != nil {
					return
				}
			}
		}()
	}
}

// stopDirect ends the readers and lists what the sockets still hold, read
// without waiting: a program's last attempt, made just before the run's end,
// may not have been read yet (the readers are woken, not run, when it comes).
// Then it closes them.
func (r *Run) stopDirect(d *directSockets) {
	for _, c := range d.raw {
		c.SetReadDeadline(time.Now())
	}
	d.readers.Wait()
	b := newDirectBuffers()
	for i, c := range d.raw {
		rc, err := c.SyscallConn()
		if err != nil {
			continue
		}
		// Past its deadline, the runtime would not call the function at all.
		c.SetReadDeadline(time.Time{})
		// The run's processes are dead by now; bounded all the same.
		rc.Read(func(fd uintptr) bool { r.readDirect(d, i, int(fd), directRate, b); return true })
	}
	d.Close()
}

// directBuffers are a reader's: a packet's headers (the rest is cut) and an
// IPv6 packet's destination.
type directBuffers struct{ packet, oob []byte }

func newDirectBuffers() directBuffers {
	return directBuffers{make([]byte, 128), ipv6.NewControlMessage(ipv6.FlagDst)}
}

// readDirect lists the attempts of up to max packets that socket i of d
// holds, without waiting for any, and returns how many it read. An IPv4 raw
// socket's packet starts at the IP header; an IPv6 one's at the transport
// header, with the destination in a control message.
func (r *Run) readDirect(d *directSockets, i, fd, max int, b directBuffers) int {
	v6, udp := i >= 2, i%2 == 1
	buf, oob := b.packet, b.oob
	for read := range max {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_DONTWAIT)
		if err != nil {
			return read // EAGAIN: nothing left
		}
		n = min(n, len(buf))
		if !v6 {
			if h, err := ipv4.ParseHeader(buf[:n]); err == nil && h.Len <= n && h.FragOff == 0 {
				r.directAttempt(d, h.Dst.To4(), buf[h.Len:n], udp)
			}
			continue
		}
		var cm ipv6.ControlMessage
		if cm.Parse(oob[:oobn]) == nil {
			r.directAttempt(d, cm.Dst, buf[:n], udp)
		}
	}
	return max
}

// directAttempt lists, once, the attempt whose first packet went to dst with
// the transport header l4.
func (r *Run) directAttempt(d *directSockets, dst net.IP, l4 []byte, udp bool) {
	addr, _ := netip.AddrFromSlice(dst)
	k, ok := directAttemptKey(addr, l4, udp)
	if !ok {
		return
	}
	d.mu.Lock()
	listed := d.seen[k]
	if !listed {
		if len(d.seen) >= MaxRefusals {
			clear(d.seen)
		}
		d.seen[k] = true
	}
	d.mu.Unlock()
	if !listed {
		r.refuse(k.dst.String(), int(k.dstPort), viaDirect, RuleDirect)
	}
}

// directKey identifies an attempt: a TCP connection by its source port too
// (zero for UDP, whose destination alone is one attempt).
type directKey struct {
	dst              netip.Addr
	dstPort, srcPort uint16
}

// directAttemptKey is the attempt whose first packet went to dst with the
// transport header l4 (TCP, or UDP if udp): false for what is not one (to
// loopback, or a TCP segment that is not a SYN: the filters drop those, but
// a packet queued before its socket's filter was attached passed none).
func directAttemptKey(dst netip.Addr, l4 []byte, udp bool) (directKey, bool) {
	const syn, ack = 0x02, 0x10
	if !dst.IsValid() || dst.IsLoopback() || len(l4) < 8 || (!udp && (len(l4) < 14 || l4[13]&(syn|ack) != syn)) {
		return directKey{}, false
	}
	k := directKey{dst: dst.Unmap(), dstPort: binary.BigEndian.Uint16(l4[2:4])}
	if !udp {
		k.srcPort = binary.BigEndian.Uint16(l4[0:2])
	}
	return k, true
}

// directWarning is the once of warnDirectUnavailable.
var directWarning sync.Once

// warnDirectUnavailable logs, once a process, that direct attempts can't be
// listed on this host: they still fail, unlisted.
func (r *Run) warnDirectUnavailable(err error) {
	directWarning.Do(func() {
		r.log.Warn("egress: a networked run's direct connection to an address fails but is not listed on this host", "err", err,
			"hint", "run the service as root (it needs CAP_NET_ADMIN and CAP_NET_RAW in the runs' network namespaces)")
	})
}

// CheckDirect makes a network namespace of its own what a networked run's
// is for direct attempts: nil if this host lists them (brig check).
func CheckDirect() error {
	return osthread.Run(func() (bool, error) {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return false, fmt.Errorf("making a network namespace to try it in: %w", err)
		}
		// A sandbox's init brings its lo up; a new namespace's starts down.
		if err := pid1.LinkUp("lo"); err != nil {
			return true, fmt.Errorf("bringing lo up: %w", err)
		}
		d, err := openDirect()
		if err == nil {
			d.Close()
		}
		return true, err // the thread, in the new namespace, ends
	})
}
