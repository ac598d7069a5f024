#!/usr/bin/env bash
# The CPU and page faults of a warm JavaScript sandbox's node from the run's
# hand-over to its exit: a service of its own (socket, state directory and
# cgroup parent brig-handover under a temporary directory), then N
# console.log(1) runs one at a time, each with perf stat on the service's
# waiting nodes (only the one the run takes does anything), and the run's own
# cgroup CPU (usage.cpu_ms) beside it.
#   bash bench/measure/js_handover.sh [BINDIR] [N]
# BINDIR holds brig, brig-init and brig-reaper (default: bin). Needs perf.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(cd "${1:-$here/../../bin}" && pwd)
n=${2:-6}
. "$here/lib.sh"
[ "$(id -u)" = 0 ] || { echo "run as root: the service needs it" >&2; exit 1; }
own_service brig-handover
for _ in $(seq "$n"); do
  nodes=$(for p in $(pgrep -x node); do grep -q "memory:/brig-handover/" /proc/$p/cgroup 2>/dev/null && echo $p; done | paste -sd,)
  [ -n "$nodes" ] || { echo "no waiting node of this service: is JavaScript warm?" >&2; exit 1; }
  perf stat -e task-clock,page-faults -p "$nodes" -o "$dir/stat" -- sleep 1.5 &
  perf=$!
  sleep 0.3
  curl -s --unix-socket "$dir/brig.sock" -H 'content-type: application/json' \
    -d '{"language":"javascript","code":"console.log(1)"}' http://brig/v1/runs > "$dir/res"
  wait "$perf"
  python3 - "$dir/stat" "$dir/res" <<'PY'
import json, sys
stat = {l.split()[1]: l.split()[0] for l in open(sys.argv[1]) if l.strip() and l.split()[0][0].isdigit()}
res = json.load(open(sys.argv[2]))
print('node after the hand-over: %s ms of CPU, %s page faults; the run\'s cgroup %d ms; stdout %r'
      % (stat.get('msec', '?'), stat.get('page-faults', '?'), res['usage']['cpu_ms'], res['stdout']))
PY
  sleep 1
done
