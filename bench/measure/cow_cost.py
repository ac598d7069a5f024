#!/usr/bin/env python3
"""What copy-on-write costs a forked Python child on this machine.

  python3 bench/measure/cow_cost.py

1. A parent maps 400 pages and writes each; a forked child then copies them,
   either by writing one byte per page (a page fault each) or with one
   madvise(MADV_POPULATE_WRITE) over the range (the same copies, no faults).
   Median CPU per page over 10 children each, both twice.
2. The page faults and CPU a forked child has taken before its first line of
   Python, for a parent that imported nothing more than this script needs,
   one that imported only threading (whose after-fork hook runs in every
   child), and one that imported the zygote's preloads (read from
   jail/zygote.go's zygotePreload). Medians of 15 children each.
3. Two ways around a child's faults, each in children of a parent with the
   preloads (medians of 15): copying ahead, from an after-fork hook, with
   madvise(MADV_POPULATE_WRITE), the pages a probe child had written (those
   its /proc/self/pagemap shows exclusive: 'print(1)' with stdout on
   /dev/null), against the same child without; and deleting the preloads
   from sys.modules (what a child would do to import a module the program
   wrote under a preload's name, as a cold run does).
4. A copy-on-write fault with every other CPU idle and with each busy (a
   spinning process pinned to it), and what pinning a parent's memory as the
   zygote does (jail/zygote.py's _pin, run from that file) changes: a child
   of a parent with the preloads runs print(1) (stdout on /dev/null) and
   exits; the parent's fork and the child's whole CPU, medians of 15, with
   and without the pins, the other CPUs idle and busy.

Sections 1 to 3 need no privileges; section 4's pins need io_uring (root, or
RLIMIT_MEMLOCK above the parent's memory). Nothing outside this process and
its children.
"""
import contextlib
import gc
import os
import resource
import sys
import time

PAGES = 400
MADV_POPULATE_WRITE = 23  # Linux 5.14


def preload():
    """jail/zygote.go's zygotePreload, read from the source beside this script."""
    import re
    src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'jail', 'zygote.go')).read()
    body = re.search(r'var zygotePreload = \[\]string\{(.*?)\}', src, re.S).group(1)
    return re.findall(r'"([^"]+)"', body)


def import_preloads():
    """Imports the zygote's preloads; one this Python lacks is skipped."""
    for name in preload():
        try:
            __import__(name)
        except ImportError:
            pass


def read_all(fd):
    """Everything fd gives up to EOF; it closes fd."""
    chunks = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        chunks.append(b)
    os.close(fd)
    return b''.join(chunks)


def in_child(fn, n):
    """fn's (faults, ns) as measured in n forked children, sorted."""
    out = []
    for _ in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, b'%d %d' % fn())
            os._exit(0)
        os.close(w)
        got = os.read(r, 64)
        os.close(r)
        os.waitpid(pid, 0)
        out.append(tuple(map(int, got.split())))
        time.sleep(0.005)
    return sorted(out, key=lambda x: x[1])


