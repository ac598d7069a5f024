# brig's Python zygote (see zygote.go). Run by its init as `python3 -u -c
# <zygoteLoader>`, which reads this file from fd SRC, as host root in a
# sandbox's root made read-only, with its control socket (SOCK_SEQPACKET) on fd
# CTL, the host's pid namespace, its own, on fd PIDNS and the host's /proc on
# fd PROC (the loader sets the four from zygote.go's constants). It starts
# once, imports what runs commonly import, maps its code on huge pages, pins
# its memory where that costs less, loads the filter its children inherit,
# and then forks one child per prepared sandbox. It never
# executes request code and never reads request data: a child reads its
# run's environment, and then its program, only once it has joined the
# sandbox and dropped to the run's identity and filter.
import os, sys, json, socket, select, ctypes, resource

_CLONE_NEWNS = 0x00020000
_CLONE_NEWCGROUP = 0x02000000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_SYS_capset = 126
_SYS_seccomp = 317
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_GET_SECCOMP = 21
_SECCOMP_MODE_FILTER = 2
_SECCOMP_SET_MODE_FILTER = 1
_SYS_io_uring_setup = 425  # the same number on every architecture
_SYS_landlock_create_ruleset = 444  # the same on every architecture too
_SYS_landlock_add_rule = 445
_SYS_landlock_restrict_self = 446
_SYS_close_range = 436  # and this
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_SYS_io_uring_register = 427
_IORING_REGISTER_BUFFERS = 0
_IORING_UNREGISTER_BUFFERS = 1
_IORING_MAX_REG_BUFFERS = 1 << 14
_PROT_READ, _PROT_WRITE, _PROT_EXEC = 1, 2, 4
_MAP_PRIVATE, _MAP_ANONYMOUS = 0x02, 0x20
_MADV_HUGEPAGE = 14
_MREMAP_MAYMOVE, _MREMAP_FIXED = 1, 2
_HUGE = 2 << 20  # a transparent huge page (x86-64, and arm64 with 4 KiB pages)
_ring = -1  # the io_uring that pins the zygote's memory (_pin)

_libc = ctypes.CDLL(None, use_errno=True)


def _bind(name, restype, *argtypes):
    """libc's name with its C types declared, bound here in the zygote: a
    child's call then converts plain ints itself. Building a c_ulong per
    argument instead, and binding the function at its first call, cost a
    forked interpreter 0.2 ms and 40 page faults more for the 41 prctl calls
    that empty its bounding set."""
    f = getattr(_libc, name)
    f.restype, f.argtypes = restype, argtypes
    return f


_c_int, _c_long, _c_ulong, _c_void_p = ctypes.c_int, ctypes.c_long, ctypes.c_ulong, ctypes.c_void_p
# A call made from C: a Python function it calls is a frame of its own
# evaluation, not one CPython 3.11 inlines into its caller's (_frame_field).
from _operator import call as _call
from _functools import partial as _partial
_setns = _bind('setns', _c_int, _c_int, _c_int)
_unshare = _bind('unshare', _c_int, _c_int)
_prctl = _bind('prctl', _c_int, _c_int, _c_ulong, _c_ulong, _c_ulong, _c_ulong)
# syscall(2), for capset and seccomp, which libc does not wrap: the number
# and three word-sized arguments, in registers as a variadic call passes them
# on x86-64 and arm64 (ctypes made the same call untyped).
_syscall = _bind('syscall', _c_long, _c_long, _c_void_p, _c_void_p, _c_void_p)
# The same with four, for landlock_add_rule, whose flags must be 0 (a
# function object of its own: _bind's is the library's cached one).
_syscall4 = _libc['syscall']
_syscall4.restype, _syscall4.argtypes = _c_long, (_c_long, _c_void_p, _c_void_p, _c_void_p, _c_void_p)


class _Beneath(ctypes.Structure):
    """struct landlock_path_beneath_attr."""
    _pack_ = 1
    _fields_ = [('allowed_access', ctypes.c_uint64), ('parent_fd', ctypes.c_int32)]


def _module_names():
    """The top-level names of the modules imported so far that a package
    layer on PYTHONPATH would shadow in a cold start, which imports the
    layer's (ahead of the standard library on sys.path: enum34's enum,
    argparse, dataclasses) and runs a sitecustomize or usercustomize it
    holds, where a child of this process has this process's. Built-in and
    frozen modules are found before sys.path: a layer can't shadow them."""
    have = {'sitecustomize', 'usercustomize'}
    for name, m in list(sys.modules.items()):
        spec = getattr(m, '__spec__', None)
        if name != '__main__' and (spec is None or spec.origin not in ('built-in', 'frozen')):
            have.add(name.partition('.')[0])
    return have


def _landlock():
    """The Landlock ruleset attribute a child restricts itself with: every
    file system access right this kernel's Landlock knows, handled (granted
    beneath the sandbox's root by the child's one rule, _sandbox), and the
    rule's attribute to fill with the root.

    Why: a child's executable (/proc/self/exe) is the zygote's, one file
    that every child of the zygote shares, in no sandbox's tree; a run that
    opened it could lock it against the runs beside it, or watch them open
    it: a channel between runs that a cold run, whose executable is its own
    sandbox's file, does not have. Landlock refuses what lies outside the
    sandbox's tree, that file alone here (pipes, sockets and memfds, which
    no path names, are not checked), so the run can't open it, and
    no other run can either, for a watch to see. The kernel can't change a
    forked child's executable to its sandbox's file while the zygote's is
    mapped (PR_SET_MM_MAP, EBUSY). Landlock's ABI 2 is needed: before it, a
    rename or a link into another folder is refused whenever Landlock
    restricts (EXDEV), which a cold run does not see. A zygote without it
    does not start, and Python runs cold."""
    abi = _syscall(_SYS_landlock_create_ruleset, None, 0, _LANDLOCK_CREATE_RULESET_VERSION)
    if abi < 2:
        raise OSError(ctypes.get_errno() if abi < 0 else 0,
                      'Landlock ABI 2 is needed to keep the zygote\'s executable from its children (ABI %d here; %s)' % (
                          abi, 'Linux 5.19 or later, with landlock in the lsm= list' if abi < 0 else 'Linux 5.19 or later'))
    access = (1 << 13) - 1  # ABI 1: execute, read and write files, read folders, remove, make
    access |= 1 << 13  # ABI 2: refer (link or rename into another folder)
    if abi >= 3:
        access |= 1 << 14  # truncate
    if abi >= 5:
        access |= 1 << 15  # ioctl on devices
    attr = ctypes.c_uint64(access)  # struct landlock_ruleset_attr's first field; 8 bytes is ABI 1's size
    return attr, _Beneath(access, -1)


def _check(r, what):
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, '%s: %s' % (what, os.strerror(e)))


def _c_argv():
    # The addresses of the runtime's own copy of the command line, as wide
    # strings (Py_GetArgcArgv, what C code such as setproctitle's reads):
    # the same in every child, which _retitle rewrites.
    if ctypes.sizeof(ctypes.c_wchar) != 4:
        return []
    argc, argv = ctypes.c_int(), ctypes.POINTER(ctypes.c_void_p)()
    ctypes.pythonapi.Py_GetArgcArgv(ctypes.byref(argc), ctypes.byref(argv))
    return [argv[i] for i in range(argc.value)] if argv else []


_C_ARGV = _c_argv()


class _MMMap(ctypes.Structure):
    """struct prctl_mm_map (PR_SET_MM_MAP)."""
    _fields_ = [(name, ctypes.c_uint64) for name in (
        'start_code', 'end_code', 'start_data', 'end_data', 'start_brk', 'brk', 'start_stack',
        'arg_start', 'arg_end', 'env_start', 'env_end')] + [
        ('auxv', _c_void_p), ('auxv_size', ctypes.c_uint32), ('exe_fd', ctypes.c_uint32)]


_PR_SET_MM, _PR_SET_MM_MAP, _PR_SET_MM_MAP_SIZE = 35, 14, 15
_AT_UID, _AT_EUID, _AT_GID, _AT_EGID = 11, 12, 13, 14


