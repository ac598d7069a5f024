package jail

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/cgroup"
	"github.com/brig-sandbox/brig/rootfs"
	"github.com/brig-sandbox/brig/seccomp"
)

// Defaults of Config.
const (
	DefaultStateDir = "/var/lib/brig"
	DefaultCPUs     = 1.0
	DefaultPids     = 512
	DefaultHostname = "sandbox"
	// DefaultInitUID is the uid the init drops to once the program has started:
	// nobody, never the program's.
	DefaultInitUID = 65534
	// MaxEnv bounds a run's environment, as API.md does.
	MaxEnv = 50
	// drainGrace bounds how long the output readers may take to reach EOF once the
	// init is gone (every writer is dead by then; this only guards a defect).
	drainGrace = 2 * time.Second
	// prepareNice is the nice value of inits while they prepare and wait in the
	// pool (they inherit it from the spawner's thread), so that refilling the pool
	// takes CPU from no run; a run's init is set back to 0 when the run takes it.
	prepareNice = 19
	// setupTimeout bounds how long a sandbox may take to start its program (it
	// takes milliseconds; this only guards a defect or a wedged host).
	setupTimeout = 30 * time.Second
)

// cloneFlags are the namespaces every init is cloned into. The cgroup namespace is
// made by the init itself (see initSteps). There is no user namespace: the
// program runs as an unprivileged host uid with no capabilities, and without
// CLONE_NEWUSER Go clones with vfork, whose cost does not grow with the
// supervisor's memory.
const cloneFlags = unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS

// Config configures a Launcher.
type Config struct {
	// StateDir holds the scratch mount point; zero means DefaultStateDir.
	StateDir string
	// Rootfs gives each language's root. Required.
	Rootfs rootfs.Provider
	// Cgroups creates the runs' cgroups. Required.
	Cgroups *cgroup.Manager
	// Filter is the compiled seccomp filter; nil means seccomp.Default() compiled.
	Filter seccomp.Program
	// PoolSize is how many sandboxes are kept cloned and waiting for a run; zero
	// means none: each run clones its own when it starts.
	PoolSize int
	// CPUs is each run's CPU limit in CPUs; zero means DefaultCPUs.
	CPUs float64
	// Pids is each run's limit on processes and threads; zero means DefaultPids.
	Pids int64
	// UID and GID are the program's identity; zero means rootfs.SandboxUID/GID.
	// Root is refused.
	UID, GID int
	// InitUID and InitGID are the identity the init drops to once the program
	// has started; zero means DefaultInitUID for both. It must differ from UID,
	// so that the program can't signal its init.
	InitUID, InitGID int
	// InitPath is the brig binary to re-execute as the init; zero means
	// /proc/self/exe.
	InitPath string
	// Logger gets one line per pool failure; nil means slog.Default().
	Logger *slog.Logger
}

// Launcher starts runs. It is safe for concurrent use.
type Launcher struct {
	cfg     Config
	filter  []byte
	scratch string
	log     *slog.Logger
	seq     atomic.Uint64

	// spawns is served by one goroutine locked to its own OS thread: an init's
	// parent-death signal fires when the thread that cloned it exits, so every
	// clone comes from a thread that lives as long as the Launcher.
	spawns chan chan spawned
	// pools holds, for each distinct root the provider gives (the host rootfs
	// serves both languages with one), the inits that have built it and wait.
	pools     map[string]chan *slot
	done      chan struct{}
	closeOnce sync.Once
	// wg counts the spawner and the fillers; Close waits for them.
	wg sync.WaitGroup

	mu sync.Mutex
	// closed is set by Close; Run refuses to start once it is. Guarded by mu.
	closed bool
	// active counts runs under way and the background release of finished
	// ones; Close waits for it before it stops the spawner. Add under mu.
	active sync.WaitGroup
}

type spawned struct {
	s   *slot
	err error
}

