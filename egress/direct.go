package egress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"

	"github.com/brig-sandbox/brig/internal/osthread"
)

// A networked run reaches hosts by name: its DNS answers an allowed name with
// 127.0.0.1, where the proxies listen. A program that dials an address
// instead (a literal in its code, a resolver of its own) would find no route
// and fail with "network unreachable", and nothing would say it tried. So its
// namespace also holds a TUN device, directDevice, that its default routes
// (IPv4 and IPv6) lead to: the service reads the first packet of each such
// attempt there, lists it as refused (ruleDirect, via "direct") and answers it
// at once with an ICMP port unreachable, which the program's connect (TCP) or
// next receive (UDP) sees as "connection refused". Nothing read from the
// device is ever forwarded; nothing is written to it but those answers.
const directDevice = "brig0"

// The device's addresses, which the kernel takes as the source of a direct
// attempt: 192.0.0.8 is the IPv4 dummy address (RFC 7600, for a host with no
// other), and the IPv6 one is brig's own unique local address ("brig" in its
// global id). Neither can be reached from outside the run's namespace.
var (
	directAddr4 = netip.MustParseAddr("192.0.0.8")
	directAddr6 = netip.MustParseAddr("fd62:7269:6700::8")
)

// ruleDirect is a direct attempt's rule, which says what to do instead.
const ruleDirect = "an address dialed directly (a run reaches hosts by name, through its DNS and proxies)"

// viaDirect is a direct attempt's Via.
const viaDirect = "direct"

// directRate bounds the packets a run's device is read for, so that a
// program that floods it costs the service little CPU: past the burst, the
// reader waits and the kernel's queue (500 packets) drops the rest; a dropped
// SYN is sent again a second later and answered then.
const (
	directRate  = 1000
	directBurst = 100
)

// openDirect makes the device in the calling thread's network namespace, with
// its addresses and the default routes, and returns it (non-blocking, for
// the runtime's poller). The device goes when the file is closed, or with the
// namespace.
func openDirect() (_ *os.File, retErr error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("opening /dev/net/tun: %w", err)
	}
	defer func() {
		if retErr != nil {
			unix.Close(fd)
		}
	}()
	ifr, err := unix.NewIfreq(directDevice)
	if err != nil {
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return nil, fmt.Errorf("making the TUN device %s: %w", directDevice, err)
	}
	// Persistent, so that closing the file (the run's end) does not unregister
	// the device, which waits out RCU grace periods (24.7 ms a Start and Close
	// of a Run, against 0.33 without the device: TestRunStartCloseLeaks): it
	// goes with the namespace instead, in the kernel's batch of the
	// namespace's own devices. The file is the only way to its packets.
	if err := unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1); err != nil {
		return nil, fmt.Errorf("making the TUN device %s persistent: %w", directDevice, err)
	}
	link, err := netlink.LinkByName(directDevice)
	if err != nil {
		return nil, fmt.Errorf("finding the TUN device %s: %w", directDevice, err)
	}
	// No link-local address of its own: the device only answers, and that
	// would be one more address, and router solicitations read for nothing.
	if err := netlink.LinkSetIP6AddrGenMode(link, nl.IN6_ADDR_GEN_MODE_NONE); err != nil {
		return nil, fmt.Errorf("turning off %s's IPv6 link-local address: %w", directDevice, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return nil, fmt.Errorf("bringing %s up: %w", directDevice, err)
	}
	for _, a := range []netip.Addr{directAddr4, directAddr6} {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}, Flags: unix.IFA_F_NODAD}
		if err := netlink.AddrAdd(link, addr); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("giving %s the address %s: %w", directDevice, a, err)
		}
		family, name := netlink.FAMILY_V4, "IPv4"
		if a.Is6() {
			family, name = netlink.FAMILY_V6, "IPv6"
		}
		def := &net.IPNet{IP: make(net.IP, a.BitLen()/8), Mask: net.CIDRMask(0, a.BitLen())}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Scope: netlink.SCOPE_LINK, Family: family, Dst: def}); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("routing the %s default through %s: %w", name, directDevice, err)
		}
	}
	// Only now to the runtime's poller: polled before TUNSETIFF, the file
	// has no device, and its registration would never be woken.
	return os.NewFile(uintptr(fd), "/dev/net/tun"), nil
}

// serveDirect reads the run's device until Close closes it: it lists each
// direct attempt once (a TCP connection by its ports, a UDP destination once
// a run) and answers every one.
func (r *Run) serveDirect(dev *os.File) {
	defer r.wg.Done()
	lim := rate.NewLimiter(directRate, directBurst)
	seen := map[directKey]bool{}
	buf := make([]byte, 1<<16)
	for {
		n, err := dev.Read(buf)
		if err != nil {
			return // closed
		}
		if lim.Wait(r.ctx) != nil {
			return
		}
		a, ok := parseDirect(buf[:n])
		if !ok {
			continue
		}
		if k := a.key(); !seen[k] {
			if len(seen) >= MaxRefusals {
				clear(seen)
			}
			seen[k] = true
			r.refuse(a.dst.String(), int(a.dstPort), viaDirect, ruleDirect)
		}
		dev.Write(a.unreachable(buf[:n]))
	}
}

// directAttempt is the first packet of an attempt: a TCP SYN or a UDP datagram.
type directAttempt struct {
	src, dst         netip.Addr
	srcPort, dstPort uint16
	udp              bool
	// header is the IP header's length.
	header int
}

