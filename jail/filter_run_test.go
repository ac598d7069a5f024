package jail

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/rootfs"
)

// pyFilterRules tries, from a Python program inside a run, each rule issue 11
// added to the filter: the socket protocols, TCP_ULP, sync, the scheduling,
// I/O priority, AIO and NUMA calls, and RLIMIT_CORE. Each entry is "ok" or the
// errno name, or a value read back.
const pyFilterRules = pyTrial + `
import ctypes, mmap, resource, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
L = ctypes.c_long
def sys(nr, *args):
    ctypes.set_errno(0)
    ret = libc.syscall(L(nr), *[L(a) for a in args])
    if ret < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return ret
def call(nr, *args):
    sys(nr, *args)
def sock(family, type, proto):
    def f():
        socket.socket(family, type, proto).close()
    return f

for name, family, type, proto in [
    ('mptcp', socket.AF_INET, socket.SOCK_STREAM, 262),
    ('mptcp6', socket.AF_INET6, socket.SOCK_STREAM, 262),
    ('udplite', socket.AF_INET, socket.SOCK_DGRAM, 136),
    ('udplite6', socket.AF_INET6, socket.SOCK_DGRAM, 136),
    ('sctp', socket.AF_INET, socket.SOCK_STREAM, 132),
    ('tcp', socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP),
    ('udp', socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP),
    ('icmp', socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP),
    ('tcp6', socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP),
    ('udp6', socket.AF_INET6, socket.SOCK_DGRAM, socket.IPPROTO_UDP),
    ('icmp6', socket.AF_INET6, socket.SOCK_DGRAM, socket.IPPROTO_ICMPV6),
    ('unix', socket.AF_UNIX, socket.SOCK_STREAM, 0),
]:
    r['socket ' + name] = trial(sock(family, type, proto))

def tcp_opt(opt, value):
    def f():
        s = socket.socket()
        try: s.setsockopt(socket.SOL_TCP, opt, value)
        finally: s.close()
    return f
r['setsockopt TCP_ULP'] = trial(tcp_opt(31, b'tls'))
r['setsockopt TCP_NODELAY'] = trial(tcp_opt(socket.TCP_NODELAY, 1))

r['sync'] = trial(os.sync)
r['syncfs bad fd'] = trial(lambda: call(306, -1))   # the kernel would say EBADF
r['fsync'] = trial(lambda: os.fsync(os.open('/sandbox', os.O_RDONLY)))

r['sched batch'] = trial(lambda: os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0)))
r['sched batch reads'] = str(os.sched_getscheduler(0) == os.SCHED_BATCH)
def setattr_policy(policy, priority):
    # struct sched_attr, SCHED_ATTR_SIZE_VER0: size, policy, flags, nice,
    # priority, runtime, deadline, period.
    class attr(ctypes.Structure):
        _fields_ = [('size', ctypes.c_uint32), ('policy', ctypes.c_uint32), ('flags', ctypes.c_uint64),
                    ('nice', ctypes.c_int32), ('priority', ctypes.c_uint32), ('runtime', ctypes.c_uint64),
                    ('deadline', ctypes.c_uint64), ('period', ctypes.c_uint64)]
    a = attr(size=48, policy=policy, priority=priority)
    return lambda: call(314, 0, ctypes.addressof(a), 0)
r['sched_setattr fifo'] = trial(setattr_policy(1, 1))   # the kernel's check: RLIMIT_RTPRIO, CAP_SYS_NICE
r['sched_setattr other'] = trial(setattr_policy(0, 0))

# Last: leaving SCHED_IDLE needs an RLIMIT_NICE the run does not have.
r['sched idle'] = trial(lambda: os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0)))
r['sched fifo'] = trial(lambda: os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1)))
r['sched rr'] = trial(lambda: os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1)))
r['sched_setparam'] = trial(lambda: os.sched_setparam(0, os.sched_param(0)))
r['ioprio_get'] = trial(lambda: call(252, 1, 0))             # IOPRIO_WHO_PROCESS, self
r['ioprio_set'] = trial(lambda: call(251, 1, 0, (2 << 13) | 4))  # best effort, level 4

def aio():
    ctx = ctypes.c_ulong(0)
    sys(206, 8, ctypes.addressof(ctx))   # io_setup
    sys(207, ctx.value)                  # io_destroy
r['io_setup and io_destroy'] = trial(aio)

def get_mempolicy():
    mode = ctypes.c_int(-1)
    sys(239, ctypes.addressof(mode), 0, 0, 0, 0)
r['get_mempolicy'] = trial(get_mempolicy)
r['set_mempolicy'] = trial(lambda: call(238, 0, 0, 0))      # MPOL_DEFAULT
m = mmap.mmap(-1, mmap.PAGESIZE)
page = ctypes.addressof(ctypes.c_char.from_buffer(m))
r['mbind'] = trial(lambda: call(237, page, mmap.PAGESIZE, 0, 0, 0, 0))

# KSM: madvise(MADV_MERGEABLE) returns 0 without marking the range ("mg" in
# smaps' VmFlags), and prctl(PR_SET_MEMORY_MERGE) is refused.
km = mmap.mmap(-1, 1 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
kaddr = ctypes.addressof(ctypes.c_char.from_buffer(km))
r['madvise mergeable'] = trial(lambda: call(28, kaddr, 1 << 20, 12))
r['madvise mergeable high word'] = trial(lambda: call(28, kaddr, 1 << 20, (1 << 32) | 12))
def vmflags(addr):
    inside = False
    for l in open('/proc/self/smaps'):
        first = l.split()[0]
        if '-' in first and l[0] in '0123456789abcdef':
            lo, hi = (int(x, 16) for x in first.split('-'))
            inside = lo <= addr < hi
        elif inside and l.startswith('VmFlags'):
            return l.split()[1:]
r['mergeable marked'] = str('mg' in vmflags(kaddr))
r['prctl memory merge'] = trial(lambda: call(157, 67, 1, 0, 0, 0))
r['prctl memory merge reads'] = str(libc.prctl(68, 0, 0, 0, 0))

core = resource.getrlimit(resource.RLIMIT_CORE)
r['core before'] = repr(core)
r['setrlimit core lower'] = trial(lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
r['core after lower'] = repr(resource.getrlimit(resource.RLIMIT_CORE))
# Above the hard limit: the kernel itself would refuse this with EPERM.
r['setrlimit core raise'] = trial(lambda: resource.setrlimit(resource.RLIMIT_CORE, (core[1] + 1, core[1] + 1)))
r['core after raise'] = repr(resource.getrlimit(resource.RLIMIT_CORE))
r['prlimit core set and get'] = trial(lambda: resource.prlimit(0, resource.RLIMIT_CORE, (0, 0)))
r['setrlimit nofile'] = trial(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1])))
r['nofile after'] = str(resource.getrlimit(resource.RLIMIT_NOFILE)[0])

# The page cache of the shared /usr: neither probed (RWF_NOWAIT) nor evicted
# (POSIX_FADV_DONTNEED, which the test checks from the host afterwards).
usr = os.open(os.environ['PROBE_CACHED'], os.O_RDONLY)
def preadv2(flags):
    def f():
        os.preadv(usr, [bytearray(1)], 0, flags)
    return f
r['preadv2'] = trial(preadv2(0))
r['preadv2 RWF_NOWAIT'] = trial(preadv2(os.RWF_NOWAIT))
r['preadv2 RWF_HIPRI'] = trial(preadv2(os.RWF_HIPRI))
r['fadvise WILLNEED'] = trial(lambda: os.posix_fadvise(usr, 0, 0, os.POSIX_FADV_WILLNEED))
r['fadvise DONTNEED'] = trial(lambda: os.posix_fadvise(usr, 0, 0, os.POSIX_FADV_DONTNEED))  # last
# advice is an int: the kernel reads DONTNEED from a register with bit 32 set.
r['fadvise DONTNEED high word'] = trial(lambda: call(221, usr, 0, 0, (1 << 32) | os.POSIX_FADV_DONTNEED))
` + pyDump

