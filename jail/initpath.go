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

// ReaperBinary is the reaper (jail/reaper) built as an executable of its own,
// without a C library, looked for next to the running executable: its start
// costs a tenth of this binary's, whose dynamic loading and C library start
// the reaper, run from a constructor, pays otherwise.
const ReaperBinary = "brig-reaper"

// DefaultInitPath is the init a sandbox runs when Config.InitPath is empty:
// brig-init next to this executable, when it is a regular file that only
// root can write and was built with this binary; otherwise this executable,
// re-executed, and why.
func DefaultInitPath() (path, why string) { return helperPath(InitBinary, pid1.BuildStamp()) }

// DefaultReaperPath is the reaper a zygote's sandbox runs when
// Config.ReaperPath is empty, chosen as DefaultInitPath chooses the init.
func DefaultReaperPath() (path, why string) { return helperPath(ReaperBinary, pid1.BuildStamp()) }

// helperPath is name next to this executable if it is root's, writable by
// root alone, and answers pid1.StampArg with stamp (this binary's); otherwise
// this executable, which can serve as either, and why not name.
func helperPath(name, stamp string) (path, why string) {
	const self = "/proc/self/exe"
	if stamp == "" {
		return self, "this binary has no build stamp (build with make to use " + name + ")"
	}
	exe, err := os.Executable()
	if err != nil {
		return self, err.Error()
	}
	p := filepath.Join(filepath.Dir(exe), name)
	fi, err := os.Stat(p)
	if err != nil {
		return self, fmt.Sprintf("no %s next to %s", name, exe)
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
