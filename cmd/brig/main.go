// Command brig is the sandbox service and its tools. Each verb is a file of this
// package; this one turns flags into config structs and is the only place that
// exits.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/brig-sandbox/brig/jail/pid1"
)

// exitError carries a process exit status out of a verb without printing anything.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func main() {
	// A run's init is this binary re-executed: it must reach pid1.Main before
	// anything else starts.
	pid1.Main()
	app := &cli.App{
		Name:  "brig",
		Usage: "run untrusted Python and JavaScript in fresh, isolated sandboxes",
		Commands: []*cli.Command{
			serveCommand(),
			runCommand(),
			checkCommand(),
			rootfsCommand(),
			benchCommand(),
			packagesCommand(),
		},
		HideHelpCommand: true,
	}
	if err := app.Run(interspersed(app.Commands, os.Args)); err != nil {
		var code exitError
		if errors.As(err, &code) {
			os.Exit(int(code))
		}
		fmt.Fprintln(os.Stderr, "brig:", err)
		os.Exit(2)
	}
}
