#!/usr/bin/env python3
"""Splits one process name's CPU samples by what they were doing: each sample's
call stack is put in the first category of CATEGORIES it passes through.

    perf record -a -g -e cpu-clock -F 2000 -o perf.data -- sleep 3   (during brig bench)
    perf script -i perf.data -F comm,ip,sym > perf.txt
    python3 bench/measure/perf_breakdown.py brig-init perf.txt

The README's split of the init's CPU comes from this (brig-init; python3 for
the zygote and its children; brig for the service, split by what its
goroutines do, and the bench's own client).
"""
import collections
import sys

# (category, function names that mark it), first match first: a mount's page
# fault counts as a mount.
CATEGORIES = [
    ("seccomp filter load", ["do_seccomp"]),
    ("mount, pivot_root", ["__x64_sys_mount", "__x64_sys_umount", "__x64_sys_pivot_root", "__x64_sys_move_mount",
                           "__x64_sys_open_tree", "__x64_sys_fsmount", "__x64_sys_mount_setattr"]),
    ("exit", ["do_exit", "do_group_exit"]),
    ("clone", ["kernel_clone", "__do_sys_clone3", "__do_sys_clone"]),
    ("exec", ["bprm_execve", "do_execveat_common.isra.0"]),
    ("setns, unshare", ["__x64_sys_setns", "__x64_sys_unshare", "ksys_unshare"]),
    ("open", ["do_sys_openat2"]),
    ("read, write", ["ksys_read", "ksys_write", "vfs_read", "vfs_write"]),
    ("Go runtime start", ["runtime.rt0_go", "runtime.schedinit", "runtime.doInit1", "runtime.mstart1", "runtime.sysmon"]),
    ("JSON", ["encoding/json"]),
    # A copy-on-write fault replaces a present entry, which must leave the TLB:
    # on these machines' hypervisor that flush is a large share of a fault.
    ("page fault's TLB flush (copy-on-write)", ["ptep_clear_flush"]),
    ("page fault", ["asm_exc_page_fault"]),
    ("mmap", ["do_mmap", "__vm_munmap", "__x64_sys_munmap"]),
    ("scheduling", ["schedule", "__schedule"]),
    ("Go allocation, GC", ["runtime.mallocgc", "runtime.gcBgMarkWorker"]),
]


# The service's categories: the goroutine a sample's stack starts from.
SERVICE_CATEGORIES = [
    ("the bench's client", ["github.com/brig-sandbox/brig/bench.", "github.com/brig-sandbox/brig/client."]),
    ("cloning inits", ["github.com/brig-sandbox/brig/jail.(*Launcher).spawner"]),
    # The root's mounts are made by a goroutine of buildRoot's own, on a
    # thread that joins the sandbox's mount namespace.
    ("preparing the pool", ["github.com/brig-sandbox/brig/jail.(*Launcher).fill",
                            "github.com/brig-sandbox/brig/jail.buildRoot"]),
    ("the journal", ["go.etcd.io/bbolt."]),
    ("removing sandboxes", ["github.com/brig-sandbox/brig/jail.(*Launcher).release"]),
    ("the run", ["github.com/brig-sandbox/brig/supervisor.(*Service).execute"]),
    ("HTTP", ["net/http."]),
    ("Go scheduler, GC", ["runtime.mcall", "runtime.sysmon", "runtime.gcBgMarkWorker", "runtime.bgsweep",
                          "runtime.morestack", "runtime.mstart"]),
]


def samples(path):
    """Yields (comm, [function, ...] leaf first) for each sample of perf script's output."""
    comm, stack = None, []
    for line in open(path, errors='replace'):
        if not line.strip():
            if comm is not None:
                yield comm, stack
            comm, stack = None, []
        elif not line[0].isspace():
            comm = line.split()[0]
        else:
            parts = line.split(None, 1)
            stack.append(parts[1].strip() if len(parts) > 1 else '')
    if comm is not None:
        yield comm, stack


def main(comm, path):
    categories = SERVICE_CATEGORIES if comm == 'brig' else CATEGORIES
    counts, n = collections.Counter(), 0
    for c, stack in samples(path):
        if c != comm:
            continue
        n += 1
        for name, marks in categories:
            if any(f.startswith(m) for f in stack for m in marks):
                counts[name] += 1
                break
        else:
            counts['other'] += 1
    print('%d samples of %s' % (n, comm))
    for name, k in counts.most_common():
        print('%6.1f %%  %s' % (100 * k / n, name))


if __name__ == '__main__':
    if len(sys.argv) != 3:
        sys.exit('usage: perf_breakdown.py COMM PERF_SCRIPT_OUTPUT')
    main(sys.argv[1], sys.argv[2])
