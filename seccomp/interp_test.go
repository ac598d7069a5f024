//go:build linux && amd64

package seccomp

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// These tests run the compiled program in x/net/bpf's user-space VM, so they need
// neither root nor a kernel that enforces anything.

// Filter results, as the kernel reads the program's return value.
const (
	retAllow       = unix.SECCOMP_RET_ALLOW
	retEPERM       = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS      = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	retIgnore      = unix.SECCOMP_RET_ERRNO // errno 0: the call returns 0 unrun
	retKillProcess = unix.SECCOMP_RET_KILL_PROCESS
)

const x32Bit = 0x40000000 // __X32_SYSCALL_BIT

func retName(r uint32) string {
	switch r {
	case retAllow:
		return "ALLOW"
	case retEPERM:
		return "ERRNO(EPERM)"
	case retENOSYS:
		return "ERRNO(ENOSYS)"
	case retIgnore:
		return "ERRNO(0)"
	case retKillProcess:
		return "KILL_PROCESS"
	}
	return fmt.Sprintf("%#x", r)
}

func actionRet(a Action) uint32 {
	switch a {
	case Allow:
		return retAllow
	case Deny:
		return retEPERM
	case NoSys:
		return retENOSYS
	case Ignore:
		return retIgnore
	}
	panic(fmt.Sprintf("no return value for %v", a))
}

// seccompData is struct seccomp_data as the filter sees it: nr (int) at 0, arch
// at 4, instruction_pointer at 8, args[6] at 16. The kernel's BPF loads 32-bit
// words in host (little-endian) order, x/net/bpf's VM in big-endian order, so
// each word is stored big-endian to read back as the kernel would read it. A
// 64-bit argument is two such words, the low half first (at the lower offset),
// as on little-endian x86_64.
func seccompData(arch uint32, nr uint32, args [6]uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], nr)
	binary.BigEndian.PutUint32(b[4:], arch)
	for i, a := range args {
		off := 16 + 8*i
		binary.BigEndian.PutUint32(b[off:], uint32(a))
		binary.BigEndian.PutUint32(b[off+4:], uint32(a>>32))
	}
	return b
}

type vm struct{ *bpf.VM }

