package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/client"
	"github.com/brig-sandbox/brig/rootfs"
)

func msList(v ...int) []time.Duration {
	d := make([]time.Duration, len(v))
	for i, x := range v {
		d[i] = time.Duration(x) * time.Millisecond
	}
	return d
}

func TestPhaseMath(t *testing.T) {
	lat := msList(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	tests := []struct {
		name    string
		phase   Phase
		wantRPS float64
		q       float64
		wantQ   time.Duration
	}{
		{name: "p0", phase: Phase{Runs: 10, Elapsed: 2 * time.Second, Latencies: lat}, wantRPS: 5, q: 0, wantQ: 1 * time.Millisecond},
		{name: "p50", phase: Phase{Runs: 10, Elapsed: 2 * time.Second, Latencies: lat}, wantRPS: 5, q: 0.5, wantQ: 5 * time.Millisecond},
		{name: "p90", phase: Phase{Runs: 10, Elapsed: 2 * time.Second, Latencies: lat}, wantRPS: 5, q: 0.9, wantQ: 9 * time.Millisecond},
		{name: "p100", phase: Phase{Runs: 10, Elapsed: 2 * time.Second, Latencies: lat}, wantRPS: 5, q: 1, wantQ: 10 * time.Millisecond},
		{name: "failed runs are not throughput", phase: Phase{Runs: 12, Failed: 2, Elapsed: 2 * time.Second, Latencies: lat}, wantRPS: 5, q: 0.5, wantQ: 5 * time.Millisecond},
		{name: "empty", phase: Phase{}, wantRPS: 0, q: 0.5, wantQ: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.phase.RunsPerSecond(); got != tt.wantRPS {
				t.Errorf("RunsPerSecond: got %v, want %v", got, tt.wantRPS)
			}
			if got := tt.phase.Quantile(tt.q); got != tt.wantQ {
				t.Errorf("Quantile(%v): got %v, want %v", tt.q, got, tt.wantQ)
			}
		})
	}
}

// TestRounds: a phase split into rounds takes its share of the runs or the
// duration in each, every round at least one run, and its slices add up to
// the phase: runs, time, CPU, start paths (unknown if one slice's were) and
// the latencies, sorted.
func TestRounds(t *testing.T) {
	cfg := ServiceConfig{Runs: 11, Duration: 9 * time.Second, Spacing: time.Millisecond, Rounds: 3}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	var runs []int
	for r := range 3 {
		lim := cfg.roundLimit(r)
		runs = append(runs, lim.runs)
		if lim.duration != 3*time.Second || lim.spacing != time.Millisecond {
			t.Errorf("round %d: %+v, want a third of the duration and the spacing", r, lim)
		}
	}
	if fmt.Sprint(runs) != "[4 4 3]" {
		t.Errorf("11 runs in 3 rounds: %v, want [4 4 3]", runs)
	}
	one := ServiceConfig{Runs: 5}
	one.setDefaults()
	if lim := one.roundLimit(0); one.Rounds != 1 || lim.runs != 5 {
		t.Errorf("no rounds given: %d rounds, the first of %d runs; want one of 5", one.Rounds, lim.runs)
	}
	for _, bad := range []ServiceConfig{{Runs: 2, Rounds: 3}, {Rounds: -1}} {
		if err := bad.validate(); err == nil {
			t.Errorf("%+v validated, want an error", bad)
		}
	}

	var p Phase
	p.add(Phase{Runs: 3, Failed: 1, Elapsed: time.Second, Latencies: msList(2, 5), CPU: 30 * time.Millisecond,
		ServiceCPU: 3 * time.Millisecond, RunCPU: time.Millisecond, Starts: map[string]int{"warm": 3}}, true)
	p.add(Phase{Runs: 2, Elapsed: time.Second, Latencies: msList(1, 4), CPU: 20 * time.Millisecond,
		ServiceCPU: 2 * time.Millisecond, RunCPU: time.Millisecond, Starts: map[string]int{"warm": 1, "cold-empty": 1}}, false)
	want := Phase{Runs: 5, Failed: 1, Elapsed: 2 * time.Second, Latencies: msList(1, 2, 4, 5), CPU: 50 * time.Millisecond,
		ServiceCPU: 5 * time.Millisecond, RunCPU: 2 * time.Millisecond, Starts: map[string]int{"warm": 4, "cold-empty": 1}}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("two slices added: %+v, want %+v", p, want)
	}
	if p.RunsPerSecond() != 2 {
		t.Errorf("runs per second %v, want 2: the successful runs over the slices' time", p.RunsPerSecond())
	}
	p.add(Phase{Runs: 1, Latencies: msList(3)}, false)
	if p.Starts != nil || p.Runs != 6 {
		t.Errorf("a slice without start paths: %v and %d runs, want unknown (nil) and 6", p.Starts, p.Runs)
	}
}