// TestFilterRulesInsideRun checks, from inside a real run, the rules issue 11
// added to the seccomp filter: refused protocols and options get EPERM while
// the ordinary ones work, sync returns without acting, the non-real-time
// scheduling, I/O priority, AIO and NUMA calls work, and RLIMIT_CORE cannot be
// changed.
func TestFilterRulesInsideRun(t *testing.T) {
	l := newTestLauncher(t, 0)
	// A file of the host's /usr that the run sees through its read-only bind,
	// in the page cache before the run; the run asks to evict it.
	const cachedFile = "/usr/lib/python3.11/tabnanny.py"
	if _, err := os.ReadFile(cachedFile); err != nil {
		t.Skipf("no %s to probe the page cache with: %v", cachedFile, err)
	}
	got := probe(t, l, rootfs.Python, pyFilterRules, func(s *Spec) { s.Env = map[string]string{"PROBE_CACHED": cachedFile} })
	core := got["core before"]
	checkProbe(t, got, []check{
		{name: "MPTCP socket", key: "socket mptcp", want: "EPERM"},
		{name: "MPTCP IPv6 socket", key: "socket mptcp6", want: "EPERM"},
		{name: "UDP-Lite socket", key: "socket udplite", want: "EPERM"},
		{name: "UDP-Lite IPv6 socket", key: "socket udplite6", want: "EPERM"},
		{name: "SCTP socket", key: "socket sctp", want: "EPERM"},
		{name: "TCP socket", key: "socket tcp", want: "ok"},
		{name: "UDP socket", key: "socket udp", want: "ok"},
		// Ping sockets also need the run's gid in net.ipv4.ping_group_range,
		// which a fresh network namespace leaves empty: EACCES is the
		// kernel's answer, so the filter let the call through.
		{name: "ICMP socket", key: "socket icmp", wantAny: []string{"ok", "EACCES"}},
		// EAFNOSUPPORT where the kernel has IPv6 turned off.
		{name: "TCP IPv6 socket", key: "socket tcp6", wantAny: []string{"ok", "EAFNOSUPPORT"}},
		{name: "UDP IPv6 socket", key: "socket udp6", wantAny: []string{"ok", "EAFNOSUPPORT"}},
		{name: "ICMPv6 socket", key: "socket icmp6", wantAny: []string{"ok", "EACCES", "EAFNOSUPPORT"}},
		{name: "unix socket", key: "socket unix", want: "ok"},

		{name: "setsockopt TCP_ULP", key: "setsockopt TCP_ULP", want: "EPERM"},
		{name: "setsockopt TCP_NODELAY", key: "setsockopt TCP_NODELAY", want: "ok"},

		{name: "sync returns", key: "sync", want: "ok"},
		{name: "syncfs does not run", key: "syncfs bad fd", want: "ok"},
		{name: "fsync runs", key: "fsync", want: "ok"},

		{name: "SCHED_BATCH", key: "sched batch", want: "ok"},
		{name: "SCHED_BATCH took effect", key: "sched batch reads", want: "True"},
		{name: "SCHED_IDLE", key: "sched idle", want: "ok"},
		{name: "SCHED_FIFO", key: "sched fifo", want: "EPERM"},
		{name: "SCHED_RR", key: "sched rr", want: "EPERM"},
		{name: "sched_setparam", key: "sched_setparam", want: "ok"},
		{name: "sched_setattr real-time refused by the kernel", key: "sched_setattr fifo", want: "EPERM"},
		{name: "sched_setattr SCHED_OTHER", key: "sched_setattr other", want: "ok"},

		{name: "ioprio_get", key: "ioprio_get", want: "ok"},
		{name: "ioprio_set", key: "ioprio_set", want: "ok"},
		// Native AIO contexts count against a host-wide limit: libaio falls back.
		{name: "io_setup answers ENOSYS", key: "io_setup and io_destroy", want: "ENOSYS"},
		{name: "get_mempolicy", key: "get_mempolicy", want: "ok"},
		{name: "set_mempolicy", key: "set_mempolicy", want: "ok"},
		{name: "mbind", key: "mbind", want: "ok"},

		{name: "setrlimit RLIMIT_CORE lower does not raise", key: "setrlimit core lower", want: "ok"},
		{name: "RLIMIT_CORE unchanged by lowering", key: "core after lower", want: core},
		{name: "setrlimit RLIMIT_CORE raise does not raise", key: "setrlimit core raise", want: "ok"},
		{name: "RLIMIT_CORE unchanged by raising", key: "core after raise", want: core},
		{name: "prlimit RLIMIT_CORE with old value", key: "prlimit core set and get", want: "EPERM"},
		{name: "setrlimit RLIMIT_NOFILE", key: "setrlimit nofile", want: "ok"},
		{name: "RLIMIT_NOFILE changed", key: "nofile after", want: "64"},

		{name: "preadv2", key: "preadv2", want: "ok"},
		{name: "preadv2 RWF_NOWAIT probes the page cache", key: "preadv2 RWF_NOWAIT", want: "EPERM"},
		// EOPNOTSUPP is the kernel's: polled I/O on a file without it.
		{name: "preadv2 other flags", key: "preadv2 RWF_HIPRI", wantAny: []string{"ok", "EOPNOTSUPP"}},
		{name: "madvise MADV_MERGEABLE returns", key: "madvise mergeable", want: "ok"},
		{name: "madvise MADV_MERGEABLE in a high word returns", key: "madvise mergeable high word", want: "ok"},
		{name: "madvise MADV_MERGEABLE marks nothing", key: "mergeable marked", want: "False"},
		{name: "prctl PR_SET_MEMORY_MERGE", key: "prctl memory merge", want: "EPERM"},
		{name: "prctl PR_GET_MEMORY_MERGE", key: "prctl memory merge reads", want: "0"},
		{name: "fadvise DONTNEED returns", key: "fadvise DONTNEED", want: "ok"},
		{name: "fadvise DONTNEED in a high word returns", key: "fadvise DONTNEED high word", want: "ok"},
		{name: "fadvise WILLNEED", key: "fadvise WILLNEED", want: "ok"},
	})
	// Neither DONTNEED evicted anything: the file's first page is still cached.
	f, err := os.Open(cachedFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := unix.Preadv2(int(f.Fd()), [][]byte{make([]byte, 1)}, 0, unix.RWF_NOWAIT); err != nil {
		t.Errorf("reading %s with RWF_NOWAIT after the run's POSIX_FADV_DONTNEED: %v, want its page still cached", cachedFile, err)
	}
	if core == "" {
		t.Errorf("core before: got nothing, want RLIMIT_CORE as the run starts")
	}
	t.Logf("RLIMIT_CORE as the run starts: %s", core)
}
