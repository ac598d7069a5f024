package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/rootfs"
)

func rootfsCommand() *cli.Command {
	return &cli.Command{
		Name:  "rootfs",
		Usage: "manage language root filesystems",
		Subcommands: []*cli.Command{{
			Name:      "build",
			Usage:     "build a minimal Debian rootfs for one language with debootstrap",
			ArgsUsage: "python|javascript",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "dir", Usage: "destination (default <state-dir>/rootfs/LANG)"},
				&cli.StringFlag{Name: "state-dir", Value: jail.DefaultStateDir},
				&cli.StringFlag{Name: "mirror", Usage: "Debian mirror URL (default: the host's apt sources)"},
				&cli.StringFlag{Name: "suite", Usage: "Debian suite (default: the host's)"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return fmt.Errorf("rootfs build takes one language: python or javascript")
				}
				lang, err := rootfs.ParseLanguage(c.Args().First())
				if err != nil {
					return err
				}
				dir := c.String("dir")
				if dir == "" {
					dir = filepath.Join(c.String("state-dir"), "rootfs", string(lang))
				}
				// A signal stops the build: Build kills debootstrap's process
				// group (its own, so a terminal's Ctrl-C reaches only brig)
				// and removes its tree, where brig had exited and left both
				// (the operator probe of 2026-12-06).
				ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
				defer stop()
				m, err := rootfs.Build(ctx, rootfs.BuildOptions{
					Language: lang, Dir: dir, Mirror: c.String("mirror"), Suite: c.String("suite"),
				}, os.Stderr)
				if err != nil {
					if ctx.Err() != nil && c.Context.Err() == nil {
						return fmt.Errorf("rootfs build stopped by a signal: %w", err)
					}
					return err
				}
				fmt.Printf("built %s rootfs at %s: %s %s\nuse it with: --rootfs %s=%s\n", lang, dir, m.Interpreter, m.Version, lang, dir)
				return nil
			},
		}},
	}
}
