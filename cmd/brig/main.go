// Command brig is the sandbox service and its tools. Each verb is a file of this
// package; this one turns flags into config structs and is the only place that
// exits.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

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
		// An unknown verb is an error that names the verbs, not urfave's
		// "No help topic" with status 3.
		CommandNotFound: func(c *cli.Context, name string) {
			if name == "help" {
				cli.ShowAppHelpAndExit(c, 0)
			}
			var names []string
			for _, cmd := range c.App.Commands {
				if !cmd.Hidden {
					names = append(names, cmd.Name)
				}
			}
			fmt.Fprintf(c.App.ErrWriter, "brig: unknown command %q: the commands are %s (brig COMMAND --help)\n", name, strings.Join(names, ", "))
			os.Exit(2)
		},
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
