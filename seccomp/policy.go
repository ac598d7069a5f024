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
)

var actionNames = [...]string{
	actionUnset: "unset",
	Allow:       "allow",
	Deny:        "deny",
	NoSys:       "nosys",
}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// ParseAction parses the String form of an Action ("allow", "deny", "nosys") and
// rejects anything else.
func ParseAction(s string) (Action, error) {
	for a := Allow; a <= NoSys; a++ {
		if actionNames[a] == s {
			return a, nil
		}
	}
	return actionUnset, fmt.Errorf("parsing seccomp action %q: %w (want allow, deny or nosys)", s, ErrInvalidPolicy)
}

func (a Action) valid() bool { return a >= Allow && a <= NoSys }

// Op says how a Cond compares an argument with its Values.
type Op uint8

const (
	opUnset Op = iota
	// In holds when the masked argument equals one of the Values. Use it for
	// allowlists: comparing more bits than the kernel reads only denies more.
	In
	// NotIn holds when the masked argument equals none of the Values. Use it for
	// denylists, with a Mask no wider than the bits the kernel reads, or a caller
	// could dodge the list by setting bits the kernel ignores.
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

// Rule gives the action for the calls it names.
type Rule struct {
	// Names are system call names as libseccomp spells them ("newfstatat", not
	// "fstatat").
	Names []string
	// Action applies to a call whose arguments pass every check in When, or to
	// every call when When is empty.
	Action Action
	// When holds at most one Cond per argument.
	When []Cond
	// Else applies to a call that fails a check in When. It is set exactly when
	// When is.
	Else Action
	// Comment says why the rule is there, for the reviewer.
	Comment string
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
	for _, c := range r.When {
		if !c.holds(args[c.Arg]) {
			return r.Else
		}
	}
	return r.Action
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

// personality(2) values a sandboxed program may pass.
const (
	perLinux         = 0          // PER_LINUX: the normal personality, no flags.
	personalityQuery = 0xffffffff // reads the personality without changing it.
)

// Default returns the policy every run gets: an allowlist of what CPython, Node
// and a shell need, and what brig's own init needs once the filter is on (fork,
// exec and wait as a reaper), with unknown calls failing as ENOSYS and the
// dangerous known ones as EPERM.
//
// Left out on purpose, so ENOSYS: Linux AIO (io_setup and friends; callers fall
// back to threads), NUMA placement (mbind, get_mempolicy, set_mempolicy,
// migrate_pages, move_pages), modify_ldt and set_thread_area, real-time
// scheduling (sched_setparam, sched_setscheduler, sched_setattr), ioprio_get and
// ioprio_set, process_mrelease, memfd_secret, cachestat, map_shadow_stack, and
// the obsolete (uselib, ustat, sysfs, _sysctl, remap_file_pages). A call newer
// than the libseccomp that compiles the table (2.5.4 knows up to futex_requeue,
// Linux 6.7) cannot be named at all and also gets ENOSYS, so its callers take
// their older path.
func Default() Policy {
	return Policy{
		// ENOSYS rather than EPERM for unknown calls: a program probing a call that
		// is newer than the table (statmount, mseal) takes its old-kernel path.
		Default: NoSys,
		Rules:   defaultRules(),
	}
}

func defaultRules() []Rule {
	return []Rule{
		// ---- Files, directories and descriptors.
		{Action: Allow, Names: []string{
			"read", "write", "readv", "writev", "pread64", "pwrite64", "preadv",
			"pwritev", "preadv2", "pwritev2", "lseek", "sendfile", "splice", "tee",
			"vmsplice", "copy_file_range", "readahead", "fadvise64",
			"open", "openat", "openat2", "creat", "close", "close_range",
			"dup", "dup2", "dup3", "fcntl", "flock", "pipe", "pipe2",
			"stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs",
			"access", "faccessat", "faccessat2", "getdents", "getdents64",
			"readlink", "readlinkat", "getcwd", "chdir", "fchdir", "umask",
			"mkdir", "mkdirat", "rmdir", "link", "linkat", "symlink", "symlinkat",
			"unlink", "unlinkat", "rename", "renameat", "renameat2",
			"truncate", "ftruncate", "fallocate", "utime", "utimes", "futimesat",
			"utimensat", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown",
			"fchownat", "fsync", "fdatasync", "syncfs", "sync_file_range", "sync",
			"getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr",
			"flistxattr", "setxattr", "lsetxattr", "fsetxattr", "removexattr",
			"lremovexattr", "fremovexattr",
		}},
		{Action: Allow, Names: []string{"mknod", "mknodat"},
			Comment: "mkfifo(3) is mknod; device nodes need CAP_MKNOD, which the sandbox lacks."},
		{Action: Allow, Names: []string{"ioctl"},
			When: []Cond{{Arg: 1, Mask: lowWord, Op: NotIn, Values: []uint64{unix.TIOCSTI, unix.TIOCLINUX}}},
			Else: Deny,
			Comment: "TIOCSTI pushes bytes into a terminal's input queue and TIOCLINUX " +
				"can read and paste a console's screen: both reach a terminal the " +
				"sandbox shares with whoever started it. The command is an unsigned " +
				"int, so the kernel ignores the upper half of the register and so " +
				"must the check (0xffffffff00005412 is TIOCSTI too)."},

		// ---- Memory.
		{Action: Allow, Names: []string{
			"brk", "mmap", "munmap", "mremap", "mprotect", "msync", "mincore",
			"madvise", "memfd_create", "membarrier", "pkey_alloc", "pkey_free",
			"pkey_mprotect",
		}},
		{Action: Allow, Names: []string{"mlock", "mlock2", "munlock", "mlockall", "munlockall"},
			Comment: "Bounded by RLIMIT_MEMLOCK and the run's memory cgroup; crypto " +
				"libraries lock key material."},

		// ---- Processes, threads and signals.
		{Action: Allow, Names: []string{"clone"},
			When: []Cond{{Arg: 0, Mask: namespaceFlags, Op: In, Values: []uint64{0}}},
			Else: Deny,
			Comment: "Threads (CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|" +
				"CLONE_THREAD|CLONE_SYSVSEM), fork and Go's vfork-style ForkExec, " +
				"but never a new namespace: that is the jail's job, and a user " +
				"namespace gives the caller capabilities the filter cannot see."},
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
			"getrlimit", "setrlimit", "prlimit64", "getrusage",
			"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending",
			"rt_sigtimedwait", "rt_sigsuspend", "rt_sigqueueinfo",
			"rt_tgsigqueueinfo", "sigaltstack", "pause",
		}},
		{Action: Allow, Names: []string{"execve", "execveat"},
			Comment: "Inside the jail's mount namespace; no_new_privs makes setuid " +
				"bits and file capabilities inert, and the filter survives exec."},
		{Action: Allow, Names: []string{"kill", "tkill", "tgkill", "pidfd_open", "pidfd_send_signal"},
			Comment: "Signals reach only the run's own PID namespace. Go's os/exec " +
				"uses pidfds to wait for and signal children."},
		{Action: Allow, Names: []string{"prctl"},
			Comment: "Thread names, PR_SET_PDEATHSIG, no_new_privs, dumpable; the " +
				"options that matter (PR_SET_MM, capability bounding set) check " +
				"capabilities in the kernel."},
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
		{Action: Allow, Names: []string{"socket"},
			When: []Cond{
				{Arg: 0, Op: In, Values: []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6}},
				{Arg: 1, Mask: sockTypeMask, Op: In, Values: []uint64{unix.SOCK_STREAM, unix.SOCK_DGRAM, unix.SOCK_SEQPACKET}},
			},
			Else: Deny,
			Comment: "Local and IP sockets only. Every other family (netlink, " +
				"packet, vsock, the rarely used ones whose modules the kernel would " +
				"load on demand) is attack surface a run does not need, and raw " +
				"and packet sockets could forge traffic. The family is compared " +
				"as a whole register (high bits set means EPERM); the type with " +
				"SOCK_NONBLOCK and SOCK_CLOEXEC masked off, so SOCK_RAW|SOCK_CLOEXEC " +
				"is still SOCK_RAW."},
		{Action: Allow, Names: []string{"socketpair"},
			When:    []Cond{{Arg: 0, Op: In, Values: []uint64{unix.AF_UNIX}}},
			Else:    Deny,
			Comment: "Only AF_UNIX has socket pairs that matter; same reasoning as socket."},
		{Action: Allow, Names: []string{
			"connect", "accept", "accept4", "bind", "listen", "shutdown",
			"getsockname", "getpeername", "setsockopt", "getsockopt",
			"sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
		}, Comment: "Where they can connect is the egress proxy's and the network " +
			"namespace's business."},

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
		{Action: Deny, Names: []string{
			"inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
			"fanotify_init", "fanotify_mark",
		}, Comment: "The inotify instance and watch limits are per uid, and all " +
			"runs share one uid: one run could exhaust them for the others. " +
			"fanotify watches whole mounts. Programs fall back to polling."},
		{Action: Deny, Names: []string{
			"mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
			"mq_getsetattr",
		}, Comment: "RLIMIT_MSGQUEUE is per uid, shared by all runs as above."},
		{Action: Deny, Names: []string{
			"shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop",
			"semctl", "msgget", "msgsnd", "msgrcv", "msgctl",
		}, Comment: "System V IPC objects outlive their creator and, where runs " +
			"share an IPC namespace, are visible to other runs. CPython and Node " +
			"use POSIX shared memory (/dev/shm files) and futexes instead."},
	}
}
