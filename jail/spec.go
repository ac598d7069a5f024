package jail

import (
	"time"

	"github.com/brig-sandbox/brig/rootfs"
)

// Spec is one run.
type Spec struct {
	Language rootfs.Language
	// Code is the program's source, written to /sandbox/main.py or main.js.
	Code string
	// Timeout is the wall-clock limit from the interpreter's start.
	Timeout time.Duration
	// MemoryBytes bounds everything the run's processes and writable files use.
	MemoryBytes int64
	// Env is the request's environment; brig adds its own names (which win).
	Env map[string]string

	// OnStart, when set, is called once the interpreter has been exec'd.
	OnStart func()
	// OnStdout and OnStderr, when set, get the kept output as it is printed.
	OnStdout, OnStderr func(string)
}

// prepareSpec is the first thing the parent sends an init over its spec pipe: what
// the sandbox is built from, which does not depend on the run. The init builds the
// whole root from it and pivots into it before any run is known, so a pooled init
// has done that work before a run takes it.
type prepareSpec struct {
	// Scratch is the host directory the init mounts the run's tmpfs on, inside its
	// own mount namespace (every run mounts on the same directory, privately).
	Scratch string
	// ScratchBytes is the tmpfs's size: all the run's writable space (overlay
	// upper, /tmp, /sandbox, /dev/shm).
	ScratchBytes int64
	Lower        string
	Binds        []rootfs.Bind
	// UID and GID are the program's identity; InitUID and InitGID the init's
	// once the program has started.
	UID, GID         int
	InitUID, InitGID int
	Hostname         string
	Rlimits          []rlimit
	// Seccomp is the compiled filter (seccomp.Program.Marshal).
	Seccomp []byte
}

// runSpec is the second thing the parent sends: the run itself. (The run's
// scratch size, when it differs from the prepared one, is set by the parent
// through the init's scratch context, message.ScratchFD, before it sends the
// runSpec: the init's filter is loaded by then and refuses the mount family.)
type runSpec struct {
	// ScriptPath and Code: the program, written inside the root.
	ScriptPath string
	Code       []byte
	Argv       []string
	Env        []string
}

type rlimit struct {
	Resource int
	Cur, Max uint64
}

// message is what the init writes on its status pipe, one JSON object a line.
type message struct {
	// Kind is "ready" (the root is built; the init waits for the run),
	// "started" (the interpreter was exec'd), "error" (a step failed; the program
	// did not run, or is killed at once) or "exit" (the program ended with
	// WaitStatus).
	Kind       string `json:"kind"`
	Step       string `json:"step,omitempty"`
	Error      string `json:"error,omitempty"`
	WaitStatus uint32 `json:"wait_status,omitempty"`
	// ScratchFD, in "ready", is the init's descriptor of its scratch tmpfs's
	// reconfiguration context, for the parent's pidfd_getfd.
	ScratchFD int `json:"scratch_fd,omitempty"`
}

const (
	msgReady   = "ready"
	msgStarted = "started"
	msgError   = "error"
	msgExit    = "exit"
)

// The init's file descriptors, set by the parent through ExtraFiles.
const (
	// specFD is the read end of the spec pipe: a prepareSpec and a runSpec, each
	// a JSON value.
	specFD = 3
	// statusFD is the write end of the status pipe: messages, one a line.
	statusFD = 4
)
