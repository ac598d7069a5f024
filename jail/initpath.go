package jail

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// InitBinary is the lean init (cmd/brig-init), looked for next to the running
// executable: its start, paid once per sandbox, costs about 2 ms less CPU
// than re-executing the whole brig binary, whose package initialisation
// (metrics, CLI, journal, HTTP) a sandbox's init never uses.
const InitBinary = "brig-init"

// buildStamp is set, the same in brig and brig-init, by the Makefile's build
// (-ldflags -X): an init from another build may speak another protocol or
// build another sandbox, so it is used only when its stamp is this binary's.
var buildStamp string

// BuildStamp is what brig-init prints when asked for its stamp.
func BuildStamp() string { return buildStamp }

// StampArg asks brig-init for its build stamp.
const StampArg = "stamp"

// DefaultInitPath is the init a sandbox runs when Config.InitPath is empty:
// brig-init next to this executable, when it is a regular file that only
// root can write and was built with this binary; otherwise this executable,
// re-executed, and why.
func DefaultInitPath() (path, why string) {
	const self = "/proc/self/exe"
	if buildStamp == "" {
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
	out, err := exec.Command(p, StampArg).Output()
	if got := string(bytes.TrimSpace(out)); err != nil || got != buildStamp {
		return self, fmt.Sprintf("%s is from another build (stamp %q, this binary's %q): rebuild both with make", p, got, buildStamp)
	}
	return p, ""
}