def _mm_map():
    """What a child needs to show its run's environment and identity where
    the kernel shows a process's exec: /proc/self/environ (the memory between
    the mm's env_start and env_end, the zygote's environment until then) and
    the auxiliary vector's ids, in the kernel's copy (/proc/self/auxv) and in
    the C library's (on the stack, after the environment's pointers:
    getauxval), both the zygote's exec's (AT_UID 0) until then. PR_SET_MM_MAP
    sets the mm's fields all at once and, without a new executable, asks for
    no capability (CRIU's unprivileged restore); a cold run's exec sets the
    same. Made here once: the fields this process's fork keeps, the kernel's
    vector as an array, the places of the ids in both vectors. None where a
    field can't be read or the kernel has no such call (without
    CONFIG_CHECKPOINT_RESTORE, PR_SET_MM_MAP_SIZE fails too): a child then
    shows the zygote's, as before."""
    own = lambda p, fl: os.open('%d/%s' % (os.getpid(), p), fl, dir_fd=PROC)  # the host's /proc
    with open('stat', 'rb', opener=own) as st, open('auxv', 'rb', opener=own) as a:
        f = [int(v) for v in st.read().rsplit(b')', 1)[1].split()[1:]]
        auxv = a.read()
    # proc(5)'s fields from the fourth (the parent's pid) on: f[n - 4] is field n.
    m = _MMMap(start_code=f[22], end_code=f[23], start_stack=f[24], start_data=f[41], end_data=f[42],
               start_brk=f[43], arg_start=f[44], arg_end=f[45], exe_fd=0xffffffff)
    if not all((m.start_code, m.start_stack, m.arg_start)) or len(auxv) % 16:
        return None
    size = ctypes.c_uint32()
    if _prctl(_PR_SET_MM, _PR_SET_MM_MAP_SIZE, ctypes.addressof(size), 0, 0) != 0 or size.value != ctypes.sizeof(m):
        return None
    words = (ctypes.c_uint64 * (len(auxv) // 8)).from_buffer_copy(auxv)
    m.auxv, m.auxv_size = ctypes.addressof(words), ctypes.sizeof(words)
    at = ctypes.string_at(m.start_stack, m.arg_start - m.start_stack).find(auxv)
    stack = m.start_stack + at if at >= 0 and at % 8 == 0 else None
    ids = [(i + 1, stack and stack + 8 * (i + 1)) for i in range(0, len(words), 2)
           if words[i] in (_AT_UID, _AT_EUID, _AT_GID, _AT_EGID)]
    ids.sort(key=lambda e: words[e[0] - 1])
    return m, words, ids if len(ids) == 4 else None


_MM = _mm_map()


def _show_exec(block, mm=_MM, prctl=_prctl, sbrk=_bind('sbrk', _c_void_p, _c_long),
               mmap=_bind('mmap', _c_void_p, _c_void_p, ctypes.c_size_t, _c_int, _c_int, _c_int, _c_long)):
    """In a child that has its run: shows the run's environment (block, its
    NAME=VALUE entries each ended by a NUL, as an exec lays them out) and the
    child's ids where the kernel shows a process's exec (_mm_map), as a cold
    run's exec shows them. The block goes into memory of its own that nothing
    frees (the kernel reads only a private anonymous mapping there), as an
    exec's strings are on the stack."""
    if mm is None:
        return
    m, words, ids = mm
    at = mmap(None, max(len(block), 1), _PROT_READ | _PROT_WRITE, _MAP_PRIVATE | _MAP_ANONYMOUS, -1, 0)
    if at is None or at == ctypes.c_void_p(-1).value:
        return
    ctypes.memmove(at, block, len(block))
    m.env_start, m.env_end = at, at + len(block)
    own = (os.getuid(), os.geteuid(), os.getgid(), os.getegid())
    for (i, _), v in zip(ids or (), own):
        words[i] = v
    # The break as it is now: the call sets the mm's too.
    m.brk = sbrk(0)
    if prctl(_PR_SET_MM, _PR_SET_MM_MAP, ctypes.addressof(m), ctypes.sizeof(m), 0) != 0:
        return  # both copies of the ids stay the zygote's, as the environment
    for (_, stack), v in zip(ids or (), own):
        if stack:
            ctypes.c_uint64.from_address(stack).value = v


def _retitle(argv):
    # The process's command line (/proc/self/cmdline, what ps shows) is the
    # memory of its first argv: rewritten in place as a cold run's instead
    # of the zygote's, which is as long (jail/zygote.go's zygoteLoader; NULs
    # pad a shorter one). (Read with os.read: open()'s file objects cost a
    # child 30 page faults more.) So is the runtime's wide copy of each
    # argument that differs and is as long: the script's name.
    fd = os.open('/proc/self/stat', os.O_RDONLY | os.O_CLOEXEC)
    try:
        fields = os.read(fd, 4096).rsplit(b')', 1)[1].split()
    finally:
        os.close(fd)
    start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end
    title = b'\0'.join(a.encode() for a in argv) + b'\0'
    if len(title) <= end - start:
        ctypes.memset(start, 0, end - start)
        ctypes.memmove(start, title, len(title))
    for at, a in zip(_C_ARGV, argv):
        old = ctypes.wstring_at(at) if at else a
        if old != a and len(old) == len(a):
            ctypes.memmove(at, a.encode('utf-32-le'), 4 * len(a))


# capset(2)'s header (version 3, this process) and its empty sets, made once
# here: a ctypes array type made in a child cost it 47 page faults.
_CAP_HEADER, _CAP_DATA = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()
_CAPSET = (ctypes.addressof(_CAP_HEADER), ctypes.addressof(_CAP_DATA))


def _unraisable_args_type():
    # The type of sys.unraisablehook's argument, which Python does not name:
    # taken from one unraisable exception of the zygote's own, so that a
    # child reports one as the interpreter does (_unraisable).
    got = []
    hook, sys.unraisablehook = sys.unraisablehook, got.append

    class Raises:
        def __del__(self):
            raise RuntimeError

    try:
        Raises()
    finally:
        sys.unraisablehook = hook
    return type(got[0])


_UnraisableHookArgs = _unraisable_args_type()
del _unraisable_args_type


class _Filter(ctypes.Structure):
    _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_void_p)]


def _decode_filter(hexcode):
    """A filter as seccomp(2) takes it, and the buffer it points to."""
    code = bytes.fromhex(hexcode)
    buf = ctypes.create_string_buffer(code, len(code))
    return _Filter(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p)), buf


