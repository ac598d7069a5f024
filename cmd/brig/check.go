package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/packages"
	"github.com/brig-sandbox/brig/rootfs"
)

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:   "check",
		Usage:  "check that this host can run brig; exits non-zero when it can't",
		Flags:  sandboxFlags(),
		Action: checkAction,
	}
}

func checkAction(c *cli.Context) error {
	checks := jail.CheckHost()
	lc, err := launcherConfigFrom(c, "brig-local")
	if err != nil {
		return err
	}
	checks = append(checks, jail.CheckCgroups(lc.CgroupParent)...)
	p, perr := newProvider(lc)
	seen := []string{lc.StateDir}
	for _, lang := range rootfs.Languages {
		if perr != nil {
			checks = append(checks, jail.Check{Name: "rootfs " + lang.String(), Detail: perr.Error(), Hint: "fix the rootfs configuration"})
			continue
		}
		r, err := p.Root(lang)
		if err != nil {
			checks = append(checks, jail.Check{Name: "interpreter " + lang.String(), Detail: err.Error(), Hint: "install it, or build a rootfs: brig rootfs build " + lang.String()})
			continue
		}
		checks = append(checks, jail.Check{Name: "interpreter " + lang.String(), OK: true, Detail: fmt.Sprintf("%s %s (%s rootfs)", r.Interpreter, r.Version, p.Name())})
		dirs := []string{r.Lower}
		for _, b := range r.Binds {
			dirs = append(dirs, b.Source)
		}
		for _, d := range dirs {
			if !slices.Contains(seen, d) {
				seen = append(seen, d)
			}
		}
	}
	checks = append(checks, jail.CheckIDRange(lc.IDs, "", seen)...)
	checks = append(checks, initCheck())
	checks = append(checks, packageChecks(c.Context)...)
	if allOK(checks) {
		checks = append(checks, smokeRuns(c.Context, lc)...)
	}
	return printChecks(c.App.Writer, checks)
}

// initCheck says which binary each sandbox's init runs. Re-executing brig
// works; it only costs each sandbox about a millisecond more, so it passes.
func initCheck() jail.Check {
	path, why := jail.DefaultInitPath()
	if why != "" {
		return jail.Check{Name: "sandbox init", OK: true, Detail: "brig re-executed (" + why + "); " + jail.InitBinary + " of the same build beside brig starts faster"}
	}
	return jail.Check{Name: "sandbox init", OK: true, Detail: path}
}

// smokeRuns runs a one-line program of each language through a real sandbox: the
// proof that every step works here.
func smokeRuns(ctx context.Context, lc launcherConfig) []jail.Check {
	sb, err := newSandbox(lc, false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return []jail.Check{{Name: "sandbox", Detail: err.Error(), Hint: "see the error"}}
	}
	defer sb.Close()
	var out []jail.Check
	for _, lang := range rootfs.Languages {
		code := map[rootfs.Language]string{rootfs.Python: "print('ok')", rootfs.JavaScript: "console.log('ok')"}[lang]
		res, err := sb.Run(ctx, jail.Spec{Language: lang, Code: code, Timeout: 10 * time.Second, MemoryBytes: api.DefaultMemoryMiB << 20})
		ch := jail.Check{Name: "sandboxed run " + lang.String(), Hint: "see the message; the sandbox can't be built on this host"}
		switch {
		case err != nil:
			ch.Detail = err.Error()
		case !res.Succeeded() || res.Stdout != "ok\n":
			ch.Detail = fmt.Sprintf("ended %s: %s %s", res.End, res.Message, res.Stderr)
		default:
			ch.OK = true
			ch.Detail = fmt.Sprintf("printed ok, started in %d ms", res.Timing.StartMS)
		}
		out = append(out, ch)
	}
	return out
}

func allOK(checks []jail.Check) bool {
	for _, c := range checks {
		if !c.OK {
			return false
		}
	}
	return true
}

func printChecks(w io.Writer, checks []jail.Check) error {
	for _, c := range checks {
		mark := "pass"
		if !c.OK {
			mark = "FAIL"
		}
		line := fmt.Sprintf("%s  %-24s %s", mark, c.Name, c.Detail)
		if !c.OK && c.Hint != "" {
			line += "  (hint: " + c.Hint + ")"
		}
		fmt.Fprintln(w, line)
	}
	if !allOK(checks) {
		return exitError(1)
	}
	return nil
}

// packageChecks say which languages can install packages here: their package
// manager answers with a registry. A language without one is not a failure (its
// runs may still run without packages), so these lines pass and say so.
func packageChecks(ctx context.Context) []jail.Check {
	var out []jail.Check
	for _, lang := range api.Languages {
		r, err := packages.Managers{}.Registry(ctx, lang.String(), nil)
		ch := jail.Check{Name: "packages " + lang.String(), OK: true}
		switch {
		case err != nil:
			ch.Detail = fmt.Sprintf("no packages: %v (install its package manager, or set [egress.registries] %s)", err, lang)
		case len(r.Indexes) == 0:
			ch.Detail = "no packages: its package manager names no registry"
		default:
			ch.Detail = fmt.Sprintf("installed from %d registry URL(s) (hosts %s)", len(r.Indexes), strings.Join(r.Hosts, ", "))
		}
		out = append(out, ch)
	}
	return out
}
