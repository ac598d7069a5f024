package jail

import (
	"testing"

	"github.com/brig-sandbox/brig/rootfs"
)

// pySyscalls calls each forbidden system call through libc's syscall(3) with
// arguments that are harmless (and where possible ones the kernel would accept or
// refuse with something else than EPERM without the filter), and records the
// errno, or "ok" when the call succeeded.
const pySyscalls = `
import ctypes, errno, json, os, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
L = ctypes.c_long
r = {}
def call(name, nr, *args):
    ctypes.set_errno(0)
    ret = libc.syscall(L(nr), *[L(a) for a in args])
    if ret == 0 and name.startswith('clone'):
        os._exit(0)  # a child the filter should not have let the clone make
    if ret >= 0:
        if name.startswith('clone'):
            os.waitpid(ret, 0)
        elif name.startswith('socket') or name in ('userfaultfd', 'perf_event_open', 'bpf', 'io_uring_setup'):
            os.close(ret)
        r[name] = 'ok'
    else:
        e = ctypes.get_errno()
        r[name] = errno.errorcode.get(e, str(e))
buf = ctypes.create_string_buffer(64)
p = ctypes.addressof(buf)
c = ctypes.c_char(b'x')
me = os.getpid()
call('ptrace', 101, 0, 0, 0, 0)                                # PTRACE_TRACEME
call('process_vm_readv', 310, me, 0, 0, 0, 0, 0)
call('kcmp', 312, me, me, 0, 0, 0)                             # KCMP_FILE 0 0
call('bpf', 321, 0, 0, 0)
call('perf_event_open', 298, 0, 0, -1, -1, 0)
call('userfaultfd', 323, 0)
call('keyctl', 250, 0, -3, 0)                                  # KEYCTL_GET_KEYRING_ID session
call('add_key', 248, 0, 0, 0, 0, 0)
call('request_key', 249, 0, 0, 0, 0)
call('io_uring_setup', 425, 1, p)
call('mount', 165, 0, 0, 0, 0, 0)
call('umount2', 166, 0, 0)
call('pivot_root', 155, 0, 0)
call('chroot', 161, 0)
call('unshare', 272, 0x10000000)                               # CLONE_NEWUSER
call('unshare none', 272, 0)
call('setns', 308, -1, 0)
for flag, n in [('user', 0x10000000), ('ns', 0x20000), ('pid', 0x20000000), ('net', 0x40000000), ('ipc', 0x08000000), ('uts', 0x04000000), ('cgroup', 0x02000000)]:
    call('clone new' + flag, 56, n | 17, 0, 0, 0, 0)             # | SIGCHLD
call('clone fork', 56, 17, 0, 0, 0, 0)
call('clone parent', 56, 0x8000 | 17, 0, 0, 0, 0)              # CLONE_PARENT: a warm run's would be its zygote's
call('io_setup', 206, 1, p)
call('kexec_load', 246, 0, 0, 0, 0)
call('init_module', 175, 0, 0, 0)
call('reboot', 169, 0, 0, 0, 0)
call('swapon', 167, 0, 0)
call('acct', 163, 0)
call('settimeofday', 164, 0, 0)
call('clock_settime', 227, 0, 0)
call('open_by_handle_at', 304, -1, 0, 0)
call('personality PER_LINUX32', 135, 0x0008)
call('personality query', 135, 0xffffffff)
call('socket AF_NETLINK', 41, 16, 3, 0)                        # SOCK_RAW, NETLINK_ROUTE
call('socket AF_NETLINK dgram', 41, 16, 2, 0)
call('socket AF_PACKET', 41, 17, 3, 0)
call('socket AF_INET SOCK_RAW', 41, 2, 3, 1)                   # IPPROTO_ICMP
call('socket AF_INET SOCK_RAW|SOCK_CLOEXEC', 41, 2, 3 | 0o2000000, 1)
call('socket AF_INET SOCK_STREAM', 41, 2, 1, 0)
call('ioctl TIOCSTI', 16, 0, 0x5412, ctypes.addressof(c))
call('ioctl TIOCSTI high bits', 16, 0, 0xffffffff00005412 - (1 << 64), ctypes.addressof(c))
call('clone3', 435, p, 64)
# PR_SET_MM: PR_SET_MM_MAP sets the command line's bounds to any memory (a warm
# child made the call before its program started); the size query is harmless.
call('prctl PR_SET_MM_MAP_SIZE', 157, 35, 15, p, 0, 0)
call('prctl PR_SET_MM_MAP', 157, 35, 14, p, 104, 0)
call('prctl PR_GET_DUMPABLE', 157, 3, 0, 0, 0, 0)
call('unknown 1000', 1000)
print(json.dumps(r))
`

// TestSeccompInsideRun: the filter the jail loads refuses the dangerous calls with
// EPERM, clone3 and unknown calls with ENOSYS, and lets the ordinary ones through.
func TestSeccompInsideRun(t *testing.T) {
	l := newTestLauncher(t, 0)
	got := probe(t, l, rootfs.Python, pySyscalls)
	var checks []check
	for _, name := range []string{
		"ptrace", "process_vm_readv", "kcmp", "bpf", "perf_event_open", "userfaultfd",
		"keyctl", "add_key", "request_key", "io_uring_setup", "mount", "umount2",
		"pivot_root", "chroot", "unshare", "unshare none", "setns",
		"clone newuser", "clone newns", "clone newpid", "clone newnet", "clone newipc",
		"clone newuts", "clone newcgroup", "kexec_load", "init_module", "reboot",
		"swapon", "acct", "settimeofday", "clock_settime", "open_by_handle_at",
		"personality PER_LINUX32", "socket AF_NETLINK", "socket AF_NETLINK dgram",
		"socket AF_PACKET", "socket AF_INET SOCK_RAW", "socket AF_INET SOCK_RAW|SOCK_CLOEXEC",
		"ioctl TIOCSTI", "ioctl TIOCSTI high bits", "clone parent",
		"prctl PR_SET_MM_MAP_SIZE", "prctl PR_SET_MM_MAP",
	} {
		checks = append(checks, check{name: name, key: name, want: "EPERM"})
	}
	checks = append(checks,
		check{name: "clone3", key: "clone3", want: "ENOSYS"},
		check{name: "io_setup", key: "io_setup", want: "ENOSYS"},
		check{name: "unknown call", key: "unknown 1000", want: "ENOSYS"},
		// Controls: the probe can tell an allowed call from a refused one.
		check{name: "plain fork through clone", key: "clone fork", want: "ok"},
		check{name: "personality query", key: "personality query", want: "ok"},
		check{name: "tcp socket", key: "socket AF_INET SOCK_STREAM", want: "ok"},
		check{name: "prctl query", key: "prctl PR_GET_DUMPABLE", want: "ok"},
	)
	checkProbe(t, got, checks)
}

// TestSeccompJavaScript: node runs under the same filter, and its thread pool works
// under it.
func TestSeccompJavaScript(t *testing.T) {
	l := newTestLauncher(t, 0)
	res := run(t, l, rootfs.JavaScript, `
const fs = require('fs');
const st = fs.readFileSync('/proc/self/status', 'utf8');
fs.readFile('/sandbox/main.js', (err, b) => console.log(/Seccomp:\s*2/.test(st), err === null && b.length > 0));
`)
	if want := "true true\n"; res.Stdout != want {
		t.Errorf("got %q (stderr %q), want %q", res.Stdout, res.Stderr, want)
	}
}
