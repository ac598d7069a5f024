#!/usr/bin/env python3
"""CPU a Python zygote's start costs beyond a bare interpreter's: python3
importing the zygote's preloads (zygotePreload, read from jail/zygote.go) and
freezing them out of the collector, against `python3 -c pass`, both with an
empty environment; medians of 21 runs each, alternated.

    python3 bench/measure/zygote_start.py

A zygote is replaced after Config.ZygoteRuns forks, so its start is paid
once per that many warm runs (the zygote's own init and root come on top).
"""
import os
import re
import resource
import statistics
import subprocess

src = open(os.path.join(os.path.dirname(__file__), '..', '..', 'jail', 'zygote.go')).read()
block = re.search(r'var zygotePreload = \[\]string\{(.*?)\n\}', src, re.S).group(1)
mods = re.findall(r'"([^"]+)"', block)
preload = 'import gc\nfor m in %r:\n    __import__(m)\ngc.collect()\ngc.freeze()\n' % mods


def cpu_ms(code):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(['python3', '-c', code], env={}, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000


bare, zygote = [], []
for _ in range(21):
    bare.append(cpu_ms('pass'))
    zygote.append(cpu_ms(preload))
print('python3 -c pass: %.1f ms of CPU (median of 21)' % statistics.median(bare))
print('with the %d preloads and gc.freeze: %.1f ms of CPU (median of 21)' % (len(mods), statistics.median(zygote)))
