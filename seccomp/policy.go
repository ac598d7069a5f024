package seccomp

import (
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// Action is what the filter does with a system call.
type Action uint8

const (
	actionUnset Action = iota
	// Allow lets the call through to the kernel.
	Allow
	// Deny fails the call with EPERM: the call exists and the sandbox forbids it.
	Deny
	// NoSys fails the call with ENOSYS, as a kernel without the call would, so that
	// programs take their fallback (glibc retries clone3 as clone).
	NoSys
	// Ignore returns 0 without running the call (SECCOMP_RET_ERRNO with errno 0):
	// the call succeeds and does nothing. For calls whose effect the sandbox must
	// not let happen but whose callers would break on an error (sync, lowering
	// RLIMIT_CORE).
	Ignore
)

var actionNames = [...]string{
	actionUnset: "unset",
	Allow:       "allow",
	Deny:        "deny",
	NoSys:       "nosys",
	Ignore:      "ignore",
}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// ParseAction parses the String form of an Action ("allow", "deny", "nosys",
// "ignore") and rejects anything else.
func ParseAction(s string) (Action, error) {
	for a := Allow; a <= Ignore; a++ {
		if actionNames[a] == s {
			return a, nil
		}
	}
	return actionUnset, fmt.Errorf("parsing seccomp action %q: %w (want allow, deny, nosys or ignore)", s, ErrInvalidPolicy)
}

func (a Action) valid() bool { return a >= Allow && a <= Ignore }

// Op says how a Cond compares an argument with its Values.
type Op uint8

const (
	opUnset Op = iota
	// In holds when the masked argument equals one of the Values. Use it for
	// allowlists: comparing more bits than the kernel reads only denies more.
	In
	// NotIn holds when the masked argument equals none of the Values. Use it for
	// denylists, with a Mask no wider than the bits the kernel reads, or a caller
	// could dodge the list by setting bits the kernel ignores: a policy whose
	// NotIn has no Mask is refused.
	NotIn
)

var opNames = [...]string{
	opUnset: "unset",
	In:      "in",
	NotIn:   "not in",
}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// ParseOp parses the String form of an Op ("in", "not in") and rejects anything
// else.
func ParseOp(s string) (Op, error) {
	for o := In; o <= NotIn; o++ {
		if opNames[o] == s {
			return o, nil
		}
	}
	return opUnset, fmt.Errorf("parsing seccomp condition op %q: %w (want in or not in)", s, ErrInvalidPolicy)
}

// Cond is a check on one argument of a call.
type Cond struct {
	// Arg is the argument's index, 0 to 5.
	Arg int
	// Mask selects the bits of the 64-bit argument register that are compared;
	// zero means all 64.
	Mask uint64
	Op   Op
	// Values are compared with the masked argument. Each must lie within Mask.
	Values []uint64
}

// Rule gives the action for the calls it names. A rule is one of three shapes:
// unconditional (Action alone); one check (Action when every Cond of When
// holds, else Else); or an ordered list of alternatives (Cases, the first whose
// conditions hold giving the action, else Else), for a verdict that depends on
// how arguments combine, as socket's allowed protocols depend on its family.
type Rule struct {
	// Names are system call names as libseccomp spells them ("newfstatat", not
	// "fstatat").
	Names []string
	// Action applies to a call whose arguments pass every check in When, or to
	// every call when When is empty. It is unset when Cases is set.
	Action Action
	// When holds at most one Cond per argument.
	When []Cond
	// Cases are tried in order; the first whose When all hold gives its Action.
	// A rule has either When or Cases, not both.
	Cases []Case
	// Else applies to a call that fails a check in When, or that no Case
	// matches. It is set exactly when When or Cases is.
	Else Action
	// Comment says why the rule is there, for the reviewer.
	Comment string
}

// Case is one alternative of a Rule's Cases.
type Case struct {
	// When holds at most one Cond per argument, and at least one: a case that
	// always holds is the rule's Else.
	When   []Cond
	Action Action
}

// Policy is the reviewed syscall table. A call named by no rule gets Default. A
// name appears in at most one rule, so a call's fate is read from a single entry
// (and libseccomp, which silently drops an argument rule when an unconditional
// rule for the same call is added, never sees two). Calls from a foreign
// architecture (i386 through int 0x80, x32) kill the process whatever the policy
// says; see Compile.
type Policy struct {
	// Default is the action for calls no rule names.
	Default Action
	Rules   []Rule
}

// action is the Policy's verdict on the call name with the argument registers
// args, computed from the table alone. The compiled Program must agree with it.
func (p Policy) action(name string, args [6]uint64) Action {
	for _, r := range p.Rules {
		for _, n := range r.Names {
			if n == name {
				return r.action(args)
			}
		}
	}
	return p.Default
}

func (r Rule) action(args [6]uint64) Action {
	cases := r.cases()
	if len(cases) == 0 {
		return r.Action
	}
	for _, c := range cases {
		if c.holds(args) {
			return c.Action
		}
	}
	return r.Else
}

// cases is r's conditions as a list of alternatives: a rule with When is the
// one-case list, an unconditional rule the empty one.
func (r Rule) cases() []Case {
	if len(r.When) > 0 {
		return []Case{{When: r.When, Action: r.Action}}
	}
	return r.Cases
}

func (c Case) holds(args [6]uint64) bool {
	for _, cond := range c.When {
		if !cond.holds(args[cond.Arg]) {
			return false
		}
	}
	return true
}

func (c Cond) holds(arg uint64) bool {
	return slices.Contains(c.Values, arg&c.mask()) == (c.Op == In)
}

func (c Cond) mask() uint64 {
	if c.Mask == 0 {
		return ^uint64(0)
	}
	return c.Mask
}

// Masks of the argument bits the kernel reads, for NotIn conditions.
const (
	// lowWord is a C int or unsigned int passed in a 64-bit register: the kernel
	// ignores the upper half.
	lowWord = 0xffffffff
	// sockTypeMask is the kernel's SOCK_TYPE_MASK. socket(2) fails with EINVAL if
	// any bit other than these, SOCK_NONBLOCK and SOCK_CLOEXEC is set, so masking
	// with it compares the type with the two flags taken off.
	sockTypeMask = 0xf
	// namespaceFlags are the clone flags that create a namespace. CLONE_NEWTIME
	// (0x80) lies in the exit-signal byte of clone(2), where the kernel rejects it
	// as a signal number above 64; it is listed so the check does not depend on that.
	namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
		unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
		unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME
)

// nonRealtimePolicies are the sched_setscheduler(2) policies a sandboxed program
// may choose. SCHED_RESET_ON_FORK is left out: it only matters to a real-time
// caller, and its bit far above the policies would cost some thirty extra
// comparisons to allow.
var nonRealtimePolicies = []uint64{unix.SCHED_NORMAL, unix.SCHED_BATCH, unix.SCHED_IDLE}

// rlimNLimits is the kernel's RLIM_NLIMITS: resources run from 0 to
// RLIMIT_RTTIME (15).
const rlimNLimits = unix.RLIMIT_RTTIME + 1

// otherResources are the resources of setrlimit(2) and prlimit64(2) other than
// RLIMIT_CORE.
var otherResources = func() []uint64 {
	var out []uint64
	for r := range uint64(rlimNLimits) {
		if r != unix.RLIMIT_CORE {
			out = append(out, r)
		}
	}
	return out
}()

// socketTypes is a condition on socket(2)'s type, compared with SOCK_NONBLOCK
// and SOCK_CLOEXEC masked off.
func socketTypes(types ...uint64) Cond {
	return Cond{Arg: 1, Mask: sockTypeMask, Op: In, Values: types}
}

// The types a run's sockets may have: AF_UNIX's three, and an IP socket's
// stream and datagram. SOCK_SEQPACKET on IP is SCTP's alone, which protocol 0
// would pick where the kernel has it (inet_create takes a type's first
// registered protocol for 0), past the protocol's own check (the seccomp probe
// of 2026-12-06).
var (
	unixSocketTypes = []uint64{unix.SOCK_STREAM, unix.SOCK_DGRAM, unix.SOCK_SEQPACKET}
	ipSocketTypes   = []uint64{unix.SOCK_STREAM, unix.SOCK_DGRAM}
)

// personality(2) values a sandboxed program may pass.
const (
	perLinux         = 0          // PER_LINUX: the normal personality, no flags.
	personalityQuery = 0xffffffff // reads the personality without changing it.
)

// Default returns the policy every run gets: an allowlist of what CPython, Node
// and a shell need, and what brig's own init needs once the filter is on (fork,
// exec and wait as a reaper). Calls the table denies on purpose fail with
// EPERM, so a program reports a refusal rather than take an old-kernel path;
// sync, syncfs and changes of RLIMIT_CORE succeed without acting (Ignore).
//
// ENOSYS is kept for three kinds of call: clone3, so that glibc falls back to
// clone(2), whose flags the filter reads; the calls Linux declares on x86_64
// but never implemented (tuxcall, security, vserver, afs_syscall, getpmsg,
// putpmsg, create_module, get_kernel_syms, query_module, epoll_ctl_old,
// epoll_wait_old), for which the kernel itself answers ENOSYS; and unknown
// numbers. A call newer than the libseccomp that compiles the table (2.5.4
// knows up to futex_requeue, Linux 6.7) cannot be named at all and so is
// unknown, and its callers take their older path.
//
// The differences from Docker's default profile, and why, are listed above
// defaultRules.
func Default() Policy {
	return Policy{
		// ENOSYS rather than EPERM for unknown calls: a program probing a call that
		// is newer than the table (statmount, mseal) takes its old-kernel path.
		Default: NoSys,
		Rules:   defaultRules(),
	}
}

// Spawner returns the policy of brig's init on the thread that clones a run's
// program into a fresh user namespace: Default, except that clone may carry
// CLONE_NEWUSER alone among the namespace flags. The init loads it on that
// thread only (LoadThread) before the clone, and the program, once in its
// namespace, stacks SpawnedProgram (Default's clone rule) before it execs; the
// kernel runs every stacked filter and the strictest verdict wins, so the
// program ends up under Default's verdicts and never under Spawner alone. clone3, unshare and setns stay denied: the
// init clones with clone(2), whose flags the filter can read.
func Spawner() Policy {
	p := Default()
	p.Rules = slices.Clone(p.Rules)
	for i, r := range p.Rules {
		if slices.Contains(r.Names, "clone") {
			p.Rules[i] = spawnerClone()
		}
	}
	return p
}

// Reaper returns the policy of the reaper (jail/reaper), the pid 1 of a
// zygote's or a cold sandbox's, once it has dropped its identity: the calls of
// its last two steps (its "ready" message, closing its descriptors) and of its
// loop, which reaps and waits for SIGCHLD, or in a cold sandbox waits for the
// program and reports its exit with the clock's reading, and arms the timer
// of a run's backstop (setitimer) when the supervisor asks; and in a cold
// sandbox, before all that, the read of its program's report of the exec it
// lets the program make once hardened (ReaperReportFD). Anything else fails
// with EPERM.
func Reaper() Policy {
	return Policy{Default: Deny, Rules: []Rule{
		{Action: Allow, Names: []string{
			"write", "close_range", "wait4", "rt_sigtimedwait", "rt_sigreturn",
			"clock_gettime", "setitimer", "restart_syscall", "exit", "exit_group",
		}},
		{Action: Allow, Names: []string{"read"},
			When:    []Cond{{Arg: 0, Mask: lowWord, Op: In, Values: []uint64{ReaperReportFD}}},
			Else:    Deny,
			Comment: "The report pipe alone, closed once read to its end: pid 1 opens nothing after."},
	}}
}

// ReaperReportFD is the descriptor of a cold program's report pipe in its
// reaper (jail/reaper's ReportFD).
const ReaperReportFD = 62

// Init returns the policy of a sandbox's Go init (jail/pid1) once it has
// dropped its identity (its last step, before the program's exec): the
// calls of what is left for it to do, let the program exec, wait for it or reap orphans
// and report the exit, and those the Go runtime makes meanwhile (its threads'
// sleeps and wake-ups, preemption signals, heap growth and release, a new
// thread, a signal's handler: the runtime throws when it can't set one) and
// glibc's where brig itself is the init (a new thread's stack guard and
// registrations). Anything else fails with EPERM, clone3 with
// ENOSYS so that glibc makes its threads with clone, and clone only makes
// threads. The program's policy, which the init loaded before, allowed every
// call a program may make; this one is 57 instructions against its
// 1365, which every cold sandbox's init compiled again.
func Init() Policy {
	return Policy{Default: Deny, Rules: []Rule{
		{Action: Allow, Names: []string{
			"read", "write", "close", "wait4", "waitid", "rt_sigtimedwait",
			"rt_sigaction", "rt_sigreturn", "rt_sigprocmask", "sigaltstack", "restart_syscall", "exit", "exit_group",
			"futex", "nanosleep", "clock_nanosleep", "sched_yield", "clock_gettime",
			"getpid", "gettid", "tgkill", "getrandom",
			"mmap", "munmap", "madvise", "mprotect",
			"epoll_pwait", "epoll_ctl",
			"arch_prctl", "set_robust_list", "rseq",
		}},
		{Action: NoSys, Names: []string{"clone3"},
			Comment: "glibc then makes its threads with clone, whose flags the filter can see."},
		{Action: Allow, Names: []string{"clone"},
			When:    []Cond{{Arg: 0, Mask: namespaceFlags | unix.CLONE_THREAD, Op: In, Values: []uint64{unix.CLONE_THREAD}}},
			Else:    Deny,
			Comment: "A thread, and nothing else: no process, no namespace."},
	}}
}

// cloneRule is Default's clone rule: no namespace flag at all.
func cloneRule() Rule {
	return Rule{Action: Allow, Names: []string{"clone"},
		When: []Cond{{Arg: 0, Mask: namespaceFlags | unix.CLONE_PARENT, Op: In, Values: []uint64{0}}},
		Else: Deny,
		Comment: "Threads (CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|" +
			"CLONE_THREAD|CLONE_SYSVSEM), fork and Go's vfork-style ForkExec, " +
			"but never a new namespace: that is the jail's job, and a user " +
			"namespace gives the caller capabilities the filter cannot see. " +
			"Nor CLONE_PARENT: a warm Python program's parent is its zygote, " +
			"outside the sandbox, which would get children it never reaps " +
			"(zombies holding host pids after the run)."}
}

// prctlRule is Default's prctl rule, refusing the options denied: Default
// refuses PR_SET_MEMORY_MERGE and PR_SET_MM, the zygote's (Zygote) the first
// alone.
func prctlRule(denied ...uint64) Rule {
	return Rule{Action: Deny, Names: []string{"prctl"},
		When: []Cond{{Arg: 0, Mask: lowWord, Op: In, Values: denied}},
		Else: Allow,
		Comment: "Thread names, PR_SET_PDEATHSIG, no_new_privs, dumpable; the " +
			"capability bounding set and PR_SET_MM's single fields check " +
			"capabilities in the kernel. PR_SET_MM_MAP asks for none unless it " +
			"replaces the executable (CRIU's unprivileged restore): it sets the " +
			"bounds of the caller's command line and environment to any of its " +
			"memory, so that a host tool reading /proc/PID/cmdline (a monitoring " +
			"agent's process list) read 4 GiB of a run's empty mapping (the " +
			"review of 2026-12-05); it gets EPERM, and so does every PR_SET_MM " +
			"option. A warm Python child makes the call for its run's " +
			"environment before its program starts, under Zygote's rule, and " +
			"then stacks ZygoteProgram. PR_SET_MEMORY_MERGE, which checks no " +
			"capability either, offers all of the caller's memory to KSM, as " +
			"madvise's MADV_MERGEABLE (above) offers a range, and gets EPERM. " +
			"The option is an int, so the check reads the register's low half."}
}

// zygoteSetupCalls are the calls Default does not allow whole that the Python
// zygote (jail/zygote.py) makes to enter a sandbox's pid namespace before each
// fork, and its child to join the sandbox's other namespaces, make its user
// namespace and set its limits (RLIMIT_CORE among them, which Default ignores).
var zygoteSetupCalls = []string{"setns", "unshare", "setrlimit", "prlimit64"}

// Zygote returns the policy the Python zygote loads once, before its first
// fork, so that its children inherit it compiled: Default, with
// zygoteSetupCalls allowed, and prctl's PR_SET_MM. A child stacks ZygoteChild
// once it has joined its sandbox, and ZygoteProgram once it has shown its
// run's exec, and from then on every verdict is Default's
// (TestZygoteStackedIsDefault). The kernel converts, JITs and analyses each
// filter as it is loaded (a forked process's load of Default's 1385
// instructions cost it 0.53 ms of CPU, of ZygoteChild's 60 0.10 ms:
// bench/measure/filter_load.py), and a fork shares its parent's filters as
// they are.
func Zygote() Policy {
	p := Default()
	p.Rules = withoutCalls(p.Rules, append([]string{"prctl"}, zygoteSetupCalls...))
	p.Rules = append(p.Rules, Rule{Action: Allow, Names: zygoteSetupCalls,
		Comment: "The zygote enters a sandbox's pid namespace for each fork; its " +
			"child joins the sandbox and sets its limits, then stacks ZygoteChild, " +
			"which gives these calls back Default's verdicts."},
		prctlRule(unix.PR_SET_MEMORY_MERGE))
	return p
}

// ZygoteChild returns the policy a zygote's child stacks on Zygote's before it
// reads its run: Default's rules for zygoteSetupCalls, and everything else
// allowed, which leaves Zygote's verdict standing.
func ZygoteChild() Policy { return defaultFor(zygoteSetupCalls) }

// ZygoteProgram returns the policy a zygote's child stacks last, once it has
// shown its run's environment with PR_SET_MM_MAP (jail/zygote.py's
// _show_exec) and before its program starts: Default's prctl rule, which
// Zygote relaxes for that call, and everything else allowed. The three
// stacked give Default's verdicts (TestZygoteStackedIsDefault).
func ZygoteProgram() Policy { return defaultFor([]string{"prctl"}) }

// SpawnedProgram returns the policy a program stacks on Spawner's, which it
// inherits from the thread that cloned it (a cold sandbox's init or reaper),
// before it execs: Default's clone rule, the one Spawner relaxes, and
// everything else allowed. The stack's verdicts are Default's
// (TestSpawnedProgramStackedIsDefault), and the program's load is one rule
// instead of Default's 1385 instructions, which the kernel compiled in every
// cold run beside Spawner's.
func SpawnedProgram() Policy { return defaultFor([]string{"clone"}) }

// defaultFor is Default's rules for the calls names alone, every other call
// allowed: stacked on a policy that is Default but for those calls, it gives
// Default's verdicts.
func defaultFor(names []string) Policy {
	p := Policy{Default: Allow}
	for _, r := range defaultRules() {
		var kept []string
		for _, n := range r.Names {
			if slices.Contains(names, n) {
				kept = append(kept, n)
			}
		}
		if len(kept) > 0 {
			r.Names = kept
			p.Rules = append(p.Rules, r)
		}
	}
	return p
}

// withoutCalls is rules without the calls names: each rule keeps its other
// names, and one left with none is dropped.
func withoutCalls(rules []Rule, names []string) []Rule {
	var out []Rule
	for _, r := range rules {
		kept := slices.DeleteFunc(slices.Clone(r.Names), func(n string) bool { return slices.Contains(names, n) })
		if len(kept) > 0 {
			r.Names = kept
			out = append(out, r)
		}
	}
	return out
}

// spawnerClone is Spawner's clone rule.
func spawnerClone() Rule {
	return Rule{Action: Allow, Names: []string{"clone"},
		When: []Cond{{Arg: 0, Mask: namespaceFlags | unix.CLONE_PARENT, Op: In, Values: []uint64{0, unix.CLONE_NEWUSER}}},
		Else: Deny,
		Comment: "As in Default, and also CLONE_NEWUSER alone: the init clones " +
			"the program into the run's own user namespace. Any other namespace " +
			"is made before this filter; the new user namespace's capabilities " +
			"never reach the program, which stacks Default's clone rule " +
			"(SpawnedProgram) before it execs."}
}

// Differences from Docker's default seccomp profile (moby's
// profiles/seccomp/default.json as of 2026, for amd64 and Docker's default
// capability set; calls only i386 or other architectures have are left out).
// Where Docker gates a call on a capability its default set lacks, it answers
// EPERM like brig, and that is no difference.
//
// Docker allows, brig denies (EPERM):
//   - clone with CLONE_PARENT: the new process would be its caller's
//     parent's child, and a warm Python program's parent is its zygote.
//   - ptrace, process_vm_readv, process_vm_writev: Docker allows them on
//     4.8+ kernels, where ptrace can no longer bypass seccomp. brig denies
//     them: nothing a run needs is traced, and debuggers are not its
//     business.
//   - fanotify_mark: whole-mount watches (see its rule).
//   - mq_*, shm*, sem*, msg*: POSIX message queues and System V IPC, kernel
//     surface CPython and Node programs do not use (see their rules).
//   - name_to_handle_at: only useful with open_by_handle_at, which both deny.
//   - chroot: Docker's default capabilities include CAP_SYS_CHROOT, a run has
//     no capability at all; denied rather than left to fail in the kernel.
//   - adjtimex, clock_adjtime: Docker allows the read-only forms (modes 0);
//     brig denies the calls whole, the clock is the host's.
//   - modify_ldt, get_thread_area, set_thread_area: i386 segment calls.
//   - memfd_secret, cachestat, process_mrelease, map_shadow_stack: see their
//     rule; cachestat in particular shows what other runs read.
//   - preadv2 and pwritev2 with RWF_NOWAIT: the same page-cache probe.
//   - remap_file_pages: obsolete and emulated.
//   - socket beyond AF_UNIX, AF_INET and AF_INET6 with the stream, datagram
//     and seqpacket types and the protocols of their rule (Docker allows
//     every family but AF_ALG and AF_VSOCK, raw sockets included, since its
//     CAP_NET_RAW governs them); socketpair beyond AF_UNIX.
//   - setsockopt(SOL_TCP, TCP_ULP): loads kernel TLS.
//   - ioctl TIOCSTI and TIOCLINUX: reach the terminal of whoever started brig;
//     TIOCSETD: asks the host's modprobe for a line discipline (below).
//   - personality beyond PER_LINUX and the query: Docker also allows
//     PER_LINUX32 and UNAME26, which only 32-bit or old programs want.
//   - sched_setscheduler with a real-time policy or SCHED_RESET_ON_FORK:
//     Docker leaves it to CAP_SYS_NICE and RLIMIT_RTPRIO; brig checks the
//     argument too, so a raised RLIMIT_RTPRIO could not undo it.
//   - prlimit64 setting RLIMIT_CORE while reading the old value (below).
//   - prctl PR_SET_MEMORY_MERGE: opts all of a process's memory into KSM's
//     merging (below).
//
// Docker allows, brig succeeds without acting (Ignore):
//   - sync, syncfs: host-wide writeback.
//   - fadvise64 with POSIX_FADV_DONTNEED: evicts a shared file's pages
//     host-wide.
//   - madvise MADV_MERGEABLE: offers pages to KSM's merging (below).
//   - setrlimit and prlimit64 changing RLIMIT_CORE: the jail's RLIMIT_CORE of
//     1 keeps a crash from starting the host's core_pattern pipe.
//
// Docker allows, brig answers ENOSYS:
//   - epoll_ctl_old, epoll_wait_old: never implemented on x86_64; the kernel
//     answers ENOSYS too.
//   - listmount, statmount, mseal, the *xattrat calls, uretprobe: newer than
//     libseccomp 2.5.4, so unknown to the table; their callers fall back.
//     (Linux 6.12 on lets uretprobe past every filter, and kills a caller
//     that is not its own trampoline with SIGILL: what a run sees here. Linux
//     6.16's uprobe, 336, is let past too, and answers ENXIO outside its
//     trampoline.)
//   - io_setup: native AIO contexts count against a host-wide limit that no
//     cgroup bounds (its rule); libaio's users fall back.
//
// Docker denies (EPERM), brig allows:
//   - get_mempolicy, set_mempolicy, set_mempolicy_home_node, mbind: Docker
//     allows them only with CAP_SYS_NICE. brig allows them for numeric
//     libraries; they place only the caller's memory, within its cpuset.
//
// Docker denies (EPERM), brig answers ENOSYS:
//   - calls Linux never implemented on x86_64 (tuxcall, security, vserver,
//     and the like) and unknown numbers: Docker's default action is EPERM,
//     brig's is ENOSYS, so that a probe of a call newer than the table takes
//     its old-kernel path.
//
// Both answer ENOSYS to clone3, and both deny new namespaces through clone.
func defaultRules() []Rule {
	return []Rule{
		// ---- Files, directories and descriptors.
		{Action: Allow, Names: []string{
			"read", "write", "readv", "writev", "pread64", "pwrite64", "preadv",
			"pwritev", "lseek", "sendfile", "splice", "tee",
			"vmsplice", "copy_file_range", "readahead",
			"open", "openat", "openat2", "creat", "close", "close_range",
			"dup", "dup2", "dup3", "fcntl", "flock", "pipe", "pipe2",
			"stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs",
			"access", "faccessat", "faccessat2", "getdents", "getdents64",
			"readlink", "readlinkat", "getcwd", "chdir", "fchdir", "umask",
			"mkdir", "mkdirat", "rmdir", "link", "linkat", "symlink", "symlinkat",
			"unlink", "unlinkat", "rename", "renameat", "renameat2",
			"truncate", "ftruncate", "fallocate", "utime", "utimes", "futimesat",
			"utimensat", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown",
			"fchownat", "fsync", "fdatasync", "sync_file_range",
			"getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr",
			"flistxattr", "setxattr", "lsetxattr", "fsetxattr", "removexattr",
			"lremovexattr", "fremovexattr",
		}},
		{Action: Allow, Names: []string{"preadv2", "pwritev2"},
			When: []Cond{{Arg: 5, Mask: unix.RWF_NOWAIT, Op: In, Values: []uint64{0}}},
			Else: Deny,
			Comment: "RWF_NOWAIT fails a read with EAGAIN exactly when its page is not " +
				"in the page cache: on the read-only /usr binds, which every run shares, " +
				"that tells one run which files another has read (cachestat's leak, " +
				"denied too). Reads and writes without the flag are allowed."},
		{Action: Allow, Names: []string{"fadvise64"},
			When: []Cond{{Arg: 3, Mask: lowWord, Op: NotIn, Values: []uint64{unix.FADV_DONTNEED}}},
			Else: Ignore,
			Comment: "POSIX_FADV_DONTNEED drops a file's clean cached pages for the " +
				"whole host, and any reader may ask it: on the shared /usr binds one run " +
				"could evict what others read, resetting a page-cache probe or sending " +
				"every run's reads to the disk. It returns 0 and does nothing (advice " +
				"the kernel may ignore anyway); other advice is allowed."},
		{Action: Ignore, Names: []string{"sync", "syncfs"},
			Comment: "sync writes back every dirty page of the host, and syncfs " +
				"every dirty page of the filesystem a descriptor lies on, which can " +
				"be the host's own (a file of the read-only /usr binds): one run " +
				"could make the whole machine wait on its disks. A run's files are scratch that dies " +
				"with it, so there is nothing it needs made durable: both return 0 " +
				"and do nothing. fsync and fdatasync, which flush one file of the " +
				"caller's, stay allowed."},
		{Action: Allow, Names: []string{"mknod", "mknodat"},
			Comment: "mkfifo(3) is mknod; device nodes need CAP_MKNOD, which the sandbox lacks."},
		{Action: Allow, Names: []string{"ioctl"},
			When: []Cond{{Arg: 1, Mask: lowWord, Op: NotIn, Values: []uint64{unix.TIOCSTI, unix.TIOCLINUX, unix.TIOCSETD}}},
			Else: Deny,
			Comment: "TIOCSTI pushes bytes into a terminal's input queue and TIOCLINUX " +
				"can read and paste a console's screen: both reach a terminal the " +
				"sandbox shares with whoever started it. TIOCSETD sets a pty's line " +
				"discipline, which the kernel loads as a module (as root, through " +
				"modprobe, where dev.tty.ldisc_autoload is 1, the default) when it " +
				"is not built in: the line disciplines so loaded (n_hdlc, n_gsm, " +
				"slcan) have had their own exploits; no program run here needs one " +
				"(the red team found it allowed). The command is an unsigned " +
				"int, so the kernel ignores the upper half of the register and so " +
				"must the check (0xffffffff00005412 is TIOCSTI too)."},

		// ---- Memory.
		{Action: Allow, Names: []string{
			"brk", "mmap", "munmap", "mremap", "mprotect", "msync", "mincore",
			"memfd_create", "membarrier", "pkey_alloc", "pkey_free",
			"pkey_mprotect",
		}},
		{Action: Allow, Names: []string{"madvise"},
			When: []Cond{{Arg: 2, Mask: lowWord, Op: NotIn, Values: []uint64{unix.MADV_MERGEABLE}}},
			Else: Ignore,
			Comment: "On a host whose KSM is on (hypervisors often turn it on for " +
				"their guests), pages offered with MADV_MERGEABLE are merged with " +
				"equal pages of every other process that offered them, and a write " +
				"to a merged page takes measurably longer: a run could learn " +
				"whether another tenant's memory holds a page it guesses. The " +
				"advice returns 0 and does nothing, as on a kernel without KSM; " +
				"other advice is allowed."},
		{Action: Allow, Names: []string{"mlock", "mlock2", "munlock", "mlockall", "munlockall"},
			Comment: "Bounded by RLIMIT_MEMLOCK and the run's memory cgroup; crypto " +
				"libraries lock key material."},
		{Action: Allow, Names: []string{"get_mempolicy", "set_mempolicy", "mbind", "set_mempolicy_home_node"},
			Comment: "NUMA placement of the caller's own memory, which numeric " +
				"libraries and allocators (OpenBLAS, jemalloc) query and set. The " +
				"kernel confines the nodes to the cpuset's, and moving pages that " +
				"other processes share (MPOL_MF_MOVE_ALL) needs CAP_SYS_NICE, which " +
				"the run lacks."},
		{Action: Deny, Names: []string{"migrate_pages", "move_pages"},
			Comment: "They move another process's pages between NUMA nodes; a " +
				"program places its own memory with mbind."},

		// ---- Processes, threads and signals.
		cloneRule(),
		{Action: NoSys, Names: []string{"clone3"},
			Comment: "Its flags sit in a struct in memory, out of the filter's reach. " +
				"ENOSYS makes glibc (pthread_create, posix_spawn) fall back to clone(2), " +
				"whose flags are checked above. Go's ForkExec only uses clone3 for " +
				"SysProcAttr.UseCgroupFD, which brig's init must not set."},
		{Action: Allow, Names: []string{
			"fork", "vfork", "exit", "exit_group", "wait4", "waitid",
			"set_tid_address", "set_robust_list", "get_robust_list", "rseq",
			"futex", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue",
			"sched_yield", "sched_getaffinity",
			"sched_setaffinity", "sched_getparam", "sched_getscheduler", "sched_getattr",
			"sched_get_priority_max", "sched_get_priority_min",
			"sched_rr_get_interval", "getcpu", "arch_prctl", "restart_syscall",
			"getpid", "getppid", "gettid", "getpgid", "getpgrp", "setpgid",
			"getsid", "setsid", "getpriority", "setpriority",
			"getrlimit", "getrusage",
			"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending",
			"rt_sigtimedwait", "rt_sigsuspend", "rt_sigqueueinfo",
			"rt_tgsigqueueinfo", "sigaltstack", "pause",
		}},
		{Action: Allow, Names: []string{"sched_setscheduler"},
			When: []Cond{{Arg: 1, Op: In, Values: nonRealtimePolicies}},
			Else: Deny,
			Comment: "SCHED_OTHER, SCHED_BATCH and SCHED_IDLE only lower the " +
				"caller's claim on the CPU (CPython's test_posix sets them). " +
				"Real-time policies (SCHED_FIFO, SCHED_RR, SCHED_DEADLINE) could " +
				"starve the host's CPUs: EPERM, as is SCHED_RESET_ON_FORK, which " +
				"only a real-time caller needs. The policy is an int and the check " +
				"compares the whole register: an allowlist, so high bits only deny."},
		{Action: Allow, Names: []string{"sched_setparam", "sched_setattr"},
			Comment: "sched_setparam keeps the caller's policy and takes only a " +
				"priority, which must be 0 for the non-real-time policies that " +
				"sched_setscheduler above confines a run to. sched_setattr's policy " +
				"lies in a struct the filter cannot read, so the kernel is the " +
				"check: a real-time policy needs CAP_SYS_NICE or RLIMIT_RTPRIO " +
				"above 0, and a run has neither (the jail's rlimits leave " +
				"RLIMIT_RTPRIO at 0, and raising a hard limit needs " +
				"CAP_SYS_RESOURCE); SCHED_DEADLINE needs CAP_SYS_NICE outright. " +
				"Both reach only processes of the caller's uid."},
		{Action: Allow, Names: []string{"ioprio_get", "ioprio_set"},
			Comment: "I/O priority of the caller's own processes; the real-time " +
				"class needs CAP_SYS_ADMIN or CAP_SYS_NICE in the kernel."},
		{Action: Allow, Names: []string{"setrlimit"},
			When: []Cond{{Arg: 0, Op: In, Values: otherResources}},
			Else: Ignore,
			Comment: "The jail sets RLIMIT_CORE to 1 byte: below the smallest ELF " +
				"core, so no core file, and the kernel's sign to skip a core_pattern " +
				"pipe, whose helper would run as host root. Lowering it to 0 would " +
				"turn the pipe back on, so a change of RLIMIT_CORE succeeds and does " +
				"nothing; other limits can be lowered, or raised up to their hard " +
				"limit, as usual. The resource is an unsigned int, of which the " +
				"kernel reads the lower half, so the allowlist is of whole " +
				"registers: RLIMIT_CORE with high bits set is ignored too, as is a " +
				"resource the kernel would reject (EINVAL)."},
		{Names: []string{"prlimit64"},
			Cases: []Case{
				{Action: Allow, When: []Cond{{Arg: 1, Op: In, Values: otherResources}}},
				{Action: Allow, When: []Cond{{Arg: 2, Op: In, Values: []uint64{0}}}},
				{Action: Ignore, When: []Cond{{Arg: 3, Op: In, Values: []uint64{0}}}},
			},
			Else: Deny,
			Comment: "RLIMIT_CORE as for setrlimit, on any process. Any other " +
				"resource is allowed, and so is a read (no new limit; glibc's " +
				"getrlimit). A change (a new limit, no old one asked for; glibc's " +
				"setrlimit) succeeds and does nothing. A change that also asks for " +
				"the old limit gets EPERM: skipping the call would report success " +
				"with the old-limit buffer never filled."},
		{Action: Allow, Names: []string{"execve", "execveat"},
			Comment: "Inside the jail's mount namespace; no_new_privs makes setuid " +
				"bits and file capabilities inert, and the filter survives exec."},
		{Action: Allow, Names: []string{"kill", "tkill", "tgkill", "pidfd_open", "pidfd_send_signal"},
			Comment: "Signals reach only the run's own PID namespace. Go's os/exec " +
				"uses pidfds to wait for and signal children."},
		prctlRule(unix.PR_SET_MEMORY_MERGE, unix.PR_SET_MM),
		{Action: Allow, Names: []string{"seccomp", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"},
			Comment: "A program may sandbox itself further; stacked filters and " +
				"Landlock rulesets only ever narrow what it may do. brig's init " +
				"needs seccomp too: it filters its own thread before it forks the " +
				"program and all its threads after."},
		{Action: Allow, Names: []string{
			"getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid",
			"getgroups", "setuid", "setgid", "setreuid", "setregid", "setresuid",
			"setresgid", "setfsuid", "setfsgid", "setgroups", "capget", "capset",
		}, Comment: "Changing ids or capabilities needs capabilities the run lacks; " +
			"programs that drop privileges out of habit keep working."},
		{Action: Allow, Names: []string{"personality"},
			When: []Cond{{Arg: 0, Mask: lowWord, Op: In, Values: []uint64{perLinux, personalityQuery}}},
			Else: Deny,
			Comment: "Only the query and the default. Other personalities turn off " +
				"address-space randomisation (ADDR_NO_RANDOMIZE) or make all memory " +
				"executable (READ_IMPLIES_EXEC)."},

		{Action: Allow, Names: []string{
			"io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
		}, Comment: "Linux native AIO on a context, which io_setup can't make: " +
			"harmless without one."},
		{Action: NoSys, Names: []string{"io_setup"},
			Comment: "Linux native AIO contexts count against fs.aio-max-nr, a " +
				"host-wide limit that no cgroup bounds: one run took it all, and " +
				"io_setup failed with EAGAIN for every other process of the host " +
				"until it ended. libaio's users fall back to synchronous I/O on " +
				"ENOSYS, as on a kernel built without AIO."},

		// ---- Time.
		{Action: Allow, Names: []string{
			"time", "gettimeofday", "clock_gettime", "clock_getres",
			"clock_nanosleep", "nanosleep", "alarm", "getitimer", "setitimer",
			"timer_create", "timer_settime", "timer_gettime", "timer_getoverrun",
			"timer_delete", "times",
		}},

		// ---- Waiting on descriptors, and descriptors that wait.
		{Action: Allow, Names: []string{
			"poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1",
			"epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2",
			"eventfd", "eventfd2", "timerfd_create", "timerfd_settime",
			"timerfd_gettime", "signalfd", "signalfd4",
		}},

		// ---- Sockets.
		{Names: []string{"socket"},
			Cases: []Case{
				{Action: Allow, When: []Cond{
					{Arg: 0, Op: In, Values: []uint64{unix.AF_UNIX}},
					{Arg: 2, Op: In, Values: []uint64{0}},
					socketTypes(unixSocketTypes...),
				}},
				{Action: Allow, When: []Cond{
					{Arg: 0, Op: In, Values: []uint64{unix.AF_INET}},
					{Arg: 2, Op: In, Values: []uint64{0, unix.IPPROTO_TCP, unix.IPPROTO_UDP, unix.IPPROTO_ICMP}},
					socketTypes(ipSocketTypes...),
				}},
				{Action: Allow, When: []Cond{
					{Arg: 0, Op: In, Values: []uint64{unix.AF_INET6}},
					{Arg: 2, Op: In, Values: []uint64{0, unix.IPPROTO_TCP, unix.IPPROTO_UDP, unix.IPPROTO_ICMPV6}},
					socketTypes(ipSocketTypes...),
				}},
			},
			Else: Deny,
			Comment: "Local and IP sockets only, with the protocols programs use: " +
				"0 (the type's default), TCP, UDP and the family's ICMP (ping " +
				"sockets); AF_UNIX only 0. Every other family (netlink, packet, " +
				"vsock, the rarely used ones whose modules the kernel would load " +
				"on demand) and every other protocol (MPTCP, UDP-Lite, SCTP, which " +
				"an IP SOCK_SEQPACKET with protocol 0 would also be; the " +
				"kernel asks for a module for one it lacks) is attack surface a run " +
				"does not need, and raw and packet sockets could forge traffic. " +
				"Family and protocol are compared as whole registers (high bits " +
				"set means EPERM); the type with SOCK_NONBLOCK and SOCK_CLOEXEC " +
				"masked off, so SOCK_RAW|SOCK_CLOEXEC is still SOCK_RAW."},
		{Action: Allow, Names: []string{"socketpair"},
			When:    []Cond{{Arg: 0, Op: In, Values: []uint64{unix.AF_UNIX}}},
			Else:    Deny,
			Comment: "Only AF_UNIX has socket pairs that matter; same reasoning as socket."},
		{Action: Allow, Names: []string{
			"connect", "accept", "accept4", "bind", "listen", "shutdown",
			"getsockname", "getpeername", "getsockopt",
			"sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
		}, Comment: "Where they can connect is the egress proxy's and the network " +
			"namespace's business."},

		{Action: Deny, Names: []string{"setsockopt"},
			When: []Cond{
				{Arg: 1, Mask: lowWord, Op: In, Values: []uint64{unix.SOL_TCP}},
				{Arg: 2, Mask: lowWord, Op: In, Values: []uint64{unix.TCP_ULP}},
			},
			Else: Allow,
			Comment: "TCP_ULP attaches an upper-layer protocol (kernel TLS) to a " +
				"TCP socket and loads its module on a host that has modules: kernel " +
				"code a run does not need. Level and option are ints, so the kernel " +
				"ignores the upper halves and so must the check. Every other option " +
				"is allowed."},

		// ---- System information.
		{Action: Allow, Names: []string{"uname", "sysinfo", "getrandom"}},

		// ---- Explicit denials (EPERM).
		{Action: Deny, Names: []string{
			"ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
			"pidfd_getfd", "process_madvise",
		}, Comment: "Reading, writing or comparing another process's memory and " +
			"descriptors: ptrace and its relatives."},
		{Action: Deny, Names: []string{"bpf", "perf_event_open", "userfaultfd"},
			Comment: "Large kernel attack surface with a long record of exploits; " +
				"userfaultfd also lets an exploit stall the kernel mid-copy."},
		{Action: Deny, Names: []string{"keyctl", "add_key", "request_key"},
			Comment: "The kernel keyring is not namespaced."},
		{Action: Deny, Names: []string{"io_uring_setup", "io_uring_enter", "io_uring_register"},
			Comment: "io_uring runs operations outside the calling task, past this " +
				"filter, and has been a steady source of kernel bugs. libuv and " +
				"others fall back to threads when setup fails."},
		{Action: Deny, Names: []string{
			"mount", "umount2", "mount_setattr", "move_mount", "open_tree",
			"fsopen", "fsconfig", "fsmount", "fspick", "pivot_root", "chroot",
		}, Comment: "The filesystem view is the jail's, set up before the filter."},
		{Action: Deny, Names: []string{"modify_ldt", "set_thread_area", "get_thread_area"},
			Comment: "Segment descriptors for 16-bit and i386 code (Wine, DOSEMU): " +
				"a 64-bit program sets its TLS with arch_prctl. The LDT code has a " +
				"long record of kernel bugs."},
		{Action: Deny, Names: []string{"memfd_secret", "cachestat", "process_mrelease", "map_shadow_stack"},
			Comment: "Newer memory calls no interpreter here uses. memfd_secret " +
				"takes pages out of the kernel's direct map, splitting it for the " +
				"whole host; cachestat reports which pages of a file are cached, a " +
				"window on what other runs read from the shared lower layers; " +
				"process_mrelease reaps another process's memory; map_shadow_stack " +
				"serves CET shadow stacks, which the runtimes here do not enable."},
		{Action: Deny, Names: []string{"uselib", "ustat", "sysfs", "_sysctl", "remap_file_pages"},
			Comment: "Obsolete: a.out libraries, superseded filesystem queries, " +
				"the binary sysctl interface, and nonlinear mappings (now emulated " +
				"by the kernel); no current libc or runtime calls them."},
		{Action: Deny, Names: []string{"unshare", "setns"},
			Comment: "Namespaces are the jail's; see clone."},
		{Action: Deny, Names: []string{
			"kexec_load", "kexec_file_load", "init_module", "finit_module",
			"delete_module", "reboot", "swapon", "swapoff", "acct", "quotactl",
			"quotactl_fd", "syslog", "iopl", "ioperm", "vhangup", "lookup_dcookie",
			"nfsservctl", "sethostname", "setdomainname",
		}, Comment: "Administration of the whole machine."},
		{Action: Deny, Names: []string{"settimeofday", "clock_settime", "clock_adjtime", "adjtimex"},
			Comment: "The clock is shared by every run and by the host."},
		{Action: Deny, Names: []string{"open_by_handle_at", "name_to_handle_at"},
			Comment: "File handles name inodes directly and so step around the " +
				"mount namespace (the \"shocker\" container escape)."},
		{Action: Allow, Names: []string{
			"inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
		}, Comment: "File watchers (Node's fs.watch, watchdog). The instance and " +
			"watch limits are per user and charged up the user namespace chain " +
			"to its owner, the run's own host id: one run exhausts only its own."},
		{Action: Deny, Names: []string{"fanotify_init", "fanotify_mark"},
			Comment: "fanotify watches whole mounts and filesystems, the host's " +
				"rootfs included; it needs CAP_SYS_ADMIN for most of that anyway."},
		{Action: Deny, Names: []string{
			"mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
			"mq_getsetattr",
		}, Comment: "POSIX message queues: each run has its own IPC namespace and " +
			"RLIMIT_MSGQUEUE count, so nothing is shared; denied as kernel " +
			"surface that CPython and Node programs do not use."},
		{Action: Deny, Names: []string{
			"shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop",
			"semctl", "msgget", "msgsnd", "msgrcv", "msgctl",
		}, Comment: "System V IPC: the objects live in the run's own IPC namespace " +
			"and die with it, so nothing is shared; denied as kernel surface. " +
			"CPython and Node use POSIX shared memory (/dev/shm files) and " +
			"futexes instead."},
	}
}
