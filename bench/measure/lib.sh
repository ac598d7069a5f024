# Shared by the measurement scripts that start a service of their own
# (sourced: `. "$here/lib.sh"`).

# wait_serving SOCKET PID LOG: waits until the service PID answers on SOCKET
# (if it dies first, its log LOG is shown and the script exits), then lets its
# pools fill.
wait_serving() {
  for _ in $(seq 100); do
    curl -sf --unix-socket "$1" http://brig/v1/health >/dev/null 2>&1 && break
    kill -0 "$2" 2>/dev/null || { cat "$3" >&2; exit 1; }
    sleep 0.2
  done
  sleep 3 # the pools fill
}

# remove_parent_lock PARENT: removes the lock file a service leaves for the
# next one on its cgroup parent (cgroup.ParentLockPath), once no service holds
# it, as the Go tests and the clients' harnesses do.
remove_parent_lock() {
  local f=/run/brig/locks/brig-cgroup-$1.lock
  [ -e "$f" ] && flock -n "$f" rm -f "$f" || true
}

# own_service PARENT: starts "$bin/brig serve" (set bin first) on cgroup
# parent PARENT, with its socket ($dir/brig.sock), state and log in a new
# temporary directory $dir, and waits until it serves; at the script's exit
# it runs $on_exit when set (the script's own cleanup), stops the service,
# removes $dir and the parent's lock file.
own_service() {
  parent=$1
  dir=$(mktemp -d "/tmp/$parent.XXXXXX")
  svc=
  trap 'if [ -n "${on_exit:-}" ]; then eval "$on_exit" || true; fi; [ -n "$svc" ] && { kill "$svc" 2>/dev/null; wait "$svc" 2>/dev/null || true; }; rm -rf "$dir"; remove_parent_lock "$parent"' EXIT
  printf '[sandbox]\ncgroup_parent = "%s"\n' "$parent" > "$dir/brig.toml"
  "$bin/brig" serve --config "$dir/brig.toml" --socket "$dir/brig.sock" --state-dir "$dir/state" \
    --log-level warn > "$dir/serve.log" 2>&1 &
  svc=$!
  wait_serving "$dir/brig.sock" "$svc" "$dir/serve.log"
}
