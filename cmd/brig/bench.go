package main

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/brig-sandbox/brig/bench"
	"github.com/brig-sandbox/brig/rootfs"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure sandboxed runs against bare execution on this machine",
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "local", Usage: "measure the jail in this process (the service benchmark comes with `brig serve`)"},
			&cli.IntFlag{Name: "n", Value: 100, Usage: "runs of each kind"},
			&cli.DurationFlag{Name: "spacing", Usage: "pause between runs (e.g. 50ms); 0 runs back to back"},
			&cli.IntFlag{Name: "heap-mib", Usage: "hold this much heap while measuring (spawn cost must not grow with it)"},
			&cli.StringSliceFlag{Name: "language", Usage: "measure only this language (repeatable; default both)"},
		}, sandboxFlags()...),
		Action: func(c *cli.Context) error {
			if !c.Bool("local") {
				return fmt.Errorf("only `brig bench --local` is available in this build")
			}
			lc, err := launcherConfigFrom(c, "brig-local")
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			sb, err := newSandbox(lc, false, log)
			if err != nil {
				return err
			}
			defer sb.Close()
			// Let the pool fill before the clock starts.
			time.Sleep(time.Duration(lc.Pool) * 20 * time.Millisecond)
			var langs []rootfs.Language
			for _, name := range c.StringSlice("language") {
				lang, err := rootfs.ParseLanguage(name)
				if err != nil {
					return err
				}
				langs = append(langs, lang)
			}
			rep, err := bench.Local(c.Context, sb.Launcher, sb.provider, bench.LocalConfig{Runs: c.Int("n"), Spacing: c.Duration("spacing"), HeapMiB: c.Int("heap-mib"), Languages: langs})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "pool=%d ", lc.Pool)
			rep.Print(c.App.Writer)
			return nil
		},
	}
}
