package egress

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/internal/text"
)

// Rules of the refusals the mechanism makes itself, beside the policy's.
const (
	ruleTooMany      = "too many connections"
	ruleTooFast      = "too many connections per second"
	ruleNoSNI        = "no SNI in the ClientHello: there is no name to decide on"
	ruleBadHello     = "no readable ClientHello"
	ruleBadHead      = "no readable request head"
	ruleNoHost       = "no Host header: there is no name to decide on"
	ruleSNIMismatch  = "the SNI does not match the CONNECT host"
	ruleHostMismatch = "the Host does not match the CONNECT host"
	rulePortMismatch = "the Host header names another port than the connection's"
	ruleProxyItself  = "the proxy itself"
	ruleNotProxyForm = "not a proxy request"
	ruleTargetHost   = "the request target names another host than the Host header"
	ruleBadTarget    = "the CONNECT target is not host:port"
)

// Ways a decision was reached, the Connection's Via.
const (
	viaDNS     = "dns"
	viaTLS     = "tls"
	viaHTTP    = "http"
	viaConnect = "connect"
)

// lingerTime bounds how long a client's unread bytes are drained after its
// response, so that closing does not reset the connection under the tail of
// the response.
const lingerTime = time.Second

// serveTLS is the transparent proxy on :443: it reads the ClientHello without
// terminating TLS and decides on its SNI. A hello without SNI is refused in
// every mode, any included: there is no name to decide on or to resolve.
func (r *Run) serveTLS(c *net.TCPConn) {
	c.SetReadDeadline(time.Now().Add(r.handshakeTimeout))
	hello, sni, err := readClientHello(c)
	switch {
	case err != nil:
		r.refuse("", 443, viaTLS, r.readFailure(ruleBadHello, err))
		return
	case sni == "":
		r.refuse("", 443, viaTLS, ruleNoSNI)
		return
	case isProxyItself(sni):
		r.refuse(sni, 443, viaTLS, ruleProxyItself)
		return
	}
	c.SetReadDeadline(time.Time{})
	r.connect(c, sni, 443, viaTLS, func(up *net.TCPConn, rec *record) error {
		_, err := meteredWriter{up, &r.lim.sent, &rec.sent}.Write(hello)
		return err
	}, nil)
}

// serveHTTP is the transparent proxy on :80: it reads the request head and
// decides on its Host.
func (r *Run) serveHTTP(c *net.TCPConn) {
	br := bufio.NewReaderSize(c, 4096)
	c.SetReadDeadline(time.Now().Add(r.handshakeTimeout))
	h, err := readHead(br)
	if err != nil {
		r.refuseHTTP(c, "", 80, viaHTTP, 400, r.readFailure(ruleBadHead, err))
		return
	}
	if h.host == "" {
		r.refuseHTTP(c, "", 80, viaHTTP, 400, ruleNoHost)
		return
	}
	// The port is 80: the client connected to :80.
	host, err := headHost(h.host, 80)
	if err != nil {
		rule := ruleBadHead + ": " + err.Error()
		if host != "" {
			rule = rulePortMismatch + fmt.Sprintf(" (use the proxy, 127.0.0.1:%d, for another port)", ProxyPort)
		}
		r.refuseHTTP(c, host, 80, viaHTTP, 400, rule)
		return
	}
	if isProxyItself(host) {
		// The run's own names (localhost, sandbox) are its loopback's,
		// not a destination outside, as on the proxy's CONNECT.
		r.refuseHTTP(c, host, 80, viaHTTP, 403, ruleProxyItself)
		return
	}
	target, err := originTarget(h.target, host, 80)
	if err != nil {
		r.refuseHTTP(c, host, 80, viaHTTP, 400, ruleTargetHost+": "+err.Error())
		return
	}
	c.SetReadDeadline(time.Time{})
	r.connect(c, host, 80, viaHTTP, nil, func(up *net.TCPConn, rec *record) {
		r.relayHTTP(c, br, up, h, target, "", rec)
	})
}

