#!/usr/bin/env python3
"""What a page, a system call and a process start cost on this machine, apart
from brig: the prices a warm run pays in its own way.

  python3 bench/measure/page_cost.py

1. A child's first touch of a page its parent had present before the fork
   (medians of 15 children, each touching 2,048 pages once, less the same
   loop over pages the process has touched already): a read of an anonymous
   page (its entry copied at the fork), of one in a transparent huge page
   (the range advised MADV_HUGEPAGE; said when the kernel gave none), of a
   page of a file (/usr/bin/python3's, mapped privately, as a binary's text
   is: faulted in from the page cache), and a write of an anonymous one
   (copy-on-write); and a write of each after the child has made the
   anonymous pages its own huge pages with madvise(MADV_COLLAPSE), Linux
   6.1 (2,048 pages 2 MiB-aligned; the collapse's CPU per page beside).
   Then, in this process, the first write of a fresh anonymous page (no
   parent had it: the kernel allocates and zeroes it) on 4 KiB pages and in
   a mapping advised MADV_HUGEPAGE.
2. One system call (getppid), less the same loop calling a built-in that
   makes none; medians of 5 rounds of 200,000.
3. The CPU of one interpreter start (`python3 -c pass`, and `node -e 0`
   where node is installed), with the environment emptied: with every other
   CPU idle, with each spinning (a busy process, arithmetic only), and with
   each running the same starts in a loop; medians of 9 starts each.
4. What the zygote's mapping of its code on huge pages (jail/zygote.py's
   _huge_code, run from that file) saves its children: a parent with the
   zygote's preloads (jail/zygote.go's zygotePreload), its memory pinned as
   a zygote whose trial chose the pins pins it (_pin, mode 'on'), forks children that run print(1) (stdout on
   /dev/null), join threads, collect and exit; the child's CPU at the
   fork's return, and its whole CPU with its exit, medians of 25, with the
   parent's code on the file's pages and then, in a fresh interpreter, on
   huge pages. Needs io_uring for the pins (root, or RLIMIT_MEMLOCK above
   the parent's memory), and transparent huge pages.

Sections 1 to 3 need no privileges; nothing outside this process and its
children.
"""
import ctypes
import mmap
import os
import resource
import subprocess
import sys
import time

PAGES = 2048
HUGE = 2 << 20
MADV_COLLAPSE = 25  # Linux 6.1; not in this Python's mmap module


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def touch(m, write):
    """Touches each of the first PAGES pages of m once (fewer if m is
    shorter); the thread's CPU it took, in ns."""
    end = min(len(m), PAGES * 4096)
    t = time.thread_time_ns()
    if write:
        for i in range(0, end, 4096):
            m[i] = 2
    else:
        s = 0
        for i in range(0, end, 4096):
            s += m[i]
    return time.thread_time_ns() - t


def in_children(m, write, n=15):
    """touch's ns in n forked children, each its own first touch."""
    out = []
    for _ in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, b'%d' % touch(m, write))
            os._exit(0)
        os.close(w)
        out.append(int(os.read(r, 64)))
        os.close(r)
        os.waitpid(pid, 0)
    return median(out)


def huge_region():
    """PAGES pages inside an anonymous mapping advised MADV_HUGEPAGE, written,
    and how many KiB of it the kernel backs with huge pages."""
    m = mmap.mmap(-1, PAGES * 4096 + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_HUGEPAGE)
    for i in range(0, len(m), 4096):
        m[i] = 1
    kib = 0
    with open('/proc/self/smaps_rollup') as f:
        for line in f:
            if line.startswith('AnonHugePages:'):
                kib = int(line.split()[1])
    return m, kib


