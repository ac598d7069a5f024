#!/usr/bin/env bash
# Issue 9's figures (warm starts) in one invocation, so that every figure of
# the README's table comes from the same stretch of this machine:
#   bash bench/measure/warm_figures.sh [BINDIR]
# BINDIR holds brig, brig-init and brig-reaper (default: bin, from make build).
# It starts services of its own (a socket, a state directory and a cgroup
# parent, brig-measure, under a temporary directory; nothing shared with a
# running `brig serve`), one per pool size, and removes them when done. Needs
# perf (Debian's linux-perf) for the CPU by process. About eight minutes.
#
#   1. pool 4 (the default), both languages warm:
#      Python and JavaScript at C=2 (throughput, the service's CPU, cold),
#      at C=1 back to back and at C=1 a run every 50 ms (p50s);
#      where a warm Python run's CPU goes at C=2, by process;
#      the zygote and its child per warm run (page faults, CPU);
#      the idle prepared sandboxes' PSS;
#      request to the first byte of stdout (go test -bench FirstByte, when
#      the go toolchain is there);
#   2. pools of 1, 2 and 8: Python at C=2.
# `brig bench` runs a bare fork-exec loop of the same interpreter command in
# each invocation, in 3 rounds (--rounds: bare, warm and cold in turn, so
# that they share the machine's drift); compare its ratios to bare, not
# runs/s across invocations.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(cd "${1:-$here/../../bin}" && pwd)
. "$here/lib.sh"
[ "$(id -u)" = 0 ] || { echo "run as root: the service needs it" >&2; exit 1; }
for t in brig brig-init brig-reaper; do
  [ -x "$bin/$t" ] || { echo "$bin/$t is missing: make build" >&2; exit 1; }
done
command -v perf >/dev/null || { echo "perf is missing: apt-get install linux-perf" >&2; exit 1; }
dir=$(mktemp -d /tmp/brig-figures.XXXXXX)
sock=$dir/brig.sock
svc=
stop() {
  if [ -n "$svc" ]; then
    kill "$svc" 2>/dev/null || true
    wait "$svc" 2>/dev/null || true
    svc=
  fi
}
trap 'stop; rm -rf "$dir"; remove_parent_lock brig-measure' EXIT
cat > "$dir/brig.toml" <<EOF
[sandbox]
cgroup_parent = "brig-measure"
EOF

serve() { # serve POOL: a service with this pool, its pools full
  stop
  rm -rf "$dir/state"
  "$bin/brig" serve --config "$dir/brig.toml" --socket "$sock" --state-dir "$dir/state" \
    --max-concurrent 32 --pool "$1" --log-format text > "$dir/serve-$1.log" 2>&1 &
  svc=$!
  wait_serving "$sock" "$svc" "$dir/serve-$1.log"
}

bench() { # bench TITLE ARGS...: one brig bench in 3 rounds, its table and CPU lines
  local title=$1
  shift
  echo "== $title"
  "$bin/brig" bench --socket "$sock" --rounds 3 "$@" | grep -E '^(python|javascript) |^  (python|javascript) +(bare|brig)|MISS|PASS'
  echo
}

date -u '+%Y-%m-%d %H:%M UTC'
echo "bare /usr/bin/python3 -c 'print(1)', one at a time (perf stat -r 30):"
perf stat -r 30 /usr/bin/python3 -c 'print(1)' 2>&1 >/dev/null | grep -E 'task-clock|page-faults' | sed 's/^/  /'
echo

serve 4
bench "pool 4, Python, C=2" -c 2 -n 300 --language python
bench "pool 4, Python, C=1 back to back" -c 1 -n 150 --language python
bench "pool 4, Python, C=1 a run every 50 ms" -c 1 -n 100 --spacing 50ms --language python
bench "pool 4, JavaScript, C=2" -c 2 -n 150 --language javascript
bench "pool 4, JavaScript, C=1 back to back" -c 1 -n 60 --language javascript
bench "pool 4, JavaScript, C=1 a run every 50 ms" -c 1 -n 60 --spacing 50ms --language javascript
echo "== pool 4, where a warm Python run's CPU goes at C=2"
BRIG="$bin/brig" bash "$here/cpu_by_process.sh" "$sock" python 2 | sed -n '/^CPU and context switches/,$p'
echo
echo "== pool 4, the zygote and its child per warm run (100 runs one after another)"
serve 4 # a fresh zygote: one replaced during the measurement spoils it
bash "$here/zygote_child.sh" "$sock" || echo "(not measured: the zygote was replaced; run again)"
echo
echo "== pool 4, idle prepared sandboxes"
sleep 3
python3 "$here/idle_pss.py"
echo

echo "== request to the first byte of stdout, a sandbox waiting (the jail in-process, medians of 100)"
stop
if command -v go >/dev/null; then
  # The jail's log lines come between a benchmark's name and its figures.
  (cd "$here/../.." && go test -tags urfave_cli_no_docs -run XXX -bench FirstByte -benchtime 100x ./jail/ 2>&1 |
    grep -oE '^BenchmarkFirstByte[^ ]*|[0-9.]+ first-byte-ms' | paste - - | sed 's/^/  /')
else
  echo "  (not measured: no go toolchain)"
fi
echo

for pool in 1 2 8; do
  serve "$pool"
  bench "pool $pool, Python, C=2" -c 2 -n 200 --language python
done
