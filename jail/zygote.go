package jail

import (
	"cmp"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/jail/pid1"
	"github.com/brig-sandbox/brig/rootfs"
)

// A Python zygote: one interpreter per root, started by the supervisor and
// never touched by a run, which forks the program of each warm Python sandbox.
// A warm sandbox's interpreter then costs a fork and its joining the sandbox,
// not an interpreter start (about 8 ms of CPU here, most of a short run's).
//
// The zygote (zygote.py) runs as host root in the host's pid namespace, in a
// sandbox's root made read-only by an init of its own (zygoteInit), and reads
// nothing but this file's requests: ids, and descriptors. For each prepared
// sandbox (a cold one: its init has built the root and waits) it enters the
// sandbox's pid namespace for its children, forks, and returns to its own. The
// child, in the sandbox's pid namespace under the sandbox's init, then joins
// the rest as the init's spawnInUserNS starts a cold run's program:
//
//  1. the supervisor moves it into the run's cgroups (Group.Attach);
//  2. it enters the init's mount, network, UTS, IPC and cgroup namespaces,
//     sets the run's rlimits, drops its groups, sets its euid to the run's
//     host id and makes its own user namespace (owned by that id);
//  3. the supervisor writes the namespace's id maps, as the init does for a
//     cold run (0 to the init's host id, 1000 to the program's);
//  4. it starts a session, empties its bounding set, becomes uid and gid 1000,
//     drops every capability, takes the run's descriptors (/dev/null, the
//     output pipes, its socket as 3, nothing else), moves to /sandbox, sets
//     no_new_privs and stacks its filter on the zygote's, which it inherited
//     (zygoteConfig.ZygoteFilter);
//  5. it says it is ready, and waits, as a warm sandbox's interpreter does,
//     for its run on descriptor 3 (warm.go).
//
// When the run comes, the supervisor writes it on the child's socket: the
// program, which the child writes at its script path as the program's own
// file, and the environment. The program is the zygote's child, not the
// init's: the zygote reports its exit status on the control socket. The init
// stays the pid namespace's pid 1 (orphans are its); it has nothing to do for
// the run, and hardens itself as soon as the root is built.
//
// A zygote serves Config.ZygoteRuns forks or ZygoteAge, whichever ends first, and is
// then replaced: its children share its address-space layout and its str hash
// seed, which must not stay fixed for long. Each child reseeds `random` (the
// fork hooks of os.fork) and the rest of the process's randomness comes from
// the kernel.

//go:embed zygote.py
var zygoteSource string

// landlockABI is the kernel's Landlock ABI version, or an error where it has
// none (not built, or not in the lsm= list).
func landlockABI() (int, error) {
	const createRulesetVersion = 1 << 0
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, createRulesetVersion)
	if errno != 0 {
		return 0, errno
	}
	return int(abi), nil
}

// CheckWarmPython says whether a Python zygote can keep its executable from
// its children (zygote.py's _landlock: Landlock's ABI 2). It always passes:
// without it the zygote does not start and Python runs cold.
func CheckWarmPython() Check {
	c := Check{Name: "warm python", OK: true}
	abi, err := landlockABI()
	if err == nil && abi >= 2 {
		c.Detail = fmt.Sprintf("Landlock ABI %d: a zygote's children are kept from its executable", abi)
		return c
	}
	c.Warn = true
	c.Detail = fmt.Sprintf("Landlock ABI %d (%v): no zygote starts, Python runs cold", abi, err)
	if err == nil {
		c.Detail = fmt.Sprintf("Landlock ABI %d: no zygote starts, Python runs cold", abi)
	}
	c.Hint = "warm Python needs Landlock's ABI 2: Linux 5.19 or later with landlock in the lsm= list; or turn warm Python off to say that you mean it"
	return c
}

// DefaultZygoteRuns and DefaultZygoteAge are Config.ZygoteRuns' and
// ZygoteAge's zero values. The age is the bound that keeps a layout and a
// seed from staying for long; the runs bound a burst: at 1,000 a zygote lives
// about 10 s at 100 runs/s. (At 200, its replacement's start, about 100 ms of
// CPU with its sandbox, cost a warm run at C=2 8 % of its CPU: README, Warm
// starts.)
const (
	DefaultZygoteRuns = 1000
	DefaultZygoteAge  = time.Minute
)

const (
	// zygoteTimeout bounds a zygote's start and each of its replies.
	zygoteTimeout = 10 * time.Second
)

// zygotePreload are the modules a zygote imports before it forks: the
// standard library that short programs most import, so that their import
// costs a run nothing. A run sees them in sys.modules.
var zygotePreload = []string{
	"abc", "argparse", "base64", "bisect", "collections", "contextlib", "copy", "csv",
	"dataclasses", "datetime", "decimal", "enum", "fractions", "functools", "glob",
	"hashlib", "heapq", "io", "itertools", "json", "logging", "math", "operator",
	"pathlib", "pprint", "random", "re", "shutil", "signal", "statistics", "string",
	"struct", "subprocess", "tempfile", "textwrap", "threading", "time", "traceback",
	"types", "typing", "uuid", "warnings", "weakref",
}