func newVM(tb testing.TB, prog Program) vm {
	tb.Helper()
	raw := make([]bpf.RawInstruction, len(prog))
	for i, ins := range prog {
		raw[i] = bpf.RawInstruction{Op: ins.Code, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	insts, ok := bpf.Disassemble(raw)
	if !ok {
		tb.Fatalf("disassembling the program: got an instruction x/net/bpf does not know")
	}
	v, err := bpf.NewVM(insts)
	if err != nil {
		tb.Fatalf("loading the program into the VM: %v", err)
	}
	return vm{v}
}

func (v vm) run(tb testing.TB, arch, nr uint32, args [6]uint64) uint32 {
	tb.Helper()
	r, err := v.Run(seccompData(arch, nr, args))
	if err != nil {
		tb.Fatalf("running the program: %v", err)
	}
	return uint32(r)
}

// deniedCalls are the calls the issue requires to fail with EPERM whatever their
// arguments, spelled out here rather than read from the table.
var deniedCalls = []struct {
	name string
	nr   uint32
}{
	{"ptrace", unix.SYS_PTRACE},
	{"process_vm_readv", unix.SYS_PROCESS_VM_READV},
	{"process_vm_writev", unix.SYS_PROCESS_VM_WRITEV},
	{"kcmp", unix.SYS_KCMP},
	{"bpf", unix.SYS_BPF},
	{"perf_event_open", unix.SYS_PERF_EVENT_OPEN},
	{"userfaultfd", unix.SYS_USERFAULTFD},
	{"keyctl", unix.SYS_KEYCTL},
	{"add_key", unix.SYS_ADD_KEY},
	{"request_key", unix.SYS_REQUEST_KEY},
	{"io_uring_setup", unix.SYS_IO_URING_SETUP},
	{"io_uring_enter", unix.SYS_IO_URING_ENTER},
	{"io_uring_register", unix.SYS_IO_URING_REGISTER},
	{"mount", unix.SYS_MOUNT},
	{"umount2", unix.SYS_UMOUNT2},
	{"mount_setattr", unix.SYS_MOUNT_SETATTR},
	{"move_mount", unix.SYS_MOVE_MOUNT},
	{"open_tree", unix.SYS_OPEN_TREE},
	{"fsopen", unix.SYS_FSOPEN},
	{"fsconfig", unix.SYS_FSCONFIG},
	{"fsmount", unix.SYS_FSMOUNT},
	{"fspick", unix.SYS_FSPICK},
	{"pivot_root", unix.SYS_PIVOT_ROOT},
	{"chroot", unix.SYS_CHROOT},
	{"unshare", unix.SYS_UNSHARE},
	{"setns", unix.SYS_SETNS},
	{"kexec_load", unix.SYS_KEXEC_LOAD},
	{"kexec_file_load", unix.SYS_KEXEC_FILE_LOAD},
	{"init_module", unix.SYS_INIT_MODULE},
	{"finit_module", unix.SYS_FINIT_MODULE},
	{"delete_module", unix.SYS_DELETE_MODULE},
	{"reboot", unix.SYS_REBOOT},
	{"swapon", unix.SYS_SWAPON},
	{"swapoff", unix.SYS_SWAPOFF},
	{"acct", unix.SYS_ACCT},
	{"settimeofday", unix.SYS_SETTIMEOFDAY},
	{"clock_settime", unix.SYS_CLOCK_SETTIME},
	{"clock_adjtime", unix.SYS_CLOCK_ADJTIME},
	{"adjtimex", unix.SYS_ADJTIMEX},
	{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT},
	{"name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT},
	{"quotactl", unix.SYS_QUOTACTL},
	{"syslog", unix.SYS_SYSLOG},
	{"iopl", unix.SYS_IOPL},
	{"ioperm", unix.SYS_IOPERM},
	{"vhangup", unix.SYS_VHANGUP},
	{"lookup_dcookie", unix.SYS_LOOKUP_DCOOKIE},
	{"sethostname", unix.SYS_SETHOSTNAME},
	{"setdomainname", unix.SYS_SETDOMAINNAME},
	{"mq_open", unix.SYS_MQ_OPEN},
	{"mq_unlink", unix.SYS_MQ_UNLINK},
	{"mq_timedsend", unix.SYS_MQ_TIMEDSEND},
	{"mq_timedreceive", unix.SYS_MQ_TIMEDRECEIVE},
	{"mq_notify", unix.SYS_MQ_NOTIFY},
	{"mq_getsetattr", unix.SYS_MQ_GETSETATTR},
	{"fanotify_init", unix.SYS_FANOTIFY_INIT},
	{"nfsservctl", unix.SYS_NFSSERVCTL},
	{"modify_ldt", unix.SYS_MODIFY_LDT},
	{"set_thread_area", unix.SYS_SET_THREAD_AREA},
	{"get_thread_area", unix.SYS_GET_THREAD_AREA},
	{"migrate_pages", unix.SYS_MIGRATE_PAGES},
	{"move_pages", unix.SYS_MOVE_PAGES},
	{"memfd_secret", unix.SYS_MEMFD_SECRET},
	{"cachestat", unix.SYS_CACHESTAT},
	{"process_mrelease", unix.SYS_PROCESS_MRELEASE},
	{"map_shadow_stack", unix.SYS_MAP_SHADOW_STACK},
	{"uselib", unix.SYS_USELIB},
	{"ustat", unix.SYS_USTAT},
	{"sysfs", unix.SYS_SYSFS},
	{"_sysctl", unix.SYS__SYSCTL},
	{"remap_file_pages", unix.SYS_REMAP_FILE_PAGES},
}

func TestProgramInVM(t *testing.T) {
	v := newVM(t, compileDefault(t))
	const sigchld = uint64(unix.SIGCHLD)
	goThread := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_SYSVSEM | unix.CLONE_THREAD)
	goForkExec := uint64(unix.CLONE_VFORK|unix.CLONE_VM) | sigchld

	type tc struct {
		name string
		arch uint32 // zero means AUDIT_ARCH_X86_64
		nr   uint32
		args [6]uint64
		want uint32
	}
	tests := []tc{
		{name: "read allowed", nr: unix.SYS_READ, want: retAllow},
		{name: "openat allowed", nr: unix.SYS_OPENAT, want: retAllow},
		{name: "mmap allowed", nr: unix.SYS_MMAP, want: retAllow},
		{name: "futex allowed", nr: unix.SYS_FUTEX, want: retAllow},
		{name: "execve allowed", nr: unix.SYS_EXECVE, want: retAllow},
		{name: "wait4 allowed", nr: unix.SYS_WAIT4, want: retAllow},
		{name: "waitid allowed", nr: unix.SYS_WAITID, want: retAllow},
		{name: "pidfd_open allowed", nr: unix.SYS_PIDFD_OPEN, want: retAllow},
		{name: "pidfd_send_signal allowed", nr: unix.SYS_PIDFD_SEND_SIGNAL, want: retAllow},
		{name: "getrandom allowed", nr: unix.SYS_GETRANDOM, want: retAllow},
		{name: "rseq allowed", nr: unix.SYS_RSEQ, want: retAllow},
		{name: "prctl allowed", nr: unix.SYS_PRCTL, want: retAllow},
		{name: "memfd_create allowed", nr: unix.SYS_MEMFD_CREATE, want: retAllow},
		{name: "epoll_pwait allowed", nr: unix.SYS_EPOLL_PWAIT, want: retAllow},

		{name: "unknown number 1000", nr: 1000, want: retENOSYS},
		{name: "unimplemented tuxcall", nr: unix.SYS_TUXCALL, want: retENOSYS},
		{name: "unimplemented epoll_wait_old", nr: unix.SYS_EPOLL_WAIT_OLD, want: retENOSYS},
		{name: "clone3", nr: unix.SYS_CLONE3, want: retENOSYS},

		{name: "clone go thread", nr: unix.SYS_CLONE, args: [6]uint64{goThread}, want: retAllow},
		{name: "clone go ForkExec vfork", nr: unix.SYS_CLONE, args: [6]uint64{goForkExec}, want: retAllow},
		{name: "clone fork", nr: unix.SYS_CLONE, args: [6]uint64{sigchld}, want: retAllow},
		{name: "clone glibc pthread", nr: unix.SYS_CLONE, args: [6]uint64{goThread | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID}, want: retAllow},
		{name: "clone pidfd", nr: unix.SYS_CLONE, args: [6]uint64{goForkExec | unix.CLONE_PIDFD}, want: retAllow},
		{name: "clone NEWUSER with high bits", nr: unix.SYS_CLONE, args: [6]uint64{0xffffffff00000000 | unix.CLONE_NEWUSER}, want: retEPERM},
		{name: "clone all namespace flags", nr: unix.SYS_CLONE, args: [6]uint64{namespaceFlags | sigchld}, want: retEPERM},
		{name: "clone CLONE_PARENT", nr: unix.SYS_CLONE, args: [6]uint64{unix.CLONE_PARENT | sigchld}, want: retEPERM},
		{name: "clone thread with CLONE_PARENT", nr: unix.SYS_CLONE, args: [6]uint64{goThread | unix.CLONE_PARENT}, want: retEPERM},
		{name: "io_setup", nr: unix.SYS_IO_SETUP, want: retENOSYS},
		{name: "io_submit", nr: unix.SYS_IO_SUBMIT, want: retAllow},

		{name: "socket AF_INET stream", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET, unix.SOCK_STREAM}, want: retAllow},
		{name: "socket AF_INET6 dgram cloexec nonblock", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET6, unix.SOCK_DGRAM | unix.SOCK_CLOEXEC | unix.SOCK_NONBLOCK}, want: retAllow},
		{name: "socket AF_UNIX seqpacket", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_UNIX, unix.SOCK_SEQPACKET | unix.SOCK_CLOEXEC}, want: retAllow},
		{name: "socket AF_INET raw", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP}, want: retEPERM},
		{name: "socket AF_INET raw cloexec", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET, unix.SOCK_RAW | unix.SOCK_CLOEXEC}, want: retEPERM},
		{name: "socket AF_INET6 raw nonblock", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET6, unix.SOCK_RAW | unix.SOCK_NONBLOCK}, want: retEPERM},
		{name: "socket AF_INET SOCK_PACKET", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET, unix.SOCK_PACKET}, want: retEPERM},
		{name: "socket AF_PACKET", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_PACKET, unix.SOCK_RAW}, want: retEPERM},
		{name: "socket AF_PACKET dgram", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_PACKET, unix.SOCK_DGRAM}, want: retEPERM},
		{name: "socket AF_NETLINK", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_NETLINK, unix.SOCK_DGRAM}, want: retEPERM},
		{name: "socket AF_VSOCK", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_VSOCK, unix.SOCK_STREAM}, want: retEPERM},
		{name: "socket AF_UNSPEC", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_UNSPEC, unix.SOCK_STREAM}, want: retEPERM},
		{name: "socket AF_INET with high bits", nr: unix.SYS_SOCKET, args: [6]uint64{1<<32 | unix.AF_INET, unix.SOCK_STREAM}, want: retEPERM},
		{name: "socket AF_INET TCP", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_TCP}, want: retAllow},
		{name: "socket AF_INET UDP", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_UDP}, want: retAllow},
		{name: "socket AF_INET ICMP ping", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMP}, want: retAllow},
		{name: "socket AF_INET6 TCP", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET6, unix.SOCK_STREAM | unix.SOCK_CLOEXEC, unix.IPPROTO_TCP}, want: retAllow},
		{name: "socket AF_INET6 UDP", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET6, unix.SOCK_DGRAM, unix.IPPROTO_UDP}, want: retAllow},
		{name: "socket AF_INET6 ICMPv6 ping", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET6, unix.SOCK_DGRAM, unix.IPPROTO_ICMPV6}, want: retAllow},
		{name: "socket AF_INET MPTCP", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP}, want: retEPERM},
		{name: "socket AF_INET6 MPTCP", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET6, unix.SOCK_STREAM, unix.IPPROTO_MPTCP}, want: retEPERM},
		{name: "socket AF_INET UDP-Lite", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_UDPLITE}, want: retEPERM},
		{name: "socket AF_INET6 UDP-Lite", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET6, unix.SOCK_DGRAM, unix.IPPROTO_UDPLITE}, want: retEPERM},
		{name: "socket AF_INET SCTP", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET, unix.SOCK_SEQPACKET, unix.IPPROTO_SCTP}, want: retEPERM},
		// Protocol 0 picks SCTP for an IP SOCK_SEQPACKET where the kernel has it.
		{name: "socket AF_INET seqpacket, protocol 0", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET, unix.SOCK_SEQPACKET}, want: retEPERM},
		{name: "socket AF_INET6 seqpacket cloexec, protocol 0", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET6, unix.SOCK_SEQPACKET | unix.SOCK_CLOEXEC}, want: retEPERM},
		{name: "socket AF_INET6 dgram", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET6, unix.SOCK_DGRAM}, want: retAllow},
		{name: "socket AF_INET with ICMPv6", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMPV6}, want: retEPERM},
		{name: "socket AF_INET6 with ICMP", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET6, unix.SOCK_DGRAM, unix.IPPROTO_ICMP}, want: retEPERM},
		{name: "socket AF_UNIX protocol 1", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_UNIX, unix.SOCK_STREAM, 1}, want: retEPERM},
		{name: "socket AF_INET TCP with high bits", nr: unix.SYS_SOCKET, args: [6]uint64{unix.AF_INET, unix.SOCK_STREAM, 1<<32 | unix.IPPROTO_TCP}, want: retEPERM},
		{name: "socketpair AF_UNIX", nr: unix.SYS_SOCKETPAIR, args: [6]uint64{unix.AF_UNIX, unix.SOCK_STREAM}, want: retAllow},
		{name: "socketpair AF_INET", nr: unix.SYS_SOCKETPAIR, args: [6]uint64{unix.AF_INET, unix.SOCK_STREAM}, want: retEPERM},

		{name: "ioctl TCGETS", nr: unix.SYS_IOCTL, args: [6]uint64{0, unix.TCGETS}, want: retAllow},
		{name: "ioctl TIOCGWINSZ", nr: unix.SYS_IOCTL, args: [6]uint64{1, unix.TIOCGWINSZ}, want: retAllow},
		{name: "ioctl TIOCSTI", nr: unix.SYS_IOCTL, args: [6]uint64{0, unix.TIOCSTI}, want: retEPERM},
		{name: "ioctl TIOCSTI with high bits", nr: unix.SYS_IOCTL, args: [6]uint64{0, 0xffffffff00000000 | unix.TIOCSTI}, want: retEPERM},
		{name: "ioctl TIOCSTI with bit 32", nr: unix.SYS_IOCTL, args: [6]uint64{0, 1<<32 | unix.TIOCSTI}, want: retEPERM},
		{name: "ioctl TIOCSETD", nr: unix.SYS_IOCTL, args: [6]uint64{0, unix.TIOCSETD}, want: retEPERM},
		{name: "ioctl TIOCGETD", nr: unix.SYS_IOCTL, args: [6]uint64{0, unix.TIOCGETD}, want: retAllow},
		// fadvise64's advice is an int: a high word the kernel ignores must
		// not turn DONTNEED's eviction back on.
		{name: "fadvise64 DONTNEED", nr: unix.SYS_FADVISE64, args: [6]uint64{0, 0, 0, unix.FADV_DONTNEED}, want: retIgnore},
		{name: "fadvise64 DONTNEED with bit 32", nr: unix.SYS_FADVISE64, args: [6]uint64{0, 0, 0, 1<<32 | unix.FADV_DONTNEED}, want: retIgnore},
		{name: "fadvise64 DONTNEED with high bits", nr: unix.SYS_FADVISE64, args: [6]uint64{0, 0, 0, 0xffffffff00000000 | unix.FADV_DONTNEED}, want: retIgnore},
		{name: "fadvise64 WILLNEED", nr: unix.SYS_FADVISE64, args: [6]uint64{0, 0, 0, unix.FADV_WILLNEED}, want: retAllow},
		// KSM: neither a range nor a whole process offered for merging.
		{name: "madvise MADV_MERGEABLE", nr: unix.SYS_MADVISE, args: [6]uint64{0, 4096, unix.MADV_MERGEABLE}, want: retIgnore},
		{name: "madvise MADV_MERGEABLE with bit 32", nr: unix.SYS_MADVISE, args: [6]uint64{0, 4096, 1<<32 | unix.MADV_MERGEABLE}, want: retIgnore},
		{name: "madvise MADV_DONTNEED", nr: unix.SYS_MADVISE, args: [6]uint64{0, 4096, unix.MADV_DONTNEED}, want: retAllow},
		{name: "madvise MADV_UNMERGEABLE", nr: unix.SYS_MADVISE, args: [6]uint64{0, 4096, unix.MADV_UNMERGEABLE}, want: retAllow},
		{name: "prctl PR_SET_MEMORY_MERGE", nr: unix.SYS_PRCTL, args: [6]uint64{unix.PR_SET_MEMORY_MERGE, 1}, want: retEPERM},
		{name: "prctl PR_SET_MEMORY_MERGE with bit 32", nr: unix.SYS_PRCTL, args: [6]uint64{1<<32 | unix.PR_SET_MEMORY_MERGE, 1}, want: retEPERM},
		{name: "prctl PR_GET_MEMORY_MERGE", nr: unix.SYS_PRCTL, args: [6]uint64{unix.PR_GET_MEMORY_MERGE}, want: retAllow},
		{name: "prctl PR_SET_MM_MAP", nr: unix.SYS_PRCTL, args: [6]uint64{unix.PR_SET_MM, unix.PR_SET_MM_MAP}, want: retEPERM},
		{name: "prctl PR_SET_MM_MAP_SIZE", nr: unix.SYS_PRCTL, args: [6]uint64{unix.PR_SET_MM, unix.PR_SET_MM_MAP_SIZE}, want: retEPERM},
		{name: "prctl PR_SET_MM with bit 32", nr: unix.SYS_PRCTL, args: [6]uint64{1<<32 | unix.PR_SET_MM, unix.PR_SET_MM_MAP}, want: retEPERM},
		{name: "prctl PR_SET_NAME", nr: unix.SYS_PRCTL, args: [6]uint64{unix.PR_SET_NAME}, want: retAllow},
		{name: "prctl PR_SET_NAME", nr: unix.SYS_PRCTL, args: [6]uint64{unix.PR_SET_NAME, 0}, want: retAllow},
		{name: "ioctl TIOCLINUX", nr: unix.SYS_IOCTL, args: [6]uint64{0, unix.TIOCLINUX}, want: retEPERM},
		{name: "ioctl TIOCLINUX with high bits", nr: unix.SYS_IOCTL, args: [6]uint64{0, 0xffffffff00000000 | unix.TIOCLINUX}, want: retEPERM},
		{name: "ioctl TCGETS with high bits", nr: unix.SYS_IOCTL, args: [6]uint64{0, 0xffffffff00000000 | unix.TCGETS}, want: retAllow},

		{name: "setsockopt TCP_ULP", nr: unix.SYS_SETSOCKOPT, args: [6]uint64{3, unix.SOL_TCP, unix.TCP_ULP}, want: retEPERM},
		{name: "setsockopt TCP_ULP with high bits", nr: unix.SYS_SETSOCKOPT, args: [6]uint64{3, 0xffffffff00000000 | unix.SOL_TCP, 1<<32 | unix.TCP_ULP}, want: retEPERM},
		{name: "setsockopt TCP_NODELAY", nr: unix.SYS_SETSOCKOPT, args: [6]uint64{3, unix.SOL_TCP, unix.TCP_NODELAY}, want: retAllow},
		{name: "setsockopt SOL_SOCKET option 31", nr: unix.SYS_SETSOCKOPT, args: [6]uint64{3, unix.SOL_SOCKET, unix.TCP_ULP}, want: retAllow},
		{name: "setsockopt SO_REUSEADDR", nr: unix.SYS_SETSOCKOPT, args: [6]uint64{3, unix.SOL_SOCKET, unix.SO_REUSEADDR}, want: retAllow},

		{name: "sync ignored", nr: unix.SYS_SYNC, want: retIgnore},
		{name: "syncfs ignored", nr: unix.SYS_SYNCFS, args: [6]uint64{3}, want: retIgnore},
		{name: "fsync allowed", nr: unix.SYS_FSYNC, args: [6]uint64{3}, want: retAllow},
		{name: "fdatasync allowed", nr: unix.SYS_FDATASYNC, args: [6]uint64{3}, want: retAllow},

		{name: "sched_setscheduler SCHED_OTHER", nr: unix.SYS_SCHED_SETSCHEDULER, args: [6]uint64{0, unix.SCHED_NORMAL}, want: retAllow},
		{name: "sched_setscheduler SCHED_BATCH", nr: unix.SYS_SCHED_SETSCHEDULER, args: [6]uint64{0, unix.SCHED_BATCH}, want: retAllow},
		{name: "sched_setscheduler SCHED_IDLE", nr: unix.SYS_SCHED_SETSCHEDULER, args: [6]uint64{0, unix.SCHED_IDLE}, want: retAllow},
		{name: "sched_setscheduler SCHED_FIFO", nr: unix.SYS_SCHED_SETSCHEDULER, args: [6]uint64{0, unix.SCHED_FIFO}, want: retEPERM},
		{name: "sched_setscheduler SCHED_RR", nr: unix.SYS_SCHED_SETSCHEDULER, args: [6]uint64{0, unix.SCHED_RR}, want: retEPERM},
		{name: "sched_setscheduler SCHED_DEADLINE", nr: unix.SYS_SCHED_SETSCHEDULER, args: [6]uint64{0, unix.SCHED_DEADLINE}, want: retEPERM},
		{name: "sched_setscheduler SCHED_FIFO with high bits", nr: unix.SYS_SCHED_SETSCHEDULER, args: [6]uint64{0, 1<<32 | unix.SCHED_FIFO}, want: retEPERM},
		{name: "sched_setscheduler SCHED_BATCH reset on fork", nr: unix.SYS_SCHED_SETSCHEDULER, args: [6]uint64{0, unix.SCHED_BATCH | unix.SCHED_RESET_ON_FORK}, want: retEPERM},
		{name: "sched_setparam allowed", nr: unix.SYS_SCHED_SETPARAM, want: retAllow},
		{name: "sched_setattr allowed", nr: unix.SYS_SCHED_SETATTR, want: retAllow},
		{name: "ioprio_get allowed", nr: unix.SYS_IOPRIO_GET, want: retAllow},
		{name: "ioprio_set allowed", nr: unix.SYS_IOPRIO_SET, want: retAllow},
		{name: "io_submit allowed", nr: unix.SYS_IO_SUBMIT, want: retAllow},
		{name: "io_getevents allowed", nr: unix.SYS_IO_GETEVENTS, want: retAllow},
		{name: "io_pgetevents allowed", nr: unix.SYS_IO_PGETEVENTS, want: retAllow},
		{name: "io_cancel allowed", nr: unix.SYS_IO_CANCEL, want: retAllow},
		{name: "io_destroy allowed", nr: unix.SYS_IO_DESTROY, want: retAllow},
		{name: "get_mempolicy allowed", nr: unix.SYS_GET_MEMPOLICY, want: retAllow},
		{name: "set_mempolicy allowed", nr: unix.SYS_SET_MEMPOLICY, want: retAllow},
		{name: "mbind allowed", nr: unix.SYS_MBIND, want: retAllow},

		{name: "setrlimit RLIMIT_CORE ignored", nr: unix.SYS_SETRLIMIT, args: [6]uint64{unix.RLIMIT_CORE, 0x7000}, want: retIgnore},
		{name: "setrlimit RLIMIT_CORE with high bits ignored", nr: unix.SYS_SETRLIMIT, args: [6]uint64{1<<32 | unix.RLIMIT_CORE, 0x7000}, want: retIgnore},
		{name: "setrlimit RLIMIT_NOFILE", nr: unix.SYS_SETRLIMIT, args: [6]uint64{unix.RLIMIT_NOFILE, 0x7000}, want: retAllow},
		{name: "getrlimit RLIMIT_CORE", nr: unix.SYS_GETRLIMIT, args: [6]uint64{unix.RLIMIT_CORE, 0x7000}, want: retAllow},
		{name: "prlimit64 set RLIMIT_CORE ignored", nr: unix.SYS_PRLIMIT64, args: [6]uint64{0, unix.RLIMIT_CORE, 0x7000, 0}, want: retIgnore},
		{name: "prlimit64 set RLIMIT_CORE of another pid ignored", nr: unix.SYS_PRLIMIT64, args: [6]uint64{123, unix.RLIMIT_CORE, 0x7000, 0}, want: retIgnore},
		{name: "prlimit64 set RLIMIT_CORE with high bits ignored", nr: unix.SYS_PRLIMIT64, args: [6]uint64{0, 0xffffffff00000000 | unix.RLIMIT_CORE, 0x7000, 0}, want: retIgnore},
		{name: "prlimit64 read RLIMIT_CORE", nr: unix.SYS_PRLIMIT64, args: [6]uint64{0, unix.RLIMIT_CORE, 0, 0x7000}, want: retAllow},
		{name: "prlimit64 set and read RLIMIT_CORE", nr: unix.SYS_PRLIMIT64, args: [6]uint64{0, unix.RLIMIT_CORE, 0x7000, 0x8000}, want: retEPERM},
		{name: "prlimit64 set and read RLIMIT_NOFILE", nr: unix.SYS_PRLIMIT64, args: [6]uint64{0, unix.RLIMIT_NOFILE, 0x7000, 0x8000}, want: retAllow},

		{name: "personality query", nr: unix.SYS_PERSONALITY, args: [6]uint64{0xffffffff}, want: retAllow},
		{name: "personality PER_LINUX", nr: unix.SYS_PERSONALITY, args: [6]uint64{0}, want: retAllow},
		{name: "personality ADDR_NO_RANDOMIZE", nr: unix.SYS_PERSONALITY, args: [6]uint64{0x0040000 /* ADDR_NO_RANDOMIZE */}, want: retEPERM},
		{name: "personality READ_IMPLIES_EXEC", nr: unix.SYS_PERSONALITY, args: [6]uint64{0x0400000 /* READ_IMPLIES_EXEC */}, want: retEPERM},
		{name: "personality PER_LINUX32", nr: unix.SYS_PERSONALITY, args: [6]uint64{0x0008 /* PER_LINUX32 */}, want: retEPERM},

		{name: "i386 getpid", arch: unix.AUDIT_ARCH_I386, nr: 20, want: retKillProcess},
		{name: "i386 read", arch: unix.AUDIT_ARCH_I386, nr: 3, want: retKillProcess},
		{name: "aarch64 read", arch: unix.AUDIT_ARCH_AARCH64, nr: 63, want: retKillProcess},
		// x32 calls arrive with arch AUDIT_ARCH_X86_64 and bit 30 set in nr; only
		// libseccomp's explicit range check keeps them from matching x86_64 rules.
		{name: "x32 getpid", nr: x32Bit | unix.SYS_GETPID, want: retKillProcess},
		{name: "x32 read", nr: x32Bit | unix.SYS_READ, want: retKillProcess},
		{name: "x32 ptrace", nr: x32Bit | unix.SYS_PTRACE, want: retKillProcess},
		{name: "x32 x86_64 number 512", nr: x32Bit | 512, want: retKillProcess},
	}
	for _, d := range deniedCalls {
		tests = append(tests, tc{name: d.name + " denied", nr: d.nr, want: retEPERM})
	}
	for _, f := range []struct {
		name string
		flag uint64
	}{
		{"CLONE_NEWNS", unix.CLONE_NEWNS}, {"CLONE_NEWUTS", unix.CLONE_NEWUTS},
		{"CLONE_NEWIPC", unix.CLONE_NEWIPC}, {"CLONE_NEWUSER", unix.CLONE_NEWUSER},
		{"CLONE_NEWPID", unix.CLONE_NEWPID}, {"CLONE_NEWNET", unix.CLONE_NEWNET},
		{"CLONE_NEWCGROUP", unix.CLONE_NEWCGROUP}, {"CLONE_NEWTIME", unix.CLONE_NEWTIME},
	} {
		tests = append(tests,
			tc{name: "clone " + f.name, nr: unix.SYS_CLONE, args: [6]uint64{f.flag | sigchld}, want: retEPERM},
			tc{name: "clone thread with " + f.name, nr: unix.SYS_CLONE, args: [6]uint64{goThread | f.flag}, want: retEPERM})
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			arch := tt.arch
			if arch == 0 {
				arch = unix.AUDIT_ARCH_X86_64
			}
			if got := v.run(t, arch, tt.nr, tt.args); got != tt.want {
				t.Errorf("got %s, want %s", retName(got), retName(tt.want))
			}
		})
	}
}