// serveProxy is the proxy that http_proxy and https_proxy name. It takes
// `CONNECT host:port` and plain requests with an absolute http:// URL, which
// it forwards in origin form. A request in origin form is refused: nothing
// says where it goes.
func (r *Run) serveProxy(c *net.TCPConn) {
	br := bufio.NewReaderSize(c, 4096)
	c.SetReadDeadline(time.Now().Add(r.handshakeTimeout))
	h, err := readHead(br)
	if err != nil {
		r.refuseHTTP(c, "", ProxyPort, viaConnect, 400, r.readFailure(ruleBadHead, err))
		return
	}
	if h.method != "CONNECT" {
		r.servePlain(c, br, h)
		return
	}
	host, port, err := hostPort(h.target, 0)
	if err != nil || port == 0 {
		r.refuseHTTP(c, "", ProxyPort, viaConnect, 400, ruleBadTarget)
		return
	}
	if isProxyItself(host) {
		r.refuseHTTP(c, host, port, viaConnect, 403, ruleProxyItself)
		return
	}
	c.SetReadDeadline(time.Time{})
	established := func(up *net.TCPConn, rec *record) error {
		_, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
		return err
	}
	switch port {
	case 443:
		// The tunnel's SNI must be the CONNECT host: the connection is listed
		// once, with the verdict on both.
		r.connectThen(c, host, port, viaConnect, established, func(up *net.TCPConn, rec *record) (string, func()) {
			c.SetReadDeadline(time.Now().Add(r.handshakeTimeout))
			hello, sni, err := readClientHello(br)
			switch {
			case err != nil:
				return ruleBadHello + ": " + err.Error(), nil
			case sni != host:
				return fmt.Sprintf("%s (%q, not %q)", ruleSNIMismatch, sni, host), nil
			}
			c.SetReadDeadline(time.Time{})
			return "", func() {
				mw := meteredWriter{up, &r.lim.sent, &rec.sent}
				if _, err := mw.Write(hello); err != nil {
					return
				}
				if err := writeBuffered(mw, br); err != nil {
					return
				}
				r.pipe(c, up, rec)
			}
		})
	case 80:
		// npm tunnels plain HTTP through CONNECT: the request inside is
		// checked as on the transparent :80.
		r.connectThen(c, host, port, viaConnect, established, func(up *net.TCPConn, rec *record) (string, func()) {
			c.SetReadDeadline(time.Now().Add(r.handshakeTimeout))
			h, err := readHead(br)
			if err != nil {
				return ruleBadHead + ": " + err.Error(), nil
			}
			if inner, err := headHost(h.host, 80); err != nil || inner != host {
				return fmt.Sprintf("%s (%q, not %q)", ruleHostMismatch, text.Clip(h.host, maxQuoted), host), nil
			}
			target, err := originTarget(h.target, host, 80)
			if err != nil {
				return ruleTargetHost + ": " + err.Error(), nil
			}
			c.SetReadDeadline(time.Time{})
			return "", func() { r.relayHTTP(c, br, up, h, target, "", rec) }
		})
	default:
		// Another port's protocol is unknown (SSH, SMTP and databases speak
		// first from the server), so the tunnel is raw both ways from the
		// start: the policy decided host and port. But a front shared by
		// many hosts routes by a name the client sends on any port: the
		// ClientHello's SNI (8443 as on 443; after a preamble, as a
		// Postgres proxy does after its SSLRequest) and the Host of plain
		// HTTP (8080 as on 80). tunnelFirst checks both.
		r.connect(c, host, port, viaConnect, established, func(up *net.TCPConn, rec *record) {
			mw := meteredWriter{up, &r.lim.sent, &rec.sent}
			var plain atomic.Bool // the client's first bytes were a plain HTTP request
			r.pipeAfter(c, up, rec, &plain, func() (bool, error) { return r.tunnelFirst(c, br, mw, host, port, rec, &plain) })
		})
	}
}

// errTunnelCut ends a raw tunnel whose client named another host (its
// failure says which and how).
var errTunnelCut = errors.New("the tunnel was cut")

// helloScanBytes is how far into a raw tunnel's client bytes the proxy looks
// for a ClientHello after a preamble, and past which it goes on looking only
// while the bytes are text (a STARTTLS exchange padded with NOOP lines): a
// front that routes by the SNI after its protocol's preamble takes a short
// one (Postgres's SSLRequest is 8 bytes) or a text one.
const helloScanBytes = 64 << 10

// tunnelFirst forwards the first bytes of a raw tunnel to host:port, checking
// the names a front routes by. A stream that begins as TLS does is read as a
// ClientHello whatever its record's version says (a front's parser may not
// look at it), and is cut unless the hello names host or nothing; past it the
// stream is TLS, spliced. A plain HTTP request is checked as on :80 (its Host
// and its target must name host) and is the tunnel's only one: it is sent
// with Connection: close and what the client sends after it is dropped (more
// is false), and its answer says so (plain), as relayHTTP's do. Anything else
// is scanned as it is forwarded (scanTunnel). Waiting for the client's bytes
// does not hold back the upstream's, which pipeAfter copies meanwhile.
func (r *Run) tunnelFirst(c *net.TCPConn, br *bufio.Reader, mw io.Writer, host string, port int, rec *record, plain *atomic.Bool) (more bool, err error) {
	first, err := br.Peek(1)
	if err != nil {
		return true, nil // the client sent nothing: the splice sees its end
	}
	if first[0] == recordTypeHandshake {
		write := func(b []byte) error { _, err := mw.Write(b); return err }
		if err := r.forwardHello(c, br, nil, host, rec, write); err != nil {
			return false, err
		}
		return true, writeBuffered(mw, br)
	}
	switch isHTTP, err := r.requestLineFirst(c, br); {
	case err != nil:
		rec.failure = r.readFailure(ruleBadHead, err) + ": the tunnel was cut"
		return false, errTunnelCut
	case isHTTP:
		plain.Store(true) // before the request goes: its answer can't come sooner
		return false, r.tunnelRequest(c, br, mw, host, port, rec)
	}
	return true, r.scanTunnel(c, br, mw, host, rec)
}