// zygote is one running zygote process and its control socket.
type zygote struct {
	cmd  *exec.Cmd
	conn *net.UnixConn
	born time.Time
	// runs and age are its bounds (Config.ZygoteRuns and ZygoteAge).
	runs int
	age  time.Duration
	// copies are the interpreter copies of its sandbox (copiesFor): it runs
	// the interpreter they were made from, and is replaced once they are no
	// longer its root's (zygoteFor).
	copies []pid1.Copy
	// mu serialises fork requests; forks counts them.
	mu    sync.Mutex
	forks atomic.Int64
	// replies carries the zygote's answers to fork requests, in order.
	replies chan zygoteReply
	// exits has, per forked pid, the channel its wait status goes to; guarded
	// by emu. A channel is closed without a value when the zygote died first.
	emu   sync.Mutex
	exits map[int]chan uint32
	// dead is closed once the control socket is gone.
	dead chan struct{}
	// users counts the forks zygoteFor has handed it out for and that are
	// not made yet, and retiring is set once it is replaced; both guarded by
	// Launcher.zmu.
	users    int
	retiring bool
	// stderr has what the zygote printed, for errors.
	stderr *limitedWriter
	// modules are the top-level names of the modules it had imported when
	// it was ready (zygoteReply.Modules).
	modules map[string]bool
	// pinned is how many pages the zygote pinned (zygote.py's _pin), and
	// hugeCode how many bytes of its code it mapped on huge pages
	// (_huge_code), hugeCodeError why no more.
	pinned, hugeCode int
	hugeCodeError    string
	// pinTrial is what its pin trial measured, if it made one.
	pinTrial *pinFigures
	// killed is set once kill has ended it, and ended is called once it has
	// ended and been reaped (read), which closes reaped then.
	killed atomic.Bool
	ended  func()
	reaped chan struct{}
}

type zygoteReply struct {
	Pid    int    `json:"pid"`
	Error  string `json:"error"`
	Exit   *int   `json:"exit"`
	Status uint32 `json:"status"`
	Ready  bool   `json:"ready"`
	// Pinned is how many pages of its memory a ready zygote pinned, so
	// that its forks copy them at once; PinError why it pinned none.
	Pinned   int    `json:"pinned"`
	PinError string `json:"pin_error"`
	// PinTrial is what a zygote started with pinTrial measured.
	PinTrial *pinFigures `json:"pin_trial"`
	// HugeCode is how many bytes of its code a ready zygote mapped on huge
	// pages, which its children share; HugeCodeError why not all it could.
	HugeCode      int    `json:"huge_code"`
	HugeCodeError string `json:"huge_code_error"`
	// Modules are the top-level names of the modules a ready zygote had
	// imported that a package layer could shadow (zygote.py's _module_names).
	Modules []string `json:"modules"`
}

// zygoteConfig is the first message a zygote reads.
type zygoteConfig struct {
	Preload []string    `json:"preload"`
	Rlimits [][3]uint64 `json:"rlimits"`
	LastCap int         `json:"last_cap"`
	// PrepareNice is the nice value a child takes first thing, as a cold
	// pooled init has prepareNice from the spawner's thread: its joining of a
	// pooled sandbox takes CPU from no run. take sets it back to 0 (setNice).
	PrepareNice int `json:"prepare_nice"`
	// ZygoteFilter is the filter the zygote loads before its first fork
	// (seccomp.Zygote), which its children inherit compiled, and Filter the
	// one a child stacks on it (seccomp.ZygoteChild) once it has joined its
	// sandbox: the two give Default's verdicts
	// (seccomp's TestZygoteStackedIsDefault), and a child's load is 60
	// instructions instead of Default's 1385 (0.10 ms of its CPU against 0.53:
	// bench/measure/filter_load.py). Without a ZygoteFilter (a Config.Filter
	// of the caller's), Filter is the program's whole filter.
	ZygoteFilter string `json:"zygote_filter"`
	Filter       string `json:"filter"`
	// ProgramFilter is the filter a child stacks last, once it has shown its
	// run's environment (zygote.py's _show_exec, whose PR_SET_MM_MAP Default
	// refuses) and before its program starts (seccomp.ZygoteProgram); empty
	// with no ZygoteFilter.
	ProgramFilter string `json:"program_filter"`
	// PinMaxPages bounds the memory the zygote pins (zygote.py's _pin):
	// each of its children holds a copy of it, charged to the service.
	PinMaxPages int `json:"pin_max_pages"`
	// PinMode is how the zygote decides to pin: pinTrial, pinOn, pinHot or pinOff.
	PinMode string `json:"pin_mode"`
	// PinAllMargin is zygotePinAllMargin.
	PinAllMargin float64 `json:"pin_all_margin"`
	// HugeCode has the zygote map its code on huge pages (zygote.py's
	// _huge_code; zygoteHugeCode).
	HugeCode bool `json:"huge_code"`
}

// zygoteHugeCode turns on the zygote's mapping of its code on huge pages. A
// variable for tests.
var zygoteHugeCode = true

// The zygote's pin modes (zygoteConfig.PinMode).
const (
	// pinTrial has the zygote fork a few children with its memory pinned, a
	// few with only the pages a probe child wrote pinned, and a few with it
	// shared, and keep whichever cost least CPU, or its memory pinned where
	// that cost at most zygotePinAllMargin times the least (zygote.py's
	// _verdict): the
	// first zygote of each rootfs does, and the Launcher passes its verdict
	// on to the zygotes that follow (pinOn, pinHot or pinOff).
	pinTrial = "trial"
	pinOn    = "on"
	pinHot   = "hot"
	pinOff   = "off"
)

