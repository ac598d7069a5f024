// Package registrytest owns the local package-registry stand-ins that brig's package
// tests install from: a PEP 503 simple index for pip (NewPyIndex) and an npm registry
// (NewNpmRegistry). Each is an httptest server on loopback that serves packages the
// test describes, built in memory, so that the real pip and npm can install them with
// no network beyond 127.0.0.1. Each records the paths it was asked for, so a test can
// prove what was fetched and what was not.
//
// Typical use is in ExampleNewPyIndex and ExampleNewNpmRegistry: a test describes the
// packages, starts the stand-in, and passes its URL to pip's --index-url or npm's
// --registry.
//
// Neither stand-in names any real registry: the tests hand their URL to the package
// managers on the command line or in the managers' own configuration.
package registrytest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fixedTime is the modification time of every archive entry, so that an archive's
// bytes, and hence its digests, depend only on its content. Zip cannot encode times
// before 1980.
var fixedTime = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// server is the part both stand-ins share: a loopback httptest server that records
// every path it is asked for before the stand-in's handler answers.
type server struct {
	srv *httptest.Server

	// mu guards requests, appended by the server's handler goroutines.
	mu       sync.Mutex
	requests []string
}

// start serves h on 127.0.0.1 (httptest's default listener) until t's cleanup.
func (s *server) start(t testing.TB, h http.Handler) {
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r.URL.EscapedPath())
		s.mu.Unlock()
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "only GET and HEAD are served", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.srv.Close)
}

// Host is the server's "127.0.0.1:PORT", for settings such as pip's --trusted-host.
func (s *server) Host() string { return strings.TrimPrefix(s.srv.URL, "http://") }

// Requests returns the URL paths asked of the server so far, escaped as the client
// sent them and without the query ("/@scope%2fname" is npm's request for a scoped
// packument), in the order they arrived, including those answered with an error.
func (s *server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

// baseURL is the scheme and host the client used to reach the server, so that links
// the server writes (npm's tarball URLs) lead back to it even through another address,
// such as a port forwarded into a sandbox.
func baseURL(r *http.Request) string {
	return "http://" + r.Host
}
