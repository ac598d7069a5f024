#!/usr/bin/env python3
"""Which of a zygote's pages its forked child writes, mapping by mapping.

  python3 bench/measure/child_writes.py [print|program]

A parent made as a zygote is (jail/zygote.go's zygotePreload imported, its code
on huge pages by jail/zygote.py's _huge_code, its objects frozen out of the
collector; not pinned, so that the fork shares every page) forks a child that
runs print(1), or with 'program' a ten-line program using json, re,
dataclasses and statistics (stdout on /dev/null), joins threads, collects, and
then reads its own /proc/self/pagemap: a page it maps exclusively (bit 56)
that the fork had shared is one it wrote (copy-on-write). For each of the
parent's private writable mappings: the pages written, the pages present, and
the MiB of it that lie in whole 2 MiB-aligned huge-page frames (all that
madvise(MADV_COLLAPSE) can turn into huge pages). No privileges; nothing
outside this process and its child.
"""
import collections
import gc
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cow_cost  # noqa: E402

HUGE = 2 << 20
PROGRAM = '''
import json, re, dataclasses, statistics
@dataclasses.dataclass
class P:
    name: str
    score: float
ps = [P("n%d" % i, i * 1.5) for i in range(50)]
s = json.dumps([dataclasses.asdict(p) for p in ps])
m = re.findall(r'"name": "(n\\d+)"', s)
print(len(m), statistics.mean(p.score for p in ps))
'''


def writable_mappings():
    out = []
    with open('/proc/self/maps') as f:
        for line in f:
            fields = line.split(None, 5)
            if fields[1][1] == 'w' and fields[1][3] == 'p':
                lo, hi = (int(x, 16) for x in fields[0].split('-'))
                out.append((lo, hi, fields[5].strip() if len(fields) > 5 else '[anon]'))
    return out


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else 'print'
    for name in cow_cost.preload():
        try:
            __import__(name)
        except ImportError:
            pass
    z = cow_cost.zygote_functions('_huge_code', '_huge_kib')
    z['_huge_code']()
    gc.collect()
    gc.freeze()
    maps = writable_mappings()
    code = compile('print(1)' if which == 'print' else PROGRAM, '/sandbox/main.py', 'exec')
    null = os.open(os.devnull, os.O_WRONLY)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(null, 1)
        exec(code, {'__name__': '__main__'})
        sys.stdout.flush()
        import threading
        threading._shutdown()
        gc.collect()
        pagemap = os.open('/proc/self/pagemap', os.O_RDONLY)
        rows = []
        for lo, hi, name in maps:
            n = (hi - lo) // 4096
            entries = struct.unpack('%dQ' % n, os.pread(pagemap, n * 8, lo // 4096 * 8))
            present = sum(1 for e in entries if e >> 63)
            written = sum(1 for e in entries if e >> 63 and (e >> 56) & 1)
            frames = max(0, (hi & ~(HUGE - 1)) - ((lo + HUGE - 1) & ~(HUGE - 1))) >> 20
            rows.append((written, present, frames, hi - lo, name))
        os.write(w, repr(rows).encode())
        os._exit(0)
    os.close(w)
    rows = eval(cow_cost.read_all(r))
    os.waitpid(pid, 0)
    by_name = collections.defaultdict(lambda: [0, 0, 0, 0])
    for written, present, frames, size, name in rows:
        key = name if not name.startswith('[anon]') else '[anon]'
        for i, v in enumerate((written, present, frames, size)):
            by_name[key][i] += v
    print("a child running %s: the parent's private writable mappings, by name" % which)
    print('  written  present  in 2 MiB frames   size  mapping')
    for key, (written, present, frames, size) in sorted(by_name.items(), key=lambda kv: -kv[1][0]):
        if present:
            print('  %7d  %7d  %11d MiB  %5d KiB  %s' % (written, present, frames, size >> 10, key))
    t = [sum(v[i] for v in by_name.values()) for i in range(4)]
    print('  %7d  %7d  %11d MiB  %5d KiB  (all)' % (t[0], t[1], t[2], t[3] >> 10))


if __name__ == '__main__':
    main()
