// Package api is the one owner of brig's run API contract (API.md): every bound
// and default of a request (contract.go), the words of the contract as typed
// enums with a parser that refuses unknown values (Language, State, Status,
// Reason, Outcome, NetworkMode, ErrorCode), the wire types (the request, the
// Result and its parts, events, errors), and the pure rule that turns how a run
// ended into the outcome a harness acts on. Every other package derives its checks
// and its messages from these values, and a test holds openapi.yaml to them.
//
// Typical use, checking a value from outside before it reaches a sandbox:
//
//	lang, err := api.ParseLanguage(req.Language) // err wraps api.ErrUnknown
//	if t := *req.TimeoutSeconds; t < api.MinTimeoutSeconds || t > api.MaxTimeoutSeconds { ... }
package api

import (
	"bytes"
	"encoding/json"
	"time"
	"unicode/utf8"
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
		if NetworkMode(networkMode).Online() {
			return OutcomeUnknown
		}
	}
	return OutcomeFailed
}

// Result is a run's result, as API.md describes it.
type Result struct {
	ID              string          `json:"id"`
	Language        Language        `json:"language"`
	State           State           `json:"state"`
	Status          Status          `json:"status,omitempty"`
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
	// Omitted is how many attempts Connections leaves out (absent when none):
	// past the run's bound on listed refusals (a program that tries names in a
	// loop makes one each), or on listed connections.
	Omitted int `json:"omitted,omitempty"`
}

// Connection is one attempted connection, allowed or not.
type Connection struct {
	Host    string `json:"host"`
	Port    int    `json:"port"`
	Allowed bool   `json:"allowed"`
	// Rule is the rule that decided, in words: "domain example.com", "not in
	// the run's domains", "address class private (10.0.0.0/8)"...
	Rule          string `json:"rule"`
	BytesSent     int64  `json:"bytes_sent"`
	BytesReceived int64  `json:"bytes_received"`
	// Failure says why an allowed connection did not get through or was cut
	// ("the run's byte limit was reached", an upstream that did not answer);
	// empty when it went through.
	Failure string `json:"failure,omitempty"`
}

// Millis is d in whole milliseconds, rounded up: a Result's usage.wall_ms,
// usage.cpu_ms and timing.total_ms, what a run took, so that a run that took
// any time never reads 0 (a warm print(1) is over in under a millisecond).
// The points within a run's time (queued_ms, prepare_ms, start_ms) are
// rounded down, so that a run that did not wait reads 0 there.
func Millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
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

// Request is the body of POST /v1/runs. Pointer fields are those whose absence
// differs from their zero value; Defaults fills them.
type Request struct {
	ID             string            `json:"id,omitempty"`
	Language       string            `json:"language"`
	Code           string            `json:"code"`
	TimeoutSeconds *int              `json:"timeout_seconds,omitempty"`
	MemoryMiB      *int              `json:"memory_mib,omitempty"`
	Packages       []string          `json:"packages,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Network        *Network          `json:"network,omitempty"`
}

// Network is a request's network: a mode, and with mode domains the allowed
// host names (each admitting its subdomains).
type Network struct {
	Mode    string   `json:"mode"`
	Domains []string `json:"domains,omitempty"`
}

// WithDefaults returns a copy of r with every absent field set to its default of
// API.md, so that two requests that mean the same run compare equal.
func (r Request) WithDefaults() Request {
	if r.TimeoutSeconds == nil {
		t := DefaultTimeoutSeconds
		r.TimeoutSeconds = &t
	}
	if r.MemoryMiB == nil {
		m := DefaultMemoryMiB
		r.MemoryMiB = &m
	}
	if r.Packages == nil {
		r.Packages = []string{}
	}
	if r.Env == nil {
		r.Env = map[string]string{}
	}
	if r.Network == nil || r.Network.Mode == "" {
		n := Network{Mode: NetworkNone}
		if r.Network != nil {
			n.Domains = r.Network.Domains
		}
		r.Network = &n
	}
	return r
}

// Event kinds of the NDJSON stream.
const (
	EventAccepted = "accepted"
	EventPackage  = "package"
	EventStarted  = "started"
	EventStdout   = "stdout"
	EventStderr   = "stderr"
	EventEgress   = "egress"
	EventResult   = "result"
)

// EventKinds lists every event kind, in the order a stream can carry them.
var EventKinds = []string{EventAccepted, EventPackage, EventStarted, EventStdout, EventStderr, EventEgress, EventResult}

// Event is one line of a run's NDJSON stream. Which fields are set depends on
// Event: ID for accepted, Data for stdout and stderr, Host, Port and Allowed for
// egress, Package and Message for package, Result for result.
type Event struct {
	Event   string  `json:"event"`
	ID      string  `json:"id,omitempty"`
	Data    string  `json:"data,omitempty"`
	Host    string  `json:"host,omitempty"`
	Port    int     `json:"port,omitempty"`
	Allowed *bool   `json:"allowed,omitempty"`
	Message string  `json:"message,omitempty"`
	Result  *Result `json:"result,omitempty"`
}

// MarshalJSON omits the empty fields of an Event, but for an egress event's
// host and port, which API.md shows on every one: the host is "" for a
// connection refused before it named one (a limit, an unreadable head), the
// port 0 for a name lookup.
func (e Event) MarshalJSON() ([]byte, error) {
	type plain Event
	if e.Event != EventEgress {
		return Marshal(plain(e))
	}
	return Marshal(struct {
		Event   string `json:"event"`
		Host    string `json:"host"`
		Port    int    `json:"port"`
		Allowed *bool  `json:"allowed"`
	}{e.Event, e.Host, e.Port, e.Allowed})
}

// Marshal is json.Marshal without its HTML escaping: '<', '>' and '&' stay a
// byte each where json.Marshal writes six ("\u003c"). A run's output is text a
// program printed, HTML and shell among it, and the journal keeps it and every
// answer carries it: a million '<' made a 6 MB result (an audit). Every
// encoder of a value that holds output must not escape either: an Encoder's
// escaping applies to what a MarshalJSON returns too (SetEscapeHTML(false)).
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// ErrorBody is the body of every error response: {"error": {...}}.
type ErrorBody struct {
	Error Error `json:"error"`
}

// Error is one API error: a code from the list above, the first bad field of an
// invalid request, and a sentence that says what to do.
type Error struct {
	Code    string `json:"code"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	if e.Field != "" {
		return e.Field + ": " + e.Message
	}
	return e.Message
}

