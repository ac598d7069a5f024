package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/netutil"
)

// Connection is one attempted connection of a run, allowed or not, as the
// Result's network block lists it. A name the run's DNS refused is listed too,
// once, with port 0 and Via "dns": it is often the only trace of an attempt.
type Connection struct {
	Host    string
	Port    int
	Allowed bool
	// Rule is the Decision's rule, or the rule of the mechanism's own refusal
	// ("too many connections", "no SNI in the ClientHello: ...").
	Rule                     string
	BytesSent, BytesReceived int64
	// Via is how the destination was named: "dns" (a query), "tls" (the SNI
	// on the transparent :443), "http" (a Host header on the transparent :80
	// or a plain proxy request's URL) or "connect" (a CONNECT line).
	Via string
	// Failure says why an allowed connection did not get through or was cut:
	// the name did not resolve, the upstream did not answer, the run's byte
	// limit was reached. Empty when it ran to its end.
	Failure string
}

// AddressRefused reports whether the connection was refused for the address
// its name resolved to (its class, or one of this host's own), not for the
// name: the policy admitted the destination, and the operator's network
// answered with an address brig does not dial.
func (c Connection) AddressRefused() bool {
	return !c.Allowed && (strings.HasPrefix(c.Rule, ruleAddrClass) || c.Rule == ruleHostAddr)
}

// Unresolved reports whether the connection was allowed but its name did not
// resolve on the host side: the upstream resolver had no address for it, or
// did not answer.
func (c Connection) Unresolved() bool {
	return c.Allowed && strings.HasPrefix(c.Failure, failResolving)
}

// Field names of the canonical log line of a decision. The caller's logger
// adds the run's own fields (its id).
const (
	LogHost          = "host"
	LogPort          = "port"
	LogAllowed       = "allowed"
	LogRule          = "rule"
	LogBytesSent     = "bytes_sent"
	LogBytesReceived = "bytes_received"
	LogVia           = "via"
	LogFailure       = "failure"
	// LogDetail is the failure as the operator may read it, with the
	// addresses the run's failure leaves out (upstreamError).
	LogDetail = "detail"
)

// logMessage is the canonical line's message.
const logMessage = "egress"

// MaxRefusals bounds the refusals a run lists and logs one by one, so that a
// program that loops on refused connections or queries (distinct names, each
// a refusal of its own) cannot grow the supervisor's memory or flood its log.
// Allowed connections are listed apart, up to maxAllowed, which the run's
// connection rate keeps them far below (ConnsPerSecond for the longest run:
// 15,000 at the defaults): a flood of refusals must not push a later allowed
// connection, and its bytes, out of the run's record. What is left out is
// still counted (Omitted), and Close logs how much.
const (
	MaxRefusals = 10000
	maxAllowed  = 100000
)

// maxDNSConns bounds the TCP connections a run's DNS server serves at once
// (a resolver opens one for an answer too long for UDP, and closes it).
const maxDNSConns = 16

// Run is one networked run's DNS server and proxies, bound inside its network
// namespace and served from the supervisor's goroutines.
type Run struct {
	cfg              *Config
	pol              Policy
	log              *slog.Logger
	onDecision       func(Connection)
	handshakeTimeout time.Duration
	lim              *limits

	// ctx ends with Close, and with it the dials in progress.
	ctx    context.Context
	cancel context.CancelFunc

	listeners []*net.TCPListener
	// direct are the raw sockets that see direct attempts (direct.go); nil
	// where the host can't open them.
	direct *directSockets
	dnsUDP *dns.Server
	dnsTCP *dns.Server
	// wg counts every goroutine the run started; Close waits for it.
	wg sync.WaitGroup
	// answering is a semaphore of the refusals being answered (answerRefused).
	answering chan struct{}

	resolverOnce sync.Once
	resolver     string
	resolverErr  error

	hostAddrsOnce sync.Once
	ownAddrs      []netip.Addr

	mu sync.Mutex
	// closed is set by Close: no connection is tracked after it.
	closed bool
	// conns are the open connections, both sides, that Close closes, each
	// upstream one with its record (record.finish).
	conns map[net.Conn]*record
	// records are the decisions in the order they were made; refusals and
	// allowed count those of each kind listed.
	records           []*record
	refusals, allowed int
	// omitted is what was not listed.
	omitted Omitted
	// deniedNames are the names the DNS refused, listed once each.
	deniedNames map[string]bool
}