// forwardHello reads a ClientHello whose first bytes, prefix, were sent
// already, and sends the rest of it if it names host or no host; otherwise
// (a record that begins as a hello's does and can't be read as one whole,
// which fronts read differently, or another host's hello) the tunnel is cut
// before the rest is sent, its failure saying why.
func (r *Run) forwardHello(c *net.TCPConn, br *bufio.Reader, prefix []byte, host string, rec *record, send func([]byte) error) error {
	c.SetReadDeadline(time.Now().Add(r.handshakeTimeout))
	hello, sni, err := readClientHello(io.MultiReader(bytes.NewReader(prefix), br))
	c.SetReadDeadline(time.Time{})
	switch {
	case err != nil:
		rec.failure = r.readFailure(ruleBadHello, err) + ": the tunnel was cut"
		return errTunnelCut
	case sni != "" && sni != host:
		rec.failure = fmt.Sprintf("%s (%q, not %q): the tunnel was cut before the hello was sent", ruleSNIMismatch, text.Clip(sni, maxQuoted), host)
		return errTunnelCut
	}
	return send(hello[len(prefix):])
}

// scanTunnel forwards a raw tunnel's client bytes that began as neither TLS
// nor HTTP (a protocol's preamble: Postgres's SSLRequest, a STARTTLS line),
// its first helloScanBytes and any text after them, and looks in them for the
// names a front routes by: a server_name extension's shape naming another
// host anywhere (sniShapeName: it needs no record to be read, so a hello in
// any record version, or a decoy hello before it, hides nothing), and a TLS
// record that begins a ClientHello (helloAt), read whole (its name may be
// split over records) and cut unless it names host or nothing. A record that
// looked like a hello's but is none (a protocol's own bytes) is sent on, and
// the scan goes on. The tunnel is cut before the bytes that complete a name
// are sent: no front can route by part of one.
func (r *Run) scanTunnel(c *net.TCPConn, br *bufio.Reader, mw io.Writer, host string, rec *record) error {
	var tail []byte // the last bytes sent, for a shape split over two reads
	cut := func(name, how string) error {
		rec.failure = fmt.Sprintf("%s (%q, not %q) %s: the tunnel was cut before it was sent", ruleSNIMismatch, text.Clip(name, maxQuoted), host, how)
		return errTunnelCut
	}
	// send forwards b, which the scan has passed, and keeps its end in tail.
	send := func(b []byte) error {
		if _, err := mw.Write(b); err != nil {
			return err
		}
		if len(b) >= sniShapeMax {
			tail = append(tail[:0], b[len(b)-sniShapeMax:]...)
		} else if tail = append(tail, b...); len(tail) > sniShapeMax {
			tail = tail[:copy(tail, tail[len(tail)-sniShapeMax:])]
		}
		return nil
	}
	// seam is tail and the read's first bytes: a shape or a record's
	// start split between two reads is whole in it, and the read itself is
	// scanned where it lies.
	var seam []byte
	for sent := 0; ; {
		if _, err := br.Peek(1); err != nil {
			return nil // the client's end (or an error): the splice sees it
		}
		b, _ := br.Peek(br.Buffered())
		last := sent >= helloScanBytes && !isText(b)
		seam = append(append(seam[:0], tail...), b[:min(len(b), sniShapeMax)]...)
		name := sniShapeName(seam, host)
		if name == "" {
			name = sniShapeName(b, host)
		}
		if name != "" {
			return cut(name, "in a server_name extension")
		}
		// i is where a hello may start, counted from tail's start.
		off := max(0, len(tail)-helloPrefixLen+1)
		i := helloAt(seam[off:])
		if i >= 0 {
			i += off
		}
		if i < 0 || i >= len(tail) {
			if i = helloAt(b); i >= 0 {
				i += len(tail)
			}
		}
		if i < 0 {
			if err := send(b); err != nil {
				return err
			}
			br.Discard(len(b))
			if sent += len(b); last {
				return nil
			}
			if sent >= helloScanBytes && br.Size() < textScanBytes && br.Buffered() == 0 {
				br = bufio.NewReaderSize(c, textScanBytes) // br is empty: nothing is lost
			}
			continue
		}
		var prefix []byte // the record's first bytes, sent already
		if i < len(tail) {
			prefix = append([]byte(nil), tail[i:]...)
		} else {
			k := i - len(tail) // send changes tail
			if err := send(b[:k]); err != nil {
				return err
			}
			br.Discard(k)
			sent += k
		}
		// On after the hello, even past the last read: what that read
		// left in br is scanned before the splice, which reads the
		// socket, takes over.
		if err := r.forwardHello(c, br, prefix, host, rec, func(b []byte) error {
			sent += len(b)
			return send(b)
		}); err != nil {
			return err
		}
	}
}