// directKey identifies an attempt: a TCP connection by its source port (a
// SYN sent again is the same attempt), UDP by its destination alone.
type directKey struct {
	dst     netip.Addr
	dstPort uint16
	srcPort uint16
	udp     bool
}

func (a directAttempt) key() directKey {
	k := directKey{dst: a.dst, dstPort: a.dstPort, udp: a.udp}
	if !a.udp {
		k.srcPort = a.srcPort
	}
	return k
}

// parseDirect reads an IPv4 or IPv6 packet from the device: a TCP SYN or a
// UDP datagram that is not a later fragment. Anything else (a packet the
// program's kernel sends on its own, a TCP segment that is not a SYN) is not
// an attempt and gets no answer.
func parseDirect(p []byte) (directAttempt, bool) {
	var a directAttempt
	var proto int
	switch {
	case len(p) >= ipv4.HeaderLen && p[0]>>4 == 4:
		h, err := ipv4.ParseHeader(p)
		if err != nil || h.FragOff != 0 || h.Len > len(p) {
			return a, false
		}
		a.src, _ = netip.AddrFromSlice(h.Src.To4())
		a.dst, _ = netip.AddrFromSlice(h.Dst.To4())
		a.header, proto = h.Len, h.Protocol
	case len(p) >= ipv6.HeaderLen && p[0]>>4 == 6:
		h, err := ipv6.ParseHeader(p)
		if err != nil {
			return a, false
		}
		// An extension header (a fragment's, a hop-by-hop option) is not
		// what a program's connect or send makes: no answer.
		a.src, _ = netip.AddrFromSlice(h.Src)
		a.dst, _ = netip.AddrFromSlice(h.Dst)
		a.header, proto = ipv6.HeaderLen, h.NextHeader
	default:
		return a, false
	}
	l4 := p[a.header:]
	switch proto {
	case unix.IPPROTO_TCP:
		const syn, ack = 0x02, 0x10
		if len(l4) < 20 || l4[13]&(syn|ack) != syn {
			return a, false
		}
	case unix.IPPROTO_UDP:
		if len(l4) < 8 {
			return a, false
		}
		a.udp = true
	default:
		return a, false
	}
	a.srcPort, a.dstPort = binary.BigEndian.Uint16(l4[0:2]), binary.BigEndian.Uint16(l4[2:4])
	return a, a.src.IsValid() && a.dst.IsValid()
}

// unreachable is the answer to the attempt whose packet is p: an ICMP (or
// ICMPv6) port unreachable from its destination, quoting its start, as a
// host with nothing on that port would send. For a TCP SYN the kernel takes
// it as a hard error and fails the connect at once (ECONNREFUSED).
func (a directAttempt) unreachable(p []byte) []byte {
	if a.src.Is4() {
		// The IP header and 8 bytes of what follows: the ports and, for TCP,
		// the sequence number the kernel checks the answer against.
		quote := p[:min(len(p), a.header+8)]
		body, err := (&icmp.Message{Type: ipv4.ICMPTypeDestinationUnreachable, Code: 3, Body: &icmp.DstUnreach{Data: quote}}).Marshal(nil)
		if err != nil {
			return nil
		}
		h := make([]byte, ipv4.HeaderLen)
		h[0] = 4<<4 | ipv4.HeaderLen/4
		binary.BigEndian.PutUint16(h[2:], uint16(len(h)+len(body)))
		h[8], h[9] = 64, 1 // TTL, ICMP
		dst, src := a.src.As4(), a.dst.As4()
		copy(h[12:16], src[:])
		copy(h[16:20], dst[:])
		binary.BigEndian.PutUint16(h[10:], checksum(h))
		return append(h, body...)
	}
	// As much of the packet as keeps the answer within IPv6's minimum MTU.
	quote := p[:min(len(p), 1280-ipv6.HeaderLen-8)]
	src, dst := a.dst.AsSlice(), a.src.AsSlice()
	body, err := (&icmp.Message{Type: ipv6.ICMPTypeDestinationUnreachable, Code: 4, Body: &icmp.DstUnreach{Data: quote}}).Marshal(icmp.IPv6PseudoHeader(src, dst))
	if err != nil {
		return nil
	}
	h := make([]byte, ipv6.HeaderLen)
	h[0] = 6 << 4
	binary.BigEndian.PutUint16(h[4:], uint16(len(body)))
	h[6], h[7] = unix.IPPROTO_ICMPV6, 64
	copy(h[8:24], src)
	copy(h[24:40], dst)
	return append(h, body...)
}

// checksum is the Internet checksum (RFC 1071) of an IPv4 header whose
// checksum field is zero. (x/net/ipv4 parses and writes headers but leaves
// their checksum to the caller, and icmp computes only ICMP's.)
func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

// directWarning is the once of warnDirectUnavailable.
var directWarning sync.Once

// warnDirectUnavailable logs, once a process, that direct attempts can't be
// listed on this host: they still fail (no route), unlisted.
func (r *Run) warnDirectUnavailable(err error) {
	directWarning.Do(func() {
		r.log.Warn("egress: a direct connection to an address fails but is not listed on this host", "err", err,
			"hint", "give the service /dev/net/tun (modprobe tun) for networked runs' direct attempts to be listed")
	})
}

// CheckDirect makes the device in a network namespace of its own, as a
// networked run's, and removes it: nil if this host can list direct attempts
// (brig check).
func CheckDirect() error {
	return osthread.Run(func() (bool, error) {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return false, fmt.Errorf("making a network namespace to try the device in: %w", err)
		}
		dev, err := openDirect()
		if err == nil {
			dev.Close()
		}
		return true, err // the thread, in the new namespace, ends
	})
}
