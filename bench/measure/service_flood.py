#!/usr/bin/env python3
"""What a flood from one client or one run costs the service: its memory for
unread large answers, its CPU for a run's DNS queries.

    python3 bench/measure/service_flood.py answers BIN_DIR [N] [PATH]
    python3 bench/measure/service_flood.py dns BIN_DIR
    python3 bench/measure/service_flood.py writes BIN_DIR [N]

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


if __name__ == '__main__':
    if len(sys.argv) < 3 or sys.argv[1] not in ('answers', 'dns', 'writes'):
        sys.exit(__doc__)
    if sys.argv[1] == 'answers':
        answers(sys.argv[2], *([int(sys.argv[3])] if len(sys.argv) > 3 else []), *sys.argv[4:5])
    elif sys.argv[1] == 'writes':
        writes(sys.argv[2], *([int(sys.argv[3])] if len(sys.argv) > 3 else []))
    else:
        dns(sys.argv[2])