def copies():
    import ctypes
    import mmap
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    m = mmap.mmap(-1, PAGES * 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for i in range(PAGES):
        m[i * 4096] = 1  # present in the parent, so the child shares it
    addr = ctypes.addressof((ctypes.c_char * (PAGES * 4096)).from_buffer(m))

    def touch():
        f, t = resource.getrusage(0).ru_minflt, time.thread_time_ns()
        for i in range(PAGES):
            m[i * 4096] = 2
        return resource.getrusage(0).ru_minflt - f, time.thread_time_ns() - t

    def populate():
        f, t = resource.getrusage(0).ru_minflt, time.thread_time_ns()
        if libc.madvise(addr, PAGES * 4096, MADV_POPULATE_WRITE) != 0:
            os._exit(2)
        return resource.getrusage(0).ru_minflt - f, time.thread_time_ns() - t

    for _ in range(2):
        for name, fn in (('one fault per page', touch), ('MADV_POPULATE_WRITE', populate)):
            res = in_child(fn, 10)
            print('copy-on-write, %-20s %5.1f us per page' % (name, res[5][1] / 1000 / PAGES))


def first_line(modules):
    for name in modules:
        __import__(name)
    gc.collect()
    gc.freeze()
    res = in_child(lambda: (resource.getrusage(0).ru_minflt, time.thread_time_ns()), 15)
    return res[7]


def exclusive_ranges():
    """This process's written private pages (pagemap: present, exclusive, anonymous)."""
    pm = os.open('/proc/self/pagemap', os.O_RDONLY)
    out = []
    for line in open('/proc/self/maps'):
        f = line.split()
        if f[1][1] != 'w' or f[1][3] != 'p' or (len(f) > 5 and f[5] in ('[vvar]', '[vdso]')):
            continue
        lo, hi = (int(x, 16) for x in f[0].split('-'))
        data = os.pread(pm, (hi - lo) // 4096 * 8, lo // 4096 * 8)
        start = None
        for i in range((hi - lo) // 4096 + 1):
            e = int.from_bytes(data[i * 8:i * 8 + 8], 'little') if i < (hi - lo) // 4096 else 0
            written = e >> 63 & 1 and e >> 56 & 1 and not e >> 61 & 1
            if written and start is None:
                start = i
            elif not written and start is not None:
                out.append((lo + start * 4096, (i - start) * 4096))
                start = None
    os.close(pm)
    return out


def ahead_and_evict():
    import ctypes
    libc = ctypes.CDLL(None)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    ranges, hook_ns = [], [0]

    def populate():
        t = time.thread_time_ns()
        for a, n in ranges:
            libc.madvise(a, n, MADV_POPULATE_WRITE)
        hook_ns[0] = time.thread_time_ns() - t
    os.register_at_fork(after_in_child=populate)  # first: before threading's
    startup = frozenset(sys.modules)
    import_preloads()
    gc.collect()
    gc.freeze()
    code = compile('print(1)', 'main.py', 'exec')

    def run_print():
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        f, t = resource.getrusage(0).ru_minflt, time.thread_time_ns()
        exec(code, {'__name__': '__main__'})
        sys.stdout.flush()
        return resource.getrusage(0).ru_minflt - f, time.thread_time_ns() - t

    r, w = os.pipe()
    if os.fork() == 0:  # the probe
        run_print()
        os.write(w, repr(exclusive_ranges()).encode())
        os._exit(0)
    os.close(w)
    data = read_all(r)
    os.wait()
    learned = eval(data)
    print('copying ahead: a probe child wrote %d pages in %d ranges' % (sum(n for _, n in learned) // 4096, len(learned)))
    def hook_and_print():
        f, ns = run_print()
        return f, ns + hook_ns[0]
    for label, rs in (('without', []), ('with', learned)):
        ranges[:] = rs
        f, ns = in_child(hook_and_print, 15)[7]
        print('  %-7s copying ahead: the hook and print(1) %.2f ms, print(1)\'s faults %d' % (label, ns / 1e6, f))
    ranges[:] = []

    def evict():
        f, t = resource.getrusage(0).ru_minflt, time.thread_time_ns()
        cache = {n: sys.modules[n] for n in list(sys.modules) if n not in startup}
        for n in cache:
            del sys.modules[n]
        return resource.getrusage(0).ru_minflt - f, time.thread_time_ns() - t
    f, ns = in_child(evict, 15)[7]
    print('deleting the %d preloaded modules from a child\'s sys.modules: %d faults, %.2f ms'
          % (len(sys.modules) - len(startup), f, ns / 1e6))


class Busy:
    """A spinning process on each CPU but the first, and this process
    and its children on the first, while in use."""

    def __enter__(self):
        self.pids, self.was = [], os.sched_getaffinity(0)
        cpus = sorted(self.was)
        for cpu in cpus[1:]:
            pid = os.fork()
            if pid == 0:
                os.sched_setaffinity(0, {cpu})
                while True:  # system calls, as a busy host makes
                    os.getppid()
            self.pids.append(pid)
        os.sched_setaffinity(0, {cpus[0]})
        time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        for pid in self.pids:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        os.sched_setaffinity(0, self.was)


def zygote_functions(*names):
    """jail/zygote.py's functions of these names, with what they use
    (everything before _serve), run from that file, with the host's /proc as
    their PROC: a dict of the namespace they run in."""
    import ast
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'jail', 'zygote.py')
    tree = ast.parse(open(path).read())
    keep = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == '_serve':
            break  # everything before it is imports, constants and helpers
        keep.append(node)
    keep += [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    ns = {'__name__': 'zygote', 'PROC': os.open('/proc', os.O_RDONLY | os.O_DIRECTORY)}
    exec(compile(ast.Module(keep, []), path, 'exec'), ns)
    return ns


def zygote_pin():
    """jail/zygote.py's _pin, with what it uses, from that file."""
    return zygote_functions('_pin', '_ranges')['_pin']


def pinned_fork():
    """Section 4."""
    def touch(by_parent):
        # One fault per page of PAGES the parent wrote before a fork: in the
        # child, or in the parent while its child waits (medians of 10).
        import mmap
        out = []
        for _ in range(10):
            m = mmap.mmap(-1, PAGES * 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            for i in range(PAGES):
                m[i * 4096] = 1
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                if by_parent:
                    os.read(r, 1)  # waits, sharing the pages, until the parent has written
                else:
                    t = time.thread_time_ns()
                    for i in range(PAGES):
                        m[i * 4096] = 2
                    os.write(w, b'%d' % (time.thread_time_ns() - t))
                os._exit(0)
            if by_parent:
                t = time.thread_time_ns()
                for i in range(PAGES):
                    m[i * 4096] = 2
                out.append(time.thread_time_ns() - t)
                os.write(w, b'x')
            else:
                out.append(int(os.read(r, 64)))
            os.waitpid(pid, 0)
            os.close(r)
            os.close(w)
            m.close()
        return sorted(out)[5] / 1000 / PAGES
    for label, busy in (('idle', False), ('busy', True)):
        with Busy() if busy else contextlib.nullcontext():
            child, parent = touch(False), touch(True)
        print('copy-on-write, one fault per page, the other CPUs %s: %.1f us in a child, %.1f us in its parent'
              % (label, child, parent))
    import_preloads()
    gc.collect()
    gc.freeze()
    code = compile('print(1)', 'main.py', 'exec')
    null = os.open(os.devnull, os.O_WRONLY)

    def child_and_fork():
        out = []
        for _ in range(15):
            t = time.thread_time_ns()
            pid = os.fork()
            if pid == 0:
                os.dup2(null, 1)
                exec(code, {'__name__': '__main__'})
                sys.stdout.flush()
                os._exit(0)
            fork = time.thread_time_ns() - t
            _, _, ru = os.wait4(pid, 0)
            out.append((fork, (ru.ru_utime + ru.ru_stime) * 1e9, ru.ru_minflt))
            time.sleep(0.005)
        return sorted(out, key=lambda x: x[0] + x[1])[7]

    for label, busy in (('idle', False), ('busy', True)):
        with Busy() if busy else contextlib.nullcontext():
            fork, child, faults = child_and_fork()
        print('other CPUs %s, parent not pinned: fork %.2f ms, child %.2f ms (%d faults)'
              % (label, fork / 1e6, child / 1e6, faults))
    ring, pages, why, _ = zygote_pin()(1 << 20, 'on', None)  # pinned without the trial (the margin is the trial's)
    if ring < 0:
        print('pinning failed: %s' % why)
        return
    for label, busy in (('idle', False), ('busy', True)):
        with Busy() if busy else contextlib.nullcontext():
            fork, child, faults = child_and_fork()
        print('other CPUs %s, parent pinned (%d pages): fork %.2f ms, child %.2f ms (%d faults)'
              % (label, pages, fork / 1e6, child / 1e6, faults))


if __name__ == '__main__':
    if len(sys.argv) > 1 and sys.argv[1] == 'ahead':  # section 3, in a fresh interpreter
        ahead_and_evict()
        sys.exit(0)
    if len(sys.argv) > 1 and sys.argv[1] == 'pinned':  # section 4, in a fresh interpreter
        pinned_fork()
        sys.exit(0)
    if len(sys.argv) > 1:  # a parent with these modules: one line of figures
        f, ns = first_line(sys.argv[1].split(',') if sys.argv[1] != '-' else [])
        print(f, ns)
        sys.exit(0)
    import subprocess
    copies()
    for label, mods in (('nothing more', '-'), ('threading', 'threading'),
                        ("the zygote's preloads", ','.join(preload()))):
        f, ns = subprocess.run([sys.executable, __file__, mods], capture_output=True,
                               text=True, check=True).stdout.split()
        print('a forked child before its first line, parent importing %-22s %4s faults %6.2f ms'
              % (label + ':', f, int(ns) / 1e6))
    for section in ('ahead', 'pinned'):
        print(subprocess.run([sys.executable, __file__, section], capture_output=True,
                             text=True, check=True).stdout, end='')