// slot is one cloned init, waiting in its namespaces and cgroup for a spec. Its
// fields are the parent's ends of the pipes that cross to the child.
type slot struct {
	cmd   *exec.Cmd
	group *cgroup.Group
	// spec is the write end of the init's spec pipe (specFD in the child).
	spec *os.File
	// status is the read end of the init's status pipe (statusFD in the child).
	status *os.File
	// stdout and stderr are the read ends of the program's output pipes.
	stdout, stderr *os.File
	// msgs has the init's status messages, decoded from status by a goroutine.
	msgs chan message
	// memoryBytes is the memory limit the cgroup and the scratch size were
	// prepared for.
	memoryBytes int64
	// scratchFD is the init's descriptor of its scratch tmpfs's reconfiguration
	// context, from its ready message.
	scratchFD int
	// baseline is the cgroup's usage before the run (the init's own start and
	// preparing), subtracted from the run's CPU time.
	baseline cgroup.Usage
}

// NewLauncher checks cfg, compiles the filter and starts the pool.
func NewLauncher(cfg Config) (*Launcher, error) {
	if cfg.Rootfs == nil || cfg.Cgroups == nil {
		return nil, errors.New("jail: Config.Rootfs and Config.Cgroups are required")
	}
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = DefaultCPUs
	}
	if cfg.Pids == 0 {
		cfg.Pids = DefaultPids
	}
	if cfg.UID == 0 {
		cfg.UID = rootfs.SandboxUID
	}
	if cfg.GID == 0 {
		cfg.GID = rootfs.SandboxGID
	}
	if cfg.InitUID == 0 {
		cfg.InitUID = DefaultInitUID
	}
	if cfg.InitGID == 0 {
		cfg.InitGID = DefaultInitUID
	}
	if cfg.InitPath == "" {
		cfg.InitPath = "/proc/self/exe"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := validateConfig(cfg); err != nil {
		return nil, err
	}
	if cfg.Filter == nil {
		prog, err := seccomp.Compile(seccomp.Default())
		if err != nil {
			return nil, fmt.Errorf("compiling the seccomp filter: %w", err)
		}
		cfg.Filter = prog
	}
	scratch := filepath.Join(cfg.StateDir, "jail", "scratch")
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return nil, fmt.Errorf("creating the scratch mount point: %w", err)
	}
	l := &Launcher{
		cfg:     cfg,
		filter:  cfg.Filter.Marshal(),
		scratch: scratch,
		log:     cfg.Logger,
		spawns:  make(chan chan spawned),
		pools:   map[string]chan *slot{},
		done:    make(chan struct{}),
	}
	l.wg.Add(1)
	go l.spawner()
	if cfg.PoolSize > 0 {
		for _, lang := range rootfs.Languages {
			root, err := cfg.Rootfs.Root(lang)
			if err != nil {
				l.log.Warn("no pool for a language whose rootfs is missing", "language", lang, "err", err)
				continue
			}
			if _, ok := l.pools[rootKey(root)]; ok {
				continue
			}
			pool := make(chan *slot, cfg.PoolSize)
			l.pools[rootKey(root)] = pool
			l.wg.Add(1)
			go l.fill(root, pool)
		}
	}
	return l, nil
}

// validateConfig is the list of checks made before anything privileged.
func validateConfig(cfg Config) error {
	for _, c := range []struct {
		ok  bool
		msg string
	}{
		{cfg.UID > 0 && cfg.GID > 0, "the sandbox uid and gid must not be 0"},
		{cfg.InitUID > 0 && cfg.InitGID > 0 && cfg.InitUID != cfg.UID, "the init's uid must not be 0 nor the program's"},
		{cfg.PoolSize >= 0 && cfg.PoolSize <= 64, "the pool size must be 0 to 64"},
		{cfg.CPUs > 0, "the CPU limit must be positive"},
		{cfg.Pids > 0, "the pids limit must be positive"},
		{!strings.ContainsAny(cfg.StateDir, ",:"), "the state directory may not contain ',' or ':' (they separate overlay options)"},
		{filepath.IsAbs(cfg.StateDir), "the state directory must be an absolute path"},
	} {
		if !c.ok {
			return fmt.Errorf("jail: invalid config: %s", c.msg)
		}
	}
	return nil
}

// Close refuses new runs, waits for the runs under way (callers stop them through
// their contexts) and their cleanup, then stops the pool and removes the sandboxes
// waiting in it.
func (l *Launcher) Close() error {
	l.closeOnce.Do(l.close)
	return nil
}

// ErrClosed is returned by Run after Close.
var ErrClosed = errors.New("jail: launcher closed")

