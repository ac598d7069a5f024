package pid1

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// PrepareSpec is the first thing the parent sends an init over its spec pipe: what
// the sandbox is built from, which does not depend on the run. The init builds the
// whole root from it and pivots into it before any run is known, so a pooled init
// has done that work before a run takes it.
type PrepareSpec struct {
	// Scratch is the host directory the init mounts the run's tmpfs on, inside its
	// own mount namespace (every run mounts on the same directory, privately).
	Scratch string
	// ScratchBytes is the tmpfs's size: all the run's writable space (overlay
	// upper, /tmp, /sandbox, /dev/shm).
	ScratchBytes int64
	Lower        string
	// View, when set, is mounted before Binds (mountBinds).
	View  *View `json:",omitempty"`
	Binds []Bind
	// Empty is an empty host directory, bound on the scratch tmpfs as the
	// second layer of each bind's ReadOnlyView (mountBinds).
	Empty string
	// UID and GID are the program's identity inside its user namespace;
	// HostUID and HostGID what they map to, the run's own host ids. InitUID and
	// InitGID are the init's host ids from just before the program's exec.
	UID, GID         int
	HostUID, HostGID int
	InitUID, InitGID int
	Hostname         string
	Rlimits          []Rlimit
	// Seccomp is the program's compiled filter (seccomp.Program.Marshal).
	Seccomp []byte `json:"-"`
	// InitSeccomp is the filter the init loads on all its threads once it has
	// dropped its identity (seccomp.Init): only what it still does.
	InitSeccomp []byte `json:"-"`
	// SpawnSeccomp is the filter of the init's thread from the end of the
	// preparation: Seccomp but for the clone into the program's user namespace.
	// Empty for a Zygote sandbox, whose init starts no program.
	SpawnSeccomp []byte `json:"-"`
	// Warm, when set, is the command line of the interpreter a warm sandbox
	// starts before its run (see jail's warm.go), and WarmEnviron its
	// environment, brig's own names (jail.Environ); nil for a cold sandbox.
	Warm, WarmEnviron []string
	// WarmBoot is the bootstrap Warm runs, a file the root's build writes at
	// WarmBootPath (owned by the program, which removes it at its start), or a
	// zygote's script.
	WarmBoot string `json:",omitempty"`
	// ZygoteArgv and ZygoteEnv, for a zygote's init (ZygoteInitArg), are the
	// zygote's command line and environment, which it execs once the root is
	// built.
	ZygoteArgv, ZygoteEnv []string `json:",omitempty"`
	// Copies are the interpreters' copies on huge pages (jail's copies.go),
	// files of the tmpfs at CopiesFD, which the root's build binds
	// read-only over the interpreters' own files.
	Copies []Copy `json:",omitempty"`
	// Zygote: the sandbox's program will be a zygote's child, which joins it
	// and gets its program and environment from the supervisor (jail's zygote.go).
	// The init has nothing to do for the run: it hardens itself as soon as
	// the root is built and only reaps.
	Zygote bool `json:",omitempty"`
}

// Bind is a host directory mounted read-only, nosuid and nodev into the root, as
// a ReadOnlyView (rootfs.Bind, which the launcher converts: the init does not
// link the rootfs package, whose start-up costs every sandbox about 0.2 ms).
type Bind struct {
	Source string // absolute path on the host
	Target string // absolute path inside the root
}

// Copy is a file of the tmpfs at CopiesFD, Name in its folder CopiesFiles,
// bound at Target inside the root.
type Copy struct {
	Name, Target string
}

// View is rootfs.View: one read-only overlay of the lower layer's folder at
// Target over the host's Source, of which the folder Dir shows at Target.
type View struct {
	Source, Target, Dir string
}

// RunSpec is the second thing the parent sends: the run itself. (The run's
// scratch size, when it differs from the prepared one, is set by the parent
// through the init's scratch context, Message.ScratchFD, before it sends the
// RunSpec: the init's filter is loaded by then and refuses the mount family.)
type RunSpec struct {
	// ScriptPath and Code: the program, written inside the root.
	ScriptPath string
	Code       []byte `json:"-"`
	Argv       []string
	Env        []string
}

