package egress

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// The TLS framing the ClientHello reader knows (RFC 8446 §5.1 and §4).
const (
	recordHeaderLen     = 5
	recordTypeHandshake = 22
	maxRecordLen        = 1 << 14 // a plaintext record's bound
	handshakeClientHelo = 1
	extServerName       = 0
	sniHostName         = 0
)

var (
	errNotTLS     = errors.New("not a TLS handshake")
	errNotHello   = errors.New("the first handshake message is not a ClientHello")
	errSplitHello = errors.New("the ClientHello does not fit its first record (brig reads a hello in one record only: fronts join records differently)")
	errBadHello   = errors.New("the ClientHello is malformed")
)

// readClientHello reads one TLS record from r, which must hold a ClientHello
// whole and nothing else, however it is split over TCP segments, and never
// reads past it (the bytes after belong to the upstream). It returns every
// byte it read, to be written to the upstream unchanged, and the server name
// of the SNI extension, lower case without a trailing dot, or "" when the
// hello has none. The record's major version may be any below 16, as Go's
// TLS takes on a first record (a front's parser may not look at it).
//
// A hello split over records is refused (errSplitHello): fronts join records
// differently (HAProxy reads on across the next record's header, OpenSSL
// skips empty records, Go skips warning alerts between them), and a name
// split over two records is read by some and not by others; clients send
// their hello in one record (a 16 KiB record holds a hello with post-quantum
// key shares ten times over). A hello that holds, besides its SNI, the shape
// of a server_name extension naming another host is refused too
// (sniShapeName).
//
// Hand-written rather than crypto/tls's, which only parses a hello while
// terminating TLS; inetaf/tcpproxy's sni.go is the model (it hands crypto/tls
// a fake conn), but this one reads the framing itself so that it can bound the
// size, keep the exact bytes and parse nothing but what it needs.
func readClientHello(r io.Reader) (raw []byte, sni string, err error) {
	raw = make([]byte, recordHeaderLen, 2048)
	if n, err := io.ReadFull(r, raw); err != nil {
		return raw[:n], "", fmt.Errorf("reading a record header: %w", err)
	}
	if raw[0] != recordTypeHandshake || raw[1] >= 0x10 {
		return raw, "", errNotTLS
	}
	n := int(binary.BigEndian.Uint16(raw[3:5]))
	if n == 0 || n > maxRecordLen {
		return raw, "", fmt.Errorf("%w: a record of %d bytes", errBadHello, n)
	}
	raw = append(raw, make([]byte, n)...)
	if got, err := io.ReadFull(r, raw[recordHeaderLen:]); err != nil {
		return raw[:recordHeaderLen+got], "", fmt.Errorf("reading a record: %w", err)
	}
	msg := raw[recordHeaderLen:]
	if msg[0] != handshakeClientHelo {
		return raw, "", errNotHello
	}
	if len(msg) < 4 {
		return raw, "", errSplitHello
	}
	switch size := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]); {
	case 4+size > len(msg):
		return raw, "", errSplitHello
	case 4+size < len(msg):
		return raw, "", fmt.Errorf("%w: %d bytes follow it in its record", errBadHello, len(msg)-4-size)
	}
	if sni, err = helloServerName(msg[4:]); err != nil {
		return raw, "", err
	}
	if other := sniShapeName(msg, sni); other != "" {
		return raw, "", fmt.Errorf("%w: it holds a server_name extension for %q besides %q", errBadHello, other, sni)
	}
	return raw, sni, nil
}

// sniShapeMax is the longest a server_name extension's shape is
// (sniShapeName): its type and lengths, 9 bytes, and a name of at most 255.
const sniShapeMax = 9 + 255

