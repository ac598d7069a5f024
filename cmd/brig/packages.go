package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/packages"
)

// packagesCommand is the operator's view of the package layer cache.
func packagesCommand() *cli.Command {
	dirFlags := []cli.Flag{
		&cli.StringFlag{Name: "state-dir", Value: jail.DefaultStateDir, Usage: "brig's state directory"},
		&cli.StringFlag{Name: "cache-dir", Usage: "the layer cache (default <state-dir>/packages)"},
	}
	return &cli.Command{
		Name:  "packages",
		Usage: "list and remove the installed package layers",
		Subcommands: []*cli.Command{
			{Name: "ls", Usage: "list the layers, most recently used first (works while the service runs)", Flags: dirFlags, Action: packagesLs},
			{Name: "rm", Usage: "remove layers by key (or a unique prefix of one); the service must be stopped", ArgsUsage: "KEY...", Flags: dirFlags, Action: packagesRm},
			{Name: "prune", Usage: "remove the least recently used layers until the cache fits --max-bytes; the service must be stopped", Flags: append(dirFlags,
				&cli.Int64Flag{Name: "max-bytes", Required: true, DefaultText: "none", Usage: "what the cache may keep, in bytes (required, so that no default empties the cache: 0 removes every layer)"}), Action: packagesPrune},
		},
	}
}

func cacheDir(c *cli.Context) string {
	if d := c.String("cache-dir"); d != "" {
		return d
	}
	return filepath.Join(c.String("state-dir"), "packages")
}

// existingCacheDir is cacheDir when it exists: a mistyped directory is an
// error, not an empty cache (nor, for prune, a new one).
func existingCacheDir(c *cli.Context) (string, error) {
	dir := cacheDir(c)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("no package cache at %s: give the service's --state-dir (or --cache-dir)", dir)
	}
	return dir, nil
}

func packagesLs(c *cli.Context) error {
	dir, err := existingCacheDir(c)
	if err != nil {
		return err
	}
	layers, err := packages.ListLayers(dir)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tLANGUAGE\tRUNTIME\tBYTES\tLAST USED\tREQUESTS\tPACKAGES")
	for _, m := range layers {
		var pkgs []string
		for _, p := range m.Packages {
			pkgs = append(pkgs, p.Name+" "+p.Version)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", m.Key[:12], m.Language, m.Runtime, m.Bytes,
			m.LastUsed.Format(time.RFC3339), strings.Join(m.Requests, " "), strings.Join(pkgs, ", "))
	}
	return w.Flush()
}

// maintenanceOnly is the installer of a cache opened to remove layers: it
// installs nothing.
type maintenanceOnly struct{}

func (maintenanceOnly) Install(context.Context, packages.Set, string, func(string)) ([]packages.Resolved, error) {
	return nil, errors.New("brig packages only removes layers")
}

func openCacheForMaintenance(c *cli.Context) (*packages.Cache, error) {
	dir, err := existingCacheDir(c)
	if err != nil {
		return nil, err
	}
	// The command says what it removed itself; the cache's own lines were
	// the log's, in another format.
	cache, err := packages.OpenCache(packages.CacheConfig{Dir: dir, Installer: maintenanceOnly{}, MaxBytes: 1 << 62, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, fmt.Errorf("%w (Hint: stop brig serve first: it holds the cache)", err)
	}
	return cache, nil
}

func packagesRm(c *cli.Context) error {
	if c.NArg() == 0 {
		return errors.New("give the keys of the layers to remove (brig packages ls lists them)")
	}
	layers, err := packages.ListLayers(cacheDir(c))
	if err != nil {
		return err
	}
	cache, err := openCacheForMaintenance(c)
	if err != nil {
		return err
	}
	defer cache.Close()
	for _, prefix := range c.Args().Slice() {
		var matches []string
		for _, m := range layers {
			if strings.HasPrefix(m.Key, prefix) {
				matches = append(matches, m.Key)
			}
		}
		switch len(matches) {
		case 0:
			return fmt.Errorf("no layer's key starts with %q: brig packages ls lists the layers", prefix)
		case 1:
		default:
			return fmt.Errorf("%q matches %d layers: give a longer key", prefix, len(matches))
		}
		if err := cache.Remove(matches[0]); err != nil {
			return err
		}
		fmt.Fprintln(c.App.Writer, "removed", matches[0])
	}
	return nil
}

func packagesPrune(c *cli.Context) error {
	cache, err := openCacheForMaintenance(c)
	if err != nil {
		return err
	}
	defer cache.Close()
	max := c.Int64("max-bytes")
	if max < 0 {
		return fmt.Errorf("--max-bytes %d: give what the cache may keep, 0 bytes or more (0 removes every layer)", max)
	}
	removed, err := cache.Prune(max)
	for _, k := range removed {
		fmt.Fprintln(c.App.Writer, "removed", k)
	}
	if err == nil && len(removed) == 0 {
		st := cache.Stats()
		fmt.Fprintf(c.App.Writer, "nothing to remove: the cache's %d layers take %d bytes, within --max-bytes %d\n", st.Layers, st.Bytes, max)
	}
	return err
}
