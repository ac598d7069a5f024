#!/usr/bin/env python3
"""Where a zygote child's CPU goes before its program, with the parent's
memory pinned as the zygote pins it.

  python3 bench/measure/after_fork.py [ROUNDS]

A parent made as a zygote is (jail/zygote.go's zygotePreload imported, its
objects frozen out of the collector, every present page of its private
writable mappings pinned by jail/zygote.py's _pin, run from that file; its
code not on huge pages) forks children, 31 a figure, and takes their
medians:

1. The interpreter's own after-fork work: a child made by os.fork stamps its
   thread's CPU and page faults from an at-fork hook registered before any
   preload (which the interpreter runs first, after its C-level reset), from
   one registered after them (after the preloads' hooks: threading's,
   logging's, random's reseed), and at its first line; a child made by the C
   library's fork called with the interpreter's lock held (ctypes.PyDLL),
   which runs neither, stamps its first line. Both then exit (os._exit): the
   whole child's CPU from wait4.
2. What the sandbox entry's calls cost in Python (jail/zygote.py's _sandbox:
   some sixty calls through ctypes and the os and resource modules),
   against a child that does nothing: each call replaced by one of the same
   shape that changes nothing (unshare(0) for setns and unshare,
   PR_CAPBSET_READ for PR_CAPBSET_DROP, getpid for capset, the current
   rlimits set again, /tmp for /sandbox, descriptors 200 up for 0 to 3; no
   filter loaded). The difference is the most a sandbox entry written in C
   would save a warm run, less its system calls.

Needs root (the pins take io_uring's fixed buffers; setgroups). Nothing
outside this process and its children, which only change themselves.
"""
import os
import resource
import time

_stamps = []


def _stamp():
    _stamps.append((time.thread_time_ns(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt))


os.register_at_fork(after_in_child=_stamp)  # runs first in a child: before every preload's

import ctypes  # noqa: E402
import gc  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cow_cost  # noqa: E402

N = 31


def median(children):
    """The child with the median whole CPU of N made by children()."""
    return sorted((children() for _ in range(N)), key=lambda x: x[-1])[N // 2]


def reap(pid):
    _, _, ru = os.wait4(pid, 0)
    return (ru.ru_utime + ru.ru_stime) * 1e3


def os_fork_child():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        _stamp()
        os.write(w, b' '.join(b'%d %d' % s for s in _stamps))
        os._exit(0)
    os.close(w)
    v = [int(x) for x in cow_cost.read_all(r).split()]
    return v, reap(pid)


def libc_fork_child(fork):
    r, w = os.pipe()
    pid = fork()
    if pid == 0:
        _stamp()
        os.write(w, b'%d %d' % _stamps[-1])
        os._exit(0)
    os.close(w)
    v = [int(x) for x in cow_cost.read_all(r).split()]
    return v, reap(pid)


def entry_child(z, rlimits, entry):
    """A child that runs entry (or nothing) and exits: its whole CPU and faults."""
    pid = os.fork()
    if pid == 0:
        if entry:
            entry(z, rlimits)
        os._exit(0)
    _, _, ru = os.wait4(pid, 0)
    return ru.ru_minflt, (ru.ru_utime + ru.ru_stime) * 1e3


def entry(z, rlimits):
    """_sandbox's calls, each replaced by one that changes nothing."""
    check, prctl, syscall, unshare = z['_check'], z['_prctl'], z['_syscall'], z['_unshare']
    r, w = os.pipe()
    os.write(w, b'gg')

    def sync(expect):
        if os.read(r, 1) != expect:
            raise OSError(0, 'the pipe said otherwise')

    step = 'cgroup'
    try:
        sync(b'g')
        step = 'namespaces'
        check(unshare(0), 'setns')
        step = 'rlimits'
        for res, cur, mx in rlimits:
            resource.setrlimit(res, (cur, mx))
        step = 'user namespace'
        os.setgroups([])
        os.setresuid(-1, 0, -1)
        check(unshare(0), 'unshare')
        os.write(w, b'm')
        sync(b'g')
        step = 'setsid'
        os.setsid()
        step = 'bounding set'
        for cap in range(41):
            check(prctl(23, cap, 0, 0, 0), 'PR_CAPBSET_READ')
        step = 'identity'
        os.setgroups([])
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)
        check(prctl(4, 1, 0, 0, 0), 'PR_SET_DUMPABLE')
        step = 'capabilities'
        check(syscall(39, None, None, None), 'getpid')
        step = 'descriptors'
        null = os.open('/dev/null', os.O_RDONLY)
        for fd, to in ((null, 200), (null, 201), (null, 202), (null, 203)):
            os.dup2(fd, to)
        os.closerange(204, 1024)
        os.chdir('/tmp')
        step = 'seccomp'
        check(prctl(38, 1, 0, 0, 0), 'PR_SET_NO_NEW_PRIVS')
        if prctl(21, 0, 0, 0, 0) < 0:
            raise OSError(0, 'PR_GET_SECCOMP')
    except BaseException as e:
        os.write(2, ('%s: %s\n' % (step, e)).encode())
        os._exit(127)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    cow_cost.import_preloads()
    os.register_at_fork(after_in_child=_stamp)  # runs after the preloads' hooks
    z = cow_cost.zygote_functions('_pin', '_ranges')
    gc.collect()
    gc.freeze()
    ring, pages, why, _ = z['_pin'](1 << 20, 'on', None)
    if ring < 0:
        sys.exit('pinning failed: %s' % why)
    print('the parent: %d pages pinned' % pages)
    libc_fork = ctypes.PyDLL(None).fork
    libc_fork.restype = ctypes.c_int
    rlimits = [(r, *resource.getrlimit(r)) for r in (resource.RLIMIT_NOFILE, resource.RLIMIT_NPROC,
                                                     resource.RLIMIT_CORE, resource.RLIMIT_FSIZE)]
    print('1. to the first line, ms of CPU (page faults); whole child to its exit')
    for rnd in range(rounds):
        (c, cf, h, hf, t, tf), whole = median(os_fork_child)
        (lt, ltf), lwhole = median(lambda: libc_fork_child(libc_fork))
        print('  round %d: os.fork: interpreter %.2f (%d), hooks %.2f (%d), first line %.2f (%d), whole %.2f;'
              ' libc fork: first line %.2f (%d), whole %.2f'
              % (rnd + 1, c / 1e6, cf, (h - c) / 1e6, hf - cf, t / 1e6, tf, whole, lt / 1e6, ltf, lwhole))
    print("2. a child's whole CPU, ms (page faults): the sandbox entry's calls against nothing")
    for rnd in range(rounds):
        ef, e = median(lambda: entry_child(z, rlimits, entry))
        nf, n = median(lambda: entry_child(z, rlimits, None))
        print('  round %d: entry %.2f (%d), nothing %.2f (%d), difference %.2f'
              % (rnd + 1, e, ef, n, nf, e - n))


if __name__ == '__main__':
    main()
