#!/usr/bin/env bash
# A warm JavaScript run's node against a cold one's, each over its whole life:
# its CPU (every thread's, to its last thread's exit, so with its teardown)
# and page faults, read by bpftrace at the exit of the process's last thread,
# which perf's sampling and a program's own process.cpuUsage() (at its exit
# event, before the teardown) do not give. A service of its own (cgroup
# parent brig-exitcpu, under a temporary directory), then N rounds of a
# console.log(1) run warm and one made cold by its environment (a NODE_
# variable keeps a run off the warm pool: jail/warm.go), 0.3 s apart; a node
# that lived over 250 ms is a warm one (it waited in the pool), a cold one
# lives as long as its start. The main thread's CPU from its program's open
# to its exit is the same work for both, done after the wait by a warm node.
#   bash bench/measure/exit_cpu.sh [BINDIR] [N]
# BINDIR holds brig, brig-init and brig-reaper (default: bin); N 20. Needs
# bpftrace (Debian's bpftrace) and root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(cd "${1:-$here/../../bin}" && pwd)
n=${2:-20}
. "$here/lib.sh"
[ "$(id -u)" = 0 ] || { echo "run as root: the service and bpftrace need it" >&2; exit 1; }
command -v bpftrace >/dev/null || { echo "needs bpftrace (apt-get install bpftrace)" >&2; exit 1; }
bt=
on_exit='[ -n "$bt" ] && kill "$bt" 2>/dev/null'
own_service brig-exitcpu
# At the exit of a process's last thread: the exited threads' runtime
# (signal->sum_sched_runtime), this thread's and its leader's (a zombie by
# then, unless it is this one), and their minor faults. Besides, the main
# thread's runtime when it opens the program (/sandbox/main.js: a cold node
# to load it, a warm one after its hand-over) and when it exits.
cat > "$dir/exit.bt" <<'BT'
tracepoint:sched:sched_process_exec /comm == "node"/ { @node[pid] = 1; }
tracepoint:syscalls:sys_enter_openat /@node[pid]/ {
  if (str(args->filename) == "/sandbox/main.js") { printf("open %d %d\n", pid, curtask->se.sum_exec_runtime / 1000); }
}
tracepoint:sched:sched_process_exit /comm == "node"/ {
  $p = curtask;
  if ($p->pid == $p->tgid) { printf("main %d %d\n", pid, $p->se.sum_exec_runtime / 1000); }
  if ($p->signal->live.counter == 0) {
    $l = $p->group_leader;
    $cpu = $p->signal->sum_sched_runtime + $p->se.sum_exec_runtime;
    $flt = $p->signal->min_flt + $p->min_flt;
    if ($l != $p) { $cpu = $cpu + $l->se.sum_exec_runtime; $flt = $flt + $l->min_flt; }
    printf("exit %d %d %d %d\n", pid, (nsecs - $l->start_time) / 1000000, $cpu / 1000, $flt);
    delete(@node[pid]);
  }
}
BT
bpftrace "$dir/exit.bt" > "$dir/exits" 2> "$dir/bt.err" &
bt=$!
for _ in $(seq 50); do grep -q Attaching "$dir/exits" 2>/dev/null && break; sleep 0.2; done
grep -q Attaching "$dir/exits" || { cat "$dir/bt.err" >&2; exit 1; }
for _ in $(seq "$n"); do
  for env in '{}' '{"NODE_BRIG_MEASURE":"1"}'; do
    curl -sf --unix-socket "$dir/brig.sock" -H 'content-type: application/json' \
      -d "{\"language\":\"javascript\",\"code\":\"console.log(1)\",\"env\":$env}" http://brig/v1/runs > /dev/null
    sleep 0.3
  done
done
sleep 0.5
kill "$bt"; wait "$bt" 2>/dev/null || true; bt=
python3 - "$dir/exits" <<'PY'
import collections, statistics, sys
rows, opened, main = [], {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    if f and f[0] == 'exit':
        rows.append(tuple(map(int, f[1:])))  # pid, age ms, CPU us, faults
    elif f and f[0] in ('open', 'main'):
        (opened if f[0] == 'open' else main)[int(f[1])] = int(f[2])
for name, keep in (('warm (lived over 250 ms)', lambda age: age > 250), ('cold', lambda age: age <= 250)):
    v = [r for r in rows if keep(r[1])]
    if not v:
        print(name + ': none'); continue
    cpu = sorted(r[2] / 1000 for r in v)
    after = [(main[r[0]] - opened[r[0]]) / 1000 for r in v if r[0] in opened and r[0] in main]
    print('%s: %d nodes, CPU %.2f ms median (%.2f to %.2f), %d page faults; the main thread from its program\'s open to its exit %s' % (
        name, len(v), statistics.median(cpu), cpu[0], cpu[-1], statistics.median(r[3] for r in v),
        '%.2f ms median (%d nodes)' % (statistics.median(after), len(after)) if after else 'not seen'))
PY