// The spec pipe carries each spec as frames, a frame a 4-byte little-endian
// length and that many bytes: first the spec's JSON, then its byte fields raw,
// a frame each (PrepareSpec: Seccomp, SpawnSeccomp, InitSeccomp; RunSpec:
// Code). Two filters of 11 kB each, base64 inside the JSON, cost every init 0.4 ms in
// encoding/json's scanner, and a large program would cost more.

// maxSpecFrame bounds a frame the init reads: a run's code is far smaller.
const maxSpecFrame = 1 << 30

// WritePrepare writes s to the spec pipe, in one write.
func WritePrepare(w io.Writer, s *PrepareSpec) error {
	return writeSpec(w, s, s.Seccomp, s.SpawnSeccomp, s.InitSeccomp)
}

// WriteRun writes s to the spec pipe, in one write.
func WriteRun(w io.Writer, s *RunSpec) error { return writeSpec(w, s, s.Code) }

func readPrepare(r io.Reader, s *PrepareSpec) error {
	return readSpec(r, s, &s.Seccomp, &s.SpawnSeccomp, &s.InitSeccomp)
}

func readRun(r io.Reader, s *RunSpec) error { return readSpec(r, s, &s.Code) }

func writeSpec(w io.Writer, spec any, raw ...[]byte) error {
	j, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	n := 4 + len(j)
	for _, r := range raw {
		n += 4 + len(r)
	}
	buf := make([]byte, 0, n)
	for _, f := range append([][]byte{j}, raw...) {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(f)))
		buf = append(buf, f...)
	}
	_, err = w.Write(buf)
	return err
}

// readSpec reads a spec written by writeSpec into spec and raw. It returns
// io.EOF, and only then, when the pipe closed before the spec began.
func readSpec(r io.Reader, spec any, raw ...*[]byte) error {
	j, err := readFrame(r)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(j, spec); err != nil {
		return err
	}
	for _, f := range raw {
		if *f, err = readFrame(r); err != nil {
			return noEOF(err)
		}
	}
	return nil
}

func readFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint32(n[:])
	if size > maxSpecFrame {
		return nil, fmt.Errorf("a spec frame of %d bytes, more than %d", size, maxSpecFrame)
	}
	if size == 0 {
		return nil, nil
	}
	b := make([]byte, size)
	_, err := io.ReadFull(r, b)
	return b, noEOF(err)
}

// noEOF turns an EOF inside a spec into the truncation it is.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Rlimit is one resource limit the init sets (setrlimit).
type Rlimit struct {
	Resource int
	Cur, Max uint64
}

// Message is what the init writes on its status pipe, one JSON object a line.
type Message struct {
	// Kind is "ready" (the root is built; the init waits for the run),
	// "started" (the interpreter was exec'd), "error" (a step failed; the program
	// did not run, or is killed at once) or "exit" (the program ended with
	// WaitStatus).
	Kind       string `json:"kind"`
	Step       string `json:"step,omitempty"`
	Error      string `json:"error,omitempty"`
	WaitStatus uint32 `json:"wait_status,omitempty"`
	// Mono, in "started" and "exit", is the init's CLOCK_MONOTONIC reading, in
	// nanoseconds, when the interpreter was exec'd or reaped.
	Mono int64 `json:"mono,omitempty"`
	// ScratchFD, in "ready", is the init's descriptor of its scratch tmpfs's
	// reconfiguration context, for the parent's pidfd_getfd.
	ScratchFD int `json:"scratch_fd,omitempty"`
}

// Message kinds: Message.Kind says what each means.
const (
	MsgReady   = "ready"
	MsgStarted = "started"
	MsgError   = "error"
	MsgExit    = "exit"
)

