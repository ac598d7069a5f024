package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/rootfs"
)

// Exit statuses of `brig run` when the program's own can't be given.
const (
	exitTimeout  = 124 // as timeout(1)
	exitInternal = 125 // the sandbox could not be built; the program did not run
	exitStopped  = 130 // as after SIGINT
	exitMemory   = 137 // as a SIGKILLed process
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run one program (FILE, or - for stdin) and exit with its exit status",
		ArgsUsage: "FILE|-",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "socket", Value: "/run/brig/brig.sock", Usage: "the service's socket"},
			&cli.BoolFlag{Name: "local", Usage: "run in this process, without the service (root only)"},
			&cli.StringFlag{Name: "language", Aliases: []string{"l"}, Required: true, Usage: "python or javascript"},
			&cli.IntFlag{Name: "timeout", Value: api.DefaultTimeoutSeconds, Usage: "wall-clock limit in seconds (1-300), from the interpreter's start"},
			&cli.IntFlag{Name: "memory", Value: api.DefaultMemoryMiB, Usage: "memory limit in MiB (128-2048)"},
			&cli.StringSliceFlag{Name: "package", Usage: "a package with a version constraint (repeatable)"},
			&cli.StringSliceFlag{Name: "env", Usage: "an environment variable K=V (repeatable)"},
			&cli.StringFlag{Name: "network", Value: api.NetworkNone, Usage: "none, registries, domains or any"},
			&cli.StringSliceFlag{Name: "domain", Usage: "an allowed domain, with --network domains (repeatable)"},
			&cli.StringFlag{Name: "id", Usage: "the run's id (an idempotency key)"},
			&cli.BoolFlag{Name: "json", Usage: "print the whole Result as JSON instead of streaming the output"},
		}, sandboxFlags()...),
		Action: runAction,
	}
}

func runAction(c *cli.Context) error {
	if c.NArg() != 1 {
		return fmt.Errorf("run takes one FILE, or - to read the program from stdin")
	}
	code, err := readProgram(c.Args().First())
	if err != nil {
		return err
	}
	lang, err := rootfs.ParseLanguage(c.String("language"))
	if err != nil {
		return err
	}
	env := map[string]string{}
	for _, kv := range c.StringSlice("env") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("--env %q: write it as NAME=VALUE", kv)
		}
		env[k] = v
	}
	if err := jail.ValidateEnv(env); err != nil {
		return fmt.Errorf("--env: %w", err)
	}
	if !c.Bool("local") {
		return fmt.Errorf("running through the service is not available in this build; use --local (as root)")
	}
	if len(c.StringSlice("package")) > 0 || c.String("network") != api.NetworkNone {
		return fmt.Errorf("--local runs have no packages and no network yet; drop --package and --network")
	}
	lc, err := launcherConfigFrom(c, "brig-local")
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	l, _, err := newLauncher(lc, false, log)
	if err != nil {
		return err
	}
	defer l.Close()

	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	spec := jail.Spec{
		Language:    lang,
		Code:        code,
		Timeout:     time.Duration(c.Int("timeout")) * time.Second,
		MemoryBytes: int64(c.Int("memory")) << 20,
		Env:         env,
	}
	if !c.Bool("json") {
		spec.OnStdout = func(s string) { io.WriteString(os.Stdout, s) }
		spec.OnStderr = func(s string) { io.WriteString(os.Stderr, s) }
	}
	res, err := l.Run(ctx, spec)
	if err != nil {
		return err
	}
	res.ID = c.String("id")
	if c.Bool("json") {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else if res.Reason != api.ReasonNone && res.Reason != api.ReasonError {
		fmt.Fprintf(os.Stderr, "brig: %s\n", res.Message)
	}
	if code := exitStatus(res); code != 0 {
		return exitError(code)
	}
	return nil
}

// exitStatus is the status `brig run` exits with for a result: the program's own
// where it has one.
func exitStatus(res *api.Result) int {
	switch res.Reason {
	case api.ReasonTimeout:
		return exitTimeout
	case api.ReasonMemory:
		return exitMemory
	case api.ReasonStopped:
		return exitStopped
	case api.ReasonNone, api.ReasonError:
		if res.ExitCode != nil {
			return *res.ExitCode
		}
		if res.Signal != "" {
			return 128 + int(unix.SignalNum(res.Signal))
		}
		return 0
	}
	return exitInternal
}

func readProgram(name string) (string, error) {
	var b []byte
	var err error
	if name == "-" {
		b, err = io.ReadAll(io.LimitReader(os.Stdin, 4<<20))
	} else {
		b, err = os.ReadFile(name)
	}
	if err != nil {
		return "", fmt.Errorf("reading the program: %w", err)
	}
	if len(b) == 0 {
		return "", fmt.Errorf("the program is empty")
	}
	return string(b), nil
}
