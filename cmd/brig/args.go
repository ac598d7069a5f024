package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// interspersed moves a verb's positional arguments after its flags. urfave/cli v2
// stops reading flags at the first positional argument, and API.md's command
// lines put flags after one (`brig rootfs build python --dir DIR`). A lone "-" is
// positional (the program on stdin); after "--" everything is.
func interspersed(cmds []*cli.Command, args []string) []string {
	verb, cmd, flags, positional := splitArgs(cmds, args)
	if cmd == nil {
		return args
	}
	out := append(verb, flags...)
	if len(positional) > 0 {
		out = append(out, "--")
	}
	return append(out, positional...)
}

// splitArgs parts args into the program and its verbs, the verb's flags with
// their values, and its positional arguments; cmd is the verb, nil for none.
func splitArgs(cmds []*cli.Command, args []string) (verb []string, cmd *cli.Command, flags, positional []string) {
	if len(args) < 2 {
		return args, nil, nil, nil
	}
	verb = []string{args[0]}
	rest := args[1:]
	for len(rest) > 0 {
		next := findCommand(cmds, rest[0])
		if next == nil {
			break
		}
		cmd, cmds = next, next.Subcommands
		verb = append(verb, rest[0])
		rest = rest[1:]
	}
	if cmd == nil {
		return args, nil, nil, nil
	}
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
	return verb, cmd, flags, positional
}

// notDecimalRE is a whole number the flag package would read in another base
// (a leading 0, 0x, 0o, 0b) or with Go's underscores; other text reaches its
// own refusal, which flagError words.
var notDecimalRE = regexp.MustCompile(`^[+-]?(0[0-9xXoObB_]|[0-9]+_)`)

// checkDecimal refuses a whole-number flag's value that is not written in
// decimal: the flag package reads "010" as octal 8 and "0x10" as 16, and
// `brig run --timeout 010` had killed its run after 8 s (the limits probe of
// 2026-12-06).
func checkDecimal(cmds []*cli.Command, args []string) error {
	verb, cmd, flags, _ := splitArgs(cmds, args)
	if cmd == nil {
		return nil
	}
	for i := 0; i < len(flags); i++ {
		name, value, inline := strings.Cut(strings.TrimLeft(flags[i], "-"), "=")
		if !inline {
			if !takesValue(cmd, flags[i]) || i+1 >= len(flags) {
				continue
			}
			i++
			value = flags[i]
		}
		for _, f := range cmd.Flags {
			if !slices.Contains(f.Names(), name) {
				continue
			}
			switch f.(type) {
			case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag, *cli.IntSliceFlag, *cli.Int64SliceFlag:
				if notDecimalRE.MatchString(value) {
					return fmt.Errorf("%s %q: give it in decimal, as a whole number without leading zeros (brig %s --help lists the flags)", dashed(name), value, strings.Join(verb[1:], " "))
				}
			}
		}
	}
	return nil
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
