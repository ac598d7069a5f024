#!/usr/bin/env bash
# What each namespace a sandbox gets costs to make and tear down: a C loop
# forks children that unshare the namespaces and exit, N times, and reports
# the loop's own CPU per child (its children's included) and the whole
# machine's (/proc/stat, after a pause for the kernel's deferred teardown of
# network namespaces, which a kernel worker does), against children that
# unshare nothing.
#   bash bench/measure/ns_cost.sh [N]
# Needs gcc. Nothing outside the children's own namespaces is touched.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "run as root: unshare needs it" >&2; exit 1; }
n=${1:-1000}
dir=$(mktemp -d /tmp/brig-ns-cost.XXXXXX)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/ns.c" <<'C'
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
static double cpu(void) {
	struct rusage s, c;
	getrusage(RUSAGE_SELF, &s);
	getrusage(RUSAGE_CHILDREN, &c);
	return s.ru_utime.tv_sec + s.ru_stime.tv_sec + c.ru_utime.tv_sec + c.ru_stime.tv_sec +
	       (s.ru_utime.tv_usec + s.ru_stime.tv_usec + c.ru_utime.tv_usec + c.ru_stime.tv_usec) / 1e6;
}
int main(int argc, char **argv) {
	int flags = strtol(argv[1], 0, 0), n = atoi(argv[2]);
	double c0 = cpu();
	for (int i = 0; i < n; i++) {
		pid_t p = fork();
		if (p == 0)
			_exit(flags && unshare(flags) ? 1 : 0);
		int st;
		if (waitpid(p, &st, 0) < 0 || st) {
			fprintf(stderr, "unshare(%#x) failed\n", flags);
			return 1;
		}
	}
	printf("%.3f", (cpu() - c0) / n * 1e3);
	return 0;
}
C
gcc -O2 -o "$dir/ns" "$dir/ns.c"
busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; } # user nice system irq softirq, in ticks
hz=$(getconf CLK_TCK)
printf '%-44s %14s %16s\n' "each child unshares" "its CPU, ms" "machine's, ms"
for f in "nothing:0" "mount:0x20000" "network:0x40000000" "ipc:0x8000000" "uts:0x4000000" "pid:0x20000000" \
  "all five (a sandbox's):0x6c020000"; do
  name=${f%%:*} flags=${f##*:}
  b0=$(busy)
  own=$("$dir/ns" "$flags" "$n")
  sleep 2 # the network namespaces' teardown, deferred to a kernel worker
  b1=$(busy)
  printf '%-44s %14s %16s\n' "$name" "$own" "$(awk -v t=$((b1 - b0)) -v n="$n" -v hz="$hz" 'BEGIN{printf "%.3f", t / hz / n * 1e3}')"
done
