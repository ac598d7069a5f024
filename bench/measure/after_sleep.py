#!/usr/bin/env python3
"""How much slower a process runs its first statements after it slept, as a
warm sandbox's program does between its run's arrival and its first line:
json.loads of a small object, and a caught KeyError (the first exception),
timed right after a sleep and once more straight after, medians of ROUNDS.

    python3 bench/measure/after_sleep.py [ROUNDS [SLEEP_MS]]
"""
import json
import statistics
import sys
import time

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
nap = (float(sys.argv[2]) if len(sys.argv) > 2 else 200) / 1000
doc = b'{"code": "print(1)", "env": {"A": "b", "PATH": "/usr/bin"}}'
env = {}


def miss():
    try:
        env['PYTHONPATH']
    except KeyError:
        pass


now = time.perf_counter_ns
for name, step in (('json.loads', lambda: json.loads(doc)), ('a caught KeyError', miss)):
    step()
    slept, warm = [], []
    for _ in range(rounds):
        time.sleep(nap)
        t0 = now()
        step()
        t1 = now()
        step()
        t2 = now()
        slept.append((t1 - t0) / 1000)
        warm.append((t2 - t1) / 1000)
    a, b = statistics.median(slept), statistics.median(warm)
    print('%-18s %7.1f us after %.0f ms asleep, %6.1f us right after: %.1f times' % (name, a, nap * 1000, b, a / b))
