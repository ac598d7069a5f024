#!/usr/bin/env python3
"""How fast each CPU of this machine is now: a bare interpreter start pinned
to each CPU in turn, its CPU time by wait4.

  python3 bench/measure/cpu_speed.py [ROUNDS [COMMAND...]]

Default: 20 rounds of `node -e 'console.log(1)'`. Prints each CPU's times
and median. On these machines (PVM guests) the two CPUs at times differ by
a third in speed, and which is the slower one changes within minutes: a
figure taken on one CPU and compared with one taken on the other measures
the machine, which is why brig's measures take turns (`brig bench --rounds`)
and compare ratios within one invocation. No privileges needed.
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from huge_copy import start  # noqa: E402


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    argv = sys.argv[2:] or ['/usr/bin/node', '-e', 'console.log(1)']
    cpus = sorted(os.sched_getaffinity(0))
    times = {c: [] for c in cpus}
    for _ in range(rounds):
        for c in cpus:
            times[c].append(start(argv, c)[0])
    for c in cpus:
        print('CPU %d: median %.1f ms of CPU (%s)' % (c, statistics.median(times[c]), ' '.join('%.0f' % t for t in times[c])))


if __name__ == '__main__':
    main()
