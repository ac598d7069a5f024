package egress

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/iotest"
	"time"
)

func TestReadHeadAndBody(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		wantHost string
		wantBody string // what forwardBody copies
		wantRest string // what stays unread: the next request
		wantErr  bool
	}{
		{name: "GET", in: "GET / HTTP/1.1\r\nHost: a.example\r\n\r\nGET /2 HTTP/1.1\r\n", wantHost: "a.example", wantRest: "GET /2 HTTP/1.1\r\n"},
		{name: "bare LF", in: "GET / HTTP/1.0\nHost: a.example\n\n", wantHost: "a.example"},
		{name: "leading empty line", in: "\r\nGET / HTTP/1.1\r\nHost: a.example\r\n\r\n", wantHost: "a.example"},
		{name: "content length", in: "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5\r\n\r\nhelloGET", wantHost: "a.example", wantBody: "hello", wantRest: "GET"},
		{name: "chunked", in: "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\nGET",
			wantHost: "a.example", wantBody: "5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\n", wantRest: "GET"},
		{name: "same content length twice", in: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", wantHost: "a", wantBody: "x"},
		{name: "two content lengths", in: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", wantErr: true},
		{name: "content length and chunked", in: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", wantErr: true},
		{name: "other transfer coding", in: "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", wantErr: true},
		{name: "signed chunk size", in: "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n+5\r\nhello\r\n0\r\n\r\n", wantErr: true},
		{name: "chunk size in another base", in: "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n", wantErr: true},
		{name: "a request line as a trailer", in: "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nGET /trail HTTP/1.1\r\nHost: b\r\n\r\n", wantErr: true},
		{name: "a Host trailer", in: "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nHost: b\r\n\r\n", wantErr: true},
		{name: "signed content length", in: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n", wantErr: true},
		{name: "two Hosts", in: "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", wantErr: true},
		{name: "folded line", in: "GET / HTTP/1.1\r\nHost: a\r\n b\r\n\r\n", wantErr: true},
		{name: "space before colon", in: "GET / HTTP/1.1\r\nHost : a\r\n\r\n", wantErr: true},
		{name: "HTTP/2 preface", in: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", wantErr: true},
		{name: "CR inside", in: "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", wantErr: true},
		{name: "too long", in: "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", maxHeadBytes) + "\r\n\r\n", wantErr: true},
		{name: "not HTTP", in: "\x16\x03\x01\x02\x00\r\n\r\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br := bufio.NewReaderSize(strings.NewReader(tt.in), 16)
			h, err := readHead(br)
			if err == nil {
				var body bytes.Buffer
				err = forwardBody(&body, br, h)
				if err == nil {
					if h.host != tt.wantHost || body.String() != tt.wantBody {
						t.Errorf("got Host %q body %q, want %q %q", h.host, body.String(), tt.wantHost, tt.wantBody)
					}
					if rest, _ := io.ReadAll(br); string(rest) != tt.wantRest {
						t.Errorf("got %q left unread, want %q", rest, tt.wantRest)
					}
				}
			}
			if (err != nil) != tt.wantErr {
				t.Errorf("got error %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

func TestRewrite(t *testing.T) {
	in := "GET http://a.example:8080/p?q=1 HTTP/1.1\r\nHost: evil.example\r\nProxy-Authorization: x\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\nAccept: */*\r\n\r\n"
	h, err := readHead(bufio.NewReader(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	authority, origin, err := absoluteTarget(h.target)
	if err != nil {
		t.Fatal(err)
	}
	got := string(h.rewrite(origin, authority))
	want := "GET /p?q=1 HTTP/1.1\r\nHost: a.example:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, _, err := absoluteTarget("https://a.example/"); err == nil {
		t.Errorf("absoluteTarget(https://...): got no error, want one naming CONNECT")
	}
	if _, _, err := absoluteTarget("/p"); err == nil {
		t.Errorf("absoluteTarget(/p): got no error, want one")
	}
}

func TestHostPort(t *testing.T) {
	tests := []struct {
		in       string
		wantHost string
		wantPort int
		wantErr  bool
	}{
		{in: "A.example.", wantHost: "a.example", wantPort: 80},
		{in: "a.example:443", wantHost: "a.example", wantPort: 443},
		{in: "[::1]:80", wantHost: "::1", wantPort: 80},
		{in: "[::ffff:7f00:1]", wantHost: "::ffff:7f00:1", wantPort: 80},
		{in: "[a.example]", wantErr: true},
		{in: "[a.example]:9000", wantErr: true},
		{in: "[127.0.0.1]", wantErr: true},
		{in: "a.example:0", wantErr: true},
		{in: "a.example:+443", wantErr: true},
		{in: "a.example:0443", wantErr: true},
		{in: "a.example:-1", wantErr: true},
		{in: "a.example: 443", wantErr: true},
		{in: "a.example..", wantErr: true},
		{in: "a.example:99999", wantErr: true},
		{in: "a example", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			host, port, err := hostPort(tt.in, 80)
			if (err != nil) != tt.wantErr || host != tt.wantHost || port != tt.wantPort {
				t.Errorf("got %q %d %v, want %q %d error %v", host, port, err, tt.wantHost, tt.wantPort, tt.wantErr)
			}
		})
	}
}

func TestMeteredWriterAndBudget(t *testing.T) {
	l := newLimits(1, 1, 10)
	var out bytes.Buffer
	mw := meteredWriter{&out, &l.sent, new(atomic.Int64)}
	if n, err := mw.Write([]byte("12345678")); n != 8 || err != nil {
		t.Fatalf("got %d, %v, want 8, nil", n, err)
	}
	if n, err := mw.Write([]byte("abcd")); n != 2 || !errors.Is(err, errBytesLimit) {
		t.Errorf("got %d, %v, want 2, errBytesLimit", n, err)
	}
	if got := out.String(); got != "12345678ab" {
		t.Errorf("got %q written, want %q", got, "12345678ab")
	}
	if ok, _ := l.admit(); !ok {
		t.Fatalf("the first connection was refused")
	}
	if ok, rule := l.admit(); ok || rule != ruleTooMany {
		t.Errorf("got %v %q for a second connection at once, want false %q", ok, rule, ruleTooMany)
	}
	l.release()
	if ok, rule := l.admit(); ok || rule != ruleTooFast {
		t.Errorf("got %v %q past the rate, want false %q", ok, rule, ruleTooFast)
	}
}

func TestRelayHeads(t *testing.T) {
	long := strings.Repeat("y", 5000) // longer than the test's 4 KiB buffer
	for _, tt := range []struct {
		name, in string
		out      string // what the client is sent
		rest     string // what is left for the copy that follows
	}{
		{"closing", "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nX: y\r\n\r\nbody",
			"HTTP/1.1 200 OK\r\nX: y\r\nConnection: close\r\n\r\n", "body"},
		{"bare line ends, case", "HTTP/1.0 404 Not Found\nCONNECTION: Keep-Alive\nproxy-connection : x\n\nbody",
			"HTTP/1.0 404 Not Found\nConnection: close\r\n\n", "body"},
		{"no headers", "HTTP/1.1 204 No Content\r\n\r\n", "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n", ""},
		{"interim heads as they came, then the final", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\nConnection: keep-alive\r\n\r\nHTTP/1.1 200 OK\r\n\r\nbody",
			"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\nConnection: keep-alive\r\n\r\nHTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", "body"},
		{"switching protocols is final, as it came", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\nraw",
			"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n", "raw"},
		{"a continuation goes where its field went", "HTTP/1.1 200 OK\r\nConnection: keep-alive,\r\n\tfoo\r\nX: a\r\n b\r\n\r\n",
			"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nConnection: close\r\n\r\n", ""},
		{"lines longer than the buffer", "HTTP/1.1 200 OK\r\nX: " + long + "\r\nConnection: " + long + "\r\nKeep-Alive: 5\r\n\r\nbody",
			"HTTP/1.1 200 OK\r\nX: " + long + "\r\nConnection: close\r\n\r\n", "body"},
		{"cut short ends the answer there", "HTTP/1.1 200 OK\r\nX: y\r\nConnection: keep", "HTTP/1.1 200 OK\r\nX: y\r\n", ""},
		{"not HTTP", "SSH-2.0-x\r\n\r\n", "", "SSH-2.0-x\r\n\r\n"},
		{"no status", "HTTP/1.1 OK\r\n\r\n", "", "HTTP/1.1 OK\r\n\r\n"},
		{"a status line longer than the buffer", "HTTP/1.1 200 " + long + "\r\n\r\n", "", "HTTP/1.1 200 " + long + "\r\n\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			br := bufio.NewReaderSize(strings.NewReader(tt.in), 4096)
			var out bytes.Buffer
			taken := 0
			err := relayHeads(bufio.NewWriterSize(&out, 4096), br, func(n int) error { taken += n; return nil })
			rest, _ := io.ReadAll(br)
			if err != nil || out.String() != tt.out || string(rest) != tt.rest {
				t.Errorf("got %v %q, left %q; want %q, left %q", err, out.String(), rest, tt.out, tt.rest)
			}
			if want := len(tt.in) - len(tt.rest); taken != want {
				t.Errorf("took %d bytes, want the %d that were read", taken, want)
			}
		})
	}
	t.Run("another protocol's answer goes at once, without a line end", func(t *testing.T) {
		pr, pw := io.Pipe()
		defer pw.Close()
		go pw.Write([]byte("\x00\x01binary")) // and nothing more: the upstream waits
		done := make(chan error, 1)
		br := bufio.NewReader(pr)
		go func() { done <- relayHeads(bufio.NewWriter(io.Discard), br, func(int) error { return nil }) }()
		select {
		case err := <-done:
			if err != nil || br.Buffered() != len("\x00\x01binary") {
				t.Errorf("got %v with %d bytes buffered, want nil and the bytes left to forward", err, br.Buffered())
			}
		case <-time.After(5 * time.Second):
			t.Fatal("relayHeads waited for a line end that no HTTP answer lacks")
		}
	})
	t.Run("a reset before the status line is reported", func(t *testing.T) {
		r := io.MultiReader(strings.NewReader("HTT"), iotest.ErrReader(syscall.ECONNRESET))
		if err := relayHeads(bufio.NewWriter(io.Discard), bufio.NewReader(r), func(int) error { return nil }); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("got %v, want the reset", err)
		}
	})
	t.Run("byte limit", func(t *testing.T) {
		in := "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("y", 100) + "\r\n\r\n"
		left := 50
		err := relayHeads(bufio.NewWriter(io.Discard), bufio.NewReader(strings.NewReader(in)), func(n int) error {
			if n > left {
				return errBytesLimit
			}
			left -= n
			return nil
		})
		if !errors.Is(err, errBytesLimit) {
			t.Errorf("got %v, want the byte limit", err)
		}
	})
}