// Limits is the body of GET /v1/limits: the bounds and defaults of a request.
type Limits struct {
	TimeoutSeconds Bound `json:"timeout_seconds"`
	MemoryMiB      Bound `json:"memory_mib"`
	CodeChars      Bound `json:"code_chars"`
	Packages       Bound `json:"packages"`
	PackageChars   Bound `json:"package_chars"`
	EnvEntries     Bound `json:"env_entries"`
	Domains        Bound `json:"domains"`
	IDChars        Bound `json:"id_chars"`
	StdoutChars    int   `json:"stdout_chars"`
	StderrChars    int   `json:"stderr_chars"`
	BodyBytes      int   `json:"body_bytes"`
	// WritableFilesShare is the share of memory_mib that a run's writable
	// files (/tmp, /sandbox, /dev/shm: one tmpfs) may take; a write past it
	// fails with ENOSPC, and the rest is left to the processes.
	WritableFilesShare float64 `json:"writable_files_share"`
	// Processes is how many processes and threads a run may have at once
	// (its pids limit): a fork or new thread past it fails with EAGAIN.
	// CPUs is the CPU time a run may use, in CPUs: past it, it is throttled,
	// not stopped. Both are the operator's, the same for every run; zero
	// leaves them out.
	Processes    int      `json:"processes,omitempty"`
	CPUs         float64  `json:"cpus,omitempty"`
	Languages    []string `json:"languages"`
	NetworkModes []string `json:"network_modes"`
	// DefaultNetworkMode is a request's network mode when it gives none.
	DefaultNetworkMode string `json:"default_network_mode"`
	// IDPattern and EnvNamePattern are api.IDPattern and api.EnvNamePattern.
	IDPattern      string   `json:"id_pattern"`
	EnvNamePattern string   `json:"env_name_pattern"`
	ReservedEnv    []string `json:"reserved_env"`
	// Egress is what bounds a networked run's connections, when this host
	// offers a networked mode.
	Egress *EgressLimits `json:"egress,omitempty"`
	// Install is what bounds a run's package install, when this host
	// installs packages.
	Install *InstallLimits `json:"install,omitempty"`
}

// InstallLimits are the operator's bounds on the install a run's packages may
// need, which comes before its program (timeout_seconds counts from the
// interpreter's start): a harness waits up to TimeoutSeconds more for a run
// with packages the cache does not hold.
type InstallLimits struct {
	TimeoutSeconds float64 `json:"timeout_seconds"`
	MemoryMiB      int     `json:"memory_mib"`
}

// EgressLimits are the operator's bounds on each networked run's connections.
type EgressLimits struct {
	// MaxConns connections may be open at once, and ConnsPerSecond opened a
	// second (a burst of MaxConns).
	MaxConns       int     `json:"max_conns"`
	ConnsPerSecond float64 `json:"conns_per_second"`
	// MaxBytes may be sent, and as many received, over all the run's connections.
	MaxBytes int64 `json:"max_bytes"`
	// HandshakeTimeoutSeconds bounds reading a TLS ClientHello, a request head or
	// a CONNECT line.
	HandshakeTimeoutSeconds float64 `json:"handshake_timeout_seconds"`
}

// Bound is a range and, where the field has one, its default.
type Bound struct {
	Min     int  `json:"min"`
	Max     int  `json:"max"`
	Default *int `json:"default,omitempty"`
}

// Health is the body of GET /v1/health.
type Health struct {
	Status       string            `json:"status"`
	Languages    map[string]string `json:"languages"`
	CgroupMode   string            `json:"cgroup_mode"`
	NetworkModes []string          `json:"network_modes"`
	Rootfs       string            `json:"rootfs"`
	Running      int               `json:"running"`
	Queued       int               `json:"queued"`
	// Registries maps each language to the registry host names a run of it
	// with network "registries" may reach (with their subdomains); an empty
	// list admits nothing.
	Registries map[string][]string `json:"registries"`
	// PackageLanguages are the languages whose runs may ask for packages here.
	PackageLanguages []string `json:"package_languages"`
}

// InvalidUTF8At is the offset of the first byte of b that is not valid UTF-8,
// or -1. The API's bodies, and the programs in them, are UTF-8: a decoder
// would turn any other byte into U+FFFD, and run other code than was sent.
func InvalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}