// textScanBytes is the buffer a raw tunnel's text is scanned in past its
// first helloScanBytes: a read and a write of 4 KiB were most of the
// scan's cost (BenchmarkTunnelText).
const textScanBytes = 64 << 10

// helloPrefixLen is how many bytes helloAt needs to see a ClientHello's
// start: a handshake record's header, the handshake's type and its length's
// first byte.
const helloPrefixLen = recordHeaderLen + 2

// helloAt is the index of the first place in b where a TLS record that
// begins a ClientHello may start, or -1: a handshake record of a major
// version below 16 (Go's TLS takes any on a first record; HAProxy takes 3
// and up, which the shape of its SNI shows past 15: scanTunnel), a length a
// plaintext record may have, a ClientHello's type and a length below 128
// KiB (OpenSSL's bound). Random bytes match once in 2^29 places: a tunnel
// whose first 64 KiB are random (a git push over SSH) is cut about once in
// 8,000.
func helloAt(b []byte) int {
	for i := 0; i+helloPrefixLen <= len(b); i++ {
		j := bytes.IndexByte(b[i:len(b)-helloPrefixLen+1], recordTypeHandshake)
		if j < 0 {
			return -1
		}
		i += j
		if b[i+1] >= 0x10 || b[i+5] != handshakeClientHelo || b[i+6] > 1 {
			continue
		}
		if n := int(binary.BigEndian.Uint16(b[i+3 : i+5])); n > 0 && n <= maxRecordLen {
			return i
		}
	}
	return -1
}

// isText reports whether b is all text of a line protocol: printable ASCII,
// tabs and line ends.
func isText(b []byte) bool {
	for _, c := range b {
		if !textBytes[c] {
			return false
		}
	}
	return true
}

// textBytes is isText's table: a text stream is scanned whole, a byte at a
// time.
var textBytes = func() (t [256]bool) {
	for c := ' '; c <= '~'; c++ {
		t[c] = true
	}
	t['\t'], t['\r'], t['\n'] = true, true, true
	return t
}()

