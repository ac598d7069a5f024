package egress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/brig-sandbox/brig/internal/text"
)

// maxHeadBytes bounds a request head (its request line and header lines).
const maxHeadBytes = 64 << 10

var errBadHead = errors.New("malformed request head")

// head is an HTTP/1 request head as the proxy needs it. The header lines are
// kept as they came so that the head is forwarded unchanged but for the few
// lines the proxy owns (Connection, Proxy-*, and Host for an absolute URL).
//
// Hand-written rather than net/http.ReadRequest's: the proxy forwards the
// raw bytes (ReadRequest canonicalises and re-writes headers and adds its own)
// and must find the body's end exactly, refusing every ambiguous framing that
// request smuggling relies on.
type head struct {
	method, target, proto string
	lines                 []string // header lines, without their line ends
	host                  string   // the Host header's value
	contentLength         int64    // -1 when absent
	chunked               bool
}

// readHead reads a request head from br: the request line, the header lines
// and the empty line, at most maxHeadBytes.
func readHead(br *bufio.Reader) (*head, error) {
	left := maxHeadBytes
	line, err := readLine(br, &left)
	for i := 0; err == nil && line == "" && i < 4; i++ {
		line, err = readLine(br, &left) // RFC 9112 §2.2: skip empty lines first
	}
	if err != nil {
		return nil, err
	}
	parts := strings.Split(line, " ")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || !isToken(parts[0]) {
		return nil, fmt.Errorf("%w: the request line %q is not METHOD TARGET HTTP/1.x", errBadHead, text.Clip(line, maxQuoted))
	}
	h := &head{method: parts[0], target: parts[1], proto: parts[2], contentLength: -1}
	if h.proto != "HTTP/1.1" && h.proto != "HTTP/1.0" {
		return nil, fmt.Errorf("%w: the version %q is not HTTP/1.0 or HTTP/1.1", errBadHead, text.Clip(h.proto, maxQuoted))
	}
	hosts, transferEncodings := 0, 0
	for {
		line, err := readLine(br, &left)
		if err != nil {
			return nil, err
		}
		if line == "" {
			break
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok || !isToken(name) {
			// Also refuses obsolete line folding, a line that starts with a space.
			return nil, fmt.Errorf("%w: the header line %q", errBadHead, text.Clip(line, maxQuoted))
		}
		value = strings.Trim(value, " \t")
		switch strings.ToLower(name) {
		case "host":
			hosts++
			h.host = value
		case "content-length":
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil || n < 0 || value[0] == '+' || (h.contentLength >= 0 && n != h.contentLength) {
				return nil, fmt.Errorf("%w: the Content-Length %q", errBadHead, text.Clip(value, maxQuoted))
			}
			h.contentLength = n
		case "transfer-encoding":
			transferEncodings++
			if !strings.EqualFold(value, "chunked") {
				return nil, fmt.Errorf("%w: the Transfer-Encoding %q (only chunked is forwarded)", errBadHead, text.Clip(value, maxQuoted))
			}
			h.chunked = true
		}
		h.lines = append(h.lines, line)
	}
	switch {
	case hosts > 1:
		return nil, fmt.Errorf("%w: %d Host headers", errBadHead, hosts)
	case transferEncodings > 1:
		return nil, fmt.Errorf("%w: %d Transfer-Encoding headers", errBadHead, transferEncodings)
	case h.chunked && h.contentLength >= 0:
		return nil, fmt.Errorf("%w: both Content-Length and Transfer-Encoding", errBadHead)
	}
	return h, nil
}

// readLine reads one line ending in LF (CRLF or bare LF), counting it against
// left.
func readLine(br *bufio.Reader, left *int) (string, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		*left -= len(chunk)
		if *left < 0 {
			return "", fmt.Errorf("%w: longer than %d bytes", errBadHead, maxHeadBytes)
		}
		buf = append(buf, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return "", err
		}
		line := bytes.TrimSuffix(bytes.TrimSuffix(buf, []byte("\n")), []byte("\r"))
		if bytes.ContainsAny(line, "\r\x00") {
			return "", fmt.Errorf("%w: a CR or NUL inside a line", errBadHead)
		}
		return string(line), nil
	}
}

// hostPort splits a Host header or an authority into a normalised host and a
// port, def when it has none. The port is decimal digits, written as a number
// is (no sign, no leading zero): Atoi alone took "+443" and "0443", which a
// front that parses ports strictly would read otherwise (the red team).
func hostPort(s string, def int) (string, int, error) {
	host, port := s, def
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p {
			return "", 0, fmt.Errorf("the port %q is not a number from 1 to 65535", p)
		}
		host, port = h, n
	} else if strings.HasPrefix(s, "[") {
		host = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	}
	// One trailing dot makes a name absolute; two leave an empty label.
	// Brackets hold an IPv6 address and nothing else (RFC 3986's
	// IP-literal): "[name]" is neither a name nor an address.
	if !isHostChars(host) || strings.HasSuffix(host, "..") || strings.HasPrefix(s, "[") && !isIPv6(host) {
		return "", 0, fmt.Errorf("%q is not a host name", text.Clip(s, maxQuoted))
	}
	return normalHost(host), port, nil
}

