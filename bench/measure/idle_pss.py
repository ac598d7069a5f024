#!/usr/bin/env python3
"""The proportional set size of the idle prepared sandboxes of a running service.

    python3 bench/measure/idle_pss.py

Run it against an idle `brig serve` (its pools full, no run in flight). A
sandbox is the processes of one pid 1's namespace (brig-reaper, or brig-init
on a kernel without the reaper): pid 1 alone (cold), pid 1 and a zygote's
child (warm Python), or pid 1 and node (warm JavaScript). A zygote, once per rootfs, is counted apart. PSS divides each
shared page among the processes that map it, so the sum over sandboxes is
what they cost together.
"""
import collections
import os


def pss_kib(pid):
    try:
        with open('/proc/%s/smaps_rollup' % pid) as f:
            for line in f:
                if line.startswith('Pss:'):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def processes():
    procs = {}
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            with open('/proc/%s/comm' % pid) as f:
                comm = f.read().strip()
            with open('/proc/%s/stat' % pid) as f:
                ppid = f.read().rsplit(')', 1)[1].split()[1]
            procs[pid] = (comm, os.readlink('/proc/%s/ns/pid' % pid), ppid)
        except OSError:
            continue  # gone meanwhile
    return procs


def main():
    procs = processes()
    host_ns = os.readlink('/proc/self/ns/pid')
    sandboxes = collections.defaultdict(list)
    for pid, (comm, ns, _) in procs.items():
        if comm not in ('brig-init', 'brig-reaper') or ns == host_ns:
            continue  # not a sandbox's pid 1 (a zygote's init runs in the host's)
        members = [p for p, (_, n, _) in procs.items() if n == ns]
        others = sorted(procs[p][0] for p in members if p != pid)
        kind = 'warm: %s and %s' % (comm, '+'.join(others)) if others else 'cold: %s alone' % comm
        sandboxes[kind].append(sum(pss_kib(p) for p in members))
    if not sandboxes:
        raise SystemExit('no prepared sandbox found: is brig serve running, with brig-init and brig-reaper next to brig?')
    for kind, sizes in sorted(sandboxes.items()):
        print('%-34s %2d sandboxes, PSS %.2f MiB each (%.2f to %.2f)' % (
            kind, len(sizes), sum(sizes) / len(sizes) / 1024, min(sizes) / 1024, max(sizes) / 1024))
    for pid, (comm, _, ppid) in procs.items():
        if comm == 'python3' and procs.get(ppid, ('',))[0] == 'brig':
            print('zygote %-27s PSS %.1f MiB' % (pid, pss_kib(pid) / 1024))


if __name__ == '__main__':
    main()
