#!/usr/bin/env python3
"""What a warm node's bootstrap costs, against a plain `node main.js`.

  python3 bench/measure/node_boot.py [ROUNDS [REV]]

The program prints process.cpuUsage() (every thread of node's, user and
system) at its first line. Each round runs, in turn:
  plain    node DIR/main.js;
  preload  node DIR/main.js with NODE_OPTIONS=--require /dev/stdin and
           DIR/boot.js, jail/warm.go's nodeBoot (read from the source beside
           this script), as its stdin: what a warm sandbox's node runs
           (jail/warm.go);
  REV      with a git revision, that revision's nodeBoot as node's main
           script, DIR/boot.js (860c85a: the last that ran it so, which then
           ran the program from the event loop).
The bootstraps get the environment over a socketpair on the descriptor
they write their 'r' to (pid1.WarmFD: 63; 3 until 860c85a), as from the
sandbox's pid 1. Each node starts with an empty environment, as a run's
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


def booted(argv, env, stdin, boot):
    fd = int(re.search(r'writeSync\((\d+)', boot).group(1))
    a, b = socket.socketpair()
    # dup2 in the child, after which close_fds would close it: not used.
    p = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, close_fds=False, env=env,
                         preexec_fn=lambda: os.dup2(b.fileno(), fd))
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
        path = os.path.join(d, 'boot.js')
        res = {'plain': [], 'preload': []}
        if old:
            old = old.replace('/sandbox/main.js', main_js)
            res[rev] = []
        for _ in range(rounds):
            res['plain'].append(plain(d))
            with open(path, 'w') as f:
                f.write(boot)
            with open(path) as stdin:
                res['preload'].append(booted([NODE, main_js], {'NODE_OPTIONS': '--require /dev/stdin'}, stdin, boot))
            if old:
                with open(path, 'w') as f:
                    f.write(old)
                res[rev].append(booted([NODE, path], {}, subprocess.DEVNULL, old))
        print("node's CPU at the program's first line, medians of %d (ms):" % rounds)
        for k, v in res.items():
            print('  %-8s %7.1f  (%.1f to %.1f)' % (k, statistics.median(v), min(v), max(v)))


if __name__ == '__main__':
    main()
