package jail

import (
	"strings"
	"testing"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/rootfs"
	"github.com/brig-sandbox/brig/rootfs/rootfstest"
)

// TestBuiltRootfsHasOnlyItsLanguage runs Python on a debootstrapped Python rootfs:
// the program works, and no node, no host /usr and no host /etc are visible.
func TestBuiltRootfsHasOnlyItsLanguage(t *testing.T) {
	rootfstest.Ensure(t, rootfs.Python)
	built, err := rootfs.OpenBuilt(map[rootfs.Language]string{rootfs.Python: rootfstest.Dir(rootfs.Python)})
	if err != nil {
		t.Fatal(err)
	}
	l := newTestLauncherWith(t, t.TempDir(), built, 0)
	res := run(t, l, rootfs.Python, `
import os, shutil, sys
print("node", shutil.which("node"), os.path.exists("/usr/bin/node"), os.path.exists("/usr/local/go"))
print("passwd", open("/etc/passwd").read().count("\n"))
print("version", sys.version.split()[0])
`)
	if res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("got outcome %s (%s, stderr %q), want succeeded", res.Outcome, res.Message, res.Stderr)
	}
	for _, want := range []string{"node None False False\n", "passwd 3\n", "version 3."} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("got stdout %q, want it to contain %q", res.Stdout, want)
		}
	}
}
