#!/usr/bin/env python3
"""What an interpreter's start costs inside a sandbox's mount (and pid)
namespace against on the host: the CPU of `python3 -c pass` (or ARGV's
command) exec'd from a process that entered the namespaces of PID, and from
one that entered none, one of each in turn, N times.

    python3 bench/measure/ns_start.py PID [N]        (as root, from the repository)

PID is a process of a running sandbox, a cold run's program (one that sleeps;
`ps -eo pid,args | grep /sandbox/main`). The pid namespace is entered too, so
that /proc/self resolves in the sandbox's /proc as it does in a run. Each
figure is the child's own CPU (wait4's rusage: its exec and its run), medians
and means in ms. ARGV='/usr/bin/node|-e|0' measures another command ('|'
between arguments).

This is how a stale cached bytecode of Debian's sitecustomize was found: 1.5 to
1.9 ms more a Python start inside than outside (README, Host rootfs).
"""
import ctypes
import os
import statistics
import sys

CLONE_NEWNS, CLONE_NEWPID = 0x20000, 0x20000000


def server(pid, argv):
    """A process that entered pid's namespaces (None: none) and forks and
    execs argv on each request byte, answering with the child's CPU."""
    req_r, req_w = os.pipe()
    res_r, res_w = os.pipe()
    if os.fork() == 0:
        if pid is not None:
            libc = ctypes.CDLL(None, use_errno=True)
            # Both opened before either is entered: the mount namespace's /proc
            # does not show the host's pids.
            fds = [(os.open('/proc/%s/ns/%s' % (pid, ns), os.O_RDONLY), flag)
                   for ns, flag in (('pid', CLONE_NEWPID), ('mnt', CLONE_NEWNS))]
            for fd, flag in fds:
                if libc.setns(fd, flag) != 0:
                    os._exit(2)
                os.close(fd)
            os.chdir('/')
        devnull = os.open('/dev/null', os.O_WRONLY)
        while os.read(req_r, 1):
            child = os.fork()
            if child == 0:
                os.dup2(devnull, 1)
                os.execv(argv[0], argv)
            _, _, ru = os.wait4(child, 0)
            os.write(res_w, ('%f' % ((ru.ru_utime + ru.ru_stime) * 1e3)).encode().ljust(32))
        os._exit(0)
    return req_w, res_r


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    pid, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 250
    argv = os.environ.get('ARGV', '/usr/bin/python3|-c|pass').split('|')
    servers = {'host': server(None, argv), 'sandbox': server(pid, argv)}
    cpu = {name: [] for name in servers}
    for _ in range(n):
        for name, (w, r) in servers.items():
            os.write(w, b'x')
            cpu[name].append(float(os.read(r, 32)))
    print('CPU of %s, exec\'d %d times in each, in turn (ms):' % (' '.join(argv), n))
    for name, v in cpu.items():
        print('  %-8s median %6.2f  mean %6.2f' % (name, statistics.median(v), statistics.mean(v)))


if __name__ == '__main__':
    main()
