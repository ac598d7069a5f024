package jail

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/rootfs"
)

// BenchmarkRun measures one sandboxed run of a trivial program end to end, with
// and without a pool; BenchmarkBare the same command on the host. Compare them
// with: go test -run xxx -bench . ./jail
func BenchmarkRun(b *testing.B) {
	for _, lang := range rootfs.Languages {
		for _, pool := range []int{0, 2} {
			b.Run(fmt.Sprintf("%s/pool=%d", lang, pool), func(b *testing.B) {
				l := newTestLauncher(b, pool)
				for i := 0; i < b.N; i++ {
					res := run(b, l, lang, map[rootfs.Language]string{rootfs.Python: "pass", rootfs.JavaScript: "0"}[lang])
					if !res.Succeeded() {
						b.Fatalf("got %s: %s %s", res.End, res.Message, res.Stderr)
					}
				}
			})
		}
	}
}

func BenchmarkBare(b *testing.B) {
	dir := b.TempDir()
	for _, tc := range []struct {
		lang rootfs.Language
		argv []string
		code string
	}{
		{rootfs.Python, []string{"/usr/bin/python3", "-u"}, "pass"},
		{rootfs.JavaScript, []string{"/usr/bin/node"}, "0"},
	} {
		script := filepath.Join(dir, tc.lang.ScriptName())
		os.WriteFile(script, []byte(tc.code), 0o644)
		b.Run(tc.lang.String(), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				cmd := exec.Command(tc.argv[0], append(tc.argv[1:], script)...)
				// The sandbox's environment: the host's may hold settings that change
				// an interpreter's start (NODE_EXTRA_CA_CERTS costs node 120 ms here).
				cmd.Env = Environ(nil)
				if err := cmd.Run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFirstByte measures, through the jail (no service), the time from
// Run to the program's first byte of stdout, cold and warm, with a pool that
// has a sandbox waiting when each run starts; it
// reports the p50 as first-byte-ms. The bare figure is BenchmarkBare's.
//
//	go test -tags urfave_cli_no_docs -run xxx -bench FirstByte -benchtime 50x ./jail
func BenchmarkFirstByte(b *testing.B) {
	for _, lang := range rootfs.Languages {
		for _, warm := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/warm=%v", lang, warm), func(b *testing.B) {
				l := newTestLauncher(b, 2, func(c *Config) {
					c.Warm = map[rootfs.Language]bool{lang: warm}
				})
				var firsts []time.Duration
				for i := 0; i < b.N; i++ {
					for _, pool := range l.pools { // refilled
						waitPool(b, pool)
					}
					var first time.Duration
					var once sync.Once
					t0 := time.Now()
					res := run(b, l, lang, map[rootfs.Language]string{rootfs.Python: "print(1)", rootfs.JavaScript: "console.log(1)"}[lang],
						func(s *Spec) { s.OnStdout = func(string) { once.Do(func() { first = time.Since(t0) }) } })
					if !res.Succeeded() || first == 0 {
						b.Fatalf("got %s: %s %s (first byte %s)", res.End, res.Message, res.Stderr, first)
					}
					if (res.Start == StartWarm) != warm {
						b.Fatalf("run started %s, want warm=%v", res.Start, warm)
					}
					firsts = append(firsts, first)
				}
				slices.Sort(firsts)
				b.ReportMetric(float64(firsts[len(firsts)/2])/float64(time.Millisecond), "first-byte-ms")
			})
		}
	}
}

// BenchmarkColdEarlyExit measures what ending a cold run on the kernel's
// record of its program's exit (coldEarlyExit) saves: runs alternate with and
// without it, a sandbox waiting and 20 ms between runs, and it reports each
// half's p50 from Run to the result, and how many runs took the early path.
//
//	go test -tags urfave_cli_no_docs -run xxx -bench ColdEarlyExit -benchtime 300x ./jail
func BenchmarkColdEarlyExit(b *testing.B) {
	for _, lang := range rootfs.Languages {
		b.Run(lang.String(), func(b *testing.B) {
			l := newTestLauncher(b, 2, func(c *Config) { c.Warm = map[rootfs.Language]bool{} })
			if l.exits == nil {
				b.Skip("no taskstats on this host")
			}
			defer func() { coldEarlyExit = true }()
			var with, without []time.Duration
			early := l.earlyExits.Load()
			for i := 0; i < b.N; i++ {
				for _, pool := range l.pools {
					waitPool(b, pool)
				}
				time.Sleep(20 * time.Millisecond)
				coldEarlyExit = i%2 == 0
				t0 := time.Now()
				res := run(b, l, lang, map[rootfs.Language]string{rootfs.Python: "print(1)", rootfs.JavaScript: "console.log(1)"}[lang])
				if !res.Succeeded() {
					b.Fatalf("got %s: %s %s", res.End, res.Message, res.Stderr)
				}
				if coldEarlyExit {
					with = append(with, time.Since(t0))
				} else {
					without = append(without, time.Since(t0))
				}
			}
			if len(without) == 0 {
				return // the first, one-run pass
			}
			p50 := func(d []time.Duration) float64 {
				slices.Sort(d)
				return float64(d[len(d)/2]) / float64(time.Millisecond)
			}
			b.ReportMetric(p50(with), "early-p50-ms")
			b.ReportMetric(p50(without), "without-p50-ms")
			b.ReportMetric(float64(l.earlyExits.Load()-early), "early-ends")
		})
	}
}
