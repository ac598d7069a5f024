package main

import (
	"fmt"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/brig-sandbox/brig/bench"
	"github.com/brig-sandbox/brig/client"
	"github.com/brig-sandbox/brig/rootfs"
	"github.com/brig-sandbox/brig/supervisor"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure sandboxed runs against bare execution on this machine",
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "local", Usage: "measure the jail in this process instead of the service"},
			&cli.StringFlag{Name: "socket", Value: supervisor.DefaultSocket, Usage: "the service's socket"},
			&cli.IntFlag{Name: "c", Aliases: []string{"concurrency"}, Value: bench.DefaultServiceConcurrency, Usage: "concurrent clients (service benchmark)"},
			&cli.DurationFlag{Name: "d", Aliases: []string{"duration"}, Usage: "run each phase this long instead of -n runs (service benchmark)"},
			&cli.IntFlag{Name: "rss-runs", Usage: "also hold this many runs in flight and report the service's peak RSS (service benchmark)"},
			&cli.IntFlag{Name: "n", Value: 100, Usage: "runs of each kind"},
			&cli.IntFlag{Name: "rounds", Value: 1, Usage: "split each phase into this many slices, bare, brig and brig cold taking turns, so that they share the machine's drift (service benchmark)"},
			&cli.DurationFlag{Name: "spacing", Usage: "pause between runs (e.g. 50ms); 0 runs back to back"},
			&cli.IntFlag{Name: "heap-mib", Usage: "hold this much heap while measuring (spawn cost must not grow with it)"},
			&cli.StringSliceFlag{Name: "language", Usage: "measure only this language (repeatable; default both)"},
			&cli.StringFlag{Name: "network", Usage: "network mode of the brig runs (service benchmark): none, or any to measure a networked run's start"},
		}, sandboxFlags()...),
		Action: func(c *cli.Context) error {
			var langs []rootfs.Language
			for _, name := range c.StringSlice("language") {
				lang, err := rootfs.ParseLanguage(name)
				if err != nil {
					return err
				}
				langs = append(langs, lang)
			}
			if err := benchFlagsApply(c); err != nil {
				return err
			}
			// Ctrl-C ends the benchmark as an error would: its runs are
			// stopped, and its scratch folder and local sandboxes removed.
			ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			for _, f := range []string{"n", "c"} {
				if c.IsSet(f) && c.Int(f) <= 0 {
					return fmt.Errorf("%s %d: give a positive number", flagName(f), c.Int(f))
				}
			}
			if c.IsSet("n") && c.IsSet("d") {
				return fmt.Errorf("-n and -d both set the length of each phase: give one")
			}
			if !c.Bool("local") {
				// The service is asked first: its bare phases take a while,
				// and a service that is not there, or lacks the network mode
				// asked for, would fail only after them.
				cl := client.New(c.String("socket"))
				h, err := cl.Health(ctx)
				if err != nil {
					return fmt.Errorf("asking the service at %s: %w (is `brig serve` running there? give its --socket)", c.String("socket"), err)
				}
				if n := c.String("network"); n != "" && !slices.Contains(h.NetworkModes, n) {
					return fmt.Errorf("--network %s: the service offers %v", n, h.NetworkModes)
				}
				cfg := bench.ServiceConfig{Concurrency: c.Int("c"), Duration: c.Duration("d"), Languages: langs, RSSConcurrency: c.Int("rss-runs"), Network: c.String("network"), Spacing: c.Duration("spacing"), Rounds: c.Int("rounds")}
				if cfg.Duration == 0 {
					cfg.Runs = c.Int("n")
				}
				// The service's own CPU is reported when its process can be read
				// (the same host; root, or the same user).
				if pid, err := client.ServicePID(c.String("socket")); err == nil {
					cfg.ServicePID = pid
				}
				rep, err := bench.Service(ctx, cl, cfg)
				if rep != nil {
					rep.Print(c.App.Writer)
				}
				return err
			}
			sb, lc, err := localSandbox(c)
			if err != nil {
				return err
			}
			defer sb.Close()
			// Let the pool fill before the clock starts.
			time.Sleep(time.Duration(lc.Pool) * 20 * time.Millisecond)
			rep, err := bench.Local(ctx, sb.Launcher, sb.provider, bench.LocalConfig{Runs: c.Int("n"), Spacing: c.Duration("spacing"), HeapMiB: c.Int("heap-mib"), Languages: langs})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "pool=%d ", lc.Pool)
			rep.Print(c.App.Writer)
			return nil
		},
	}
}

// benchFlagsApply refuses a flag that the chosen benchmark would ignore: the
// service benchmark measures the running service with its own configuration,
// and --local measures a jail in this process.
func benchFlagsApply(c *cli.Context) error {
	return localFlagsApply(c, []string{"socket", "c", "d", "rss-runs", "network", "rounds"}, []string{"heap-mib"},
		"the service benchmark", "the service benchmark measures the service with its own configuration (set it on brig serve)")
}

// localFlagsApply refuses, for a command with a --local mode, a flag the mode
// chosen would ignore: serviceOnly with --local, localOnly (and the sandbox's
// flags) without it. service names the other mode, and why says why the
// sandbox's flags are not its own.
func localFlagsApply(c *cli.Context, serviceOnly, localOnly []string, service, why string) error {
	for _, f := range sandboxFlags() {
		localOnly = append(localOnly, f.Names()[0])
	}
	if c.Bool("local") {
		for _, name := range serviceOnly {
			if c.IsSet(name) {
				return fmt.Errorf("%s applies to %s, not --local", flagName(name), service)
			}
		}
		return nil
	}
	for _, name := range localOnly {
		if c.IsSet(name) {
			return fmt.Errorf("%s applies to --local only: %s", flagName(name), why)
		}
	}
	return nil
}

// flagName is name as typed: -c, --socket.
func flagName(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}
