#!/usr/bin/env python3
"""A run's latency on an idle service: one print(1) run every 50 ms, so that the
pool is full when each arrives, against a bare python3 at the same pace.

    sudo python3 bench/measure/idle_latency.py [SOCKET] [RUNS]

It reports the client's request-to-result time and the result's own
timing.total_ms (the service's request to result), median and 90th percentile.
`brig bench` measures back-to-back runs, where refilling the pool competes with
the runs for the CPU; this is the other end.
"""
import http.client
import json
import socket
import statistics
import subprocess
import sys
import time


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__('brig')
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.unix_path)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else '/run/brig/brig.sock'
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    conn = UnixConnection(path)
    client, total, starts = [], [], {}
    body = json.dumps({'language': 'python', 'code': 'print(1)'})
    for _ in range(runs):
        time.sleep(0.05)
        t = time.perf_counter()
        conn.request('POST', '/v1/runs', body, {'Content-Type': 'application/json'})
        res = json.loads(conn.getresponse().read())
        client.append((time.perf_counter() - t) * 1000)
        if res.get('outcome') != 'succeeded':
            raise SystemExit('a run did not succeed: %s' % res)
        total.append(res['timing']['total_ms'])
    bare = []
    for _ in range(runs):
        time.sleep(0.05)
        t = time.perf_counter()
        subprocess.run(['/usr/bin/python3', '-c', 'print(1)'], stdout=subprocess.DEVNULL, check=True)
        bare.append((time.perf_counter() - t) * 1000)
    print('%d runs, one every 50 ms:' % runs)
    print('  brig, client:  p50 %.2f ms  p90 %.2f ms' % (statistics.median(client), pct(client, 0.9)))
    print('  brig total_ms: p50 %.1f ms  p90 %.1f ms' % (statistics.median(total), pct(total, 0.9)))
    print('  bare python3:  p50 %.2f ms  p90 %.2f ms' % (statistics.median(bare), pct(bare, 0.9)))


if __name__ == '__main__':
    main()