// pinFigures is a pin trial's figures: the CPU, in microseconds, of a fork
// and its child's short program, with the zygote's memory pinned, with the
// pages a probe child wrote pinned (0 if it wrote none), and shared; and
// which of "pinned", "hot" and "shared" it kept.
type pinFigures struct {
	PinnedUS int    `json:"pinned_us"`
	HotUS    int    `json:"hot_us"`
	SharedUS int    `json:"shared_us"`
	Kept     string `json:"kept"`
}

// pinModes is the pin mode a trial's verdict (pinFigures.Kept) gives the
// zygotes that follow.
var pinModes = map[string]string{"pinned": pinOn, "hot": pinHot, "shared": pinOff}

// zygotePinAllMargin is how much more than the cheapest way a pin trial's
// figure for pinning everything may be and still be kept (zygote.py's
// _verdict). The trial's children write about the pages the probe wrote,
// which the 'hot' pins cover, so the trial rates those pins about as well as
// pinning everything; a sandboxed child writes many more of the zygote's
// pages, and each one the 'hot' pins missed is a fault. The figures that set
// it, from two days' machines, are in the README (Warm starts) and
// TestZygotePinVerdict.
const zygotePinAllMargin = 1.5

// zygotePinTrialMsg is the log line of a pin trial's figures and verdict.
const zygotePinTrialMsg = "a Python zygote measured its forks with its memory pinned, with the pages a child writes pinned, and shared, and keeps the cheapest for this rootfs, or its memory pinned where that costs at most pinned_margin times the cheapest"

// zygotePinMode, when set, is every zygote's PinMode, with no trial. A
// variable for tests.
var zygotePinMode = ""

// zygotePinMaxBytes is the most memory a zygote pins; one with more (a
// rootfs whose preloads import much more than the standard library's) pins
// none, and says why. A zygote of the host's Python 3.11 pins about 10 MiB.
// A variable for tests.
var zygotePinMaxBytes = 64 << 20

// zygoteScratchBytes is the size of a zygote's scratch tmpfs: its root is
// read-only, so the overlay's upper layer stays empty.
const zygoteScratchBytes = 1 << 20

// zygoteLoader is the zygote's script, which its init writes at
// pid1.WarmBootPath (PrepareSpec.WarmBoot): it names the descriptors for
// zygote.py (CTL, PIDNS, SRC, PROC) and reads its source from
// pid1.ZygoteSourceFD. The zygote is started as `python3 -u
// /sandbox/.brg.js`, a command line exactly as long as a cold run's `python3
// -u /sandbox/main.py`, which its children rewrite in place (_retitle): their
// /proc/self/cmdline is then a cold run's, where the `python3 -u -c LOADER`
// of the builds until 2026-12-05 left it padded with NULs. (Python runs a
// script whatever its name ends in.) The loader first undoes what starting
// from a script gives a process and `-c` does not, so that the zygote runs as
// it did: sys.path's first entry the empty string (not /sandbox, whose
// finder a child would find cached), sys.argv's -c, no importer cached for
// the script, and no __file__ or __cached__ in __main__.
var zygoteLoader = fmt.Sprintf("import os, sys; sys.path[0], sys.argv[0] = '', '-c'; "+
	"del sys.path_importer_cache[__file__], __file__, __cached__; CTL, PIDNS, SRC, PROC = %d, %d, %d, %d; "+
	"exec(compile(b''.join(iter(lambda: os.read(SRC, 65536), b'')), '<brig zygote>', 'exec'))\n",
	pid1.ZygoteCtlFD, pid1.ZygotePidnsFD, pid1.ZygoteSourceFD, pid1.ZygoteProcFD)

// extraFiles is exec.Cmd.ExtraFiles for files by their descriptor number in
// the child (3 and on; a gap is a descriptor the child does not get).
func extraFiles(byFD map[int]*os.File) []*os.File {
	var files []*os.File
	for fd, f := range byFD {
		if f == nil {
			continue
		}
		for len(files) <= fd-3 {
			files = append(files, nil)
		}
		files[fd-3] = f
	}
	return files
}

