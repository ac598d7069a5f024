#!/usr/bin/env python3
"""What loading a seccomp filter costs a forked Python process: the CPU of a
child that sets no_new_privs, loads one of brig's compiled filters and exits,
against one that loads none (the kernel converts, JITs and analyses each
filter as it is loaded; a fork shares its parent's filters as they are).

    python3 bench/measure/filter_load.py        (from the repository)

It compiles the filters with bench/measure/filterdump (the Go toolchain and
libseccomp), then, in each of 3 rounds, forks 300 children per filter, one of
each in turn (so that they share the machine's drift), and prints each
filter's mean CPU per child less the unfiltered child's.
Nothing outside this process and its children is touched; root is not needed.
"""
import ctypes
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')
CHILDREN, ROUNDS = 300, 3


class Filter(ctypes.Structure):
    _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_void_p)]


def main():
    dump = subprocess.run(['go', 'run', '-tags', 'urfave_cli_no_docs', './bench/measure/filterdump'],
                          cwd=ROOT, check=True, capture_output=True, text=True).stdout
    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    syscall.restype, syscall.argtypes = ctypes.c_long, (ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_void_p)
    filters = [('none', 0, None)]
    for line in dump.split('\n'):
        if line:
            name, n, code = line.split()
            raw = bytes.fromhex(code)
            buf = ctypes.create_string_buffer(raw, len(raw))
            filters.append((name, int(n), (Filter(len(raw) // 8, ctypes.cast(buf, ctypes.c_void_p)), buf)))

    def child_cpu(*fs):
        pid = os.fork()
        if pid == 0:
            status = 0
            if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
                status = 2
            for f in fs:
                if f is not None and syscall(317, 1, 0, ctypes.addressof(f[0])) != 0:  # seccomp(SET_MODE_FILTER)
                    status = 3
            os._exit(status)
        _, status, ru = os.wait4(pid, 0)
        if status != 0:
            sys.exit('a child could not load its filter (status %#x)' % status)
        return (ru.ru_utime + ru.ru_stime) * 1e3

    print('CPU of a forked child that loads the filter and exits, less one that loads none'
          ' (ms, mean of %d children of each, forked in turn; %d rounds):' % (CHILDREN, ROUNDS))
    rows = {name: [] for name, _, _ in filters[1:]}
    for _ in range(ROUNDS):
        cpu = {name: 0.0 for name, _, _ in filters}
        for _ in range(CHILDREN):
            for name, _, f in filters:
                cpu[name] += child_cpu(f) / CHILDREN
        for name in rows:
            rows[name].append(cpu[name] - cpu['none'])
    for name, n, _ in filters[1:]:
        print('  %-15s %5d instructions  %s' % (name, n, '  '.join('%+.3f' % d for d in rows[name])))

    # A warm Python child's loads, stacked on the Zygote filter it inherits:
    # ZygoteChild, then ZygoteProgram once it has its run; what the second
    # adds. (This process loads Zygote now, and keeps it.)
    f = dict((name, f) for name, _, f in filters)
    if libc.prctl(38, 1, 0, 0, 0) != 0 or syscall(317, 1, 0, ctypes.addressof(f['Zygote'][0])) != 0:
        sys.exit('could not load the Zygote filter')
    print('Under the Zygote filter, a child that loads ZygoteChild and ZygoteProgram, less one that'
          ' loads ZygoteChild alone (ms, %d children of each, in turn; %d rounds):' % (CHILDREN, ROUNDS))
    deltas = []
    for _ in range(ROUNDS):
        one = two = 0.0
        for _ in range(CHILDREN):
            one += child_cpu(f['ZygoteChild']) / CHILDREN
            two += child_cpu(f['ZygoteChild'], f['ZygoteProgram']) / CHILDREN
        deltas.append(two - one)
    print('  ZygoteProgram stacked  %s' % '  '.join('%+.3f' % d for d in deltas))


if __name__ == '__main__':
    main()
