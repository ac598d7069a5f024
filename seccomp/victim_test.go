//go:build linux && amd64

package seccomp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/seccomp/internal/victim"
	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/seccomp/bpf"
)

// The victim tests prove the kernel enforces the policy. The test binary re-runs
// itself as a victim process: TestMain sees envVictim, and instead of running
// tests the process reads the compiled program from fd 3 (as brig's init reads
// it from its pipe), sets no_new_privs, Loads it, and tries the forbidden thing,
// printing the outcome on stdout or dying. Seccomp with no_new_privs needs no
// privilege, so these tests run everywhere and never skip for want of root.
const (
	// envVictim names the victim to run: victimSyscall, victimInt80, victimExec
	// or victimInit.
	envVictim = "BRIG_SECCOMP_VICTIM"
	// envVictimArgs is the victim's argument, as JSON.
	envVictimArgs = "BRIG_SECCOMP_VICTIM_ARGS"
	// envNoFilter, when set, makes the victim skip loading the filter: the control
	// run that shows the kernel allows the thing without it.
	envNoFilter = "BRIG_SECCOMP_VICTIM_NO_FILTER"
)

const (
	victimSyscall = "syscall" // makes the raw call in envVictimArgs (a rawCall), prints its errno
	victimInt80   = "int80"   // calls getpid through int 0x80, prints the result or the fault
	victimHlt     = "hlt"     // executes HLT, which faults, and prints the fault
	victimExec    = "exec"    // execs the argv in envVictimArgs
	victimInit    = "init"    // does what brig's init does after the filter: threads, ForkExec, reap
	// victimThreads loads the filter itself, with Load or LoadThread as
	// envVictimArgs says, while a second thread exists, and reports what a denied
	// call gets on each thread.
	victimThreads = "threads"
	// victimCoreLimit sets RLIMIT_CORE to 1 before the filter, then tries to
	// lower it with setrlimit and prlimit64 and prints what it reads back.
	victimCoreLimit = "corelimit"
)

// rawCall is a system call for victimSyscall.
type rawCall struct {
	Nr   uintptr
	Args [6]uintptr
}

// programFD is where a victim finds the marshalled program.
const programFD = 3

const i386GetPID = 20 // __NR_getpid in the i386 table

func TestMain(m *testing.M) {
	if kind := os.Getenv(envVictim); kind != "" {
		os.Exit(runVictim(kind))
	}
	os.Exit(m.Run())
}

// runVictim is the victim process's main. It returns the exit code.
func runVictim(kind string) int {
	// no_new_privs and the filter are per thread until TSYNC copies them: stay on
	// one thread from the prctl to the exec.
	runtime.LockOSThread()
	// A victim that the filter kills must not leave a core file in the package
	// directory. 1 byte, as the jail sets, makes no core file either.
	core := unix.Rlimit{}
	if kind == victimCoreLimit {
		core = unix.Rlimit{Cur: 1, Max: 1}
	}
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &core); err != nil {
		if kind == victimCoreLimit {
			// Raising the hard limit needs CAP_SYS_RESOURCE: say so, the
			// test skips.
			fmt.Println("setup: setting RLIMIT_CORE to 1:", err)
			return 0
		}
		fmt.Fprintln(os.Stderr, "victim: setting RLIMIT_CORE:", err)
		return 2
	}
	if os.Getenv(envNoFilter) == "" && kind != victimThreads {
		if err := loadFromFD(programFD, bpf.Load); err != nil {
			fmt.Fprintln(os.Stderr, "victim:", err)
			return 2
		}
	}
	args := []byte(os.Getenv(envVictimArgs))
	switch kind {
	case victimSyscall:
		var c rawCall
		if err := json.Unmarshal(args, &c); err != nil {
			fmt.Fprintln(os.Stderr, "victim: decoding call:", err)
			return 2
		}
		_, _, errno := unix.RawSyscall6(c.Nr, c.Args[0], c.Args[1], c.Args[2], c.Args[3], c.Args[4], c.Args[5])
		fmt.Println(errnoOutcome(errno))
	case victimInt80:
		if err := catchFault(func() {
			r := victim.Int80(i386GetPID)
			fmt.Printf("int 0x80 getpid returned %d, pid %d\n", int32(r), os.Getpid())
		}); err != nil {
			fmt.Println("int 0x80 faulted:", err)
		}
	case victimHlt:
		if err := catchFault(victim.Hlt); err != nil {
			fmt.Println("hlt faulted:", err)
		}
	case victimCoreLimit:
		fmt.Println(lowerCoreLimit())
	case victimExec:
		var argv []string
		if err := json.Unmarshal(args, &argv); err != nil || len(argv) == 0 {
			fmt.Fprintln(os.Stderr, "victim: decoding argv:", argv, err)
			return 2
		}
		env := []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "HOME=" + os.TempDir(), "TMPDIR=" + os.TempDir()}
		err := syscall.Exec(argv[0], argv, env)
		fmt.Fprintln(os.Stderr, "victim: exec:", err)
		return 2
	case victimThreads:
		var mode string
		if err := json.Unmarshal(args, &mode); err != nil {
			fmt.Fprintln(os.Stderr, "victim: decoding mode:", err)
			return 2
		}
		if err := loadBesideThread(mode); err != nil {
			fmt.Fprintln(os.Stderr, "victim:", err)
			return 2
		}
	case victimInit:
		if err := actAsInit(); err != nil {
			fmt.Fprintln(os.Stderr, "victim:", err)
			return 2
		}
	default:
		fmt.Fprintln(os.Stderr, "victim: unknown kind", kind)
		return 2
	}
	return 0
}

