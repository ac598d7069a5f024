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

No privileges needed; nothing outside this process and its children.
"""
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
    m = mmap.mmap(-1, PAGES * 4096)
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


if __name__ == '__main__':
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