// requestLineFirst reports whether the client's bytes begin as an HTTP
// request line may (requestLineVerdict), waiting for more within the
// handshake timeout while what has come could still be one; a client that
// stops there is refused (err): a request line sent in pieces must not pass
// as another protocol's bytes. The client's end of stream is not one (no
// request follows it).
func (r *Run) requestLineFirst(c *net.TCPConn, br *bufio.Reader) (bool, error) {
	for {
		b, _ := br.Peek(br.Buffered())
		switch v := requestLineVerdict(b); {
		case v != 0:
			return v > 0, nil
		case len(b) >= br.Size():
			return true, nil // a line this long can only be a request's: readHead judges it
		}
		c.SetReadDeadline(time.Now().Add(r.handshakeTimeout))
		_, err := br.Peek(len(b) + 1)
		c.SetReadDeadline(time.Time{})
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// requestLineVerdict is 1 when b's first line may be an HTTP request line for
// some server, -1 when it can't, and 0 while it still may (no line end yet).
// Servers read request lines loosely (runs of spaces, tabs and other
// whitespace between the parts, whitespace before the method, HTTP/0.9's
// "GET /target" with headers after it, a PROXY protocol line first, which a
// front that takes one from its clients reads before the request; an audit
// reached another host through each), so a first line of a method, a target
// and a last word beginning "HTTP/", "GET" and one word, or a PROXY
// protocol header is taken for one, and readHead, which takes only the exact
// form, refuses the rest: the tunnel is cut. A line protocol's first line
// (SMTP's "EHLO host", SSH's banner, Redis's "SET url http://...", XMPP's
// "<?xml") is none of these, and a binary protocol's bytes hold a control byte
// no request line has.
func requestLineVerdict(b []byte) int {
	switch {
	case bytes.HasPrefix(b, proxyV2Signature):
		return 1
	case len(b) > 0 && bytes.HasPrefix(proxyV2Signature, b):
		return 0
	}
	b = bytes.TrimLeft(b, httpSpace)
	line, _, complete := bytes.Cut(b, []byte("\n"))
	if bytes.ContainsFunc(line, func(r rune) bool { return r < 0x09 || r > 0x0d && r < 0x1c || r == 0x7f }) {
		return -1
	}
	words := requestWords(line)
	switch {
	case !complete:
		if len(words) > 0 && !isToken(string(words[0])) {
			return -1
		}
		return 0
	case len(words) > 0 && string(words[0]) == "PROXY":
		return 1
	case len(words) >= 3 && isToken(string(words[0])) && bytes.HasPrefix(bytes.ToUpper(words[len(words)-1]), []byte("HTTP/")):
		return 1
	case len(words) == 2 && string(words[0]) == "GET":
		return 1
	}
	return -1
}

// httpSpace is what servers take for the whitespace between a request
// line's parts, or before it (Python's str.split: ASCII whitespace and the
// separators 0x1c to 0x1f; and 0x85 and 0xa0, requestWords).
const httpSpace = " \t\r\n\v\f\x1c\x1d\x1e\x1f"

// requestWords splits a request line where a server may: at httpSpace's
// bytes, and at U+0085 and U+00A0 both as Latin-1 bytes (Python's
// http.server decodes the line so, and str.split splits there: the egress
// probe of 2026-12-05 reached another host through "GET\x85/\x85HTTP/1.1",
// whose first word a split at UTF-8 runes had found no token) and as UTF-8.
func requestWords(line []byte) [][]byte {
	var words [][]byte
	start := -1
	for i := 0; i < len(line); {
		n := 0
		switch c := line[i]; {
		case strings.IndexByte(httpSpace, c) >= 0 || c == 0x85 || c == 0xa0:
			n = 1
		case c == 0xc2 && i+1 < len(line) && (line[i+1] == 0x85 || line[i+1] == 0xa0):
			n = 2
		}
		if n == 0 {
			if start < 0 {
				start = i
			}
			i++
			continue
		}
		if start >= 0 {
			words = append(words, line[start:i])
			start = -1
		}
		i += n
	}
	if start >= 0 {
		words = append(words, line[start:])
	}
	return words
}

// proxyV2Signature begins a PROXY protocol v2 header.
var proxyV2Signature = []byte("\r\n\r\n\x00\r\nQUIT\n")

// tunnelRequest forwards a raw tunnel's one plain HTTP request to host:port
// once its Host and its target name host, then drops what the client sends
// until the upstream has answered and closed.
func (r *Run) tunnelRequest(c *net.TCPConn, br *bufio.Reader, mw io.Writer, host string, port int, rec *record) error {
	c.SetReadDeadline(time.Now().Add(r.handshakeTimeout))
	h, err := readHead(br)
	c.SetReadDeadline(time.Time{})
	if err != nil {
		rec.failure = r.readFailure(ruleBadHead, err) + ": the tunnel was cut"
		return errTunnelCut
	}
	if inner, err := headHost(h.host, port); err != nil || inner != host {
		rec.failure = fmt.Sprintf("%s (%q, not %q): the tunnel was cut before the request was sent", ruleHostMismatch, text.Clip(h.host, maxQuoted), host)
		return errTunnelCut
	}
	target, err := originTarget(h.target, host, port)
	if err != nil {
		rec.failure = ruleTargetHost + ": " + err.Error() + ": the tunnel was cut before the request was sent"
		return errTunnelCut
	}
	return r.sendRequest(mw, br, h, target, "", rec)
}

// servePlain forwards a plain proxy request, `GET http://host/path HTTP/1.1`,
// what http_proxy means for plain HTTP, in origin form with the URL's Host.
func (r *Run) servePlain(c *net.TCPConn, br *bufio.Reader, h *head) {
	authority, origin, err := absoluteTarget(h.target)
	if err != nil {
		r.refuseHTTP(c, "", ProxyPort, viaConnect, 400, ruleNotProxyForm+": "+err.Error())
		return
	}
	host, port, err := hostPort(authority, 80)
	if err != nil {
		r.refuseHTTP(c, "", ProxyPort, viaConnect, 400, ruleNotProxyForm+": "+err.Error())
		return
	}
	if isProxyItself(host) {
		r.refuseHTTP(c, host, port, viaConnect, 403, ruleProxyItself)
		return
	}
	c.SetReadDeadline(time.Time{})
	r.connect(c, host, port, viaHTTP, nil, func(up *net.TCPConn, rec *record) {
		r.relayHTTP(c, br, up, h, origin, authority, rec)
	})
}

// isProxyItself reports a destination that names the run's own listeners or
// its loopback. The proxy dials from the host, where these are the host's
// loopback, which is no more the run's to reach.
func isProxyItself(host string) bool {
	if localNames[host] || strings.HasSuffix(host, ".localhost") {
		return true
	}
	a, err := parseAddr(host)
	return err == nil && (a.IsLoopback() || a.IsUnspecified())
}

// connect decides host:port by the policy, dials it when allowed, calls
// before (the peeked bytes, or a CONNECT's 200) and then serve, which moves
// the bytes. A refusal answers as the listener's protocol does.
func (r *Run) connect(c *net.TCPConn, host string, port int, via string, before func(*net.TCPConn, *record) error, serve func(*net.TCPConn, *record)) {
	r.connectThen(c, host, port, via, before, func(up *net.TCPConn, rec *record) (string, func()) {
		if serve == nil {
			return "", func() { r.pipe(c, up, rec) }
		}
		return "", func() { serve(up, rec) }
	})
}

// connectThen is connect with a last check after the connection is made
// (the SNI inside a CONNECT tunnel): check returns a refusal's rule, or how to
// serve the connection.
func (r *Run) connectThen(c *net.TCPConn, host string, port int, via string, before func(*net.TCPConn, *record) error, check func(*net.TCPConn, *record) (string, func())) {
	d := r.pol.DecideName(host, port)
	if !d.Allowed {
		r.refuseHTTP(c, host, port, via, 403, d.Rule)
		return
	}
	host = d.Name // normalised: what is dialled, pinned and listed
	up, refused, refusedAddr, err := r.dialChecked(r.ctx, host, port)
	if refused != nil {
		// The run's 403 names the address's class; the operator's log line
		// names the address too (the network audit found it missing).
		rec := r.decided(host, port, via, *refused, "")
		rec.detail = "resolved to " + refusedAddr.String()
		r.finished(rec)
		answerRefused(c, host, port, via, 403, refused.Rule)
		return
	}
	if err != nil {
		rec := r.decided(host, port, via, d, publicFailure(err))
		rec.detail = err.Error()
		r.finished(rec)
		if via != viaTLS {
			writeStatus(c, 502, fmt.Sprintf("brig egress: %s:%d is allowed (%s) but unreachable: %s", host, port, d.Rule, publicFailure(err)))
		}
		return
	}
	rec := &record{client: c, uploaded: make(chan struct{})}
	if !r.track(up, rec) {
		up.Close()
		return
	}
	defer r.untrack(up)
	// Every path ends here, once decided: nothing more to forward, the
	// upstream finished (what that takes back is listed and logged), listed.
	defer func() {
		rec.uploadDone()
		rec.finish(up)
		r.finished(rec)
	}()
	if before != nil {
		if err := before(up, rec); err != nil {
			r.decidedInto(rec, host, port, via, d, "writing the first bytes: "+addressless(err))
			rec.detail = err.Error()
			return
		}
	}
	rule, serve := check(up, rec)
	if rule != "" {
		// The connection was made, to an allowed host: listed as allowed,
		// cut, with why, as a raw tunnel cut for another host is.
		r.decidedInto(rec, host, port, via, d, rule)
		return
	}
	r.decidedInto(rec, host, port, via, d, "")
	serve()
	if rec.cut.Load() {
		rec.failure = errBytesLimit.Error()
	}
}

// relayHTTP forwards one request (head rewritten to target and host, body as
// its framing says) and its response, then closes: one request per
// connection. The proxy reads no response past its head, so it could not
// place a refusal of a later request in order among them, nor move a later
// request for another Host to another upstream; with one request per
// connection every request's Host is checked by construction and no second
// request can ride behind a first one. Both ends are told `Connection:
// close` (the response's head says so whatever the upstream's said), so
// clients open a new connection for the next request. Plain HTTP pays a TCP
// handshake per request; HTTPS is unaffected.
func (r *Run) relayHTTP(c *net.TCPConn, br *bufio.Reader, up *net.TCPConn, h *head, target, host string, rec *record) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := r.relayResponse(c, up, rec, nil)
		if err == nil && rec.received.Load() == 0 {
			err = io.EOF // an end where an answer was due
		}
		if err != nil {
			rec.markCut(err)
			if r.unanswered(c, rec, err) {
				r.answerUnanswered(c, up, rec)
				return
			}
			r.cut(c, up, rec)
		} else {
			rec.upstreamEnded.Store(true)
		}
	}()
	mw := meteredWriter{up, &r.lim.sent, &rec.sent}
	err := r.sendRequest(mw, br, h, target, host, rec)
	rec.uploadDone()
	if err != nil {
		rec.markCut(err)
		rec.finish(up)
	}
	dropUntilDone(c, up, done)
}

