package registrytest

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// trapProxy is an HTTP proxy on loopback that forwards nothing. The tests name it as
// the package managers' proxy for every host but 127.0.0.1, so a request meant for any
// other host lands here instead of leaving the machine, and the test fails on it.
type trapProxy struct {
	srv *httptest.Server

	// mu guards hits, appended by the server's handler goroutines.
	mu   sync.Mutex
	hits []string
}

func newTrapProxy(t *testing.T) *trapProxy {
	p := &trapProxy{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.hits = append(p.hits, r.Method+" "+r.Host+r.URL.Path)
		p.mu.Unlock()
		http.Error(w, "registrytest: no host but 127.0.0.1 may be reached", http.StatusForbidden)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// Hits are the requests the trap refused, as "METHOD host/path".
func (p *trapProxy) Hits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.hits...)
}

// assertUnused fails t if anything was sent to the trap.
func (p *trapProxy) assertUnused(t *testing.T) {
	if hits := p.Hits(); len(hits) > 0 {
		t.Errorf("got requests for hosts other than the stand-in: %q, want none", hits)
	}
}

// env is the proxy settings, in every spelling pip and npm read, that send all but
// loopback to the trap.
func (p *trapProxy) env() []string {
	u := p.srv.URL
	return []string{
		"http_proxy=" + u, "https_proxy=" + u, "HTTP_PROXY=" + u, "HTTPS_PROXY=" + u,
		"no_proxy=127.0.0.1", "NO_PROXY=127.0.0.1",
	}
}

// hostOf is the IP of a "host:port", for the assertion that the stand-ins listen on
// loopback.
func hostOf(t *testing.T, hostport string) net.IP {
	t.Helper()
	h, _, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatalf("splitting %q: %v", hostport, err)
	}
	return net.ParseIP(h)
}

// TestTrapCatchesOtherHosts proves the guard the pip and npm tests rely on: the package
// managers send a request for any host but 127.0.0.1 to the trap. The stand-in is
// reached as "localhost", a name the managers resolve to loopback too, so that were
// the trap ignored nothing would leave the machine and the test would still fail.
func TestTrapCatchesOtherHosts(t *testing.T) {
	x := NewPyIndex(t, PyPackage{Name: "pkg-a", Version: "1.0", Files: map[string]string{"pkg_a/__init__.py": ""}})
	r := NewNpmRegistry(t, NpmPackage{Name: "only", Version: "1.0.0", Files: map[string]string{"index.js": ""}})
	localhost := func(u string) string { return strings.Replace(u, "127.0.0.1", "localhost", 1) }
	tests := []struct {
		name    string
		require func(*testing.T)
		run     func(t *testing.T, trap *trapProxy) (string, error)
		stand   *server
	}{
		{
			name:    "pip",
			require: requirePip,
			run: func(t *testing.T, trap *trapProxy) (string, error) {
				return pipVia(t, trap, localhost(x.URL()), "download", "--no-cache-dir", "--no-deps", "--only-binary=:all:",
					"--index-url", localhost(x.URL()), "-d", t.TempDir(), "pkg-a==1.0")
			},
			stand: &x.server,
		},
		{
			name:    "npm",
			require: requireNpm,
			run: func(t *testing.T, trap *trapProxy) (string, error) {
				return npm(t, localhost(r.URL()), trap, "install", "--ignore-scripts", "--prefix", t.TempDir(), "only")
			},
			stand: &r.server,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.require(t)
			trap := newTrapProxy(t)
			before := len(tt.stand.Requests())
			out, err := tt.run(t, trap)
			if err == nil {
				t.Errorf("got the install through the trap succeeding, want it to fail\n%s", out)
			}
			if len(trap.Hits()) == 0 {
				t.Errorf("got no request at the trap, want the one meant for localhost\n%s", out)
			}
			if got := tt.stand.Requests()[before:]; len(got) > 0 {
				t.Errorf("got %q at the stand-in, want nothing past the trap", got)
			}
		})
	}
}
