package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the service on its Unix socket (foreground)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config"}, &cli.StringFlag{Name: "socket"}, &cli.StringFlag{Name: "state-dir"},
		},
		Action: func(c *cli.Context) error {
			return fmt.Errorf("the service is not in this build yet: use `brig run --local` and `brig check`")
		},
	}
}
