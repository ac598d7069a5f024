#!/usr/bin/env python3
"""What a forked CPython child costs, with nothing imported and with the
zygote's preloaded modules imported (and frozen out of the collector, as the
zygote does): the page faults it takes before it runs a line of its own, and
the CPU of a whole child that prints and exits (os._exit, as a zygote child
does), its parent's fork included.

    python3 bench/measure/fork_faults.py
"""
import gc
import os
import resource
import subprocess
import sys
import time


def child_faults():
    faults = []
    for _ in range(20):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, b'%d' % resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
            os._exit(0)
        os.close(w)
        faults.append(int(os.read(r, 64)))
        os.close(r)
        os.waitpid(pid, 0)
    return sorted(faults)[len(faults) // 2]


def child_cpu(n=300):
    """Milliseconds of CPU per fork of a child that prints and exits: the
    parent's and the child's."""
    t0 = time.process_time()
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            with open(os.devnull, 'w') as f:
                print(1, file=f)
            os._exit(0)
        os.waitpid(pid, 0)
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    children = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
    return (time.process_time() - t0 + children) * 1000 / n


if __name__ == '__main__':
    if len(sys.argv) > 1:
        if sys.argv[1] == 'preload':
            # Imported here: the bare parent imports nothing more than it needs.
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import cow_cost
            cow_cost.import_preloads()
        gc.collect()
        gc.freeze()
        print('%d page faults before its first line (median of 20); %.2f ms of CPU to fork, print and exit (mean of 300)'
              % (child_faults(), child_cpu()))
    else:
        for kind in ('bare', 'preload'):
            out = subprocess.run([sys.executable, __file__, kind], capture_output=True, text=True, check=True)
            print('%-8s a forked child: %s' % (kind, out.stdout.strip()))
