"""What a start saves when the interpreter's file is a copy on a tmpfs of
huge pages (jail/copies.go): each interpreter run N times from its own file
and N times from such a copy, in turn, each start's CPU and page faults from
wait4, medians reported. The copy's tmpfs is mounted in a mount namespace of
this script's own, which goes with it.

    sudo python3 bench/measure/huge_copy.py [N] [ROUNDS]

Runs `python3 -c 'print(1)'`-like and `node` one-line programs with an empty
environment, as a bare start does (the interpreters of rootfs's defaults,
/usr/bin/python3 and /usr/bin/node, resolved)."""
import ctypes
import os
import shutil
import statistics
import sys
import tempfile

CLONE_NEWNS = 0x20000
MS_REC, MS_PRIVATE = 0x4000, 1 << 18

libc = ctypes.CDLL(None, use_errno=True)


def check(r, what):
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, '%s: %s' % (what, os.strerror(e)))


def start(argv, cpu=None):
    """One start's CPU (ms) and minor faults, on CPU cpu when given (the
    starts of bench/measure/cpu_speed.py)."""
    pid = os.fork()
    if pid == 0:
        try:
            if cpu is not None:
                os.sched_setaffinity(0, {cpu})
            fd = os.open('/dev/null', os.O_WRONLY)
            os.dup2(fd, 1)
            os.execve(argv[0], argv, {})
        finally:
            os._exit(127)
    _, status, ru = os.wait4(pid, 0)
    if status != 0:
        raise SystemExit('%s exited with status %d' % (argv, status))
    return (ru.ru_utime + ru.ru_stime) * 1000, ru.ru_minflt


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    if os.geteuid() != 0:
        raise SystemExit('run as root: it mounts a tmpfs in a mount namespace of its own')
    check(libc.unshare(CLONE_NEWNS), 'unshare')
    check(libc.mount(b'none', b'/', None, MS_REC | MS_PRIVATE, None), 'making the mounts private')
    work = tempfile.mkdtemp(prefix='brig-huge-copy-')
    try:
        script = os.path.join(work, 'one.js')
        with open(script, 'w') as f:
            f.write('console.log(1)\n')
        huge = os.path.join(work, 'huge')
        os.mkdir(huge)
        check(libc.mount(b'tmpfs', huge.encode(), b'tmpfs', 0, b'huge=always'), 'mounting a tmpfs huge=always')
        cases = []
        for path, args in (('/usr/bin/python3', ['-c', 'print(1)']), ('/usr/bin/node', [script])):
            real = os.path.realpath(path)
            copy = os.path.join(huge, os.path.basename(real))
            shutil.copy2(real, copy)
            cases.append((real, [real] + args, [copy] + args))
        for r in range(1, rounds + 1):
            for real, own, copied in cases:
                got = {'own file': [], 'copy': []}
                for _ in range(n):  # in turn, so that both share the machine's drift
                    got['own file'].append(start(own))
                    got['copy'].append(start(copied))
                ms = {k: statistics.median(c for c, _ in v) for k, v in got.items()}
                faults = {k: statistics.median(f for _, f in v) for k, v in got.items()}
                print('round %d  %-20s own file %6.2f ms %5d faults   copy on huge pages %6.2f ms %5d faults   %.3f of own' % (
                    r, real, ms['own file'], faults['own file'], ms['copy'], faults['copy'], ms['copy'] / ms['own file']))
    finally:
        libc.umount2(os.path.join(work, 'huge').encode(), 2)  # MNT_DETACH
        shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main()