// startZygote starts a zygote for root and waits until it has imported its
// preload and is ready to fork. It runs in a root built as a sandbox's
// (zygoteInit), so that it imports what a run's interpreter would, in
// network, UTS and IPC namespaces of its own, and in the host's pid
// namespace, from which it enters the sandboxes'.
func (l *Launcher) startZygote(root *rootfs.Root, cfg zygoteConfig) (_ *zygote, retErr error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("making the zygote's socket: %w", err)
	}
	parent, child := os.NewFile(uintptr(fds[0]), "zygote"), os.NewFile(uintptr(fds[1]), "zygote-child")
	defer child.Close()
	defer parent.Close() // FileConn dups it
	pidns, err := os.Open("/proc/self/ns/pid")
	if err != nil {
		return nil, err
	}
	defer pidns.Close()
	// The zygote's root has no proc of the host's pid namespace, where the
	// zygote lives: it reads its own maps, stat and auxv through this
	// (zygote.py's _pin and _mm_map).
	proc, err := os.OpenFile("/proc", os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer proc.Close()
	specR, specW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer specR.Close()
	defer specW.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer statusR.Close()
	defer statusW.Close()
	sourceR, sourceW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer sourceR.Close()
	defer sourceW.Close()
	z := &zygote{
		born:    time.Now(),
		replies: make(chan zygoteReply, 1),
		exits:   map[int]chan uint32{},
		dead:    make(chan struct{}),
		reaped:  make(chan struct{}),
		stderr:  &limitedWriter{n: 4096},
	}
	// A zygote that ends unasked (killed from outside, crashed) takes every
	// sandbox it forked with it: their pools replace them now, not a run at
	// a time, and the next preparation starts a new zygote (zygoteFor).
	z.ended = func() {
		// Asked: killed by the launcher, retired (it exits 0 once its last
		// child has), or the launcher closing, whose spawner thread's end
		// kills it (its parent-death signal) before closeZygotes does (every
		// stop had logged it as a crash: the review of 2026-12-05).
		l.mu.Lock()
		closing := l.closed
		l.mu.Unlock()
		l.zmu.Lock()
		retired := z.retiring && z.cmd.ProcessState.Success()
		l.zmu.Unlock()
		if closing || retired || z.killed.Load() {
			return
		}
		l.deaths.zygotes.Add(1)
		l.log.Warn("a Python zygote ended while it served; the warm sandboxes it forked are replaced, by a new zygote's",
			"status", z.cmd.ProcessState.String(), "stderr", z.stderr.String())
		l.pokeWarm(rootfs.Python)
	}
	cp := l.copiesFor(root)
	z.copies = cp
	var copiesFile *os.File
	if len(cp) > 0 {
		copiesFile = l.copies.mnt
	}
	z.cmd = &exec.Cmd{
		Path: l.cfg.InitPath,
		Args: []string{"brig", pid1.ZygoteInitArg},
		Env:  []string{"GOMAXPROCS=1"},
		// A pipe, not /dev/null: the zygote's stdio objects are its
		// children's, and a run's stdout is a pipe, not seekable.
		Stdout: z.stderr,
		Stderr: z.stderr,
		ExtraFiles: extraFiles(map[int]*os.File{
			pid1.SpecFD: specR, pid1.StatusFD: statusW, // the init's
			pid1.ZygoteCtlFD: child, pid1.ZygotePidnsFD: pidns, pid1.ZygoteSourceFD: sourceR,
			pid1.ZygoteProcFD: proc, pid1.CopiesFD: copiesFile,
		}),
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: unix.CLONE_NEWNS | unix.CLONE_NEWNET | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC,
			Pdeathsig:  syscall.SIGKILL,
			Setpgid:    true,
		},
	}
	// From the spawner's thread, which lives as long as the Launcher: the
	// parent-death signal fires when the thread that started it exits.
	started := make(chan error, 1)
	select {
	case l.onSpawner <- func() { started <- z.cmd.Start() }:
	case <-l.done:
		return nil, ErrClosed
	}
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting the zygote's init: %w", err)
	}
	l.markOOMVictim(z.cmd.Process.Pid) // every warm Python program inherits it
	// The spawner's thread prepares sandboxes at a low priority, which the
	// zygote, and so every warm Python program, would inherit.
	if err := unix.Setpriority(unix.PRIO_PROCESS, z.cmd.Process.Pid, 0); err != nil {
		z.cmd.Process.Kill()
		z.cmd.Wait()
		return nil, fmt.Errorf("setting the zygote's priority: %w", err)
	}
	defer func() {
		if retErr != nil {
			z.cmd.Process.Kill()
			z.cmd.Wait()
		}
	}()
	// The zygote's ends: kept here, they would hide its death (no EOF).
	specR.Close()
	statusW.Close()
	sourceR.Close()
	child.Close()
	pidns.Close()
	proc.Close()
	// The source is written before the zygote exists, which reads it to EOF:
	// the pipe's buffer is made to hold all of it (past the default 64 KiB
	// the write waited for a reader that was not there yet).
	if err := setPipeSize(sourceW, len(zygoteSource)); err != nil {
		return nil, fmt.Errorf("sizing the zygote's source pipe: %w", err)
	}
	if _, err := io.WriteString(sourceW, zygoteSource); err != nil {
		return nil, fmt.Errorf("sending the zygote its source: %w", err)
	}
	sourceW.Close()
	prep := pid1.PrepareSpec{
		Scratch:      l.scratch,
		ScratchBytes: zygoteScratchBytes,
		Lower:        root.Lower,
		View:         viewOf(root),
		Binds:        bindsOf(root),
		Empty:        l.empty,
		ZygoteArgv:   root.Argv(pid1.WarmBootPath),
		WarmBoot:     zygoteLoader,
		ZygoteEnv:    Environ(nil),
		Hostname:     DefaultHostname,
		Copies:       cp,
	}
	if err := pid1.WritePrepare(specW, &prep); err != nil {
		return nil, fmt.Errorf("sending the zygote's init its spec: %w", err)
	}
	specW.Close()
	// EOF: the init exec'd the zygote (its status pipe closes on exec).
	statusR.SetReadDeadline(time.Now().Add(zygoteTimeout))
	if b, _ := io.ReadAll(io.LimitReader(statusR, 4096)); len(b) > 0 {
		var m pid1.Message
		json.Unmarshal(b, &m)
		return nil, fmt.Errorf("building the zygote's root failed at step %q: %s", m.Step, m.Error)
	}
	c, err := net.FileConn(parent)
	if err != nil {
		return nil, err
	}
	z.conn = c.(*net.UnixConn)
	b, _ := json.Marshal(cfg)
	if _, err := z.conn.Write(b); err != nil {
		z.conn.Close()
		return nil, fmt.Errorf("configuring the zygote: %w", err)
	}
	z.conn.SetReadDeadline(time.Now().Add(zygoteTimeout))
	buf := make([]byte, 64<<10) // its ready message lists its modules
	n, err := z.conn.Read(buf)
	var r zygoteReply
	if err == nil {
		err = json.Unmarshal(buf[:n], &r)
	}
	if err != nil || !r.Ready {
		z.conn.Close()
		z.cmd.Process.Kill()
		z.cmd.Wait()
		return nil, fmt.Errorf("the zygote did not start (%v; it printed %q)", err, z.stderr.String())
	}
	z.conn.SetReadDeadline(time.Time{})
	z.pinned, z.pinTrial, z.hugeCode, z.hugeCodeError = r.Pinned, r.PinTrial, r.HugeCode, r.HugeCodeError
	z.modules = map[string]bool{}
	for _, m := range r.Modules {
		z.modules[m] = true
	}
	if r.PinError != "" {
		l.pinWarning.Do(func() {
			l.log.Warn("a zygote could not pin its memory: its children copy its pages at their first writes, which costs warm Python runs more CPU",
				"why", r.PinError)
		})
	}
	if r.HugeCodeError != "" && cfg.HugeCode {
		l.hugeCodeWarning.Do(func() {
			l.log.Warn("a zygote could not map its code on huge pages: its children touch it a page at a time, which costs warm Python runs more CPU",
				"why", r.HugeCodeError, "mapped_bytes", r.HugeCode)
		})
	}
	go z.read()
	return z, nil
}