// TestProgramMatchesTable checks that the compiled program gives every call
// number the table's verdict, and, for the calls with argument conditions, that
// it agrees with the table over values around each boundary the conditions
// draw: this is what proves the expansion into libseccomp rules leaves no gaps
// and no overlaps.
func TestProgramMatchesTable(t *testing.T) {
	for _, pol := range []struct {
		name   string
		policy Policy
	}{{"Default", Default()}, {"Spawner", Spawner()}, {"Reaper", Reaper()}, {"Init", Init()},
		{"Zygote", Zygote()}, {"ZygoteChild", ZygoteChild()}, {"SpawnedProgram", SpawnedProgram()}} {
		t.Run(pol.name, func(t *testing.T) {
			programMatchesTable(t, pol.policy)
		})
	}
}

func programMatchesTable(t *testing.T, p Policy) {
	prog, err := Compile(p)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	v := newVM(t, prog)

	t.Run("every call number", func(t *testing.T) {
		for nr := range uint32(1024) {
			name, err := libseccomp.ScmpSyscall(nr).GetName()
			if err != nil {
				name = "" // no such call on x86_64
			}
			want := actionRet(p.action(name, [6]uint64{}))
			if got := v.run(t, unix.AUDIT_ARCH_X86_64, nr, [6]uint64{}); got != want {
				t.Errorf("call %d (%q) with zero arguments: got %s, want %s", nr, name, retName(got), retName(want))
			}
		}
	})

	rng := rand.New(rand.NewPCG(1, 2))
	for _, r := range p.Rules {
		if len(r.cases()) == 0 {
			continue
		}
		argSets := ruleArgSets(r, rng)
		for _, name := range r.Names {
			t.Run(name, func(t *testing.T) {
				call, err := libseccomp.GetSyscallFromName(name)
				if err != nil {
					t.Fatalf("resolving %s: %v", name, err)
				}
				for _, args := range argSets {
					want := actionRet(p.action(name, args))
					if got := v.run(t, unix.AUDIT_ARCH_X86_64, uint32(call), args); got != want {
						t.Errorf("%s%#x: got %s, want %s", name, args, retName(got), retName(want))
					}
				}
			})
		}
	}
}