// Omitted is what a run decided past its lists' bounds (MaxRefusals,
// maxAllowed): neither listed, announced nor logged one by one, but counted,
// so that the service's metrics still count every decision and byte.
type Omitted struct {
	// Decisions counts them by whether they were allowed, then by rule.
	Decisions map[bool]map[string]int
	// BytesSent and BytesReceived are their connections' bytes.
	BytesSent, BytesReceived int64
}

// Total is how many decisions were omitted.
func (o Omitted) Total() int {
	n := 0
	for _, byRule := range o.Decisions {
		for _, c := range byRule {
			n += c
		}
	}
	return n
}

// record is one listed decision, with the byte counts of its connection.
type record struct {
	conn           Connection
	sent, received atomic.Int64
	cut            atomic.Bool  // the run's byte limit cut it
	failure        string       // set before finished, read after
	dropped        atomic.Int64 // bytes its end dropped that the upstream had not taken (finish)
	// upstreamEnded says the upstream's stream had ended (its answer was
	// copied whole) before its end: bytes it then refused with a reset
	// are not the proxy's drop (see finishBy).
	upstreamEnded atomic.Bool
	detail        string // the failure as the operator's log has it, when it says more (upstreamError)
	// answerFailure is why the upstream gave no answer (Run.unanswered): set
	// by the copy of its answer, beside a failure of the request's own.
	answerFailure atomic.Pointer[string]
	listed        bool      // false past its kind's bound
	finishOnce    sync.Once // its upstream connection's end (record.finish)
	// client is the run's side of a connection made upstream, and uploaded
	// is closed once what it sends has been forwarded (or dropped): at its
	// end of stream, or when the proxy stops reading it (Run.Close waits
	// for it).
	client     *net.TCPConn
	uploaded   chan struct{}
	uploadOnce sync.Once
}

// uploadDone says that the connection's client has nothing more to forward.
func (rec *record) uploadDone() {
	rec.uploadOnce.Do(func() { close(rec.uploaded) })
}

// markCut records that the run's byte limit cut the connection, when err says
// so. Only ever set: the other direction's copy, which fails because this one
// closed the sockets, must not clear it.
func (rec *record) markCut(err error) {
	if errors.Is(err, errBytesLimit) {
		rec.cut.Store(true)
	}
}

// finish ends the record's upstream connection within finishGrace (finish),
// once however many ask (its copies' ends and the run's), and takes back from
// the bytes counted as sent those that never left.
func (rec *record) finish(up *net.TCPConn) { rec.finishBy(up, time.Now().Add(finishGrace)) }

// finishBy is finish by deadline. The count it takes back may come before a
// copy still under way adds what it wrote (Run.Close ends a connection whose
// copy is waiting to write): so it is not bounded by the count so far, which
// a fresh-clone CI run caught listing 643,072 bytes sent of 307,200 taken,
// and the count can be below zero until that copy returns (snapshot).
func (rec *record) finishBy(up *net.TCPConn, deadline time.Time) {
	rec.finishOnce.Do(func() {
		unsent, dropped, reset := finish(up, deadline)
		rec.sent.Add(-int64(unsent))
		// An upstream that ended its stream and closed its socket resets
		// what comes after: a TLS client's close_notify, sent once it has
		// read an answer that said "Connection: close" (the network audit
		// saw 8 of 9 such HTTPS requests listed as failed). The upstream
		// was done; nothing it would have read was lost.
		if !(reset && rec.upstreamEnded.Load()) {
			rec.dropped.Store(int64(dropped))
		}
	})
}

func (rec *record) snapshot() Connection {
	c := rec.conn
	c.BytesSent, c.BytesReceived = max(rec.sent.Load(), 0), rec.received.Load()
	return c
}

