package egress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
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
	ruleProxyItself  = "the proxy itself"
	ruleNotProxyForm = "not a proxy request"
	ruleTargetHost   = "the request target names another host than the Host header"
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
	// The port is 80 whatever the Host says: the client connected to :80.
	host, _, err := hostPort(h.host, 80)
	if err != nil {
		r.refuseHTTP(c, "", 80, viaHTTP, 400, ruleBadHead+": the Host header: "+err.Error())
		return
	}
	if isProxyItself(host) {
		// The run's own names (localhost, sandbox) are its loopback's,
		// not a destination outside, as on the proxy's CONNECT.
		r.refuseHTTP(c, host, 80, viaHTTP, 403, ruleProxyItself)
		return
	}
	target, err := originTarget(h.target, host)
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
		r.refuseHTTP(c, "", ProxyPort, viaConnect, 400, "the CONNECT target is not host:port")
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
			if inner, _, err := hostPort(h.host, 80); err != nil || inner != host {
				return fmt.Sprintf("%s (%q, not %q)", ruleHostMismatch, clip(h.host), host), nil
			}
			target, err := originTarget(h.target, host)
			if err != nil {
				return ruleTargetHost + ": " + err.Error(), nil
			}
			c.SetReadDeadline(time.Time{})
			return "", func() { r.relayHTTP(c, br, up, h, target, "", rec) }
		})
	default:
		// Another port's protocol is unknown (SSH, SMTP and databases speak
		// first from the server), so the tunnel is raw both ways from the
		// start: the policy decided host and port. But for TLS: a front
		// shared by many hosts routes by the ClientHello's SNI on any port
		// (8443 as on 443), so a tunnel whose client starts with a hello
		// naming another host would reach that host; tunnelHello cuts it.
		r.connect(c, host, port, viaConnect, established, func(up *net.TCPConn, rec *record) {
			mw := meteredWriter{up, &r.lim.sent, &rec.sent}
			r.pipeAfter(c, up, rec, func() error { return r.tunnelHello(c, br, mw, host, rec) })
		})
	}
}

// errTunnelSNI ends a raw tunnel whose ClientHello names another host.
var errTunnelSNI = errors.New(ruleSNIMismatch)

// tunnelHello forwards the first bytes of a raw tunnel to host: what the
// client sent early, and, when they begin a TLS record, the whole ClientHello
// once its SNI is known to be host's (or it has none, which no front can
// route by). A hello that names another host, or that can't be read, is not
// sent: the tunnel is cut, and its listing (allowed: the policy allowed host
// and port) says why in its failure. Waiting for the client's first byte does
// not hold back the upstream's, which pipeAfter copies meanwhile.
func (r *Run) tunnelHello(c *net.TCPConn, br *bufio.Reader, mw io.Writer, host string, rec *record) error {
	first, err := br.Peek(1)
	if err != nil {
		return nil // the client sent nothing: the splice sees its end
	}
	if first[0] == recordTypeHandshake {
		c.SetReadDeadline(time.Now().Add(r.handshakeTimeout))
		hello, sni, err := readClientHello(br)
		c.SetReadDeadline(time.Time{})
		switch {
		case err != nil:
			rec.failure = r.readFailure(ruleBadHello, err) + ": the tunnel was cut"
			return err
		case sni != "" && sni != host:
			rec.failure = fmt.Sprintf("%s (%q, not %q): the tunnel was cut before the hello was sent", ruleSNIMismatch, clip(sni), host)
			return errTunnelSNI
		}
		if _, err := mw.Write(hello); err != nil {
			return err
		}
	}
	return writeBuffered(mw, br)
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
	up, refused, err := r.dialChecked(r.ctx, host, port)
	if refused != nil {
		r.refuseHTTP(c, host, port, via, 403, refused.Rule)
		return
	}
	if err != nil {
		rec := r.decided(host, port, via, d, err.Error())
		r.finished(rec)
		if via != viaTLS {
			writeStatus(c, 502, fmt.Sprintf("brig egress: %s:%d is allowed (%s) but unreachable: %v", host, port, d.Rule, err))
		}
		return
	}
	if !r.track(up) {
		up.Close()
		return
	}
	defer r.untrack(up)
	defer up.Close()
	var rec = &record{}
	if before != nil {
		if err := before(up, rec); err != nil {
			r.decidedInto(rec, host, port, via, d, "writing the first bytes: "+err.Error())
			r.finished(rec)
			return
		}
	}
	rule, serve := check(up, rec)
	if rule != "" {
		r.refuse(host, port, via, rule)
		return
	}
	r.decidedInto(rec, host, port, via, d, "")
	defer r.finished(rec)
	serve()
	if rec.cut.Load() {
		rec.failure = errBytesLimit.Error()
	}
}

