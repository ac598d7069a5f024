package egress

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/api"
)

// resolveTimeout bounds one host-side DNS exchange.
const resolveTimeout = 5 * time.Second

// failResolving begins the failure of an allowed connection whose name did not
// resolve on the host side (Connection.Unresolved).
const failResolving = "resolving "

// errNoAddress is a name the upstream resolver has no address for.
var errNoAddress = errors.New("no address")

// dialChecked connects from the host's namespace to host:port, a destination
// the policy allowed. A pinned host:port dials its pin as it is. Otherwise the
// name is resolved on the host side, every address is decided by
// Config.DecideAddr, and only an address that passed is dialed. refused is
// the first address's refusal when none passed, and refusedAddr that address
// (for the operator's log: the run's 403 names the class, not the address).
func (r *Run) dialChecked(ctx context.Context, host string, port int) (up *net.TCPConn, refused *Decision, refusedAddr netip.Addr, err error) {
	d := net.Dialer{Timeout: r.handshakeTimeout, Control: boundUpstream}
	if pin, ok := r.cfg.Pin(host, port); ok {
		c, err := d.DialContext(ctx, "tcp", pin.String())
		if err != nil {
			return nil, nil, netip.Addr{}, &upstreamError{public: fmt.Sprintf("connecting to %s: %s", host, withoutAddrs(err)), err: fmt.Errorf("dialing the pin %s: %w", pin, err)}
		}
		return c.(*net.TCPConn), nil, netip.Addr{}, nil
	}
	addrs, err := r.resolve(ctx, host)
	if err != nil {
		return nil, nil, netip.Addr{}, err
	}
	var allowed []netip.Addr
	for _, a := range addrs {
		dec := r.cfg.DecideAddr(host, a, r.hostAddrs())
		if dec.Allowed {
			allowed = append(allowed, a)
		} else if refused == nil {
			refused, refusedAddr = &dec, a
		}
	}
	if len(allowed) == 0 {
		return nil, refused, refusedAddr, nil
	}
	var errs []error
	var public []string
	for _, a := range allowed {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return c.(*net.TCPConn), nil, netip.Addr{}, nil
		}
		errs = append(errs, err)
		if p := withoutAddrs(err); !slices.Contains(public, p) {
			public = append(public, p)
		}
	}
	return nil, nil, netip.Addr{}, &upstreamError{public: fmt.Sprintf("connecting to %s: %s", host, strings.Join(public, "; ")), err: fmt.Errorf("dialing %s: %w", host, errors.Join(errs...))}
}

// The kernel's buffers of the service's own sockets are charged to no run:
// a run whose 64 connections each read an endless answer and never took it
// had the proxy's sockets hold 1.22 GiB of the host's TCP memory, whose
// pressure threshold was 1.46 GiB (the red team of 2026-12-05, with
// tcp_rmem's maximum at 32 MiB). So each is bounded (setsockopt; the kernel
// counts twice what is asked): an upstream socket's at upstreamBuffer each
// way, which bounds its window (at 50 ms of round trip, 10 MB/s), and a
// run's socket's at runSideBuffer, on loopback, where the run's own buffers
// (charged to it) hold the rest: a stalled connection holds at most about 2.3
// MiB of the service's, 64 of them 147 MiB. An upstream that leaves what
// was sent unacknowledged, or its window shut, for upstreamStall ends the
// connection: an orphan the proxy closed in order (a run's end, a cut), so
// that a program that sends and exits still has its last bytes delivered,
// had stayed in FIN-WAIT-1 with its unsent bytes for as long as the upstream
// answered the window probes (24 of them, 94 MiB, past 5 minutes). It is
// no shorter than the longest run, so that it ends no connection a run
// still holds (at 2 minutes it cut an upload to an upstream that paused:
// the review of 2026-12-05).
//
// A run's connections that the service has not accepted yet, waiting in a
// listener's queue, are charged to no one either, and take what the run sends
// them: one run whose 4,000 connections to its four listeners each sent
// 1 MiB had the host's TCP memory at 1.85 GiB, past the pressure threshold
// (2026-12-05). So a run's listeners are bounded before they listen
// (boundRunSide), and their children inherit it from their first segment,
// and each queues at most runBacklog, or the run's max_conns where that is
// more (past it the kernel drops a run's SYNs, and its connect waits, in
// its own time; on loopback a burst's handshakes complete before the accept
// loop runs, so a burst within the run's limits must fit in the queue: the
// review of 2026-12-05 had 100 connections under a max_conns of 4,096 wait
// 1 s for their SYNs' resending).
const (
	upstreamBuffer = 512 << 10
	runSideBuffer  = 64 << 10
	upstreamStall  = api.MaxTimeoutSeconds * time.Second
	runBacklog     = 64
)

