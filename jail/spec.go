package jail

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/jail/pid1"
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

	// BrigEnv are environment variables brig sets for this run (names it
	// reserves, such as the package paths of a run with a layer); a name it
	// does not reserve fails the run.
	BrigEnv map[string]string
	// Mounts are host directories mounted into the sandbox once it exists and
	// before the program is sent (a pooled sandbox too): a run's package layer,
	// read-only; the installer's staging folder, writable.
	Mounts []Mount

	// Attach, when set, is called with the host pid of the sandbox's init once
	// the sandbox exists and before the program is sent to it: a networked run
	// binds its DNS server and proxies in that process's network namespace,
	// which is the run's. env is added to the program's environment (names brig
	// reserves, which a request can't set). The caller undoes what Attach did
	// once Run has returned (every process of the run is killed by then). An
	// error ends the run before the program starts (EndInternal, step
	// "network").
	Attach func(initPID int) (env map[string]string, err error)

	// OnStart, when set, is called once the interpreter has been exec'd (or
	// a warm sandbox's program handed over), with that moment by the wall
	// clock: this process hears of it later, by as long as it waited for a
	// CPU, and the run's wall time counts from it.
	OnStart func(at time.Time)
	// OnStdout and OnStderr, when set, get the kept output as it is printed.
	OnStdout, OnStderr func(string)
	// OnStdoutCut and OnStderrCut, when set, are called once, when the
	// stream's output first passes its cap (Result's StdoutTruncated and
	// StderrTruncated will say so).
	OnStdoutCut, OnStderrCut func()
}

// Mount is a host directory mounted into one run's sandbox.
type Mount struct {
	// Source is the host directory.
	Source string
	// Target is where the run sees it: an absolute path whose directory exists
	// in the rootfs (the mount point itself is made on the run's tmpfs when
	// missing).
	Target string
	// Writable mounts it read-write (still nosuid and nodev); otherwise it is
	// read-only.
	Writable bool
}

// ScratchBytes is the size of a run's writable space for a memory limit: half of
// it, so that filling the disk ends in ENOSPC for the program while the
// interpreter still has the other half, not in an OOM kill.
func ScratchBytes(memoryBytes int64) int64 { return memoryBytes / 2 }

func (l *Launcher) newPrepareSpec(root *rootfs.Root, memoryBytes int64, ids runIDs) *pid1.PrepareSpec {
	return &pid1.PrepareSpec{
		Scratch:      l.scratch,
		ScratchBytes: ScratchBytes(memoryBytes),
		Lower:        root.Lower,
		View:         viewOf(root),
		Binds:        bindsOf(root),
		Empty:        l.empty,
		UID:          rootfs.SandboxUID,
		GID:          rootfs.SandboxGID,
		HostUID:      ids.UID,
		HostGID:      ids.GID,
		InitUID:      ids.InitUID,
		InitGID:      ids.InitGID,
		Hostname:     DefaultHostname,
		Rlimits:      l.rlimits,
		Seccomp:      l.programFilter,
		SpawnSeccomp: l.spawnFilter,
		InitSeccomp:  l.initFilter,
	}
}

// bindsOf is root's binds as the init's spec carries them: those that its
// View does not show, each a mount of its own.
func bindsOf(root *rootfs.Root) []pid1.Bind {
	var b []pid1.Bind
	for _, rb := range root.Binds {
		if v := root.View; v != nil && strings.HasPrefix(rb.Target+"/", v.Target+"/") {
			continue
		}
		b = append(b, pid1.Bind{Source: rb.Source, Target: rb.Target})
	}
	return b
}

// viewOf is root's View as the init's spec carries it.
func viewOf(root *rootfs.Root) *pid1.View {
	if root.View == nil {
		return nil
	}
	return &pid1.View{Source: root.View.Source, Target: root.View.Target, Dir: rootfs.ViewDir}
}

// scriptPath is where a run's program is written in its sandbox.
func scriptPath(lang rootfs.Language) string { return "/sandbox/" + lang.ScriptName() }