func (l *Launcher) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.active.Wait()
	// The spawner's thread exits now, and an init's parent-death signal with it:
	// only after every run is over.
	close(l.done)
	l.wg.Wait()
	for _, pool := range l.pools {
		close(pool)
		for s := range pool {
			s.discard()
		}
	}
}

// rootKey identifies what prepareSteps build for a root.
func rootKey(r *rootfs.Root) string {
	k := r.Lower
	for _, b := range r.Binds {
		k += "\x00" + b.Source + "\x00" + b.Target
	}
	return k
}

// spawner serves clone requests from a thread that never exits before the Launcher.
func (l *Launcher) spawner() {
	defer l.wg.Done()
	runtime.LockOSThread()
	// Per thread on Linux: only this thread, and the inits it clones, run nice.
	if err := unix.Setpriority(unix.PRIO_PROCESS, 0, prepareNice); err != nil {
		l.log.Warn("could not lower the priority of pool preparation", "err", err)
	}
	// Left locked on purpose: the thread ends with the goroutine and takes nothing
	// with it, since Close has waited for every clone.
	for {
		select {
		case reply := <-l.spawns:
			s, err := l.clone()
			reply <- spawned{s, err}
		case <-l.done:
			return
		}
	}
}

// fill keeps pool full of inits that have built root and wait for a run.
func (l *Launcher) fill(root *rootfs.Root, pool chan *slot) {
	defer l.wg.Done()
	backoff := 10 * time.Millisecond
	for {
		s, err := l.newSlot(root, api.DefaultMemoryMiB<<20)
		if err == nil {
			err = s.waitReady()
		}
		if err != nil {
			l.log.Error("preparing a sandbox for the pool", "err", err)
			select {
			case <-time.After(backoff):
				backoff = min(2*backoff, 5*time.Second)
				continue
			case <-l.done:
				return
			}
		}
		backoff = 10 * time.Millisecond
		select {
		case pool <- s:
		case <-l.done:
			s.discard()
			return
		}
	}
}

// waitReady waits for a fresh init to report its root built.
func (s *slot) waitReady() error {
	m, ok := <-s.msgs
	switch {
	case !ok:
		s.kill()
		out := make([]byte, 4096)
		n, _ := io.ReadFull(s.stderr, out)
		s.discard()
		return fmt.Errorf("the init exited before building the root (it printed %q)", out[:n])
	case m.Kind == msgError:
		s.discard()
		return fmt.Errorf("building the root failed at step %q: %s", m.Step, m.Error)
	case m.Kind != msgReady:
		s.discard()
		return fmt.Errorf("unexpected message %q from a preparing init", m.Kind)
	}
	s.scratchFD = m.ScratchFD
	// Read now, off the run's path: the init waits and uses no CPU until then.
	u, err := s.group.Usage()
	if err != nil {
		s.discard()
		return fmt.Errorf("reading the cgroup's usage: %w", err)
	}
	s.baseline = u
	return nil
}

// take returns an init that has built (or is building) root with the limits of a
// run of memoryBytes: from the pool, resized where the pool's size differs, or a
// new one.
func (l *Launcher) take(root *rootfs.Root, memoryBytes int64) (s *slot, ready bool, err error) {
	s, ready, err = l.takeSlot(root, memoryBytes)
	if err == nil {
		s.setNice(0)
	}
	return s, ready, err
}

func (l *Launcher) takeSlot(root *rootfs.Root, memoryBytes int64) (s *slot, ready bool, err error) {
	select {
	case s := <-l.pools[rootKey(root)]: // never closed while runs are active
		if s.memoryBytes != memoryBytes {
			if err := s.group.SetLimits(cgroup.Limits{MemoryBytes: memoryBytes}); err != nil {
				s.discard()
				return nil, false, fmt.Errorf("setting the run's memory limit: %w", err)
			}
			if err := resizeScratch(s.cmd.Process.Pid, s.scratchFD, ScratchBytes(memoryBytes)); err != nil {
				s.discard()
				return nil, false, err
			}
			s.memoryBytes = memoryBytes
		}
		return s, true, nil
	default:
		s, err := l.newSlot(root, memoryBytes)
		return s, false, err
	}
}

