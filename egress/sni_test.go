package egress

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"testing/iotest"
)

// clientHello returns the records of the ClientHello crypto/tls sends with
// cfg, read off a pipe record by record (one, but for a hello past 16 KiB).
func clientHello(t *testing.T, cfg *tls.Config) []byte {
	t.Helper()
	a, b := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tls.Client(a, cfg).Handshake() // fails when b closes: only the hello matters
	}()
	var raw []byte
	for helloRecordsLen(raw) == 0 {
		buf := make([]byte, 4096)
		n, err := b.Read(buf)
		if err != nil {
			t.Fatalf("reading the hello crypto/tls sent: %v", err)
		}
		raw = append(raw, buf[:n]...)
	}
	b.Close()
	a.Close()
	<-done
	return raw
}

// helloRecordsLen is the length of the records at the start of b that hold
// a whole ClientHello, over however many records, or 0 while they don't yet.
func helloRecordsLen(b []byte) int {
	var msg []byte
	at := 0
	for at+recordHeaderLen <= len(b) {
		n := int(binary.BigEndian.Uint16(b[at+3 : at+5]))
		if at+recordHeaderLen+n > len(b) {
			return 0
		}
		msg = append(msg, b[at+recordHeaderLen:at+recordHeaderLen+n]...)
		at += recordHeaderLen + n
		if len(msg) >= 4 && len(msg) >= 4+(int(msg[1])<<16|int(msg[2])<<8|int(msg[3])) {
			return at
		}
	}
	return 0
}

