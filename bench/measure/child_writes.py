#!/usr/bin/env python3
"""Which of a zygote's pages its forked child writes, mapping by mapping.

  python3 bench/measure/child_writes.py [print|program|corpus [DIR]]

A parent made as a zygote is (jail/zygote.go's zygotePreload imported, its code
on huge pages by jail/zygote.py's _huge_code, its objects frozen out of the
collector; not pinned, so that the fork shares every page) forks a child that
runs print(1), or with 'program' a ten-line program using json, re,
dataclasses and statistics (corpus/c01.py beside this script; stdout and
stderr on /dev/null), joins threads, collects, and then reads its own
/proc/self/pagemap: a page it maps exclusively (bit 56) that the fork had
shared is one it wrote (copy-on-write). For each of the parent's private
writable mappings: the pages written, the pages present, and the MiB of it
that lie in whole 2 MiB-aligned huge-page frames (all that
madvise(MADV_COLLAPSE) can turn into huge pages).

With 'corpus', print(1) and each *.py of DIR (default: corpus/ beside this
script, a dozen short programs of the kind harnesses send, over the
preloaded modules) run in a child of their own: the pages each writes, the
union of all, and for each program the pages it writes that no other
program of the corpus does: what pins learned from such a corpus would miss
for a program outside it (jail/zygote.py's _pin pins every page instead).
No privileges; nothing outside this process and its children.
"""
import collections
import gc
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cow_cost  # noqa: E402

HUGE = 2 << 20
CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'corpus')


def writable_mappings():
    out = []
    with open('/proc/self/maps') as f:
        for line in f:
            fields = line.split(None, 5)
            if fields[1][1] == 'w' and fields[1][3] == 'p':
                lo, hi = (int(x, 16) for x in fields[0].split('-'))
                out.append((lo, hi, fields[5].strip() if len(fields) > 5 else '[anon]'))
    return out


def in_child(src, maps, null):
    """Runs src in a forked child (stdout and stderr on /dev/null, an
    exception ignored), joins its threads and collects; returns, for each of
    maps, (written, present, frames, size, name), and the numbers of the
    pages it wrote."""
    code = compile(src, '/sandbox/main.py', 'exec')
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(null, 1)
        os.dup2(null, 2)
        try:
            exec(code, {'__name__': '__main__'})
        except BaseException:
            pass
        sys.stdout.flush()
        import threading
        threading._shutdown()
        gc.collect()
        pagemap = os.open('/proc/self/pagemap', os.O_RDONLY)
        rows, pages = [], []
        for lo, hi, name in maps:
            n = (hi - lo) // 4096
            entries = struct.unpack('%dQ' % n, os.pread(pagemap, n * 8, lo // 4096 * 8))
            mine = [lo // 4096 + i for i, e in enumerate(entries) if e >> 63 and (e >> 56) & 1]
            present = sum(1 for e in entries if e >> 63)
            frames = max(0, (hi & ~(HUGE - 1)) - ((lo + HUGE - 1) & ~(HUGE - 1))) >> 20
            rows.append((len(mine), present, frames, hi - lo, name))
            pages += mine
        os.write(w, repr((rows, pages)).encode())
        os._exit(0)
    os.close(w)
    rows, pages = eval(cow_cost.read_all(r))
    os.waitpid(pid, 0)
    return rows, set(pages)


def by_mapping(which, rows):
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


def corpus(directory, maps, null):
    programs = [('print(1)', 'print(1)')] + [
        (name, open(os.path.join(directory, name)).read())
        for name in sorted(os.listdir(directory)) if name.endswith('.py')]
    written = {}
    for name, src in programs:
        rows, written[name] = in_child(src, maps, null)
        print('%-10s writes %4d of the %d present pages' % (name, len(written[name]), sum(r[1] for r in rows)))
    print('all %d together: %d pages' % (len(programs), len(set().union(*written.values()))))
    for name, pages in written.items():
        others = set().union(*(p for n, p in written.items() if n != name))
        print('  %-10s writes %4d that none of the other %d does' % (name, len(pages - others), len(programs) - 1))


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else 'print'
    cow_cost.import_preloads()
    z = cow_cost.zygote_functions('_huge_code', '_huge_kib')
    z['_huge_code']()
    gc.collect()
    gc.freeze()
    maps = writable_mappings()
    null = os.open(os.devnull, os.O_WRONLY)
    if which == 'corpus':
        corpus(sys.argv[2] if len(sys.argv) > 2 else CORPUS, maps, null)
        return
    src = 'print(1)' if which == 'print' else open(os.path.join(CORPUS, 'c01.py')).read()
    by_mapping(which, in_child(src, maps, null)[0])


if __name__ == '__main__':
    main()
