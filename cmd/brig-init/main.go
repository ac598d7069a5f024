// Command brig-init is a sandbox's init: brig starts one in each new sandbox,
// as pid 1 of its pid namespace, to build the sandbox's root and start its
// program (jail.Init). It is brig's own init in a binary of its own, which
// links the jail and nothing of the service (the metrics, the CLI, the
// journal, the HTTP server), so that its start, paid once per sandbox, costs
// less (see jail.InitBinary). brig uses it when it lies next to the brig
// binary and comes from the same build (jail.DefaultInitPath), and
// re-executes itself otherwise. It is not a command to run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/brig-sandbox/brig/jail"
)

func main() {
	jail.InitMain()
	switch {
	case len(os.Args) == 2 && os.Args[1] == jail.StampArg:
		fmt.Println(jail.BuildStamp())
	default:
		fmt.Fprintln(os.Stderr, "brig-init is the init brig starts in each sandbox; it is not run by hand (see brig serve)")
		os.Exit(2)
	}
}