// newSlot clones an init on the spawner thread, moves it into the run's cgroups
// where the layout needs it (on cgroup v1, the move that may wait for an RCU grace
// period; it happens here, off the spawner thread, so that it delays no other
// clone), and only then sends it the prepareSpec: the init makes its cgroup
// namespace first thing.
func (l *Launcher) newSlot(root *rootfs.Root, memoryBytes int64) (s *slot, retErr error) {
	reply := make(chan spawned, 1)
	select {
	case l.spawns <- reply:
	case <-l.done:
		return nil, ErrClosed
	}
	r := <-reply
	if r.err != nil {
		return nil, r.err
	}
	made := r.s
	defer func() {
		if retErr != nil {
			made.discard()
		}
	}()
	s = made
	// Limits before the move: the init is never in a group without them.
	s.memoryBytes = memoryBytes
	if err := s.group.SetLimits(cgroup.Limits{MemoryBytes: memoryBytes, Pids: l.cfg.Pids, CPUs: l.cfg.CPUs}); err != nil {
		return nil, fmt.Errorf("setting the run's cgroup limits: %w", err)
	}
	if s.group.NeedsAttach() {
		if err := s.group.Attach(s.cmd.Process.Pid); err != nil {
			return nil, fmt.Errorf("moving the init into its cgroup: %w", err)
		}
	}
	if err := json.NewEncoder(s.spec).Encode(l.prepareSpec(root, memoryBytes)); err != nil {
		return nil, fmt.Errorf("sending the prepare spec: %w", err)
	}
	return s, nil
}

// clone creates the run's cgroup and clones the init into its namespaces (and, where
// a cgroup2 directory exists, straight into the cgroup with CLONE_INTO_CGROUP).
func (l *Launcher) clone() (s *slot, retErr error) {
	name := fmt.Sprintf("run-%d-%d", os.Getpid(), l.seq.Add(1))
	g, err := l.cfg.Cgroups.Create(name)
	if err != nil {
		return nil, fmt.Errorf("creating cgroup %s: %w", name, err)
	}
	s = &slot{group: g}
	var childEnds []*os.File
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
		if retErr != nil {
			s.discard()
		}
	}()
	pipe := func(parentReads bool) (*os.File, error) {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		if parentReads {
			childEnds = append(childEnds, w)
			return r, nil
		}
		childEnds = append(childEnds, r)
		return w, nil
	}
	for _, p := range []struct {
		dst         **os.File
		parentReads bool
	}{{&s.spec, false}, {&s.status, true}, {&s.stdout, true}, {&s.stderr, true}} {
		if *p.dst, err = pipe(p.parentReads); err != nil {
			return nil, fmt.Errorf("making pipes: %w", err)
		}
	}
	// childEnds: spec read end, status write end, stdout and stderr write ends.
	sys := &syscall.SysProcAttr{Cloneflags: cloneFlags, Pdeathsig: syscall.SIGKILL}
	if fd := g.CloneFD(); fd >= 0 {
		sys.UseCgroupFD = true
		sys.CgroupFD = fd
	}
	s.cmd = &exec.Cmd{
		Path: l.cfg.InitPath,
		Args: []string{"brig", InitArg},
		// The init's own environment; the program's comes from the spec.
		Env:         []string{"GOMAXPROCS=1"},
		Stdout:      childEnds[2],
		Stderr:      childEnds[3],
		ExtraFiles:  []*os.File{childEnds[0], childEnds[1]}, // specFD, statusFD
		SysProcAttr: sys,
	}
	if err := s.cmd.Start(); err != nil {
		s.cmd = nil
		return nil, fmt.Errorf("cloning the init into new namespaces: %w", err)
	}
	s.msgs = make(chan message, 4)
	go readMessages(s.status, s.msgs)
	return s, nil
}

// discard kills a slot's init (and with it its pid namespace), closes its pipes and
// removes its cgroup. Idempotent.
func (s *slot) discard() {
	s.stop()
	for _, f := range []*os.File{s.spec, s.status, s.stdout, s.stderr} {
		if f != nil {
			f.Close()
		}
	}
	s.spec, s.status, s.stdout, s.stderr = nil, nil, nil, nil
	if s.group != nil {
		s.group.Delete()
		s.group = nil
	}
}

