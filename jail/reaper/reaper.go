// Package reaper is the pid 1 of a sandbox in place of a Go init (jail's
// rootbuild.go), so that the sandbox does not pay a Go init's start, threads
// and exit. It builds the sandbox's root itself, first thing, with the init's
// steps (Config.Root; build_root in reaper.c). In a cold sandbox
// (Config.Program) it also starts the run's program, as the Go init does,
// from a run frame (MarshalRun) it reads after "ready", and hardens itself
// while the program's process waits to exec; it then waits for the program and reports its exit ("started" and
// "exit", pid1.Message) instead of only reaping. It is a few system calls in
// C (reaper.c), made without a C library, built two ways: by make into
// bin/brig-reaper, a static executable of about 18 kB
// (jail.DefaultReaperPath); and into every binary that links this package,
// brig and the test binaries, whose constructor runs it before their Go
// runtime starts when they are started as it.
//
// Its other jobs are those of pid 1: it holds the sandbox's namespaces, which
// the zygote's child joins, and it reaps the orphans the program leaves it.
// The supervisor starts it as `<binary> reaper` in a fresh pid namespace,
// moves it into the run's cgroups and then writes its Config on descriptor 3.
// It makes the mount, network, IPC and UTS namespaces first, before it reads
// the Config (their kernel work is then its own, not the supervisor's), then
// its cgroup namespace once it has the Config, builds the root, goes back to
// nice 0, drops to the init's unprivileged identity with every capability set
// empty, re-arms its parent-death signal, sets no_new_privs, loads the Config's filter
// (seccomp.Reaper: what it does from then on, nothing else), says "ready" on
// descriptor 4 as the Go init does (pid1.Message), closes every other
// descriptor but its scratch tmpfs's context (ScratchFD) and waits for
// SIGCHLD. The status pipe stays open until it dies, which is how the
// supervisor learns that it did. Meanwhile it takes a run's backstop
// (ArmBackstop): past the run's time limit and a margin it exits, and the
// sandbox with it, whether or not its supervisor is there to enforce the
// limit. An error is an "error" message (its errno's
// number: there is no strerror without a C library) and exit status 1; EOF
// before the Config, exit status 0 (the sandbox was discarded). Only a
// process that is pid 1 and has exactly the argument Arg is taken over.
package reaper

