// Command brig-init is a sandbox's init: brig starts one in each new sandbox,
// as pid 1 of its pid namespace, to build the sandbox's root and start its
// program (package jail/pid1). It is brig's own init in a binary of its own,
// which links pid1 and nothing of the service (the cgroups, the metrics, the
// CLI, the journal, the HTTP server, libseccomp), and is built without cgo
// into a static binary, so that its start, paid once per sandbox, costs less
// (see jail.InitBinary). brig uses it when it lies
// next to the brig binary and comes from the same build
// (jail.DefaultInitPath), and re-executes itself otherwise. It is not a
// command to run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/brig-sandbox/brig/jail/pid1"
)

func main() {
	pid1.Main()
	switch {
	case len(os.Args) == 2 && os.Args[1] == pid1.StampArg:
		fmt.Println(pid1.BuildStamp())
	default:
		fmt.Fprintln(os.Stderr, "brig-init is the init brig starts in each sandbox; it is not run by hand (see brig serve)")
		os.Exit(2)
	}
}