// setNice sets the nice value of every thread of the init (the program, forked
// later from its main thread, inherits it). Best effort: a thread that exits
// meanwhile is no error, and a failure only costs speed.
func (s *slot) setNice(nice int) {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", s.cmd.Process.Pid))
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			unix.Setpriority(unix.PRIO_PROCESS, tid, nice)
		}
	}
}

// kill kills every process of the run: the cgroup's, and the init (which takes
// its pid namespace with it). It does not wait for them to be reaped.
func (s *slot) kill() {
	if s.group != nil {
		s.group.Kill()
	}
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
	}
}

// stop kills the run's processes and reaps the init. Idempotent.
func (s *slot) stop() {
	s.kill()
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Wait()
		s.cmd.Process = nil
	}
}

// ScratchBytes is the size of a run's writable space for a memory limit: half of
// it, so that filling the disk ends in ENOSPC for the program while the
// interpreter still has the other half, not in an OOM kill.
func ScratchBytes(memoryBytes int64) int64 { return memoryBytes / 2 }

func (l *Launcher) prepareSpec(root *rootfs.Root, memoryBytes int64) *prepareSpec {
	return &prepareSpec{
		Scratch:      l.scratch,
		ScratchBytes: ScratchBytes(memoryBytes),
		Lower:        root.Lower,
		Binds:        root.Binds,
		UID:          l.cfg.UID,
		GID:          l.cfg.GID,
		InitUID:      l.cfg.InitUID,
		InitGID:      l.cfg.InitGID,
		Hostname:     DefaultHostname,
		Rlimits:      defaultRlimits(),
		Seccomp:      l.filter,
	}
}

func runSpecOf(spec Spec, root *rootfs.Root) *runSpec {
	script := "/sandbox/" + spec.Language.ScriptName()
	return &runSpec{
		ScriptPath: script,
		Code:       []byte(spec.Code),
		Argv:       root.Argv(script),
		Env:        Environ(spec.Env),
	}
}

// brigEnv are the names brig sets in every run; a request can't override them.
var brigEnv = map[string]string{
	"PATH":    "/usr/local/bin:/usr/bin:/bin",
	"HOME":    "/sandbox",
	"USER":    "sandbox",
	"LOGNAME": "sandbox",
	"TMPDIR":  "/tmp",
	"LANG":    "C.UTF-8",
}

// ReservedEnv reports whether name is one brig sets itself.
func ReservedEnv(name string) bool {
	_, ok := brigEnv[name]
	return ok
}

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

