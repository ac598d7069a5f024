package jail

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/jail/pid1"
	"github.com/brig-sandbox/brig/rootfs"
)

// requireCopies skips a test on a host whose tmpfs has no huge pages, where
// the Launcher makes no copies (and says why in its log).
func requireCopies(tb testing.TB) *copies {
	tb.Helper()
	testutil.RequireRoot(tb)
	c, err := processCopies()
	if err != nil {
		tb.Skipf("this host makes no interpreter copies: %v", err)
	}
	return c
}

// fileFacts is what a program can see of a file without its mount: its
// bytes' hash, size, mode and modification time. (Its owner, root's, is
// the overflow id in a run's user namespace.)
func fileFacts(tb testing.TB, path string) string {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		tb.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		tb.Fatal(err)
	}
	return fmt.Sprintf("%s %d %o %d", hex.EncodeToString(h.Sum(nil)), st.Size, st.Mode, st.Mtim.Nano())
}

// TestInterpreterCopies: each interpreter a run execs, cold and warm, is the
// copy on huge pages, bound read-only, nosuid and nodev over its file: the
// same bytes, size, mode and time as the host's file, not writable, and
// node's code mapped 2 MiB at a time.
func TestInterpreterCopies(t *testing.T) {
	requireCopies(t)
	l := newWarmLauncher(t, 1)
	for _, lang := range rootfs.Languages {
		root := rootOf(t, l, lang)
		host, target, err := resolveInRoot(root, root.Interpreter)
		if err != nil {
			t.Fatal(err)
		}
		want := fileFacts(t, host)
		probe := map[rootfs.Language]string{
			rootfs.Python: `import hashlib, os, sys
p = %q
st = os.stat(p)
print(hashlib.sha256(open(p, 'rb').read()).hexdigest(), st.st_size, format(st.st_mode, 'o'), st.st_mtime_ns)
print(os.path.realpath(sys.executable))
for line in open('/proc/self/mountinfo'):
    f = line.split()
    if f[4] == p:
        print(f[5].split(',')[:3], f[f.index('-') + 1], f[f.index('-') + 3].split(',')[-1])
try:
    open(p, 'r+b')
except OSError as e:
    print('write:', e.strerror)
`,
			rootfs.JavaScript: `const fs = require('fs'), crypto = require('crypto');
const p = %q, st = fs.statSync(p, {bigint: true});
console.log(crypto.createHash('sha256').update(fs.readFileSync(p)).digest('hex'), String(st.size), st.mode.toString(8), String(st.mtimeNs));
console.log(fs.realpathSync(process.execPath));
for (const line of fs.readFileSync('/proc/self/mountinfo', 'utf8').trim().split('\n')) {
  const f = line.split(' ');
  if (f[4] === p) console.log(JSON.stringify(f[5].split(',').slice(0, 3)), f[f.indexOf('-') + 1], f[f.indexOf('-') + 3].split(',').pop());
}
try { fs.openSync(p, 'r+'); } catch (e) { console.log('write:', e.code); }
let pmd = 0, cur = '';
for (const line of fs.readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
  const m = line.match(/^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s+(\S*)$/);
  if (m) cur = m[1];
  else if (cur === p && line.startsWith('ShmemPmdMapped:')) pmd += parseInt(line.split(/\s+/)[1]);
}
console.log('pmd', pmd > 0);
`,
		}[lang]
		code := fmt.Sprintf(probe, target)
		wantOut := map[rootfs.Language][]string{
			rootfs.Python:     {want, target, "['ro', 'nosuid', 'nodev'] overlay redirect_dir=on", "write: Read-only file system"},
			rootfs.JavaScript: {want, target, `["ro","nosuid","nodev"] overlay redirect_dir=on`, "write: EROFS", "pmd true"},
		}[lang]
		for _, warm := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/warm=%v", lang, warm), func(t *testing.T) {
				var opts []func(*Spec)
				if warm {
					waitWarm(t, l)
				} else {
					// Set at the interpreter's start: a cold sandbox.
					opts = append(opts, func(s *Spec) { s.Env = map[string]string{"LC_BRIG_TEST": "1"} })
				}
				res := run(t, l, lang, code, opts...)
				if wantStart := map[bool]string{false: StartColdEnv, true: StartWarm}[warm]; res.Start != wantStart {
					t.Fatalf("start path %s, want %s", res.Start, wantStart)
				}
				if got := strings.Split(strings.TrimSpace(res.Stdout), "\n"); !res.Succeeded() || strings.Join(got, "\n") != strings.Join(wantOut, "\n") {
					t.Fatalf("got %s %q %q, want:\n%s", res.End, res.Stdout, res.Stderr, strings.Join(wantOut, "\n"))
				}
			})
		}
	}
}