// sniShapeName is the first host name other than host that b holds in the
// shape of a server_name extension, anywhere in it: type 0, a length, a list
// that length less 2, and a host_name entry first in it whose name is a host
// name; "" when there is none. A front's parser may find an SNI where
// brig's does not look for one: in a hello, inside an extension brig skips
// (HAProxy, reading a hello split over records as one run of bytes, landed
// on one: a probe reached another host by it), and in a raw tunnel, in a
// record of a version brig's scan takes for no record (HAProxy takes any
// major version from 3). A hello, or a raw tunnel's bytes, that hold one
// naming another host are refused; random bytes hold one about once in 2^40.
func sniShapeName(b []byte, host string) string {
	for i := 0; ; i++ {
		j := bytes.Index(b[i:], []byte{0, 0})
		if j < 0 {
			return ""
		}
		i += j
		if i+9 > len(b) {
			return ""
		}
		extLen := int(binary.BigEndian.Uint16(b[i+2:]))
		listLen := int(binary.BigEndian.Uint16(b[i+4:]))
		nameLen := int(binary.BigEndian.Uint16(b[i+7:]))
		if listLen+2 != extLen || b[i+6] != sniHostName || nameLen == 0 || nameLen+3 > listLen || i+9+nameLen > len(b) {
			continue
		}
		if name := string(b[i+9 : i+9+nameLen]); isHostChars(name) && normalHost(name) != host {
			return normalHost(name)
		}
	}
}

// helloServerName returns the host name of a ClientHello body's SNI
// extension (RFC 6066 §3), or "" when there is none.
func helloServerName(body []byte) (string, error) {
	c := cursor(body)
	if !c.skip(2+32) || !c.skipVec8() || !c.skipVec16() || !c.skipVec8() {
		return "", errBadHello
	}
	if len(c) == 0 {
		return "", nil // no extensions at all
	}
	exts, ok := c.vec16()
	if !ok || len(c) != 0 {
		return "", errBadHello
	}
	name, found := "", false
	for len(exts) > 0 {
		typ, ok1 := exts.u16()
		data, ok2 := exts.vec16()
		if !ok1 || !ok2 {
			return "", errBadHello
		}
		if typ != extServerName {
			continue
		}
		if found {
			return "", fmt.Errorf("%w: two server_name extensions", errBadHello)
		}
		found = true
		list, ok := data.vec16()
		if !ok || len(data) != 0 {
			return "", errBadHello
		}
		for len(list) > 0 {
			kind, ok1 := list.u8()
			v, ok2 := list.vec16()
			if !ok1 || !ok2 {
				return "", errBadHello
			}
			if kind == sniHostName {
				if name != "" {
					return "", fmt.Errorf("%w: two host names", errBadHello)
				}
				name = string(v)
			}
		}
	}
	if !found {
		return "", nil
	}
	if !isHostChars(name) {
		return "", fmt.Errorf("%w: the server name %q is not a host name", errBadHello, name)
	}
	return normalHost(name), nil
}

// isHostChars reports whether s is made of the characters of a host name or
// an address literal, so that no control byte or space reaches a log line.
func isHostChars(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_' || c == ':') {
			return false
		}
	}
	return true
}

// normalHost is a host name as the policy and the pins compare it: ASCII lower
// case, no trailing dot.
func normalHost(s string) string {
	return asciiLower(strings.TrimSuffix(s, "."))
}

// cursor reads TLS's big-endian integers and length-prefixed vectors.
type cursor []byte

func (c *cursor) skip(n int) bool {
	if len(*c) < n {
		return false
	}
	*c = (*c)[n:]
	return true
}

func (c *cursor) u8() (byte, bool) {
	if len(*c) < 1 {
		return 0, false
	}
	v := (*c)[0]
	*c = (*c)[1:]
	return v, true
}

func (c *cursor) u16() (int, bool) {
	if len(*c) < 2 {
		return 0, false
	}
	v := int(binary.BigEndian.Uint16(*c))
	*c = (*c)[2:]
	return v, true
}

func (c *cursor) vec(n int) (cursor, bool) {
	if len(*c) < n {
		return nil, false
	}
	v := (*c)[:n]
	*c = (*c)[n:]
	return v, true
}

func (c *cursor) vec16() (cursor, bool) {
	n, ok := c.u16()
	if !ok {
		return nil, false
	}
	return c.vec(n)
}

func (c *cursor) skipVec8() bool {
	n, ok := c.u8()
	return ok && c.skip(int(n))
}

func (c *cursor) skipVec16() bool {
	_, ok := c.vec16()
	return ok
}
