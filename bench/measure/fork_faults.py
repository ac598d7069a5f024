#!/usr/bin/env python3
"""Page faults a forked CPython child takes before it runs a line of its own,
with nothing imported and with the zygote's preloaded modules imported (and
frozen out of the collector, as the zygote does).

    python3 bench/measure/fork_faults.py
"""
import gc
import os
import resource
import subprocess
import sys

PRELOAD = ("abc argparse base64 bisect collections contextlib copy csv dataclasses datetime "
           "decimal enum fractions functools glob hashlib heapq io itertools json logging math "
           "operator pathlib pprint random re shutil signal statistics string struct subprocess "
           "tempfile textwrap threading time traceback types typing uuid warnings weakref").split()


def child_faults(preload):
    for name in preload:
        __import__(name)
    gc.collect()
    gc.freeze()
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


if __name__ == '__main__':
    if len(sys.argv) > 1:
        print(child_faults(PRELOAD if sys.argv[1] == 'preload' else []))
    else:
        for kind in ('bare', 'preload'):
            out = subprocess.run([sys.executable, __file__, kind], capture_output=True, text=True, check=True)
            print('%-8s a forked child: %s page faults before its first line (median of 20)' % (kind, out.stdout.strip()))