// boundRunSide bounds a run's listener's buffers before it listens, which its
// connections inherit: net.ListenConfig.Control.
func boundRunSide(network, address string, c syscall.RawConn) error {
	var err error
	if cerr := c.Control(func(fd uintptr) { err = setBuffers(int(fd), runSideBuffer) }); cerr != nil {
		return cerr
	}
	return err
}

// finishGrace is how long an upstream the proxy is done with has to take
// what its socket still holds (finish), and, at a run's end, how long what the
// run sent before it ended has to reach that socket (Run.Close).
const finishGrace = time.Second

// finish ends up, an upstream connection the proxy is done with, by deadline,
// and returns how many of the bytes counted as sent to it never left, and how
// many it dropped that the upstream had not acknowledged (those and the ones
// sent but not acknowledged, which may have reached it). What up
// still holds is followed by its end of stream, as a close in order does, and
// the upstream has until deadline to take it, so that a program that sends
// and exits, or resets its end, has its last bytes delivered; then up is
// closed, with a reset where it still holds some, which are dropped; reset
// says the upstream had reset (closed its socket) by then. A close
// in order with bytes unsent had left an orphaned socket (FIN-WAIT-1) that the
// kernel keeps, charged to no one, until the upstream takes them or
// TCP_USER_TIMEOUT ends it: 5 minutes, and never for an upstream that takes a
// segment every few minutes. A run that reset its tunnels to an upstream that
// did not read, each slot freed as it went, left 150 such sockets holding 135
// MiB of the host's TCP memory past its end (the egress red team of
// 2026-12-06; bench/measure/egress_orphans.sh). The grace is spent while the
// connection still holds its slot of the run's max_conns, so what a run's
// ends hold stays within that bound; an upstream that has reset (its socket
// closed, its queue purged though the kernel still counts it) ends the wait.
func finish(up *net.TCPConn, deadline time.Time) (unsent, dropped int, reset bool) {
	rc, err := up.SyscallConn()
	if err != nil {
		up.Close()
		return 0, 0, false
	}
	queued := func(req uint) (n int) {
		rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), req) })
		return n
	}
	fin := false // its end of stream is queued, last, and counts one
	if queued(unix.SIOCOUTQ) > 0 {
		up.CloseWrite()
		// Read now: a reset later leaves the state CLOSE and the count.
		switch tcpState(rc) {
		case unix.BPF_TCP_FIN_WAIT1, unix.BPF_TCP_CLOSING, unix.BPF_TCP_LAST_ACK:
			fin = true
		}
		for queued(unix.SIOCOUTQ) > 0 && tcpState(rc) != unix.BPF_TCP_CLOSE && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	unsent, dropped = queued(unix.SIOCOUTQNSD), queued(unix.SIOCOUTQ)
	reset = dropped > 0 && tcpState(rc) == unix.BPF_TCP_CLOSE
	if fin && unsent > 0 {
		unsent--
	}
	if fin && dropped > 0 {
		dropped--
	}
	if dropped > 0 {
		up.SetLinger(0)
	}
	up.Close()
	return unsent, dropped, reset
}

// tcpState is a socket's TCP state (TCP_INFO's), or -1 if it can't be read.
func tcpState(rc syscall.RawConn) (state int) {
	state = -1
	rc.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			state = int(info.State)
		}
	})
	return state
}

// setBuffers sets a socket's receive and send buffers to size each.
func setBuffers(fd, size int) error {
	for _, opt := range []int{unix.SO_RCVBUF, unix.SO_SNDBUF} {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, size); err != nil {
			return err
		}
	}
	return nil
}

