package testutil

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// ServeUnix answers HTTP on a Unix socket of the test's own with h, as brig's
// service would (a fake of it), until the test ends, and returns the
// socket's path.
func ServeUnix(tb testing.TB, h http.HandlerFunc) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "brig-fake")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Close() })
	return socket
}