def _serve():
    """Serves fork requests; returns only in a child, with its request."""
    os.close(SRC)  # its source, read
    ctl = socket.socket(fileno=CTL)
    own_pidns = PIDNS
    cfg = json.loads(ctl.recv(1 << 20))
    # The child's filter, the same for every child, is decoded once here: a
    # child only passes its address to the kernel, which copies it.
    cfg['filter'] = _decode_filter(cfg['filter'])
    cfg['program_filter'] = cfg['program_filter'] and _decode_filter(cfg['program_filter'])
    for name in cfg['preload']:
        try:
            __import__(name)
        except Exception:
            pass  # not in this rootfs: a run that imports it pays for it
    # platform caches uname() when a preload calls it (uuid's import does):
    # its node name is the zygote's, not a run's.
    if 'platform' in sys.modules:
        sys.modules['platform']._uname_cache = None
    # The patterns the preloads compiled as they were imported stay in re's
    # cache; a fresh interpreter's program starts with it empty.
    if 're' in sys.modules:
        sys.modules['re'].purge()
    # The finder the preloads' imports cached for sys.path's '' (the
    # zygote's working directory, /, with its listing): a run's sys.path has
    # /sandbox there, and a cold run caches no finder for /.
    sys.path_importer_cache.pop(os.getcwd(), None)
    # Everything the zygote made stays out of its children's collections: a
    # collection writes to every object it visits, which would copy the
    # zygote's pages into each child.
    import gc
    gc.collect()
    gc.freeze()
    poll = select.poll()
    poll.register(ctl.fileno(), select.POLLIN)
    children = {}  # pidfd -> pid
    retiring = False
    # Between two forks every page the zygote writes (a reference count, an
    # allocation) is one it shares with its children, copied at a page fault:
    # so the loop calls and allocates as little as it can. A request is read
    # into this buffer and only the child parses it; replies are formatted
    # bytes. (With socket.recv_fds and the json module both ways, the zygote
    # took 134 page faults a fork; like this, 74: bench/measure/zygote_child.sh.)
    buf = bytearray(4096)
    ancsize = socket.CMSG_SPACE(4 * 8)
    huge, huge_why = _huge_code() if cfg['huge_code'] else (0, 'turned off')
    global _ring
    _ring, pinned, why, trial = _pin(cfg['pin_max_pages'], cfg['pin_mode'], cfg['pin_all_margin'])
    cfg['landlock'] = _landlock()
    if cfg['zygote_filter']:
        # Loaded once here, after the pin trial's children, and inherited by
        # every child as the kernel compiled it; a child stacks its own on it
        # (_sandbox). A zygote that can't load it ends here: its children
        # would have the child's filter alone.
        f = _decode_filter(cfg['zygote_filter'])
        _check(_syscall(_SYS_seccomp, _SECCOMP_SET_MODE_FILTER, 0, ctypes.addressof(f[0])), "loading the zygote's filter")
    ctl.send(b'{"ready":true,"pinned":%d,"pin_error":%s,"pin_trial":%s,"huge_code":%d,"huge_code_error":%s,"modules":%s}' % (
        pinned, json.dumps(why).encode(), json.dumps(trial).encode(), huge, json.dumps(huge_why).encode(),
        json.dumps(sorted(_module_names())).encode()))
    while True:
        if retiring and not children:
            os._exit(0)
        for fd, _ in poll.poll():
            if fd != ctl.fileno():
                pid = children.pop(fd)
                poll.unregister(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                if ctl.fileno() >= 0:
                    try:
                        ctl.send(b'{"exit":%d,"status":%d}' % (pid, status))
                    except OSError:
                        pass
                continue
            n, anc, _, _ = ctl.recvmsg_into((buf,), ancsize)
            if not n:  # the supervisor is gone: wait out the children
                poll.unregister(ctl.fileno())
                ctl.close()
                retiring = True
                continue
            fds = []
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds += memoryview(data[:len(data) - len(data) % 4]).cast('i')
            if not fds:  # a fork request carries descriptors; retire does not
                retiring = True
                continue
            try:
                pid = _fork(fds[0], own_pidns, cfg['prepare_nice'])
            except OSError as e:
                for f in fds:
                    os.close(f)
                ctl.send(json.dumps({'error': str(e)}).encode())
                continue
            if pid == 0:
                ctl.detach()  # its descriptor is closed below, never by the object
                return cfg, json.loads(bytes(buf[:n])), fds
            for f in fds:
                os.close(f)
            pidfd = os.pidfd_open(pid)
            children[pidfd] = pid
            poll.register(pidfd, select.POLLIN)
            ctl.send(b'{"pid":%d}' % pid)


def _huge_code():
    """Maps the code and read-only data of the interpreter and its libraries
    on transparent huge pages, wherever a whole aligned 2 MiB of them lies
    in one file's read-only mappings; returns the bytes so mapped, and why
    no more were.

    A forked child's first touch of each page it shares with its parent
    costs it, on these machines, 1.3 to 1.5 us for a page of a file, 4.0 to
    4.3 us for an anonymous page and 0.05 us for one in a huge page, and a
    child touches hundreds of pages of the interpreter's code: a child's
    CPU to the fork's return was 2.9 ms with the code on the file's pages
    and 2.1 to 2.3 ms with 8 MiB of it on huge pages, its whole print(1)
    and exit 4.9 ms against 3.8 to 4.2 (`python3
    bench/measure/page_cost.py`, sections 1 and 4). Each such 2 MiB is
    copied into a fresh mapping advised MADV_HUGEPAGE, which must then hold
    a huge page, and moved over the original at once (mremap): the same
    bytes at the same addresses, in a mapping the children share and never
    write (the pins are of writable mappings only). Its protection is the
    union of those it replaces (read and execute where read-only data
    shares the 2 MiB with code), and /proc/PID/maps shows it anonymous.
    Best effort: without transparent huge pages (transparent_hugepage=never)
    nothing is changed."""
    done = 0
    try:
        runs = []  # [start, end, path, [(start, end, prot)]]: a file's contiguous readable mappings
        with open('%d/maps' % os.getpid(), 'rb', opener=lambda p, fl: os.open(p, fl, dir_fd=PROC)) as maps:
            for line in maps:
                f = line.split()
                # Readable, not writable, private, of a file (not [vdso]).
                if len(f) < 6 or not f[5].startswith(b'/') or f[1][:2] != b'r-' or f[1][3:4] != b'p':
                    continue
                lo, hi = (int(x, 16) for x in f[0].split(b'-'))
                prot = _PROT_READ | (_PROT_EXEC if f[1][2:3] == b'x' else 0)
                if runs and runs[-1][2] == f[5] and runs[-1][1] == lo:
                    runs[-1][1], runs[-1][3] = hi, runs[-1][3] + [(lo, hi, prot)]
                else:
                    runs.append([lo, hi, f[5], [(lo, hi, prot)]])
        mmap = _bind('mmap', _c_void_p, _c_void_p, ctypes.c_size_t, _c_int, _c_int, _c_int, _c_long)
        munmap = _bind('munmap', _c_int, _c_void_p, ctypes.c_size_t)
        madvise = _bind('madvise', _c_int, _c_void_p, ctypes.c_size_t, _c_int)
        mprotect = _bind('mprotect', _c_int, _c_void_p, ctypes.c_size_t, _c_int)
        mremap = _bind('mremap', _c_void_p, _c_void_p, ctypes.c_size_t, ctypes.c_size_t, _c_int, _c_void_p)
        for lo, hi, _, parts in runs:
            for at in range((lo + _HUGE - 1) // _HUGE * _HUGE, hi - _HUGE + 1, _HUGE):
                prot = 0
                for plo, phi, pprot in parts:
                    if plo < at + _HUGE and phi > at:
                        prot |= pprot
                raw = mmap(None, 2 * _HUGE, _PROT_READ | _PROT_WRITE, _MAP_PRIVATE | _MAP_ANONYMOUS, -1, 0)
                if raw is None or raw == ctypes.c_void_p(-1).value:
                    raise OSError(ctypes.get_errno(), 'mmap')
                # Only the aligned 2 MiB of raw is kept (an allocation
                # meanwhile may take what is given back, so nothing is
                # unmapped after the move but a copy that was not moved).
                new = (raw + _HUGE - 1) // _HUGE * _HUGE
                if new > raw:
                    munmap(raw, new - raw)
                munmap(new + _HUGE, raw + _HUGE - new)
                moved = False
                try:
                    _check(madvise(new, _HUGE, _MADV_HUGEPAGE), 'madvise')
                    before = _huge_kib()
                    ctypes.memmove(new, at, _HUGE)
                    if _huge_kib() - before < _HUGE // 1024:
                        return done, 'no transparent huge page for the copy (transparent_hugepage off?)'
                    _check(mprotect(new, _HUGE, prot), 'mprotect')
                    if mremap(new, _HUGE, _HUGE, _MREMAP_MAYMOVE | _MREMAP_FIXED, at) != at:
                        raise OSError(ctypes.get_errno(), 'mremap')
                    moved = True
                    done += _HUGE
                finally:
                    if not moved:
                        munmap(new, _HUGE)
        return done, '' if done else 'no 2 MiB of code to map'
    except Exception as e:
        return done, '%s: %s' % (type(e).__name__, e)


def _huge_kib():
    """The KiB of the zygote's anonymous memory in transparent huge pages."""
    with open('%d/smaps_rollup' % os.getpid(), 'rb', opener=lambda p, fl: os.open(p, fl, dir_fd=PROC)) as f:
        for line in f:
            if line.startswith(b'AnonHugePages:'):
                return int(line.split()[1])
    return 0


def _verdict(cost, margin):
    """The way a pin trial keeps, of cost's ('shared', 'pinned', 'hot': each
    way's batches, in CPU a fork): the cheapest, unless pinning everything
    costs at most margin times it. The trial's children write about the
    probe's pages, so pinning those alone looks as good in the trial as
    pinning all; a sandboxed child writes far more of the zygote's pages,
    and each one the 'hot' pins missed is a fault (zygotePinAllMargin in
    zygote.go)."""
    best = min((min(c), way) for way, c in cost.items() if c)
    if cost.get('pinned') and min(cost['pinned']) <= margin * best[0]:
        return 'pinned'
    return best[1]


def _pin(limit, mode, margin):
    """Pins the zygote's writable memory, or the part of it a child writes,
    so that each fork copies it into the child at once instead of sharing it
    copy-on-write; returns the ring that holds the pins (or -1), the pages
    pinned, why none were (an error), and, with mode 'trial', the trial's
    figures.

    The kernel copies a page that may be pinned for DMA into the child at
    the fork (copy_present_page), where it would otherwise share it and
    copy it at the first write of either process, one page fault each: a
    forked interpreter writes a few hundred of the zygote's pages
    (reference counts), and the zygote writes some of them again before
    its next fork. Which costs less depends on the host. On a machine where
    a fault cost 55 to 58 us with the other CPU busy, a child's print(1)
    took 11.8 to 14.5 ms of CPU against 5.2 to 6.4 ms with the parent's
    memory pinned (its fork 2.0 ms against 3.0 to 3.9); on one where a fault
    costs 2.8 us, the pinned fork copies 3,200 pages for 5.2 to 6.8 ms
    against 0.5 to 0.6 ms shared, and the child saves 0.2 ms (`python3
    bench/measure/cow_cost.py`). Between the two, 'hot' pins only the pages
    a probe child writes (_written): about 370 of 2,560 here, a fork and
    its child 1.8 to 2.5 ms against 2.3 to 2.9 with nothing pinned (`python3
    bench/measure/hot_pin.py`). So with mode 'trial' the zygote measures the
    three ways (_fork_cost) and keeps the cheapest, or pinning everything
    where that costs at most margin times the cheapest; 'on' pins everything
    and 'hot' the probe's pages without a trial, 'off' never pins (the
    supervisor passes a trial's verdict on to the zygotes that follow).
    io_uring's fixed buffers are the one pin a process can take of its own
    memory without a device: the pages present now in every private
    writable mapping are registered (or the probe's), once, unless there
    are more than limit. Memory the zygote maps later is shared as before.
    The ring does no I/O; a child closes it first thing (_fork). Best
    effort: without io_uring (kernel.io_uring_disabled, a filter,
    RLIMIT_MEMLOCK without CAP_IPC_LOCK) the zygote forks as before, and the
    supervisor logs why."""
    if mode == 'off':
        os.close(PROC)
        return -1, 0, '', None
    ring = -1
    try:
        # In the host's pid namespace, as PROC; present pages (bit 63).
        runs = _ranges(str(os.getpid()), None, lambda e: e >> 63)
        pages = sum(hi - lo for lo, hi in runs) // 4096
        if not runs:
            return -1, 0, 'no page to pin', None
        if pages > limit:
            return -1, 0, '%d pages to pin, more than the %d it may' % (pages, limit), None
        if len(runs) > _IORING_MAX_REG_BUFFERS:
            return -1, 0, '%d ranges to pin, more than io_uring registers' % len(runs), None
        ways = {'pinned': runs}
        if mode in ('trial', 'hot'):
            hot = _written(runs)
            if hot:
                ways['hot'] = hot
            elif mode == 'hot':
                return -1, 0, 'the probe child wrote none of its pages', None
        params = (ctypes.c_uint32 * 30)()  # struct io_uring_params, 120 bytes
        ring = _syscall(_SYS_io_uring_setup, 1, ctypes.addressof(params), None)
        _check(ring, 'io_uring_setup')
        register = _libc['syscall']  # syscall(2) with four arguments
        register.restype = _c_long
        register.argtypes = (_c_long, _c_long, _c_long, _c_void_p, _c_long)

        def pin(way):
            iov = (ctypes.c_uint64 * (2 * len(ways[way])))()
            for i, (lo, hi) in enumerate(ways[way]):
                iov[2 * i], iov[2 * i + 1] = lo, hi - lo
            _check(register(_SYS_io_uring_register, ring, _IORING_REGISTER_BUFFERS, ctypes.addressof(iov), len(ways[way])),
                   'io_uring_register')
            return sum(hi - lo for lo, hi in ways[way]) // 4096

        def unpin():
            _check(register(_SYS_io_uring_register, ring, _IORING_UNREGISTER_BUFFERS, None, 0), 'io_uring_register')
        if mode != 'trial':
            return ring, pin('pinned' if mode == 'on' else 'hot'), '', None
        # Each way twice, in turn: each way's cheapest batch, so that a
        # batch slowed by the host's other work does not decide.
        cost = {'shared': [], 'pinned': [], 'hot': []}
        for _ in range(2):
            for way in cost:
                if way != 'shared' and way not in ways:
                    continue
                if way != 'shared':
                    pin(way)
                cost[way].append(_fork_cost(_TRIAL_FORKS))
                if way != 'shared':
                    unpin()
        # The figures the supervisor logs, and the way kept.
        trial = {way + '_us': int(min(c) * 1e6) for way, c in cost.items() if c}
        trial['kept'] = _verdict(cost, margin)
        if trial['kept'] != 'shared':
            return ring, pin(trial['kept']), '', trial
        os.close(ring)
        return -1, 0, '', trial
    except Exception as e:  # best effort: a zygote without pins still serves
        if ring >= 0:
            os.close(ring)
        return -1, 0, '%s: %s' % (type(e).__name__, e), None
    finally:
        os.close(PROC)  # the host's: never a child's


def _ranges(pid, within, want):
    """The [start, end) ranges of the pages whose pagemap entry want accepts,
    in the private writable mappings of process pid, or in within's ranges;
    a range never crosses from one mapping (or one of within's) into the
    next."""
    pagemap = os.open(pid + '/pagemap', os.O_RDONLY | os.O_CLOEXEC, dir_fd=PROC)
    try:
        if within is None:
            within = []
            with open(pid + '/maps', 'rb', opener=lambda p, fl: os.open(p, fl, dir_fd=PROC)) as maps:
                for line in maps:
                    f = line.split()
                    # Private and writable: the kernel's own pages ([vvar],
                    # [vdso], [vsyscall]) are neither.
                    if f[1][1:2] == b'w' and f[1][3:4] == b'p':
                        within.append([int(x, 16) for x in f[0].split(b'-')])
        out = []
        for lo, hi in within:
            last = None
            entries = memoryview(os.pread(pagemap, (hi - lo) // 4096 * 8, lo // 4096 * 8)).cast('Q')
            for i, e in enumerate(entries):
                if want(e):
                    page = lo + i * 4096
                    if last is not None and last[1] == page:
                        last[1] = page + 4096
                    else:
                        last = [page, page + 4096]
                        out.append(last)
        return out
    finally:
        os.close(pagemap)


def _written(runs):
    """The pages of runs, the zygote's present ones, that a probe child
    writes as it runs _PROBE, as [start, end) ranges within runs': those its
    pagemap then says it maps exclusively (bit 56), which the fork had
    shared. The child runs no request code and writes nothing but to
    /dev/null and the pipe."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            with open(os.devnull, 'w') as out:
                exec(compile(_PROBE, '<pin probe>', 'exec'), {'__name__': '__main__', 'out': out})
            # Present and mapped by this process alone (bits 63 and 56).
            hot = _ranges(str(os.getpid()), runs, lambda e: e >> 63 and e >> 56 & 1)
            with open(w, 'wb') as f:
                f.write(b' '.join(b'%d-%d' % (lo, hi) for lo, hi in hot))
        finally:
            os._exit(0)
    os.close(w)
    with open(r, 'rb') as f:
        hot = [[int(x) for x in lohi.split(b'-')] for lohi in f.read().split()]
    os.waitpid(pid, 0)
    return hot


# What the probe child runs (_written): a small program's worth of the
# interpreter (compile, a module's functions, allocations, a print), writing
# to the zygote's own pages as a run does, before it exits. Each of the pin
# trial's children runs it and more (_TRIAL): a run writes pages that no
# probe wrote, and a trial whose children wrote only the probe's would find
# the probe's pins as good as all of them at less cost. (A child in a
# sandbox writes more of them still: the pins of a probe's pages alone did
# far worse than pinning all where a fault costs 20 to 60 us, README.)
_PROBE = "import json\nd = {str(i): [i, i / 2] for i in range(64)}\nprint(json.loads(json.dumps(d))['7'], file=out)\n"
_TRIAL = _PROBE + ("import re\nm = re.match(r'(\\w+)-(\\d+)', 'run-%d' % len(d))\n"
                   "print(sorted(k for k, v in d.items() if int(k) % 7 == 0), m.groups(), '%5.2f' % 3.14159, file=out)\n")
_TRIAL_FORKS = 3


def _fork_cost(n):
    """The CPU, in seconds, that one fork of n costs: the zygote's forks and
    its work between them, while the earlier children still share its pages
    (as the pool's waiting children do), and each child's own CPU, page
    faults included, as it runs _TRIAL once all are forked, and exits. The
    children run no request code; they write nothing but to /dev/null."""
    import time
    r, w = os.pipe()
    pids = []
    cpu = time.thread_time()
    try:
        for _ in range(n):
            pid = os.fork()
            if pid == 0:
                try:
                    os.close(w)
                    os.read(r, 1)  # EOF once every child is forked
                    with open(os.devnull, 'w') as out:
                        exec(compile(_TRIAL, '<pin trial>', 'exec'), {'__name__': '__main__', 'out': out})
                finally:
                    os._exit(0)
            pids.append(pid)
            os.close(os.pidfd_open(pid))  # as the loop does for each child
    finally:
        cpu = time.thread_time() - cpu
        os.close(w)
        os.close(r)
        for pid in pids:
            _, _, ru = os.wait4(pid, 0)
            cpu += ru.ru_utime + ru.ru_stime
    return cpu / n


def _fork(init_pidfd, own_pidns, nice):
    # The child is made in the sandbox's pid namespace (the sandbox's init is
    # its pid 1) by one plain fork: setns of a pid namespace applies to the
    # caller's children only, and the zygote returns to its own at once.
    _check(_setns(init_pidfd, _CLONE_NEWPID), 'entering the pid namespace')
    pid = os.fork()
    if pid != 0:
        _check(_setns(own_pidns, _CLONE_NEWPID), 'leaving the pid namespace')
    else:
        if _ring >= 0:
            os.close(_ring)  # the zygote's, never a run's
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    return pid


def _sandbox(cfg, req, fds):
    """Joins the prepared sandbox as its program would be started there."""
    init_pidfd, env_fd, out_fd, err_fd = fds

    def sync(expect):
        b = os.read(env_fd, 1)
        if b != expect:
            raise OSError(0, 'the supervisor said %r, not %r' % (b, expect))

    step = 'cgroup'
    report = env_fd
    try:
        sync(b'g')  # the supervisor has moved this process into the run's cgroup
        step = 'namespaces'
        _check(_setns(init_pidfd, _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWUTS |
                           _CLONE_NEWIPC | _CLONE_NEWCGROUP), 'setns')
        step = 'rlimits'
        for res, cur, mx in cfg['rlimits']:
            resource.setrlimit(res, (cur, mx))
        step = 'user namespace'
        os.setgroups([])
        # The namespace's owner is the run's own host id, as a cold run's is.
        os.setresuid(-1, req['host_uid'], -1)
        _check(_unshare(_CLONE_NEWUSER), 'unshare')
        os.write(env_fd, b'm')
        sync(b'g')  # the supervisor has written the id maps
        step = 'setsid'
        os.setsid()
        step = 'bounding set'
        for cap in range(cfg['last_cap'] + 1):
            _check(_prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), 'PR_CAPBSET_DROP')
        step = 'identity'
        os.setgroups([])
        os.setresgid(req['gid'], req['gid'], req['gid'])
        os.setresuid(req['uid'], req['uid'], req['uid'])
        # The uid change made the process non-dumpable; an exec'd program
        # (a cold run's) is dumpable, and owns its /proc files.
        _check(_prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0), 'PR_SET_DUMPABLE')
        step = 'capabilities'
        _check(_syscall(_SYS_capset, *_CAPSET, None), 'capset')
        step = 'descriptors'
        null = os.open('/dev/null', os.O_RDONLY)
        for fd, to in ((null, 0), (out_fd, 1), (err_fd, 2), (env_fd, 3)):
            os.dup2(fd, to)
        report = 3
        # Every other descriptor, however high: the zygote's limit is not the
        # run's, which the child has taken by now.
        _check(_syscall(_SYS_close_range, 4, 0xffffffff, 0), 'close_range')
        os.chdir('/sandbox')
        step = 'seccomp'
        _check(_prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 'PR_SET_NO_NEW_PRIVS')
        step = 'landlock'  # _landlock says why
        attr, beneath = cfg['landlock']
        beneath.parent_fd = os.open('/', os.O_PATH | os.O_CLOEXEC)
        ruleset = _syscall(_SYS_landlock_create_ruleset, ctypes.addressof(attr), ctypes.sizeof(attr), None)
        _check(ruleset, 'landlock_create_ruleset')
        _check(_syscall4(_SYS_landlock_add_rule, ruleset, _LANDLOCK_RULE_PATH_BENEATH, ctypes.addressof(beneath), None),
               'landlock_add_rule')
        _check(_syscall(_SYS_landlock_restrict_self, ruleset, None, None), 'landlock_restrict_self')
        os.close(ruleset)
        os.close(beneath.parent_fd)
        step = 'seccomp'
        # The child's filter is stacked on the zygote's, which alone allows
        # setns and unshare: fail closed if it is not there beneath.
        if cfg['zygote_filter'] and _prctl(_PR_GET_SECCOMP, 0, 0, 0, 0) != _SECCOMP_MODE_FILTER:
            raise OSError(0, "the zygote's filter is not loaded")
        _check(_syscall(_SYS_seccomp, _SECCOMP_SET_MODE_FILTER, 0, ctypes.addressof(cfg['filter'][0])), 'seccomp')
    except BaseException as e:
        try:
            os.write(report, ('e%s: %s' % (step, e)).encode())
        finally:
            os._exit(127)


def _recursion_field():
    """The offset in the main thread's PyThreadState of its
    recursion_remaining, with recursion_limit the int after it, and the
    function that finds that state: a child sets the count left to the limit
    before its program runs, so that the program may recurse as deep as a
    cold one, which starts with no bootstrap's frames below its own (995
    frames against 999, and a RecursionError's traceback said "repeated 992
    more times" against 996). The layout is CPython 3.11's and is checked
    here against what sys.setrecursionlimit writes; None where it does not
    hold, and the program gets the bootstrap's frames' four fewer."""
    if sys.version_info[:2] != (3, 11):
        return None
    get = ctypes.pythonapi.PyThreadState_Get
    get.restype, get.argtypes = _c_void_p, ()
    # After prev, next and interp, and the ints _initialized and _static.
    at = 3 * ctypes.sizeof(_c_void_p) + 8
    remaining, limit = _c_int.from_address(get() + at), _c_int.from_address(get() + at + 4)
    was, left = sys.getrecursionlimit(), remaining.value
    if limit.value != was or not 0 < left < was:
        return None
    sys.setrecursionlimit(was + 100)  # keeps the depth: limit and left move together
    moved = limit.value == was + 100 and remaining.value == left + 100
    sys.setrecursionlimit(was)
    if not moved or remaining.value != left:
        return None
    return get, at


def _frame_field():
    """The address of the main thread's pointer to its current frame
    (tstate->cframe->current_frame), which the call that runs a program
    empties for the call's time: a frame started from C takes that pointer
    for the frame below its own, so that the program's, an atexit handler's,
    sys.excepthook's or a __del__'s frame then has none below it, as in a
    cold interpreter, where nothing of a bootstrap's is there for
    sys._getframe, traceback.print_stack, inspect.stack or a warning's
    stacklevel to find. Frames the bootstrap calls from Python link to its
    own all the same (CPython 3.11 inlines those calls), and the pointer is
    put back before the bootstrap goes on.
    While the pointer is empty the bootstrap makes no call but the one that
    starts those frames, and puts it back by a plain store as that call
    returns, before any other: a profiler's c_call and c_return events name
    the current frame, and with none the interpreter faults (the frames
    audit: SIGSEGV at the exit of a program that left sys.setprofile on).
    It is emptied only with no profile function set (_trace_fields), and
    where one is set at the exit the frames show. The layout is CPython 3.11's,
    checked here against this function's own frame, then the whole effect
    against a probe; None where either does not hold, and the program's
    stack shows the bootstrap's frames below its own."""
    if sys.version_info[:2] != (3, 11) or _recursion is None:
        return None
    ptr = _PTR
    # cframe's current_frame follows its use_tracing byte; PyFrameObject: its
    # head, f_back, then f_frame, the _PyInterpreterFrame whose sixth field is
    # its frame_obj.
    cframe = _c_void_p.from_address(_recursion[0]() + _CFRAME_AT).value
    if not cframe:
        return None
    slot = _c_void_p.from_address(cframe + ptr)
    here = sys._getframe()
    if not slot.value or slot.value != _c_void_p.from_address(id(here) + 3 * ptr).value:
        return None
    if _c_void_p.from_address(slot.value + 5 * ptr).value != id(here):
        return None
    was = slot.value
    slot.value = None
    try:
        below = _call(lambda: sys._getframe().f_back)
    finally:
        slot.value = was
    return slot if below is None else None


def _trace_fields():
    """The main thread's PyThreadState.tracing, the int after
    recursion_headroom, and its c_profilefunc and c_tracefunc, the pointers
    after cframe. While tracing is not 0 (as inside a trace function) no
    function is traced or profiled: the bootstrap's own steps after the
    program keep it 1, and 0 only while they call the program's code (_from_c),
    so that a tracer or profiler the program leaves on sees what it would see
    at a cold interpreter's exit, not the bootstrap's functions (cProfile's
    stats printed by an atexit handler listed them, and a trace function that
    raised on them broke the exit). c_profilefunc says whether a profile
    function is set, sys.setprofile's or one set in C (PyEval_SetProfile with
    no object, which sys.getprofile() shows as None: the second frames audit's
    SIGSEGV). CPython 3.11's layout, checked against what sys.setprofile and
    sys.settrace write and a profile function sees; None where that does not
    hold, and the bootstrap's steps are seen."""
    if _recursion is None:
        return None
    state = _recursion[0]()
    tracing = _c_int.from_address(state + _recursion[1] + 12)
    # After cframe: c_profilefunc, c_tracefunc, c_profileobj, c_traceobj.
    profilefunc, tracefunc, profileobj, traceobj = (_c_void_p.from_address(state + _CFRAME_AT + _PTR * i) for i in (1, 2, 3, 4))
    fields = (tracing, profilefunc, tracefunc, profileobj, traceobj)
    if any(f.value for f in fields):
        return None
    seen = []

    def probe(frame, event, arg):
        seen.append((tracing.value, profilefunc.value is not None, profileobj.value))
    sys.setprofile(probe)
    len(seen)
    sys.setprofile(None)
    profiled = bool(seen) and all(v == (1, True, id(probe)) for v in seen)
    sys.settrace(probe)
    traced = tracefunc.value is not None and traceobj.value == id(probe)
    sys.settrace(None)
    if not profiled or not traced or any(f.value for f in fields):
        return None
    return tracing, profilefunc, tracefunc


def _audit_hooks_field():
    """The main interpreter's audit_hooks, the list sys.addaudithook appends
    a hook to, so that the exit may call what CPython audits (gc.get_objects,
    os.listdir, a ctypes call) with the program's hooks set aside: a cold
    interpreter's exit makes no such call, and a hook that refused one made a
    warm run's exit fail (the differential probe of 2026-12-06: exit 1 and the
    bootstrap's traceback against cold's 0). The field of CPython 3.11's
    PyInterpreterState is found by a probe: a child adds a hook and looks for
    the one word of its interpreter's state that was empty and now points to
    a list of that hook alone (the list is kept from the collector, so the
    words are read through a pipe, where a word that is no pointer fails with
    EFAULT); the zygote's own word must be empty there. None where the probe
    finds no one such word, and the exit's calls are seen."""
    if _recursion is None:
        return None
    interp = _c_void_p.from_address(_recursion[0]() + 2 * _PTR).value  # tstate->interp
    size = 1 << 14  # the field sits 3.5 KiB in, on Debian's 3.11
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        found = []
        try:
            def hook(event, args):
                pass

            def words(at, n):
                # n words at address at, or None where they can't be read.
                try:
                    os.write(pw, (ctypes.c_char * (n * _PTR)).from_address(at))
                except OSError:
                    return None
                b = os.read(pr, n * _PTR)
                return [int.from_bytes(b[i:i + _PTR], sys.byteorder) for i in range(0, len(b), _PTR)]
            pr, pw = os.pipe()
            before = words(interp, size // _PTR)
            sys.addaudithook(hook)
            after = words(interp, size // _PTR)
            for i, v in enumerate(after):
                if v and not before[i] and v % _PTR == 0:
                    # PyListObject: its refcount, type, size and items.
                    head = words(v, 4)
                    if head and head[1:3] == [id(list), 1] and words(head[3], 1) == [id(hook)]:
                        found.append(i * _PTR)
        finally:
            os.write(w, str(found[0] if len(found) == 1 else -1).encode())
            os._exit(0)
    os.close(w)
    try:
        at = int(os.read(r, 32) or -1)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    if at < 0:
        return None
    slot = _c_void_p.from_address(interp + at)
    return slot if slot.value is None else None


_recursion = _recursion_field()
del _recursion_field
# CPython 3.11's PyThreadState: prev, next, interp, seven ints, then the
# pointer to cframe (_frame_field, _trace_fields).
_PTR = ctypes.sizeof(_c_void_p)
_CFRAME_AT = -(-(3 * _PTR + 7 * 4) // _PTR) * _PTR
_frame = _frame_field()
_fields = _trace_fields()
# The fields' stand-ins where a check failed are of no one's: nothing set,
# and setting them does nothing. The frame's pointer is emptied only where
# the profile function can be told (_frame_field).
if _frame is None or _fields is None:
    _frame, _use_tracing = _c_void_p(), ctypes.c_ubyte()
else:
    # cframe's use_tracing, the byte before its current_frame.
    _use_tracing = ctypes.c_ubyte.from_address(ctypes.addressof(_frame) - _PTR)
if _fields is None:
    _fields = _c_int(), _c_void_p(), _c_void_p()
_tracing, _profilefunc, _tracefunc = _fields
del _frame_field, _trace_fields, _fields
# A stand-in of no one's where the probe failed: setting it aside does nothing.
# (Not `or`: an empty c_void_p is false.)
_audit_hooks = _audit_hooks_field()
if _audit_hooks is None:
    _audit_hooks = _c_void_p()
del _audit_hooks_field
_cfg, _req, _fds = _serve()
_sandbox(_cfg, _req, _fds)


def _sealer(f, syscall=_syscall, check=_check):
    """The load of the child's last filter (seccomp.ZygoteProgram), for once
    it has shown its run's exec (_show_exec) and before its program starts:
    Default's prctl rule, which refuses the call _show_exec makes (a run's
    own would set its command line's bounds to any of its memory). A failed
    load raises, and the program does not start."""
    if not f:
        return lambda: None
    return lambda: check(syscall(_SYS_seccomp, _SECCOMP_SET_MODE_FILTER, 0, ctypes.addressof(f[0])), 'seccomp')


_seal = _sealer(_cfg['program_filter'])
del _sealer
# The main thread's native id, which threading read in the zygote: this
# process's own (in the sandbox's pid namespace), as a fresh interpreter's.
if 'threading' in sys.modules and hasattr(sys.modules['threading'].main_thread(), '_set_native_id'):
    sys.modules['threading'].main_thread()._set_native_id()
_path = _req['path']
del _cfg, _req, _fds, _serve, _decode_filter, _module_names, _landlock, _Beneath, _syscall4, _huge_code, _huge_kib, _pin, _verdict, _ranges, _written, _fork_cost, _PROBE, _TRIAL, _TRIAL_FORKS, _fork, _sandbox, _check, _prctl, _Filter, _bind, _setns, _unshare, _syscall
del _CAP_HEADER, _CAP_DATA, _CAPSET
# From here on this process is the run's program, which waits in its sandbox
# for its run: the code, written as its script, and the environment. What does
# not depend on the run is done first, before it says it is ready, so that the
# run does not wait for it: the command line, sys.path's first entry, and
# __main__, made as the interpreter makes it for a script (names in the same
# order) and put in place once the script exists.
sys.argv[:] = [_path]
sys.orig_argv[:] = [sys.orig_argv[0], '-u', _path]
_retitle(sys.orig_argv)
del _retitle, _libc, _C_ARGV, _c_argv, _mm_map, _MMMap
sys.path[0] = '/sandbox'


def _setenv(env):
    # os.environ.clear() and update(env), env's names and values as bytes,
    # the C library's environment with it, as os._Environ's own methods
    # change each name: without them, whose generic MutableMapping code
    # (clear pops one item at a time, each through a fresh iterator) took a
    # child's rehearsal of this step 50 to 57 page faults against 34 or 35.
    data = os.environ._data
    for k in data:
        os.unsetenv(k)
    data.clear()
    for k, v in env:
        os.putenv(k, v)
        data[k] = v


def _tz_key():
    # What time.tzset() computes from: TZ, and the year (the module's
    # timezone, altzone, daylight and tzname are the zone's in January and
    # July of the current year).
    return os.environ._data.get(b'TZ'), sys.modules['time'].time() // ((365 * 24 + 6) * 3600)


import builtins, types, importlib.machinery
_main = types.ModuleType('__main__')
_main.__loader__ = importlib.machinery.SourceFileLoader('__main__', _path)
_main.__annotations__ = {}
_main.__builtins__ = builtins
_main.__file__ = _path
_main.__cached__ = None


def _parent(own, getpid, real):
    def getppid():
        return 1 if getpid() == own else real()
    return getppid


# This process's parent (the zygote) is outside its pid namespace, where
# getppid() says 0; a cold program's is the sandbox's pid 1. os.getppid() says
# 1 here, as cold: with 0, os.kill(os.getppid(), sig) signalled the program's
# own process group where cold it fails (EPERM). A process it forks gets its
# real parent. (The system call itself, through ctypes, still says 0.)
_getppid = _parent(os.getpid(), os.getpid, os.getppid)
_getppid.__module__, _getppid.__qualname__, _getppid.__doc__ = 'posix', 'getppid', os.getppid.__doc__
os.getppid = sys.modules['posix'].getppid = _getppid
del _parent, _getppid
# Then each step the run will take, once, on data of no run's, so that the run
# does not pay the first use of each: the first use in this process copies
# every page of the zygote's that it touches (reference counts), and a run
# that found them untouched spent 0.4 ms more between its start and its first
# line of output. Nothing of this stays: the environment is put back as it
# was, the rest makes nothing the program can see.
_setenv(list(os.environ._data.items()))
if 'time' in sys.modules:
    sys.modules['time'].tzset()
compile('pass\n', _path, 'exec')
# What the exit below uses, bound before the program runs: the interpreter's
# own exit calls these in C, where a program that replaced os._exit, gc,
# atexit, isinstance or sys.modules entries can't reach them.
import atexit, gc, signal, _io
_run_exitfuncs, _collect, _get_objects, _IOBase = atexit._run_exitfuncs, gc.collect, gc.get_objects, _io._IOBase
_isinstance, _issubclass, _str, _exit, _kill, _getpid, _write = isinstance, issubclass, str, os._exit, os.kill, os.getpid, os.write
_signal, _SIGINT, _SIG_DFL = signal.signal, signal.SIGINT, signal.SIG_DFL
_type, _SystemExit, _KeyboardInterrupt = type, SystemExit, KeyboardInterrupt
# The interpreter's own dict of modules (PyImport_GetModuleDict), which a
# program that rebinds or deletes sys.modules, or replaces builtins such as
# getattr, does not change for the interpreter's exit.
_modules, _getattr, _audit = sys.modules, getattr, sys.audit
# The C library's exit flushes its stdio streams (a FILE a C extension or
# ctypes opened and left buffered); os._exit does not. Its atexit handlers
# and the libraries' destructors are not run: those the preloads registered
# (OpenSSL's cleanup, hashlib's) cost a child 5 to 7 ms (README).
_fflush = ctypes.CDLL(None).fflush
_fflush.restype, _fflush.argtypes = ctypes.c_int, (ctypes.c_void_p,)
import _thread
_listdir, _start_thread, _allocate_lock = os.listdir, _thread.start_new_thread, _thread.allocate_lock
from _collections import deque as _deque
# The fields of the thread's state are read and written through ctypes'
# descriptor itself, which a program can't change (_SimpleCData is immutable),
# not through .value, which it can shadow on c_void_p or c_int (the third
# frames audit: a profiler then met an emptied frame pointer: SIGSEGV). So
# are exceptions' tracebacks, which an exception class can shadow.
_get, _set = ctypes._SimpleCData.__dict__['value'].__get__, ctypes._SimpleCData.__dict__['value'].__set__
_tb_of, _with_tb = BaseException.__dict__['__traceback__'].__get__, BaseException.with_traceback
_map, _untraced, _traced = map, _partial(_set, _tracing, 0), _partial(_set, _tracing, 1)
_len, _int, _object, _range = len, int, object, range
from _operator import methodcaller as _methodcaller
_flush_of, _progress, _zygote_globals = _methodcaller('flush'), _c_int(), globals()
_BaseException, _Exception, _OSError = BaseException, Exception, OSError
_exit_steps = (_run_exitfuncs,
               _partial(sys.__dict__.update, last_type=None, last_value=None, last_traceback=None),
               _partial(_modules.pop, '__main__', None),
               _collect)
# What _from_c's chain costs of the recursion count over the interpreter's own
# calls of the same code, which each corpus case `py stack ...` checks.
_HOOK_LEVELS, _SHUTDOWN_LEVELS, _EXIT_LEVELS, _FLUSH_LEVELS = 3, 2, 3, 4


def _from_c(levels, steps):
    """Calls steps, one after another, from C, as the interpreter's exit and
    its error printing call a program's handlers and hooks: their frames have
    none below them (the pointer to the current frame emptied, _frame_field,
    unless a profile function is set, whose c_call events would name it); a
    tracer or profiler sees them, and no call of the bootstrap's (the thread's
    tracing count 0 for the steps alone, set and put back by steps of the
    chain, which calls them from C: _trace_fields); and the recursion count is
    a cold interpreter's for them (levels, what the chain costs over the
    interpreter's own call). Returns what a step raised, after which no later
    step is called. (Called as a plain call, which CPython 3.11 inlines, in
    the evaluation whose pointer _frame is; f(*args) is not inlined.)"""
    below, tracing, left = _get(_frame), _get(_tracing), _get(_remaining)
    if _get(_profilefunc) is None:
        _set(_frame, None)
    # The flag a frame started from here takes: a tracer set while the count
    # was not 0 (by code the bootstrap ran, an exit status's __str__) left
    # it off, as the interpreter leaves it until the count is 0 again.
    _set(_use_tracing, 0 if _get(_profilefunc) is None and _get(_tracefunc) is None else 255)
    _set(_remaining, left + levels)
    try:
        _deque(_map(_call, (_untraced, *steps, _traced)), 0)
        failed = None
    except _BaseException as e:
        failed = e
    _set(_frame, below)
    _set(_tracing, tracing)
    _set(_remaining, left)
    return failed
del atexit, gc, signal, _io, _thread


def _flush_c_stdio():
    # fflush(NULL) takes each stream's lock, which a thread blocked in C stdio
    # (a daemon thread's fgets on a pipe) holds for good, where the C
    # library's exit flushes without locks: with other threads it is done by
    # a thread of its own, waited for 0.1 s.
    try:
        alone = _len(_listdir('/proc/self/task')) == 1
    except _OSError:
        alone = False
    if alone:
        _fflush(None)
        return
    done = _allocate_lock()
    done.acquire()

    def flush():
        _fflush(None)
        done.release()
    try:
        _start_thread(flush, ())
    except _Exception:
        return
    done.acquire(True, 0.1)


def _to_stderr(text, fallback=True):
    # As PySys_WriteStderr: to sys.stderr, or to descriptor 2 without one or,
    # with fallback, when it fails (its error cleared, whatever it was).
    err = _getattr(sys, 'stderr', None)
    if err is not None:
        try:
            err.write(text)
            return
        except _BaseException:
            if not fallback:
                return
    _write(2, text.encode('utf-8', 'backslashreplace'))


def _unraisable(e, obj):
    # As PyErr_WriteUnraisable(obj), called from C: the traceback without the
    # bootstrap's frame, through sys.unraisablehook, the default one if that
    # fails.
    args = _UnraisableHookArgs((_type(e), e, _tb_of(e).tb_next, None, obj))
    hook = _getattr(sys, 'unraisablehook', None)
    if hook is None or _from_c(_HOOK_LEVELS, (_partial(hook, args),)) is not None:
        sys.__unraisablehook__(args)


def _exit_status(e):
    # As the interpreter's handling of an uncaught SystemExit: None is 0, an
    # int that does not fit a C long -1, anything else printed and 1.
    code = e.code
    if code is None:
        return 0
    if not _isinstance(code, _int):
        # As handle_system_exit: str(code) to sys.stderr (to descriptor 2
        # without one), a failure of either ignored, then the line's end.
        try:
            text = _str(code)
        except _BaseException:
            text = None
        if text is not None:
            _to_stderr(text, fallback=False)
        _to_stderr('\n')
        return 1
    return code if -2**63 <= code < 2**63 else -1


def _print_uncaught(e):
    # As PyErr_Print: sys.last_* first, then sys.excepthook; its own failure
    # is reported with the original exception, and its SystemExit exits.
    tb = _tb_of(e)
    sys.last_type, sys.last_value, sys.last_traceback = _type(e), e, tb
    hook = _getattr(sys, 'excepthook', None)
    if hook is None:
        _to_stderr('sys.excepthook is missing\n')
        sys.__excepthook__(_type(e), e, tb)
        return None
    kind = _type(e)
    failed = _from_c(_HOOK_LEVELS, (_partial(hook, kind, e, tb),))
    if failed is None:
        return None
    if _isinstance(failed, _SystemExit):
        return _exit_status(failed)
    try:
        sys.stdout.flush()
    except _Exception:
        pass
    failed = _with_tb(failed, _tb_of(failed).tb_next)
    _to_stderr('Error in sys.excepthook:\n')
    sys.__excepthook__(_type(failed), failed, _tb_of(failed))
    _to_stderr('\nOriginal exception was:\n')
    sys.__excepthook__(kind, e, tb)
    return None


def _take(fd, path):
    # The run, up to EOF from fd: its environment as (name, value) pairs and
    # its code, which is written at path. The frame (setRun in zygote.go): the
    # lengths of the environment and of the code (4 bytes each,
    # little-endian), the environment (NAME=VALUE, each ended by a NUL), the
    # code. (In 64 KiB reads: os.read allocates its whole size first, and a
    # buffer of 1 MiB was mapped and unmapped for each read, 0.3 ms of the
    # run's start here.)
    chunks = []
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            break
        chunks.append(b)
    os.close(fd)
    b = b''.join(chunks)
    n = 8 + int.from_bytes(b[:4], 'little')
    if len(b) < 8 or len(b) != n + int.from_bytes(b[4:8], 'little'):
        raise OSError(0, 'the run came cut short (%d bytes)' % len(b))
    block = b[8:n]
    env = [kv.split(b'=', 1) for kv in block.split(b'\0')[:-1]]
    src = b[n:]
    f = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    v = memoryview(src)
    try:
        while v:
            v = v[os.write(f, v):]
        # Read, as the interpreter reads its script: the file's access time is
        # then a read's, after its modification (relatime), not its creation's,
        # which a clock tick between the open and the write put before it.
        os.pread(f, 1, 0)
    finally:
        os.close(f)
    return env, src, block


# The hand-over's steps rehearsed too, on a frame of no run's through a pipe,
# the code written to /dev/null. (The script itself is made at the run, not
# before the sandbox says it is ready: its times (birth, access) and
# /sandbox's are the run's, as a cold run's are.)
_r, _w = os.pipe()
os.write(_w, b'\4\0\0\0\5\0\0\0A=1\0pass\n')
os.close(_w)
_take(_r, '/dev/null')
del _r, _w
# A cold start looks for an importer for its script, which caches none.
sys.path_importer_cache[_path] = None
_tz = _tz_key() if 'time' in sys.modules else None
_collect()
sys.stdout.flush()
os.write(3, b'r')
# The run, up to EOF: the supervisor closes its end.
_env, _src, _block = _take(3, _path)
_setenv(_env)
_show_exec(_block)
_seal()
# PYTHONPATH's entries, each made absolute as the interpreter's start makes
# it (getpath: normalised, an empty one the working directory), then each
# path once, the first kept, as site's removeduppaths. (Looked up in
# os.environ's dict: os.environ.get of an absent name raises and catches a
# KeyError, the process's first exception, 0.8 to 2.7 ms here.)
_pp = os.environ._data.get(b'PYTHONPATH')
if _pp:
    sys.path[1:] = dict.fromkeys([os.path.abspath(p) for p in os.fsdecode(_pp).split(':')] + sys.path[1:])
if _tz is not None and _tz != _tz_key():
    sys.modules['time'].tzset()  # the run's TZ, as a fresh interpreter reads it
if 'logging' in sys.modules:
    # A record's relativeCreated counts from logging's import: the run's
    # start, not the zygote's.
    sys.modules['logging']._startTime = sys.modules['time'].time()
del _env, _block, _setenv, _show_exec, _seal, _MM, _tz, _tz_key, _pp, _take
sys.modules['__main__'] = _main


_status, _sigint, _uncaught = 0, False, None
# The warnings compile() gives (a SyntaxWarning) are held until it is known
# whether the source compiles: if it does not, the file parser below compiles
# it again and gives them itself, as `python3 main.py` does, once. (Held by
# warnings' own hook, not catch_warnings, which would move the filters'
# version, a module's __warningregistry__ shows.)
_warnings = _modules.get('warnings')
_said = []
if _warnings is not None:
    _show, _warnings._showwarnmsg_impl = _warnings._showwarnmsg_impl, _said.append
try:
    _code = compile(_src, _path, 'exec')
except _BaseException as _e:
    _refused = _e.with_traceback(None)
    # A source compile() refuses (a NUL byte, a bad coding cookie, a syntax
    # error) goes to the interpreter's own file parser, as `python3 main.py`
    # reads it: NUL ends a line there, and its errors say what it says. The
    # program has not run: compile() has no effect.
    _code = None
    _said.clear()
    _fopen = ctypes.CDLL(None).fopen
    _fopen.restype, _fopen.argtypes = ctypes.c_void_p, (ctypes.c_char_p, ctypes.c_char_p)
    _run_file = ctypes.pythonapi.PyRun_FileExFlags
    _run_file.restype = ctypes.py_object
    _run_file.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.py_object,
                          ctypes.py_object, ctypes.c_int, ctypes.c_void_p)
finally:
    if _warnings is not None:
        _warnings._showwarnmsg_impl = _show
        for _m in _said:
            _warnings._showwarnmsg(_m)
        del _show
del _src, _warnings, _said
if _recursion is not None:
    # The program's frame and the call that runs it (exec, or _run_file) cost
    # two where a cold program's start costs its frame alone: one over the
    # limit here, and the program sees 999 left of 1000, as cold.
    _remaining = _c_int.from_address(_recursion[0]() + _recursion[1])
    _remaining.value = _c_int.from_address(ctypes.addressof(_remaining) + 4).value + 1
else:
    _remaining = _c_int()  # a count of no one's
del _recursion
# The program's frame has none below it (_frame_field): the pointer is
# emptied for the one call, and put back first thing as it returns.
_below = _get(_frame)
try:
    if _code is None:
        _fp = _fopen(_path.encode(), b'rb')
        if not _fp:  # never expected (the script was just written): compile()'s error
            raise _refused
        _bpath, _globals = _path.encode(), _main.__dict__
        _set(_frame, None)
        # Py_file_input; it closes the file.
        _run_file(_fp, _bpath, 257, _globals, _globals, 1, None)
    else:
        _globals = _main.__dict__
        _set(_frame, None)
        exec(_code, _globals)
    _set(_frame, _below)
    _set(_tracing, 1)
except _BaseException as _e:
    _set(_frame, _below)
    # (Raised before the program ran, by _fopen's failure, or by it.)
    _set(_tracing, 1)
    # Handled below, outside this handler, as the interpreter handles it
    # after it has left the program: sys.exc_info() empty, and nothing the
    # handlers raise chained to it; without this bootstrap's frame.
    _uncaught = _with_tb(_e, _tb_of(_e).tb_next)
# (__main__'s dict held by no name of the bootstrap's, which would keep its
# objects past __main__'s release at the exit.)
_globals = _bpath = None
_s = None
if _isinstance(_uncaught, _SystemExit):
    _status = _exit_status(_uncaught)
elif _uncaught is not None:
    # The interpreter exits by SIGINT for a KeyboardInterrupt of that very
    # type (run_eval_code_obj), not a subclass's.
    _status, _sigint = 1, _type(_uncaught) is _KeyboardInterrupt
    _s = _print_uncaught(_uncaught)
    if _s is not None:
        _status, _sigint = _s, False
if not _isinstance(_uncaught, _SystemExit) and _s is None:
    # As the interpreter's run of a script, once it has ended and its
    # exception is printed: __main__ loses __file__ and __cached__ before
    # threads are joined and atexit handlers run. (A SystemExit, the
    # program's or its excepthook's, exits from within, leaving them.)
    _main.__dict__.pop('__file__', None)
    _main.__dict__.pop('__cached__', None)
# The program's exception, and with it its traceback's frames and their
# locals, let go from C, as the interpreter lets it go before its exit: a
# __del__ it runs has no frame of the bootstrap's below its own (the fourth
# frames audit's, which reached the bootstrap's globals through it).
_from_c(_EXIT_LEVELS, (_partial(_zygote_globals.pop, '_uncaught', None),))
del _s
# The interpreter's exit, but for what it would spend most on: tearing down
# every module, which writes to each object it frees and so copies the
# zygote's pages into this process (6 ms of CPU against 1). What a program can
# observe of that is kept: non-daemon threads are joined (if threading is
# imported: whatever sys.modules holds under its name), atexit handlers run,
# __main__ is released and collected, and the output is flushed, a failure
# as the interpreter reports it (status 120). (The __del__ methods of
# __main__'s objects run with its globals, builtins and imports intact: the
# interpreter runs those of objects outside a cycle while it clears the
# module, after imports have stopped working; README.)
_absent = _object()
_t = _modules.get('threading', _absent)
if _t is not _absent:
    # From C, as the interpreter's exit calls it (_frame_field).
    _failed = None
    try:
        _shutdown = _t._shutdown
    except _BaseException as _e:
        _failed = _e
    if _failed is None:
        _failed = _from_c(_SHUTDOWN_LEVELS, (_shutdown,))
    if _failed is not None:
        _unraisable(_failed, _t)
    _shutdown = _failed = None
del _t, _absent
# The atexit handlers, then, as the interpreter's finalize_modules: sys.last_*
# let go (set to None, as it does), whose traceback holds __main__'s frame and
# with it every global; __main__ let go (out of sys.modules, as every module
# is by then); the collection. All called from C (_from_c), so that the
# handlers and the __del__ methods of what __main__ held run as from the
# interpreter's exit.
del _main
_from_c(_EXIT_LEVELS, _exit_steps)
del _below, _exit_steps
# A file the program left open outside __main__ (in a module, on builtins)
# loses no buffered data: the teardown would flush it as it freed it. Only the
# run's own objects are the collector's; the zygote's are frozen out of it.
# The check is against the C base class of every io object: io.IOBase is an
# ABC, whose first isinstance cost a run 0.2 ms (its caches, written, copied
# the zygote's pages); and of each object's own type, which runs none of the
# program's code (isinstance reads __class__, which a program's
# __getattribute__ answers: it ran while the hooks were set aside, and one
# that raised failed the exit: the review of 2026-12-06).
# The flushes are called from C (_from_c), as the teardown's and
# flush_std_files' are, a failure of one ignored and the rest flushed after
# it (_progress counts those done).
_out, _err = _getattr(sys, 'stdout', None), _getattr(sys, 'stderr', None)
# (With the program's audit hooks set aside: gc.get_objects is audited, and a
# cold exit makes no such call.)
_hooks = _get(_audit_hooks)
_set(_audit_hooks, None)
try:
    _files = [_f for _f in _get_objects() if _issubclass(_type(_f), _IOBase) and _f is not _out and _f is not _err]
finally:
    _set(_audit_hooks, _hooks)
_i, _steps = 0, None
while _i < _len(_files):
    _steps = []
    for _j in _range(_i, _len(_files)):
        _steps += (_partial(_flush_of, _files[_j]), _partial(_set, _progress, _j + 1))
    _set(_progress, _i)
    _i = _len(_files) if _from_c(_FLUSH_LEVELS, _steps) is None else _get(_progress) + 1
del _files, _steps
# As flush_std_files: a stream that is None, or closed, is left alone; a
# failed flush of stdout is reported, of stderr not; either exits 120.
for _f in (_out, _err):
    if _f is None:
        continue
    try:
        if _f.closed:
            continue
    except _Exception:
        pass
    _e = _from_c(_FLUSH_LEVELS, (_partial(_flush_of, _f),))
    if _e is not None:
        if _f is _out:
            _unraisable(_e, _f)
        _status = 120
# As the interpreter's last steps: the audit hooks' last event, from C, its
# failure ignored; then none (the flush of C's stdio below lists threads and
# calls C, which a cold exit does without an event).
if _get(_audit_hooks) is not None:
    _from_c(0, (_partial(_audit, 'cpython.PyInterpreterState_Clear'),))
    _set(_audit_hooks, None)
if _sigint:
    _signal(_SIGINT, _SIG_DFL)
    _kill(_getpid(), _SIGINT)
    _status = 130  # SIGINT blocked: the interpreter's exit_sigint exits 128 + 2
_flush_c_stdio()
_exit(_status & 0xff)