// runSpecOf is the run's spec for the init; attached is the environment that
// Spec.Attach gave, which goes before the request's with brig's own names.
// The environment is in the order of its names, which is the order a warm
// interpreter gets it in (pid1.WarmEnv's JSON object is sorted by name), so
// that os.environ and process.env list it alike warm and cold. (No name comes
// twice: the request can't set brig's or Attach's.)
func runSpecOf(spec Spec, root *rootfs.Root, attached map[string]string) *pid1.RunSpec {
	script := scriptPath(spec.Language)
	env := make([]string, 0, len(attached))
	for k, v := range attached {
		env = append(env, k+"="+v)
	}
	// One value a name: attached's (a layer's PATH) over brig's own.
	for _, kv := range Environ(spec.Env) {
		if k, _, _ := strings.Cut(kv, "="); attached[k] == "" {
			env = append(env, kv)
		}
	}
	slices.SortStableFunc(env, func(a, b string) int {
		ka, _, _ := strings.Cut(a, "=")
		kb, _, _ := strings.Cut(b, "=")
		return strings.Compare(ka, kb)
	})
	return &pid1.RunSpec{
		ScriptPath: script,
		Code:       []byte(spec.Code),
		Argv:       root.Argv(script),
		Env:        env,
	}
}

// DefaultPath is a run's PATH; a run with a package layer has the layer's
// programs' folder before it (Spec.BrigEnv).
const DefaultPath = "/usr/local/bin:/usr/bin:/bin"

// brigEnv are the names brig sets in every run; a request can't override them.
var brigEnv = map[string]string{
	"PATH":    DefaultPath,
	"HOME":    "/sandbox",
	"USER":    "sandbox",
	"LOGNAME": "sandbox",
	"TMPDIR":  "/tmp",
	"LANG":    "C.UTF-8",
}

// brigOnlyEnv are names a request can't set because brig gives them meaning
// inside the sandbox: the proxy variables and the package managers' registry
// of networked runs, and the package paths of runs with packages. They are
// reserved in every run, so that what a request may set does not depend on
// its network mode or packages.
var brigOnlyEnv = []string{
	"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
	"http_proxy", "https_proxy", "all_proxy", "no_proxy",
	"PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST",
	"NODE_PATH", "NPM_CONFIG_REGISTRY", "npm_config_registry", "NODE_USE_ENV_PROXY", "NODE_EXTRA_CA_CERTS",
}

// ReservedEnv reports whether name is one brig sets itself or reserves.
func ReservedEnv(name string) bool {
	if _, ok := brigEnv[name]; ok {
		return true
	}
	// Some in other cases too, as their readers take them: the proxy
	// variables in any case (Python's urllib), npm's settings in any case
	// (npm_config_ names), pip's in any case after their prefix (PIP_
	// names): Npm_Config_Registry and PIP_Index_Url had set the registries.
	switch upper := strings.ToUpper(name); {
	case strings.HasSuffix(upper, "_PROXY"), strings.HasPrefix(upper, "NPM_CONFIG_"), strings.HasPrefix(name, "PIP_"):
		return slices.Contains(brigOnlyEnv, upper)
	}
	return slices.Contains(brigOnlyEnv, name)
}

// ReservedEnvNames lists the reserved names, sorted.
func ReservedEnvNames() []string {
	names := slices.Collect(maps.Keys(brigEnv))
	names = append(names, brigOnlyEnv...)
	slices.Sort(names)
	return names
}

// EnvError is ValidateEnv's refusal: Name is the variable at fault, empty when
// the environment as a whole is (too many names).
type EnvError struct {
	Name    string
	Message string
}

func (e *EnvError) Error() string { return e.Message }