// relayHTTP forwards one request (head rewritten to target and host, body as
// its framing says) and its response, then closes: one request per
// connection. The proxy never parses responses, so it could not place a
// refusal of a later request in order among them, nor move a later request
// for another Host to another upstream; with one request per connection every
// request's Host is checked by construction and no second request can ride
// behind a first one. The upstream is told `Connection: close`, which it
// repeats to the client, so clients open a new connection for the next
// request. Plain HTTP pays a TCP handshake per request; HTTPS is unaffected.
func (r *Run) relayHTTP(c *net.TCPConn, br *bufio.Reader, up *net.TCPConn, h *head, target, host string, rec *record) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := spliceCopy(c, up, &r.lim.received, &rec.received); err != nil {
			rec.markCut(err)
			c.Close()
			up.Close()
		}
	}()
	mw := meteredWriter{up, &r.lim.sent, &rec.sent}
	_, err := mw.Write(h.rewrite(target, host))
	if err == nil {
		err = forwardBody(mw, br, h)
	}
	if err != nil {
		rec.markCut(err)
		up.Close()
	}
	<-done
	// Drain what the client sent after its request, briefly, so that closing
	// does not reset the connection under the tail of the response.
	c.CloseWrite()
	c.SetReadDeadline(time.Now().Add(lingerTime))
	io.Copy(io.Discard, io.LimitReader(c, maxHeadBytes))
}

// pipe splices client and upstream both ways until both are done. An end of
// stream is passed on as a half close; an error or the run's byte limit
// closes both.
func (r *Run) pipe(c, up *net.TCPConn, rec *record) { r.pipeAfter(c, up, rec, nil) }

// pipeAfter is pipe whose client-to-upstream direction first calls first
// (when not nil), which forwards the client's first bytes itself; an error
// from it ends the connection both ways.
func (r *Run) pipeAfter(c, up *net.TCPConn, rec *record, first func() error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := spliceCopy(c, up, &r.lim.received, &rec.received); err != nil {
			rec.markCut(err)
			c.Close()
			up.Close()
			return
		}
		c.CloseWrite()
	}()
	if first != nil {
		if err := first(); err != nil {
			rec.markCut(err)
			c.Close()
			up.Close()
			<-done
			return
		}
	}
	if err := spliceCopy(up, c, &r.lim.sent, &rec.sent); err != nil {
		rec.markCut(err)
		c.Close()
		up.Close()
	} else {
		up.CloseWrite()
	}
	<-done
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
	if via == viaTLS {
		return
	}
	dest := host
	if host != "" {
		dest = fmt.Sprintf("%s:%d", host, port)
	}
	writeStatus(c, status, fmt.Sprintf("brig egress: refused %s: %s%s", dest, rule, ruleHints[rule]))
}

// ruleHints say what to do about a refusal, for the rules the request can
// change: the program, or the model that wrote it, reads the answer.
var ruleHints = map[string]string{
	ruleNotDomain:   " (to reach it, list it or a parent domain in the run's network.domains)",
	ruleNotRegistry: " (mode registries reaches only the package registries; mode domains reaches the hosts listed)",
	ruleModeNone:    " (the run's network mode is none; ask for mode domains with the hosts to reach)",
}

func writeStatus(c *net.TCPConn, status int, body string) {
	body = strings.ReplaceAll(body, "\n", " ") + "\n"
	c.SetWriteDeadline(time.Now().Add(lingerTime))
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, statusText[status], len(body), body)
}

var statusText = map[int]string{400: "Bad Request", 403: "Forbidden", 429: "Too Many Requests", 502: "Bad Gateway"}