// catchFault runs f and returns the fault it raised, if any. Without it the Go
// runtime treats a SIGSEGV the kernel sends for a general protection fault (as
// int 0x80 raises where i386 calls are off) as a fatal "unexpected fault"
// and exits 2, which victimRun could not tell from a broken victim.
func catchFault(f func()) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	f()
	return nil
}

func loadFromFD(fd uintptr, load func(Program) error) error {
	f := os.NewFile(fd, "seccomp-program")
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("reading program: %w", err)
	}
	prog, err := bpf.Unmarshal(b)
	if err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", err)
	}
	return load(prog)
}

// loadBesideThread starts a second OS thread, loads the filter on this one with
// Load (mode "process") or LoadThread (mode "thread"), then makes a denied call
// (unshare, with flags the kernel would reject as EINVAL) on both threads and
// prints the two errnos.
func loadBesideThread(mode string) error {
	load := map[string]func(Program) error{"process": bpf.Load, "thread": bpf.LoadThread}[mode]
	if load == nil {
		return fmt.Errorf("unknown mode %q", mode)
	}
	ready, call, result := make(chan struct{}), make(chan struct{}), make(chan syscall.Errno)
	go func() {
		// The caller holds the main thread, so this is another one, and it exists
		// before the filter is loaded.
		runtime.LockOSThread()
		close(ready)
		<-call
		_, _, errno := unix.RawSyscall(unix.SYS_UNSHARE, harmless, 0, 0)
		result <- errno
	}()
	<-ready
	if err := loadFromFD(programFD, load); err != nil {
		return err
	}
	_, _, mine := unix.RawSyscall(unix.SYS_UNSHARE, harmless, 0, 0)
	close(call)
	fmt.Printf("caller %s, other thread %s\n", errnoOutcome(mine), errnoOutcome(<-result))
	return nil
}

// actAsInit does, under the filter, what brig's init does after loading it: the
// Go runtime starts threads, the init starts the payload with syscall.ForkExec
// (clone with CLONE_VFORK|CLONE_VM) and reaps it with wait4. os/exec is run too,
// since it waits through pidfd_open, pidfd_send_signal and waitid.
func actAsInit() error {
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // a new OS thread: clone with the thread flags
			defer runtime.UnlockOSThread()
			time.Sleep(time.Millisecond)
		}()
	}
	wg.Wait()

	pid, err := syscall.ForkExec("/bin/sh", []string{"sh", "-c", "echo forkexec"}, &syscall.ProcAttr{
		Files: []uintptr{0, 1, 2},
	})
	if err != nil {
		return fmt.Errorf("ForkExec: %w", err)
	}
	var ws syscall.WaitStatus
	for {
		got, err := syscall.Wait4(pid, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || got != pid || !ws.Exited() || ws.ExitStatus() != 0 {
			return fmt.Errorf("wait4: pid %d status %v: %v", got, ws, err)
		}
		break
	}
	out, err := exec.Command("/bin/sh", "-c", "echo os/exec").Output()
	if err != nil {
		return fmt.Errorf("os/exec: %w", err)
	}
	fmt.Print(string(out))
	return nil
}

func errnoOutcome(errno syscall.Errno) string {
	if errno == 0 {
		return "errno 0"
	}
	return "errno " + unix.ErrnoName(errno)
}

var (
	sharedProgramOnce sync.Once
	sharedProgramB    []byte
	sharedProgramErr  error
)

// sharedProgram is the marshalled default program, compiled once for all victims.
func sharedProgram(tb testing.TB) []byte {
	tb.Helper()
	sharedProgramOnce.Do(func() {
		prog, err := Compile(Default())
		sharedProgramB, sharedProgramErr = prog.Marshal(), err
	})
	if sharedProgramErr != nil {
		tb.Fatalf("Compile(Default()): %v", sharedProgramErr)
	}
	return sharedProgramB
}

