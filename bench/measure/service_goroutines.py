#!/usr/bin/env python3
"""Splits the service process's CPU samples by the goroutine that spent them:
each sample goes to the outermost function of brig's packages on its stack
(the goroutine's entry: the spawner, a pool's filler, an HTTP handler...), or,
with none, to the runtime thread's outermost frame (sysmon, a thread's start)
or the library it is in.

    perf record -g -p SERVICE_PID -o perf.data -- sleep 8   (during brig bench -d)
    perf script -i perf.data -F pid,tid,ip,sym > perf.txt
    python3 bench/measure/service_goroutines.py SERVICE_PID perf.txt

perf follows the service's children too; only the service's own samples
count. The second list gives each sample's innermost brig function instead.
"""
import collections
import re
import sys

OURS = 'github.com/brig-sandbox/brig/'
HEADER = re.compile(r'^ *\d+/\d+')


def samples(path):
    cur = None
    for line in open(path):
        line = line.rstrip('\n')
        if not line.strip():
            if cur:
                yield cur
            cur = None
        elif HEADER.match(line):  # "PID/TID", which perf may pad with spaces
            cur = (line.split('/')[0].strip(), [])
        elif cur is not None:
            parts = line.split(None, 1)
            cur[1].append(parts[1] if len(parts) > 1 else '?')
    if cur:
        yield cur


def other(frames):
    for lib in ('bbolt', 'net/http', 'prometheus', 'encoding/json'):
        if any(lib in f for f in frames):
            return lib
    runtime = [f for f in frames if f.startswith('runtime.')]
    return 'runtime: ' + runtime[-1] if runtime else 'other: ' + (frames[-1] if frames else '?')


def short(f):
    return re.sub(r'\(\*?(\w+)\)\.', r'\1.', f.replace(OURS, ''))


def main():
    pid, path = sys.argv[1], sys.argv[2]
    outer, inner = collections.Counter(), collections.Counter()
    n = 0
    for spid, frames in samples(path):
        if spid != pid:
            continue
        n += 1
        ours = [f for f in frames if OURS in f]
        outer[short(ours[-1]) if ours else other(frames)] += 1
        inner[short(ours[0]) if ours else other(frames)] += 1
    if n == 0:
        sys.exit(f'no samples of pid {pid} in {path}')
    print(f'{n} samples of the service (pid {pid}), by goroutine entry:')
    for k, v in outer.most_common(20):
        print(f'  {100 * v / n:5.1f} %  {k}')
    print('by innermost brig function:')
    for k, v in inner.most_common(25):
        print(f'  {100 * v / n:5.1f} %  {k}')


if __name__ == '__main__':
    main()