// isIPv6 reports whether s is an IPv6 address (no zone).
func isIPv6(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is6() && a.Zone() == ""
}

// headHost is the name a request's Host header names for a connection to
// port: a Host that names another port is refused, not forwarded, since the
// upstream would read the request as one for that port, which the policy did
// not decide (the egress red team's Host: allowed.test:9000 reached
// allowed.test:80 on the transparent :80; a review found the same inside a
// CONNECT tunnel).
func headHost(value string, port int) (string, error) {
	host, p, err := hostPort(value, port)
	if err == nil && p != port {
		err = fmt.Errorf("the Host header %q names port %d, and this connection is to port %d", text.Clip(value, maxQuoted), p, port)
	}
	return host, err
}

// originTarget is the target that a request decided on its Host header (on
// the transparent :80, or in a CONNECT tunnel to port 80) is forwarded with.
// An origin-form target ("/path") and "*" go as they are. An absolute-form
// one ("http://host/path") is legal there too, and a server routes by it,
// not by the Host header (RFC 9112, 3.2.2): it is forwarded in origin form,
// and only when it names host on port 80. Otherwise a request decided on one
// name would reach whatever other site shares its server.
func originTarget(target, host string, port int) (string, error) {
	if strings.HasPrefix(target, "/") || target == "*" {
		return target, nil
	}
	authority, origin, err := absoluteTarget(target)
	if err != nil {
		return "", err
	}
	named, namedPort, err := hostPort(authority, 80)
	if err != nil {
		return "", err
	}
	if named != host || namedPort != port {
		return "", fmt.Errorf("%q, not %s:%d", text.Clip(authority, maxQuoted), host, port)
	}
	return origin, nil
}

// absoluteTarget splits a plain proxy request's absolute URL into its
// authority and its origin form (RFC 9112 §3.2.2).
func absoluteTarget(target string) (authority, origin string, err error) {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" || u.User != nil || u.Fragment != "" {
		return "", "", fmt.Errorf("the target %q is not an absolute http:// URL", text.Clip(target, maxQuoted))
	}
	if u.Scheme != "http" {
		return "", "", fmt.Errorf("the scheme %q is not forwarded as a plain request: use CONNECT (https_proxy) for https", u.Scheme)
	}
	origin = u.EscapedPath()
	if origin == "" {
		origin = "/"
	}
	if u.RawQuery != "" || u.ForceQuery {
		origin += "?" + u.RawQuery
	}
	return u.Host, origin, nil
}

// rewrite is the head the proxy forwards: target replaces the request target
// (the origin form of an absolute URL), host (when not "") replaces the Host
// header, every Proxy-* header a client meant for its proxy is dropped, and
// the connection closes after the response (see relayHTTP).
func (h *head) rewrite(target, host string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s %s\r\n", h.method, target, h.proto)
	if host != "" {
		fmt.Fprintf(&b, "Host: %s\r\n", host)
	}
	for _, line := range h.lines {
		name, _, _ := strings.Cut(line, ":")
		switch n := strings.ToLower(name); {
		case strings.HasPrefix(n, "proxy-"), n == "connection", n == "keep-alive", n == "upgrade":
			continue
		case n == "host" && host != "":
			continue
		}
		b.WriteString(line)
		b.WriteString("\r\n")
	}
	b.WriteString("Connection: close\r\n\r\n")
	return b.Bytes()
}

// forwardBody copies the request body that follows h from br to w, exactly as
// its framing says, and nothing after it.
func forwardBody(w io.Writer, br *bufio.Reader, h *head) error {
	switch {
	case h.contentLength > 0:
		_, err := io.CopyN(w, br, h.contentLength)
		return err
	case h.chunked:
		return forwardChunked(w, br)
	}
	return nil // no framing: a request without a body
}

