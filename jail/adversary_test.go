package jail

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/rootfs"
)

// The adversarial suite: every test in escape_test.go, seccomp_jail_test.go,
// process_test.go, limits_test.go, output_test.go and pool_test.go runs a real
// program that tries to break one property of the jail from inside, and fails
// if it can. This file holds the helpers they share.

// pyTrial is Python prelude for probes: trial(f) runs f and returns "ok" (or
// f's result as a string), or the errno name of the OSError it raised.
const pyTrial = `
import errno, json, os, sys
def trial(f):
    try:
        v = f()
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    return 'ok' if v is None else str(v)
def write(path, data=b'x'):
    with open(path, 'wb') as f:
        f.write(data)
r = {}
`

// pyDump ends a probe: the checks as one JSON object on stdout.
const pyDump = "\nprint(json.dumps(r))\n"

// probe runs a program that prints one JSON object of strings on its last
// stdout line and returns it. A run that did not succeed fails the test.
func probe(tb testing.TB, l *Launcher, lang rootfs.Language, code string, opts ...func(*Spec)) map[string]string {
	tb.Helper()
	got, err := tryProbe(l, lang, code, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return got
}

// tryProbe is probe for goroutines other than the test's: it returns what went
// wrong instead of failing the test.
func tryProbe(l *Launcher, lang rootfs.Language, code string, opts ...func(*Spec)) (map[string]string, error) {
	spec := Spec{Language: lang, Code: code, Timeout: 10 * time.Second, MemoryBytes: api.DefaultMemoryMiB << 20}
	for _, o := range opts {
		o(&spec)
	}
	res, err := launch(context.Background(), l, spec)
	if err != nil {
		return nil, fmt.Errorf("Run: %w", err)
	}
	if err := checkPath(l, spec, res); err != nil {
		return nil, err
	}
	if !res.Succeeded() {
		return nil, fmt.Errorf("probe run: got %s reason %s message %q stderr %q, want succeeded", res.End, res.Step, res.Message, res.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	got := map[string]string{}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		return nil, fmt.Errorf("probe output %q: %w", res.Stdout, err)
	}
	return got, nil
}

// pyString is s as a Python string literal (a JSON string is one).
func pyString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// runCgroups lists the run cgroups this test process has in any hierarchy.
func runCgroups(tb testing.TB) []string {
	tb.Helper()
	pattern := filepath.Join("/sys/fs/cgroup", "*", testCgroupParent, "run-"+strconv.Itoa(os.Getpid())+"-*")
	m, err := filepath.Glob(pattern)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// hostProcsWith lists the host's processes whose command line contains marker.
func hostProcsWith(marker string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), marker) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

// check is one expectation on a probe's output: key's value is want, or one of
// wantAny.
type check struct {
	name    string
	key     string
	want    string
	wantAny []string
}

func checkProbe(t *testing.T, got map[string]string, checks []check) {
	t.Helper()
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			v, ok := got[c.key]
			if !ok {
				t.Fatalf("probe has no %q (got %v)", c.key, got)
			}
			if c.wantAny == nil {
				if v != c.want {
					t.Errorf("%s: got %q, want %q", c.key, v, c.want)
				}
				return
			}
			for _, w := range c.wantAny {
				if v == w {
					return
				}
			}
			t.Errorf("%s: got %q, want one of %q", c.key, v, c.wantAny)
		})
	}
}

func withTimeout(d time.Duration) func(*Spec) {
	return func(s *Spec) { s.Timeout = d }
}

func withMemoryMiB(m int64) func(*Spec) {
	return func(s *Spec) { s.MemoryBytes = m << 20 }
}

func withEnv(env map[string]string) func(*Spec) {
	return func(s *Spec) { s.Env = env }
}

func mustJSON(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}
