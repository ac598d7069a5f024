package jail

import (
	"fmt"
	"syscall"

	"github.com/brig-sandbox/brig/jail/pid1"
	"github.com/brig-sandbox/brig/jail/reaper"
	"github.com/brig-sandbox/brig/seccomp"
)

// A sandbox's pid 1 is a reaper (package jail/reaper: a few system calls in
// C, started from this binary before its Go runtime, or from brig-reaper)
// where it would otherwise be a Go init: a zygote's sandbox, whose init only
// builds the root, hardens itself and reaps, and a cold one or a warm
// JavaScript one, whose reaper also starts the program as the Go init does.
// The reaper builds the root itself, first thing, with the init's steps under
// their names (pid1's rootSteps; its build_root), in the namespaces it made
// (all but the pid namespace it was cloned into, reaperCloneFlags): it is
// their pid 1, so it mounts its own proc, and it is host root until it
// hardens itself, so the root is made and owned exactly as an init makes it.
// The sandbox is the same: the same namespaces, mounts, hostname and cgroup, and a pid 1 with the init's unprivileged identity, no
// capability, no_new_privs and a filter (a far narrower one: seccomp.Reaper).
// What a run saves is a Go init's start, its threads and its exit.

// The descriptor a reaper's filter lets it read is the one it reads.
var _ = [1]struct{}{}[reaper.ReportFD-seccomp.ReaperReportFD]

// reaperOff makes NewLauncher give every sandbox a Go init; for the tests of
// that path alone.
var reaperOff = false

// programReaperOff gives cold and warm JavaScript sandboxes a Go init where a
// reaper would start their program; for the tests of the Go init's own start.
var programReaperOff = false

// newReaperConfig is the run-independent part of a reaper's config, or nil
// and why sandboxes keep their Go init.
func newReaperConfig() (*reaper.Config, string, error) {
	if reaperOff {
		return nil, "turned off", nil
	}
	prog, err := seccomp.Compile(seccomp.Reaper())
	if err != nil {
		return nil, "", fmt.Errorf("compiling the reaper's seccomp filter: %w", err)
	}
	last, err := pid1.LastCap()
	if err != nil {
		return nil, "", fmt.Errorf("reading the last capability: %w", err)
	}
	return &reaper.Config{LastCap: last, Filter: prog}, "", nil
}

// spawnRequest asks the spawner's thread for a slot: an init, or a reaper
// (which starts the program when program is set), given the interpreters'
// copies (pid1.CopiesFD) when copies is set.
type spawnRequest struct {
	reply                   chan spawned
	reaper, program, copies bool
}

// startReaper sends a freshly cloned reaper (in its cgroups by now) its
// config, with the root it builds (reaper.RootConfig). Its "ready" follows on
// the status pipe, as an init's does (waitReady), with its scratch tmpfs's
// context. With program, it is a cold sandbox's, which then waits on its spec
// pipe for the run (reaper.MarshalRun) and starts the program as the Go init
// does, from the same PrepareSpec's ids, filters and rlimits; a warm one's
// first starts the interpreter that the config ends with.
func (l *Launcher) startReaper(s *slot, prep *pid1.PrepareSpec, program bool) error {
	cfg := *l.reaper
	cfg.UID, cfg.GID = s.ids.InitUID, s.ids.InitGID
	proc := pid1.ProcPaths()
	cfg.Root = &reaper.RootConfig{
		Scratch: prep.Scratch, Lower: prep.Lower, Empty: prep.Empty, Hostname: prep.Hostname, WarmBoot: prep.WarmBoot,
		ScratchBytes: prep.ScratchBytes, HostUID: prep.HostUID, HostGID: prep.HostGID, View: prep.View, Binds: prep.Binds,
		Copies:    prep.Copies,
		ProcFiles: proc.Files, ProcDirs: proc.Dirs, ProcReadOnly: proc.ReadOnly,
	}
	if program {
		cfg.Program = &reaper.ProgramConfig{
			UID: prep.UID, GID: prep.GID, HostUID: prep.HostUID, HostGID: prep.HostGID,
			SpawnFilter: prep.SpawnSeccomp, Filter: prep.Seccomp, Rlimits: prep.Rlimits,
			WarmArgv: prep.Warm, WarmEnv: prep.WarmEnviron,
		}
	}
	b, err := cfg.Marshal()
	if err != nil {
		return err
	}
	if _, err := s.spec.Write(b); err != nil {
		return fmt.Errorf("sending the reaper its config: %w", err)
	}
	if !program {
		// The reaper reads nothing more; EOF on its spec pipe changes nothing.
		s.spec.Close()
		s.spec = nil
	}
	return nil
}

// withErrnoText adds the text of the reaper's bare "errno N" (it has no
// strerror), so that its errors read as an init's do.
func withErrnoText(msg string) string {
	var n int
	if _, err := fmt.Sscanf(msg, "errno %d", &n); err != nil || fmt.Sprintf("errno %d", n) != msg {
		return msg
	}
	return fmt.Sprintf("%s (%v)", msg, syscall.Errno(n))
}
