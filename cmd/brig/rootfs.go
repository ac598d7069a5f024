package main

import (
	"fmt"
	"os"
	"path/filepath"

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
				m, err := rootfs.Build(c.Context, rootfs.BuildOptions{
					Language: lang, Dir: dir, Mirror: c.String("mirror"), Suite: c.String("suite"),
				}, os.Stderr)
				if err != nil {
					return err
				}
				fmt.Printf("built %s rootfs at %s: %s %s\nuse it with: --rootfs %s=%s\n", lang, dir, m.Interpreter, m.Version, lang, dir)
				return nil
			},
		}},
	}
}
