#!/usr/bin/env bash
# What a Go process's start costs in CPU, without and with cgo, against
# brig-init's: the floor a sandbox's init pays before its first step.
#   bash bench/measure/go_start.sh        (after make build)
set -euo pipefail
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/main.go" <<'GO'
package main

import "os"

func main() { os.Stdout.WriteString("") }
GO
printf 'module gostart\ngo 1.22\n' > "$dir/go.mod"
(cd "$dir" && CGO_ENABLED=0 go build -o nocgo . )
cat > "$dir/cgo.go" <<'GO'
package main

// #include <unistd.h>
import "C"

var _ = C.getpid
GO
(cd "$dir" && CGO_ENABLED=1 go build -o withcgo . )
top=$(cd "$(dirname "$0")/../.." && pwd)
for b in "$dir/nocgo" "$dir/withcgo" "$top/bin/brig-init stamp"; do
  printf '%-28s ' "$(basename ${b%% *})"
  perf stat -r 300 $b 2>&1 >/dev/null | awk '/task-clock/ {print $1, "ms of CPU"}'
done
