#!/usr/bin/env bash
# Page faults and CPU per warm Python run of the zygote and its children
# (perf stat on the zygote, whose children inherit the counters), over 200
# print(1) runs sent one after another through the service, divided by the
# runs that took the warm path (brig_run_starts_total).
#   sudo bash bench/measure/zygote_child.sh [SOCKET]
# With a service running (make serve, or bin/brig serve --socket SOCKET) and
# Python warm (the default). Needs perf (Debian's linux-perf).
set -euo pipefail
sock=${1:-/run/brig/brig.sock}
runs=200
zygote=$(pgrep -f "python3.*CTL, PIDNS" | head -1 || true)
[ -n "$zygote" ] || { echo "no zygote running: is the service up with Python warm?" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
perf stat -e page-faults,task-clock -p "$zygote" -o "$out" -- sleep 6 &
perf=$!
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
wait "$perf"
echo "$warm of $runs runs warm"
awk -v n="$warm" '/page-faults/ {printf "%.0f page faults per warm run\n", $1 / n} /task-clock/ {printf "%.2f ms of CPU per warm run\n", $1 / n}' "$out"
