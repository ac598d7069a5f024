// Package bench measures brig against bare execution on the same machine, in the
// same process, so that every figure brig claims comes with its baseline.
//
// Typical use, as root (`brig bench --local` does this), with the *jail.Launcher
// and the rootfs.Provider it was built on:
//
//	rep, err := bench.Local(ctx, launcher, roots, bench.LocalConfig{Runs: 200})
//	if err != nil { ... }
//	rep.Print(os.Stdout)
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/rootfs"
)

// Programs are the trivial programs of each language that measure start cost.
var Programs = map[rootfs.Language]string{
	rootfs.Python:     "pass\n",
	rootfs.JavaScript: "0\n",
}

// LocalConfig configures Local.
type LocalConfig struct {
	// Runs is how many runs of each kind; zero means 100.
	Runs int
	// Spacing is the pause between runs; zero runs them back to back.
	Spacing time.Duration
	// HeapMiB, when positive, makes the process hold (and touch) this much heap
	// during the measurement, to show the spawn cost does not grow with it.
	HeapMiB int
	// Languages to measure; nil means all.
	Languages []rootfs.Language
}

// Series is the latencies of one kind of run: Latencies from the call to the
// result, Starts from the call to the interpreter's exec (for a bare run, the
// return of exec.Cmd.Start, which waits for the exec).
type Series struct {
	Name      string
	Latencies []time.Duration
	Starts    []time.Duration
}

// Quantile returns the q-quantile (0..1) of the latencies.
func (s Series) Quantile(q float64) time.Duration { return quantile(s.Latencies, q) }

// StartQuantile returns the q-quantile (0..1) of the start latencies.
func (s Series) StartQuantile(q float64) time.Duration { return quantile(s.Starts, q) }

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	l := append([]time.Duration(nil), d...)
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	return l[int(q*float64(len(l)-1))]
}

// LocalReport pairs each language's sandboxed series with its bare one.
type LocalReport struct {
	Config LocalConfig
	Pairs  [][2]Series // {jail, bare}
}

// Local runs cfg.Runs trivial programs of each language through l and the same
// interpreter command bare on the host, alternating, and returns the latencies.
// A run that does not succeed is an error: a failed run is no measurement.
func Local(ctx context.Context, l *jail.Launcher, roots rootfs.Provider, cfg LocalConfig) (*LocalReport, error) {
	if cfg.Runs == 0 {
		cfg.Runs = 100
	}
	if cfg.Languages == nil {
		cfg.Languages = rootfs.Languages
	}
	var heap []byte
	if cfg.HeapMiB > 0 {
		heap = make([]byte, cfg.HeapMiB<<20)
		for i := 0; i < len(heap); i += 4096 {
			heap[i] = 1
		}
	}
	dir, err := os.MkdirTemp("", "brig-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rep := &LocalReport{Config: cfg}
	for _, lang := range cfg.Languages {
		root, err := roots.Root(lang)
		if err != nil {
			return nil, err
		}
		script := filepath.Join(dir, lang.ScriptName())
		if err := os.WriteFile(script, []byte(Programs[lang]), 0o644); err != nil {
			return nil, err
		}
		argv := root.Argv(script)
		jailed := Series{Name: lang.String() + " brig"}
		bare := Series{Name: lang.String() + " bare"}
		for i := 0; i < cfg.Runs; i++ {
			t0 := time.Now()
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			cmd.Dir = dir
			// The sandbox's environment, not this process's: the host's may hold
			// settings that change an interpreter's start (NODE_EXTRA_CA_CERTS
			// costs node about 120 ms here).
			cmd.Env = jail.Environ(nil)
			if err := cmd.Start(); err != nil {
				return nil, fmt.Errorf("bare %s run: %w", lang, err)
			}
			bare.Starts = append(bare.Starts, time.Since(t0))
			if err := cmd.Wait(); err != nil {
				return nil, fmt.Errorf("bare %s run: %w", lang, err)
			}
			bare.Latencies = append(bare.Latencies, time.Since(t0))
			pause(ctx, cfg.Spacing)

			t0 = time.Now()
			var started time.Duration
			res, err := l.Run(ctx, jail.Spec{
				Language: lang, Code: Programs[lang], Timeout: 30 * time.Second, MemoryBytes: api.DefaultMemoryMiB << 20,
				OnStart: func(at time.Time) { started = at.Sub(t0) },
			})
			if err != nil {
				return nil, err
			}
			if !res.Succeeded() {
				return nil, fmt.Errorf("sandboxed %s run failed: %s %s", lang, res.Message, res.Stderr)
			}
			jailed.Latencies = append(jailed.Latencies, time.Since(t0))
			jailed.Starts = append(jailed.Starts, started)
			pause(ctx, cfg.Spacing)
		}
		rep.Pairs = append(rep.Pairs, [2]Series{jailed, bare})
	}
	if heap != nil {
		heap[0]++ // keep the heap alive until here
	}
	return rep, nil
}

func pause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// Print writes the report as a table: p50 and p90 of each series from call to
// result, the sandbox's overhead over bare at each, and p50 from call to exec.
func (r *LocalReport) Print(w io.Writer) {
	fmt.Fprintf(w, "runs=%d spacing=%s heap=%dMiB\n", r.Config.Runs, r.Config.Spacing, r.Config.HeapMiB)
	fmt.Fprintf(w, "%-18s %9s %9s %14s %14s %11s %15s\n", "", "p50", "p90", "overhead p50", "overhead p90", "exec p50", "exec overhead")
	for _, p := range r.Pairs {
		j, b := p[0], p[1]
		fmt.Fprintf(w, "%-18s %9s %9s %14s %14s %11s\n", b.Name, ms(b.Quantile(0.5)), ms(b.Quantile(0.9)), "", "", ms(b.StartQuantile(0.5)))
		fmt.Fprintf(w, "%-18s %9s %9s %14s %14s %11s %15s\n", j.Name, ms(j.Quantile(0.5)), ms(j.Quantile(0.9)),
			ms(j.Quantile(0.5)-b.Quantile(0.5)), ms(j.Quantile(0.9)-b.Quantile(0.9)),
			ms(j.StartQuantile(0.5)), ms(j.StartQuantile(0.5)-b.StartQuantile(0.5)))
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }
