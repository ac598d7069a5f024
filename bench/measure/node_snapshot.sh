#!/usr/bin/env bash
# A Node userland startup snapshot against plain node, for console.log(1):
# CPU per start by perf stat (30 starts each).
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
node --snapshot-blob "$dir/snap.blob" --build-snapshot "$dir/snap.js"
echo "plain node:"
perf stat -r 30 node "$dir/main.js" 2>&1 >/dev/null | grep -E 'task-clock'
echo "node with the userland snapshot:"
perf stat -r 30 node --snapshot-blob "$dir/snap.blob" "$dir/main.js" 2>&1 >/dev/null | grep -E 'task-clock'