// listenRunSide listens on addr for a run, bounded (boundRunSide), with a
// queue of backlog: listen again on a listening socket sets only its
// queue's length, which Go's net takes from somaxconn (4,096 here).
func listenRunSide(addr *net.TCPAddr, backlog int) (*net.TCPListener, error) {
	lc := net.ListenConfig{Control: boundRunSide}
	l, err := lc.Listen(context.Background(), "tcp4", addr.String())
	if err != nil {
		return nil, err
	}
	tl := l.(*net.TCPListener)
	rc, err := tl.SyscallConn()
	if err == nil {
		cerr := rc.Control(func(fd uintptr) { err = unix.Listen(int(fd), backlog) })
		err = cmp.Or(cerr, err)
	}
	if err != nil {
		tl.Close()
		return nil, fmt.Errorf("bounding its queue: %w", err)
	}
	return tl, nil
}

// boundUpstream bounds an upstream socket before it connects (its window
// scale follows its receive buffer): net.Dialer.Control.
func boundUpstream(network, address string, c syscall.RawConn) error {
	var err error
	if cerr := c.Control(func(fd uintptr) {
		if err = setBuffers(int(fd), upstreamBuffer); err != nil {
			return
		}
		err = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(upstreamStall/time.Millisecond))
	}); cerr != nil {
		return cerr
	}
	return err
}

// upstreamError is a failure to resolve or reach an allowed host, told two
// ways: Error, for the operator's log, names the resolver and the addresses
// dialled; public, for the run (a 502's body, its Result's failure), names
// neither: the host's resolver and its own addresses are not the run's to
// learn (an audit read them in "asking 127.0.0.1:5353: read udp
// 127.0.0.1:37992->127.0.0.1:5353: i/o timeout"), and a run knows its hosts
// by name.
type upstreamError struct {
	public string
	err    error
}

func (e *upstreamError) Error() string { return e.err.Error() }
func (e *upstreamError) Unwrap() error { return e.err }

// publicFailure is err as the run may read it (upstreamError).
func publicFailure(err error) string {
	var ue *upstreamError
	if errors.As(err, &ue) {
		return ue.public
	}
	return err.Error()
}

// withoutAddrs is a dial's or an exchange's error without the addresses its
// net.OpError names: "connect: connection refused", "i/o timeout".
func withoutAddrs(err error) string {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return addressless(err)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return "i/o timeout"
	}
	return "failed"
}

// addressless is err as a run may read it: a net.OpError without the
// addresses it names ("write: broken pipe", where its text was "write tcp
// 10.0.0.1:37784->10.0.0.2:80: write: broken pipe": the host's own address and
// the address dialled, the network probe of 2026-12-06), anything else as it
// is (brig's own errors, which name no address). withoutAddrs is the stricter
// form for a dial's errors, whose others may name the resolver.
func addressless(err error) string {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}

// resolve returns host's addresses, asking the operator's resolver (A, then
// AAAA) from the host's namespace. An address literal is its own answer.
func (r *Run) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	server, err := r.resolverAddr()
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	var errs []error
	for _, got := range exchangeBoth(ctx, server, host) {
		addrs = append(addrs, got.addrs...)
		if got.err != nil {
			errs = append(errs, got.err)
		}
	}
	if d, ok := ctx.Deadline(); ctx.Err() != nil || ok && !time.Now().Before(d) {
		// The run ended during the lookup: its queries were cut, and the
		// name is not one that does not resolve (Connection.Unresolved,
		// which tells the installer's failure apart). A deadline is read
		// from the clock too: the queries' sockets time out at it, and
		// ctx.Err() may say so a moment later (1 run in 5 of the test).
		return nil, &upstreamError{public: "the run ended first", err: fmt.Errorf("resolving %s: %w", host, ctx.Err())}
	}
	if len(addrs) == 0 {
		if len(errs) > 0 {
			// On one line, and once when both queries failed alike
			// ("answered NXDOMAIN"): errors.Join would repeat it on a
			// second line of a 502's body and of the Result's failure.
			err, public := errs[0], publicFailure(errs[0])
			if len(errs) == 2 && errs[1].Error() != err.Error() {
				err = fmt.Errorf("%w; %w", err, errs[1])
			}
			if len(errs) == 2 && publicFailure(errs[1]) != public {
				public += "; " + publicFailure(errs[1])
			}
			return nil, &upstreamError{public: failResolving + host + ": " + public, err: fmt.Errorf("%s%s: %w", failResolving, host, err)}
		}
		return nil, fmt.Errorf("%s%s: %w", failResolving, host, errNoAddress)
	}
	return addrs, nil
}

