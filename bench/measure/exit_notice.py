#!/usr/bin/env python3
"""How much sooner the kernel's taskstats exit record tells of a forked child's
exit than its pidfd does.

    python3 bench/measure/exit_notice.py

A process's exit is visible to its parent, its pidfd and EOF on its pipes only
once the kernel has torn down its address space (exit_mm comes before
exit_notify and exit_files), which for a child of a zygote-sized interpreter
is a third of a warm run's latency. taskstats_exit, which sends the record
(with the wait status, in the host's pid namespace) to registered listeners,
comes before exit_mm. This forks 100 children of an interpreter with common
modules imported, each exiting 3, and prints the record's status and the gap.

    python3 bench/measure/exit_notice.py node

starts 30 `node` processes instead (multi-threaded: the record taken is the
one flagged AGROUP, of the last of its threads, told apart by its thread id
falling just above the process's).
"""
import os, socket, struct, time, select, sys
NETLINK_GENERIC = 16
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2
TASKSTATS_CMD_GET = 1
TASKSTATS_CMD_ATTR_REGISTER_CPUMASK = 3
TASKSTATS_TYPE_PID, TASKSTATS_TYPE_TGID, TASKSTATS_TYPE_STATS, TASKSTATS_TYPE_AGGR_PID, TASKSTATS_TYPE_AGGR_TGID = 1, 2, 3, 4, 5

def nla(t, data):
    l = 4 + len(data)
    return struct.pack('HH', l, t) + data + b'\0' * ((4 - l % 4) % 4)

def genl_msg(fam, cmd, attrs, seq):
    payload = struct.pack('BBH', cmd, 1, 0) + attrs
    return struct.pack('IHHII', 16 + len(payload), fam, 1 | 4, seq, 0) + payload  # NLM_F_REQUEST|NLM_F_ACK

def attrs(buf):
    out = {}
    while len(buf) >= 4:
        l, t = struct.unpack('HH', buf[:4])
        out[t & 0x3fff] = buf[4:l]
        buf = buf[(l + 3) & ~3:]
    return out

s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
s.bind((0, 0))
s.send(genl_msg(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, nla(CTRL_ATTR_FAMILY_NAME, b'TASKSTATS\0'), 1))
r = s.recv(65536)
fam = struct.unpack('H', attrs(r[20:])[CTRL_ATTR_FAMILY_ID][:2])[0]
ncpu = os.cpu_count()
s.send(genl_msg(fam, TASKSTATS_CMD_GET, nla(TASKSTATS_CMD_ATTR_REGISTER_CPUMASK, ('0-%d' % (ncpu - 1)).encode() + b'\0'), 2))
s.recv(65536)  # ack

if sys.argv[1:] == ['node']:
    import subprocess
    gaps = []
    for i in range(30):
        p = subprocess.Popen(['node', '-e', 'setTimeout(() => console.log(1), 50)'], stdout=subprocess.DEVNULL)
        pfd = os.pidfd_open(p.pid)
        t_ts = t_pfd = None
        while t_ts is None or t_pfd is None:
            rl, _, _ = select.select([s, pfd], [], [])
            now = time.perf_counter()
            if s in rl:
                a = attrs(s.recv(65536)[20:])
                if TASKSTATS_TYPE_AGGR_PID in a:
                    inner = attrs(a[TASKSTATS_TYPE_AGGR_PID])
                    tid = struct.unpack('I', inner[TASKSTATS_TYPE_PID][:4])[0]
                    if inner[TASKSTATS_TYPE_STATS][8] & 0x20 and p.pid <= tid < p.pid + 64 and t_ts is None:
                        t_ts = now
            if pfd in rl and t_pfd is None:
                t_pfd = now
        p.wait(); os.close(pfd)
        gaps.append((t_pfd - t_ts) * 1e6)
    gaps.sort()
    print('node: pidfd ready after the taskstats record: p50 %.0f us, p10 %.0f, p90 %.0f' % (gaps[15], gaps[3], gaps[27]))
    sys.exit(0)

for m in ["json", "re", "collections", "logging", "argparse", "decimal", "typing", "subprocess", "pathlib", "dataclasses", "datetime", "uuid", "hashlib", "statistics"]:
    __import__(m)
import gc; gc.collect(); gc.freeze()
gaps = []
for i in range(100):
    pid = os.fork()
    if pid == 0:
        d = {}
        for k in range(2000): d[k] = str(k)  # touch some memory
        os._exit(3)
    pfd = os.pidfd_open(pid)
    t_ts = t_pfd = None
    status = None
    while t_ts is None or t_pfd is None:
        rl, _, _ = select.select([s, pfd], [], [])
        now = time.perf_counter()
        if s in rl:
            b = s.recv(65536)
            a = attrs(b[20:])
            for t in (TASKSTATS_TYPE_AGGR_PID, TASKSTATS_TYPE_AGGR_TGID):
                if t in a:
                    inner = attrs(a[t])
                    p = struct.unpack('I', inner[TASKSTATS_TYPE_PID if t == 4 else TASKSTATS_TYPE_TGID][:4])[0]
                    if p == pid and t_ts is None:
                        st = inner[TASKSTATS_TYPE_STATS]
                        status = struct.unpack('I', st[4:8])[0]
                        t_ts = now
        if pfd in rl and t_pfd is None:
            t_pfd = now
    os.waitpid(pid, 0); os.close(pfd)
    gaps.append((t_pfd - t_ts) * 1e6)
gaps.sort()
print('exit status from taskstats: %#x (want 0x300)' % status)
print('pidfd ready after the taskstats record: p50 %.0f us, p10 %.0f, p90 %.0f' % (gaps[50], gaps[10], gaps[90]))