// ruleArgSets are the argument registers to try a conditional rule with. Each
// checked argument takes its interesting values (the union over every Cond on
// it). With one or two checked arguments that is their whole cross product; with
// more, the product would run to billions, so it is the cross product of each
// argument's key values (the listed ones, their neighbours, high bits set), and
// each argument's every interesting value with the others at each case's key
// values.
func ruleArgSets(r Rule, rng *rand.Rand) [][6]uint64 {
	full := map[int][]uint64{}
	key := map[int][]uint64{}
	for _, c := range r.cases() {
		for _, cond := range c.When {
			full[cond.Arg] = append(full[cond.Arg], interestingValues(cond, rng)...)
			key[cond.Arg] = append(key[cond.Arg], keyValues(cond)...)
		}
	}
	args := slices.Sorted(maps.Keys(full))
	product := func(vals map[int][]uint64) [][6]uint64 {
		sets := [][6]uint64{{}}
		for _, a := range args {
			var next [][6]uint64
			for _, set := range sets {
				for _, x := range dedup(vals[a]) {
					set[a] = x
					next = append(next, set)
				}
			}
			sets = next
		}
		return sets
	}
	if len(args) <= 2 {
		return product(full)
	}
	sets := product(key)
	for _, a := range args {
		for _, base := range product(key) {
			if base[a] != key[a][0] {
				continue // vary a once per combination of the others
			}
			for _, x := range dedup(full[a]) {
				set := base
				set[a] = x
				sets = append(sets, set)
			}
		}
	}
	return sets
}