// TestCopiesFollowTheFile: a copy is the interpreter's file as it is now,
// found through the root's symbolic links; a changed file is copied again,
// the old copy staying for the inits that were given it until
// copyStaleAfter; a file too small to gain from huge pages is not copied,
// nor one whose copy failed until it changes.
func TestCopiesFollowTheFile(t *testing.T) {
	c := requireCopies(t)
	lower := t.TempDir()
	bin := filepath.Join(lower, "usr", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, size int) []byte {
		b := make([]byte, size)
		rand.Read(b)
		tmp := filepath.Join(bin, ".tmp")
		if err := os.WriteFile(tmp, b, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(bin, name)); err != nil { // as a package upgrade does
			t.Fatal(err)
		}
		return b
	}
	first := write("interp", copyMinSize+12345)
	if err := os.Symlink("/usr/bin/interp", filepath.Join(bin, "link")); err != nil { // absolute: the root's, not the host's
		t.Fatal(err)
	}
	write("small", copyMinSize-1)
	root := &rootfs.Root{Lower: lower, Interpreter: "/usr/bin/link"}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	content := func(name string) []byte {
		fd, err := unix.Openat(int(c.mnt.Fd()), c.path(name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		b, err := io.ReadAll(f)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if err := os.Chown(filepath.Join(bin, "interp"), 12345, 23456); err != nil {
		t.Fatal(err)
	}
	got := c.of(log, root, []string{"/usr/bin/link", "/usr/bin/small", "/usr/bin/interp"})
	if len(got) != 1 || got[0].Target != "/usr/bin/interp" || !bytes.Equal(content(got[0].Name), first) {
		t.Fatalf("got %+v, want one copy of /usr/bin/interp with its bytes", got)
	}
	var src, cp unix.Stat_t
	if err := errors.Join(unix.Stat(filepath.Join(bin, "interp"), &src), unix.Fstatat(int(c.mnt.Fd()), c.path(got[0].Name), &cp, 0)); err != nil {
		t.Fatal(err)
	}
	if cp.Mode != src.Mode || cp.Uid != src.Uid || cp.Gid != src.Gid || cp.Size != src.Size || cp.Mtim != src.Mtim {
		t.Errorf("the copy's mode, owner, size and time: %o %d:%d %d %v, the file's %o %d:%d %d %v",
			cp.Mode, cp.Uid, cp.Gid, cp.Size, cp.Mtim, src.Mode, src.Uid, src.Gid, src.Size, src.Mtim)
	}
	if again := c.of(log, root, []string{"/usr/bin/link"}); len(again) != 1 || again[0] != got[0] {
		t.Fatalf("an unchanged file was copied again: %+v, then %+v", got, again)
	}
	second := write("interp", copyMinSize+54321)
	now := c.of(log, root, []string{"/usr/bin/link"})
	if len(now) != 1 || now[0].Name == got[0].Name || !bytes.Equal(content(now[0].Name), second) {
		t.Fatalf("after the file changed: got %+v (was %+v), want a new copy of its new bytes", now, got)
	}
	if !bytes.Equal(content(got[0].Name), first) {
		t.Fatal("the replaced copy went before copyStaleAfter")
	}
	c.mu.Lock()
	for i := range c.stale {
		c.stale[i].since = c.stale[i].since.Add(-copyStaleAfter)
	}
	c.mu.Unlock()
	c.of(log, root, []string{"/usr/bin/link"})
	if err := unix.Faccessat(int(c.mnt.Fd()), c.path(got[0].Name), unix.F_OK, 0); err != unix.ENOENT {
		t.Fatalf("the replaced copy stayed after copyStaleAfter: %v", err)
	}
	// A file whose copy failed is not tried again until it changes.
	host := filepath.Join(bin, "interp")
	var st unix.Stat_t
	if err := unix.Stat(host, &st); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	delete(c.files, host)
	c.failed[host] = idOf(&st) // as a failed copy leaves it
	c.mu.Unlock()
	if got := c.of(log, root, []string{"/usr/bin/link"}); len(got) != 0 {
		t.Fatalf("a file whose copy failed was copied again unchanged: %+v", got)
	}
	third := write("interp", copyMinSize+1)
	retried := c.of(log, root, []string{"/usr/bin/link"})
	if len(retried) != 1 || !bytes.Equal(content(retried[0].Name), third) {
		t.Fatalf("a changed file whose copy had failed: got %+v, want a copy of its new bytes", retried)
	}
	for _, name := range []string{now[0].Name, retried[0].Name} {
		unix.Unlinkat(int(c.mnt.Fd()), c.path(name), 0)
	}
	c.mu.Lock()
	delete(c.files, host)
	c.mu.Unlock()
}

// TestResolveInRoot: an interpreter's path is resolved as the root shows it:
// its links relative and absolute within the root, a bound folder's from its
// host folder.
func TestResolveInRoot(t *testing.T) {
	lower, host := t.TempDir(), t.TempDir()
	for _, d := range []string{filepath.Join(lower, "usr", "bin"), filepath.Join(lower, "etc", "alt"), filepath.Join(host, "x")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(lower, "usr", "bin", "real"), filepath.Join(host, "x", "tool")} {
		if err := os.WriteFile(f, []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		filepath.Join(lower, "usr", "bin", "rel"):   "real",
		filepath.Join(lower, "usr", "bin", "abs"):   "/etc/alt/chain",
		filepath.Join(lower, "etc", "alt", "chain"): "../../usr/bin/real",
		filepath.Join(lower, "usr", "bin", "bound"): "/opt/x/tool",
		filepath.Join(lower, "usr", "bin", "loop"):  "loop",
	}
	for l, dest := range links {
		if err := os.Symlink(dest, l); err != nil {
			t.Fatal(err)
		}
	}
	root := &rootfs.Root{Lower: lower, Binds: []rootfs.Bind{{Source: host, Target: "/opt"}}}
	for p, want := range map[string][2]string{
		"/usr/bin/real":  {filepath.Join(lower, "usr/bin/real"), "/usr/bin/real"},
		"/usr/bin/rel":   {filepath.Join(lower, "usr/bin/real"), "/usr/bin/real"},
		"/usr/bin/abs":   {filepath.Join(lower, "usr/bin/real"), "/usr/bin/real"},
		"/usr/bin/bound": {filepath.Join(host, "x/tool"), "/opt/x/tool"},
	} {
		h, in, err := resolveInRoot(root, p)
		if err != nil || h != want[0] || in != want[1] {
			t.Errorf("%s: got %q %q %v, want %q %q", p, h, in, err, want[0], want[1])
		}
	}
	for _, p := range []string{"/usr/bin/loop", "/usr/bin/missing", "/usr/bin", "usr/bin/real"} {
		if h, in, err := resolveInRoot(root, p); err == nil {
			t.Errorf("%s: got %q %q, want an error", p, h, in)
		}
	}
}

// TestCheckInterpreterCopies: brig check's line warns exactly where the
// Launcher would make no copies for want of huge pages.
func TestCheckInterpreterCopies(t *testing.T) {
	c := CheckInterpreterCopies()
	denied := copiesDenied()
	if !c.OK || c.Warn != (denied != nil) || (denied != nil) != (c.Hint != "") {
		t.Errorf("got %+v with the host's tmpfs denied huge pages: %v", c, denied)
	}
}

// BenchmarkCopiesFor: what a sandbox's preparation spends finding its
// root's copies: looked at again (resolving each interpreter's links and
// checking its file, once a copiesRecheck), and found as they were.
func BenchmarkCopiesFor(b *testing.B) {
	requireCopies(b)
	l := newTestLauncher(b, 0)
	root := rootOf(b, l, rootfs.Python)
	if len(l.copiesFor(root)) == 0 {
		b.Fatal("no copies to find")
	}
	for _, again := range []bool{true, false} {
		b.Run(map[bool]string{true: "recheck", false: "found"}[again], func(b *testing.B) {
			for range b.N {
				if again {
					l.copiesMu.Lock()
					clear(l.copiesFound)
					l.copiesMu.Unlock()
				}
				l.copiesFor(root)
			}
		})
	}
}

// testInterpProvider gives Python a root of the host's whose interpreter is
// the test's own: a shell script, padded past copyMinSize, in a folder bound
// at /brigtest.
type testInterpProvider struct {
	rootfs.Provider
	dir string
}

func (p testInterpProvider) Root(lang rootfs.Language) (*rootfs.Root, error) {
	r, err := p.Provider.Root(lang)
	if err != nil || lang != rootfs.Python {
		return r, err
	}
	own := *r
	own.Binds = append(slices.Clone(r.Binds), rootfs.Bind{Source: p.dir, Target: "/brigtest"})
	own.Interpreter = "/brigtest/interp"
	return &own, nil
}

// TestPooledSandboxFollowsTheInterpreter: a sandbox prepared in the pool
// before its interpreter changed (a package upgrade renames a new file over
// it) is not given to a run: the run gets the new interpreter, not the
// pooled sandbox's copy of the old one.
func TestPooledSandboxFollowsTheInterpreter(t *testing.T) {
	c := requireCopies(t)
	state, dir := t.TempDir(), t.TempDir()
	host, err := rootfs.NewHost(state, rootfs.HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	hostRoot, err := host.Root(rootfs.Python)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(hostRoot.Lower, "brigtest"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(version string) {
		script := "#!/bin/sh\necho " + version + "\nexit 0\n#" + strings.Repeat("x", copyMinSize) + "\n"
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "interp")); err != nil {
			t.Fatal(err)
		}
	}
	write("first")
	p := testInterpProvider{host, dir}
	l := newTestLauncherWith(t, state, p, 1, func(cfg *Config) { cfg.Warm = nil })
	root := rootOf(t, l, rootfs.Python)
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if cp := c.files[filepath.Join(dir, "interp")]; cp != nil {
			unix.Unlinkat(int(c.mnt.Fd()), c.path(cp.name), 0)
			delete(c.files, filepath.Join(dir, "interp"))
		}
		for _, s := range c.stale {
			unix.Unlinkat(int(c.mnt.Fd()), c.path(s.name), 0)
		}
		c.stale = nil
	})
	runOnce := func() string {
		t.Helper()
		res, err := l.Run(context.Background(), Spec{Language: rootfs.Python, Code: "print(1)", Timeout: 10 * time.Second, MemoryBytes: api.DefaultMemoryMiB << 20})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode == nil || *res.ExitCode != 0 {
			t.Fatalf("the test's interpreter did not run: %+v", res)
		}
		return strings.TrimSpace(res.Stdout)
	}
	pooled := func() {
		t.Helper()
		pool := l.pools[poolKey(root, "")]
		for deadline := time.Now().Add(20 * time.Second); len(pool) == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the pool held no prepared sandbox after 20 s")
			}
		}
	}
	pooled()
	if got := runOnce(); got != "first" {
		t.Fatalf("the run's interpreter said %q, want first", got)
	}
	pooled() // prepared with the first one's copy
	before := l.CopiesStats()
	write("second")
	time.Sleep(copiesRecheck + 100*time.Millisecond)
	if got := runOnce(); got != "second" {
		t.Fatalf("after the interpreter changed, a run's said %q, want second: a pooled sandbox ran the old one's copy", got)
	}
	// The new copy, and the old one kept for the sandboxes given it.
	st, err := os.Stat(filepath.Join(dir, "interp"))
	if err != nil {
		t.Fatal(err)
	}
	if after := l.CopiesStats(); after.Copies != before.Copies+1 || after.Bytes != before.Bytes+st.Size() {
		t.Errorf("CopiesStats %+v after the change, %+v before: want one more copy of %d bytes", after, before, st.Size())
	}
	pooled()
	if got := runOnce(); got != "second" {
		t.Fatalf("the sandbox prepared after the change ran %q, want second", got)
	}
}

