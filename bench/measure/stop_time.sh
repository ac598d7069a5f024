#!/bin/bash
# How long an idle service takes to stop: BIN_DIR's `brig serve` (make build
# BIN=DIR/brig INIT_BIN=DIR/brig-init REAPER_BIN=DIR/brig-reaper), left idle
# for 12 s (its pools full, its Python zygote forked), then SIGTERM, ROUNDS
# times (3). Prints each stop's milliseconds. As root, on its own cgroup
# parent (brig-stoptime) and a temporary state directory.
#
#   bash bench/measure/stop_time.sh BIN_DIR [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bin=$1
rounds=${2:-3}
for _ in $(seq "$rounds"); do
  dir=$(mktemp -d)
  "$bin/brig" serve --socket "$dir/brig.sock" --state-dir "$dir/state" --cgroup-parent brig-stoptime \
    --log-level warn 2>"$dir/serve.log" &
  pid=$!
  wait_serving "$dir/brig.sock" "$pid" "$dir/serve.log"
  sleep 9 # 12 s in all: the pools full
  start=$(date +%s%N)
  kill -TERM "$pid"
  wait "$pid" || true
  echo "stopped in $(( ($(date +%s%N) - start) / 1000000 )) ms"
  rm -rf "$dir"
  remove_parent_lock brig-stoptime
done