func TestParseRSS(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    int64
		wantErr error
	}{
		{
			name: "integer",
			text: "# HELP process_resident_memory_bytes Resident memory size in bytes.\n" +
				"# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 26214400\n",
			want: 26214400,
		},
		{
			name: "exponent",
			text: "brig_runs_total{outcome=\"succeeded\"} 3\nprocess_resident_memory_bytes 2.5e+07\nbrig_queue_depth 0\n",
			want: 25000000,
		},
		{
			name: "with timestamp",
			text: "process_resident_memory_bytes 1.048576e+06 1700000000000\n",
			want: 1 << 20,
		},
		{
			name: "similar names are not it",
			text: "process_resident_memory_bytes_max 9\nprocess_resident_memory_bytes 4096\n",
			want: 4096,
		},
		{
			name:    "missing",
			text:    "process_virtual_memory_bytes 1e+09\n# process_resident_memory_bytes 5\n",
			wantErr: errNoRSS,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseRSS(strings.NewReader(tt.text))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error: got %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
	if _, err := parseRSS(strings.NewReader("process_resident_memory_bytes lots\n")); err == nil {
		t.Errorf("unparsable value: got no error, want one")
	}
}

// phaseAt is a phase of rps runs in one second whose latencies are all p50.
func phaseAt(rps int, p50ms int) Phase {
	lat := make([]time.Duration, rps)
	for i := range lat {
		lat[i] = time.Duration(p50ms) * time.Millisecond
	}
	return Phase{Runs: rps, Elapsed: time.Second, Latencies: lat}
}

func TestServicePrintGoals(t *testing.T) {
	bare := phaseAt(100, 20)
	tests := []struct {
		name       string
		lang       rootfs.Language
		warm, cold Phase
		want       []string
	}{
		{
			name: "all pass",
			lang: rootfs.Python,
			warm: phaseAt(200, 10),
			cold: phaseAt(75, 22),
			want: []string{
				"python warm throughput ≥ 200% of bare: PASS (200.0%)", "python warm p50 ≤ 50% of bare: PASS (50.0%)",
				"python cold throughput ≥ 70% of bare: PASS (75.0%)", "python cold p50 ≤ bare + 3 ms: PASS (+2.00ms)",
			},
		},
		{
			name: "all miss",
			lang: rootfs.Python,
			warm: phaseAt(150, 11),
			cold: phaseAt(60, 25),
			want: []string{
				"python warm throughput ≥ 200% of bare: MISS (150.0%)", "python warm p50 ≤ 50% of bare: MISS (55.0%)",
				"python cold throughput ≥ 70% of bare: MISS (60.0%)", "python cold p50 ≤ bare + 3 ms: MISS (+5.00ms)",
			},
		},
		{
			name: "exactly at the goals",
			lang: rootfs.JavaScript,
			warm: phaseAt(120, 20),
			cold: phaseAt(70, 23),
			want: []string{
				"javascript warm throughput ≥ 120% of bare: PASS (120.0%)", "javascript warm p50 ≤ 100% of bare: PASS (100.0%)",
				"javascript cold throughput ≥ 70% of bare: PASS (70.0%)", "javascript cold p50 ≤ bare + 3 ms: PASS (+3.00ms)",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.warm.ServiceCPU = time.Duration(tt.warm.Runs) * 900 * time.Microsecond
			tt.warm.Starts = map[string]int{"warm": 90, "cold-empty": 10}
			rep := &ServiceReport{
				Config:      ServiceConfig{Concurrency: 4, Runs: 100},
				Concurrency: 4,
				Rows:        []ServiceRow{{Language: tt.lang, Bare: bare, Brig: tt.warm, Cold: tt.cold}},
			}
			var buf bytes.Buffer
			rep.Print(&buf)
			out := buf.String()
			for _, w := range append(tt.want, "concurrency=4, each phase 100 runs", "checked here at concurrency 4",
				"service CPU per run ≤ 1.00ms: PASS (0.90ms)", "starts: warm 90, cold-empty 10", "starts: unknown",
				tt.lang.String()+" brig cold") {
				if !strings.Contains(out, w) {
					t.Errorf("got output\n%s\nwant it to contain %q", out, w)
				}
			}
			if strings.Contains(out, "supervisor RSS") {
				t.Errorf("got an RSS line without an RSS phase, want none:\n%s", out)
			}
		})
	}
}

func TestParseStarts(t *testing.T) {
	text := `# HELP brig_run_starts_total Runs by how their interpreter was started.
# TYPE brig_run_starts_total counter
brig_run_starts_total{language="javascript",path="warm"} 7
brig_run_starts_total{language="python",path="cold-empty"} 3
brig_run_starts_total{language="python",path="warm"} 1.2e+03
brig_runs_total{language="python"} 99
`
	got, err := parseStarts(strings.NewReader(text), rootfs.Python)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["warm"] != 1200 || got["cold-empty"] != 3 {
		t.Errorf("got %v, want python's warm 1200 and cold-empty 3 only", got)
	}
}

func TestServicePrintRSS(t *testing.T) {
	rep := &ServiceReport{Concurrency: 2, RSSBefore: 20 << 20, RSSPeak: 52<<20 + 1<<19, RSSConcurrency: 64}
	var buf bytes.Buffer
	rep.Print(&buf)
	want := "supervisor RSS: 20.0 MiB before, 52.5 MiB peak with 64 runs asked for at once (those past max_concurrent queued)"
	if !strings.Contains(buf.String(), want) {
		t.Errorf("got\n%s\nwant it to contain %q", buf.String(), want)
	}
}

func TestRunPhaseLimits(t *testing.T) {
	failEvery := func(n int64) runFunc {
		var i atomic.Int64
		return func(context.Context) (time.Duration, error, error) {
			if i.Add(1)%n == 0 {
				return 0, errors.New("boom"), nil
			}
			return time.Millisecond, nil, nil
		}
	}
	tests := []struct {
		name       string
		lim        phaseLimit
		run        runFunc
		wantRuns   int
		wantFailed int
		wantFirst  string
	}{
		{name: "run limit", lim: phaseLimit{runs: 50}, run: failEvery(1 << 40), wantRuns: 50},
		{name: "failures counted, not latencies", lim: phaseLimit{runs: 40}, run: failEvery(4), wantRuns: 40, wantFailed: 10, wantFirst: "boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, first, err := runPhase(context.Background(), 3, tt.lim, tt.run)
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if p.Runs != tt.wantRuns || p.Failed != tt.wantFailed || len(p.Latencies) != tt.wantRuns-tt.wantFailed {
				t.Errorf("got runs=%d failed=%d latencies=%d, want %d %d %d",
					p.Runs, p.Failed, len(p.Latencies), tt.wantRuns, tt.wantFailed, tt.wantRuns-tt.wantFailed)
			}
			if first != tt.wantFirst {
				t.Errorf("first failure: got %q, want %q", first, tt.wantFirst)
			}
		})
	}
	t.Run("spacing", func(t *testing.T) {
		// Each client pauses after each run; the pause is not a run's latency.
		p, _, err := runPhase(context.Background(), 1, phaseLimit{runs: 5, spacing: 20 * time.Millisecond},
			func(context.Context) (time.Duration, error, error) { return time.Millisecond, nil, nil })
		if err != nil || p.Runs != 5 || p.Elapsed < 100*time.Millisecond {
			t.Errorf("got runs=%d elapsed=%s err=%v, want 5 runs over at least 100ms", p.Runs, p.Elapsed, err)
		}
		for _, d := range p.Latencies {
			if d != time.Millisecond {
				t.Errorf("a latency of %s, want the run's own 1ms", d)
			}
		}
	})
	t.Run("duration limit", func(t *testing.T) {
		p, _, err := runPhase(context.Background(), 2, phaseLimit{duration: 30 * time.Millisecond},
			func(context.Context) (time.Duration, error, error) {
				time.Sleep(time.Millisecond)
				return time.Millisecond, nil, nil
			})
		if err != nil || p.Runs == 0 || p.Elapsed < 30*time.Millisecond || p.Elapsed > time.Second {
			t.Errorf("got runs=%d elapsed=%s err=%v, want some runs in about 30ms", p.Runs, p.Elapsed, err)
		}
	})
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		want   time.Duration
		wantOK bool
	}{
		{name: "429 with Retry-After", err: &client.Error{Status: 429, RetryAfter: time.Second}, want: time.Second, wantOK: true},
		{name: "429 without Retry-After", err: &client.Error{Status: 429}, want: minRetryAfter, wantOK: true},
		{name: "503", err: &client.Error{Status: 503, RetryAfter: time.Second}},
		{name: "transport error", err: errors.New("connection refused")},
		{name: "nil", err: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := retryAfter(tt.err)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("got %s %v, want %s %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestCPUAccounting(t *testing.T) {
	// Spins until this process has used 120 ms of CPU by its own count, however
	// long that takes on a loaded machine.
	busy := func() {
		start := processCPU(os.Getpid())
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end) && processCPU(os.Getpid())-start < 120*time.Millisecond; {
			for i := 0; i < 1e6; i++ {
			}
		}
	}
	machine, process, err := measureCPU(os.Getpid(), func() error { busy(); return nil })
	if err != nil {
		t.Fatal(err)
	}
	// /proc counts in 10 ms ticks, per CPU for the machine: 120 ms of spinning
	// reads as at least 100 ms, and the machine's count as the process's less
	// a tick per CPU.
	slack := time.Duration(runtime.NumCPU()) * 10 * time.Millisecond
	if process < 100*time.Millisecond || machine < process-slack {
		t.Fatalf("got machine %v and process %v for 120 ms of CPU spun, want process ≥ 100ms and machine ≥ process - %v", machine, process, slack)
	}
	if got := processCPU(0); got != 0 {
		t.Errorf("got %v for pid 0, want 0 (no process to account)", got)
	}
	p := Phase{Runs: 4}
	if got := p.CPUPerRun(40 * time.Millisecond); got != 10*time.Millisecond {
		t.Errorf("got %v per run, want 10ms", got)
	}
}

// TestServicePrintRefusals: a phase whose requests the service refused with
// 429 says how many, and that its latencies leave the waits out (the load
// probe of 2026-12-06: a p99 of 125 ms where the harness waited 2.1 s).
func TestServicePrintRefusals(t *testing.T) {
	rep := &ServiceReport{Concurrency: 16, Rows: []ServiceRow{{Language: "python", Brig: Phase{Runs: 60, Refused: 11}}}}
	var buf bytes.Buffer
	rep.Print(&buf)
	want := "python brig: 11 requests refused with 429 and retried; its latencies count from the accepted request"
	if !strings.Contains(buf.String(), want) {
		t.Errorf("got\n%s\nwant it to contain %q", buf.String(), want)
	}
}