// Start binds a run's DNS server (UDP and TCP, 127.0.0.1:53), transparent proxy
// (127.0.0.1:80 and :443) and CONNECT proxy (127.0.0.1:ProxyPort) inside the
// network namespace of the process pid (the run's sandbox init), and serves them
// until Close. onDecision, when set, is called once per decision as it is made
// (for the run's live egress events); it must not block.
func Start(cfg *Config, pol Policy, pid int, onDecision func(Connection)) (_ *Run, retErr error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("checking the egress configuration: %w", err)
	}
	full := cfg.WithDefaults()
	r := &Run{
		cfg:              &full,
		pol:              pol,
		log:              full.Logger,
		onDecision:       onDecision,
		handshakeTimeout: full.HandshakeTimeout,
		lim:              newLimits(full.MaxConns, full.ConnsPerSecond, full.MaxBytes),
		answering:        make(chan struct{}, refusedAnswers),
		conns:            map[net.Conn]*record{},
		deniedNames:      map[string]bool{},
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())

	var udp net.PacketConn
	var tcp [4]*net.TCPListener // :53, :80, :443, :ProxyPort
	ports := [4]int{53, 80, 443, ProxyPort}
	var direct *directSockets
	var directErr error
	defer func() {
		if retErr != nil {
			if udp != nil {
				udp.Close()
			}
			if direct != nil {
				direct.Close()
			}
			for _, l := range tcp {
				if l != nil {
					l.Close()
				}
			}
			r.cancel()
		}
	}()
	err := inNetns(pid, func() error {
		var err error
		// Bounded as the listeners are: its queue of a flood's queries
		// is the service's, charged to no run.
		lc := net.ListenConfig{Control: boundRunSide}
		if udp, err = lc.ListenPacket(context.Background(), "udp4", "127.0.0.1:53"); err != nil {
			return fmt.Errorf("binding the DNS server (UDP): %w", err)
		}
		for i, port := range ports {
			addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
			backlog := max(full.MaxConns, runBacklog)
			if port == 53 {
				backlog = max(maxDNSConns, runBacklog)
			}
			if tcp[i], err = listenRunSide(addr, backlog); err != nil {
				return fmt.Errorf("binding %s: %w", addr, err)
			}
		}
		direct, directErr = openDirect()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("binding the run's egress listeners: %w", err)
	}

	handler := dns.HandlerFunc(r.serveDNS)
	// The run's queries are read no faster than its rate (limits.queries):
	// past it they wait in the socket's buffer, and past that the kernel
	// drops them, in the sending program's time, not the service's.
	paced := func(rd dns.Reader) dns.Reader { return &pacedReader{Reader: rd, lim: r.lim} }
	r.dnsUDP = &dns.Server{PacketConn: udp, Handler: handler, DecorateReader: paced}
	// A TCP connection to the DNS server is one of the service's descriptors
	// for as long as the run holds it open: bounded, so that a run can't
	// spend the service's (an audit's run held 16,000; past the bound
	// further connections wait in the kernel's backlog).
	r.dnsTCP = &dns.Server{Listener: netutil.LimitListener(tcp[0], maxDNSConns), Handler: handler, DecorateReader: paced}
	for _, s := range []*dns.Server{r.dnsUDP, r.dnsTCP} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		errc := make(chan error, 1)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			errc <- s.ActivateAndServe()
		}()
		// Shutdown refuses a server that has not started yet: wait, so that
		// Close always stops it.
		select {
		case <-started:
		case err := <-errc:
			if s == r.dnsTCP {
				r.dnsUDP.Shutdown() // started: stop it before the listeners close
			}
			r.wg.Wait()
			return nil, fmt.Errorf("serving DNS: %w", err)
		}
	}
	r.listeners = tcp[1:]
	if directErr != nil {
		r.warnDirectUnavailable(directErr)
	} else {
		r.direct = direct
		r.serveDirect(direct)
	}
	r.wg.Add(3)
	go r.accept(tcp[1], 80, viaHTTP, r.serveHTTP)
	go r.accept(tcp[2], 443, viaTLS, r.serveTLS)
	go r.accept(tcp[3], ProxyPort, viaConnect, r.serveProxy)
	return r, nil
}

// accept serves one listener until Close, admitting each connection within
// the run's limits.
func (r *Run) accept(l *net.TCPListener, port int, via string, serve func(*net.TCPConn)) {
	defer r.wg.Done()
	for {
		c, err := l.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like: back off rather than spin.
			r.log.Warn("egress: accepting a connection failed", "port", port, "err", err)
			select {
			case <-r.ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if ok, rule := r.lim.admit(); !ok {
			r.refuse("", port, via, rule)
			r.answerRefused(c, via, rule)
			if d := r.lim.refusalPause(); d > 0 {
				select {
				case <-r.ctx.Done():
					return
				case <-time.After(d):
				}
			}
			continue
		}
		if !r.track(c, nil) {
			c.Close()
			r.lim.release()
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer r.lim.release()
			defer r.untrack(c)
			defer c.Close()
			serve(c)
		}()
	}
}

// answerRefused closes c, a connection the run's limits refused before
// anything was read from it. An HTTP client (the :80 and CONNECT proxies) gets
// a 429 that says which limit, rather than a reset it can't tell from a
// network fault: written, then what the client sent is read and dropped until
// it closes or lingerTime passes, so that closing does not reset the
// connection under the answer. At most refusedAnswers answer at once, each on
// a goroutine of its own; beyond them, and for TLS, c is only closed.
func (r *Run) answerRefused(c *net.TCPConn, via, rule string) {
	if via == viaTLS {
		c.Close()
		return
	}
	select {
	case r.answering <- struct{}{}:
	default:
		c.Close()
		return
	}
	// Tracked, so that the run's Close ends the wait at once.
	if !r.track(c, nil) {
		<-r.answering
		c.Close()
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() { <-r.answering }()
		defer r.untrack(c)
		defer c.Close()
		writeStatus(c, 429, fmt.Sprintf("brig egress: refused: %s (the run's limits: %d connections at once, %g a second): close connections, or retry later",
			rule, cap(r.lim.open), float64(r.lim.rate.Limit())))
		c.CloseWrite()
		c.SetReadDeadline(time.Now().Add(lingerTime))
		io.Copy(io.Discard, io.LimitReader(c, maxHeadBytes))
	}()
}

// refusedAnswers bounds the refusals answered at once (answerRefused).
const refusedAnswers = 16

// track adds c to the connections Close closes, with its record if it is an
// upstream's (nil if not); false once the run is closed.
func (r *Run) track(c net.Conn, rec *record) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.conns[c] = rec
	return true
}