// forwardChunked copies a chunked body (RFC 9112 §7.1) with its chunk lines
// and trailers, as it came, once each is checked as strictly as the head: a
// chunk size is hex digits alone (no sign, which strconv takes), and a trailer
// is a header field, never one that frames or routes a request. A request
// line smuggled in as a trailer ("GET /x HTTP/1.1", "Host: other") would
// otherwise reach an upstream that reads trailers loosely.
func forwardChunked(w io.Writer, br *bufio.Reader) error {
	for {
		left := 4096
		line, err := readLine(br, &left)
		if err != nil {
			return fmt.Errorf("reading a chunk size: %w", err)
		}
		sizeText, _, _ := strings.Cut(line, ";")
		sizeText = strings.TrimRight(sizeText, " \t")
		size, err := strconv.ParseInt(sizeText, 16, 64)
		if err != nil || size < 0 || strings.Trim(sizeText, "0123456789abcdefABCDEF") != "" {
			return fmt.Errorf("%w: the chunk size %q", errBadHead, text.Clip(line, maxQuoted))
		}
		if _, err := io.WriteString(w, line+"\r\n"); err != nil {
			return err
		}
		if size == 0 {
			break
		}
		if _, err := io.CopyN(w, br, size); err != nil {
			return err
		}
		if end, err := readLine(br, &left); err != nil || end != "" {
			return fmt.Errorf("%w: a chunk does not end with CRLF", errBadHead)
		}
		if _, err := io.WriteString(w, "\r\n"); err != nil {
			return err
		}
	}
	left := maxHeadBytes
	for { // trailers, then the empty line
		line, err := readLine(br, &left)
		if err != nil {
			return fmt.Errorf("reading the trailers: %w", err)
		}
		if line != "" {
			name, _, ok := strings.Cut(line, ":")
			switch strings.ToLower(name) {
			case "host", "content-length", "transfer-encoding", "connection", "te", "trailer", "upgrade":
				ok = false
			}
			if !ok || !isToken(name) {
				return fmt.Errorf("%w: the trailer line %q", errBadHead, text.Clip(line, maxQuoted))
			}
		}
		if _, err := io.WriteString(w, line+"\r\n"); err != nil {
			return err
		}
		if line == "" {
			return nil
		}
	}
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}

// maxQuoted bounds what of a client's bytes an error message quotes.
const maxQuoted = 80

// relayHeads copies the response heads br begins with to w: interim ones
// (1xx) as they came, then the final one, through its empty line, with its
// Connection, Keep-Alive and Proxy-Connection fields (and their continuation
// lines) replaced by `Connection: close`; a 101's goes as it came (the proxy
// forwards no Upgrade: it answers none). Each line's bytes are taken from
// take before they go. The head streams a line at a time, a longer line than
// br's buffer in pieces, so that no head is too large to rewrite and none is
// held whole. Where br does not begin with an HTTP/1 status line that fits
// it, relayHeads returns having taken nothing, and what br holds goes as it
// came. An upstream that ends inside a head ends the answer there.
func relayHeads(w *bufio.Writer, br *bufio.Reader, take func(n int) error) error {
	for {
		status, err := peekStatus(br)
		if status == 0 {
			return err
		}
		final := status == 101 || status >= 200
		if err := copyHead(w, br, final && status != 101, take); err != nil || final {
			return err
		}
	}
}

// peekStatus is the status code of the HTTP/1 status line br begins with,
// without taking it, or 0 where br begins with none that fits its buffer, as
// soon as its first bytes say so. err is a read's failure other than the
// upstream's end (a reset), which bufio would not report again.
func peekStatus(br *bufio.Reader) (status int, err error) {
	var line []byte
	for n := 1; ; n = len(line) + 1 {
		if _, err := br.Peek(n); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, bufio.ErrBufferFull) {
				err = nil
			}
			return 0, err
		}
		line, _ = br.Peek(br.Buffered())
		if k := min(len(line), len(statusPrefix)); !bytes.Equal(line[:k], statusPrefix[:k]) {
			return 0, nil // another protocol's answer goes on at once
		}
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			line = line[:i]
			break
		}
	}
	f := bytes.Fields(line)
	if len(f) < 2 || len(f[1]) != 3 {
		return 0, nil
	}
	status, err = strconv.Atoi(string(f[1]))
	if err != nil || status < 100 {
		return 0, nil
	}
	return status, nil
}

// statusPrefix begins every HTTP/1 status line.
var statusPrefix = []byte("HTTP/1.")

// copyHead copies one head from br to w, through the empty line that ends it
// (CRLF or bare LF line ends), leaving out, with closing, the fields that
// name the connection's fate (closingField) and ending with `Connection:
// close`. w is flushed at the end, or where the upstream ended mid head.
func copyHead(w *bufio.Writer, br *bufio.Reader, closing bool, take func(n int) error) error {
	lineStart, drop := true, false
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if err := take(len(line)); err != nil {
				return err
			}
		}
		if lineStart {
			switch {
			case string(line) == "\r\n" || string(line) == "\n":
				if closing {
					w.WriteString("Connection: close\r\n")
				}
				w.Write(line)
				return w.Flush()
			case len(line) > 0 && (line[0] == ' ' || line[0] == '\t'):
				// obs-fold: the field's continuation goes where the field went
			default:
				drop = closing && closingField(line)
			}
		}
		if !drop {
			w.Write(line)
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			lineStart = false
		case errors.Is(err, io.EOF):
			return w.Flush()
		case err != nil:
			return err
		default:
			lineStart = true
		}
	}
}

// closingField says whether a head's line is a field that says whether the
// connection stays open: Connection, Keep-Alive or Proxy-Connection, in any
// case. A status line is none (its name would hold a space).
func closingField(line []byte) bool {
	name, _, ok := bytes.Cut(line, []byte(":"))
	if !ok {
		return false
	}
	name = bytes.TrimSpace(name)
	for _, f := range []string{"Connection", "Keep-Alive", "Proxy-Connection"} {
		if bytes.EqualFold(name, []byte(f)) {
			return true
		}
	}
	return false
}