// victimRun runs a victim, with the default program on its fd 3 and loaded
// unless filter is false, and returns its outcome: its stdout, trimmed, if it
// exited 0, or "signal NAME" if a signal killed it. Anything else fails tb.
func victimRun(tb testing.TB, kind string, arg any, filter bool) string {
	tb.Helper()
	prog := sharedProgram(tb)
	argJSON, err := json.Marshal(arg)
	if err != nil {
		tb.Fatalf("encoding victim argument: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envVictim+"="+kind, envVictimArgs+"="+string(argJSON))
	if !filter {
		cmd.Env = append(cmd.Env, envNoFilter+"=1")
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Only a filtered victim gets the program: an unfiltered one never reads
	// it, and writing to a pipe it has closed by exiting would fail.
	var r, w *os.File
	if filter {
		if r, w, err = os.Pipe(); err != nil {
			tb.Fatalf("making program pipe: %v", err)
		}
		defer r.Close()
		defer w.Close()
		cmd.ExtraFiles = []*os.File{r} // fd 3 == programFD
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting victim: %v", err)
	}
	var werr error
	if filter {
		r.Close()
		_, werr = w.Write(prog)
		w.Close()
	}
	err = cmd.Wait()
	if werr != nil && err == nil {
		tb.Fatalf("writing program to victim: %v", werr)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return strings.TrimSpace(stdout.String())
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "signal " + unix.SignalName(ws.Signal())
		}
	}
	tb.Fatalf("victim %s: %v\nstdout:\n%s\nstderr:\n%s", kind, err, stdout.String(), stderr.String())
	return ""
}

// harmless is an argument that is a bad pointer, a bad descriptor and invalid
// flags at once, so that a call the filter wrongly let through would fail in the
// kernel rather than act.
const harmless = ^uintptr(0)

func allHarmless() [6]uintptr {
	return [6]uintptr{harmless, harmless, harmless, harmless, harmless, harmless}
}

func TestKernelEnforcesPolicy(t *testing.T) {
	testutil.CheckLeaks(t)
	type tc struct {
		name string
		call rawCall
		want string
	}
	tests := []tc{
		{name: "getpid allowed", call: rawCall{Nr: unix.SYS_GETPID}, want: "errno 0"},
		{name: "clone3 ENOSYS", call: rawCall{Nr: unix.SYS_CLONE3}, want: "errno ENOSYS"},
		{name: "unknown number ENOSYS", call: rawCall{Nr: 1000}, want: "errno ENOSYS"},
		{name: "x32 getpid killed", call: rawCall{Nr: x32Bit | unix.SYS_GETPID}, want: "signal SIGSYS"},
		{name: "ioctl TIOCSTI", call: rawCall{Nr: unix.SYS_IOCTL, Args: [6]uintptr{harmless, unix.TIOCSTI}}, want: "errno EPERM"},
		{name: "ioctl TIOCSTI with high bits", call: rawCall{Nr: unix.SYS_IOCTL, Args: [6]uintptr{harmless, 0xffffffff00000000 | unix.TIOCSTI}}, want: "errno EPERM"},
		{name: "ioctl TIOCLINUX", call: rawCall{Nr: unix.SYS_IOCTL, Args: [6]uintptr{harmless, unix.TIOCLINUX}}, want: "errno EPERM"},
		// Let through, the kernel refuses the descriptor.
		{name: "ioctl TCGETS reaches kernel", call: rawCall{Nr: unix.SYS_IOCTL, Args: [6]uintptr{harmless, unix.TCGETS}}, want: "errno EBADF"},
		{name: "socket AF_INET raw", call: rawCall{Nr: unix.SYS_SOCKET, Args: [6]uintptr{unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP}}, want: "errno EPERM"},
		{name: "socket AF_INET raw cloexec", call: rawCall{Nr: unix.SYS_SOCKET, Args: [6]uintptr{unix.AF_INET, unix.SOCK_RAW | unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP}}, want: "errno EPERM"},
		{name: "socket AF_PACKET", call: rawCall{Nr: unix.SYS_SOCKET, Args: [6]uintptr{unix.AF_PACKET, unix.SOCK_RAW}}, want: "errno EPERM"},
		{name: "socket AF_NETLINK", call: rawCall{Nr: unix.SYS_SOCKET, Args: [6]uintptr{unix.AF_NETLINK, unix.SOCK_RAW}}, want: "errno EPERM"},
		{name: "socket AF_INET stream allowed", call: rawCall{Nr: unix.SYS_SOCKET, Args: [6]uintptr{unix.AF_INET, unix.SOCK_STREAM | unix.SOCK_CLOEXEC}}, want: "errno 0"},
		{name: "socketpair AF_INET", call: rawCall{Nr: unix.SYS_SOCKETPAIR, Args: [6]uintptr{unix.AF_INET, unix.SOCK_STREAM, 0, harmless}}, want: "errno EPERM"},
		{name: "personality ADDR_NO_RANDOMIZE", call: rawCall{Nr: unix.SYS_PERSONALITY, Args: [6]uintptr{0x0040000}}, want: "errno EPERM"},
		{name: "personality query allowed", call: rawCall{Nr: unix.SYS_PERSONALITY, Args: [6]uintptr{0xffffffff}}, want: "errno 0"},

		{name: "socket AF_INET MPTCP", call: rawCall{Nr: unix.SYS_SOCKET, Args: [6]uintptr{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP}}, want: "errno EPERM"},
		{name: "socket AF_INET6 MPTCP", call: rawCall{Nr: unix.SYS_SOCKET, Args: [6]uintptr{unix.AF_INET6, unix.SOCK_STREAM, unix.IPPROTO_MPTCP}}, want: "errno EPERM"},
		{name: "socket AF_INET UDP-Lite", call: rawCall{Nr: unix.SYS_SOCKET, Args: [6]uintptr{unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_UDPLITE}}, want: "errno EPERM"},
		{name: "socket AF_INET6 UDP-Lite", call: rawCall{Nr: unix.SYS_SOCKET, Args: [6]uintptr{unix.AF_INET6, unix.SOCK_DGRAM, unix.IPPROTO_UDPLITE}}, want: "errno EPERM"},
		{name: "socket AF_INET SCTP", call: rawCall{Nr: unix.SYS_SOCKET, Args: [6]uintptr{unix.AF_INET, unix.SOCK_SEQPACKET, unix.IPPROTO_SCTP}}, want: "errno EPERM"},
		{name: "socket AF_INET TCP with high bits", call: rawCall{Nr: unix.SYS_SOCKET, Args: [6]uintptr{unix.AF_INET, unix.SOCK_STREAM, 1<<32 | unix.IPPROTO_TCP}}, want: "errno EPERM"},
		{name: "setsockopt TCP_ULP", call: rawCall{Nr: unix.SYS_SETSOCKOPT, Args: [6]uintptr{harmless, unix.SOL_TCP, unix.TCP_ULP, harmless, harmless}}, want: "errno EPERM"},
		{name: "setsockopt TCP_ULP with high bits", call: rawCall{Nr: unix.SYS_SETSOCKOPT, Args: [6]uintptr{harmless, 0xffffffff00000000 | unix.SOL_TCP, 1<<32 | unix.TCP_ULP, harmless, harmless}}, want: "errno EPERM"},
		{name: "sched_setscheduler SCHED_FIFO", call: rawCall{Nr: unix.SYS_SCHED_SETSCHEDULER, Args: [6]uintptr{0, unix.SCHED_FIFO, harmless}}, want: "errno EPERM"},
		{name: "sched_setscheduler SCHED_RR", call: rawCall{Nr: unix.SYS_SCHED_SETSCHEDULER, Args: [6]uintptr{0, unix.SCHED_RR, harmless}}, want: "errno EPERM"},
		{name: "sched_setscheduler SCHED_DEADLINE", call: rawCall{Nr: unix.SYS_SCHED_SETSCHEDULER, Args: [6]uintptr{0, unix.SCHED_DEADLINE, harmless}}, want: "errno EPERM"},
		// The kernel would answer these EBADF and EFAULT: 0 means the filter
		// answered and the call never ran.
		{name: "sync ignored", call: rawCall{Nr: unix.SYS_SYNC}, want: "errno 0"},
		{name: "syncfs ignored", call: rawCall{Nr: unix.SYS_SYNCFS, Args: allHarmless()}, want: "errno 0"},
		{name: "setrlimit RLIMIT_CORE ignored", call: rawCall{Nr: unix.SYS_SETRLIMIT, Args: [6]uintptr{unix.RLIMIT_CORE, harmless}}, want: "errno 0"},
		{name: "prlimit64 set RLIMIT_CORE ignored", call: rawCall{Nr: unix.SYS_PRLIMIT64, Args: [6]uintptr{0, unix.RLIMIT_CORE, harmless, 0}}, want: "errno 0"},
		{name: "prlimit64 set RLIMIT_CORE with high bits ignored", call: rawCall{Nr: unix.SYS_PRLIMIT64, Args: [6]uintptr{0, 1<<32 | unix.RLIMIT_CORE, harmless, 0}}, want: "errno 0"},
		{name: "prlimit64 set and get RLIMIT_CORE", call: rawCall{Nr: unix.SYS_PRLIMIT64, Args: [6]uintptr{0, unix.RLIMIT_CORE, harmless, harmless}}, want: "errno EPERM"},
	}
	for _, d := range deniedCalls {
		tests = append(tests, tc{name: d.name, call: rawCall{Nr: uintptr(d.nr), Args: allHarmless()}, want: "errno EPERM"})
	}
	for _, f := range []struct {
		name string
		flag uintptr
	}{
		{"CLONE_NEWNS", unix.CLONE_NEWNS}, {"CLONE_NEWUTS", unix.CLONE_NEWUTS},
		{"CLONE_NEWIPC", unix.CLONE_NEWIPC}, {"CLONE_NEWUSER", unix.CLONE_NEWUSER},
		{"CLONE_NEWPID", unix.CLONE_NEWPID}, {"CLONE_NEWNET", unix.CLONE_NEWNET},
		{"CLONE_NEWCGROUP", unix.CLONE_NEWCGROUP}, {"CLONE_NEWTIME", unix.CLONE_NEWTIME},
	} {
		// CLONE_THREAD without CLONE_SIGHAND is invalid, so the kernel would refuse
		// the call (EINVAL) rather than fork a copy of the Go runtime.
		tests = append(tests, tc{name: "clone " + f.name,
			call: rawCall{Nr: unix.SYS_CLONE, Args: [6]uintptr{f.flag | unix.CLONE_THREAD}}, want: "errno EPERM"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := victimRun(t, victimSyscall, tt.call, true); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

// TestKernelDenialsComeFromFilter is the control for the EPERM cases above: with
// the same arguments and no filter, the kernel answers something else, so the
// EPERM is the filter's. Unprivileged, the kernel itself answers EPERM to most of
// these, hence root.
func TestKernelDenialsComeFromFilter(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CheckLeaks(t)
	for _, d := range deniedCalls {
		t.Run(d.name, func(t *testing.T) {
			if d.nr == unix.SYS_VHANGUP {
				t.Skip("unfiltered, vhangup would hang up the terminal running the tests")
			}
			t.Parallel()
			call := rawCall{Nr: uintptr(d.nr), Args: allHarmless()}
			if got := victimRun(t, victimSyscall, call, false); got == "errno EPERM" {
				if why := hostRefuses(d.nr); why != "" {
					t.Skip("without the filter the kernel answers EPERM itself: " + why)
				}
				t.Errorf("without the filter: got %s, want anything else", got)
			}
		})
	}
}

// hostRefuses names a setting of this host under which the kernel itself
// answers the call nr with EPERM, even to root, or "" if there is none: the
// test process lacks the capability the call needs (root in a container), a
// sysctl turns the call off, or the kernel is locked down.
func hostRefuses(nr uint32) string {
	var reasons []string
	if c, ok := callCapability[nr]; ok && !hasCapability(c.bit) {
		reasons = append(reasons, "the test process lacks "+c.name)
	}
	sysctls := map[uint32][]string{
		unix.SYS_IO_URING_SETUP:    {"kernel/io_uring_disabled"},
		unix.SYS_KEXEC_LOAD:        {"kernel/kexec_load_disabled"},
		unix.SYS_KEXEC_FILE_LOAD:   {"kernel/kexec_load_disabled"},
		unix.SYS_INIT_MODULE:       {"kernel/modules_disabled"},
		unix.SYS_FINIT_MODULE:      {"kernel/modules_disabled"},
		unix.SYS_DELETE_MODULE:     {"kernel/modules_disabled"},
		unix.SYS_PERF_EVENT_OPEN:   {"kernel/perf_event_paranoid"},
		unix.SYS_BPF:               {"kernel/unprivileged_bpf_disabled"},
		unix.SYS_USERFAULTFD:       {"vm/unprivileged_userfaultfd"},
		unix.SYS_PTRACE:            {"kernel/yama/ptrace_scope"},
		unix.SYS_PROCESS_VM_READV:  {"kernel/yama/ptrace_scope"},
		unix.SYS_PROCESS_VM_WRITEV: {"kernel/yama/ptrace_scope"},
	}
	for _, name := range sysctls[nr] {
		if b, err := os.ReadFile("/proc/sys/" + name); err == nil && strings.TrimSpace(string(b)) != "0" {
			reasons = append(reasons, fmt.Sprintf("%s is %s", strings.ReplaceAll(name, "/", "."), strings.TrimSpace(string(b))))
		}
	}
	switch nr {
	case unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE:
		if b, err := os.ReadFile("/sys/kernel/security/lockdown"); err == nil && !strings.Contains(string(b), "[none]") {
			reasons = append(reasons, "the kernel is locked down ("+strings.TrimSpace(string(b))+")")
		}
	}
	return strings.Join(reasons, "; ")
}

// callCapability is the capability the kernel checks for each denied call
// that needs one.
var callCapability = func() map[uint32]struct {
	name string
	bit  uint
} {
	type capability = struct {
		name string
		bit  uint
	}
	sysAdmin := capability{"CAP_SYS_ADMIN", unix.CAP_SYS_ADMIN}
	m := map[uint32]capability{
		unix.SYS_CHROOT:            {"CAP_SYS_CHROOT", unix.CAP_SYS_CHROOT},
		unix.SYS_KEXEC_LOAD:        {"CAP_SYS_BOOT", unix.CAP_SYS_BOOT},
		unix.SYS_KEXEC_FILE_LOAD:   {"CAP_SYS_BOOT", unix.CAP_SYS_BOOT},
		unix.SYS_REBOOT:            {"CAP_SYS_BOOT", unix.CAP_SYS_BOOT},
		unix.SYS_INIT_MODULE:       {"CAP_SYS_MODULE", unix.CAP_SYS_MODULE},
		unix.SYS_FINIT_MODULE:      {"CAP_SYS_MODULE", unix.CAP_SYS_MODULE},
		unix.SYS_DELETE_MODULE:     {"CAP_SYS_MODULE", unix.CAP_SYS_MODULE},
		unix.SYS_ACCT:              {"CAP_SYS_PACCT", unix.CAP_SYS_PACCT},
		unix.SYS_IOPL:              {"CAP_SYS_RAWIO", unix.CAP_SYS_RAWIO},
		unix.SYS_IOPERM:            {"CAP_SYS_RAWIO", unix.CAP_SYS_RAWIO},
		unix.SYS_SETTIMEOFDAY:      {"CAP_SYS_TIME", unix.CAP_SYS_TIME},
		unix.SYS_CLOCK_SETTIME:     {"CAP_SYS_TIME", unix.CAP_SYS_TIME},
		unix.SYS_CLOCK_ADJTIME:     {"CAP_SYS_TIME", unix.CAP_SYS_TIME},
		unix.SYS_ADJTIMEX:          {"CAP_SYS_TIME", unix.CAP_SYS_TIME},
		unix.SYS_OPEN_BY_HANDLE_AT: {"CAP_DAC_READ_SEARCH", unix.CAP_DAC_READ_SEARCH},
		unix.SYS_PTRACE:            {"CAP_SYS_PTRACE", unix.CAP_SYS_PTRACE},
		unix.SYS_PROCESS_VM_READV:  {"CAP_SYS_PTRACE", unix.CAP_SYS_PTRACE},
		unix.SYS_PROCESS_VM_WRITEV: {"CAP_SYS_PTRACE", unix.CAP_SYS_PTRACE},
		unix.SYS_KCMP:              {"CAP_SYS_PTRACE", unix.CAP_SYS_PTRACE},
		unix.SYS_SYSLOG:            {"CAP_SYSLOG", unix.CAP_SYSLOG},
		unix.SYS_PERF_EVENT_OPEN:   {"CAP_PERFMON", unix.CAP_PERFMON},
		unix.SYS_BPF:               {"CAP_BPF", unix.CAP_BPF},
	}
	for _, nr := range []uint32{
		unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_MOUNT_SETATTR, unix.SYS_MOVE_MOUNT,
		unix.SYS_OPEN_TREE, unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT,
		unix.SYS_FSPICK, unix.SYS_PIVOT_ROOT, unix.SYS_UNSHARE, unix.SYS_SETNS,
		unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_QUOTACTL, unix.SYS_SETHOSTNAME,
		unix.SYS_SETDOMAINNAME, unix.SYS_FANOTIFY_INIT, unix.SYS_LOOKUP_DCOOKIE,
		unix.SYS_MIGRATE_PAGES, unix.SYS_MOVE_PAGES,
	} {
		m[nr] = sysAdmin
	}
	return m
}()

// hasCapability reports whether the test process has capability bit in its
// effective set.
func hasCapability(bit uint) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if hex, ok := strings.CutPrefix(line, "CapEff:"); ok {
			var caps uint64
			if _, err := fmt.Sscanf(strings.TrimSpace(hex), "%x", &caps); err != nil {
				return false
			}
			return caps&(1<<bit) != 0
		}
	}
	return false
}

func TestKernelKillsInt80(t *testing.T) {
	testutil.CheckLeaks(t)
	control := victimRun(t, victimInt80, nil, false)
	runs, why := int80Runs(control)
	testutil.Require(t, runs, why)
	if got, want := victimRun(t, victimInt80, nil, true), "signal SIGSYS"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// int80Runs reads the unfiltered int80 victim's outcome: whether the kernel ran
// the i386 getpid, and if not, why the filter's kill cannot be shown here.
func int80Runs(control string) (bool, string) {
	var ret, pid int
	if _, err := fmt.Sscanf(control, "int 0x80 getpid returned %d, pid %d", &ret, &pid); err == nil && ret == pid {
		return true, ""
	}
	return false, fmt.Sprintf("this kernel runs no i386 calls (IA32 emulation off: CONFIG_IA32_EMULATION or ia32_emulation=0), "+
		"so there is nothing for the filter to kill: without a filter, int 0x80 getpid gave %q", control)
}

func TestInt80Runs(t *testing.T) {
	tests := []struct {
		name    string
		control string
		want    bool
	}{
		{"i386 getpid ran", "int 0x80 getpid returned 4242, pid 4242", true},
		{"i386 getpid gave another number", "int 0x80 getpid returned -38, pid 4242", false},
		{"int 0x80 faulted", "int 0x80 faulted: runtime error: invalid memory address or nil pointer dereference", false},
		{"killed by SIGSEGV", "signal SIGSEGV", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := int80Runs(tt.control)
			if got != tt.want {
				t.Errorf("got %v (%s), want %v", got, why, tt.want)
			}
			if !got && !strings.Contains(why, tt.control) {
				t.Errorf("reason %q does not name what the control saw, %q", why, tt.control)
			}
		})
	}
}

// TestVictimReportsFault checks what TestKernelKillsInt80's skip rests on: a
// victim whose instruction faults with SIGSEGV from the kernel (HLT faults
// everywhere in user mode, as int 0x80 does where i386 calls are off) says so
// on stdout instead of dying as a crashed Go program.
func TestVictimReportsFault(t *testing.T) {
	testutil.CheckLeaks(t)
	got := victimRun(t, victimHlt, nil, false)
	if !strings.HasPrefix(got, "hlt faulted: ") {
		t.Errorf("got %q, want hlt faulted: ...", got)
	}
}

// TestKernelKeepsCoreLimit checks that a filtered program cannot lower
// RLIMIT_CORE from the jail's 1 byte, which keeps a crash from reaching a
// core_pattern pipe, while the control shows each call would have.
func TestKernelKeepsCoreLimit(t *testing.T) {
	testutil.CheckLeaks(t)
	control := victimRun(t, victimCoreLimit, nil, false)
	testutil.Require(t, !strings.HasPrefix(control, "setup:"), control)
	if want := "setrlimit errno 0, limit 0 0; prlimit64 set errno 0, limit 0 0; prlimit64 set and get errno 0, limit 0 0"; control != want {
		t.Fatalf("without the filter: got %q, want %q", control, want)
	}
	want := "setrlimit errno 0, limit 1 1; prlimit64 set errno 0, limit 1 1; prlimit64 set and get errno EPERM, limit 1 1"
	if got := victimRun(t, victimCoreLimit, nil, true); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestKernelLetsThrough checks that the calls the policy allows reach the
// kernel: with the filter, each answers exactly as without it. The arguments are
// harmless, so most answers are the kernel's EBADF, EFAULT or EINVAL.
func TestKernelLetsThrough(t *testing.T) {
	testutil.CheckLeaks(t)
	h := harmless
	tests := []struct {
		name string
		call rawCall
	}{
		{"socket AF_UNIX stream", rawCall{Nr: unix.SYS_SOCKET, Args: [6]uintptr{unix.AF_UNIX, unix.SOCK_STREAM, 0}}},
		{"socket AF_INET TCP", rawCall{Nr: unix.SYS_SOCKET, Args: [6]uintptr{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_TCP}}},
		{"socket AF_INET UDP", rawCall{Nr: unix.SYS_SOCKET, Args: [6]uintptr{unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_UDP}}},
		{"socket AF_INET ICMP", rawCall{Nr: unix.SYS_SOCKET, Args: [6]uintptr{unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMP}}},
		{"socket AF_INET6 TCP", rawCall{Nr: unix.SYS_SOCKET, Args: [6]uintptr{unix.AF_INET6, unix.SOCK_STREAM, unix.IPPROTO_TCP}}},
		{"socket AF_INET6 UDP", rawCall{Nr: unix.SYS_SOCKET, Args: [6]uintptr{unix.AF_INET6, unix.SOCK_DGRAM, unix.IPPROTO_UDP}}},
		{"socket AF_INET6 ICMPv6", rawCall{Nr: unix.SYS_SOCKET, Args: [6]uintptr{unix.AF_INET6, unix.SOCK_DGRAM, unix.IPPROTO_ICMPV6}}},
		{"setsockopt TCP_NODELAY", rawCall{Nr: unix.SYS_SETSOCKOPT, Args: [6]uintptr{h, unix.SOL_TCP, unix.TCP_NODELAY, h, h}}},
		{"fsync", rawCall{Nr: unix.SYS_FSYNC, Args: allHarmless()}},
		{"fdatasync", rawCall{Nr: unix.SYS_FDATASYNC, Args: allHarmless()}},
		{"sched_setscheduler SCHED_BATCH", rawCall{Nr: unix.SYS_SCHED_SETSCHEDULER, Args: [6]uintptr{0, unix.SCHED_BATCH, h}}},
		{"sched_setscheduler SCHED_IDLE", rawCall{Nr: unix.SYS_SCHED_SETSCHEDULER, Args: [6]uintptr{0, unix.SCHED_IDLE, h}}},
		{"sched_setparam", rawCall{Nr: unix.SYS_SCHED_SETPARAM, Args: [6]uintptr{0, h}}},
		{"sched_setattr", rawCall{Nr: unix.SYS_SCHED_SETATTR, Args: [6]uintptr{0, h, 0}}},
		{"ioprio_get", rawCall{Nr: unix.SYS_IOPRIO_GET, Args: allHarmless()}},
		{"ioprio_set", rawCall{Nr: unix.SYS_IOPRIO_SET, Args: allHarmless()}},
		{"io_destroy", rawCall{Nr: unix.SYS_IO_DESTROY, Args: allHarmless()}},
		{"io_submit", rawCall{Nr: unix.SYS_IO_SUBMIT, Args: allHarmless()}},
		{"io_cancel", rawCall{Nr: unix.SYS_IO_CANCEL, Args: allHarmless()}},
		{"io_getevents", rawCall{Nr: unix.SYS_IO_GETEVENTS, Args: allHarmless()}},
		{"io_pgetevents", rawCall{Nr: unix.SYS_IO_PGETEVENTS, Args: allHarmless()}},
		{"get_mempolicy", rawCall{Nr: unix.SYS_GET_MEMPOLICY, Args: allHarmless()}},
		{"set_mempolicy", rawCall{Nr: unix.SYS_SET_MEMPOLICY, Args: allHarmless()}},
		{"mbind", rawCall{Nr: unix.SYS_MBIND, Args: allHarmless()}},
		{"getrlimit RLIMIT_CORE", rawCall{Nr: unix.SYS_GETRLIMIT, Args: [6]uintptr{unix.RLIMIT_CORE, h}}},
		{"setrlimit RLIMIT_NOFILE", rawCall{Nr: unix.SYS_SETRLIMIT, Args: [6]uintptr{unix.RLIMIT_NOFILE, h}}},
		{"prlimit64 read RLIMIT_CORE", rawCall{Nr: unix.SYS_PRLIMIT64, Args: [6]uintptr{0, unix.RLIMIT_CORE, 0, h}}},
		{"prlimit64 set RLIMIT_NOFILE", rawCall{Nr: unix.SYS_PRLIMIT64, Args: [6]uintptr{0, unix.RLIMIT_NOFILE, h, h}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			control := victimRun(t, victimSyscall, tt.call, false)
			testutil.Require(t, control != "errno ENOSYS" && control != "errno EPERM",
				fmt.Sprintf("without a filter this kernel already answers %s, so a filter's answer would look the same", control))
			if got := victimRun(t, victimSyscall, tt.call, true); got != control {
				t.Errorf("got %s, want %s as without the filter", got, control)
			}
		})
	}
}

// TestLoadCoversThreads checks TSYNC: Load filters a thread that existed before
// it, LoadThread does not.
func TestLoadCoversThreads(t *testing.T) {
	testutil.CheckLeaks(t)
	tests := []struct {
		name string
		mode string
		want string
	}{
		{"Load filters every thread", "process", "caller errno EPERM, other thread errno EPERM"},
		{"LoadThread filters the caller only", "thread", "caller errno EPERM, other thread errno EINVAL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := victimRun(t, victimThreads, tt.mode, true); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestKernelRunsInitUnderFilter(t *testing.T) {
	testutil.CheckLeaks(t)
	if got, want := victimRun(t, victimInit, nil, true), "forkexec\nos/exec"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestInterpretersUnderFilter(t *testing.T) {
	testutil.CheckLeaks(t)
	sum := sha256.Sum256([]byte("brig"))
	hash := hex.EncodeToString(sum[:])
	tests := []struct {
		name   string
		binary string
		script string
		want   string
	}{
		{
			name:   "python3",
			binary: "/usr/bin/python3", // not the first python3 on PATH: that may be a pyenv shim
			script: "interp.py",
			want: strings.Join([]string{
				"threads 4",
				"subprocess hi",
				"inet PING",
				"unix PING",
				"socketpair pair",
				`json {"a": null, "b": [1, 2]}`,
				"sha256 " + hash,
				"tempfile scratch",
			}, "\n"),
		},
		{
			name:   "node",
			binary: "/usr/bin/node",
			script: "interp.js",
			want: strings.Join([]string{
				"worker 42",
				"exec hi",
				"fs scratch",
				"sha256 " + hash,
				"randomBytes 16",
				"net PING",
				"timeout fired",
			}, "\n"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := os.Stat(tt.binary)
			testutil.Require(t, err == nil, fmt.Sprintf("%s is not installed: %v", tt.binary, err))
			script, err := filepath.Abs(filepath.Join("testdata", tt.script))
			if err != nil {
				t.Fatal(err)
			}
			if got := victimRun(t, victimExec, []string{tt.binary, script}, true); got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestLoadRequiresNoNewPrivs(t *testing.T) {
	// Both check the flag before they make the seccomp call, so this is safe in
	// the test process itself as long as no_new_privs is off here.
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil {
		t.Fatalf("reading no_new_privs: %v", err)
	}
	testutil.Require(t, nnp == 0, "the test process already runs with no_new_privs")
	tests := []struct {
		name string
		load func(Program) error
	}{
		{"Load", bpf.Load},
		{"LoadThread", bpf.LoadThread},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.load(Program{{Code: 0x06, K: unix.SECCOMP_RET_ALLOW}})
			if !errors.Is(err, bpf.ErrNoNewPrivs) {
				t.Errorf("got error %v, want ErrNoNewPrivs", err)
			}
		})
	}
}

func TestLoadRejectsEmptyProgram(t *testing.T) {
	if err := bpf.Load(nil); !errors.Is(err, bpf.ErrInvalidProgram) {
		t.Errorf("got error %v, want ErrInvalidProgram", err)
	}
}