func (r *Run) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
}

// refuse lists, announces and logs a refusal.
func (r *Run) refuse(host string, port int, via, rule string) {
	rec := r.decided(host, port, via, Decision{Rule: rule}, "")
	r.finished(rec)
}

// deniedName lists a name the DNS refused, once per run.
func (r *Run) deniedName(name string, d Decision) {
	r.mu.Lock()
	seen := r.deniedNames[name]
	if !seen && len(r.deniedNames) < MaxRefusals {
		r.deniedNames[name] = true
	}
	r.mu.Unlock()
	if !seen {
		r.refuse(name, 0, viaDNS, d.Rule)
	}
}

// decided lists a decision and announces it; finished logs it once its
// connection is over.
func (r *Run) decided(host string, port int, via string, d Decision, failure string) *record {
	rec := &record{}
	r.decidedInto(rec, host, port, via, d, failure)
	return rec
}

func (r *Run) decidedInto(rec *record, host string, port int, via string, d Decision, failure string) {
	rec.conn = Connection{Host: host, Port: port, Allowed: d.Allowed, Rule: d.Rule, Via: via, Failure: failure}
	rec.failure = failure
	r.mu.Lock()
	n, bound := &r.refusals, MaxRefusals
	if d.Allowed {
		n, bound = &r.allowed, maxAllowed
	}
	if *n < bound {
		*n++
		r.records = append(r.records, rec)
		rec.listed = true
	} else {
		if r.omitted.Decisions == nil {
			r.omitted.Decisions = map[bool]map[string]int{}
		}
		if r.omitted.Decisions[d.Allowed] == nil {
			r.omitted.Decisions[d.Allowed] = map[string]int{}
		}
		r.omitted.Decisions[d.Allowed][d.Rule]++
	}
	r.mu.Unlock()
	if rec.listed && r.onDecision != nil {
		r.onDecision(rec.snapshot())
	}
}

// finished writes the decision's canonical log line, with its final counts.
func (r *Run) finished(rec *record) {
	if !rec.listed {
		r.mu.Lock()
		r.omitted.BytesSent += rec.sent.Load()
		r.omitted.BytesReceived += rec.received.Load()
		r.mu.Unlock()
		return
	}
	r.mu.Lock() // Connections reads it meanwhile
	rec.conn.Failure = rec.failure
	if why := rec.answerFailure.Load(); why != nil && rec.failure == "" {
		rec.conn.Failure = "the upstream ended the connection before it answered: " + *why
	} else if n := rec.dropped.Load(); n > 0 && rec.failure == "" {
		// Counted in bytes_sent where they left, as they may have arrived.
		rec.conn.Failure = fmt.Sprintf("the connection ended with %d bytes the upstream had not taken, which were dropped", n)
	}
	c := rec.snapshot()
	r.mu.Unlock()
	attrs := []any{
		LogHost, c.Host, LogPort, c.Port, LogAllowed, c.Allowed, LogRule, c.Rule,
		LogBytesSent, c.BytesSent, LogBytesReceived, c.BytesReceived, LogVia, c.Via,
	}
	if c.Failure != "" {
		attrs = append(attrs, LogFailure, c.Failure)
	}
	if rec.detail != "" && rec.detail != c.Failure {
		attrs = append(attrs, LogDetail, rec.detail)
	}
	r.log.Info(logMessage, attrs...)
}

// ProxyPort is the CONNECT proxy's port inside every run's namespace.
const ProxyPort = 3128

