#!/usr/bin/env bash
# The heap limit node sets itself when it can read its cgroup's memory limit,
# as in a container that shows the cgroup, beside the one it sets where it
# can't (a brig run: no /sys/fs/cgroup in the sandbox), for README's memory
# paragraph. Each limit in a v1 memory group of its own, made and removed here.
#   bash bench/measure/node_heap.sh [MIB...]
# Needs root and cgroup v1's memory controller at /sys/fs/cgroup/memory.
set -euo pipefail
node=${NODE:-/usr/bin/node}
probe='const v8 = require("v8"); console.log((process.constrainedMemory() / 1048576) | 0, Math.round(v8.getHeapStatistics().heap_size_limit / 1048576))'
echo "limit_mib constrained_mib heap_size_limit_mib"
for mib in "${@:-128 512 2048}"; do
  for m in $mib; do
    g=/sys/fs/cgroup/memory/brig-node-heap-$$-$m
    mkdir "$g"
    trap 'rmdir "$g" 2>/dev/null || true' EXIT
    echo $((m << 20)) > "$g/memory.limit_in_bytes"
    echo -n "$m "
    sh -c "echo \$\$ > $g/cgroup.procs; exec $node -e '$probe'"
    rmdir "$g"
  done
done
echo -n "none (the host's) "
"$node" -e "$probe"
