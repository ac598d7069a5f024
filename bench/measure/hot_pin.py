#!/usr/bin/env python3
"""Pinning only the pages a forked child writes, against pinning nothing: what
a zygote could gain from pins that copy at the fork just the pages its
children would copy one fault at a time (jail/zygote.py's _pin pins every
present page of its private writable mappings, or, where its trial finds that
dearer, none).

    python3 bench/measure/hot_pin.py        (root, or RLIMIT_MEMLOCK above 2 MiB)

A parent with the zygote's preloads (jail/zygote.go's zygotePreload), frozen
out of the collector as the zygote's, forks a probe child that runs a small
program (compile, json, a print to /dev/null) and reports the pages of the
parent's private writable memory it then maps exclusively (/proc/self/pagemap
bit 56: copied on write). The parent registers those pages, and only those, as
io_uring fixed buffers (what _pin does with all of them), so that a fork copies
them at once. Then, in 4 rounds, 150 children each way in turn, pinned and not:
the parent's CPU for each fork, and each child's whole CPU (the program and
its exit) with its page faults, means. Nothing outside this process and its
children is touched.
"""
import ctypes
import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cow_cost  # noqa: E402  (the preload list, read from jail/zygote.go)

_SYS_io_uring_setup, _SYS_io_uring_register = 425, 427
_REGISTER_BUFFERS, _UNREGISTER_BUFFERS = 0, 1
ROUNDS, CHILDREN = 4, 150
PROGRAM = "import json\nd = {str(i): [i, i / 2] for i in range(64)}\nprint(json.loads(json.dumps(d))['7'], file=out)\n"


def writable_present():
    """The page numbers present in this process's private writable mappings."""
    pages = []
    pagemap = os.open('/proc/self/pagemap', os.O_RDONLY)
    try:
        with open('/proc/self/maps') as maps:
            for line in maps:
                f = line.split()
                if f[1][1] != 'w' or f[1][3] != 'p':
                    continue
                lo, hi = (int(x, 16) >> 12 for x in f[0].split('-'))
                entries = os.pread(pagemap, (hi - lo) * 8, lo * 8)
                pages += [lo + i for i, e in enumerate(memoryview(entries).cast('Q')) if e >> 63]
    finally:
        os.close(pagemap)
    return pages


def main():
    cow_cost.import_preloads()
    gc.collect()
    gc.freeze()
    code = compile(PROGRAM, 'main.py', 'exec')
    out = open(os.devnull, 'w')

    def child():
        exec(code, {'__name__': '__main__', 'out': out})

    shared = writable_present()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        child()
        pagemap = os.open('/proc/self/pagemap', os.O_RDONLY)
        written = [p for p in shared if (lambda e: e >> 63 and e >> 56 & 1)(
            int.from_bytes(os.pread(pagemap, 8, p * 8), 'little'))]
        os.write(w, b' '.join(b'%d' % p for p in written))
        os._exit(0)
    os.close(w)
    with os.fdopen(r, 'rb') as f:
        hot = [int(p) for p in f.read().split()]
    os.waitpid(pid, 0)
    ranges = []
    for p in hot:
        if ranges and ranges[-1][1] == p:
            ranges[-1][1] = p + 1
        else:
            ranges.append([p, p + 1])
    print('the parent: %d present writable pages; the probe child wrote %d of them, in %d ranges'
          % (len(shared), len(hot), len(ranges)))

    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    syscall.argtypes = (ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_long)
    params = (ctypes.c_uint32 * 30)()  # struct io_uring_params
    ring = syscall(_SYS_io_uring_setup, 1, ctypes.addressof(params), None, 0)
    if ring < 0:
        sys.exit('io_uring_setup: %s' % os.strerror(ctypes.get_errno()))
    iov = (ctypes.c_uint64 * (2 * len(ranges)))()
    for i, (lo, hi) in enumerate(ranges):
        iov[2 * i], iov[2 * i + 1] = lo << 12, (hi - lo) << 12

    def pin(on):
        if on:
            ok = syscall(_SYS_io_uring_register, ring, _REGISTER_BUFFERS, ctypes.addressof(iov), len(ranges))
        else:
            ok = syscall(_SYS_io_uring_register, ring, _UNREGISTER_BUFFERS, None, 0)
        if ok < 0:
            sys.exit('io_uring_register: %s' % os.strerror(ctypes.get_errno()))

    def forks():
        fork = whole = faults = 0
        for _ in range(CHILDREN):
            t = time.thread_time()
            pid = os.fork()
            if pid == 0:
                try:
                    child()
                finally:
                    os._exit(0)
            fork += time.thread_time() - t
            _, _, ru = os.wait4(pid, 0)
            whole += ru.ru_utime + ru.ru_stime
            faults += ru.ru_minflt
        return fork / CHILDREN * 1e3, whole / CHILDREN * 1e3, faults / CHILDREN

    for _ in range(ROUNDS):
        shared_fig = forks()
        pin(True)
        pinned_fig = forks()
        pin(False)
        print('nothing pinned: fork %.2f + child %.2f = %.2f ms (%d faults);  written pages pinned: fork %.2f + child %.2f = %.2f ms (%d faults)'
              % (shared_fig[0], shared_fig[1], shared_fig[0] + shared_fig[1], shared_fig[2],
                 pinned_fig[0], pinned_fig[1], pinned_fig[0] + pinned_fig[1], pinned_fig[2]))


if __name__ == '__main__':
    main()
