package api

import (
	"errors"
	"fmt"
	"strings"
)

// Bounds and defaults of API.md. They are the contract: change them only with
// it (and with openapi.yaml, which a test holds to these values).
const (
	MinTimeoutSeconds     = 1
	MaxTimeoutSeconds     = 300
	DefaultTimeoutSeconds = 30

	MinMemoryMiB     = 128
	MaxMemoryMiB     = 2048
	DefaultMemoryMiB = 512

	// Code, ids and package requests are counted in Unicode code points.
	MinCodeChars = 1
	MaxCodeChars = 100_000
	MinIDChars   = 1
	MaxIDChars   = 128

	MaxPackages     = 50
	MinPackageChars = 3
	MaxPackageChars = 214

	MaxEnvEntries = 50

	// A request with network mode "domains" lists 1 to MaxDomains host names.
	MinDomains = 1
	MaxDomains = 100

	// Output beyond these many code points is dropped, and the result's
	// stdout_truncated or stderr_truncated says so.
	MaxStdoutChars = 1_000_000
	MaxStderrChars = 100_000

	// MaxConnectionsBytes bounds the JSON of a result's network.connections:
	// past it, connections are counted in network.omitted, not listed, so that
	// a result (and an NDJSON line carrying it) has a bound clients can read to:
	// MaxResultBytes.
	MaxConnectionsBytes = 4 << 20
	// MaxResultBytes bounds a result's JSON: both outputs full, each
	// character escaped at worst as \uXXXX (6 bytes), the connections, and
	// 1 MiB for the rest.
	MaxResultBytes = 6*(MaxStdoutChars+MaxStderrChars) + MaxConnectionsBytes + 1<<20

	// MaxBodyBytes caps the body of POST /v1/runs; beyond it, 413.
	MaxBodyBytes = 4 << 20
)

// IDPattern and EnvNamePattern are what an id and an env name may be, as
// regular expressions (GET /v1/limits), for a harness to tell a model or check
// before it sends; the ids "." and ".." are refused besides (an HTTP path
// segment). The service's own checks agree with them (TestLimitsPatterns).
var (
	IDPattern      = fmt.Sprintf(`^[A-Za-z0-9._:-]{%d,%d}$`, MinIDChars, MaxIDChars)
	EnvNamePattern = `^[A-Za-z_][A-Za-z0-9_]*$`
)

// ErrUnknown is wrapped by every Parse function of this package for a word
// that is not one of the contract's: `unknown language "ruby": use ...`.
var ErrUnknown = errors.New("unknown")

// Language is a language brig runs.
type Language string

// The languages of API.md.
const (
	Python     Language = "python"
	JavaScript Language = "javascript"
)

// Languages lists every language, in the order brig reports them.
var Languages = []Language{Python, JavaScript}

// ParseLanguage accepts exactly "python" or "javascript".
func ParseLanguage(s string) (Language, error) { return parse("language", Languages, s) }

func (l Language) String() string { return string(l) }

// State is where a run is in its life.
type State string

// The states of API.md, in the order a run goes through them.
const (
	StateQueued    State = "queued"
	StatePreparing State = "preparing"
	StateRunning   State = "running"
	StateFinished  State = "finished"
)

// States lists every state in order.
var States = []State{StateQueued, StatePreparing, StateRunning, StateFinished}

// ParseState accepts exactly one of States.
func ParseState(s string) (State, error) { return parse("state", States, s) }

func (s State) String() string { return string(s) }

// Status is how a finished run ended, in one word.
type Status string

// The statuses of API.md.
const (
	StatusCompleted Status = "completed"
	StatusFailed    Status = "failed"
)

// Statuses lists every status.
var Statuses = []Status{StatusCompleted, StatusFailed}

// ParseStatus accepts exactly one of Statuses.
func ParseStatus(s string) (Status, error) { return parse("status", Statuses, s) }

func (s Status) String() string { return string(s) }

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

