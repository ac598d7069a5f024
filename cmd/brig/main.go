// Command brig is the sandbox service and its tools. Each verb is a file of this
// package; this one turns flags into config structs and is the only place that
// exits.
package main

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/jail/pid1"
)

// exitError carries a process exit status out of a verb without printing anything.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func main() {
	// A run's init is this binary re-executed: it must reach pid1.Main before
	// anything else starts.
	pid1.Main()
	if os.Getpid() == 1 {
		os.Exit(runAsPIDOne())
	}
	jail.ResetInherited()
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
		Version:         version(),
		HideHelpCommand: true,
		// A repeatable flag takes each value whole: urfave splits them at
		// commas by default, which cut a package request ("pandas>=2,<3"),
		// an extras list and an env value in two.
		DisableSliceFlagSeparator: true,
		// An unknown verb is an error that names the verbs, not urfave's
		// "No help topic" with status 3.
		CommandNotFound: func(c *cli.Context, name string) {
			cmds, path := c.App.Commands, "brig"
			if c.Command != nil && c.Command.Name != c.App.Name && len(c.Command.Subcommands) > 0 {
				// brig packages bogus: the verb's own subcommands.
				cmds, path = c.Command.Subcommands, "brig "+c.Command.Name
			}
			if name == "help" {
				if topic := c.Args().Get(1); topic != "" && path == "brig" {
					if err := cli.ShowCommandHelp(c, topic); err == nil {
						os.Exit(0)
					}
				}
				cli.ShowAppHelpAndExit(c, 0)
			}
			var names []string
			for _, cmd := range cmds {
				if !cmd.Hidden && cmd.Name != "help" {
					names = append(names, cmd.Name)
				}
			}
			fmt.Fprintf(c.App.ErrWriter, "brig: unknown command %q: the commands are %s (%s COMMAND --help)\n", name, strings.Join(names, ", "), path)
			os.Exit(2)
		},
	}
	app.OnUsageError = func(_ *cli.Context, err error, _ bool) error {
		return fmt.Errorf("%s (brig --help lists the flags and commands)", flagError(err, app.Flags))
	}
	briefUsageErrors(app.Commands, "brig")
	refuseArguments(app.Commands, "brig")
	if err := checkDecimal(app.Commands, os.Args); err != nil {
		noticef("brig: %v\n", err)
		os.Exit(2)
	}
	if err := app.Run(interspersed(app.Commands, os.Args)); err != nil {
		var code exitError
		if errors.As(err, &code) {
			os.Exit(int(code))
		}
		noticef("brig: %v\n", err)
		os.Exit(2)
	}
}

// version is the build's stamp (make's: the commit and the build's time), or
// the module's version control revision for a plain go build.
func version() string {
	if s := pid1.BuildStamp(); s != "" {
		return s
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, kv := range info.Settings {
			if kv.Key == "vcs.revision" {
				return kv.Value + " (built without make)"
			}
		}
	}
	return "unknown (built without make)"
}

// refuseArguments makes a verb that takes no arguments refuse them, rather
// than run without what the user meant (`brig serve /etc/brig/brig.toml`
// served the built-in defaults).
func refuseArguments(cmds []*cli.Command, prefix string) {
	for _, cmd := range cmds {
		path := prefix + " " + cmd.Name
		refuseArguments(cmd.Subcommands, path)
		action := cmd.Action
		if action == nil || cmd.ArgsUsage != "" {
			continue
		}
		cmd.Action = func(c *cli.Context) error {
			if c.NArg() > 0 {
				hint := ""
				if a := c.Args().First(); strings.HasSuffix(a, ".toml") {
					hint = fmt.Sprintf("; to read a config file, give it as --config %s", a)
				}
				return fmt.Errorf("%s takes no arguments, got %q%s (%s --help lists the flags)", path, c.Args().Slice(), hint, path)
			}
			return action(c)
		}
	}
}

// briefUsageErrors makes a bad flag value an error of one line that says where
// the flags are listed, rather than the whole help text before the error.
func briefUsageErrors(cmds []*cli.Command, prefix string) {
	for _, cmd := range cmds {
		path := prefix + " " + cmd.Name
		flags := cmd.Flags
		cmd.OnUsageError = func(_ *cli.Context, err error, _ bool) error {
			return fmt.Errorf("%s (%s --help lists the flags)", flagError(err, flags), path)
		}
		briefUsageErrors(cmd.Subcommands, path)
	}
}

var (
	badValueRE    = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-(\S+): (.*)$`)
	unknownFlagRE = regexp.MustCompile(`^flag provided but not defined: -(\S+)$`)
)

// flagError words the flag package's parse errors ("invalid value "1.5" for
// flag -timeout: parse error") as what the flag wants.
func flagError(err error, flags []cli.Flag) string {
	if m := unknownFlagRE.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Sprintf("there is no flag %s", dashed(m[1]))
	}
	m := badValueRE.FindStringSubmatch(err.Error())
	if m == nil {
		return err.Error()
	}
	value, name, reason := m[1], m[2], m[3]
	if v, err := strconv.Unquote(value); err == nil {
		value = v // quoted once more below
	}
	for _, f := range flags {
		if !slices.Contains(f.Names(), name) {
			continue
		}
		want := ""
		switch f.(type) {
		case *cli.IntFlag, *cli.Int64Flag:
			want = "a whole number"
		case *cli.IntSliceFlag:
			want = "a whole number (the flag repeats for more)"
		case *cli.UintFlag, *cli.Uint64Flag:
			want = "a whole number, 0 or more"
		case *cli.Float64Flag:
			want = "a number"
		case *cli.DurationFlag:
			want = "a duration such as 30s or 2m"
		case *cli.BoolFlag:
			want = "true or false"
		}
		usage := ""
		if d, ok := f.(cli.DocGenerationFlag); ok {
			usage = ": " + d.GetUsage()
		}
		switch {
		case want == "":
		case reason == "parse error" || strings.HasSuffix(reason, "invalid syntax"):
			return fmt.Sprintf("%s %q: want %s%s", dashed(f.Names()[0]), value, want, usage)
		default: // "value out of range"
			return fmt.Sprintf("%s %q: %s%s", dashed(f.Names()[0]), value, reason, usage)
		}
	}
	return err.Error()
}

// dashed is a flag's name as it is typed: -n, --timeout.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}