// responseHeadBytes is the buffer a connection's answer is read into while
// its heads are rewritten (relayHeads), and the buffer they are written from:
// held while the connection waits for its answer (a run's 64 connections,
// 256 KiB each way). A longer line goes in pieces.
const responseHeadBytes = 4 << 10

// relayResponse copies the upstream's response to the client, its final head
// saying `Connection: close` (relayHeads): an upstream that does not repeat
// the request's (Python's http.server as HTTP/1.1) left a keep-alive client
// sending its next request on the connection, where the proxy dropped it
// (Node's agent and http.client lost every second request: the network
// probe of 2026-12-05). The bytes counted are the upstream's. In a raw tunnel
// (plain not nil) the upstream's first bytes are an answer only when the
// client's were a plain HTTP request (plain, set before the request was
// sent): otherwise they pass as they came, a banner of a server that speaks
// first among them.
func (r *Run) relayResponse(c, up *net.TCPConn, rec *record, plain *atomic.Bool) error {
	br := bufio.NewReaderSize(up, responseHeadBytes)
	if plain != nil {
		// A reset here is the answer's failure: bufio reports an error once,
		// and the next read would see a clean end instead.
		if _, err := br.Peek(1); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
	}
	if plain == nil || plain.Load() {
		take := func(n int) error {
			if got := r.lim.received.take(int64(n)); got < int64(n) {
				r.lim.received.give(got)
				return errBytesLimit
			}
			rec.received.Add(int64(n))
			return nil
		}
		if err := relayHeads(bufio.NewWriterSize(c, responseHeadBytes), br, take); err != nil {
			return err
		}
	}
	if err := writeBuffered(meteredWriter{c, &r.lim.received, &rec.received}, br); err != nil {
		return err
	}
	return spliceCopy(c, up, &r.lim.received, &rec.received)
}