def first_touch():
    """Section 1."""
    print('1. the first touch of a page, per page: a forked child\'s, of a page its parent had present; the last two this process\'s own:')
    anon = mmap.mmap(-1, PAGES * 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for i in range(0, PAGES * 4096, 4096):
        anon[i] = 1
    loop = median(touch(anon, False) for _ in range(5))  # already touched: the loop alone
    wloop = median(touch(anon, True) for _ in range(5))

    def per_page(ns, base, pages=PAGES):
        return (ns - base * pages / PAGES) / pages / 1000

    print('   read, anonymous page:            %6.2f us' % per_page(in_children(anon, False), loop))
    huge, kib = huge_region()
    if kib:
        print('   read, in a transparent huge page: %6.2f us  (%d KiB of huge pages)'
              % (per_page(in_children(huge, False), loop), kib))
    else:
        print('   read, in a transparent huge page: the kernel gave none (transparent_hugepage off?)')
    with open(os.path.realpath(sys.executable), 'rb') as f:
        pages = min(os.fstat(f.fileno()).st_size // 4096, PAGES)
        text = mmap.mmap(f.fileno(), pages * 4096, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
    touch(text, False)  # in the page cache, and mapped here
    print('   read, page of a file:            %6.2f us  (%s, %d pages)'
          % (per_page(in_children(text, False), loop, pages), os.path.realpath(sys.executable), pages))
    print('   write, anonymous page (a copy):  %6.2f us' % per_page(in_children(anon, True), wloop))
    collapse, written = collapsed_writes()
    if collapse is None:
        print('   write, after MADV_COLLAPSE:        the kernel refused the collapse (%s)' % written)
    else:
        print('   write, after MADV_COLLAPSE:      %6.2f us  (the collapse %.2f us a page)'
              % (per_page(written, wloop), collapse / PAGES / 1000))
    for advice, label in ((mmap.MADV_NOHUGEPAGE, 'write, a fresh anonymous page:  '),
                          (mmap.MADV_HUGEPAGE, 'write, fresh, in a huge page:   ')):
        print('   %s%6.2f us' % (label, per_page(median(fresh_writes(advice) for _ in range(5)), wloop)))


def aligned_region():
    """A fresh anonymous mapping with room for PAGES pages from a 2 MiB
    boundary, and the offset of that boundary in it."""
    m = mmap.mmap(-1, PAGES * 4096 + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return m, -ctypes.addressof(ctypes.c_char.from_buffer(m)) % HUGE


def fresh_writes(advice):
    """touch's write of PAGES pages of a fresh anonymous mapping, 2 MiB-aligned
    and advised advice, in this process: each page's first touch."""
    m, start = aligned_region()
    m.madvise(advice, start, PAGES * 4096)
    try:
        return touch(memoryview(m)[start:start + PAGES * 4096], True)
    finally:
        m.close()


def collapsed_writes(n=15):
    """A child's madvise(MADV_COLLAPSE) of PAGES written anonymous pages its
    parent has on 4 KiB pages, 2 MiB-aligned, then touch's write of each:
    the medians of both, in ns, over n children (None and the error when the
    kernel refuses)."""
    m, start = aligned_region()
    view = memoryview(m)[start:start + PAGES * 4096]
    for i in range(0, PAGES * 4096, 4096):
        view[i] = 1
    out = []
    for _ in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            t = time.thread_time_ns()
            try:
                m.madvise(mmap.MADV_HUGEPAGE, start, PAGES * 4096)
                m.madvise(MADV_COLLAPSE, start, PAGES * 4096)
            except OSError as e:
                os.write(w, b'e' + str(e).encode())
                os._exit(0)
            collapse = time.thread_time_ns() - t
            os.write(w, b'%d %d' % (collapse, touch(view, True)))
            os._exit(0)
        os.close(w)
        got = os.read(r, 256)
        os.close(r)
        os.waitpid(pid, 0)
        if got.startswith(b'e'):
            return None, got[1:].decode()
        out.append(tuple(map(int, got.split())))
    return median(c for c, _ in out), median(t for _, t in out)


def syscall():
    """Section 2."""
    n = 200_000
    rounds = []
    for _ in range(5):
        t = time.thread_time_ns()
        for _ in range(n):
            os.getppid()
        call = time.thread_time_ns() - t
        t = time.thread_time_ns()
        for _ in range(n):
            abs(1)
        rounds.append((call - (time.thread_time_ns() - t)) / n / 1000)
    print('2. one system call (getppid), less a Python call: %.2f us' % median(rounds))


def starts(argv, n=9):
    """CPU per start of argv, in ms, over n starts (median)."""
    def cpu():
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    out = []
    for _ in range(n):
        before = cpu()
        subprocess.run(argv, stdout=subprocess.DEVNULL, env={'PATH': '/usr/bin:/bin', 'LANG': 'C.UTF-8'}, check=True)
        out.append((cpu() - before) * 1000)
    return median(out)


def others(work):
    """One process per other CPU doing work() forever; their pids."""
    pids = []
    for _ in range(max(1, (os.cpu_count() or 2) - 1)):
        pid = os.fork()
        if pid == 0:
            try:
                while True:
                    work()
            finally:
                os._exit(0)
        pids.append(pid)
    time.sleep(0.3)
    return pids


def stop(pids):
    for pid in pids:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def process_starts():
    """Section 3."""
    print('3. CPU of one interpreter start:')
    cmds = [['/usr/bin/python3', '-c', 'pass']]
    if os.path.exists('/usr/bin/node'):
        cmds.append(['/usr/bin/node', '-e', '0'])
    for argv in cmds:
        alone = starts(argv)
        pids = others(lambda: None)
        spinning = starts(argv)
        stop(pids)
        pids = others(lambda: subprocess.run(argv, stdout=subprocess.DEVNULL, env={'PATH': '/usr/bin:/bin'}))
        starting = starts(argv)
        stop(pids)
        print('   %-28s alone %6.1f ms; other CPUs spinning %6.1f ms (x%.2f); other CPUs starting the same %6.1f ms (x%.2f)'
              % (' '.join(argv), alone, spinning, spinning / alone, starting, starting / alone))


def huge_code_arm(huge):
    """Section 4's parent, in this fresh interpreter: one line of figures."""
    import gc
    import threading
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import cow_cost
    cow_cost.import_preloads()
    z = cow_cost.zygote_functions('_huge_code', '_huge_kib', '_pin', '_ranges')
    mapped, why = z['_huge_code']() if huge else (0, '')
    os.close(z['PROC'])
    z['PROC'] = os.open('/proc', os.O_RDONLY | os.O_DIRECTORY)  # _pin closes it
    gc.collect()
    gc.freeze()
    _, pinned, pin_why, _ = z['_pin'](1 << 14, 'on', None)  # pinned without the trial (the margin is the trial's)
    code = compile('print(1)', '/sandbox/main.py', 'exec')
    null = os.open(os.devnull, os.O_WRONLY)
    at_return, whole = [], []
    for _ in range(25):
        r, w = os.pipe()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        pid = os.fork()
        if pid == 0:
            t = time.thread_time_ns()
            os.dup2(null, 1)
            exec(code, {'__name__': '__main__'})
            threading._shutdown()
            gc.collect()
            sys.stdout.flush()
            os.write(w, b'%d' % t)
            os._exit(0)
        os.close(w)
        at_return.append(int(os.read(r, 64)) / 1e6)
        os.close(r)
        os.waitpid(pid, 0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        whole.append((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000)
    print("   code on %-11s child at the fork's return %5.2f ms, whole child %5.2f ms  (%d pages pinned%s%s)" % (
        'huge pages:' if huge else "the file's:", median(at_return), median(whole), pinned,
        ', %d MiB of code moved' % (mapped >> 20) if huge else '',
        '; ' + (why or pin_why) if (why or pin_why) else ''))


def huge_code():
    """Section 4: each arm in a fresh interpreter, twice."""
    print("4. a forked child of a parent with the zygote's preloads and pins:")
    for _ in range(2):
        for arm in ('file', 'huge'):
            subprocess.run([sys.executable, os.path.abspath(__file__), 'arm', arm], check=True)


if __name__ == '__main__':
    if sys.argv[1:2] == ['arm']:
        huge_code_arm(sys.argv[2] == 'huge')
        sys.exit()
    first_touch()
    syscall()
    process_starts()
    huge_code()
