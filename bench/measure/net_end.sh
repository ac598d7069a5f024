#!/bin/bash
# What a networked run's end costs after its program: BIN_DIR's `brig serve`
# (make build BIN=DIR/brig INIT_BIN=DIR/brig-init REAPER_BIN=DIR/brig-reaper)
# with web.test:80 pinned to a loopback `python3 -m http.server`; N (40) runs
# in mode domains each fetch 200 KiB with urllib through the proxy. Prints
# how many succeeded with the whole body and the spread of total_ms less
# wall_ms (the run's end after its program's, egress's Close included). As
# root, on its own cgroup parent (brig-netend); loopback only.
#
#   bash bench/measure/net_end.sh BIN_DIR [N]
set -euo pipefail
B=$1; N=${2:-40}; D=$(mktemp -d /tmp/brig-netend.XXXXXX)
python3 -m http.server 18931 --bind 127.0.0.1 --directory $D >/dev/null 2>&1 & WEB=$!
head -c 204800 /dev/urandom > $D/blob
$B/brig serve --socket $D/s.sock --state-dir $D/state --cgroup-parent brig-netend --network-mode none --network-mode domains --egress-pin web.test:80=127.0.0.1:18931 --allow-private-host web.test --log-level warn 2>$D/serve.log & SV=$!
for i in $(seq 100); do curl -sf --unix-socket $D/s.sock http://brig/v1/health >/dev/null && break; sleep 0.2; done; sleep 2
printf 'import urllib.request\nb=urllib.request.urlopen("http://web.test/blob").read()\nprint(len(b))\n' > $D/p.py
for i in $(seq $N); do $B/brig run --socket $D/s.sock -l python --network domains --domain web.test --json $D/p.py | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)))"; done > $D/res.jsonl
python3 - $D/res.jsonl <<'PY'
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ok = [r for r in rs if r['outcome'] == 'succeeded' and r['stdout'] == '204800\n']
d = sorted(r['timing']['total_ms'] - r['usage']['wall_ms'] for r in rs)
print(len(rs), 'runs', len(ok), 'ok; total-wall ms p50', d[len(d)//2], 'max', d[-1], '; outcomes', sorted(set((r['outcome'], r.get('reason','')) for r in rs)))
PY
kill -TERM $SV; wait $SV; kill $WEB; rm -rf $D; f=/run/brig/locks/brig-cgroup-brig-netend.lock; [ -e $f ] && flock -n $f rm -f $f
