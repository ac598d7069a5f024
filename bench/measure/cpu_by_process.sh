#!/usr/bin/env bash
# Where a run's CPU goes, by process, on the service's default path: perf
# samples the whole machine for 3 s in the middle of `brig bench`'s brig phase
# (each phase runs 5 s with -d) and splits them by the process that used them.
#   bash bench/measure/cpu_by_process.sh [SOCKET] [LANGUAGE] [CONCURRENCY]
# With a service running (make serve, or bin/brig serve --socket SOCKET).
# Needs perf (Debian's linux-perf). The figures are ms of CPU per run at the
# rate the bench reached: "service" is the brig serve process, "brig (other)"
# the bench's own client and the service's children before they exec
# brig-init, "brig-init" every sandbox's init, "brig-reaper" the pid 1 of a
# zygote's sandbox (jail/reaper), "python3"/"node" the programs,
# the zygote and its children, the rest the kernel's threads and idle.
set -euo pipefail
sock=${1:-/run/brig/brig.sock}
lang=${2:-python}
conc=${3:-1}
# BRIG: the brig binary whose bench drives the load (default: the repository's
# bin/brig; warm_figures.sh passes its BINDIR's).
bin=${BRIG:-$(dirname "$0")/../../bin/brig}
svc=$(pgrep -f "brig serve.*$sock" | head -1 || true)
[ -n "$svc" ] || svc=$(pgrep -xf ".*brig serve" | head -1 || true)
[ -n "$svc" ] || { echo "no brig serve process found for $sock" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bin" bench --socket "$sock" -c "$conc" -d 5s --language "$lang" > "$dir/bench.txt" 2>&1 &
bench=$!
# The bare phase takes 5 s, then a short warm-up: the brig phase runs from
# about 5.1 s to 10.1 s.
sleep 6
perf record -a -e 'cpu-clock/freq=2000/' -e sched:sched_switch -o "$dir/perf.data" -- sleep 3 >/dev/null 2>&1
wait "$bench"
cat "$dir/bench.txt"
rate=$(awk -v l="$lang" '$1 == l && $2 == "brig" && $3 ~ /^[0-9]+$/ {print $5; exit}' "$dir/bench.txt")
ncpu=$(nproc)
echo
echo "CPU and context switches (the process switched out) per run by process, $lang brig phase"
echo "at concurrency $conc ($rate runs/s; perf over 3 s of $ncpu CPUs):"
perf script -i "$dir/perf.data" -F comm,pid,event 2>/dev/null |
  awk -v svc="$svc" -v rate="$rate" -v ncpu="$ncpu" '
    { ev = $NF; pid = $(NF-1); comm = $1  # perf prints the command, the pid, the event
      if (comm == "brig") key = (pid == svc) ? "service (brig serve)" : "brig (other)"
      else if (comm ~ /^swapper/) key = "idle"
      else if (comm ~ /^(kworker|ksoftirqd|rcu_|migration|kdamond|khugepaged)/) key = "kernel threads"
      else key = comm
      if (ev ~ /sched_switch/) sw[key]++
      else { c[key]++; n++ } }
    END { for (k in c) printf "  %6.2f ms  %6.1f switches  %s\n", c[k] / n * ncpu * 1000 / rate, sw[k] / (3 * rate), k }' | sort -rn