// read dispatches the zygote's messages until its socket closes, then reaps it.
func (z *zygote) read() {
	buf := make([]byte, 4096)
	for {
		n, err := z.conn.Read(buf)
		if err != nil || n == 0 {
			break
		}
		var r zygoteReply
		if json.Unmarshal(buf[:n], &r) != nil {
			continue
		}
		if r.Exit != nil {
			z.emu.Lock()
			ch := z.exits[*r.Exit]
			delete(z.exits, *r.Exit)
			z.emu.Unlock()
			if ch != nil {
				ch <- r.Status
			}
			continue
		}
		if r.Pid > 0 {
			// Registered before the reply is handed on, so that an exit that
			// follows at once finds its channel.
			z.emu.Lock()
			z.exits[r.Pid] = make(chan uint32, 1)
			z.emu.Unlock()
		}
		z.replies <- r
	}
	// Its children's channels before dead: whoever has seen the zygote dead
	// finds every sandbox it forked dead too (took skips them), where a run
	// could take one in between and learn its program's exit from the
	// kernel's record alone (TestZygoteDeathFallsBack, once in a full run).
	z.emu.Lock()
	for pid, ch := range z.exits {
		close(ch)
		delete(z.exits, pid)
	}
	z.emu.Unlock()
	close(z.dead)
	z.conn.Close()
	z.cmd.Wait()
	if z.ended != nil {
		z.ended()
	}
	close(z.reaped)
}

// worn reports whether the zygote has served its time and must be replaced.
func (z *zygote) worn() bool {
	if z.exited() {
		return true
	}
	return z.forks.Load() >= int64(z.runs) || time.Since(z.born) >= z.age
}

// nearlyWorn reports whether the zygote has served three quarters of its
// time, when its successor starts (zygoteFor).
func (z *zygote) nearlyWorn() bool {
	return z.forks.Load() >= int64(z.runs)*3/4 || time.Since(z.born) >= z.age*3/4
}

// zygoteStart is a zygote being started ahead of its use: done is closed
// once z or err is set.
type zygoteStart struct {
	done chan struct{}
	z    *zygote
	err  error
}

// exited reports whether the zygote's control socket is gone.
func (z *zygote) exited() bool {
	select {
	case <-z.dead:
		return true
	default:
		return false
	}
}

// retire asks the zygote to exit once its last child has: it forks no more.
// The zygote tells it from a fork request by its lack of descriptors.
func (z *zygote) retire() {
	z.conn.Write([]byte(`{"retire":true}`))
}

// kill ends the zygote at once (its children are the sandboxes', which their
// discard kills).
func (z *zygote) kill() {
	z.killed.Store(true)
	z.conn.Close()
	z.cmd.Process.Kill()
	<-z.dead
}

// zygoteRequest is a fork request: the program's ids inside its namespace
// and the run's host id, which owns it.
type zygoteRequest struct {
	UID     int `json:"uid"`
	GID     int `json:"gid"`
	HostUID int `json:"host_uid"`
	// Path is the program's script path, the same for every Python run
	// (scriptPath): the child sets up what names it before it waits.
	Path string `json:"path"`
}

