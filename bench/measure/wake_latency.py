#!/usr/bin/env python3
"""How long a process blocked in read(2) on a pipe takes to run again once a
byte is written, with nothing else busy: a parent writes every SLEEP_MS, a
child reads and reports its CLOCK_MONOTONIC, ROUNDS times. The floor against
which a warm child's wake after its hand-over is compared (README: the
refill's 5 ms wait).

    python3 bench/measure/wake_latency.py [ROUNDS [SLEEP_MS]]
"""
import os
import statistics
import sys
import time

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 60
nap = (float(sys.argv[2]) if len(sys.argv) > 2 else 50) / 1000
r, w = os.pipe()
r2, w2 = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(w)
    while os.read(r, 1):
        os.write(w2, repr(time.clock_gettime(time.CLOCK_MONOTONIC)).encode().ljust(32))
    os._exit(0)
lat = []
for _ in range(rounds):
    time.sleep(nap)
    t0 = time.clock_gettime(time.CLOCK_MONOTONIC)
    os.write(w, b'x')
    lat.append((float(os.read(r2, 32)) - t0) * 1e3)
os.close(w)
os.waitpid(pid, 0)
lat.sort()
print('wake after a write: p25 %.3f ms, p50 %.3f ms, p75 %.3f ms (%d rounds, %g ms apart)'
      % (lat[len(lat) // 4], statistics.median(lat), lat[3 * len(lat) // 4], rounds, nap * 1e3))