// reframe splits a hello's handshake bytes into records of at most size bytes.
func reframe(t *testing.T, raw []byte, size int) []byte {
	t.Helper()
	var msg []byte
	for len(raw) > 0 {
		n := int(binary.BigEndian.Uint16(raw[3:5]))
		msg = append(msg, raw[5:5+n]...)
		raw = raw[5+n:]
	}
	var out []byte
	for len(msg) > 0 {
		n := min(size, len(msg))
		out = append(out, recordTypeHandshake, 3, 1, byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return out
}

// withTrailing is a one-record hello with b after it in its record.
func withTrailing(hello, b []byte) []byte {
	out := append(append([]byte(nil), hello...), b...)
	n := int(binary.BigEndian.Uint16(out[3:5])) + len(b)
	out[3], out[4] = byte(n>>8), byte(n)
	return out
}

// sniShape is a server_name extension's body naming host: what a parser that
// finds one where brig does not look takes for the SNI.
func sniShape(host string) []byte {
	n := len(host)
	b := []byte{0, 0, byte((n + 5) >> 8), byte(n + 5), byte((n + 3) >> 8), byte(n + 3), sniHostName, byte(n >> 8), byte(n)}
	return append(b, host...)
}

// withExtension adds an extension of typ holding data at the end of a
// one-record hello's extensions, its lengths made whole again.
func withExtension(t *testing.T, hello []byte, typ uint16, data []byte) []byte {
	t.Helper()
	body := hello[recordHeaderLen+4:]
	c := 2 + 32
	c += 1 + int(body[c])                           // session id
	c += 2 + int(binary.BigEndian.Uint16(body[c:])) // cipher suites
	c += 1 + int(body[c])                           // compression methods
	if c+2 > len(body) || int(binary.BigEndian.Uint16(body[c:]))+c+2 != len(body) {
		t.Fatalf("the hello is not one record with its extensions last")
	}
	ext := binary.BigEndian.AppendUint16(nil, typ)
	ext = append(binary.BigEndian.AppendUint16(ext, uint16(len(data))), data...)
	out := append(append([]byte(nil), hello...), ext...)
	grow := func(at, size int) {
		v := 0
		for i := 0; i < size; i++ {
			v = v<<8 | int(out[at+i])
		}
		v += len(ext)
		for i := size - 1; i >= 0; i-- {
			out[at+i] = byte(v)
			v >>= 8
		}
	}
	grow(3, 2)                   // the record
	grow(recordHeaderLen+1, 3)   // the handshake
	grow(recordHeaderLen+4+c, 2) // the extensions
	return out
}

func TestReadClientHello(t *testing.T) {
	plain := clientHello(t, &tls.Config{ServerName: "API.Example.com"})
	// Many long ALPN names make a hello past one record's 16 KiB, which
	// crypto/tls splits over two records.
	var protos []string
	for i := 0; i < 80; i++ {
		protos = append(protos, strings.Repeat(string(rune('a'+i%26)), 250))
	}
	large := clientHello(t, &tls.Config{ServerName: "large.example.com", NextProtos: protos})
	if len(large) < 20000 {
		t.Fatalf("the large hello is %d bytes, want 20 KB or more", len(large))
	}
	noSNI := clientHello(t, &tls.Config{InsecureSkipVerify: true})
	ipSNI := clientHello(t, &tls.Config{ServerName: "127.0.0.1"})                          // crypto/tls sends no SNI for an IP
	huge := []byte{recordTypeHandshake, 3, 1, 0, 4, handshakeClientHelo, 0x01, 0x10, 0x00} // a hello of 69632 bytes
	http := []byte("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")

	tests := []struct {
		name    string
		in      []byte
		reader  func(io.Reader) io.Reader
		wantSNI string
		wantErr error // nil: no error
	}{
		{name: "plain", in: plain, wantSNI: "api.example.com"},
		{name: "a post-quantum hello is past 1 KB", in: plain, wantSNI: "api.example.com"},
		{name: "one byte per read, as TCP segments", in: plain, reader: iotest.OneByteReader, wantSNI: "api.example.com"},
		{name: "split over records of 50 bytes", in: reframe(t, plain, 50), wantErr: errSplitHello},
		{name: "split over records of 1 byte", in: reframe(t, plain, 1), wantErr: errSplitHello},
		{name: "20 KB over two records", in: large, wantErr: errSplitHello},
		{name: "20 KB one byte per read", in: large, reader: iotest.OneByteReader, wantErr: errSplitHello},
		{name: "a record version Go takes on a first record", in: append([]byte{recordTypeHandshake, 0, 0}, plain[3:]...), wantSNI: "api.example.com"},
		{name: "bytes after the hello in its record", in: withTrailing(plain, []byte{0x14, 0, 0, 1, 1}), wantErr: errBadHello},
		{name: "no SNI", in: noSNI, wantSNI: ""},
		{name: "an extension brig skips holding another SNI's shape", in: withExtension(t, plain, 0x3a3a, sniShape("other.example")), wantErr: errBadHello},
		{name: "no SNI, but an extension holding an SNI's shape", in: withExtension(t, noSNI, 0x3a3a, sniShape("other.example")), wantErr: errBadHello},
		{name: "an extension holding the SNI's own shape", in: withExtension(t, plain, 0x3a3a, sniShape("api.example.com")), wantSNI: "api.example.com"},
		{name: "IP server name", in: ipSNI, wantSNI: ""},
		{name: "not TLS", in: http, wantErr: errNotTLS},
		{name: "larger than its record", in: huge, wantErr: errSplitHello},
		{name: "truncated", in: plain[:len(plain)-10], wantErr: io.ErrUnexpectedEOF},
		{name: "empty", in: nil, wantErr: io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r io.Reader = bytes.NewReader(tt.in)
			if tt.reader != nil {
				r = tt.reader(r)
			}
			raw, sni, err := readClientHello(r)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got error %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if sni != tt.wantSNI {
				t.Errorf("got SNI %q, want %q", sni, tt.wantSNI)
			}
			if !bytes.Equal(raw, tt.in) {
				t.Errorf("got %d raw bytes, want the %d bytes read", len(raw), len(tt.in))
			}
		})
	}
	if len(plain) < 1000 {
		t.Errorf("crypto/tls's default hello is %d bytes, want a post-quantum one past 1 KB", len(plain))
	}
}

// TestReadClientHelloStops proves that the reader stops at the end of the
// hello: the bytes after it (early data, the next record) stay for the
// splice.
func TestReadClientHelloStops(t *testing.T) {
	hello := clientHello(t, &tls.Config{ServerName: "example.com"})
	next := []byte{23, 3, 3, 0, 2, 'h', 'i'}
	r := bytes.NewReader(append(append([]byte(nil), hello...), next...))
	raw, _, err := readClientHello(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != len(hello) || r.Len() != len(next) {
		t.Errorf("got %d bytes read and %d left, want %d and %d", len(raw), r.Len(), len(hello), len(next))
	}
}

func TestHelloServerName(t *testing.T) {
	// body builds a ClientHello body with the given extensions block.
	body := func(exts []byte) []byte {
		b := make([]byte, 2+32)
		b = append(b, 0)          // session id
		b = append(b, 0, 2, 0, 1) // one cipher suite
		b = append(b, 1, 0)       // null compression
		return append(b, exts...)
	}
	vec16 := func(b ...[]byte) []byte {
		var all []byte
		for _, x := range b {
			all = append(all, x...)
		}
		return append([]byte{byte(len(all) >> 8), byte(len(all))}, all...)
	}
	sni := func(names ...string) []byte {
		var list []byte
		for _, n := range names {
			list = append(list, 0)
			list = append(list, vec16([]byte(n))...)
		}
		return append([]byte{0, 0}, vec16(vec16(list))...)
	}
	tests := []struct {
		name    string
		body    []byte
		want    string
		wantErr bool
	}{
		{name: "no extensions", body: body(nil), want: ""},
		{name: "one name", body: body(vec16(sni("Example.COM."))), want: "example.com"},
		{name: "other extensions first", body: body(vec16([]byte{0, 16, 0, 0}, sni("a.example"))), want: "a.example"},
		{name: "two names", body: body(vec16(sni("a.example", "b.example"))), wantErr: true},
		{name: "two extensions", body: body(vec16(sni("a.example"), sni("b.example"))), wantErr: true},
		{name: "control character", body: body(vec16(sni("a\nexample"))), wantErr: true},
		{name: "space", body: body(vec16(sni("a example"))), wantErr: true},
		{name: "empty name", body: body(vec16(sni(""))), wantErr: true},
		{name: "extension overruns", body: body([]byte{0, 9, 0, 0, 0, 9}), wantErr: true},
		{name: "truncated", body: body(nil)[:20], wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := helloServerName(tt.body)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("got %q, %v, want %q, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