// sendRequest writes h, rewritten to target and host, and its body to w. A
// request cut short (a trailer refused, the client gone, the upstream's reset)
// says so in rec's failure, without addresses (the operator's log has them,
// detail). The run's byte limit says so itself (connectThen), and so does the
// run's end: its bytes the upstream had not taken are listed as dropped
// (finished), not as a request cut by an error of the proxy's own closing.
func (r *Run) sendRequest(w io.Writer, br *bufio.Reader, h *head, target, host string, rec *record) error {
	_, err := w.Write(h.rewrite(target, host))
	if err == nil {
		err = forwardBody(w, br, h)
	}
	if err != nil && !r.ownEnd(err) {
		rec.failure = "the request was cut: " + addressless(err)
		rec.detail = err.Error()
	}
	return err
}

// unanswered records, as rec's answer failure, an upstream that ended the
// connection with an error before it sent a byte back (a reset, or a close
// where an HTTP answer was due), which had been listed as a clean exchange
// (the network probe of 2026-12-06); and reports whether it did. The run's
// end, its byte limit and the proxy's own closing are not the upstream's.
func (r *Run) unanswered(c *net.TCPConn, rec *record, err error) bool {
	if rec.received.Load() > 0 || rec.cut.Load() || r.ownEnd(err) {
		return false
	}
	// An answer's copy fails on the run's side too: a write to a client
	// that reset or closed (EPIPE, or an error pending on its socket) is the
	// run's own end, not the upstream's (the review of 2026-12-06: a tunnel
	// whose client reset before the upstream's answer was listed so).
	if errors.Is(err, unix.EPIPE) || clientGone(c) {
		return false
	}
	why := addressless(err)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		why = "it closed it"
	}
	rec.answerFailure.CompareAndSwap(nil, &why)
	return true
}

// ownEnd reports whether err ended a copy for the run's sake, not the
// upstream's or the client's: the run's byte limit, the proxy's own closing
// of a socket, the run's end.
func (r *Run) ownEnd(err error) bool {
	return errors.Is(err, errBytesLimit) || errors.Is(err, net.ErrClosed) || r.ctx.Err() != nil
}

// answerUnanswered tells a plain HTTP client that its upstream ended the
// connection before it answered, with a 502 naming the host, and ends the
// upstream's side: the client's is left to dropUntilDone, which reads what it
// still sends, so that closing does not reset the connection under the
// answer.
func (r *Run) answerUnanswered(c, up *net.TCPConn, rec *record) {
	writeStatus(c, 502, "brig egress: "+rec.conn.Host+" ended the connection before it answered")
	rec.finish(up)
}

// clientGone reports whether the run's side of a connection has an error
// pending or has hung up both ways: a reset, or a close the proxy's write ran
// into.
func clientGone(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
			gone = fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0
		}
	})
	return gone
}

// dropUntilDone drops what the client sends after its one request until the
// upstream's answer has been copied (done), then for lingerTime more, so that
// closing does not reset the connection under the tail of the answer. The
// client's end of stream is passed on as a half close, as pipe does: an
// upstream that answers or closes only once its client has (one that ignores
// Connection: close) would otherwise hold the connection until the run ends.
// Past maxHeadBytes the client is no longer read.
func dropUntilDone(c, up *net.TCPConn, done <-chan struct{}) {
	read := make(chan struct{})
	go func() {
		defer close(read)
		if n, err := io.Copy(io.Discard, io.LimitReader(c, maxHeadBytes)); err == nil && n < maxHeadBytes {
			up.CloseWrite()
		}
	}()
	<-done
	c.CloseWrite()
	c.SetReadDeadline(time.Now().Add(lingerTime))
	<-read
}