// keyValues are the values of c, their neighbours and the register's edges.
func keyValues(c Cond) []uint64 {
	out := []uint64{0, ^uint64(0), 1 << 32}
	for _, x := range c.Values {
		out = append(out, x, x+1, x-1, x|1<<32, x|0xffffffff00000000)
	}
	return out
}

func dedup(xs []uint64) []uint64 {
	out := slices.Clone(xs)
	slices.Sort(out)
	return slices.Compact(out)
}

// interestingValues are boundaryValues plus random ones.
func interestingValues(c Cond, rng *rand.Rand) []uint64 {
	out := boundaryValues(c)
	for range 32 {
		out = append(out, rng.Uint64(), rng.Uint64()&0xff, rng.Uint64()&0xffffffff)
	}
	return out
}

// TestSpawnerClone checks the one difference between Spawner and Default: clone
// with CLONE_NEWUSER and no other namespace flag.
func TestSpawnerClone(t *testing.T) {
	spawner, err := Compile(Spawner())
	if err != nil {
		t.Fatalf("Compile(Spawner()): %v", err)
	}
	vms := map[string]vm{"Default": newVM(t, compileDefault(t)), "Spawner": newVM(t, spawner)}
	const sigchld = uint64(unix.SIGCHLD)
	tests := []struct {
		name        string
		flags       uint64
		wantDefault uint32
		wantSpawner uint32
	}{
		{"fork", sigchld, retAllow, retAllow},
		{"NEWUSER", unix.CLONE_NEWUSER | sigchld, retEPERM, retAllow},
		{"NEWUSER with pidfd", unix.CLONE_NEWUSER | unix.CLONE_PIDFD | sigchld, retEPERM, retAllow},
		{"NEWUSER and NEWNS", unix.CLONE_NEWUSER | unix.CLONE_NEWNS | sigchld, retEPERM, retEPERM},
		{"NEWUSER and NEWPID", unix.CLONE_NEWUSER | unix.CLONE_NEWPID | sigchld, retEPERM, retEPERM},
		{"NEWUSER and NEWNET", unix.CLONE_NEWUSER | unix.CLONE_NEWNET | sigchld, retEPERM, retEPERM},
		{"NEWUSER and NEWTIME", unix.CLONE_NEWUSER | unix.CLONE_NEWTIME, retEPERM, retEPERM},
		{"NEWNS alone", unix.CLONE_NEWNS | sigchld, retEPERM, retEPERM},
		{"all namespace flags", namespaceFlags | sigchld, retEPERM, retEPERM},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for name, want := range map[string]uint32{"Default": tt.wantDefault, "Spawner": tt.wantSpawner} {
				if got := vms[name].run(t, unix.AUDIT_ARCH_X86_64, unix.SYS_CLONE, [6]uint64{tt.flags}); got != want {
					t.Errorf("%s: got %s, want %s", name, retName(got), retName(want))
				}
			}
			for _, nr := range []uint32{unix.SYS_UNSHARE, unix.SYS_SETNS} {
				if got := vms["Spawner"].run(t, unix.AUDIT_ARCH_X86_64, nr, [6]uint64{tt.flags}); got != retEPERM {
					t.Errorf("Spawner call %d: got %s, want %s", nr, retName(got), retName(retEPERM))
				}
			}
		})
	}
}