/*
#cgo CFLAGS: -O2 -Wall
#include "reaper.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/brig-sandbox/brig/jail/pid1"
	"github.com/brig-sandbox/brig/seccomp/bpf"
)

// Arg is the reaper's one argument (argv[1]).
const Arg = C.REAPER_ARG

// ReportFD is where a cold sandbox's reaper reads its program's report of
// its exec, the one descriptor its filter lets it read once hardened
// (seccomp.ReaperReportFD).
const ReportFD = C.REAPER_REPORT_FD

// Its descriptors are the Go init's.
const (
	SpecFD   = C.REAPER_SPEC_FD
	StatusFD = C.REAPER_STATUS_FD
)

var _ = [1]struct{}{}[SpecFD-pid1.SpecFD+StatusFD-pid1.StatusFD+C.REAPER_COPIES_FD-pid1.CopiesFD] // the same numbers

// Config is what the reaper reads before it hardens itself.
type Config struct {
	// UID and GID are the init's host ids (runIDs.InitUID and InitGID).
	UID, GID int
	// LastCap is the highest capability the kernel knows (pid1.LastCap).
	LastCap int
	// Filter is the reaper's own seccomp filter.
	Filter bpf.Program
	// Program, when set, makes it a cold sandbox's pid 1, which starts the
	// run's program (MarshalRun), hardening itself before the exec.
	Program *ProgramConfig
	// Root is the root it builds, first thing (as pid1's rootSteps).
	// Required.
	Root *RootConfig
}

// RootConfig is what the reaper builds its sandbox's root from: the fields
// of pid1.PrepareSpec of the same names, and the proc paths that this kernel
// has of pid1's masked and read-only lists (pid1.ProcPaths).
type RootConfig struct {
	Scratch, Lower, Empty, Hostname, WarmBoot string
	ScratchBytes                              int64
	HostUID, HostGID                          int
	View                                      *pid1.View
	Binds                                     []pid1.Bind
	Copies                                    []pid1.Copy
	ProcFiles, ProcDirs, ProcReadOnly         []string
}

// ScratchFD is the reaper's descriptor of its scratch tmpfs's
// reconfiguration context, which it says in "ready" as a Go init does.
const ScratchFD = C.REAPER_SCRATCH_FD

// MountNSFD is where the supervisor passes a reaper the mount namespace it
// copies for its sandbox's (optional): entered and closed first thing.
const MountNSFD = C.REAPER_MNTNS_FD

// copiesFiles and copiesEmpty are the folders of the copies' tmpfs the
// reaper's overlay takes as layers: pid1.CopiesFiles and CopiesEmpty
// (TestRootConfig).
const copiesFiles, copiesEmpty = C.REAPER_COPIES_FILES, C.REAPER_COPIES_EMPTY

// scratchBytesPerInode is the reaper's pid1.ScratchBytesPerInode.
const scratchBytesPerInode = C.REAPER_SCRATCH_BYTES_PER_INODE

// warmBootPath is where the reaper writes a warm sandbox's bootstrap:
// pid1.WarmBootPath (TestRootConfig).
const warmBootPath = C.REAPER_WARM_BOOT

// warmFD is the descriptor of a warm interpreter's socket: pid1.WarmFD
// (TestRootConfig).
const warmFD = C.REAPER_WARM_FD

func (r *RootConfig) strings() ([]byte, error) {
	if len(r.Binds) > C.REAPER_MAX_BINDS || len(r.ProcFiles) > C.REAPER_MAX_PROC || len(r.ProcDirs) > C.REAPER_MAX_PROC ||
		len(r.ProcReadOnly) > C.REAPER_MAX_PROC || len(r.Copies) > C.REAPER_MAX_COPIES {
		return nil, fmt.Errorf("a root of %d binds, %d, %d and %d proc paths and %d copies (at most %d, %d and %d)",
			len(r.Binds), len(r.ProcFiles), len(r.ProcDirs), len(r.ProcReadOnly), len(r.Copies),
			C.REAPER_MAX_BINDS, C.REAPER_MAX_PROC, C.REAPER_MAX_COPIES)
	}
	if r.Scratch == "" || r.Lower == "" || r.Empty == "" || r.Hostname == "" || r.ScratchBytes <= 0 || r.HostUID <= 0 || r.HostGID <= 0 {
		return nil, fmt.Errorf("a root without its scratch, lower or empty directory, hostname, scratch size or owner: %+v", *r)
	}
	strs := []string{r.Scratch, r.Lower, r.Empty, r.Hostname, r.WarmBoot, "", "", ""}
	if v := r.View; v != nil {
		for _, p := range []string{"lower" + v.Target, v.Source} {
			if err := pid1.CheckLayerPath(p); err != nil {
				return nil, fmt.Errorf("a host folder's view: %w", err)
			}
		}
		if v.Source == "" || !filepath.IsAbs(v.Target) || v.Dir == "" || strings.Contains(v.Dir, "/") {
			return nil, fmt.Errorf("a view without its host folder, target or shown folder: %+v", *v)
		}
		strs[5], strs[6], strs[7] = v.Source, v.Target, v.Dir
	}
	for _, b := range r.Binds {
		if err := pid1.CheckLayerPath(b.Source); err != nil {
			return nil, fmt.Errorf("a host folder's view: %w", err)
		}
		strs = append(strs, b.Source, b.Target)
	}
	if err := pid1.CheckLayerPath(r.Empty); err != nil {
		return nil, fmt.Errorf("the views' empty layer: %w", err)
	}
	strs = slices.Concat(strs, r.ProcFiles, r.ProcDirs, r.ProcReadOnly)
	for _, c := range r.Copies {
		if c.Name == "" || strings.Contains(c.Name, "/") || !filepath.IsAbs(c.Target) {
			return nil, fmt.Errorf("an interpreter's copy without its name or target: %+v", c)
		}
		strs = append(strs, c.Name, c.Target)
	}
	var b []byte
	for _, s := range strs {
		if strings.IndexByte(s, 0) >= 0 {
			return nil, fmt.Errorf("a root's path or string with a NUL byte")
		}
		b = append(append(b, s...), 0)
	}
	if len(b) > C.REAPER_MAX_ROOT {
		return nil, fmt.Errorf("a root of %d bytes (at most %d)", len(b), C.REAPER_MAX_ROOT)
	}
	return b, nil
}

// ProgramConfig is what a cold sandbox's reaper needs to start the run's
// program as the Go init does (pid1.PrepareSpec's fields of the same names).
type ProgramConfig struct {
	UID, GID         int // inside the program's user namespace
	HostUID, HostGID int // what they map to
	// SpawnFilter is the reaper's filter from its "ready" until it hardens
	// itself, beneath the program's; Filter the program's own. Both as
	// struct sock_filter[] (bpf.Program.Marshal), as the Go init gets them.
	SpawnFilter, Filter []byte
	Rlimits             []pid1.Rlimit
	// WarmArgv and WarmEnv, for a warm sandbox (pid1.PrepareSpec's Warm and
	// WarmEnviron), are the interpreter it starts before it says "ready",
	// which waits for its run's environment on its descriptor 3
	// (pid1.WarmFD); nil for a cold one. The config gives their sizes; the
	// strings follow the root's, and the reaper reads them once the root is
	// built.
	WarmArgv, WarmEnv []string
}

// Marshal encodes c as the reaper reads it: struct reaper_config, then the
// filters' instructions and the rlimits, little-endian as on every
// architecture brig runs on, then the root's strings and a warm sandbox's
// interpreter's argv and envp.
func (c Config) Marshal() ([]byte, error) {
	if n := len(c.Filter); n == 0 || n > C.REAPER_MAX_FILTER {
		return nil, fmt.Errorf("a reaper filter of %d instructions (1 to %d)", n, C.REAPER_MAX_FILTER)
	}
	if c.UID <= 0 || c.GID <= 0 || c.LastCap < 0 {
		return nil, fmt.Errorf("reaper ids %d:%d, last capability %d: the init's ids are never root's", c.UID, c.GID, c.LastCap)
	}
	p, mode := c.Program, C.REAPER_MODE_REAP
	if p == nil {
		p = &ProgramConfig{}
	} else {
		mode = C.REAPER_MODE_PROGRAM
		for _, f := range [][]byte{p.SpawnFilter, p.Filter} {
			if n := len(f) / 8; n == 0 || n > C.REAPER_MAX_FILTER || len(f)%8 != 0 {
				return nil, fmt.Errorf("a program's filter of %d bytes (1 to %d instructions of 8)", len(f), C.REAPER_MAX_FILTER)
			}
		}
		if len(p.Rlimits) > C.REAPER_MAX_RLIMITS {
			return nil, fmt.Errorf("%d rlimits (at most %d)", len(p.Rlimits), C.REAPER_MAX_RLIMITS)
		}
		if p.HostUID <= 0 || p.HostGID <= 0 {
			return nil, fmt.Errorf("program host ids %d:%d: a run's ids are never root's", p.HostUID, p.HostGID)
		}
	}
	warm, err := cStrings(p.WarmArgv, p.WarmEnv)
	if err != nil {
		return nil, err
	}
	if c.Root == nil {
		return nil, fmt.Errorf("a reaper config without its root")
	}
	root, err := c.Root.strings()
	if err != nil {
		return nil, err
	}
	rc := c.Root
	b := make([]byte, 0, C.sizeof_struct_reaper_config+8*len(c.Filter)+len(p.SpawnFilter)+len(p.Filter)+24*len(p.Rlimits)+len(root))
	for _, v := range []int{C.REAPER_VERSION, c.UID, c.GID, c.LastCap, len(c.Filter), mode,
		p.UID, p.GID, p.HostUID, p.HostGID, len(p.SpawnFilter) / 8, len(p.Filter) / 8, len(p.Rlimits),
		len(warm), len(p.WarmArgv), len(p.WarmEnv),
		len(root), len(rc.Binds), len(rc.ProcFiles), len(rc.ProcDirs), len(rc.ProcReadOnly), rc.HostUID, rc.HostGID,
		len(rc.Copies)} {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(rc.ScratchBytes))
	b = append(b, c.Filter.Marshal()...)
	if c.Program != nil {
		b = append(append(b, p.SpawnFilter...), p.Filter...)
		for _, r := range p.Rlimits {
			b = binary.LittleEndian.AppendUint32(b, uint32(r.Resource))
			b = binary.LittleEndian.AppendUint32(b, 0)
			b = binary.LittleEndian.AppendUint64(b, r.Cur)
			b = binary.LittleEndian.AppendUint64(b, r.Max)
		}
	}
	return append(append(b, root...), warm...), nil
}

// cStrings is argv and then env as the reaper reads them, each string
// NUL-terminated; an argument or variable with a NUL, or too many, is refused.
func cStrings(argv, env []string) ([]byte, error) {
	if len(argv) > C.REAPER_MAX_ARGS || len(env) > C.REAPER_MAX_ENV {
		return nil, fmt.Errorf("%d arguments and %d variables (at most %d and %d)", len(argv), len(env), C.REAPER_MAX_ARGS, C.REAPER_MAX_ENV)
	}
	var b []byte
	for _, s := range slices.Concat(argv, env) {
		if strings.IndexByte(s, 0) >= 0 {
			return nil, fmt.Errorf("an argument or variable with a NUL byte")
		}
		b = append(append(b, s...), 0)
	}
	return b, nil
}

// MarshalRun encodes a sandbox's run as its reaper reads it once it has said
// "ready": struct reaper_run, then the script's path, the code, argv and envp,
// each NUL-terminated. A warm sandbox's run (handover, the run's environment
// as pid1.WarmEnv gives it, not nil) carries no argv nor envp: the handover
// goes to the interpreter that waits.
func MarshalRun(rs *pid1.RunSpec, handover []byte) ([]byte, error) {
	argv, env := rs.Argv, rs.Env
	if handover != nil {
		argv, env = nil, nil
	} else if len(argv) == 0 {
		return nil, fmt.Errorf("a run without a command line")
	}
	strs, err := cStrings(argv, env)
	if err != nil {
		return nil, err
	}
	body := append([]byte(rs.ScriptPath), 0)
	body = append(append(body, rs.Code...), 0)
	body = append(append(body, strs...), handover...)
	if strings.IndexByte(rs.ScriptPath, 0) >= 0 {
		return nil, fmt.Errorf("a script path with a NUL byte")
	}
	if len(body) > C.REAPER_MAX_RUN {
		return nil, fmt.Errorf("a run of %d bytes, its environment and code encoded (at most %d)", len(body), C.REAPER_MAX_RUN)
	}
	b := make([]byte, 0, C.sizeof_struct_reaper_run+len(body))
	for _, v := range []int{len(body), len(rs.Code), len(argv), len(env), len(handover), 0} {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return append(b, body...), nil
}