// pipe splices client and upstream both ways until both are done. An end of
// stream is passed on as a half close; an error or the run's byte limit
// closes both.
func (r *Run) pipe(c, up *net.TCPConn, rec *record) { r.pipeAfter(c, up, rec, nil, nil) }

// pipeAfter is pipe whose client-to-upstream direction first calls first
// (when not nil), which forwards the client's first bytes itself; an error
// from it ends the connection both ways, and more false ends that direction
// there: what the client sends next is dropped until the upstream is done, but
// for its end of stream (dropUntilDone). With plain not nil the upstream's
// answer goes through relayResponse.
func (r *Run) pipeAfter(c, up *net.TCPConn, rec *record, plain *atomic.Bool, first func() (more bool, err error)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyAnswer := func() error { return spliceCopy(c, up, &r.lim.received, &rec.received) }
		if plain != nil {
			copyAnswer = func() error { return r.relayResponse(c, up, rec, plain) }
		}
		err := copyAnswer()
		if err == nil && plain != nil && plain.Load() && rec.received.Load() == 0 {
			err = io.EOF // an end where a plain request's answer was due
		}
		if err != nil {
			rec.markCut(err)
			if r.unanswered(c, rec, err) && plain != nil && plain.Load() {
				r.answerUnanswered(c, up, rec)
				return
			}
			r.cut(c, up, rec)
			return
		}
		rec.upstreamEnded.Store(true)
		c.CloseWrite()
	}()
	if first != nil {
		more, err := first()
		if err != nil || !more {
			rec.uploadDone()
		}
		if err != nil {
			rec.markCut(err)
			r.cut(c, up, rec)
			<-done
			return
		}
		if !more {
			dropUntilDone(c, up, done)
			return
		}
	}
	err := spliceCopy(up, c, &r.lim.sent, &rec.sent)
	rec.uploadDone()
	if err != nil {
		rec.markCut(err)
		r.cut(c, up, rec)
	} else {
		up.CloseWrite()
	}
	<-done
}

// cut ends a connection both ways: the run's end at once, the upstream's
// through finish.
func (r *Run) cut(c, up *net.TCPConn, rec *record) {
	c.Close()
	rec.finish(up)
}

// readFailure is the rule of a connection whose head could not be read.
func (r *Run) readFailure(rule string, err error) string {
	switch {
	case r.ctx.Err() != nil:
		return rule + ": the run ended first"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Sprintf("%s within %v", rule, r.handshakeTimeout)
	}
	return rule + ": " + err.Error()
}

// writeBuffered writes what br holds beyond what the proxy parsed: bytes the
// client sent early.
func writeBuffered(w io.Writer, br *bufio.Reader) error {
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		_, err := w.Write(b)
		return err
	}
	return nil
}

// refuseHTTP refuses a connection as a proxy does, with an HTTP status and a
// one-line body naming the rule; on the TLS port it only closes (there is no
// HTTP to answer in).
func (r *Run) refuseHTTP(c *net.TCPConn, host string, port int, via string, status int, rule string) {
	r.refuse(host, port, via, rule)
	answerRefused(c, host, port, via, status, rule)
}

// answerRefused is refuseHTTP's answer, for a refusal already listed.
func answerRefused(c *net.TCPConn, host string, port int, via string, status int, rule string) {
	if via == viaTLS {
		return
	}
	dest := "a connection that named no host"
	if host != "" {
		dest = net.JoinHostPort(host, strconv.Itoa(port))
	}
	writeStatus(c, status, fmt.Sprintf("brig egress: refused %s: %s%s", dest, rule, ruleHints[rule]))
}

// ruleHints say what to do about a refusal, for the rules the request can
// change: the program, or the model that wrote it, reads the answer.
var ruleHints = map[string]string{
	ruleNotDomain:   " (to reach it, list it or a parent domain in the run's network.domains)",
	ruleNotRegistry: " (mode registries reaches only the package registries; mode domains reaches the hosts listed)",
	ruleModeNone:    " (the run's network mode is none; ask for mode domains with the hosts to reach)",
	ruleInvalidHost: " (a host name is labels of letters, digits and hyphens, joined by dots: an underscore, as in some legacy bucket names, is refused)",
}

func writeStatus(c *net.TCPConn, status int, body string) {
	body = strings.ReplaceAll(body, "\n", " ") + "\n"
	c.SetWriteDeadline(time.Now().Add(lingerTime))
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, statusText[status], len(body), body)
}

var statusText = map[int]string{400: "Bad Request", 403: "Forbidden", 429: "Too Many Requests", 502: "Bad Gateway"}
