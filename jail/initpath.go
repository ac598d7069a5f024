package jail

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/brig-sandbox/brig/jail/pid1"
)

// InitBinary is the lean init (cmd/brig-init, package pid1 alone), looked for
// next to the running executable: its start, paid once per sandbox, costs less
// CPU than re-executing the whole brig binary, whose package initialisation
// (cgroups, metrics, CLI, journal, HTTP) a sandbox's init never uses.
const InitBinary = "brig-init"

// DefaultInitPath is the init a sandbox runs when Config.InitPath is empty:
// brig-init next to this executable, when it is a regular file that only
// root can write and was built with this binary; otherwise this executable,
// re-executed, and why.
func DefaultInitPath() (path, why string) { return initPath(pid1.BuildStamp()) }

// initPath is DefaultInitPath for a binary whose build stamp is stamp.
func initPath(stamp string) (path, why string) {
	const self = "/proc/self/exe"
	if stamp == "" {
		return self, "this binary has no build stamp (build with make to use " + InitBinary + ")"
	}
	exe, err := os.Executable()
	if err != nil {
		return self, err.Error()
	}
	p := filepath.Join(filepath.Dir(exe), InitBinary)
	fi, err := os.Stat(p)
	if err != nil {
		return self, fmt.Sprintf("no %s next to %s", InitBinary, exe)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || fi.Mode().Perm()&0o022 != 0 || !ok || st.Uid != 0 {
		return self, fmt.Sprintf("%s is not a regular file owned by root that only root can write", p)
	}
	out, err := exec.Command(p, pid1.StampArg).Output()
	if got := string(bytes.TrimSpace(out)); err != nil || got != stamp {
		return self, fmt.Sprintf("%s is from another build (stamp %q, this binary's %q): rebuild both with make", p, got, stamp)
	}
	return p, ""
}