// fork asks for a child with descriptors fds (the init's pidfd, the child's
// end of its socket, its stdout and stderr) and returns its pid and the
// channel its wait status will come on.
func (z *zygote) fork(req zygoteRequest, fds []int) (int, <-chan uint32, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.forks.Add(1)
	b, _ := json.Marshal(req)
	if _, _, err := z.conn.WriteMsgUnix(b, unix.UnixRights(fds...), nil); err != nil {
		return 0, nil, fmt.Errorf("asking the zygote to fork: %w", err)
	}
	var r zygoteReply
	select {
	case r = <-z.replies:
	case <-z.dead:
		return 0, nil, fmt.Errorf("the zygote exited (it printed %q)", z.stderr.String())
	case <-time.After(zygoteTimeout):
		// Its answer, if it ever came, would be taken for the next
		// request's: a zygote that does not answer is not used again.
		z.cmd.Process.Kill()
		return 0, nil, errors.New("the zygote did not answer a fork request; it was killed")
	}
	if r.Error != "" {
		return 0, nil, fmt.Errorf("the zygote could not fork: %s", r.Error)
	}
	z.emu.Lock()
	ch := z.exits[r.Pid]
	z.emu.Unlock()
	if ch == nil { // it exited, and its status was dropped, before we got here
		ch = make(chan uint32)
		close(ch)
	}
	return r.Pid, ch, nil
}

// zygoteChild is a warm Python sandbox's program, forked by a zygote.
type zygoteChild struct {
	pid   int // in the host's pid namespace
	pidfd int
	// conn is the supervisor's end of the child's descriptor 3.
	conn *os.File
	// exit has the child's wait status; closed without one if the zygote died.
	exit <-chan uint32
	// dead is set once alive has seen the child end.
	dead bool
	// run is what the child reads once it is sandboxed: its program and
	// environment (setRun).
	run []byte
}

// setRun sets what handOver gives the child: the lengths of its environment
// and of the program's code (4 bytes each, little-endian), its whole
// environment (NAME=VALUE, each ended by a NUL; each name once, the first
// wins, as WarmEnv's), and the code, which it writes at its script path
// (zygoteRequest.Path); a run cut short fails the child. Not JSON:
// the child decodes it after the run has started, where json.loads cost 0.1
// to 0.3 ms on this machine's cold caches (zygote.py).
func (c *zygoteChild) setRun(rs *pid1.RunSpec) error {
	env, err := pid1.UniqueEnv(rs.Env)
	if err != nil {
		return err
	}
	n := 0
	for _, kv := range env {
		n += len(kv) + 1
	}
	b := binary.LittleEndian.AppendUint32(make([]byte, 0, 8+n+len(rs.Code)), uint32(n))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(rs.Code)))
	for _, kv := range env {
		if strings.IndexByte(kv, 0) >= 0 {
			return fmt.Errorf("environment entry %q holds a NUL", kv)
		}
		b = append(append(b, kv...), 0)
	}
	c.run = append(b, rs.Code...)
	return nil
}

// zygoteFor returns a running zygote for root, starting (or replacing) one
// where needed. A zygote's successor starts once it has served three
// quarters of its time, so that the fills do not wait for a zygote's start
// when it is replaced (50 to 57 ms of CPU for its python3 alone:
// bench/measure/zygote_start.py): the runs that came meanwhile found the warm
// pool empty and went cold.
func (l *Launcher) zygoteFor(root *rootfs.Root) (*zygote, error) {
	key := rootKey(root)
	l.zmu.Lock()
	defer l.zmu.Unlock()
	if l.zclosed {
		return nil, ErrClosed
	}
	l.retired = slices.DeleteFunc(l.retired, func(z *zygote) bool { return z.exited() })
	// A zygote started before its interpreter changed (a package upgrade)
	// is worn too: its children would run the old one.
	cps := l.copiesFor(root)
	if z := l.zygotes[key]; z != nil {
		if !z.worn() && slices.Equal(z.copies, cps) {
			if z.nearlyWorn() && l.znext[key] == nil {
				l.startSuccessor(key, root)
			}
			z.users++
			return z, nil
		}
		delete(l.zygotes, key)
		l.retired = append(l.retired, z)
		z.retiring = true
		if z.users == 0 {
			z.retire()
		}
	}
	var z *zygote
	if next := l.znext[key]; next != nil {
		delete(l.znext, key)
		<-next.done // started a while ago: done, as a rule
		if next.err == nil && !next.z.worn() && slices.Equal(next.z.copies, cps) {
			z = next.z
		} else if next.z != nil {
			next.z.kill()
		}
	}
	if z == nil {
		var err error
		if z, err = l.newZygote(root); err != nil {
			return nil, err
		}
	}
	if l.zygotes == nil {
		l.zygotes = map[string]*zygote{}
	}
	l.zygotes[key] = z
	z.users++
	return z, nil
}

// startSuccessor starts the zygote that will succeed the one serving key,
// in the background. Under zmu.
func (l *Launcher) startSuccessor(key string, root *rootfs.Root) {
	st := &zygoteStart{done: make(chan struct{})}
	if l.znext == nil {
		l.znext = map[string]*zygoteStart{}
	}
	l.znext[key] = st
	go func() {
		defer close(st.done)
		st.z, st.err = l.newZygote(root)
		if st.err != nil {
			l.log.Warn("starting a Python zygote ahead of its predecessor's replacement; the replacement will start its own", "err", st.err)
		}
	}()
}

