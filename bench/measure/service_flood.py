#!/usr/bin/env python3
"""What a flood from one client or one run costs the service: its memory for
unread large answers, its CPU for a run's DNS queries.

    python3 bench/measure/service_flood.py answers BIN_DIR [N] [PATH]
    python3 bench/measure/service_flood.py dns BIN_DIR
    python3 bench/measure/service_flood.py writes BIN_DIR [N]
    python3 bench/measure/service_flood.py conns BIN_DIR
    python3 bench/measure/service_flood.py forks BIN_DIR [N]

BIN_DIR holds a build's brig (make build BIN=DIR/brig INIT_BIN=DIR/brig-init
REAPER_BIN=DIR/brig-reaper). Each starts that build's `brig serve` on a socket
and state directory of its own under /tmp (cgroup parent brig-flood), measures,
and stops it. Run one at a time, as root, on an otherwise idle machine.

answers: a run writes 999,000 control characters (a result of 6 MB of JSON);
N connections (100) each ask for PATH (/v1/runs/big, or /v1/runs/big/events)
with a 4 KiB receive buffer and do not read for 8 s. Prints the service's
VmRSS, RssAnon and VmHWM before and while they wait, and the statuses they got.

dns: a run in mode domains sends 100,000 DNS queries for distinct denied names
as fast as its socket takes them, without waiting for answers. Prints the run's
CPU and the service's (utime + stime over the run).

writes: a run writes one byte at a time to its stdout, N times (300,000: under
the output's cap). Prints the run's CPU and wall time and the service's CPU.

conns: a run in mode domains opens 1,000 connections to each of its four
listeners (:53, :80, :443 and the proxy's), sends each up to 1 MiB, and holds
them 15 s. Prints the host's TCP memory (/proc/net/sockstat's pages, the run's
own buffers included) every 2 s: the largest, and the last.

forks: a run forks N children (200) that sleep 3 s, at memory_mib 512, warm and
then cold (PYTHONHASHSEED set, which a warm start can't give), then the same
after `import threading, logging, random`. Prints each one's peak memory and CPU.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import time


def serve(bin_dir):
    d = '/tmp/brig-flood-' + os.path.basename(os.path.abspath(bin_dir))
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    sock = d + '/brig.sock'
    srv = subprocess.Popen([bin_dir + '/brig', 'serve', '--socket', sock, '--state-dir', d + '/state',
                            '--cgroup-parent', 'brig-flood', '--log-level', 'warn'],
                           stderr=open(d + '/serve.log', 'w'))
    while not os.path.exists(sock):
        if srv.poll() is not None:
            sys.exit('brig serve exited: see %s/serve.log' % d)
        time.sleep(0.1)
    time.sleep(1)
    return d, sock, srv


def stop(d, srv):
    srv.terminate()
    srv.wait()
    shutil.rmtree(d, ignore_errors=True)


def run(bin_dir, sock, d, code, *flags):
    with open(d + '/main.py', 'w') as f:
        f.write(code)
    out = subprocess.run([bin_dir + '/brig', 'run', '--socket', sock, '--language', 'python', '--json', *flags,
                          d + '/main.py'], capture_output=True, text=True).stdout
    return json.loads(out)


def memory(pid):
    with open('/proc/%d/status' % pid) as f:
        st = dict(line.split(':', 1) for line in f)
    return {k: st[k].strip() for k in ('VmRSS', 'RssAnon', 'VmHWM')}


def answers(bin_dir, n=100, path='/v1/runs/big'):
    d, sock, srv = serve(bin_dir)
    try:
        res = run(bin_dir, sock, d, "import sys; sys.stdout.write('\\x01' * 999000)", '--id', 'big')
        print('stdout', len(res['stdout']), 'characters')
        print('before', memory(srv.pid))
        conns = []
        for _ in range(n):
            s = socket.socket(socket.AF_UNIX)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(sock)
            s.sendall(('GET %s HTTP/1.1\r\nHost: brig\r\n\r\n' % path).encode())
            conns.append(s)
        time.sleep(8)
        print('waiting', memory(srv.pid))
        statuses = {}
        for s in conns:
            s.settimeout(0.5)
            try:
                status = s.recv(64).split(b' ')[1].decode()
            except (OSError, IndexError):
                status = 'none'
            statuses[status] = statuses.get(status, 0) + 1
            s.close()
        print('statuses', statuses)
    finally:
        stop(d, srv)


FLOOD = r'''
import socket, struct, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
start, sent = time.time(), 0
for i in range(100000):
    q = struct.pack('>HHHHHH', i & 0xffff, 0x0100, 1, 0, 0, 0)
    for label in (b'n%d' % i, b'denied', b'test'):
        q += bytes([len(label)]) + label
    try:
        s.sendto(q + b'\0' + struct.pack('>HH', 1, 1), ('127.0.0.1', 53))
        sent += 1
    except BlockingIOError:
        time.sleep(0.001)
    try:
        while True:
            s.recv(512)
    except BlockingIOError:
        pass
print(sent, 'sent in', round(time.time() - start, 1), 's')
'''


def service_cpu(srv):
    f = open('/proc/%d/stat' % srv.pid).read().rsplit(')', 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')


def dns(bin_dir):
    d, sock, srv = serve(bin_dir)
    try:
        def cpu():
            return service_cpu(srv)
        before = cpu()
        res = run(bin_dir, sock, d, FLOOD, '--timeout', '60', '--network', 'domains', '--domain', 'allowed.test')
        print(res['stdout'].strip(), '| the run\'s CPU', res['usage']['cpu_ms'], 'ms | the service\'s CPU',
              round(cpu() - before, 2), 's | connections listed', len(res['network']['connections']))
    finally:
        stop(d, srv)


def writes(bin_dir, n=300000):
    d, sock, srv = serve(bin_dir)
    try:
        before = service_cpu(srv)
        res = run(bin_dir, sock, d, 'import os\nfor _ in range(%d):\n    os.write(1, b"x")\n' % n)
        print(len(res['stdout']), 'bytes | the run\'s CPU', res['usage']['cpu_ms'], 'ms, wall', res['usage']['wall_ms'],
              'ms | the service\'s CPU', round(service_cpu(srv) - before, 2), 's')
    finally:
        stop(d, srv)


CONNS = r'''
import socket, time
socks, sent = [], 0
for port in (53, 3128, 80, 443):
    for i in range(1000):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(('127.0.0.1', port))
        except BlockingIOError:
            pass
        socks.append(s)
time.sleep(1)
buf = b'\0\x10' + b'x' * 65534
for s in socks:
    for _ in range(16):
        try:
            sent += s.send(buf)
        except OSError:
            break
print(len(socks), 'connections,', sent >> 20, 'MiB sent', flush=True)
time.sleep(15)
'''


def tcp_pages():
    for line in open('/proc/net/sockstat'):
        if line.startswith('TCP:'):
            f = line.split()
            return int(f[f.index('mem') + 1])
    return 0


def conns(bin_dir):
    d, sock, srv = serve(bin_dir)
    try:
        before = tcp_pages()
        out = {}
        runner = __import__('threading').Thread(target=lambda: out.update(res=run(
            bin_dir, sock, d, CONNS, '--timeout', '40', '--memory', '2048', '--network', 'domains', '--domain', 'x.test')))
        runner.start()
        seen = []
        while runner.is_alive():
            time.sleep(2)
            seen.append(tcp_pages())
        runner.join()
        page = os.sysconf('SC_PAGE_SIZE')
        print(out['res']['stdout'].strip(), '| host TCP memory: before', before * page >> 20, 'MiB, largest',
              max(seen) * page >> 20, 'MiB, last while held', seen[-2] * page >> 20 if len(seen) > 1 else '-', 'MiB')
    finally:
        stop(d, srv)


def forks(bin_dir, n=200):
    d, sock, srv = serve(bin_dir)
    code = ('import os, time\npids = []\nfor _ in range(%d):\n    pid = os.fork()\n    if pid == 0:\n'
            '        time.sleep(3)\n        os._exit(0)\n    pids.append(pid)\nfor p in pids:\n    os.waitpid(p, 0)\n' % n)
    try:
        time.sleep(3)  # a warm sandbox in the pool
        for pre, env in [(p, e) for p in ('', 'import threading, logging, random\n') for e in ([], ['--env', 'PYTHONHASHSEED=1'])]:
            res = run(bin_dir, sock, d, pre + code, '--memory', '512', *env)
            time.sleep(1)  # the next warm sandbox
            print('cold' if env else 'warm', '| imports' if pre else '|', res['status'], '| peak',
                  res['usage']['peak_memory_bytes'] >> 20, 'MiB | cpu', res['usage']['cpu_ms'], 'ms')
    finally:
        stop(d, srv)


if __name__ == '__main__':
    if len(sys.argv) < 3 or sys.argv[1] not in ('answers', 'dns', 'writes', 'conns', 'forks'):
        sys.exit(__doc__)
    if sys.argv[1] == 'conns':
        conns(sys.argv[2])
        sys.exit()
    if sys.argv[1] == 'forks':
        forks(sys.argv[2], *([int(sys.argv[3])] if len(sys.argv) > 3 else []))
        sys.exit()
    if sys.argv[1] == 'answers':
        answers(sys.argv[2], *([int(sys.argv[3])] if len(sys.argv) > 3 else []), *sys.argv[4:5])
    elif sys.argv[1] == 'writes':
        writes(sys.argv[2], *([int(sys.argv[3])] if len(sys.argv) > 3 else []))
    else:
        dns(sys.argv[2])