// TestSpawnerStackedUnderDefault: with Default stacked on top of Spawner (a cold
// program's stack: its init's thread filter, then its own), every verdict is
// Default's.
func TestSpawnerStackedUnderDefault(t *testing.T) {
	stackIsDefault(t, Spawner(), Default())
}

// TestSpawnedProgramStackedIsDefault: with SpawnedProgram stacked on top of
// Spawner (a cold program's stack with the default filter), every verdict is
// Default's.
func TestSpawnedProgramStackedIsDefault(t *testing.T) {
	stackIsDefault(t, Spawner(), SpawnedProgram())
}

// TestZygoteStackedIsDefault: with ZygoteChild and then ZygoteProgram stacked
// on top of Zygote (a warm Python program's stack: its zygote's filter, then
// its own two), every verdict is Default's.
func TestZygoteStackedIsDefault(t *testing.T) {
	stackIsDefault(t, Zygote(), ZygoteChild(), ZygoteProgram())
}

// TestStackHalvesAloneAreNotDefault: Zygote, ZygoteChild, ZygoteProgram and
// SpawnedProgram each allow setns, ptrace or PR_SET_MM, which Default denies,
// so that a program under one of them alone or under a stack without its last
// (a child that skipped a load, a filter missing beneath) fails the jail's
// TestSeccompInsideRun, which tries the three calls on the warm and the cold
// path.
func TestStackHalvesAloneAreNotDefault(t *testing.T) {
	def := newVM(t, compileDefault(t))
	calls := []struct {
		nr   uint32
		args [6]uint64
	}{{unix.SYS_SETNS, [6]uint64{}}, {unix.SYS_PTRACE, [6]uint64{}}, {unix.SYS_PRCTL, [6]uint64{unix.PR_SET_MM, unix.PR_SET_MM_MAP}}}
	for _, stack := range [][]Policy{{Zygote()}, {ZygoteChild()}, {ZygoteProgram()}, {SpawnedProgram()}, {Zygote(), ZygoteChild()}} {
		var vms []vm
		for _, p := range stack {
			prog, err := Compile(p)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			vms = append(vms, newVM(t, prog))
		}
		same := true
		for _, c := range calls {
			got := uint32(unix.SECCOMP_RET_ALLOW)
			for _, v := range vms {
				if r := v.run(t, unix.AUDIT_ARCH_X86_64, c.nr, c.args); int32(r&unix.SECCOMP_RET_ACTION_FULL) < int32(got&unix.SECCOMP_RET_ACTION_FULL) {
					got = r
				}
			}
			same = same && got == def.run(t, unix.AUDIT_ARCH_X86_64, c.nr, c.args)
		}
		if same {
			t.Errorf("a stack of %d policies gives Default's verdicts on setns, ptrace and PR_SET_MM", len(stack))
		}
	}
}