// aaaaWait is how long resolve waits for the AAAA answer once the A answer
// has brought addresses (RFC 8305's resolution delay is 50 ms).
const aaaaWait = 100 * time.Millisecond

// answer is one query's addresses, or why there are none.
type answer struct {
	addrs []netip.Addr
	err   error
}

// exchangeBoth asks server for host's A and AAAA records at once, and
// returns the answers in that order. Once the A answer has brought
// addresses, the AAAA one has aaaaWait more, then counts as empty: a
// resolver that drops AAAA queries made every connection wait resolveTimeout
// (5 s) after its A answer when they were asked one after the other (the
// network audit). The A answer is always waited for, as before: an AAAA
// answer alone fails on a host without IPv6 routes.
func exchangeBoth(ctx context.Context, server, host string) [2]answer {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type indexed struct {
		i int
		answer
	}
	ch := make(chan indexed, 2)
	for i, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
		go func() {
			addrs, err := exchange(ctx, server, host, qtype)
			ch <- indexed{i, answer{addrs, err}}
		}()
	}
	var got [2]answer
	first := <-ch
	got[first.i] = first.answer
	if first.i == 1 || len(first.addrs) == 0 {
		second := <-ch
		got[second.i] = second.answer
		return got
	}
	t := time.NewTimer(aaaaWait)
	defer t.Stop()
	select {
	case second := <-ch:
		got[second.i] = second.answer
	case <-t.C:
	}
	return got
}

// exchange asks server for host's records of qtype, over UDP and again over
// TCP when the answer is truncated.
func exchange(ctx context.Context, server, host string, qtype uint16) ([]netip.Addr, error) {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(host), qtype)
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	c := &dns.Client{Timeout: resolveTimeout}
	// The library's exchange takes only the context's deadline: a query
	// that exchangeBoth no longer waits for kept its socket and goroutine
	// for resolveTimeout (the review). Its connection is closed when ctx
	// ends (a deadline moved to now could be set again by the exchange).
	ask := func() (*dns.Msg, error) {
		conn, err := c.DialContext(ctx, server)
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		defer stop()
		resp, _, err := c.ExchangeWithConnContext(ctx, q, conn)
		return resp, err
	}
	resp, err := ask()
	if err == nil && resp.Truncated {
		c.Net = "tcp"
		resp, err = ask()
	}
	if err != nil {
		return nil, &upstreamError{public: "the resolver: " + withoutAddrs(err), err: fmt.Errorf("asking %s: %w", server, err)}
	}
	if resp.Rcode != dns.RcodeSuccess {
		answered := "answered " + dns.RcodeToString[resp.Rcode]
		return nil, &upstreamError{public: "the resolver " + answered, err: fmt.Errorf("%s %s", server, answered)}
	}
	var out []netip.Addr
	for _, rr := range resp.Answer {
		var ip net.IP
		switch rr := rr.(type) {
		case *dns.A:
			ip = rr.A
		case *dns.AAAA:
			ip = rr.AAAA
		}
		if a, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, a.Unmap())
		}
	}
	return out, nil
}

// resolverAddr is the upstream DNS server: Config.Resolver, else the first
// nameserver of the host's /etc/resolv.conf.
func (r *Run) resolverAddr() (string, error) {
	r.resolverOnce.Do(func() {
		if r.cfg.Resolver != "" {
			r.resolver = r.cfg.Resolver
			return
		}
		cc, err := dns.ClientConfigFromFile("/etc/resolv.conf")
		if err != nil || len(cc.Servers) == 0 {
			r.resolverErr = fmt.Errorf("reading the host's /etc/resolv.conf for a nameserver: %v", err)
			return
		}
		r.resolver = net.JoinHostPort(cc.Servers[0], cc.Port)
	})
	return r.resolver, r.resolverErr
}

// hostAddrs are the host's own addresses, read once per run: DecideAddr
// refuses them whatever their class.
func (r *Run) hostAddrs() []netip.Addr {
	r.hostAddrsOnce.Do(func() {
		ifaddrs, err := net.InterfaceAddrs()
		if err != nil {
			r.log.Warn("egress: listing the host's addresses failed; only address classes protect them", "err", err)
		}
		for _, ia := range ifaddrs {
			if p, err := netip.ParsePrefix(ia.String()); err == nil {
				r.ownAddrs = append(r.ownAddrs, p.Addr().Unmap())
			}
		}
	})
	return r.ownAddrs
}
