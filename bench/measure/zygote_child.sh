#!/usr/bin/env bash
# Page faults and CPU per warm Python run of the zygote and its children
# (perf stat on the zygote, whose children inherit the counters), and of the
# zygote alone (its own counters: its loop and its forks), over 100 print(1)
# runs sent one after another through the service, divided by the runs that
# took the warm path (brig_run_starts_total; each warm run has the zygote
# fork one child, the pool's next).
#   bash bench/measure/zygote_child.sh [SOCKET]
# With a service running (make serve, or bin/brig serve --socket SOCKET) and
# Python warm (the default). Needs perf (Debian's linux-perf). The zygote
# must serve the whole measurement: one that is replaced during it (after
# 1,000 forks or a minute, Config.ZygoteRuns and ZygoteAge) is said, and the
# script fails; run it again.
set -euo pipefail
sock=${1:-/run/brig/brig.sock}
runs=100
zygote=$(pgrep -n -f "python3 -u /sandbox/[.]brg[.]js" || true)
[ -n "$zygote" ] || { echo "no zygote running: is the service up with Python warm?" >&2; exit 1; }
all=$(mktemp)
own=$(mktemp)
trap 'rm -f "$all" "$own"' EXIT
perf stat -e page-faults,task-clock -p "$zygote" -o "$all" -- sleep 8 &
perf1=$!
perf stat --no-inherit -e page-faults,task-clock -p "$zygote" -o "$own" -- sleep 8 &
perf2=$!
sleep 0.5
warm=$(python3 - "$sock" "$runs" <<'PY'
import http.client, json, socket, sys
class Unix(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__('brig')
        self.path = path
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.path)
def warm(c):
    c.request('GET', '/metrics')
    for line in c.getresponse().read().decode().splitlines():
        if line.startswith('brig_run_starts_total{language="python",path="warm"}'):
            return int(float(line.split()[-1]))
    return 0
c = Unix(sys.argv[1])
before = warm(c)
for _ in range(int(sys.argv[2])):
    c.request('POST', '/v1/runs', body=json.dumps({'language': 'python', 'code': 'print(1)'}),
              headers={'Content-Type': 'application/json'})
    r = c.getresponse()
    r.read()
print(warm(c) - before)
PY
)
newest=$(pgrep -n -f "python3 -u /sandbox/[.]brg[.]js" || true)
wait "$perf1" "$perf2"
if [ "$newest" != "$zygote" ]; then
  echo "the zygote ($zygote) was replaced during the measurement (now $newest): run it again" >&2
  exit 1
fi
echo "$warm of $runs runs warm"
awk -v n="$warm" '/page-faults/ {printf "zygote and children: %.0f page faults per warm run\n", $1 / n} /task-clock/ {printf "zygote and children: %.2f ms of CPU per warm run\n", $1 / n}' "$all"
awk -v n="$warm" '/page-faults/ {printf "the zygote alone:    %.0f page faults per fork\n", $1 / n} /task-clock/ {printf "the zygote alone:    %.2f ms of CPU per fork\n", $1 / n}' "$own"