// Environ is the program's whole environment: brig's names, then the request's
// (validated by ValidateEnv; a reserved one is dropped), never anything of the
// host's. Brig's come first so that even a duplicate could never shadow them.
func Environ(req map[string]string) []string {
	env := make([]string, 0, len(req)+len(brigEnv))
	for k, v := range brigEnv {
		env = append(env, k+"="+v)
	}
	for k, v := range req {
		if !ReservedEnv(k) {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// MaxEnvString and MaxEnvTotal bound a request's environment by what Linux's
// execve takes, so that a run gets it on every path: a warm sandbox's program
// receives its environment over a socket, but a cold one's is exec'd with it,
// and so is every process the program starts. One NAME=VALUE string may hold
// MaxEnvString bytes (with its NUL, MAX_ARG_STRLEN, 32 pages); the
// arguments and environment of an exec together take a quarter of the stack
// limit, 2 MiB under a sandbox's 8 MiB, of which MaxEnvTotal (each string
// with its NUL) is left to the request beside brig's own variables, the
// interpreter's command line and the pointers to them.
const (
	MaxEnvString = 128<<10 - 1
	MaxEnvTotal  = 2<<20 - 64<<10
)

// ValidateEnv checks a request's environment against API.md: at most api.MaxEnvEntries
// names of [A-Za-z_][A-Za-z0-9_]*, none of them brig's own, no NUL in a value;
// and against what execve takes (MaxEnvString, MaxEnvTotal).
func ValidateEnv(env map[string]string) error {
	if len(env) > api.MaxEnvEntries {
		return &EnvError{Message: fmt.Sprintf("%d environment variables; at most %d are allowed", len(env), api.MaxEnvEntries)}
	}
	total := 0
	// Sorted, so that the same environment always gets the same refusal.
	for _, k := range slices.Sorted(maps.Keys(env)) {
		size := len(k) + 1 + len(env[k])
		total += size + 1
		switch {
		case !validEnvName(k):
			return &EnvError{Name: k, Message: fmt.Sprintf("environment variable name %q: use letters, digits and '_', not starting with a digit", k)}
		case ReservedEnv(k):
			return &EnvError{Name: k, Message: fmt.Sprintf("environment variable %s is reserved by brig; leave it out (the reserved names are %s)", k, strings.Join(ReservedEnvNames(), ", "))}
		case strings.IndexByte(env[k], 0) >= 0:
			return &EnvError{Name: k, Message: fmt.Sprintf("environment variable %s: the value may not contain a NUL character", k)}
		case size > MaxEnvString:
			return &EnvError{Name: k, Message: fmt.Sprintf("environment variable %s: NAME=VALUE is %d bytes, and Linux passes at most %d in one environment string to a program (execve fails with E2BIG); put large data in the code, or have the code write it to a file", k, size, MaxEnvString)}
		}
	}
	if total > MaxEnvTotal {
		return &EnvError{Message: fmt.Sprintf("the environment's strings take %d bytes (NAME=VALUE and a NUL each), and at most %d fit beside brig's own in the 2 MiB that Linux's execve takes for a program's arguments and environment; put large data in the code, or have the code write it to a file", total, MaxEnvTotal)}
	}
	return nil
}

func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// ErrInvalidSpec is returned by Run for a spec outside the bounds of API.md.
var ErrInvalidSpec = errors.New("invalid run spec")

func validateSpec(s Spec) error {
	for _, c := range []struct {
		ok  bool
		msg string
	}{
		{slices.Contains(rootfs.Languages, s.Language), fmt.Sprintf("language %q is not %s", s.Language, api.OneOf(api.Languages))},
		{utf8.RuneCountInString(s.Code) >= api.MinCodeChars, "the code is empty"},
		{utf8.RuneCountInString(s.Code) <= api.MaxCodeChars, fmt.Sprintf("the code is longer than %d characters", api.MaxCodeChars)},
		{s.Timeout >= api.MinTimeoutSeconds*time.Second && s.Timeout <= api.MaxTimeoutSeconds*time.Second, fmt.Sprintf("the timeout %s is outside %ds to %ds", s.Timeout, api.MinTimeoutSeconds, api.MaxTimeoutSeconds)},
		{s.MemoryBytes >= api.MinMemoryMiB<<20 && s.MemoryBytes <= api.MaxMemoryMiB<<20, fmt.Sprintf("the memory limit %d MiB is outside %d to %d MiB", s.MemoryBytes>>20, api.MinMemoryMiB, api.MaxMemoryMiB)},
	} {
		if !c.ok {
			return fmt.Errorf("%w: %s", ErrInvalidSpec, c.msg)
		}
	}
	if err := ValidateEnv(s.Env); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidSpec, err)
	}
	return nil
}