// runRlimits are every run's rlimits, cold and warm, as brig wants them:
// pid1.DefaultRlimits, but for the tests of how a run's child reads them. A
// Launcher takes them at its start, under the process's hard limits
// (fitRlimits).
var runRlimits = pid1.DefaultRlimits

// newZygote starts a zygote for root with the Launcher's bounds.
func (l *Launcher) newZygote(root *rootfs.Root) (*zygote, error) {
	last, err := pid1.LastCap()
	if err != nil {
		return nil, err
	}
	cfg := zygoteConfig{
		Preload:       zygotePreload,
		LastCap:       last,
		PrepareNice:   prepareNice,
		Filter:        hex.EncodeToString(l.zygoteChildFilter),
		ZygoteFilter:  hex.EncodeToString(l.zygoteFilter),
		ProgramFilter: hex.EncodeToString(l.zygoteProgramFilter),
		PinMaxPages:   zygotePinMaxBytes / 4096,
		PinMode:       zygotePinMode,
		PinAllMargin:  zygotePinAllMargin,
		HugeCode:      zygoteHugeCode,
	}
	// By the rootfs alone: a package layer adds files, not pages the
	// zygote writes, so a layer's zygotes take the rootfs's verdict.
	key := root.Lower
	if cfg.PinMode == "" {
		l.pinMu.Lock()
		cfg.PinMode = cmp.Or(l.pinModes[key], pinTrial)
		l.pinMu.Unlock()
	}
	for _, r := range l.rlimits {
		cfg.Rlimits = append(cfg.Rlimits, [3]uint64{uint64(r.Resource), r.Cur, r.Max})
	}
	z, err := l.startZygote(root, cfg)
	if err != nil {
		return nil, err
	}
	l.pinMu.Lock()
	if l.zygoteModules == nil {
		l.zygoteModules = map[string]map[string]bool{}
	}
	l.zygoteModules[key] = z.modules
	l.pinMu.Unlock()
	if t := z.pinTrial; t != nil {
		mode := pinModes[t.Kept]
		if mode == "" || (mode == pinOff) != (z.pinned == 0) {
			return nil, fmt.Errorf("a Python zygote's pin trial kept %q with %d pages pinned", t.Kept, z.pinned)
		}
		l.pinMu.Lock()
		if l.pinModes == nil {
			l.pinModes = map[string]string{}
		}
		l.pinModes[key] = mode
		l.pinMu.Unlock()
		l.log.Info(zygotePinTrialMsg,
			"kept", t.Kept, "pinned_ms_per_fork", float64(t.PinnedUS)/1e3, "hot_ms_per_fork", float64(t.HotUS)/1e3,
			"shared_ms_per_fork", float64(t.SharedUS)/1e3, "pinned_margin", zygotePinAllMargin, "pages", z.pinned, "rootfs", root.Lower)
	}
	z.runs, z.age = l.cfg.ZygoteRuns, l.cfg.ZygoteAge
	if z.runs <= 0 {
		z.runs = DefaultZygoteRuns
	}
	if z.age <= 0 {
		z.age = DefaultZygoteAge
	}
	return z, nil
}

// zygoteDone says that a caller of zygoteFor has made its fork: a retiring
// zygote is told to retire once no fork is pending, since it exits as soon as
// it has retired and has no children.
func (l *Launcher) zygoteDone(z *zygote) {
	l.zmu.Lock()
	defer l.zmu.Unlock()
	z.users--
	if z.retiring && z.users == 0 {
		z.retire()
	}
}

// closeZygotes kills every zygote; the sandboxes, and so their children, are
// gone by then.
func (l *Launcher) closeZygotes() {
	l.zmu.Lock()
	zs := l.retired
	for _, z := range l.zygotes {
		zs = append(zs, z)
	}
	next := l.znext
	l.zygotes, l.znext, l.retired, l.zclosed = nil, nil, nil, true
	l.zmu.Unlock()
	for _, st := range next {
		<-st.done
		if st.z != nil {
			zs = append(zs, st.z)
		}
	}
	for _, z := range zs {
		z.kill()
	}
}

