#!/bin/bash
# What a run that resets its tunnels to an upstream that never reads leaves in
# the host's TCP memory: BIN_DIR's `brig serve` (make build BIN=DIR/brig
# INIT_BIN=DIR/brig-init REAPER_BIN=DIR/brig-reaper) with sink.test:9000
# pinned to a loopback listener that accepts and never reads (its receive
# buffer 32 KiB); one Python run in mode domains opens 150 CONNECT tunnels to
# it, sends 900 KiB on each and resets it. Prints the run's outcome, the
# bytes_sent its connections list, and, 2 s after the run, the sockets to the
# sink left in FIN-WAIT-1 and the host's TCP memory (pages, /proc/net/sockstat)
# before and after. As root, on its own cgroup parent (brig-orphans) and a
# temporary state directory; loopback only.
#
#   bash bench/measure/egress_orphans.sh BIN_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bin=$1
dir=$(mktemp -d /tmp/brig-orphans.XXXXXX)
port=18900
python3 - "$port" <<'PY' &
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 10)
s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(1024)
held = []
while True:
    held.append(s.accept()[0])  # never read
PY
sink=$!
"$bin/brig" serve --socket "$dir/brig.sock" --state-dir "$dir/state" --cgroup-parent brig-orphans \
  --network-mode none --network-mode domains --egress-pin "sink.test:9000=127.0.0.1:$port" \
  --allow-private-host sink.test --log-level warn 2>"$dir/serve.log" &
svc=$!
trap 'kill $svc 2>/dev/null; wait $svc 2>/dev/null || true; kill $sink 2>/dev/null; rm -rf "$dir"; remove_parent_lock brig-orphans' EXIT
wait_serving "$dir/brig.sock" "$svc" "$dir/serve.log"
cat > "$dir/resets.py" <<'PY'
import socket, struct, time
for i in range(150):
    s = socket.create_connection(('127.0.0.1', 3128))
    s.sendall(b'CONNECT sink.test:9000 HTTP/1.1\r\n\r\n'); s.recv(200)
    s.settimeout(2)
    try:
        s.sendall(b'\0' * (900 << 10))
    except OSError:
        pass
    time.sleep(0.15)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0)); s.close()
PY
tcp_mem() { awk '/^TCP:/ {print $NF}' /proc/net/sockstat; }
before=$(tcp_mem)
"$bin/brig" run --socket "$dir/brig.sock" -l python --network domains --domain sink.test --timeout 120 \
  --json "$dir/resets.py" > "$dir/result.json" || true
sleep 2
orphans=$(ss -tnH state fin-wait-1 dst "127.0.0.1:$port" | wc -l)
after=$(tcp_mem)
python3 - "$dir/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
conns = r['network']['connections']
print('outcome %s; %d connections listed %d bytes sent' % (r['outcome'], len(conns), sum(c['bytes_sent'] for c in conns)))
PY
echo "FIN-WAIT-1 sockets to the sink 2 s after the run: $orphans; TCP memory: $before pages before, $after after"
