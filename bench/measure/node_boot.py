#!/usr/bin/env python3
"""What a warm node's bootstrap costs, against a plain `node main.js`.

  python3 bench/measure/node_boot.py [ROUNDS [REV]]

The program prints process.cpuUsage() (every thread of node's, user and
system) at its first line. Each round runs, in turn:
  plain   node DIR/main.js;
  file    node DIR/boot.js, jail/warm.go's nodeBoot (read from the source
          beside this script) as a file, its paths moved into DIR: what a
          warm sandbox's node runs (pid1.WarmBootPath);
  eval    node -e with the same bootstrap, less its removal of its own file
          (node's eval path);
  REV     with a git revision (ebdbab0^: the last with it), that revision's
          nodeBoot under node -e, as brig ran it then.
The two bootstraps get the environment over a socketpair on fd 3, as from
the sandbox's pid 1. Each node starts with an empty environment, as a run's
does (a NODE_EXTRA_CA_CERTS of the caller's costs every start a read of the
CA bundle). Medians over the rounds (default 15). No privileges; nothing
outside a temporary directory and the child processes.
"""
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile

NODE = '/usr/bin/node'


def boot_source(rev=None):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'jail', 'warm.go')
    if rev:
        src = subprocess.run(['git', '-C', os.path.dirname(path), 'show', rev + ':jail/warm.go'],
                             capture_output=True, text=True, check=True).stdout
    else:
        src = open(path).read()
    return re.search(r'const nodeBoot = `(.*?)`', src, re.S).group(1)


def first_line_ms(out):
    return float(out.decode().split()[-1])


def plain(d):
    return first_line_ms(subprocess.run([NODE, os.path.join(d, 'main.js')], capture_output=True, check=True, env={}).stdout)


def booted(argv):
    a, b = socket.socketpair()
    # dup2 in the child, after which close_fds would close 3: not used.
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, close_fds=False, env={},
                         preexec_fn=lambda: os.dup2(b.fileno(), 3))
    b.close()
    if a.recv(1) != b'r':
        sys.exit('the bootstrap did not say it was ready: %r' % (argv,))
    a.sendall(b'{"A": "1"}')
    a.shutdown(socket.SHUT_WR)
    out = p.communicate()[0]
    a.close()
    if p.returncode != 0:
        sys.exit('%r exited %d' % (argv, p.returncode))
    return first_line_ms(out)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    rev = sys.argv[2] if len(sys.argv) > 2 else None
    boot = boot_source()
    old = boot_source(rev) if rev else None
    with tempfile.TemporaryDirectory() as d:
        main_js = os.path.join(d, 'main.js')
        with open(main_js, 'w') as f:
            f.write('const u = process.cpuUsage(); console.log(((u.user + u.system) / 1000).toFixed(2))\n')
        boot = boot.replace('/sandbox/main.js', main_js)
        as_eval = '\n'.join(l for l in boot.splitlines() if '__filename' not in l)
        path = os.path.join(d, 'boot.js')
        res = {'plain': [], 'file': [], 'eval': []}
        if old:
            old = old.replace('/sandbox/main.js', main_js)
            res[rev] = []
        for _ in range(rounds):
            res['plain'].append(plain(d))
            with open(path, 'w') as f:
                f.write(boot)
            res['file'].append(booted([NODE, path]))
            res['eval'].append(booted([NODE, '-e', as_eval]))
            if old:
                res[rev].append(booted([NODE, '-e', old]))
        print("node's CPU at the program's first line, medians of %d (ms):" % rounds)
        for k, v in res.items():
            print('  %-8s %7.1f  (%.1f to %.1f)' % (k, statistics.median(v), min(v), max(v)))


if __name__ == '__main__':
    main()