// Env is the environment a networked run's program gets: the proxy variables
// in both cases, pointing at the CONNECT proxy, loopback left direct, and
// Node told to honour them (its fetch ignores them otherwise).
func Env() map[string]string {
	proxy := fmt.Sprintf("http://127.0.0.1:%d", ProxyPort)
	const direct = "localhost,127.0.0.1,::1"
	return map[string]string{
		"http_proxy": proxy, "https_proxy": proxy, "all_proxy": proxy,
		"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "ALL_PROXY": proxy,
		"no_proxy": direct, "NO_PROXY": direct,
		"NODE_USE_ENV_PROXY": "1",
		// Node verifies TLS against its own built-in list, not the system's;
		// this adds the rootfs's bundle (the host's, in the host rootfs), which
		// Python and OpenSSL already use, so that both languages trust the same
		// certificates.
		"NODE_EXTRA_CA_CERTS": nodeExtraCACerts,
	}
}

// nodeExtraCACerts is the CA bundle of every rootfs brig builds or makes up.
const nodeExtraCACerts = "/etc/ssl/certs/ca-certificates.crt"

// Close stops the run's listeners and every connection still open, waits for
// every goroutine of the run to end, and returns every attempted connection in
// the order they were attempted, with their final byte counts.
func (r *Run) Close() []Connection {
	r.cancel() // first: a connection cut below is then seen as the run's end
	r.mu.Lock()
	r.closed = true
	// A connection made upstream gets what its client sent before the run
	// ended forwarded (its end of stream, which the kernel sent when the
	// program's socket closed, arrives after it), then its upstream's end
	// (finish), by one deadline for all; any other is closed at once.
	deadline := time.Now().Add(finishGrace)
	clients := map[net.Conn]bool{}
	for _, rec := range r.conns {
		if rec != nil {
			clients[rec.client] = true
		}
	}
	var ending sync.WaitGroup
	for c, rec := range r.conns {
		switch {
		case rec != nil:
			ending.Go(func() {
				select {
				case <-rec.uploaded:
				case <-time.After(time.Until(deadline)):
				}
				rec.client.Close()
				rec.finishBy(c.(*net.TCPConn), deadline)
			})
		case !clients[c]:
			c.Close()
		}
	}
	r.mu.Unlock()
	ending.Wait()
	for _, l := range r.listeners {
		l.Close()
	}
	if r.direct != nil {
		r.stopDirect(r.direct)
	}
	// Shutdown closes the DNS sockets and waits for their handlers.
	r.dnsUDP.Shutdown()
	r.dnsTCP.Shutdown()
	r.wg.Wait()

	out, _ := r.Connections()
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := r.omitted.Total(); n > 0 {
		r.log.Warn("egress: decisions past the run's list were neither listed nor logged, only counted",
			"omitted", n, "listed", len(r.records), "bytes_sent", r.omitted.BytesSent, "bytes_received", r.omitted.BytesReceived)
	}
	if n := r.lim.delayed.Load(); n > 0 {
		r.log.Info("egress: DNS queries past the run's rate were read late, or dropped by the kernel", "delayed", n,
			"per_second", float64(r.lim.queries.Limit()), "burst", r.lim.queries.Burst())
	}
	return out
}

// Connections is every attempted connection listed so far, in the order they
// were attempted, with their bytes so far (a connection still open has no
// failure yet), and how many decisions the lists left out: what a run's Result
// shows while the run goes on. Close gives the final list.
func (r *Run) Connections() ([]Connection, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Connection, len(r.records))
	for i, rec := range r.records {
		out[i] = rec.snapshot()
	}
	return out, r.omitted.Total()
}

// pacedReader reads a run's DNS queries at most at its rate.
type pacedReader struct {
	dns.Reader
	lim *limits
}

func (p *pacedReader) wait() {
	if d := p.lim.queries.Reserve().Delay(); d > 0 {
		p.lim.delayed.Add(1)
		time.Sleep(d)
	}
}

func (p *pacedReader) ReadUDP(conn *net.UDPConn, timeout time.Duration) ([]byte, *dns.SessionUDP, error) {
	p.wait()
	return p.Reader.ReadUDP(conn, timeout)
}

func (p *pacedReader) ReadTCP(conn net.Conn, timeout time.Duration) ([]byte, error) {
	p.wait()
	return p.Reader.ReadTCP(conn, timeout)
}

// Omitted is what the run decided past its lists' bounds; call it after
// Close.
func (r *Run) Omitted() Omitted {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.omitted
}

// parseAddr parses an address literal in its standard spelling, IPv4-mapped
// forms unmapped.
func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	return a.Unmap(), err
}
