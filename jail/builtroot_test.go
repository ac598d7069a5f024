package jail

import (
	"strings"
	"testing"

	"github.com/brig-sandbox/brig/rootfs"
	"github.com/brig-sandbox/brig/rootfs/rootfstest"
)

// TestBuiltRootfsHasOnlyItsLanguage runs each language on its debootstrapped
// rootfs: the program works, and the other interpreter, the host's /usr and the
// host's /etc are not there.
func TestBuiltRootfsHasOnlyItsLanguage(t *testing.T) {
	for _, tc := range []struct {
		lang rootfs.Language
		code string
		want []string
	}{
		{rootfs.Python, `
import os, shutil, sys
print("other", shutil.which("node"), os.path.exists("/usr/bin/node"), os.path.exists("/usr/local/go"))
print("passwd", open("/etc/passwd").read().count("\n"))
print("version", sys.version.split()[0])
`, []string{"other None False False\n", "passwd 3\n", "version 3."}},
		{rootfs.JavaScript, `
const fs = require("fs");
console.log("other", fs.existsSync("/usr/bin/python3"), fs.existsSync("/usr/local/go"));
console.log("passwd", fs.readFileSync("/etc/passwd", "utf8").split("\n").length - 1);
console.log("version", process.version);
`, []string{"other false false\n", "passwd 3\n", "version v"}},
	} {
		t.Run(tc.lang.String(), func(t *testing.T) {
			rootfstest.Ensure(t, tc.lang)
			built, err := rootfs.OpenBuilt(map[rootfs.Language]string{tc.lang: rootfstest.Dir(tc.lang)})
			if err != nil {
				t.Fatal(err)
			}
			l := newTestLauncherWith(t, t.TempDir(), built, 0)
			res := run(t, l, tc.lang, tc.code)
			if !res.Succeeded() {
				t.Fatalf("got outcome %s (%s, stderr %q), want succeeded", res.End, res.Message, res.Stderr)
			}
			for _, want := range tc.want {
				if !strings.Contains(res.Stdout, want) {
					t.Errorf("got stdout %q, want it to contain %q", res.Stdout, want)
				}
			}
		})
	}
}
