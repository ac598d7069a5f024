"""What a zygote's child costs with and without the interpreter's own exit.

Forks 200 children of an interpreter that has imported the zygote's preload
and frozen it out of the collector (as jail/zygote.py does); each prints and
exits, through sys.exit (module teardown) or os._exit. Prints the children's
CPU (user + system, from wait4) p50 and mean.

    python3 bench/measure/zygote_exit.py
"""
import gc
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cow_cost  # noqa: E402

N = 200


def children(exit):
    cpu = []
    for _ in range(N):
        pid = os.fork()
        if pid == 0:
            with open(os.devnull, "w") as f:
                print(1, file=f)
            exit()
        _, _, ru = os.wait4(pid, 0)
        cpu.append(ru.ru_utime + ru.ru_stime)
    cpu.sort()
    return cpu[N // 2] * 1000, sum(cpu) / N * 1000


cow_cost.import_preloads()
gc.collect()
gc.freeze()
for label, exit in (("the interpreter's exit (sys.exit)", lambda: sys.exit(0)), ("os._exit", lambda: os._exit(0))):
    p50, mean = children(exit)
    print(f"{label}: child CPU p50 {p50:.2f} ms, mean {mean:.2f} ms")
