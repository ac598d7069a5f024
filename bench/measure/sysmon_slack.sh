#!/usr/bin/env bash
# What the service's Go runtime monitor costs with its timer slack widened
# (internal/sysmon, cmd/brig's sysmonSlack) and without: one service of its
# own, one `brig bench -c 2 --language python`, and during its warm phase the
# monitor's slack switched between a millisecond and the kernel's 50 us every
# WINDOW seconds. Each window gives the runs it finished, the service's CPU
# and the whole machine's per run, and the monitor's wakes a second: a
# window's neighbours in time are the comparison, so a slow stretch of the
# host moves both.
#   bash bench/measure/sysmon_slack.sh [WINDOW] [PAIRS]
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "run as root: the service needs it" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
win=${1:-4}
pairs=${2:-5}
bin=$here/../../bin/brig
dir=$(mktemp -d /tmp/brig-sysmon.XXXXXX)
"$bin" serve --socket "$dir/brig.sock" --state-dir "$dir/state" --cgroup-parent "brig-sysmon-$$" \
  --log-level debug > "$dir/log" 2>&1 &
svc=$!
trap 'kill $svc 2>/dev/null; wait $svc 2>/dev/null; rm -rf "$dir"; remove_parent_lock brig-sysmon-$$' EXIT
wait_serving "$dir/brig.sock" "$svc" "$dir/log"
# The monitor's thread, as the service logged it.
tid=$(grep -o '"thread":[0-9]*' "$dir/log" | head -1 | cut -d: -f2 || true)
[ -n "$tid" ] || tid=$(grep -o 'thread=[0-9]*' "$dir/log" | head -1 | cut -d= -f2 || true)
[ -n "$tid" ] || { echo "the service did not log its monitor's thread:" >&2; cat "$dir/log" >&2; exit 1; }
phase=$((2 * win * pairs + 2 * pairs + 6))
"$bin" bench --socket "$dir/brig.sock" -c 2 -d "${phase}s" --language python > "$dir/bench.txt" 2>&1 &
bench=$!
sleep $((phase + 3)) # the bare phase, and the warm phase's start
runs() { curl -s --unix-socket "$dir/brig.sock" http://brig/metrics | awk '/^brig_runs_total\{language="python"/ {s += $2} END {print s}'; }
cpu() { awk '{print $14 + $15}' "/proc/$svc/stat"; }
machine() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
wakes() { awk '/^voluntary_ctxt_switches/ {print $2}' "/proc/$svc/task/$tid/status"; }
hz=$(getconf CLK_TCK)
printf '%-10s %6s %16s %16s %14s\n' "slack, ns" "runs" "service ms/run" "machine ms/run" "monitor wakes/s"
for _ in $(seq "$pairs"); do
  for slack in 1000000 50000; do
    echo "$slack" > "/proc/$tid/timerslack_ns"
    sleep 0.5
    r0=$(runs) c0=$(cpu) m0=$(machine) w0=$(wakes)
    sleep "$win"
    r1=$(runs) c1=$(cpu) m1=$(machine) w1=$(wakes)
    awk -v s="$slack" -v r=$((r1 - r0)) -v c=$((c1 - c0)) -v m=$((m1 - m0)) -v w=$((w1 - w0)) -v hz="$hz" -v win="$win" \
      'BEGIN {printf "%-10d %6d %16.2f %16.2f %14.0f\n", s, r, c / hz / r * 1e3, m / hz / r * 1e3, w / win}'
  done
done
echo 1000000 > "/proc/$tid/timerslack_ns"
wait "$bench"
grep -E "^python +(bare|brig)" "$dir/bench.txt"
