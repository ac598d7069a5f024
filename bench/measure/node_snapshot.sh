#!/usr/bin/env bash
# A Node userland startup snapshot against plain node, for console.log(1):
# CPU per start by perf stat (30 starts each), with the environment emptied
# as a run's node has it (a NODE_EXTRA_CA_CERTS in the caller's, which node
# reads at its start, took it from about 45 to 120 ms here).
#   bash bench/measure/node_snapshot.sh
set -euo pipefail
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
echo 'console.log(1)' > "$dir/main.js"
cat > "$dir/snap.js" <<'JS'
require('v8').startupSnapshot.setDeserializeMainFunction(() => {
  const src = require('fs').readFileSync(process.argv[2], 'utf8');
  new Function('require', src)(require);
});
JS
node=$(command -v node)
env -i "$node" --snapshot-blob "$dir/snap.blob" --build-snapshot "$dir/snap.js"
echo "plain node:"
perf stat -r 30 env -i "$node" "$dir/main.js" 2>&1 >/dev/null | grep -E 'task-clock'
echo "node with the userland snapshot:"
perf stat -r 30 env -i "$node" --snapshot-blob "$dir/snap.blob" "$dir/main.js" 2>&1 >/dev/null | grep -E 'task-clock'
