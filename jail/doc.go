// Package jail runs one program in a fresh sandbox: new user, mount, pid, net, ipc,
// uts and cgroup namespaces, a run cgroup with memory, pids and CPU limits, a tmpfs
// overlay on a read-only language rootfs, host ids of the sandbox's own (ids.go) with
// no capabilities, no_new_privs and a seccomp filter.
//
// The parent half (Launcher: launcher.go, the pool of prepared inits in pool.go,
// the end of a run in result.go) lives in the supervisor or in `brig run
// --local`. It clones the init (brig-init, or brig re-executed: initpath.go) into new
// namespaces and into the run's cgroup, hands it the run's spec over a pipe, streams
// the program's output through capped readers, enforces the deadline and reads usage
// and OOM kills from the cgroup. The child half (package pid1, which brig-init alone
// links) builds the root, drops every privilege, starts the interpreter in a user
// namespace of its own under the filter (pid1's spawn_unsafe.go), and stays behind
// as the pid namespace's init: it reaps
// orphans, keeps the program from being PID 1, and reports the program's wait
// status. When the program exits the init exits, and the kernel kills
// everything left in the pid namespace.
//
// Cloning the init and, on cgroup v1, moving it into the run's cgroup (which can wait
// a whole RCU grace period) happen before a run needs them: the Launcher keeps a
// small pool of inits that wait, each alone in its own fresh namespaces and cgroup,
// for a spec. No two runs ever share an init, a namespace or a cgroup.
//
// Typical use:
//
//	l, err := jail.NewLauncher(jail.Config{StateDir: dir, Rootfs: p, Cgroups: m})
//	defer l.Close()
//	res, err := l.Run(ctx, jail.Spec{Language: rootfs.Python, Code: "print(1)", ...})
package jail
