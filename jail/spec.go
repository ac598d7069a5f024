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

// childSpec is what the parent sends the init over its spec pipe: everything the
// child half needs, resolved and validated by the parent, so that the init only
// performs steps and makes no decision.
type childSpec struct {
	// Scratch is the host directory the init mounts the run's tmpfs on, inside its
	// own mount namespace (every run mounts on the same directory, privately).
	Scratch string
	// ScratchBytes is the tmpfs size: all the run's writable space (overlay upper,
	// /tmp, /sandbox, /dev/shm).
	ScratchBytes int64
	Lower        string
	Binds        []rootfs.Bind
	// ScriptPath and Code: the program, written inside the root.
	ScriptPath string
	Code       []byte
	Argv       []string
	Env        []string
	UID, GID   int
	Hostname   string
	Rlimits    []rlimit
	// Seccomp is the compiled filter (seccomp.Program.Marshal).
	Seccomp []byte
}

type rlimit struct {
	Resource int
	Cur, Max uint64
}

// message is what the init writes on its status pipe, one JSON object a line.
type message struct {
	// Kind is "started" (the interpreter was exec'd), "error" (a setup step
	// failed; nothing ran) or "exit" (the program ended with WaitStatus).
	Kind       string `json:"kind"`
	Step       string `json:"step,omitempty"`
	Error      string `json:"error,omitempty"`
	WaitStatus uint32 `json:"wait_status,omitempty"`
}

const (
	msgStarted = "started"
	msgError   = "error"
	msgExit    = "exit"
)

// The init's file descriptors, set by the parent through ExtraFiles.
const (
	// specFD is the read end of the spec pipe: the childSpec as JSON, then EOF.
	specFD = 3
	// statusFD is the write end of the status pipe: messages, one a line.
	statusFD = 4
)