// The init's file descriptors, set by the parent through ExtraFiles.
const (
	// SpecFD is the read end of the spec pipe: a PrepareSpec and a RunSpec, each
	// a JSON value.
	SpecFD = 3
	// StatusFD is the write end of the status pipe: messages, one a line.
	StatusFD = 4
	// CopiesFD is the tmpfs of the interpreters' copies (PrepareSpec.Copies),
	// passed only with copies to bind and closed once they are bound.
	CopiesFD = 9
)

// ScratchBytesPerInode bounds the scratch tmpfs's inodes: one for each this
// many bytes of its size. A file's data takes a page of the size at least, so
// only what holds none (an empty file, a folder, a symbolic link) meets the
// bound, which makes making them end in ENOSPC, as filling the tmpfs does,
// not in an OOM kill: tmpfs's default is half the host's pages (3 million
// here), and their inodes' kernel memory is charged to the run (an audit's
// program made empty files until its 128 MiB run was killed for memory).
const ScratchBytesPerInode = 4096

// The tmpfs at CopiesFD holds the copies in its folder CopiesFiles, and
// CopiesEmpty, an empty folder: the two layers of the overlay an init shows
// them through (mountCopies).
const (
	CopiesFiles = "files"
	CopiesEmpty = "empty"
)

// WarmBootPath is where a warm JavaScript interpreter's bootstrap, or a
// zygote's script (PrepareSpec.WarmBoot), is written. Node's bootstrap
// removes it as it starts, long before a run takes the sandbox; a zygote's is
// in the zygote's own root, which no run sees. It is as long as a run's
// script's path (rootfs's ScriptName under /sandbox): a zygote is started
// with it in the place of the script, and its children's command line, which
// they rewrite in place, is then exactly a cold run's (TestWarmBootPathLength).
const WarmBootPath = "/sandbox/.brg.js"

// WarmFD is the descriptor on which a warm JavaScript interpreter reads its
// run's environment. It is above node's own (3 to 16 in node 20), which then
// take the numbers they take in a cold node, and a program's first open gets
// a cold run's (17), not the socket's once closed (3 until 2026-12-05); and
// below 64, the size of a fresh process's descriptor table, which a higher
// one would double for good (/proc/self/status's FDSize).
const WarmFD = 63

// WarmEnv is the JSON a warm interpreter reads: the run's whole environment.
func WarmEnv(env []string) ([]byte, error) {
	env, err := UniqueEnv(env)
	if err != nil {
		return nil, err
	}
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return json.Marshal(m)
}

// UniqueEnv returns env with each name once, the first entry of a name
// winning, as getenv's does, in the order of the names: the environment a
// warm interpreter's bootstrap sets.
func UniqueEnv(env []string) ([]string, error) {
	seen := make(map[string]bool, len(env))
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("environment entry %q has no '='", kv)
		}
		if !seen[k] {
			seen[k] = true
			out = append(out, kv)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		ka, _, _ := strings.Cut(a, "=")
		kb, _, _ := strings.Cut(b, "=")
		return strings.Compare(ka, kb)
	})
	return out, nil
}

// The zygote's descriptors: its control socket, its pid namespace, a pipe
// it reads its source from, and the host's /proc, where it finds its own
// memory's map before it forks (and closes it). (An init's 3 and 4 are its
// spec and status pipes, which close on the exec.)
const (
	ZygoteCtlFD    = 5
	ZygotePidnsFD  = 6
	ZygoteSourceFD = 7
	ZygoteProcFD   = 8
)

// buildStamp is set, the same in brig and brig-init, by the Makefile's build
// (-ldflags -X): an init from another build may speak another protocol or
// build another sandbox, so it is used only when its stamp is this binary's.
var buildStamp string

// BuildStamp is what brig-init prints when asked for its stamp.
func BuildStamp() string { return buildStamp }

// StampArg asks brig-init for its build stamp.
const StampArg = "stamp"

// Monotonic reads CLOCK_MONOTONIC, the clock the init stamps its messages with.
func Monotonic() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}