// stackIsDefault checks that the policies stacked, oldest first, give
// Default's verdict for every call number (zero arguments, and from a foreign
// architecture), and for the argument values around every boundary their
// rules and Default's draw. The kernel runs every filter and keeps the most
// restrictive action (the lowest as a signed 32-bit number); on a tie the
// newest filter's.
func stackIsDefault(t *testing.T, stack ...Policy) {
	t.Helper()
	var vms []vm
	for _, p := range slices.Backward(stack) { // newest first, as the kernel walks them
		prog, err := Compile(p)
		if err != nil {
			t.Fatalf("Compile: %v", err)
		}
		vms = append(vms, newVM(t, prog))
	}
	def := newVM(t, compileDefault(t))
	stacked := func(arch, nr uint32, args [6]uint64) (got, want uint32) {
		want = def.run(t, arch, nr, args)
		got = vms[0].run(t, arch, nr, args)
		for _, v := range vms[1:] {
			if r := v.run(t, arch, nr, args); int32(r&unix.SECCOMP_RET_ACTION_FULL) < int32(got&unix.SECCOMP_RET_ACTION_FULL) {
				got = r
			}
		}
		return got, want
	}
	for nr := range uint32(1024) {
		if got, want := stacked(unix.AUDIT_ARCH_X86_64, nr, [6]uint64{}); got != want {
			t.Errorf("call %d with zero arguments: stacked %s, Default %s", nr, retName(got), retName(want))
		}
		if got, want := stacked(unix.AUDIT_ARCH_X86_64, nr|x32Bit, [6]uint64{}); got != want {
			t.Errorf("x32 call %d: stacked %s, Default %s", nr, retName(got), retName(want))
		}
		if got, want := stacked(unix.AUDIT_ARCH_I386, nr, [6]uint64{}); got != want {
			t.Errorf("i386 call %d: stacked %s, Default %s", nr, retName(got), retName(want))
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, p := range append([]Policy{Default()}, stack...) {
		for _, r := range p.Rules {
			argSets := ruleArgSets(r, rng)
			for _, name := range r.Names {
				call, err := libseccomp.GetSyscallFromName(name)
				if err != nil {
					t.Fatalf("resolving %s: %v", name, err)
				}
				for _, args := range argSets {
					if got, want := stacked(unix.AUDIT_ARCH_X86_64, uint32(call), args); got != want {
						t.Errorf("%s%#x: stacked %s, Default %s", name, args, retName(got), retName(want))
					}
				}
			}
		}
	}
}

// TestCasesFirstMatchWins checks the semantics of a rule's Cases, in the table
// and in the compiled program: the first case that holds decides, so an earlier
// case carves an exception out of a later one, and cases that compare the same
// argument in different ways compile without overlaps.
func TestCasesFirstMatchWins(t *testing.T) {
	p := Policy{Default: NoSys, Rules: []Rule{{
		Names: []string{"getpid"},
		Cases: []Case{
			{Action: Deny, When: []Cond{{Arg: 0, Op: In, Values: []uint64{5}}}},
			{Action: Ignore, When: []Cond{{Arg: 0, Op: In, Values: []uint64{4, 5, 6}}, {Arg: 1, Mask: 0xff, Op: NotIn, Values: []uint64{9}}}},
			{Action: Allow, When: []Cond{{Arg: 1, Mask: 0xff, Op: In, Values: []uint64{9}}}},
		},
		Else:    Deny,
		Comment: "test",
	}}}
	prog, err := Compile(p)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	v := newVM(t, prog)
	tests := []struct {
		name string
		args [6]uint64
		want Action
	}{
		{"carved out before the second case", [6]uint64{5, 0}, Deny},
		{"second case", [6]uint64{4, 0}, Ignore},
		{"second case, high bits on arg 1", [6]uint64{6, 1 << 32}, Ignore},
		{"second case fails on arg 1, third holds", [6]uint64{4, 9}, Allow},
		{"second case fails on arg 1 with high bits, third holds", [6]uint64{4, 1<<32 | 9}, Allow},
		{"first case before the third", [6]uint64{5, 9}, Deny},
		{"third case alone", [6]uint64{0x13, 0xffffffff00000009}, Allow},
		{"no case", [6]uint64{7, 0}, Deny},
		{"no case, arg 1 near", [6]uint64{7, 8}, Deny},
		{"no case, zero", [6]uint64{0, 0}, Deny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.action("getpid", tt.args); got != tt.want {
				t.Errorf("table: got %v, want %v", got, tt.want)
			}
			if got, want := v.run(t, unix.AUDIT_ARCH_X86_64, unix.SYS_GETPID, tt.args), actionRet(tt.want); got != want {
				t.Errorf("program: got %s, want %s", retName(got), retName(want))
			}
		})
	}
	// And everywhere around the boundaries, the program agrees with the table.
	for _, args := range ruleArgSets(p.Rules[0], rand.New(rand.NewPCG(3, 4))) {
		want := actionRet(p.action("getpid", args))
		if got := v.run(t, unix.AUDIT_ARCH_X86_64, unix.SYS_GETPID, args); got != want {
			t.Errorf("getpid%#x: got %s, want %s", args, retName(got), retName(want))
		}
	}
}

// TestReaperAllowsOnlyItsLoop: the reaper's filter lets through its last
// steps and its loop, and refuses what a compromised pid 1 would reach for
// (EPERM, the default).
func TestReaperAllowsOnlyItsLoop(t *testing.T) {
	p := Reaper()
	for _, name := range []string{"write", "close_range", "wait4", "rt_sigtimedwait", "clock_gettime", "setitimer", "exit_group"} {
		if got := p.action(name, [6]uint64{}); got != Allow {
			t.Errorf("%s: got %v, want allow", name, got)
		}
	}
	for _, name := range []string{"read", "openat", "execve", "clone", "kill", "ptrace", "mount", "socket", "setns", "mmap", "setresuid", "timer_create", "rt_sigqueueinfo"} {
		if got := p.action(name, [6]uint64{}); got != Deny {
			t.Errorf("%s: got %v, want deny", name, got)
		}
	}
	// read: only of the report pipe of a cold program's exec.
	if got := p.action("read", [6]uint64{ReaperReportFD}); got != Allow {
		t.Errorf("read of the report pipe: got %v, want allow", got)
	}
	for _, fd := range []uint64{1, 3, 4, ReaperReportFD + 1, 1<<32 | (ReaperReportFD - 1)} {
		if got := p.action("read", [6]uint64{fd}); got != Deny {
			t.Errorf("read of descriptor %#x: got %v, want deny", fd, got)
		}
	}
	prog, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(prog) > 64 {
		t.Errorf("the reaper's filter has %d instructions; it was meant to cost next to nothing to load", len(prog))
	}
}

func TestInitAllowsOnlyItsCalls(t *testing.T) {
	p := Init()
	for _, name := range []string{"write", "wait4", "futex", "nanosleep", "tgkill", "mmap", "madvise", "epoll_pwait", "exit_group"} {
		if got := p.action(name, [6]uint64{}); got != Allow {
			t.Errorf("%s: got %v, want allow", name, got)
		}
	}
	for _, name := range []string{"openat", "execve", "kill", "ptrace", "mount", "socket", "setns", "unshare", "setresuid", "prctl", "seccomp", "connect"} {
		if got := p.action(name, [6]uint64{}); got != Deny {
			t.Errorf("%s: got %v, want deny", name, got)
		}
	}
	thread := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM)
	for _, tc := range []struct {
		flags uint64
		want  Action
	}{
		{thread, Allow},
		{thread | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID, Allow},
		{uint64(unix.SIGCHLD), Deny}, // fork
		{thread | unix.CLONE_NEWUSER, Deny},
		{unix.CLONE_NEWNET, Deny},
	} {
		if got := p.action("clone", [6]uint64{tc.flags}); got != tc.want {
			t.Errorf("clone(%#x): got %v, want %v", tc.flags, got, tc.want)
		}
	}
	if got := p.action("clone3", [6]uint64{}); got != NoSys {
		t.Errorf("clone3: got %v, want nosys", got)
	}
	prog, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(prog) > 96 {
		t.Errorf("the init's filter has %d instructions; it was meant to be a short list", len(prog))
	}
	t.Logf("%d instructions", len(prog))
}
