package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// interspersed moves a verb's positional arguments after its flags. urfave/cli v2
// stops reading flags at the first positional argument, and API.md's command
// lines put flags after one (`brig rootfs build python --dir DIR`). A lone "-" is
// positional (the program on stdin); after "--" everything is.
func interspersed(cmds []*cli.Command, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	rest := args[1:]
	var cmd *cli.Command
	for len(rest) > 0 {
		next := findCommand(cmds, rest[0])
		if next == nil {
			break
		}
		cmd, cmds = next, next.Subcommands
		out = append(out, rest[0])
		rest = rest[1:]
	}
	if cmd == nil {
		return args
	}
	var flags, positional []string
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		switch {
		case a == "--":
			positional = append(positional, rest[i+1:]...)
			i = len(rest)
		case a == "-" || !strings.HasPrefix(a, "-"):
			positional = append(positional, a)
		default:
			flags = append(flags, a)
			if takesValue(cmd, a) && i+1 < len(rest) {
				i++
				flags = append(flags, rest[i])
			}
		}
	}
	out = append(out, flags...)
	if len(positional) > 0 {
		out = append(out, "--")
	}
	return append(out, positional...)
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// takesValue reports whether the flag arg (as written: "-x", "--name") is one of
// cmd's that takes its value from the next argument.
func takesValue(cmd *cli.Command, arg string) bool {
	name := strings.TrimLeft(arg, "-")
	if strings.Contains(name, "=") {
		return false
	}
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			_, isBool := f.(*cli.BoolFlag)
			return !isBool
		}
	}
	return false
}
