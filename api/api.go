// Package api holds the wire types of brig's run API (../shared/spec/API.md): the
// request, the Result and its parts, and the pure rules that turn how a run ended
// into the status, reason and outcome a harness acts on. The supervisor, the CLI and
// the client use these types; the jail fills a Result for `brig run --local`.
package api

// Bounds and defaults of API.md. They are the contract: change them only with it.
const (
	MinTimeoutSeconds     = 1
	MaxTimeoutSeconds     = 300
	DefaultTimeoutSeconds = 30
	MinMemoryMiB          = 128
	MaxMemoryMiB          = 2048
	DefaultMemoryMiB      = 512
	MaxCodeChars          = 100_000
	MaxStdoutChars        = 1_000_000
	MaxStderrChars        = 100_000
)

// States of a run.
const (
	StateQueued    = "queued"
	StatePreparing = "preparing"
	StateRunning   = "running"
	StateFinished  = "finished"
)

// Status of a finished run.
const (
	StatusCompleted = "completed"
	StatusFailed    = "failed"
)

// Reason says why a finished run failed.
type Reason string

// The reasons of API.md.
const (
	ReasonNone               Reason = ""
	ReasonError              Reason = "error"
	ReasonTimeout            Reason = "timeout"
	ReasonMemory             Reason = "memory"
	ReasonStopped            Reason = "stopped"
	ReasonPackageBlocked     Reason = "package_blocked"
	ReasonPackageUnavailable Reason = "package_unavailable"
	ReasonInternal           Reason = "internal"
)

// Outcome is the Tool Call outcome a harness acts on.
type Outcome string

// The outcomes of API.md.
const (
	OutcomeSucceeded Outcome = "succeeded"
	OutcomeFailed    Outcome = "failed"
	OutcomeUnknown   Outcome = "unknown"
	OutcomeBlocked   Outcome = "blocked"
)

// Network modes.
const (
	NetworkNone       = "none"
	NetworkRegistries = "registries"
	NetworkDomains    = "domains"
	NetworkAny        = "any"
)

// OutcomeOf is the outcome of a finished run that ended for reason (ReasonNone for a
// run that completed) with the given network mode. A networked run cut short
// (timeout, memory, stopped) may have changed something outside: unknown.
func OutcomeOf(reason Reason, networkMode string) Outcome {
	switch reason {
	case ReasonNone:
		return OutcomeSucceeded
	case ReasonPackageBlocked:
		return OutcomeBlocked
	case ReasonTimeout, ReasonMemory, ReasonStopped:
		if networkMode != "" && networkMode != NetworkNone {
			return OutcomeUnknown
		}
	}
	return OutcomeFailed
}

// Result is a run's result, as API.md describes it.
type Result struct {
	ID              string          `json:"id"`
	Language        string          `json:"language"`
	State           string          `json:"state"`
	Status          string          `json:"status,omitempty"`
	Reason          Reason          `json:"reason,omitempty"`
	Outcome         Outcome         `json:"outcome,omitempty"`
	ExitCode        *int            `json:"exit_code"`
	Signal          string          `json:"signal,omitempty"`
	Stdout          string          `json:"stdout"`
	Stderr          string          `json:"stderr"`
	StdoutTruncated bool            `json:"stdout_truncated"`
	StderrTruncated bool            `json:"stderr_truncated"`
	Packages        []PackageResult `json:"packages"`
	Network         NetworkReport   `json:"network"`
	Usage           Usage           `json:"usage"`
	Timing          Timing          `json:"timing"`
	Message         string          `json:"message,omitempty"`
}

// PackageResult is how one package request was resolved.
type PackageResult struct {
	Request string `json:"request"`
	Name    string `json:"name"`
	Version string `json:"version"`
	Cached  bool   `json:"cached"`
}

// NetworkReport is the run's network mode and every connection it attempted.
type NetworkReport struct {
	Mode        string       `json:"mode"`
	Connections []Connection `json:"connections"`
}

// Connection is one attempted connection, allowed or not.
type Connection struct {
	Host          string `json:"host"`
	Port          int    `json:"port"`
	Allowed       bool   `json:"allowed"`
	BytesSent     int64  `json:"bytes_sent"`
	BytesReceived int64  `json:"bytes_received"`
}

// Usage is what the run consumed.
type Usage struct {
	WallMS          int64 `json:"wall_ms"`
	CPUMS           int64 `json:"cpu_ms"`
	PeakMemoryBytes int64 `json:"peak_memory_bytes"`
}

// Timing is where the run's time went, in milliseconds.
type Timing struct {
	QueuedMS  int64 `json:"queued_ms"`
	PrepareMS int64 `json:"prepare_ms"`
	StartMS   int64 `json:"start_ms"`
	TotalMS   int64 `json:"total_ms"`
}