// forkWarm makes s, a prepared cold sandbox, a warm Python one: a zygote's
// child joins it and waits there for its run (see the top of this file).
func (l *Launcher) forkWarm(root *rootfs.Root, s *slot) (retErr error) {
	z, err := l.zygoteFor(root)
	if err != nil {
		return err
	}
	done := sync.OnceFunc(func() { l.zygoteDone(z) })
	defer done()
	pidfd, err := unix.PidfdOpen(s.cmd.Process.Pid, 0)
	if err != nil {
		return fmt.Errorf("opening the init's pidfd: %w", err)
	}
	defer unix.Close(pidfd)
	// The child joins the init's namespaces, made by the reaper itself in
	// one unshare (reaperCloneFlags): never the host's, were it asked before.
	ns, err := sandboxNamespace(s.cmd.Process.Pid, "mnt")
	if err != nil {
		return err
	}
	unix.Close(ns)
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	unix.SetNonblock(pair[0], true) // for read deadlines
	conn := os.NewFile(uintptr(pair[0]), "zygote-child")
	childEnd := os.NewFile(uintptr(pair[1]), "zygote-child-end")
	defer childEnd.Close()
	outR, outW, err := outputPipe(stdoutPipeBytes)
	if err != nil {
		conn.Close()
		return err
	}
	defer outW.Close()
	errR, errW, err := outputPipe(stderrPipeBytes)
	if err != nil {
		conn.Close()
		outR.Close()
		return err
	}
	defer errW.Close()
	// The program's output comes from these from now on; the init's own pipes
	// carry nothing more.
	s.stdout.Close()
	s.stderr.Close()
	s.stdout, s.stderr = outR, errR
	c := &zygoteChild{conn: conn, pidfd: -1}
	s.zchild = c
	c.pid, c.exit, err = z.fork(zygoteRequest{UID: rootfs.SandboxUID, GID: rootfs.SandboxGID, HostUID: s.ids.UID, Path: scriptPath(rootfs.Python)},
		[]int{pidfd, int(childEnd.Fd()), int(outW.Fd()), int(errW.Fd())})
	done()
	// The child holds its own copies now: without these, a child that dies
	// while joining is seen at once (EOF), and the output ends when it does.
	childEnd.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		return err
	}
	if c.pidfd, err = unix.PidfdOpen(c.pid, 0); err != nil {
		return fmt.Errorf("opening the zygote child's pidfd: %w", err)
	}
	conn.SetDeadline(time.Now().Add(zygoteTimeout))
	if err := s.group.Attach(c.pid); err != nil {
		return err
	}
	if err := c.say('g'); err != nil {
		return err
	}
	if err := c.expect('m'); err != nil {
		return err
	}
	for _, m := range []struct{ file, data string }{
		{"uid_map", fmt.Sprintf("0 %d 1\n%d %d 1\n", s.ids.InitUID, rootfs.SandboxUID, s.ids.UID)},
		{"gid_map", fmt.Sprintf("0 %d 1\n%d %d 1\n", s.ids.InitGID, rootfs.SandboxGID, s.ids.GID)},
	} {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", c.pid, m.file), []byte(m.data), 0); err != nil {
			return fmt.Errorf("writing the zygote child's %s: %w", m.file, err)
		}
	}
	if err := c.say('g'); err != nil {
		return err
	}
	if err := c.expect('r'); err != nil {
		return err
	}
	conn.SetDeadline(time.Time{})
	// The child's joining is the sandbox's preparation, not the run's CPU.
	s.baseline, err = s.group.CPU()
	return err
}

func (c *zygoteChild) say(b byte) error {
	if _, err := c.conn.Write([]byte{b}); err != nil {
		return fmt.Errorf("talking to the zygote child: %w", err)
	}
	return nil
}

// expect reads the child's next word, b, or the error it failed with.
func (c *zygoteChild) expect(b byte) error {
	buf := make([]byte, 1024)
	n, err := c.conn.Read(buf[:1])
	if err != nil || n != 1 {
		return fmt.Errorf("the zygote child ended while joining its sandbox (%v)", err)
	}
	if buf[0] == b {
		return nil
	}
	if buf[0] == 'e' {
		n, _ = c.conn.Read(buf)
		return fmt.Errorf("the zygote child could not join its sandbox: %s", buf[:n])
	}
	return fmt.Errorf("the zygote child said %q, not %q", buf[0], b)
}

// handOver gives the child its run, which starts the program.
func (c *zygoteChild) handOver() error {
	_, err := c.conn.Write(c.run)
	if cerr := c.conn.Close(); err == nil {
		err = cerr
	}
	c.conn = nil
	return err
}

// alive reports whether the child still waits for its run: neither it nor its
// zygote has died since it joined its sandbox. (It takes the exit status: a
// dead child's sandbox is only discarded.)
func (c *zygoteChild) alive() bool {
	if c.dead {
		return false
	}
	select {
	case <-c.exit:
		c.dead = true
		return false
	default:
		return true
	}
}

// gone is closed once the child has exited (its pidfd reads ready), at once
// when there is no pidfd to wait on.
func (c *zygoteChild) gone() <-chan struct{} {
	ch := make(chan struct{})
	fd := -1
	if c.pidfd >= 0 {
		fd, _ = unix.FcntlInt(uintptr(c.pidfd), unix.F_DUPFD_CLOEXEC, 0)
	}
	if fd < 0 {
		close(ch)
		return ch
	}
	go func() {
		defer close(ch)
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err != unix.EINTR {
				return
			}
		}
	}()
	return ch
}

// zygoteRecordWait is how long a run whose zygote died waits, once its
// program has exited, for the kernel's record of the exit, which is sent
// before the exit makes the pidfd ready: only a record lost (the watch's
// socket full) takes it.
const zygoteRecordWait = time.Second

// kill kills the child (a no-op once it is reaped) and closes what the
// supervisor holds of it.
func (c *zygoteChild) kill() {
	if c.pidfd >= 0 {
		unix.PidfdSendSignal(c.pidfd, unix.SIGKILL, nil, 0)
		unix.Close(c.pidfd)
		c.pidfd = -1
	}
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	mu sync.Mutex
	b  strings.Builder
	n  int
}

func (w *limitedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := w.n - w.b.Len(); room > 0 {
		w.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// setPipeSize makes the buffer of the pipe f writes to hold at least n bytes.
func setPipeSize(f *os.File, n int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var size int
	if cerr := rc.Control(func(fd uintptr) { size, err = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, n) }); cerr != nil {
		return cerr
	}
	if err == nil && size < n {
		err = fmt.Errorf("the pipe holds %d bytes, not %d", size, n)
	}
	return err
}
