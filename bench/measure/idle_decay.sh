#!/usr/bin/env bash
# What a wait costs the process that waits: a program touches its pages (4,000
# anonymous ones and the first 6,000 of node's file, mapped), then, after
# idling 0 to 4 s, times a pass over the same pages, twice per wait. A warm
# sandbox's interpreter waits in the pool before its run; what it touches
# after the hand-over it touches after such a wait.
#   bash bench/measure/idle_decay.sh [FILE]
# FILE is the file mapped (default /usr/bin/node). Needs a C compiler; no
# privileges.
set -euo pipefail
file=${1:-/usr/bin/node}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/idle.c" <<'C'
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
int main(int argc, char **argv) {
	const long anon = 4000, filepages = 6000;
	volatile char *m = mmap(0, anon * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int fd = open(argv[1], O_RDONLY);
	if (m == MAP_FAILED || fd < 0)
		return 1;
	volatile char *f = mmap(0, filepages * 4096, PROT_READ, MAP_PRIVATE, fd, 0);
	if (f == MAP_FAILED)
		return 1;
	long sum = 0;
	for (long i = 0; i < anon; i++)
		m[i * 4096] = 1;
	for (long i = 0; i < filepages; i++)
		sum += f[i * 4096];
	const double waits[] = {0, 0.01, 0.1, 0.5, 1, 2, 4};
	for (int w = 0; w < 7; w++)
		for (int r = 0; r < 2; r++) {
			usleep((useconds_t)(waits[w] * 1e6));
			double t0 = now();
			for (long i = 0; i < anon; i++)
				m[i * 4096]++;
			double t1 = now();
			for (long i = 0; i < filepages; i++)
				sum += f[i * 4096];
			double t2 = now();
			printf("after %.2f s idle: %ld anonymous pages %.0f us, %ld of the file's %.0f us\n", waits[w], anon,
			       t1 - t0, filepages, t2 - t1);
		}
	return sum == 42;
}
C
cc -O2 -o "$dir/idle" "$dir/idle.c"
"$dir/idle" "$file"
