#!/usr/bin/env bash
# What a start without a C library saves: the CPU of `bin/brig-reaper stamp`
# (jail/reaper, built by make without a C library) against an empty static
# glibc program, whose start probes the CPU's features (CPUID, a trap to the
# hypervisor on a VM). The two in turn, ROUNDS times, perf stat -r 300 each.
#   bash bench/measure/reaper_start.sh [ROUNDS]
# After make build. Needs perf (Debian's linux-perf) and cc.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-2}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
echo 'int main(void) { return 0; }' > "$dir/empty.c"
cc -O2 -static -o "$dir/empty-glibc" "$dir/empty.c"
for r in $(seq "$rounds"); do
  for cmd in "bin/brig-reaper stamp" "$dir/empty-glibc"; do
    ms=$(perf stat -x, -e task-clock -r 300 $cmd 2>&1 >/dev/null | awk -F, '/task-clock/ {print $1}')
    printf 'round %d  %-28s %.3f ms of CPU\n' "$r" "$(basename "${cmd%% *}")" "$ms"
  done
done