// Reasons lists every reason a failed run can have (ReasonNone is not one).
var Reasons = []Reason{ReasonError, ReasonTimeout, ReasonMemory, ReasonStopped,
	ReasonPackageBlocked, ReasonPackageUnavailable, ReasonInternal}

// ParseReason accepts exactly one of Reasons.
func ParseReason(s string) (Reason, error) { return parse("reason", Reasons, s) }

func (r Reason) String() string { return string(r) }

// Outcome is the Tool Call outcome a harness acts on.
type Outcome string

// The outcomes of API.md.
const (
	OutcomeSucceeded Outcome = "succeeded"
	OutcomeFailed    Outcome = "failed"
	OutcomeUnknown   Outcome = "unknown"
	OutcomeBlocked   Outcome = "blocked"
)

// Outcomes lists every outcome.
var Outcomes = []Outcome{OutcomeSucceeded, OutcomeFailed, OutcomeUnknown, OutcomeBlocked}

// ParseOutcome accepts exactly one of Outcomes.
func ParseOutcome(s string) (Outcome, error) { return parse("outcome", Outcomes, s) }

func (o Outcome) String() string { return string(o) }

// NetworkMode is a run's network.
type NetworkMode string

// The network modes of API.md. They are untyped so that the wire types
// (Network.Mode, NetworkReport.Mode) and egress.Policy.Mode, which are still
// strings, compare with them; ParseNetworkMode gives the typed value.
const (
	NetworkNone       = "none"
	NetworkRegistries = "registries"
	NetworkDomains    = "domains"
	NetworkAny        = "any"
)

// NetworkModes lists every network mode, "none" (the default) first.
var NetworkModes = []NetworkMode{NetworkNone, NetworkRegistries, NetworkDomains, NetworkAny}

// ParseNetworkMode accepts exactly one of NetworkModes.
func ParseNetworkMode(s string) (NetworkMode, error) { return parse("network mode", NetworkModes, s) }

func (m NetworkMode) String() string { return string(m) }

// Online reports whether a run of mode m may reach anything outside: every mode
// but none, which is also what an empty (left out) mode means.
func (m NetworkMode) Online() bool { return m != "" && m != NetworkNone }

// ErrorCode is the class of an API error; the supervisor maps each to its
// HTTP status in one function.
type ErrorCode string

// The error codes of API.md. Untyped, as the network modes are, because
// Error.Code is a string that a client may also fill with "http_<status>".
const (
	ErrorInvalidRequest   = "invalid_request"
	ErrorForbidden        = "forbidden"
	ErrorNotFound         = "not_found"
	ErrorMethodNotAllowed = "method_not_allowed"
	ErrorConflict         = "conflict"
	ErrorTooLarge         = "too_large"
	ErrorQueueFull        = "queue_full"
	ErrorUnavailable      = "unavailable"
	ErrorInternal         = "internal"
)

// ErrorCodes lists every error code.
var ErrorCodes = []ErrorCode{ErrorInvalidRequest, ErrorForbidden, ErrorNotFound, ErrorMethodNotAllowed,
	ErrorConflict, ErrorTooLarge, ErrorQueueFull, ErrorUnavailable, ErrorInternal}

// ParseErrorCode accepts exactly one of ErrorCodes.
func ParseErrorCode(s string) (ErrorCode, error) { return parse("error code", ErrorCodes, s) }

func (c ErrorCode) String() string { return string(c) }

// OneOf writes values as a sentence names them, quoted: `"none", "registries",
// "domains" or "any"`. Messages that list a contract's words use it, so that
// they never fall behind the list.
func OneOf[T ~string](values []T) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = fmt.Sprintf("%q", string(v))
	}
	if len(q) < 2 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

// Strings converts values to plain strings, for the wire types that list them
// (Limits.Languages, Health.NetworkModes).
func Strings[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}

func parse[T ~string](what string, values []T, s string) (T, error) {
	for _, v := range values {
		if string(v) == s {
			return v, nil
		}
	}
	return "", fmt.Errorf("%w %s %q: use %s", ErrUnknown, what, s, OneOf(values))
}