// TestZygoteFollowsTheInterpreter: a zygote started from an interpreter that
// has changed since (its copies are no longer its root's) is replaced, as a
// worn one is: its children would run the old interpreter.
func TestZygoteFollowsTheInterpreter(t *testing.T) {
	requireCopies(t)
	l := newWarmLauncher(t, 1)
	root := rootOf(t, l, rootfs.Python)
	zygote := func() *zygote {
		t.Helper()
		z, err := l.zygoteFor(root)
		if err != nil {
			t.Fatal(err)
		}
		l.zygoteDone(z)
		return z
	}
	first := zygote()
	if len(first.copies) == 0 {
		t.Fatal("the zygote's sandbox has no interpreter copy")
	}
	if again := zygote(); again != first {
		t.Fatal("a zygote whose interpreter had not changed was replaced")
	}
	// As if python3 had been replaced since the zygote started: the root's
	// copies are no longer the ones it was started with.
	l.zmu.Lock()
	first.copies = []pid1.Copy{{Name: "python3.11-0", Target: "/usr/bin/python3.11"}}
	l.zmu.Unlock()
	next := zygote()
	if next == first {
		t.Fatal("a zygote started before its interpreter changed was kept")
	}
	l.zmu.Lock()
	retiring := first.retiring
	l.zmu.Unlock()
	if !retiring {
		t.Error("the replaced zygote is not retiring")
	}
	if !slices.Equal(next.copies, l.copiesFor(root)) {
		t.Errorf("the new zygote's copies %+v, the root's %+v", next.copies, l.copiesFor(root))
	}
	if res := run(t, l, rootfs.Python, "print(1)"); res.Stdout != "1\n" {
		t.Fatalf("a run after the replacement: %+v", res)
	}
}
