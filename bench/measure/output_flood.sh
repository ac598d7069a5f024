#!/usr/bin/env bash
# The service's CPU (its utime + stime, /proc/PID/stat) while a run prints
# without end past its output cap for its 5 s, on stdout then on stderr,
# three runs each; then three runs that sleep 5 s, for what a run costs the
# service without output. The run's own cpu_ms beside. Last, how long a run
# takes to write 256 MiB past the cap (wall_ms), on each stream, through its
# pipe as it is and through one it shrank to 4 KiB.
#   bash bench/measure/output_flood.sh [BIN_DIR]
# As root; it starts its own service (cgroup parent brig-measure-flood).
set -euo pipefail
bin=$(cd "${1:-$(dirname "$0")/../../bin}" && pwd)
d=$(mktemp -d /tmp/brig-flood.XXXXXX)
printf '[sandbox]\ncgroup_parent = "brig-measure-flood"\n' > "$d/brig.toml"
"$bin/brig" serve --config "$d/brig.toml" --socket "$d/s.sock" --state-dir "$d/state" --pool 1 --log-format text > "$d/log" 2>&1 &
svc=$!
trap 'kill $svc 2>/dev/null; wait $svc 2>/dev/null; rm -rf "$d"' EXIT
for _ in $(seq 100); do [ -S "$d/s.sock" ] && break; sleep 0.1; done
sleep 2 # the pool filled
tck=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$svc/stat"; }
for what in stdout stderr sleep; do
  case $what in
    stdout) code=$'import os\nb = b"y" * 65536\nwhile True:\n    os.write(1, b)' ;;
    stderr) code=$'import os\nb = b"y" * 65536\nwhile True:\n    os.write(2, b)' ;;
    sleep) code='import time; time.sleep(5)' ;;
  esac
  for _ in 1 2 3; do
    a=$(cpu)
    printf '%s\n' "$code" | "$bin/brig" run --socket "$d/s.sock" -l python --timeout 5 --json - > "$d/out.json" || true
    b=$(cpu)
    echo "$what: the service $(( (b - a) * 1000 / tck )) ms of CPU; the run's cpu_ms $(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['usage']['cpu_ms'])" "$d/out.json")"
  done
done
for fd in 1 2; do
  for shrink in no yes; do
    code="import fcntl, os
if '$shrink' == 'yes':
    fcntl.fcntl($fd, 1031, 4096)  # F_SETPIPE_SZ
b = b'y' * 65536
for _ in range(4096):
    os.write($fd, b)"
    printf '%s\n' "$code" | "$bin/brig" run --socket "$d/s.sock" -l python --timeout 60 --json - > "$d/out.json" || true
    echo "256 MiB on fd $fd, pipe shrunk to 4 KiB: $shrink: $(python3 -c "import json, sys; r = json.load(open(sys.argv[1])); print(r['outcome'], r['usage']['wall_ms'], 'ms')" "$d/out.json")"
  done
done
