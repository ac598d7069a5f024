// Package pid1 is the half of the jail that runs inside a sandbox, as pid 1 of
// its pid namespace: it builds the root (mounts, pivot_root), drops what can be
// dropped, starts the program (spawn_unsafe.go) or hands the sandbox to a
// zygote's child, and reaps. It also starts a zygote in a root of its own.
//
// It is a package of its own so that the binary every sandbox starts
// (cmd/brig-init) links this and nothing of the supervisor's side: no cgroup
// library, no libseccomp (the filter arrives compiled, and package bpf loads
// it), no metrics. Package jail, the other half, sends it a PrepareSpec and a
// RunSpec over its spec pipe and reads its Messages from its status pipe.
package pid1
