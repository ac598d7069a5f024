package jail

import (
	"slices"
	"strings"
	"testing"

	"github.com/brig-sandbox/brig/rootfs"
)

// TestRunSpecEnvOneValueEach: a name brig sets for a run (a package layer's
// PATH) replaces its own default rather than following it, so that the
// program's environment holds each name once; a request's reserved names
// stay out.
func TestRunSpecEnvOneValueEach(t *testing.T) {
	rs := runSpecOf(Spec{Language: rootfs.Python, Env: map[string]string{"A": "1", "PATH": "/evil"}},
		&rootfs.Root{Interpreter: "/usr/bin/python3"}, map[string]string{"PATH": "/opt/brig/python/bin:" + DefaultPath, "PYTHONPATH": "/opt/brig/python"})
	var paths []string
	for _, kv := range rs.Env {
		if strings.HasPrefix(kv, "PATH=") {
			paths = append(paths, kv)
		}
	}
	if !slices.Equal(paths, []string{"PATH=/opt/brig/python/bin:" + DefaultPath}) || !slices.Contains(rs.Env, "A=1") || !slices.Contains(rs.Env, "PYTHONPATH=/opt/brig/python") {
		t.Errorf("got %q, want the layer's PATH once, PYTHONPATH and the request's A", rs.Env)
	}
}
