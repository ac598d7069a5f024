package jail

import (
	"debug/elf"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/brig-sandbox/brig/rootfs"
)

// TestStaticInit runs sandboxes with brig-init as make builds it: without
// cgo, a static binary. The other tests' inits are the test binary, which
// links libc; this one covers what differs without it (the identity change
// on every thread through the Go runtime rather than libc, the program's
// clone), cold and warm, in both languages, with SIGHUP ignored by the
// process that starts them, as under nohup.
func TestStaticInit(t *testing.T) {
	signal.Ignore(syscall.SIGHUP)
	defer signal.Reset(syscall.SIGHUP)
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("building brig-init needs the go command: %v", err)
	}
	init := filepath.Join(t.TempDir(), InitBinary)
	build := exec.Command(gobin, "build", "-o", init, "github.com/brig-sandbox/brig/cmd/brig-init")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build brig-init: %v\n%s", err, out)
	}
	f, err := elf.Open(init)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s asks for a dynamic loader: not the static init make builds", init)
		}
	}
	f.Close()
	l := newTestLauncher(t, 1, func(c *Config) {
		c.InitPath = init
		c.Warm = map[rootfs.Language]bool{rootfs.Python: true, rootfs.JavaScript: true}
	})
	waitWarm(t, l)
	status := map[rootfs.Language]string{
		rootfs.Python:     "print(''.join(l for l in open('/proc/self/status') if l.split(':')[0] in ('Uid', 'Gid', 'CapEff', 'CapBnd', 'NoNewPrivs', 'SigIgn', 'SigBlk')), end='')",
		rootfs.JavaScript: "process.stdout.write(require('fs').readFileSync('/proc/self/status', 'utf8').split('\\n').filter(l => ['Uid', 'Gid', 'CapEff', 'CapBnd', 'NoNewPrivs', 'SigIgn', 'SigBlk'].includes(l.split(':')[0])).map(l => l + '\\n').join(''))",
	}
	want := "Uid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nSigBlk:\t0000000000000000\nSigIgn:\t0000000001001000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nNoNewPrivs:\t1\n"
	for _, lang := range []rootfs.Language{rootfs.Python, rootfs.JavaScript} {
		for _, warm := range []bool{true, false} {
			opts := []func(*Spec){}
			wantStart := StartWarm
			if !warm {
				kv := map[rootfs.Language][2]string{rootfs.Python: {"PYTHONNOUSERSITE", "1"}, rootfs.JavaScript: {"NODE_NO_WARNINGS", "1"}}[lang]
				opts = append(opts, func(s *Spec) { s.Env = map[string]string{kv[0]: kv[1]} })
				wantStart = StartColdEnv
			}
			res := run(t, l, lang, status[lang], opts...)
			if !res.Succeeded() || res.Start != wantStart || res.Stdout != want {
				t.Errorf("%s warm=%v: got %s, start %s, stdout %q, stderr %q; want success from %s and\n%q", lang, warm, res.End, res.Start, res.Stdout, strings.TrimSpace(res.Stderr), wantStart, want)
			}
		}
	}
}