// ValidateEnv checks a request's environment against API.md: at most MaxEnv
// names of [A-Za-z_][A-Za-z0-9_]*, none of them brig's own, no NUL in a value.
func ValidateEnv(env map[string]string) error {
	if len(env) > MaxEnv {
		return fmt.Errorf("%d environment variables; at most %d are allowed", len(env), MaxEnv)
	}
	for k, v := range env {
		if !validEnvName(k) {
			return fmt.Errorf("environment variable name %q: use letters, digits and '_', not starting with a digit", k)
		}
		if ReservedEnv(k) {
			return fmt.Errorf("environment variable %s is set by brig itself; the reserved names are %s", k, strings.Join(reservedNames(), ", "))
		}
		if strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("environment variable %s: the value may not contain a NUL character", k)
		}
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

func reservedNames() []string {
	names := make([]string, 0, len(brigEnv))
	for k := range brigEnv {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// Run runs spec in a fresh sandbox and returns its result. Every way the run can
// end is in the result (a sandbox that could not be built is reason internal); the
// error is for a spec that is not valid. Cancelling ctx stops the run (reason
// stopped).
func (l *Launcher) Run(ctx context.Context, spec Spec) (*api.Result, error) {
	begin := time.Now()
	if err := validateSpec(spec); err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	l.active.Add(1)
	l.mu.Unlock()
	defer l.active.Done()
	res := &api.Result{
		Language: string(spec.Language),
		State:    api.StateFinished,
		Packages: []api.PackageResult{},
		Network:  api.NetworkReport{Mode: api.NetworkNone, Connections: []api.Connection{}},
	}
	internal := func(format string, args ...any) (*api.Result, error) {
		res.Message = fmt.Sprintf(format, args...)
		finish(res, api.ReasonInternal)
		res.Timing.TotalMS = time.Since(begin).Milliseconds()
		return res, nil
	}
	root, err := l.cfg.Rootfs.Root(spec.Language)
	if err != nil {
		return internal("the %s rootfs is not available: %v", spec.Language, err)
	}
	s, ready, err := l.take(root, spec.MemoryBytes)
	if err != nil {
		return internal("could not prepare a sandbox: %v", err)
	}
	defer l.release(s)
	if !ready {
		// The init's own start is not the run's CPU (a pooled init's baseline
		// was read when it became ready).
		if s.baseline, err = s.group.Usage(); err != nil {
			return internal("reading the run's cgroup: %v", err)
		}
	}
	// The init reads the whole spec before it acts on it, so this write does not
	// depend on the init making progress beyond reading.
	err = json.NewEncoder(s.spec).Encode(runSpecOf(spec, root))
	s.spec.Close()
	s.spec = nil
	if err != nil {
		return internal("sending the spec to the sandbox init: %v", err)
	}

	stdout := NewOutput(api.MaxStdoutChars, spec.OnStdout)
	stderr := NewOutput(api.MaxStderrChars, spec.OnStderr)
	var drained sync.WaitGroup
	drained.Add(2)
	go func() { defer drained.Done(); stdout.Drain(s.stdout) }()
	go func() { defer drained.Done(); stderr.Drain(s.stderr) }()

	ended := l.supervise(ctx, spec, s, ready, res, begin)

	// Every process of the run is killed: the pipes reach EOF as they die.
	waitTimeout(&drained, drainGrace)
	res.Stdout, res.StdoutTruncated = stdout.Text()
	res.Stderr, res.StderrTruncated = stderr.Text()
	usage, uerr := s.group.Usage()
	if uerr != nil {
		l.log.Warn("reading the run's usage", "err", uerr)
	}
	if uerr == nil {
		res.Usage.CPUMS = (usage.CPU - s.baseline.CPU).Milliseconds()
		res.Usage.PeakMemoryBytes = usage.PeakMemoryBytes
	}
	l.classify(res, ended, usage, spec)
	res.Timing.TotalMS = time.Since(begin).Milliseconds()
	return res, nil
}

// ending is how supervise saw the run end.
type ending struct {
	setupErr *message           // the init failed a step
	started  bool               // the program was started
	ws       syscall.WaitStatus // the program's wait status, when exited
	exited   bool
	timedOut bool
	stopped  bool
	lost     bool // the init died without reporting (OOM-killed, or a defect)
}

// supervise waits for the program to start and end, enforcing the deadline, and
// kills the sandbox (the init, which takes its pid namespace with it) when it
// returns.
func (l *Launcher) supervise(ctx context.Context, spec Spec, s *slot, ready bool, res *api.Result, begin time.Time) (e ending) {
	defer s.kill()
	setup := time.NewTimer(setupTimeout)
	defer setup.Stop()
	var deadline <-chan time.Time
	var started time.Time
	for {
		select {
		case m, ok := <-s.msgs:
			switch {
			case m.Kind == msgReady && !ready:
				ready = true
			case !ok:
				e.lost = true
				return e
			case m.Kind == msgError:
				e.setupErr = &m
				return e
			case m.Kind == msgStarted:
				started = time.Now()
				e.started = true
				setup.Stop()
				res.Timing.StartMS = started.Sub(begin).Milliseconds()
				t := time.NewTimer(spec.Timeout)
				defer t.Stop()
				deadline = t.C
				if spec.OnStart != nil {
					spec.OnStart()
				}
			case m.Kind == msgExit:
				res.Usage.WallMS = time.Since(started).Milliseconds()
				e.exited, e.ws = true, syscall.WaitStatus(m.WaitStatus)
				return e
			}
		case <-deadline:
			res.Usage.WallMS = time.Since(started).Milliseconds()
			e.timedOut = true
			return e
		case <-setup.C:
			e.setupErr = &message{Kind: msgError, Step: "start", Error: fmt.Sprintf("the program had not started after %s", setupTimeout)}
			return e
		case <-ctx.Done():
			if !started.IsZero() {
				res.Usage.WallMS = time.Since(started).Milliseconds()
			}
			e.stopped = true
			return e
		}
	}
}

// classify turns how the run ended into exit code, signal, reason and message.
func (l *Launcher) classify(res *api.Result, e ending, usage cgroup.Usage, spec Spec) {
	oom := usage.OOMKills > 0
	switch {
	case e.setupErr != nil && e.started:
		res.Message = fmt.Sprintf("the sandbox's init failed (step %q: %s) after the program started; the run was killed", e.setupErr.Step, e.setupErr.Error)
		finish(res, api.ReasonInternal)
	case e.setupErr != nil:
		res.Message = fmt.Sprintf("the sandbox could not be built (step %q: %s); the program did not run", e.setupErr.Step, e.setupErr.Error)
		finish(res, api.ReasonInternal)
	case e.timedOut:
		res.Signal = "SIGKILL"
		res.Message = fmt.Sprintf("the program ran longer than its time limit of %s and was killed", spec.Timeout)
		finish(res, api.ReasonTimeout)
	case e.stopped:
		res.Signal = "SIGKILL"
		res.Message = "the run was stopped before the program ended"
		finish(res, api.ReasonStopped)
	case e.lost && oom:
		res.Signal = "SIGKILL"
		res.Message = memoryMessage(spec)
		finish(res, api.ReasonMemory)
	case e.lost:
		res.Message = "the sandbox init ended without reporting the program's status"
		finish(res, api.ReasonInternal)
	case e.ws.Exited() && e.ws.ExitStatus() == 0:
		code := 0
		res.ExitCode = &code
		finish(res, api.ReasonNone)
	case e.ws.Exited():
		code := e.ws.ExitStatus()
		res.ExitCode = &code
		if oom {
			res.Message = memoryMessage(spec)
			finish(res, api.ReasonMemory)
			return
		}
		res.Message = fmt.Sprintf("the program exited with code %d", code)
		finish(res, api.ReasonError)
	default:
		sig := e.ws.Signal()
		res.Signal = unix.SignalName(sig)
		if oom {
			res.Message = memoryMessage(spec)
			finish(res, api.ReasonMemory)
			return
		}
		res.Message = fmt.Sprintf("the program was killed by %s", res.Signal)
		finish(res, api.ReasonError)
	}
}

func memoryMessage(spec Spec) string {
	return fmt.Sprintf("the program used more than its memory limit of %d MiB and was killed (the cgroup reports an OOM kill)", spec.MemoryBytes>>20)
}

// finish sets status, reason and outcome for a run without network.
func finish(res *api.Result, reason api.Reason) {
	res.State = api.StateFinished
	res.Reason = reason
	res.Status = api.StatusFailed
	if reason == api.ReasonNone {
		res.Status = api.StatusCompleted
	}
	res.Outcome = api.OutcomeOf(reason, res.Network.Mode)
}

// release removes a finished run's sandbox in the background: its processes are
// already dead (supervise stopped it); what is left is closing pipes and removing
// the cgroup, which the result does not wait for.
func (l *Launcher) release(s *slot) {
	l.active.Add(1) // within Run's own count, so never from zero during Close
	go func() {
		defer l.active.Done()
		s.discard()
	}()
}

// readMessages decodes the init's status pipe into msgs and closes msgs at EOF.
func readMessages(f *os.File, msgs chan<- message) {
	defer close(msgs)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m message
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			msgs <- m
		}
	}
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// ErrInvalidSpec is returned by Run for a spec outside the bounds of API.md.
var ErrInvalidSpec = errors.New("invalid run spec")

func validateSpec(s Spec) error {
	for _, c := range []struct {
		ok  bool
		msg string
	}{
		{s.Language == rootfs.Python || s.Language == rootfs.JavaScript, fmt.Sprintf("language %q is not python or javascript", s.Language)},
		{s.Code != "", "the code is empty"},
		{utf8.RuneCountInString(s.Code) <= api.MaxCodeChars, fmt.Sprintf("the code is longer than %d characters", api.MaxCodeChars)},
		{s.Timeout >= api.MinTimeoutSeconds*time.Second && s.Timeout <= api.MaxTimeoutSeconds*time.Second, fmt.Sprintf("the timeout %s is outside 1s to 300s", s.Timeout)},
		{s.MemoryBytes >= api.MinMemoryMiB<<20 && s.MemoryBytes <= api.MaxMemoryMiB<<20, fmt.Sprintf("the memory limit %d MiB is outside 128 to 2048 MiB", s.MemoryBytes>>20)},
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
